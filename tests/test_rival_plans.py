"""The rival plan the guard times beside the tuned one: the workloads searched again
without the explicit mmt4d kernels."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
from helpers import DENSE

import dcmlir
from dcmlir.driver.outcome import WorkloadReport
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.driver.rival_plans import runs_explicit_kernels, without_explicit_kernels
from dcmlir.search.outcome import SearchResult
from dcmlir.space import Mmt4dCandidate
from dcmlir.workload import Workload


def _report(tmp_path: Path) -> WorkloadReport:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    report = dcmlir.tune(
        source,
        dims=["1:16"],
        budget=8,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=io.StringIO(),
        placement=False,
        min_time=0.002,
        rounds=2,
    )
    (found,) = report.workloads
    return found


def _running_explicit(found: WorkloadReport, kernel: Mmt4dCandidate) -> WorkloadReport:
    """``found`` with ``kernel`` in its space and picked at every shape."""
    search = found.search
    column = np.full((len(search.shapes), 1), 1e-6)
    picks = dataclasses.replace(
        search,
        candidates=[*search.candidates, kernel],
        kernels=[kernel],
        choice=dict.fromkeys(search.shapes, 0),
        estimate=np.hstack([search.estimate, column]),
        predicted=np.hstack([search.predicted, column]),
    )
    return WorkloadReport(found.workload, picks, workload_plan(picks, None, "config"))


def test_a_plan_running_explicit_kernels_is_searched_again_without_them(tmp_path: Path) -> None:
    found = _report(tmp_path)
    explicit = _running_explicit(found, Mmt4dCandidate(8, 32))
    assert runs_explicit_kernels([explicit]) and not runs_explicit_kernels([found])
    asked: list[tuple[Workload, frozenset[str]]] = []

    def search_without(workload: Workload, left_out: frozenset[str]) -> SearchResult:
        asked.append((workload, left_out))
        return found.search

    # in the space but not in the plan: searched again too (they took part of its budget)
    in_space = dataclasses.replace(explicit, plan=found.plan)
    rival = without_explicit_kernels([explicit, found, in_space], search_without, None, "config")
    left_out = frozenset({"mmt4d:m8n32k1"})
    assert asked == [(found.workload, left_out), (found.workload, left_out)]
    assert rival[1] is found  # no explicit kernel in its space: as it is
    assert not runs_explicit_kernels(rival)
    assert rival[0].plan.kernels == rival[2].plan.kernels == found.plan.kernels
