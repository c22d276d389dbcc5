"""Check the scaling note on a machine with more cores (issue 15), in one short run.

The note in docs/benchmarks.md ("Scaling on paper") predicts, from the 2-core records
only, how the plans change with ``P`` cores and names what a bigger machine should
measure. This script measures exactly that, for ``--workloads`` (default ``dense_out``
and ``dense_ffn2``, the two with the smallest tile grids):

1. the runtime's floor on this machine (a one-dispatch module on ``local-sync`` and on
   ``local-task``), since a per-call cost of 100 us dominates small T;
2. ``dcmlir tune --device local-task --threads P`` (P = every core by default), the
   weight a module constant as in the bench suite, records kept;
3. ``dcmlir bench`` of that plan against IREE's default, IREE data tiling, numpy and
   torch (P threads each, each in its own process), T = 1..32 (where the grid bounds
   occupancy) and a few larger T;
4. ``dcmlir bench`` of the plan tuned on 2 cores (``docs/results/bench/local-task/
   plans``) beside IREE's default on the same machine, same T: the ratio to the default
   of each plan, measured in its own process, compares them.

Everything goes to ``--out`` (``summary.json``, the bench tables and plots, the tuning
records); no workload starts after ``--deadline`` seconds. Run on a lent machine by
``benchmarks/gpu_session.sh cpu`` (docs/cuda.md has the two device calls).
``--report FOLDER`` (here, afterwards) writes the per-T table of one or more such
folders into docs/benchmarks.md and ``FOLDER/scaling.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_suite import constant_weight_text
from constant_weight_bench import replace_section
from thread_hygiene import floor_table

import dcmlir
from dcmlir.bench import BenchResult, BenchSettings, bench, geomean, load_result, write_outputs
from dcmlir.ir.iree import versions
from dcmlir.shapes import parse_shapes

ROOT = Path(__file__).resolve().parent.parent
MODULES = ROOT / "docs" / "results" / "modules"
TWO_CORE_PLANS = ROOT / "docs" / "results" / "bench" / "local-task" / "plans"
SHAPES = "1:32,48,64,96,128"
PEERS = ("dcmlir", "iree-default", "iree-data-tiling", "numpy", "torch")
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bigger-machine:begin -->", "<!-- bigger-machine:end -->"
COLUMNS = ("iree-data-tiling", "numpy", "torch")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, nargs="+", help="runs' --out folders: docs only")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workloads", default="dense_out,dense_ffn2")
    parser.add_argument("--budget", type=int, default=120, help="as the suite's local-task")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default=SHAPES, help="as dcmlir bench --shapes")
    parser.add_argument("--deadline", type=float, default=420.0)
    args = parser.parse_args()
    if args.report:
        return report([folder.resolve() for folder in args.report])
    if args.out is None:
        parser.error("--out is required (or --report)")
    start = time.perf_counter()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "threads": args.threads,
        "cpu": _cpu(),
        "versions": versions(),
        "commit": os.environ.get("DCMLIR_COMMIT", "?"),
        "workloads": {},
    }
    summary["floor"] = floor_table()
    print("\n".join(summary["floor"]), flush=True)
    _write(out, summary)
    for name in args.workloads.split(","):
        if time.perf_counter() - start > args.deadline:
            summary["workloads"][name] = "not started: past the deadline"
            _write(out, summary)
            continue
        summary["workloads"][name] = one_workload(name, args, out)
        _write(out, summary)
    print(json.dumps(summary["workloads"], indent=1))
    return 0


def one_workload(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    source = MODULES / f"{name}.mlir"
    timed = out / "work" / f"{name}-constant.mlir"
    timed.parent.mkdir(parents=True, exist_ok=True)
    timed.write_text(constant_weight_text(source) or source.read_text())
    plan = out / "plans" / f"{name}.json"
    plan.parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    print(f"== {name}: tuning on local-task, {args.threads} threads", flush=True)
    report = dcmlir.tune(
        timed,
        dims=["1:128"],
        budget=args.budget,
        db=out / "tune_records.jsonl",
        output=plan,
        device="local-task",
        threads=args.threads,
    )
    (item,) = report.workloads
    tuned = time.perf_counter() - began
    results = {}
    for label, plan_path, peers in (
        ("tuned-here", plan, PEERS),
        ("tuned-on-2-cores", TWO_CORE_PLANS / f"{name}.json", ("dcmlir", "iree-default")),
    ):
        print(f"== {name}: bench of the plan {label}", flush=True)
        result = bench(
            source,
            plan=plan_path,
            dims=["1:128"],
            shapes=parse_shapes(args.shapes),
            settings=BenchSettings(
                baselines=peers, device="local-task", threads=args.threads, rounds=args.rounds
            ),
            db=out / "oracle_records.jsonl",
            name=f"{name}-{label}",
        )
        write_outputs(result, out)
        results[label] = result
    return {
        "tuning_seconds": round(tuned, 1),
        "kernels": [k.candidate_key for k in item.plan.kernels],
        "tree_depth": item.plan.tree.depth,
        "geomean_over_default": {
            label: {b: result.geomean_speedup(b) for b in result.measured_baselines()}
            for label, result in results.items()
        },
        "unavailable": {label: result.unavailable for label, result in results.items()},
    }


def report(folders: list[Path]) -> int:
    """Per workload and run: each T's speedup over IREE's default of the plan tuned there,
    the plan tuned on 2 cores (its own default, in its own bench) and the peers."""
    lines = [BEGIN]
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        lines += [
            f"Run `{folder.name}`: {summary['threads']} threads, commit {summary['commit']},"
            f" IREE {summary['versions']['iree']}. Speedup over IREE's default (`local-task`,"
            " same threads) per T, the median of per-round ratios; each plan's ratio is to"
            " the default timed beside it. Command: `python benchmarks/bigger_machine.py"
            f" --report {' '.join(str(f.relative_to(ROOT)) for f in folders)}`.",
            "",
        ]
        for name, found in summary["workloads"].items():
            here = folder / f"{name}-tuned-here.json"
            if not isinstance(found, dict):
                lines += [f"`{name}`: {found}.", ""]
                continue
            if not here.exists():  # a device call returns a few files only
                means = found["geomean_over_default"]
                lines += [
                    f"`{name}` (plan tuned here: {', '.join(found['kernels'])}): per-T files not"
                    " kept; geomean speedup over IREE's default: plan tuned here"
                    f" {means['tuned-here']['dcmlir']:.2f}x, plan tuned on 2 cores"
                    f" {means['tuned-on-2-cores']['dcmlir']:.2f}x, "
                    + ", ".join(f"{p} {means['tuned-here'][p]:.2f}x" for p in COLUMNS)
                    + ".",
                    "",
                ]
                continue
            mine, two = load_result(here), load_result(folder / f"{name}-tuned-on-2-cores.json")
            lines += _workload_table(name, found, mine, two)
            _plot(name, mine, two, folder / f"{name}-scaling.png")
            lines += [f"![{name}]({folder.relative_to(DOC.parent)}/{name}-scaling.png)", ""]
    lines.append(END)
    print("\n".join(lines))
    replace_section(DOC, BEGIN, END, "\n".join(lines))
    return 0


def _workload_table(
    name: str, found: dict[str, Any], mine: BenchResult, two: BenchResult
) -> list[str]:
    head = ["plan tuned here", "plan tuned on 2 cores", *COLUMNS]
    lines = [
        f"`{name}` (plan tuned here: {', '.join(found['kernels'])}; tuning"
        f" {found['tuning_seconds']} s):",
        "",
        "| T | IREE default (us) | " + " | ".join(head) + " |",
        "|---:|---:|" + "---:|" * len(head),
    ]
    speedups: dict[str, list[float]] = {h: [] for h in head}
    for shape in mine.shapes:
        default = mine.cell(shape, "iree-default")
        cells = [mine.cell(shape, "dcmlir"), two.cell(shape, "dcmlir")]
        cells += [mine.cell(shape, peer) for peer in COLUMNS]
        values = [c.speedup if c is not None else float("nan") for c in cells]
        for h, v in zip(head, values, strict=True):
            speedups[h].append(v)
        us = f"{default.median_us:.0f}" if default is not None else "n/a"
        lines.append(f"| {shape[0]} | {us} | " + " | ".join(f"{v:.2f}x" for v in values) + " |")
    means = [geomean(v) for v in speedups.values()]
    lines += ["| geomean | | " + " | ".join(f"**{m:.2f}x**" for m in means) + " |", ""]
    return lines


def _plot(name: str, mine: BenchResult, two: BenchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [shape[0] for shape in mine.shapes]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = {"plan tuned here": (mine, "dcmlir"), "plan tuned on 2 cores": (two, "dcmlir")}
    series |= {peer: (mine, peer) for peer in COLUMNS}
    for label, (result, peer) in series.items():
        values = [c.speedup if (c := result.cell(s, peer)) else float("nan") for s in mine.shapes]
        ax.plot(t, values, marker="o", markersize=3, label=label)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("T")
    ax.set_ylabel("speedup over IREE's default")
    ax.set_title(f"{name}, local-task, {mine.threads} threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cpu() -> dict[str, Any]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    return {"cores": os.cpu_count(), "machine": platform.machine(), "lscpu": lscpu}


def _write(out: Path, summary: dict[str, Any]) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
