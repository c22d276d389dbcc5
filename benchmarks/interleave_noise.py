"""How far apart three identical builds time, sampled coarsely or finely interleaved.

Three copies of IREE's data-tiling build of one projection (``?xK @ KxN``, the weight
a module constant; ``--sizes``: BERT-base's ``dense_out``, 768x768, 2.4 MB, and
``never_slower.py``'s ``heldout_large_ffn1``, 1024x4096, 16 MB) are the same code, so
every ratio between them is measurement noise. They are timed side by side in one
process (``run_model``: rounds, the order rotated each round, a ratio per round, the
median of those), sampled in several ways. ``0.05x5`` is ``dcmlir bench``'s sampling
(0.25 s per copy and T), ``0.05x15`` ``never_slower.py``'s re-measurement (0.75 s);
``0.01x25`` and ``0.005x150`` spend the same time in shorter samples; ``callx600`` is
600 rounds of one call each (one input set), the copies alternating call by call;
``warmx300`` is 300 rounds of one untimed call and one timed call of the same copy, so
every timed call starts on the caches its own copy left. The question: does alternating
faster than the VM's speed drifts make identical builds time closer? ``--with-default``
puts IREE's default build (plain weight) in copy 2's place: then only copy 3 is a copy
of copy 1, and the question is whether a build of another kind in the rotation biases
the ratio of the two identical ones. Per sampling and repeat, the table
(docs/benchmarks.md, "Noise between identical builds") gives the largest and the
median |ratio - 1| over the T, and copy 1's time (short samples start on caches the
other copies left: a bias, not only noise).

    .venv/bin/python benchmarks/interleave_noise.py
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from bert_workloads import dense_module
from constant_weight_bench import say, weight_as_constant

import dcmlir
from dcmlir.bench.model_compare import DATA_TILING, DEFAULT, TUNED, ModelRun, run_model
from dcmlir.bench.peers import DATA_TILING_FLAGS
from dcmlir.build.compiler import build
from dcmlir.measure.timing import MeasureSettings
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "interleave_noise.json"


CALL = 1e-6
"""A sample's minimum time that makes it one call."""


def sampling(text: str) -> tuple[float, int, int]:
    """``"0.05x15"``: (0.05 seconds per sample, 15 rounds, no warm call); ``"callx600"``: 600
    rounds of one call per sample (one input set), the copies alternating call by call;
    ``"warmx300"``: the same, each timed call after an untimed one of the same copy."""
    seconds, rounds = text.split("x")
    if seconds in ("call", "warm"):
        return CALL, int(rounds), int(seconds == "warm")
    return float(seconds), int(rounds), 0


def settings_for(min_time: float, rounds: int, warm_calls: int = 0) -> MeasureSettings:
    sets = 1 if min_time == CALL else 4
    return MeasureSettings(
        min_time=min_time,
        rounds=rounds,
        input_sets=sets,
        warmup=0.2,
        rtol=1e-4,
        warm_calls=warm_calls,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="768x768,1024x4096", help="KxN of each projection")
    parser.add_argument("--seq", default="9,16,19,64,101,128", help="T values")
    parser.add_argument(
        "--ways",
        default="0.05x5,0.01x25,0.05x15,0.005x150,callx600,warmx300",
        help="samplings to compare: seconds per sample x rounds, comma-separated",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--dispatched",
        default="",
        help="PREFIX of never_slower.py's records (e.g. results/never_slower/b240/dense_out): "
        "copy 1 is then dcmlir's module of PREFIX-constant.mlir with PREFIX.plan.json (give "
        "--seq where the plan runs `datatiled`, data tiling's own code), copies 2 and 3 "
        "IREE's data tiling of it",
    )
    parser.add_argument(
        "--with-default",
        action="store_true",
        help="copy 2 is IREE's default build, not a data-tiling copy (only copy 3 is noise)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    seq = [int(t) for t in args.seq.split(",")]
    ways = {way: sampling(way) for way in args.ways.split(",")}

    results: list[dict[str, object]] = []
    report: list[str] = []
    if args.dispatched:
        prefix = Path(args.dispatched)
        source = prefix.with_name(f"{prefix.name}-constant.mlir")
        if not source.exists():
            parser.error(f"--dispatched: no {source} (a projection's records of never_slower.py)")
        text = source.read_text()
        dispatched = dcmlir.compile(source, plan=prefix.with_suffix(".plan.json")).vmfb
        data_tiled = build(text, CpuTarget(), DATA_TILING_FLAGS, source_name=str(source)).vmfb
        found = time_builds(text, (dispatched, data_tiled), ways, seq, args.repeats)
        print("\n".join(table(found, ways, seq)))
        out = args.out if args.out != OUT else OUT.with_name(f"{OUT.stem}_{prefix.name}.json")
        out.write_text(json.dumps({"ways": ways, "seq": seq, "results": found}, indent=1))
        say(f"wrote {out}")
        return 0
    for size in args.sizes.split(","):
        k, n = (int(e) for e in size.split("x"))
        found = time_copies(
            dense_module(k, n), f"{k}x{n}", ways, seq, args.repeats, args.with_default
        )
        results += [{"size": size, **result} for result in found]
        title, *rows = table(
            found, ways, seq, ("copy3",) if args.with_default else ("copy2", "copy3")
        )
        report += [f"`?x{k} @ {k}x{n}`, {4 * k * n / 1e6:.1f} MB weight: {title}", *rows, ""]
    print("\n".join(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"ways": ways, "seq": seq, "results": results}, indent=1))
    say(f"wrote {args.out}")
    return 0


