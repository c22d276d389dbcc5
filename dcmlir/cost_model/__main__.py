"""``python -m dcmlir.cost_model RECORDS``: the quality of the cost model on recorded timings.

The numbers of docs/cost_model.md come from here: one report per workload of
the module and target of the records (see :func:`dcmlir.cost_model.evaluate`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from dcmlir.cost_model.quality import QualityReport, evaluate
from dcmlir.cost_model.terms import parallel_units_for
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.records import Record, RecordDatabase
from dcmlir.target import Target, target_from_json
from dcmlir.workload import Workload, workloads

__all__ = ["main"]

PROG = "python -m dcmlir.cost_model"


def _workloads_of(mlir: str) -> list[Workload]:
    """The contractions of the module the records measured (a record names only a key)."""
    text = Path(mlir).read_text(encoding="utf-8")
    with ir.Context():
        found = [w for _, w in workloads(parse_module(text).operation, mlir)]
    return [w for w in found if isinstance(w, Workload)]


def _driver_units(target: Target, records: Sequence[Record]) -> int:
    """``P`` of the runs the records come from; one driver only, else it is ambiguous."""
    drivers = {str(r.extra.get("runner", "local-sync")) for r in records}
    if len(drivers) != 1:
        raise SystemExit(
            f"records ran on several drivers ({', '.join(sorted(drivers))}): give --parallel-units"
        )
    return parallel_units_for(target, drivers.pop())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dcmlir.cost_model RECORDS``: the quality of the model on recorded timings."""
    parser = argparse.ArgumentParser(prog=PROG, description=main.__doc__)
    parser.add_argument("records", help="a JSON-lines record file")
    parser.add_argument(
        "--mlir",
        default=str(resources.files("dcmlir") / "examples" / "bert_dense.mlir"),
        help="the module whose workloads the records measured (default: the BERT dense layer)",
    )
    parser.add_argument("--parallel-units", type=int, help="P (default: from the records' driver)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    database = RecordDatabase(args.records)
    all_records = [r for r in database.records(only_current_version=False) if r.ok]
    found = 0
    for workload in _workloads_of(args.mlir):
        records = [r for r in all_records if r.workload == workload.key]
        for target_key in sorted({r.target_key for r in records}):
            group = [r for r in records if r.target_key == target_key]
            target = target_from_json(group[0].target)
            units = args.parallel_units or _driver_units(target, group)
            report = evaluate(workload, target, group, units, args.seed)
            found += 1
            if args.json:
                print(
                    json.dumps(
                        {"workload": workload.key, "target": target_key, **report.to_json()},
                        indent=1,
                    )
                )
                continue
            _print_report(workload, target_key, units, report)
    if not found:
        print(f"no records of the workloads in {args.mlir}", file=sys.stderr)
        return 1
    return 0


def _print_report(workload: Workload, target_key: str, units: int, report: QualityReport) -> None:
    """One row per shape, a column per score, then the mean and the worst of each."""
    print(f"{workload.describe()}\n  target {target_key}, P = {units}")
    print(
        f"  trained on {report.train_pairs} cherry-picked pairs, scored on "
        f"{report.held_out_pairs} held-out pairs; default tile {report.default_tile}, "
        f"curve c = {report.curve.below:g} / {report.curve.above:g}"
    )
    columns = [
        ("rho", report.rank_correlation),
        ("top1-regret", report.regret),
        ("top3-regret", report.regret_top3),
        ("error-x", report.error),
        ("unmeasured-rho", report.unmeasured_rank_correlation),
        ("unmeasured-top1", report.unmeasured_regret),
    ]
    print("  " + f"{'shape':8s}" + "".join(f"{name:>16s}" for name, _ in columns))
    shapes = sorted({s for _, scores in columns for s in scores.per_shape})
    for shape in shapes:
        cells = "".join(f"{scores.per_shape.get(shape, math.nan):16.3f}" for _, scores in columns)
        print("  " + f"{','.join(map(str, shape)):8s}" + cells)
    print("  " + f"{'mean':8s}" + "".join(f"{scores.mean:16.3f}" for _, scores in columns))
    print("  " + f"{'worst':8s}" + "".join(f"{scores.worst:16.3f}" for _, scores in columns))


if __name__ == "__main__":
    sys.exit(main())
