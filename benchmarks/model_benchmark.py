"""Benchmark: a whole BERT-base encoder tuned by dcmlir against IREE's default compilation.

1. Generate the encoder (hidden 768, 12 heads, FFN 3072, ``--layers`` layers, T
   dynamic in 1..128, seeded weights in a parameter archive) with the generator;
2. ``dcmlir.tune`` the model under one measurement budget (its distinct workloads,
   found at IREE's global-optimization level, the budget split by their estimated
   share of model time), timed: the total tuning wall time and measurements;
3. ``dcmlir.compile`` with the plan, and IREE's default compilation of the same module;
4. side by side in one process, interleaved per T (docs/design.md, section 4), largest T
   first: IREE default, dcmlir, and torch eager with the same thread count when torch
   is installed; every output checked against the reference (torch in float64 when
   installed, else the generator's float64 numpy model), max abs error <= 1e-4 of the
   output's scale.

Writes a section of ``docs/benchmarks.md`` (between markers), every number into
``docs/results/model_benchmark.json``, a plot into ``docs/results/`` and the plan with
its workload graph into ``docs/results/model_plan.json`` / ``.graph.json``. Resumable:
measurements come back from ``docs/results/model_records.jsonl``.

    .venv/bin/pip install -e '.[bench]'   # matplotlib, for the plot
    .venv/bin/python benchmarks/model_benchmark.py --layers 12 --budget 600
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import dcmlir
from dcmlir.bench.model_compare import ModelRun, run_model
from dcmlir.driver import compile_default
from dcmlir.ir.iree import versions
from dcmlir.measure.timing import MeasureSettings
from dcmlir.models import BERT_BASE, generate_encoder, save_model
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
BEGIN, END = "<!-- model-benchmark:begin -->", "<!-- model-benchmark:end -->"
COMMAND = "python benchmarks/model_benchmark.py"


def parse_seq(text: str) -> list[int]:
    found: list[int] = []
    for item in text.split(","):
        lo, _, hi = item.partition(":")
        found += range(int(lo), int(hi or lo) + 1)
    return sorted(set(found))


def commit() -> str:
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return found or "unknown"


def run(args: argparse.Namespace) -> dict:
    config = dataclasses.replace(BERT_BASE, layers=args.layers)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = workdir / f"bert{args.layers}.mlir"
    model = generate_encoder(config, "params")
    parameters = save_model(model, model_path)
    stem = f"model_{args.layers}l"
    plan_path = Path(args.plan) if args.plan else RESULTS / f"{stem}_plan.json"
    print(f"== {config.describe()}: tuning (budget {args.budget})", file=sys.stderr)
    records = Path(args.db) if args.db else RESULTS / f"{stem}_records.jsonl"
    earlier = len(records.read_text().splitlines()) if records.exists() else 0
    start = time.perf_counter()
    report = dcmlir.tune(
        model_path,
        budget=args.budget,
        db=records,
        output=plan_path,
        min_time=args.tune_min_time,
        rounds=args.tune_rounds,
        level=args.level,
    )
    tune_seconds = time.perf_counter() - start
    for line in report.model_lines():
        print(line, file=sys.stderr)
    print("== compiling (dcmlir plan, IREE default)", file=sys.stderr)
    start = time.perf_counter()
    tuned = dcmlir.compile(model_path, plan=plan_path).vmfb
    compile_seconds = time.perf_counter() - start
    default = compile_default(model_path)
    print(f"== side by side at T = {args.seq}", file=sys.stderr)
    settings = MeasureSettings(
        min_time=args.min_time, rounds=args.rounds, warmup=2 * args.min_time, rtol=1e-4
    )
    result: ModelRun = run_model(
        model.text,
        tuned,
        default,
        parse_seq(args.seq),
        parameters=parameters,
        reference=args.reference,
        device=args.device,
        settings=settings,
        progress=lambda t: print(f"   T={t}", file=sys.stderr),
        config=config,
    )
    for line in result.table():
        print(line, file=sys.stderr)
    graph = report.graph
    assert graph is not None
    shares = graph.shares()
    return {
        "commit": commit(),
        **versions(),
        "model": config.describe(),
        "layers": config.layers,
        "command": f"{COMMAND} --layers {args.layers} --budget {args.budget}",
        "target": CpuTarget().describe(),
        "level": report.level,
        "level_reason": report.level_reason,
        "budget": args.budget,
        "measurements": report.measurements,
        "measured_now": report.measured_now,
        "probes": report.probes,
        "tune_seconds": tune_seconds,
        "compile_seconds": compile_seconds,
        "records_before": earlier,
        "workloads": [
            {
                "key": key,
                "kind": workload.kind,
                "space": "x".join(d.describe() for d in workload.dims),
                "ops": graph.estimates[key].ops,
                "default_ms": graph.estimates[key].default_seconds * 1e3,
                "share": shares[key],
                "budget": graph.estimates[key].budget,
                "measurements": graph.estimates[key].measurements,
                "tuned_ms": (graph.estimates[key].tuned_seconds or math.nan) * 1e3,
                "kernels": len(item.plan.kernels),
            }
            for key, workload in graph.workloads.items()
            for item in report.workloads
            if item.workload.key == key
        ],
        "run": result.to_json(),
    }


def plot(result: dict) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return None
    rows = result["run"]["rows"]
    t = [r["t"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    left.plot(t, [r["default_ms"] for r in rows], "o-", ms=3, label="IREE default")
    left.plot(t, [r["dcmlir_ms"] for r in rows], "o-", ms=3, label="dcmlir")
    if any("torch_ms" in r for r in rows):
        left.plot(t, [r.get("torch_ms", math.nan) for r in rows], "o-", ms=3, label="torch eager")
    left.set_xlabel("sequence length T")
    left.set_ylabel("latency per call (ms)")
    left.set_title(f"{result['layers']}-layer BERT-base encoder, T in 1..128")
    left.legend()
    right.plot(t, [r["speedup"] for r in rows], "o-", ms=3)
    right.axhline(1.0, color="grey", lw=0.8)
    right.axhline(1.25, color="grey", lw=0.8, ls="--")
    right.set_xlabel("sequence length T")
    right.set_ylabel("speedup over IREE default")
    fig.tight_layout()
    name = f"model_benchmark_{result['layers']}l.png"
    fig.savefig(RESULTS / name, dpi=90)
    plt.close(fig)
    return name


def markdown(results: list[dict], plots: list[str]) -> str:
    lines = [
        BEGIN,
        "## Whole BERT-base encoders tuned end to end (issue 6)",
        "",
        "The generator's encoder (hidden 768, 12 heads, FFN 3072, T dynamic in 1..128, seeded"
        " weights in a parameter archive), tuned as one model by `dcmlir.tune` (workloads found"
        " at IREE's global-optimization level, identical layers tuned once, one budget split by"
        " each workload's share of model time), compiled by `dcmlir.compile`, and timed side by"
        " side with IREE's default compilation of the same module in one process, interleaved"
        " per T, largest T first (`dcmlir run-model`'s loop). Every output checked against the"
        " reference: max abs error <= 1e-4 of the output's scale. Absolute times are from a"
        " shared 2-core machine; the speedups are medians of per-round ratios.",
        "",
    ]
    for r in results:
        run_ = r["run"]
        rows = run_["rows"]
        torch = any("torch_ms" in row for row in rows)
        lines += [
            f"### {r['model']}",
            "",
            f"Commit {r['commit']}, IREE {r['iree']}, {r['target']}; `{run_['device']}`"
            f" ({run_['threads']} thread{'s' if run_['threads'] > 1 else ''}); reference"
            f" {run_['reference']}. Reproduce (resumes from"
            f" `docs/results/model_{r['layers']}l_records.jsonl`):",
            "",
            "```",
            r["command"],
            "```",
            "",
            f"- **end-to-end geomean speedup over IREE default: {run_['geomean_speedup']:.2f}x**"
            f" over {len(rows)} sequence lengths",
            f"- tuning: {r['measurements']} measurements ({r['probes']} probes of IREE's default"
            f" for the split), {r['tune_seconds'] / 60:.1f} min wall time"
            + (
                f" (resumed: {r['records_before']} records were already there)"
                if r.get("records_before")
                else " (from no records)"
            )
            + f"; compile with the plan {r['compile_seconds']:.0f} s; level {r['level']}",
        ]
        if torch:
            geo = _geomean([row["dcmlir_vs_torch"] for row in rows])
            lines.append(
                f"- torch eager, same thread count: dcmlir is {geo:.2f}x its speed (geomean)"
            )
        lines += [
            "",
            "Where model time goes (IREE default per call, averaged over T, from probes) and the"
            " budget split:",
            "",
            "| workload | ops | IREE default ms/call | share | budget | measurements | kernels"
            " | tuned ms/call (est.) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for w in sorted(r["workloads"], key=lambda w: -w["default_ms"]):
            lines.append(
                f"| {w['kind']} {w['space']} | {w['ops']} | {w['default_ms']:.3f} |"
                f" {w['share']:.1%} | {w['budget']} | {w['measurements']} | {w['kernels']} |"
                f" {w['tuned_ms']:.3f} |"
            )
        header = "| T | IREE default (ms) | dcmlir (ms) | speedup |"
        rule = "|---:|---:|---:|---:|"
        if torch:
            header += " torch eager (ms) |"
            rule += "---:|"
        lines += ["", header + " max rel err |", rule + "---:|"]
        for row in rows:
            cells = (
                f"| {row['t']} | {row['default_ms']:.2f} | {row['dcmlir_ms']:.2f} |"
                f" {row['speedup']:.2f}x |"
            )
            if torch:
                cells += f" {row.get('torch_ms', math.nan):.2f} |"
            lines.append(cells + f" {row['max_rel_error']:.1e} |")
        lines.append("")
    for name in plots:
        lines += [f"![{name}](results/{name})", ""]
    lines.append(END)
    return "\n".join(lines)


def _geomean(values: list[float]) -> float:
    good = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


def write_docs(results: list[dict]) -> None:
    """Regenerate this benchmark's section of docs/benchmarks.md (others own other sections)."""
    plots = [p for p in (plot(r) for r in results) if p]
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    section = markdown(results, plots)
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    doc.write_text(text)
    print(section)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--budget", type=int, default=600, help="tuning measurements, in all")
    parser.add_argument("--seq", default="1:8,16,24,32,40,48,56,64,72,80,88,96,104,112,120,128")
    parser.add_argument("--level", default="auto")
    parser.add_argument("--reference", default="auto", choices=("auto", "numpy", "torch"))
    parser.add_argument("--device", default="local-sync", choices=("local-sync", "local-task"))
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds per sample")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tune-min-time", type=float, default=0.03)
    parser.add_argument("--tune-rounds", type=int, default=3)
    parser.add_argument(
        "--workdir", default="/tmp/dcmlir-model-benchmark", help="the generated model and weights"
    )
    parser.add_argument("--db", default=None, help="records (default: docs/results/model_Nl_...)")
    parser.add_argument("--plan", default=None, help="plan (default: docs/results/model_Nl_...)")
    parser.add_argument(
        "--no-docs", action="store_true", help="print only: leave docs/ as it is (development)"
    )
    args = parser.parse_args()
    result = run(args)
    if args.no_docs:
        print(json.dumps({k: v for k, v in result.items() if k != "run"}, indent=1))
        return 0
    out = RESULTS / "model_benchmark.json"
    previous = {r["layers"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    previous[result["layers"]] = result
    ordered = [previous[k] for k in sorted(previous, reverse=True)]
    out.write_text(json.dumps(ordered, indent=1) + "\n")
    write_docs(ordered)
    return 0


if __name__ == "__main__":
    sys.exit(main())