def time_copies(
    source: str,
    name: str,
    ways: dict[str, tuple[float, int, int]],
    seq: list[int],
    repeats: int,
    with_default: bool = False,
) -> list[dict[str, object]]:
    """The copies' ratios per T, for every way in turn, ``repeats`` times."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"{name}.mlir"
        path.write_text(source)
        text = weight_as_constant(path)
    say(f"building IREE's data tiling of {name} (run_model builds the last copy)")
    first = build(text, CpuTarget(), DATA_TILING_FLAGS, use_cache=False, source_name=f"{name}-0")
    flags = () if with_default else DATA_TILING_FLAGS
    second = build(text, CpuTarget(), flags, use_cache=False, source_name=f"{name}-1")
    return time_builds(text, (first.vmfb, second.vmfb), ways, seq, repeats)


def time_builds(
    text: str,
    copies: tuple[bytes, bytes],
    ways: dict[str, tuple[float, int, int]],
    seq: list[int],
    repeats: int,
) -> list[dict[str, object]]:
    """Copy 1, copy 2 and run_model's own data-tiling build of ``text`` (copy 3), side by
    side, for every way in turn, ``repeats`` times."""
    results: list[dict[str, object]] = []
    for repeat in range(repeats):
        for way, (min_time, rounds, warm_calls) in ways.items():
            say(f"repeat {repeat + 1}: {way} at T={seq}")
            run = run_model(
                text,
                copies[0],
                copies[1],
                seq,
                reference="default",
                peers=(DATA_TILING,),
                settings=settings_for(min_time, rounds, warm_calls),
                target=CpuTarget(),
            )
            results.append(
                {"way": way, "repeat": repeat, "rows": rows_of(run), "copy1": copy1_times(run)}
            )
    return results


def rows_of(run: ModelRun) -> dict[str, dict[str, float]]:
    """Per T: copy 2's and copy 3's median per-round ratio to copy 1 (``run_model``'s
    columns: copy 1 is ``dcmlir``, copy 2 ``IREE default``, copy 3 ``IREE data tiling``)."""
    if run.failures or run.peer_failures:
        raise SystemExit(f"a copy failed: {[*run.failures, *run.peer_failures][0]}")
    return {
        str(row.seq_len): {
            "copy2": row.comparison.ratio(DEFAULT, TUNED),
            "copy3": row.comparison.ratio(DATA_TILING, TUNED),
        }
        for row in run.rows
    }


def copy1_times(run: ModelRun) -> dict[str, float]:
    """Per T: copy 1's median seconds per call."""
    return {str(row.seq_len): row.median(TUNED) for row in run.rows}


def table(
    results: list[dict[str, object]],
    ways: dict[str, tuple[float, int, int]],
    seq: list[int],
    copies: tuple[str, ...] = ("copy2", "copy3"),
) -> list[str]:
    """One row per sampling: how far from 1 the ratios of ``copies`` (the builds identical
    to copy 1) landed, per repeat."""
    repeats = 1 + max(int(result["repeat"]) for result in results)  # type: ignore[call-overload]
    over = " and ".join(c.replace("copy", "copy ") for c in copies)
    lines = [
        f"{len(seq)} T ({', '.join(map(str, seq))}), {len(copies)} ratio(s) each ({over} over "
        "copy 1), per repeat: the largest |ratio - 1| and the median one",
        "",
        "| sampling (s x rounds) | s per copy and T | "
        + " | ".join(f"repeat {r + 1}: largest, median" for r in range(repeats))
        + " | copy 1's time, geomean over T and repeats (us) |",
        "|---|---:|" + "---:|" * repeats + "---:|",
    ]
    for way, (min_time, rounds, warm_calls) in ways.items():
        cells = []
        times = []
        for result in results:
            if result["way"] != way:
                continue
            off = sorted(
                abs(ratio - 1)
                for row in result["rows"].values()  # type: ignore[attr-defined]
                for copy, ratio in row.items()
                if copy in copies
            )
            cells.append(f"{off[-1]:.3f}, {off[len(off) // 2]:.3f}")
            times += list(result["copy1"].values())  # type: ignore[attr-defined]
        mean = math.exp(sum(math.log(t) for t in times) / len(times)) * 1e6
        spent = f"{rounds} calls" if min_time == CALL else f"{min_time * rounds:g}"
        if warm_calls:
            spent += f" (+{warm_calls * rounds} untimed)"
        lines.append(f"| {way} | {spent} | " + " | ".join(cells) + f" | {mean:.0f} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
