"""The H100 run's tuning, replayed without a GPU (benchmarks/cuda_replay.py).

The run dispatched a kernel at T = 1-3 of ``dense_qkv`` that was 0.60-0.82x of IREE's
default there (docs/benchmarks-cuda.md). The search had kept the default at those T; a
tree within 1% of the selection overall merged them into the kernel's range. Replayed on
the run's own records, the tree must give them back to the default.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from cuda_replay import kernel_at, replayed_plan  # noqa: E402

from dcmlir.dispatch import Plan  # noqa: E402
from dcmlir.records import RecordDatabase  # noqa: E402


def test_the_small_shapes_the_h100_run_lost_go_back_to_the_default(tmp_path: Path) -> None:
    records = RecordDatabase(RESULTS / "cuda_records.jsonl").load()
    results = json.loads((RESULTS / "cuda_benchmark.json").read_text())["results"]
    result = next(r for r in results if r["name"] == "dense_qkv")
    (measured,) = Plan.from_json(result["plan"]).workloads
    slower = [
        row["t"]
        for row in result["rows"]
        if row["device_us"]["iree_default"] / row["device_us"]["dcmlir"] < 0.9
    ]
    assert slower == [1, 2, 3]
    assert all(kernel_at(measured, t) != "default" for t in slower)
    now = replayed_plan("dense_qkv", result, records, tmp_path)
    assert [kernel_at(now, t) for t in slower] == ["default"] * 3
    assert now.report.worst_slowdown is not None and now.report.worst_slowdown <= 0.03
