"""On paper: how the occupancy model says the plans change on 8, 16 and 64 cores (issue 15).

No such machine is here, so this predicts, it does not measure. For each BERT-base
workload it fits dcmlir's cost model to the records of the ``local-task`` tuning on
this machine's cores (``P`` = 2 here: ``bench_suite.py --steps task``), then keeps each
kernel's fitted throughput ``f_MK`` and only changes ``P`` in the occupancy term
``occ = c*G / ((c-1)*G + ceil(G/P)*P)`` (``G``: the kernel's tile grid at that T).
Per ``P`` it prints which kernel the model would pick at T = 1..128, how many T change
against ``P`` = 2, and the largest tile grid the space has at small T: a grid below ``P``
leaves cores idle whatever is picked.

What it leaves out, and what a bigger machine must check: per-core throughput is assumed
unchanged (no shared memory bandwidth or cache contention, which grow with cores), and
the space's workgroup areas (1024 and 4096 elements) are not scaled with ``P``.

    .venv/bin/python benchmarks/scaling_note.py [--records FILE]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from bert_workloads import workloads as bert_workloads
from constant_weight_bench import replace_section

from dcmlir.cost_model import CostModel, tile_grid
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.records import RecordDatabase
from dcmlir.space import DefaultCandidate, space_for
from dcmlir.target import CpuTarget, target_from_json
from dcmlir.workload import Workload, workloads

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "results" / "bench" / "local-task" / "tune_records.jsonl"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- scaling-note:begin -->", "<!-- scaling-note:end -->"
CORES = (2, 8, 16, 64)
SMALL_T = (1, 8, 32)


def workload_of(text: str) -> Workload:
    with ir.Context():
        ((_, found),) = list(workloads(parse_module(text).operation))
    assert isinstance(found, Workload)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    db = RecordDatabase(args.records)
    db.load()
    measured = [r for r in db.records() if r.ok and r.extra.get("runner") == "local-task"]
    if not measured:
        raise SystemExit(f"scaling_note: no local-task timings in {args.records}")
    target_json = measured[0].target
    threads = int(target_json["threads"])
    target = target_from_json(target_json)
    assert isinstance(target, CpuTarget)
    space = [c for c in space_for(target) if not isinstance(c, DefaultCandidate)]
    lines = [
        BEGIN,
        f"Fitted to {len(measured)} `local-task` timings on {threads} threads"
        f" ({target.describe()}); `P` changed on paper only. Command:"
        " `python benchmarks/scaling_note.py`.",
        "",
        "| workload | occupancy curve c (below P / above P), fitted? | P | distinct picks"
        f" over T=1..128 | T whose pick changes vs P={threads} | largest grid in the space"
        f" at T={'/'.join(map(str, SMALL_T))} | predicted occupancy of the pick at"
        f" T={'/'.join(map(str, SMALL_T))} |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for name, text in bert_workloads().items():
        workload = workload_of(text)
        mine = [r for r in measured if r.workload == workload.key]
        if not mine:
            print(f"scaling_note: {name}: no records, skipped", file=sys.stderr)
            continue
        model = CostModel(workload, target, threads, route="config")
        model.update(mine)
        ranks = len(workload.dynamic_dims)
        shapes = [(t,) * ranks for t in range(1, 129)]
        small = [(t,) * ranks for t in SMALL_T]
        largest = [max(tile_grid(workload, c, s) or 0 for c in space) for s in small]
        fitted = getattr(model, "curve_calibrated", (False, False))
        curve = (
            f"{model.curve.below:.2f} / {model.curve.above:.2f},"
            f" {'/'.join('yes' if f else 'prior' for f in fitted)}"
        )
        baseline: list[int] | None = None
        for cores in CORES:
            model.parallel_units = cores
            picks = [int(i) for i in np.argmin(model.predict(space, shapes), axis=1)]
            baseline = baseline or picks
            changed = sum(a != b for a, b in zip(picks, baseline, strict=True))
            occupancy = [
                model.curve(tile_grid(workload, space[picks[t - 1]], s) or 1, cores)
                for t, s in zip(SMALL_T, small, strict=True)
            ]
            lines.append(
                f"| `{name}` | {curve} | {cores} | {len(Counter(picks))} | {changed}"
                f" | {' / '.join(map(str, largest))}"
                f" | {' / '.join(f'{o:.2f}' for o in occupancy)} |"
            )
    lines.append(END)
    print("\n".join(lines))
    if not args.no_docs:
        replace_section(DOC, BEGIN, END, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
