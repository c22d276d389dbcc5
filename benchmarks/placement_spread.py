"""Benchmark: IREE's own builds under each placement of their code (docs/design.md section 8,
"The placement").

The same module, compiled by IREE with the same flags under names of different lengths
(:mod:`dcmlir.build.code_layout`: 0, 8, 16, ... characters added until four offsets of
``.text`` within 64 bytes are found) and from stdin as ``dcmlir bench`` and
``never_slower.py`` build IREE's baselines, timed side by side in one process, call by
call and interleaved (:func:`dcmlir.driver.module_timing.timed_side_by_side`, 40 rounds). Nothing of
dcmlir runs in these modules: the spread is what the name a user compiles under does to
IREE's default and data-tiling builds, the line item 1 of issue 14 is drawn against.

Reproduce: ``python benchmarks/placement_spread.py --workloads
unseen_context_h80,novel_context_h48,attention_scores,dense_ffn1 --shapes 9,13,17,31,65,127``
(writes ``docs/results/placement_spread.json`` and prints the table).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from never_slower import all_workloads

from dcmlir.build.code_layout import TRIED, text_offset
from dcmlir.build.compiler import build
from dcmlir.codegen.packed import DATA_TILING_FLAGS
from dcmlir.driver.module_timing import random_inputs, timed_side_by_side
from dcmlir.driver.placing import PlacementSettings
from dcmlir.ir.iree import load_function

ROOT = Path(__file__).resolve().parent.parent
BUILDS = {"iree-default": (), "iree-data-tiling": DATA_TILING_FLAGS}


def placements(text: str, flags: tuple[str, ...]) -> dict[str, bytes]:
    """'stdin' and 'p<N>' (the first placement of each ``.text`` offset modulo 64)."""
    found = {"stdin": build(text, "llvm-cpu", flags).vmfb}
    offsets = {}
    for placement in TRIED:
        vmfb = build(text, "llvm-cpu", flags, placement=placement).vmfb
        offset = text_offset(vmfb)
        assert offset is not None
        if offset % 64 not in offsets.values():
            offsets[placement] = offset % 64
            found[f"p{placement} (+{offset % 64})"] = vmfb
        if len(offsets) == 4:
            break
    stdin = text_offset(found["stdin"])
    found[f"stdin (+{stdin % 64 if stdin is not None else '?'})"] = found.pop("stdin")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="unseen_context_h80,novel_context_h48")
    parser.add_argument("--shapes", default="9,13,17,31,65,127")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "placement_spread.json"))
    args = parser.parse_args()
    texts = all_workloads()
    points = [int(t) for t in args.shapes.split(",")]
    settings = PlacementSettings(rounds=args.rounds)
    results: dict[str, dict[str, dict[str, dict[int, float]]]] = {}
    print("| workload | build | T | placements' time over the fastest | spread |")
    print("|---|---|---:|---|---:|")
    for name in args.workloads.split(","):
        for label, flags in BUILDS.items():
            builds = placements(texts[name], tuple(flags))
            functions = {key: load_function(vmfb, "main") for key, vmfb in builds.items()}
            inputs = random_inputs(next(iter(functions.values())), points)
            times = timed_side_by_side(functions, inputs, settings.rounds, settings.batch_seconds)
            results.setdefault(name, {})[label] = {k: dict(v) for k, v in times.items()}
            for t in points:
                row = {k: times[k][t] for k in times}
                fastest = min(row.values())
                cells = ", ".join(f"{k} {v / fastest:.3f}" for k, v in row.items())
                spread = max(row.values()) / fastest
                print(f"| `{name}` | {label} | {t} | {cells} | {spread:.3f} |", flush=True)
    spreads = [
        max(v[t] for v in build.values()) / min(v[t] for v in build.values())
        for workload in results.values()
        for build in workload.values()
        for t in points
    ]
    print(
        f"\nspread (slowest placement / fastest) over {len(spreads)} (workload, build, T): "
        f"median {statistics.median(spreads):.3f}, max {max(spreads):.3f}"
    )
    Path(args.out).write_text(
        json.dumps({"shapes": points, "rounds": args.rounds, "seconds": results}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
