"""Benchmark: the whole micro-kernel space on the BERT-base dense layer, both routes.

Measures every candidate of this machine's llvm-cpu space on
``x[M, 768] @ w[768, 768]`` (f32, M dynamic) at M in {1, 17, 128, 513}, IREE's
default lowering in the same process and interleaved (docs/design.md, section 4),
through each lowering route, and writes ``docs/benchmarks.md`` plus the raw
records. Not part of the test suite: it takes minutes.

    .venv/bin/python benchmarks/space_benchmark.py [--routes config,td] [--shapes 1,17,128,513]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

from dcmlir.build.batch import Builder
from dcmlir.build.routes import route_named
from dcmlir.ir.iree import versions
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.loop import Measurer, MeasureReport
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase
from dcmlir.space import DefaultCandidate, space_for
from dcmlir.target import CpuTarget
from dcmlir.workload import Workload, workloads

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python benchmarks/space_benchmark.py"


def dense_workload() -> Workload:
    text = (resources.files("dcmlir") / "examples" / "bert_dense.mlir").read_text()
    with ir.Context():
        ((_, found),) = list(workloads(parse_module(text).operation, "bert_dense.mlir"))
    assert isinstance(found, Workload)
    return found


def compile_rate(workload: Workload, target: CpuTarget, route: str) -> tuple[int, float]:
    """(variants, seconds) to build the whole space from a cold cache, in 48-variant modules."""
    candidates = space_for(target)
    with tempfile.TemporaryDirectory() as cache:
        previous = os.environ.get("DCMLIR_CACHE_DIR")
        os.environ["DCMLIR_CACHE_DIR"] = cache
        try:
            with Builder(target, route_named(route)) as builder:
                start = time.perf_counter()
                built = builder.build(workload, candidates)
                seconds = time.perf_counter() - start
        finally:
            if previous is None:
                del os.environ["DCMLIR_CACHE_DIR"]
            else:
                os.environ["DCMLIR_CACHE_DIR"] = previous
    failed = sum(not b.ok for b in built)
    if failed:
        print(f"{route}: {failed} variants failed to build", file=sys.stderr)
    return len(candidates), seconds


def summarize(report: MeasureReport) -> dict[str, object]:
    default = DefaultCandidate().key()
    rows = []
    for shape in report.shapes:
        base = report.median(default, shape)
        ranked = sorted(
            ((c.key(), report.median(c.key(), shape)) for c in report.candidates),
            key=lambda item: item[1],
        )
        best_key, best = ranked[0]
        rows.append(
            {
                "m": shape[0],
                "default_us": base * 1e6,
                "best": best_key,
                "best_us": best * 1e6,
                "speedup": base / best if math.isfinite(best) else 0.0,
                "top3": [(k, t * 1e6) for k, t in ranked[:3]],
                "drift": report.drift.get(shape),
            }
        )
    failures = sorted({k for (k, _), r in report.records.items() if r.failed})
    return {"rows": rows, "failed": failures, "candidates": len(report.candidates)}


def markdown(
    results: dict[str, dict[str, object]], target: CpuTarget, args: argparse.Namespace
) -> str:
    lines = [
        "# Benchmarks",
        "",
        "## Micro-kernel space on the BERT-base dense layer (issue 3)",
        "",
        "Every candidate of the llvm-cpu space on `x[M, 768] @ w[768, 768]` (f32, M dynamic,"
        " the shipped `dcmlir/examples/bert_dense.mlir`), against IREE's default lowering,"
        " measured in one process with the variants interleaved in rounds (docs/design.md,"
        " section 4: random input sets rotated, warm-up at the largest M first, median of"
        f" {args.rounds} rounds of >= {args.min_time:g} s samples, `local-sync`, one thread)."
        " Every output was checked against numpy first.",
        "",
        f"Machine: {target.describe()}; IREE {versions()['iree']};"
        f" Python {platform.python_version()}.",
        "",
        "Reproduce (a few minutes per route; results resume from the records file):",
        "",
        "```",
        f"{COMMAND} --routes {args.routes} --shapes {args.shapes}",
        "```",
        "",
    ]
    for route, result in results.items():
        rows = result["rows"]  # type: ignore[index]
        lines += [
            f"### Route `{route}` ({result['candidates']} candidates,"  # type: ignore[index]
            f" {result['compile_variants']} built in {result['compile_seconds']:.1f} s from a cold"
            f" cache: {result['compile_seconds'] / result['compile_variants']:.2f} s per variant)",
            "",
            "| M | IREE default (us) | best candidate | best (us) | speedup | 2nd, 3rd |",
            "|---:|---:|---|---:|---:|---|",
        ]
        for row in rows:  # type: ignore[union-attr]
            others = ", ".join(f"`{k}` {t:.1f}" for k, t in row["top3"][1:])
            lines.append(
                f"| {row['m']} | {row['default_us']:.1f} | `{row['best']}` | {row['best_us']:.1f}"
                f" | **{row['speedup']:.2f}x** | {others} |"
            )
        failed = result["failed"]  # type: ignore[index]
        lines += [
            "",
            f"Failed candidates: {len(failed)}" + (f" ({', '.join(failed)})" if failed else ""),
            "",
        ]
    if len(results) > 1:
        lines += [
            "### Routes compared",
            "",
            "| route | geomean speedup of the best candidate over IREE default |",
            "|---|---:|",
        ]
        for route, result in results.items():
            speedups = [row["speedup"] for row in result["rows"]]  # type: ignore[index]
            gm = (
                math.exp(sum(math.log(s) for s in speedups) / len(speedups))
                if all(speedups)
                else 0.0
            )
            lines.append(f"| `{route}` | {gm:.2f}x |")
        best_route = max(
            results,
            key=lambda r: sum(math.log(row["speedup"]) for row in results[r]["rows"]),  # type: ignore[index]
        )
        lines += [
            "",
            f"The faster route, `{best_route}`, is the default of `dcmlir measure`, `dcmlir tune`"
            " and the builder; `--route` selects the other. Each route's ratios were measured"
            " side by side with IREE's default in one process; the two routes in separate runs.",
        ]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="config,td")
    parser.add_argument("--shapes", default="1,17,128,513")
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", default=str(ROOT / "docs" / "results" / "space_records.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    target = CpuTarget()
    workload = dense_workload()
    shapes = [(int(s),) for s in args.shapes.split(",")]
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    db = RecordDatabase(args.db)
    settings = RunnerSettings(
        MeasureSettings(min_time=args.min_time, rounds=args.rounds, warmup=args.min_time)
    )
    results: dict[str, dict[str, object]] = {}
    for route in args.routes.split(","):
        variants, seconds = compile_rate(workload, target, route)
        with Measurer(
            workload, target, db, route=route_named(route), runner_settings=settings
        ) as measurer:
            report = measurer.measure(space_for(target), shapes)
        results[route] = {
            **summarize(report),
            "compile_variants": variants,
            "compile_seconds": seconds,
        }
    Path(args.out).write_text(markdown(results, target, args) + "\n")
    Path(args.db).with_suffix(".summary.json").write_text(json.dumps(results, indent=2) + "\n")
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
