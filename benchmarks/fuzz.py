"""The long fuzz run: the properties of ``tests/test_fuzz.py`` for minutes instead of seconds.

Same strategies and checks (``tests/fuzz_strategies.py``), new random examples in
every round (a round: a batch of each property, seeded from ``--seed`` and the
round number, so a run is reproducible), until ``--minutes`` or ``--examples``
runs out. Compiled cases go through a build cache in a temporary directory (not
``~/.cache/dcmlir``). Prints a table of cases per property and every failure
with its reproducer (hypothesis' falsifying example and ``@reproduce_failure``
blob); ``--json`` writes the same as JSON. Exit status 1 if a property failed.

    .venv/bin/python benchmarks/fuzz.py --minutes 15
    .venv/bin/python benchmarks/fuzz.py --examples 2000 --minutes 30 --json docs/results/fuzz.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the strategies live beside the tests that use them

import fuzz_strategies as fs  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dcmlir.build.compiler import BuildCache  # noqa: E402
from dcmlir.ir.iree import versions  # noqa: E402


@dataclass
class Property:
    """One property, how many examples a round gives it, and what it has done."""

    name: str
    batch: int
    make: Callable[[int], Callable[[], None]]  # round seed -> a hypothesis test
    seconds: float = 0.0
    rounds: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)


def _settings(batch: int) -> settings:
    return settings(
        max_examples=batch,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def properties(cache: BuildCache, compiled_batch: int) -> list[Property]:
    def workload(round_seed: int) -> Callable[[], None]:
        @seed(round_seed)
        @_settings(100)
        @given(fs.contractions(consumers=True), st.integers(0, 2**16))
        def run(case: fs.Contraction, data_seed: int) -> None:
            fs.check_workload(case, data_seed)

        return run

    def tile(round_seed: int) -> Callable[[], None]:
        @seed(round_seed)
        @_settings(100)
        @given(fs.contractions(copies=True), fs.tile_sizes)
        def run(case: fs.Contraction, sizes: tuple[int, ...]) -> None:
            fs.check_microkernel_tile(case, sizes)

        return run

    def emit(round_seed: int) -> Callable[[], None]:
        @seed(round_seed)
        @_settings(50)
        @given(fs.contractions(range_max=1 << 20, consumers=True), fs.plan_specs())
        def run(case: fs.Contraction, spec: fs.PlanSpec) -> None:
            fs.check_emit_dispatch(case, spec, probe_limit=300)

        return run

    def compiled(round_seed: int) -> Callable[[], None]:
        @seed(round_seed)
        @_settings(compiled_batch)
        @given(fs.compiled_contractions(range_max=64), fs.compiled_plans(max_kernels=5))
        def run(case: fs.Contraction, spec: fs.PlanSpec) -> None:
            fs.check_compiled(case, spec, cache, extra_shapes=6)

        return run

    def kernel_module(round_seed: int) -> Callable[[], None]:
        @seed(round_seed)
        @_settings(compiled_batch // 2 or 1)
        @given(fs.compiled_contractions(range_max=64), fs.compiled_plans(max_kernels=5))
        def run(case: fs.Contraction, spec: fs.PlanSpec) -> None:
            fs.check_kernel_module(case, spec, cache, shapes=4)

        return run

    return [
        Property("workload", 100, workload),
        Property("microkernel_tile", 100, tile),
        Property("emit_dispatch", 50, emit),
        Property("compiled", compiled_batch, compiled),
        Property("kernel_module", compiled_batch // 2 or 1, kernel_module),
    ]


def _failure(error: BaseException, round_seed: int) -> dict[str, Any]:
    """What a failure needs to be reproduced: hypothesis' notes carry the example."""
    notes = "\n".join(getattr(error, "__notes__", []))
    return {
        "round_seed": round_seed,
        "error": f"{type(error).__name__}: {error}"[:4000],
        "reproducer": notes,
        "traceback": "".join(traceback.format_exception(error))[-4000:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="time budget (default 15)")
    parser.add_argument(
        "--examples", type=int, default=0, help="stop after this many cases in all (0: no cap)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first round")
    parser.add_argument(
        "--only", default="", help="comma-separated properties to run (default: all)"
    )
    parser.add_argument(
        "--compiled-batch", type=int, default=10, help="compiled cases per round (default 10)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    start = time.monotonic()
    deadline = start + args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="dcmlir-fuzz-") as directory:
        cache = BuildCache(Path(directory))
        chosen = properties(cache, args.compiled_batch)
        if args.only:
            wanted = set(args.only.split(","))
            unknown = wanted - {p.name for p in chosen}
            if unknown:
                parser.error(f"--only: unknown properties {', '.join(sorted(unknown))}")
            chosen = [p for p in chosen if p.name in wanted]
        round_number = 0
        while time.monotonic() < deadline:
            if args.examples and sum(fs.COUNTS[p.name] for p in chosen) >= args.examples:
                break
            round_seed = args.seed + round_number
            for prop in chosen:
                if time.monotonic() >= deadline or prop.failures:
                    continue  # a failed property has its reproducer; the others go on
                began = time.monotonic()
                try:
                    prop.make(round_seed)()
                except Exception as error:  # a property failed: keep its reproducer
                    prop.failures.append(_failure(error, round_seed))
                    print(f"\nFAILED {prop.name} (round seed {round_seed}):", flush=True)
                    print(prop.failures[-1]["error"], prop.failures[-1]["reproducer"], sep="\n")
                prop.seconds += time.monotonic() - began
                prop.rounds += 1
            round_number += 1
            elapsed = time.monotonic() - start
            counts = ", ".join(f"{p.name} {fs.COUNTS[p.name]}" for p in chosen)
            print(f"[{elapsed / 60:5.1f} min] round {round_number}: {counts}", flush=True)
            if all(p.failures for p in chosen):
                break
        cache_entries = len(cache.entries())

    elapsed = time.monotonic() - start
    rows = []
    for prop in chosen:
        sub = {name: n for name, n in fs.COUNTS.items() if name.startswith(f"{prop.name}.")}
        rows.append(
            {
                "property": prop.name,
                "cases": fs.COUNTS[prop.name],
                "sub_cases": sub,
                "rounds": prop.rounds,
                "seconds": round(prop.seconds, 1),
                "failures": prop.failures,
            }
        )
    print(f"\nfuzz: {elapsed / 60:.1f} min, seeds {args.seed}..{args.seed + round_number - 1}")
    print(f"{'property':<18} {'cases':>7} {'rounds':>6} {'seconds':>8}  failures  sub-cases")
    for row in rows:
        sub = ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in row["sub_cases"].items())
        print(
            f"{row['property']:<18} {row['cases']:>7} {row['rounds']:>6} {row['seconds']:>8.0f}"
            f"  {len(row['failures']):>8}  {sub}"
        )
    print(f"compiled modules built: {cache_entries} (each also read back from the cache once)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        summary = {
            "command": " ".join(["python", "benchmarks/fuzz.py", *(argv or sys.argv[1:])]),
            "minutes": round(elapsed / 60, 2),
            "seeds": [args.seed, args.seed + round_number - 1],
            **versions(),
            "properties": rows,
        }
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 1 if any(row["failures"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
