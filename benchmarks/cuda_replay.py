"""Replay a GPU run's tuning on a machine without a GPU, and compare the plans.

``benchmarks/cuda_benchmark.py`` keeps its tuning records (``cuda_records.jsonl``) and
each workload's plan and per-T times (``cuda_benchmark.json``). The search is
deterministic for a seed, so running it again on those records, with
``dcmlir.testing.ReplayMeasurer`` answering every measurement from them, retraces the
run. A change to the cost model, the selection or the tree is then seen on the GPU's
own numbers. A pair the search asks for that the run did not measure (the search has
changed since: 2026-11-29's decisive picks asked `cuda:wg16x64:t1x4:k8:p` at T = 12) is
answered as a failed run there (``unrecorded="failed"``): that kernel is left out of that
shape, never given a guessed time.

For each workload it prints both trees' depths, how many T changed kernel, and, at each
T where the measured dispatch ran below ``--below`` times IREE's default (device time),
the kernel the run dispatched and the kernel the current code would dispatch:

    python benchmarks/cuda_replay.py [--results docs/results] [--below 0.97]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

from bert_workloads import workloads as bert_workloads

from dcmlir.cost_model import CostModel
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.driver.loading import load_model
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.records import RecordDatabase
from dcmlir.search.shape_generic import SearchSettings, ShapeGenericSearch
from dcmlir.space import workload_space
from dcmlir.target import CudaTarget, target_from_json
from dcmlir.testing.replay import ReplayMeasurer, ReplayTable


def kernel_at(plan: WorkloadPlan, t: int) -> str:
    chosen = plan.select({d.loop: t for d in plan.dims})
    return chosen.candidate_key if chosen is not None else "default"


def replayed_plan(name: str, result: dict, records: list, scratch: Path) -> WorkloadPlan:
    """The plan the current code makes from the run's records (its budget, seed 0)."""
    target = target_from_json(result["plan"]["target"])
    if not isinstance(target, CudaTarget):
        raise SystemExit(f"cuda_replay: {name}'s plan is for {target.key()}, not a CUDA target")
    source = scratch / f"{name}.mlir"
    source.write_text(bert_workloads()[name])
    (workload,) = load_model(source, ["1:128"], io.StringIO()).workloads
    table = ReplayTable.from_records(records, workload.key, target.key())
    db = RecordDatabase(scratch / f"{name}.jsonl")
    measurer = ReplayMeasurer(workload, table, db, unrecorded="failed")  # the run's pairs only
    model = CostModel(workload, target, target.sm_count, 0, route="config")
    search = ShapeGenericSearch(
        workload,
        measurer,
        model,
        workload_space(target, workload),
        SearchSettings(budget=result["measurements"], seed=0, exact_share=0),
        stream=io.StringIO(),
        shapes=workload.tied_shapes(),
    ).run()
    return workload_plan(search, None, "config")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="docs/results", help="folder of the run's files")
    parser.add_argument("--below", type=float, default=0.97, metavar="RATIO")
    args = parser.parse_args(argv)
    folder = Path(args.results)
    records = RecordDatabase(folder / "cuda_records.jsonl").load()
    results = json.loads((folder / "cuda_benchmark.json").read_text())["results"]
    with tempfile.TemporaryDirectory() as scratch:
        for result in results:
            name = result["name"]
            (measured,) = Plan.from_json(result["plan"]).workloads
            now = replayed_plan(name, result, records, Path(scratch))
            changed = sum(kernel_at(measured, t) != kernel_at(now, t) for t in range(1, 129))
            print(
                f"{name}: tree depth {measured.tree.depth} -> {now.tree.depth}, "
                f"{changed} T of 128 change kernel"
            )
            for row in result["rows"]:
                device = row["device_us"]
                ratio = device["iree_default"] / device["dcmlir"]
                if ratio >= args.below:
                    continue
                t = row["t"]
                print(
                    f"  T={t}: measured {ratio:.2f}x of IREE's default with "
                    f"{kernel_at(measured, t)}; now {kernel_at(now, t)}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
