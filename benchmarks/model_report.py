"""The model benchmark's outputs: a markdown table and a plot per model, the docs section.

Read by ``benchmarks/model_benchmark.py`` from the JSON object it writes per model
(``docs/results/model_benchmark_<model>.json``), so the tables can be rebuilt from
the JSON alone (``python benchmarks/model_report.py`` regenerates the docs section).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- model-benchmark:begin -->", "<!-- model-benchmark:end -->"
IREE = ("IREE default", "IREE data tiling")


def geomean(values: list[float]) -> float:
    good = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


def _cell(value: float | None, digits: int = 2, unit: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "failed" if value is not None and math.isinf(value) else "-"
    return f"{value:.{digits}f}{unit}"


def timed_columns(run: dict[str, Any]) -> list[str]:
    return [c for c in run["columns"] if c not in run["unavailable"]]


def table(result: dict[str, Any]) -> list[str]:
    """ms per call of every column, each over the best IREE build, per T and geomean rows."""
    run = result["run"]
    columns = run["columns"]
    timed = timed_columns(run)
    header = ["T", *(f"{c} (ms)" for c in columns), *(f"{c} / best IREE" for c in timed)]
    lines = [
        "| " + " | ".join(header) + " | max rel err |",
        "|" + "---:|" * (len(header) + 1),
    ]
    for row in run["rows"]:
        ms = [
            "n/a" if c in run["unavailable"] else _cell(row["ms"].get(c, math.nan)) for c in columns
        ]
        ratios = [_cell(row["vs_best_iree"].get(c, math.nan), unit="x") for c in timed]
        error = row["max_rel_error"]
        error_cell = f"{error:.1e}" if error is not None and math.isfinite(error) else "-"
        lines.append(f"| {row['t']} | " + " | ".join([*ms, *ratios, error_cell]) + " |")
    geo_ms = [
        "n/a"
        if c in run["unavailable"]
        else _cell(geomean([r["ms"].get(c, math.nan) for r in run["rows"]]))
        for c in columns
    ]
    geo_ratio = [_cell(run["geomean_vs_best_iree"].get(c, math.nan), unit="x") for c in timed]
    lines.append("| **geomean** | " + " | ".join([*geo_ms, *geo_ratio]) + " | |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    """One model's section: setup, how to reproduce, the table, what could not run."""
    run = result["run"]
    threads = run["threads"]
    lines = [
        f"### {result['model']}",
        "",
        f"Commit {result['commit']}, IREE {result['iree']}, {result['target']}; "
        f"`{run['device']}` ({threads} thread{'s' if threads > 1 else ''} for every column);"
        f" every output checked against {run['reference']} (max abs error <= 1e-4 of the"
        f" output's scale); medians of {run['rounds']} interleaved rounds, samples of >="
        f" {run['min_time']:g} s. Reproduce (reuses `{result['records']}`):",
        "",
        "```",
        result["command"],
        "```",
        "",
    ]
    if result.get("tuned_now"):
        lines.append(
            f"- tuning: {result['measurements']} measurements ({result['probes']} probes of"
            f" IREE's default), {result['tune_seconds'] / 60:.1f} min"
            + (
                f" (resumed: {result['records_before']} records were there)"
                if result["records_before"]
                else " (from no records)"
            )
            + f"; level {result['level']}; compile with the plan {result['compile_seconds']:.0f} s"
        )
    else:
        lines.append("- tuning: the plan was reused (--reuse-plan)")
    speedup = run["geomean_speedup"]
    lines.append(
        f"- geomean speedup of dcmlir over IREE default: **{_cell(speedup, unit='x')}**;"
        " ratios below are each column's time over the faster of IREE default and IREE data"
        " tiling at that T, the median of per-round ratios (< 1: faster than the best IREE"
        " build)"
    )
    speeds = [(row["speedup"], row["t"]) for row in run["rows"] if row.get("speedup")]
    if speeds:
        worst, at = min(speeds)
        lines.append(
            f"- slowest T against IREE default: {_cell(worst, unit='x')} at T={at}"
            " (dcmlir's speedup there, the median of per-round ratios)"
        )
    for column, why in run["unavailable"].items():
        lines.append(f"- {column}: not timed: {why}")
    for column, note in run.get("notes", {}).items():
        lines.append(f"- {column}: {note}")
    failed = sorted({e for row in run["rows"] for e in row["errors"]})
    lines += [f"- failed: {e.splitlines()[0]}" for e in failed[:5]]
    lines += ["", *table(result), ""]
    if result.get("workloads"):
        lines += [
            "Where model time goes (IREE default per call: probed, or from FLOPs when the"
            " budget was too small to probe) and the budget split:",
            "",
            "| workload | ops | IREE default ms/call | share | budget | measurements | kernels |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for w in sorted(result["workloads"], key=lambda w: -w["default_ms"]):
            lines.append(
                f"| {w['kind']} {w['space']} | {w['ops']} | {w['default_ms']:.3f} |"
                f" {w['share']:.1%} | {w['budget']} | {w['measurements']} | {w['kernels']} |"
            )
        lines.append("")
    lines += [f"![model_benchmark_{result['slug']}.png](model_benchmark_{result['slug']}.png)", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Latency per call and time over the best IREE build, against T; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    run = result["run"]
    rows = run["rows"]
    t = [r["t"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for column in timed_columns(run):
        left.plot(t, [r["ms"].get(column, math.nan) for r in rows], "o-", ms=3, label=column)
        right.plot(t, [r["vs_best_iree"].get(column, math.nan) for r in rows], "o-", ms=3)
    left.set_xlabel("sequence length T")
    left.set_ylabel("latency per call (ms)")
    left.set_yscale("log")
    left.set_title(result["model"], fontsize=9)
    left.legend(fontsize=8)
    right.axhline(1.0, color="grey", lw=0.8)
    right.set_xlabel("sequence length T")
    right.set_ylabel("time / best of IREE default, data tiling")
    right.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


INTRO = (
    "## Whole models against IREE, ONNX Runtime and torch (GPT-2, Llama, BERT-base)\n\n"
    "Written by `benchmarks/model_benchmark.py` (how to run it: the section above); one"
    " subsection per model from `docs/results/model_benchmark_<model>.json`. Absolute times"
    " are from whatever machine ran it (see each subsection's target line)."
)


def write_docs(doc: Path, results: Path) -> str:
    """Regenerate the model-benchmark section of ``doc`` from every result JSON in ``results``."""
    import json

    found = []
    for path in sorted(results.glob("model_benchmark_*.json")):
        result = json.loads(path.read_text())
        if isinstance(result, dict) and "slug" in result:
            found.append(result)
    order = {"gpt2": 0, "llama": 1, "bert": 2}
    found.sort(key=lambda r: (order.get(r["kind"], 2), r["layers"]))
    body = [
        section.replace(
            f"](model_benchmark_{r['slug']}.png)", f"](results/model_benchmark_{r['slug']}.png)"
        )
        for r in found
        for section in [markdown(r)]
    ]
    section = "\n".join([BEGIN, INTRO, "", *body, END])
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    doc.write_text(text)
    return section


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    write_docs(root / "docs" / "benchmarks.md", root / "docs" / "results")
    sys.exit(0)
