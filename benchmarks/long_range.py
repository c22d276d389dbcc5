"""Benchmark: a projection tuned over a longer range than the suite's, T in 1..512.

Every other benchmark runs T in 1..128. A user's model may run longer sequences, so this
one tunes ``?x768 @ 768x768`` (its weight a module constant, as in a model) over
``--range`` (default 1:512) with ``dcmlir.tune`` at ``--budget`` (fresh records per
budget in ``results/long_range/b<B>/``; a rerun resumes from them), then times it with
``dcmlir bench`` against IREE's default, IREE data tiling, onnxruntime, numpy and torch
at 27 T from 1 to the range's top (one thread, side by side in one process, interleaved
per T, every output checked). Outputs: ``docs/results/long_range/b<B>/`` (table, every
number, plot); the table is printed too.

    .venv/bin/python benchmarks/long_range.py --budget 60
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bert_workloads import dense_module
from constant_weight_bench import BASELINES, say, weight_as_constant

import dcmlir
from dcmlir.bench import BenchSettings, bench, write_outputs

ROOT = Path(__file__).resolve().parent.parent
NAME = "projection_768"
SHAPES = (1, 2, 3, 5, 8, 13, 17, 31, 33, 64, 77, 127, 128, 129, 191, 200, 255, 256, 257)
SHAPES += (300, 383, 384, 400, 449, 500, 511, 512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--range", default="1:512", help="LO:HI of T (default 1:512)")
    args = parser.parse_args()
    low, high = (int(v) for v in args.range.split(":"))
    records = ROOT / "results" / "long_range" / f"b{args.budget}"
    out = ROOT / "docs" / "results" / "long_range" / f"b{args.budget}"
    records.mkdir(parents=True, exist_ok=True)
    source = records / f"{NAME}.mlir"
    source.write_text(dense_module(768, 768))
    tuned = records / f"{NAME}-constant.mlir"
    tuned.write_text(weight_as_constant(source, args.range))
    plan = records / f"{NAME}.plan.json"
    say(f"{NAME}: tuning {tuned.name} over T in {args.range}, budget {args.budget}")
    dcmlir.tune(
        tuned, dims=[args.range], budget=args.budget, db=records / "tune.jsonl", output=plan
    )
    shapes = [(t,) for t in SHAPES if low <= t <= high]
    say(f"{NAME}: timing {', '.join(BASELINES)} at {len(shapes)} T")
    result = bench(
        source,
        plan=plan,
        dims=[args.range],
        shapes=shapes,
        settings=BenchSettings(baselines=BASELINES, weights="constant"),
        db=records / "oracle.jsonl",
        name=NAME,
    )
    result.info["budget"] = args.budget
    write_outputs(result, out)
    print((out / f"{NAME}.md").read_text())


if __name__ == "__main__":
    main()
