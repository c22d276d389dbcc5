"""The benchmark suite: the six BERT-base workloads against every baseline, with plots.

For each workload of ``benchmarks/bert_workloads.py`` (T dynamic in 1..128):

1. tune it (``dcmlir.tune``, budget ``--budget``), keeping the measurements and
   wall time of the search;
2. ``dcmlir bench`` it: the dispatched module, IREE's default, IREE per static
   shape, IREE's specialization_ranges, the per-shape oracle, bucketing, numpy
   and torch, side by side at the suite's shapes (docs/design.md, section 4);
3. tuning cost: per-shape exhaustive tuning of the same space at DietCode's 8
   sampled T (5, 24, 43, 62, 81, 100, 119, 128), measured with the search's
   own settings; all 128 T estimated from the same per-shape cost; the quality
   each reaches, as a geomean over the suite's shapes against the oracle, all
   read from the oracle's records (one measuring session);
4. thread scaling: step 1-2 again on ``local-task`` (every core), against numpy
   and torch with the same thread count.

Outputs: ``docs/results/bench/<device>/<workload>.{json,md,png}`` and
``tuning_cost.json``; the section of ``docs/benchmarks.md`` between the
``bench-suite`` markers is regenerated from them. Records (tuning, oracle,
exhaustive) go to ``results/bench/`` (not committed; a second run resumes).

    .venv/bin/pip install -e '.[bench]'   # matplotlib
    .venv/bin/python benchmarks/bench_suite.py                 # everything (hours on 2 cores)
    .venv/bin/python benchmarks/bench_suite.py --report-only   # regenerate the docs section
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from bert_workloads import workloads as bert_workloads

import dcmlir
from dcmlir.bench import (
    BASELINES,
    BenchResult,
    BenchSettings,
    bench,
    geomean,
    load_result,
    markdown,
    write_outputs,
)
from dcmlir.bench.baselines import shape_label
from dcmlir.bench.weights import default_weight_mode, weight_array, with_constant_weight
from dcmlir.dispatch import Plan
from dcmlir.driver import load_workloads
from dcmlir.ir.iree import versions
from dcmlir.measure.loop import Measurer, MeasureReport
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase
from dcmlir.shapes import Shape
from dcmlir.space import ExactCandidate, space_for
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OUT = DOCS / "results" / "bench"
RECORDS = ROOT / "results" / "bench"
BEGIN, END = "<!-- bench-suite:begin -->", "<!-- bench-suite:end -->"
COMMAND = "python benchmarks/bench_suite.py"
RANGE = "1:128"
DIETCODE_T = (5, 24, 43, 62, 81, 100, 119, 128)
SUITE_T = sorted({*range(1, 9), *DIETCODE_T, 16, 17, 32, 33, 64, 65, 96, 127})
SCALING_BASELINES = (
    "dcmlir",
    "iree-default",
    "iree-data-tiling",
    "iree-static",
    "iree-specialized",
    "numpy",
    "torch",
    "onnxruntime",
)
TASK_PROCESSES = 3  # local-task: a run's ratios move together; a cell is the median of 3
ONE_THREAD = "one-thread"  # task's baselines on local-sync: the one-thread columns
SEARCH_MIN_TIME, SEARCH_ROUNDS = 0.03, 3  # dcmlir.tune's defaults: exhaustive uses the same


def tune(
    name: str, source: Path, device: str, budget: int, folder: str | None = None
) -> dict[str, Any]:
    """The plan of one workload on one device, tuning it only if it is not there yet;
    ``folder``: where under ``OUT`` (default: the device's name)."""
    plans = OUT / (folder or device) / "plans"
    plans.mkdir(parents=True, exist_ok=True)
    plan_path, summary_path = plans / f"{name}.json", plans / f"{name}.tuning.json"
    if plan_path.exists() and summary_path.exists():
        return json.loads(summary_path.read_text())
    print(f"== {name} ({device}): tuning, budget {budget}", file=sys.stderr)
    start = time.perf_counter()
    report = dcmlir.tune(
        source,
        dims=[RANGE],
        budget=budget,
        db=RECORDS / f"tune-{device}.jsonl",
        output=plan_path,
        device=device,
        min_time=SEARCH_MIN_TIME,
        rounds=SEARCH_ROUNDS,
    )
    (item,) = report.workloads
    summary = {
        "budget": budget,
        "measurements": item.search.measurements,
        "measured_now": item.search.measured_now,
        "seconds": time.perf_counter() - start,
        "candidates": len(item.search.candidates),
        "shapes": len(item.search.shapes),
        "kernels": [k.candidate_key for k in item.plan.kernels],
        "tree_depth": item.plan.tree.depth,
    }
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def as_timed(name: str, source: Path) -> Path:
    """The module as the bench times it: a projection's weight a module constant (as in a
    model; the bench's default weight mode), so the search has the packed family too."""
    text = constant_weight_text(source)
    if text is None:
        return source
    constant = RECORDS / f"{name}-constant.mlir"
    constant.write_text(text)
    return constant


def constant_weight_text(source: Path) -> str | None:
    """:func:`as_timed`'s module text with its weight a constant; None where the weight
    stays an argument (the bench's default weight mode)."""
    _, (workload,), _ = load_workloads(source, [RANGE], sys.stderr)
    if default_weight_mode(workload) != "constant":
        return None
    return with_constant_weight(
        source.read_text(), weight_array(workload), str(workload.operand_type(1))
    )


def run_bench(
    name: str, source: Path, device: str, baselines: tuple[str, ...], folder: str | None = None
) -> BenchResult:
    print(f"== {name} ({device}): bench", file=sys.stderr)
    result = bench(
        source,
        plan=OUT / (folder or device) / "plans" / f"{name}.json",
        dims=[RANGE],
        shapes=[(t,) for t in SUITE_T],
        settings=BenchSettings(
            baselines=baselines,
            device=device,
            processes=TASK_PROCESSES if device == "local-task" else 1,
        ),
        db=RECORDS / f"oracle-{device}.jsonl",
        name=name,
    )
    write_outputs(result, OUT / (folder or device))
    return result


def tuning_cost(name: str, source: Path, tuning: dict[str, Any]) -> dict[str, Any]:
    """Exhaustive per-shape tuning at DietCode's 8 T (measured), all 128 (estimated)."""
    target = CpuTarget()
    _, (workload,), _ = load_workloads(source, [RANGE], sys.stderr)
    ranks = len(workload.dynamic_dims)
    space = space_for(target)
    settings = RunnerSettings(
        MeasureSettings(min_time=SEARCH_MIN_TIME, rounds=SEARCH_ROUNDS, warmup=SEARCH_MIN_TIME)
    )
    seconds: dict[int, float] = {}
    previous = _previous_cost(name)
    exhaustive = RecordDatabase(RECORDS / "exhaustive8.jsonl")
    exhaustive.load()
    best8: dict[int, str] = {}
    with Measurer(workload, target, exhaustive, runner_settings=settings) as measurer:
        for t in DIETCODE_T:
            print(f"== {name}: exhaustive tuning at T={t}", file=sys.stderr)
            start = time.perf_counter()
            report = measurer.measure(space, [(t,) * ranks])
            seconds[t] = time.perf_counter() - start
            if report.measured == 0 and str(t) in previous.get("seconds_per_shape", {}):
                seconds[t] = previous["seconds_per_shape"][str(t)]  # resumed: keep the measured
            best8[t] = report.best((t,) * ranks)[0]
    oracle = _oracle_report(workload, target, space)
    plan = Plan.load(OUT / "local-sync" / "plans" / f"{name}.json")
    planned = plan.for_workload(workload.key)
    assert planned is not None

    def quality(pick: dict[int, str]) -> float:
        ratios = []
        for t in SUITE_T:
            shape = (t,) * ranks
            best = oracle.best(shape)[1]
            ratios.append(best / oracle.median(pick[t], shape))
        return geomean(ratios)

    dcmlir_pick = {}
    for t in SUITE_T:
        dims = {d.index: t for d in workload.dynamic_dims}
        chosen = planned.select(dims)
        if chosen is not None and isinstance(chosen.candidate, ExactCandidate):
            chosen = planned.kernels[planned.tree.select(dims)]  # the oracle's space: the tree
        dcmlir_pick[t] = chosen.candidate_key if chosen else "default"
    # a per-shape tuner serves an unseen T with the kernel tuned at the next sampled T up
    bucket_pick = {t: best8[min(s for s in DIETCODE_T if s >= t)] for t in SUITE_T}
    all_t = range(1, 129)
    estimate_128 = sum(_interpolate(seconds, t) for t in all_t)
    return {
        "name": name,
        "candidates": len(space),
        "dcmlir": {
            "measurements": tuning["measurements"],
            "seconds": tuning["seconds"],
            "quality": quality(dcmlir_pick),
        },
        "exhaustive8": {
            "measurements": len(space) * len(DIETCODE_T),
            "seconds": sum(seconds.values()),
            "quality": quality(bucket_pick),
        },
        "exhaustive128": {
            "measurements": len(space) * 128,
            "seconds_estimate": estimate_128,
            "quality": 1.0,
        },
        "seconds_per_shape": {str(t): s for t, s in seconds.items()},
    }


def _previous_cost(name: str) -> dict[str, Any]:
    path = OUT / "tuning_cost.json"
    if not path.exists():
        return {}
    return next((c for c in json.loads(path.read_text()) if c["name"] == name), {})


def _oracle_report(workload: Any, target: CpuTarget, space: list[Any]) -> MeasureReport:
    """Every candidate at every suite T from the bench's oracle records (measures what lacks)."""
    db = RecordDatabase(RECORDS / "oracle-local-sync.jsonl")
    db.load()
    oracle = BenchSettings()
    settings = RunnerSettings(
        MeasureSettings(
            min_time=oracle.oracle_min_time,
            rounds=oracle.oracle_rounds,
            warmup=oracle.oracle_min_time / 2,
        )
    )
    ranks = len(workload.dynamic_dims)
    with Measurer(workload, target, db, runner_settings=settings) as measurer:
        return measurer.measure(space, [(t,) * ranks for t in SUITE_T])


def _interpolate(points: dict[int, float], t: int) -> float:
    """Per-shape tuning seconds at ``t`` from the measured ones (linear, flat beyond the ends)."""
    xs = sorted(points)
    if t <= xs[0]:
        return points[xs[0]]
    for lo, hi in itertools.pairwise(xs):
        if lo <= t <= hi:
            return points[lo] + (points[hi] - points[lo]) * (t - lo) / (hi - lo)
    return points[xs[-1]]


# --- the docs section ------------------------------------------------------------------------


def report(names: list[str]) -> str:
    target = CpuTarget()
    lines = [
        BEGIN,
        "## Every baseline, side by side: the six BERT-base workloads (issue 5)",
        "",
        f"Machine: {target.describe()}; IREE {versions()['iree']}. T dynamic in 1..128 (both T"
        " of the attention batch matmuls equal), f32. Each workload is tuned by `dcmlir tune`"
        " (budget per workload below), then `dcmlir bench` compiles every baseline and times"
        " them in one process, interleaved per T (largest T first, 4 random input sets rotated,"
        " 5 rounds of >= 50 ms samples per baseline, IREE's default timed before and after"
        " each T), every output checked against a float64 reference first. Speedups are over"
        " IREE's default, medians of per-round ratios; the geomean is over the T of the table.",
        "",
        "Baselines: " + "; ".join(f"`{n}`: {d}" for n, d in BASELINES.items()) + ".",
        "",
        "Weights (`dcmlir bench --weights`, the column `weights` below): the projections run"
        " in `constant` mode (operand 1 one fixed random array, a module constant of every"
        " IREE build and the host peers' constant, as in a model: IREE hoists its packing),"
        " the attention batch matmuls in `argument` mode (both operands are activations).",
        "",
        "Reproduce everything (tuning, oracle and exhaustive measurements resume from"
        " `results/bench/`), or only regenerate this section from the JSON files:",
        "",
        "```",
        COMMAND,
        f"{COMMAND} --report-only",
        "```",
        "",
        "One workload by hand:",
        "",
        "```",
        "dcmlir tune docs/results/modules/dense_out.mlir --dims 1:128 --budget 400"
        " --db tune.jsonl -o plan.json",
        "dcmlir bench docs/results/modules/dense_out.mlir --plan plan.json"
        " --shapes 1:8,16,17,24,32,33,43,62,64,65,81,96,100,119,127,128 -o results/",
        "```",
        "",
    ]
    sync = [_load(n, "local-sync") for n in names]
    sync = [r for r in sync if r is not None]
    if sync:
        lines += _summary_table(sync, "local-sync")
    costs = _load_costs()
    if costs:
        lines += _cost_table(costs, names)
    task = [_load(n, "local-task") for n in names]
    task = [r for r in task if r is not None]
    if task:
        lines += [
            "### Thread scaling: `local-task` on every core",
            "",
            f"The same workloads with IREE's `local-task` runtime ({task[0].threads} threads),"
            " plans tuned on that device, numpy, torch and onnxruntime with the same thread"
            " count (the oracle and bucketing are single-thread measurements and are left out"
            f" here). Measured on {task[0].target}; tuning budget"
            f" {_task_budget(task[0].name)} per workload.",
            "",
            "Each thread pool is timed in a measuring process of its own (IREE, numpy's"
            " OpenBLAS, torch, onnxruntime), interleaved round by round, a sample taken once"
            " the other processes are quiet ([design.md](design.md) section 4; the"
            ' "Thread hygiene" section shows IREE\'s default timing the same alone and'
            " beside the peers). Before that isolation, all of them shared one process and"
            " this table swung by up to 40x on one shape (torch 15.5 ms and 0.38 ms at one"
            " T, on the EPYC).",
            "",
            *_processes_line(task),
            *_task_targets(task),
        ]
        lines += _summary_table(task, "local-task")
        one = [r for n in names if (r := _load(n, ONE_THREAD)) is not None]
        if one:
            lines += _thread_columns(one, task)
    for result in sync:
        lines += [
            f"### `{result.name}` (local-sync)",
            "",
            *markdown(result),
            "",
            f"![{result.name}](results/bench/local-sync/{result.name}.png)",
            "",
        ]
    for result in task:
        lines += [f"### `{result.name}` (local-task)", "", *markdown(result), ""]
    lines.append(END)
    return "\n".join(lines)


def _load(name: str, device: str) -> BenchResult | None:
    path = OUT / device / f"{name}.json"
    return load_result(path) if path.exists() else None


def _load_costs() -> list[dict[str, Any]]:
    path = OUT / "tuning_cost.json"
    return json.loads(path.read_text()) if path.exists() else []


def _summary_table(results: list[BenchResult], device: str) -> list[str]:
    names = [b for b in BASELINES if any(b in r.measured_baselines() for r in results)]
    lines = [
        f"### Geomean speedup over IREE's default ({device})",
        "",
        "| workload | weights | " + " | ".join(names) + " | dcmlir / oracle |",
        "|---|---|" + "---:|" * len(names) + "---:|",
    ]
    for result in results:
        cells = []
        for name in names:
            value = (
                result.geomean_speedup(name) if name in result.measured_baselines() else math.nan
            )
            cells.append(f"{value:.2f}x" if math.isfinite(value) else "–")
        oracle = (
            1 / result.geomean_ratio("dcmlir", "oracle")
            if "oracle" in result.measured_baselines()
            else math.nan
        )
        lines.append(
            f"| `{result.name}` | {result.weights} | "
            + " | ".join(cells)
            + f" | {oracle:.3f} |".replace("nan", "–")
        )
    if not any("oracle" in r.measured_baselines() for r in results):
        return [*lines, ""]
    return [
        *lines,
        "",
        "`oracle` is the best kernel of the codegen space measured at each T (the `cpu:`"
        " candidates, the weight read as it is). With a constant weight dcmlir's space also"
        " holds the packed and mmt4d families, which the oracle does not, so `dcmlir /"
        " oracle` can pass 1 there.",
        "",
    ]


def _thread_columns(one: list[BenchResult], two: list[BenchResult]) -> list[str]:
    """Every peer on one thread and on every core: geomean ms over the T both measured,
    and what the second thread gained (one-thread time over all-threads time)."""
    by_name = {r.name: r for r in two}
    pairs = [(r, by_name[r.name]) for r in one if r.name in by_name]
    if not pairs:
        return []
    threads = pairs[0][1].threads
    peers = [b for b in SCALING_BASELINES if b not in ("iree-static",)]
    lines = [
        f"### Every peer on one thread and on {threads}",
        "",
        f"Geomean time (us) over the T both runs measured, on `local-sync` (1 thread, plans"
        f" tuned there) and on `local-task` ({threads} threads, plans tuned there), and the"
        f" gain from {threads} threads (1-thread time / {threads}-thread time, geomean over T)."
        f" The one-thread run: `{COMMAND} --steps task1`.",
        "",
        "| workload | " + " | ".join(f"{p}: 1t / {threads}t (gain)" for p in peers) + " |",
        "|---|" + "---:|" * len(peers),
    ]
    for single, multi in pairs:
        cells = []
        for peer in peers:
            both = [
                (a.median_us, b.median_us)
                for shape in multi.shapes
                if (a := single.cell(shape, peer)) is not None
                and (b := multi.cell(shape, peer)) is not None
                and math.isfinite(a.median_us)
                and math.isfinite(b.median_us)
            ]
            if not both:
                cells.append("–")
                continue
            t1, tn = geomean(a for a, _ in both), geomean(b for _, b in both)
            gain = geomean(a / b for a, b in both)
            cells.append(f"{t1:.0f} / {tn:.0f} ({gain:.2f}x)")
        lines.append(f"| `{single.name}` | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _processes_line(results: list[BenchResult]) -> list[str]:
    """How many fresh processes each cell is the median of, when more than one."""
    counts = sorted({r.info.get("settings", {}).get("processes", 1) for r in results})
    if counts == [1]:
        return []
    return [
        f"Each cell is the median over {'/'.join(map(str, counts))} fresh measuring"
        " processes, timed one after another (`BenchSettings.processes`): on two threads"
        " a whole run's ratios move together, and one run of the same plan of `dense_out`"
        " gave 1.31x where three others gave 1.57-1.71x ([design.md](design.md) section 4,"
        " rule 10).",
        "",
    ]


def _task_budget(name: str) -> str:
    path = OUT / "local-task" / "plans" / f"{name}.tuning.json"
    return str(json.loads(path.read_text())["budget"]) if path.exists() else "?"


def _task_targets(results: list[BenchResult]) -> list[str]:
    """Issue 15's targets per workload: over IREE's default, never below IREE's own
    multi-versioning or per-shape builds, and against numpy at the same threads."""
    lines = [
        "Per workload: dcmlir's geomean speedup over IREE's default; the worst T of dcmlir"
        " against IREE's `specialization_ranges` build and its per-T static build (their"
        " time over dcmlir's: >= 1 where dcmlir is at least as fast) with how many T are"
        " below 0.97; and numpy's time over dcmlir's per T (>= 1: dcmlir faster).",
        "",
        "| workload | over default (geomean) | vs specialized: worst T, T < 0.97 |"
        " vs static: worst T, T < 0.97 | numpy / dcmlir: min, geomean, max |",
        "|---|---:|---|---|---|",
    ]
    for result in results:
        cells = []
        for peer in ("iree-specialized", "iree-static", "numpy"):
            ratios = _ratios(result, peer)
            if not ratios:
                cells.append("–")
            elif peer == "numpy":
                cells.append(
                    f"{min(ratios.values()):.2f}, {geomean(ratios.values()):.2f},"
                    f" {max(ratios.values()):.2f}"
                )
            else:
                worst = min(ratios, key=ratios.__getitem__)
                low = sum(v < 0.97 for v in ratios.values())
                cells.append(f"{ratios[worst]:.2f} (T={shape_label(worst)}), {low}")
        lines.append(
            f"| `{result.name}` | {result.geomean_speedup('dcmlir'):.2f}x | "
            + " | ".join(cells)
            + " |"
        )
    return [*lines, ""]


def _ratios(result: BenchResult, peer: str) -> dict[Shape, float]:
    """``peer``'s time over dcmlir's at each T where both ran."""
    found = {}
    for shape in result.shapes:
        mine, theirs = result.cell(shape, "dcmlir"), result.cell(shape, peer)
        if mine is None or theirs is None:
            continue
        if math.isfinite(mine.median_us) and math.isfinite(theirs.median_us):
            found[shape] = theirs.median_us / mine.median_us
    return found


def _cost_table(costs: list[dict[str, Any]], names: list[str]) -> list[str]:
    lines = [
        "### Tuning cost: dcmlir's search against per-shape exhaustive tuning",
        "",
        "Exhaustive: every candidate of the same space measured at each shape, with the"
        f" search's own settings ({SEARCH_ROUNDS} rounds of >= {SEARCH_MIN_TIME * 1000:.0f} ms)."
        f" At DietCode's 8 sampled T ({', '.join(map(str, DIETCODE_T))}) it was run; an unseen T"
        " then gets the kernel tuned at the next sampled T up. All 128 T: the measurement count"
        " is exact, the wall time estimated from the 8 measured per-shape times (interpolated"
        " over T); it is the oracle, so its quality is 1 by definition. Quality: geomean over"
        " the suite's T of (best time at T) / (time of the kernel the method picks at T), all"
        " from the oracle's records (one measuring session).",
        "",
        "| workload | dcmlir: measurements | wall | quality | exhaustive 8 T: measurements"
        " | wall | quality | exhaustive 128 T: measurements | wall (est.) | dcmlir saves (8 T)"
        " | dcmlir saves (128 T) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_name = {c["name"]: c for c in costs}
    for name in names:
        cost = by_name.get(name)
        if cost is None:
            continue
        d, e8, e128 = cost["dcmlir"], cost["exhaustive8"], cost["exhaustive128"]
        lines.append(
            f"| `{name}` | {d['measurements']} | {d['seconds']:.0f} s | {d['quality']:.3f}"
            f" | {e8['measurements']} | {e8['seconds']:.0f} s | {e8['quality']:.3f}"
            f" | {e128['measurements']} | {e128['seconds_estimate'] / 60:.0f} min"
            f" | {e8['seconds'] / d['seconds']:.2f}x time,"
            f" {e8['measurements'] / d['measurements']:.1f}x measurements"
            f" | {e128['seconds_estimate'] / d['seconds']:.1f}x time,"
            f" {e128['measurements'] / d['measurements']:.0f}x measurements |"
        )
    return [*lines, ""]


def write_docs(names: list[str]) -> None:
    doc = DOCS / "benchmarks.md"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    section = report(names)
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    doc.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    texts = bert_workloads()
    parser.add_argument("--workloads", default=",".join(texts))
    parser.add_argument("--budget", type=int, default=400, help="tuning budget per workload")
    parser.add_argument(
        "--steps",
        default="sync,cost,task",
        help="sync: tune + bench on local-sync; cost: exhaustive tuning cost; task: local-task;"
        " task1: task's baselines on one thread (the thread-scaling columns)",
    )
    parser.add_argument("--report-only", action="store_true", help="only regenerate the docs")
    parser.add_argument(
        "--scratch",
        metavar="DIR",
        help="a trial run: outputs and records under DIR, docs/ left alone",
    )
    args = parser.parse_args()
    if args.scratch:
        global OUT, RECORDS, DOCS
        OUT, RECORDS = Path(args.scratch) / "out", Path(args.scratch) / "records"
        DOCS = Path(args.scratch)
    names = [n.strip() for n in args.workloads.split(",")]
    unknown = [n for n in names if n not in texts]
    if unknown:
        parser.error(f"unknown workload {unknown[0]} (known: {', '.join(texts)})")
    if args.report_only:
        write_docs(list(texts))
        return 0
    RECORDS.mkdir(parents=True, exist_ok=True)
    steps = {s.strip() for s in args.steps.split(",")}
    modules = DOCS / "results" / "modules"
    modules.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = modules / f"{name}.mlir"
        source.write_text(texts[name])
        if "sync" in steps or "cost" in steps:
            tuning = tune(name, source, "local-sync", args.budget)
        if "sync" in steps:
            run_bench(name, source, "local-sync", tuple(BASELINES))
        if "cost" in steps:
            cost = tuning_cost(name, source, tuning)
            costs = [c for c in _load_costs() if c["name"] != name] + [cost]
            (OUT / "tuning_cost.json").write_text(json.dumps(costs, indent=1) + "\n")
        if "task" in steps:  # tuned as the bench times it: a projection's weight constant
            tune(name, as_timed(name, source), "local-task", args.budget)
            run_bench(name, source, "local-task", SCALING_BASELINES)
        if "task1" in steps:  # the same baselines on one thread, plans tuned there
            tune(name, as_timed(name, source), "local-sync", args.budget, ONE_THREAD)
            run_bench(name, source, "local-sync", SCALING_BASELINES, ONE_THREAD)
        write_docs(list(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
