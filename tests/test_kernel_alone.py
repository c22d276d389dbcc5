"""benchmarks/kernel_alone.py: a plan cut down to one of its kernels over the whole range."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from kernel_alone import alone_plan


def test_a_plan_cut_down_to_one_kernel_runs_it_everywhere_and_nothing_else(tmp_path) -> None:
    kernel = {"index": 1, "candidate_key": "mmt4d:m4n16k1", "route": "config"}
    tree = {"loop": 1, "threshold": 8, "left": {"kernel": 0}, "right": {"kernel": 1}}
    workload = {
        "key": "w",
        "kernels": [{"index": 0, "candidate_key": "default"}, kernel],
        "tree": {"loops": [1], "root": tree},
        "exact": [{"shape": [1]}],
        "shapes": [[1], [2]],
    }
    source = tmp_path / "plan.json"
    source.write_text(json.dumps({"format": 1, "workloads": [workload]}))
    (cut,) = json.loads(
        alone_plan(source, kernel["candidate_key"], tmp_path / "a.json").read_text()
    )["workloads"]
    assert cut["kernels"] == [dict(kernel, index=0)]
    assert cut["tree"] == {"loops": [1], "root": {"kernel": 0}}
    assert cut["exact"] == [] and cut["shapes"] == []
    with pytest.raises(SystemExit, match="runs no kernel datatiled"):
        alone_plan(source, "datatiled", tmp_path / "b.json")
