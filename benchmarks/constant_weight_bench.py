"""Benchmark: the six BERT-base workloads as a model runs them, against every peer.

The four projections take their weight as a module constant (as in a model, where IREE
hoists work on it: data tiling packs it once at load); the two attention batch matmuls
have no weight (both operands are activations) and run as they are. For each workload
(``benchmarks/bert_workloads.py``, T dynamic in 1..128):

1. tune the module as it is measured (the constant-weight form for a projection, so the
   packed family is in its space) with ``dcmlir.tune``, budget ``--budget``;
2. ``dcmlir bench`` it against IREE's default, IREE data tiling, onnxruntime, numpy and
   torch (one thread, ``local-sync``), side by side in one process, interleaved per T,
   every output checked against a float64 reference.

Outputs: ``docs/results/constant_weights/<workload>.{json,md,png}`` and the section of
docs/benchmarks.md between the ``constant-weights`` markers (ratios of each column's
time to the faster of IREE default and IREE data tiling, per T and as a geomean; the
worst T). Records go to ``results/constant_weights/`` (not committed; a rerun resumes).

    .venv/bin/pip install -e '.[torch,bench]'
    .venv/bin/python benchmarks/constant_weight_bench.py --budget 120
    .venv/bin/python benchmarks/constant_weight_bench.py --report-only
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from bert_workloads import DENSE
from bert_workloads import workloads as bert_workloads

import dcmlir
from dcmlir.bench import BenchResult, BenchSettings, bench, load_result, write_outputs
from dcmlir.bench.weights import weight_array, with_constant_weight
from dcmlir.driver import load_workloads

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "constant_weights"
RECORDS = ROOT / "results" / "constant_weights"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- constant-weights:begin -->", "<!-- constant-weights:end -->"
RANGE = "1:128"
SHAPES = sorted({*range(1, 9), 13, 16, 17, 24, 31, 32, 33, 48, 64, 65, 77, 96, 100, 112, 127, 128})
BASELINES = ("dcmlir", "iree-default", "iree-data-tiling", "onnxruntime", "numpy", "torch")
PEERS = ("iree-default", "iree-data-tiling")  # the best IREE build a user picks from
COMMAND = "python benchmarks/constant_weight_bench.py"


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def tuned_module(name: str, text: str) -> Path:
    """The module the workload is tuned on: with its weight a constant for a projection."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    source = RECORDS / f"{name}.mlir"
    source.write_text(text)
    if name not in DENSE:
        return source
    constant = RECORDS / f"{name}-constant.mlir"
    constant.write_text(weight_as_constant(source))
    return constant


def weight_as_constant(source: Path, dims: str = RANGE) -> str:
    """The projection in ``source`` with its weight a module constant, as a model has it
    (:func:`dcmlir.bench.weights.with_constant_weight`, the fixed random weight); ``dims``:
    the range its dynamic dim is read with."""
    _, (workload,), _ = load_workloads(source, [dims], sys.stderr)
    return with_constant_weight(
        source.read_text(), weight_array(workload), str(workload.operand_type(1))
    )


def run(name: str, text: str, budget: int) -> BenchResult:
    source = RECORDS / f"{name}.mlir"
    tuned = tuned_module(name, text)
    plan = RECORDS / f"{name}.plan.json"
    say(f"{name}: tuning {tuned.name}, budget {budget}")
    dcmlir.tune(
        tuned, dims=[RANGE], budget=budget, db=RECORDS / "tune.jsonl", output=plan, min_time=0.03
    )
    say(f"{name}: timing {', '.join(BASELINES)} at {len(SHAPES)} T")
    weights = "constant" if name in DENSE else "argument"
    result = bench(
        source,
        plan=plan,
        dims=[RANGE],
        shapes=[(t,) for t in SHAPES],
        settings=BenchSettings(baselines=BASELINES, weights=weights),
        db=RECORDS / "oracle.jsonl",
        name=name,
    )
    write_outputs(result, OUT)
    return result


def best_iree(result: BenchResult, shape: tuple[int, ...]) -> float:
    times = [c.median_us for p in PEERS if (c := result.cell(shape, p)) is not None]
    return min(times) if times else math.nan


def ratios(result: BenchResult, baseline: str) -> list[float]:
    """Time of ``baseline`` over the faster IREE build, per T: the median of per-round
    ratios (the rounds are interleaved, so a slow moment of the machine hits both)."""
    found = []
    for shape in result.shapes:
        cell = result.cell(shape, baseline)
        builds = [c for p in PEERS if (c := result.cell(shape, p)) is not None]
        if cell is None or not math.isfinite(cell.median_us) or not builds:
            continue
        best = min(builds, key=lambda c: c.median_us)
        if len(cell.samples_us) != len(best.samples_us) or not cell.samples_us:
            found.append(cell.median_us / best.median_us)  # no rounds to pair
            continue
        pairs = zip(cell.samples_us, best.samples_us, strict=True)
        found.append(statistics.median(a / b for a, b in pairs))
    return found


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def section(results: list[BenchResult]) -> str:
    names = [b for b in BASELINES if any(b in r.measured_baselines() for r in results)]
    lines = [
        BEGIN,
        "## The six BERT-base workloads with constant weights, against every peer (issue 13)",
        "",
        f"Reproduce: `{COMMAND} --budget {results[0].info.get('budget', '?')}`; per workload "
        "tables and plots in `docs/results/constant_weights/`. The projections' weight is a "
        "module constant (as in a model: IREE's data tiling packs it once, at load; dcmlir's "
        "packed kernels read it packed); the attention batch matmuls have no weight. One "
        "thread (`local-sync`), side by side in one process, interleaved per T, every output "
        "checked. Each cell: geomean over the T of the column's time / the faster of IREE "
        "default and IREE data tiling at that T (< 1: faster than the best IREE build); "
        "`worst`: the largest such ratio over the T, and where.",
        "",
        f"Machine: {results[0].target}.",
        "",
        "| workload | " + " | ".join(names) + " | dcmlir worst T |",
        "|---|" + "---:|" * len(names) + "---|",
    ]
    for result in results:
        cells = []
        for name in names:
            if name in result.unavailable:
                cells.append("n/a")
                continue
            cells.append(f"{geomean(ratios(result, name)):.2f}")
        own = [(r, s) for s, r in zip(result.shapes, ratios(result, "dcmlir"), strict=False)]
        worst = max(own) if own else (math.nan, ())
        label = ",".join(map(str, worst[1]))
        lines.append(
            f"| `{result.name}` | " + " | ".join(cells) + f" | {worst[0]:.2f} (T={label}) |"
        )
    unavailable = sorted({f"{b}: {why}" for r in results for b, why in r.unavailable.items()})
    if unavailable:
        lines += ["", "Not measured: " + "; ".join(unavailable)]
    lines += [
        "",
        *[f"![{r.name}](results/constant_weights/{r.name}.png)" for r in results],
        END,
    ]
    return "\n".join(lines)


def write_docs(names: list[str]) -> None:
    results = [load_result(OUT / f"{n}.json") for n in names if (OUT / f"{n}.json").exists()]
    if not results:
        return
    replace_section(DOC, BEGIN, END, section(results))


def replace_section(doc: Path, begin: str, end: str, block: str) -> None:
    """Put ``block`` (which starts with ``begin`` and ends with ``end``) in ``doc``, in
    place of the section between those markers, or at the end."""
    text = doc.read_text()
    if begin in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def main() -> int:
    texts = bert_workloads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(texts))
    parser.add_argument("--budget", type=int, default=120, help="tuning budget per workload")
    parser.add_argument("--report-only", action="store_true", help="only regenerate the docs")
    args = parser.parse_args()
    names = args.workloads.split(",")
    for name in names:
        if name not in texts:
            parser.error(f"unknown workload '{name}' (known: {', '.join(texts)})")
        if not args.report_only:
            result = run(name, texts[name], args.budget)
            result.info["budget"] = args.budget
            write_outputs(result, OUT)
    write_docs(list(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
