"""The guard: the tuned module beside IREE's builds, and IREE's build kept where it is faster."""

from __future__ import annotations

import dataclasses
import io
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from helpers import DENSE

import dcmlir
from dcmlir.dispatch import Plan
from dcmlir.driver.guard_patches import next_kernels
from dcmlir.driver.guarding import (
    RIVAL,
    TILED,
    GuardSettings,
    _behind,
    _losses,
    _ratio,
    _rival_over_tuned,
    cells,
    guard_plan,
    guard_points,
    patched,
    swapped,
)
from dcmlir.driver.module_timing import FEWEST_ROUNDS, timed_side_by_side
from dcmlir.driver.outcome import WorkloadReport
from dcmlir.driver.placing import timed_range
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.driver.roles import Roles
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate

FAST = {"min_time": 0.002, "rounds": 2}


def test_cells_split_between_points_in_log_extents() -> None:
    found = cells([1, 4, 16, 128], 1, 128)
    assert found == {1: (1, 2), 4: (3, 8), 16: (9, 45), 128: (46, 128)}
    covered = [t for low, high in found.values() for t in range(low, high + 1)]
    assert covered == list(range(1, 129))  # every extent in one cell


def _tuned(tmp_path: Path, stream: io.StringIO, guard: bool = True) -> dcmlir.TuneReport:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    return dcmlir.tune(
        source,
        dims=["1:24"],
        budget=16,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=stream,
        placement=False,
        guard=guard,
        **FAST,
    )


def test_guard_points_cover_small_t_and_every_stretch(tmp_path: Path) -> None:
    report = _tuned(tmp_path, io.StringIO())
    points = guard_points(report.plan, 96)
    assert timed_range(report.plan) == (1, 24)  # the whole range, whatever the search measured
    assert points == sorted(set(points)) and points[0] == 1
    assert set(range(1, 17)) <= set(points)  # every T up to 16
    (workload,) = report.plan.workloads
    runs = {t: workload.tree.select((t,)) for t in range(1, points[-1] + 1)}
    edges = [t for t in runs if t - 1 in runs and runs[t - 1] != runs[t]]
    assert set(edges) <= set(points)  # a stretch's first T, as the dispatch runs it, is timed
    assert len(guard_points(report.plan, 5)) == 5


def test_a_patch_runs_the_build_in_the_cell_of_the_kernel_that_lost(tmp_path: Path) -> None:
    report = _tuned(tmp_path, io.StringIO())
    (found,) = report.workloads
    search = found.search
    ran = found.plan.tree.select((9,))
    kernel = found.plan.kernels[ran].candidate
    build = next(b for b in (DataTiledCandidate(), DefaultCandidate()) if b.key() != kernel.key())
    result = patched(found, (8, 12), 9, build, 1.5)
    assert result is not None
    index = [k.key() for k in result.kernels].index(build.key())
    known = [k.key() for k in search.kernels]
    for shape in search.shapes:
        was = search.kernels[search.choice[shape]].key()
        runs = found.plan.kernels[found.plan.tree.select(shape)].candidate.key()
        now = result.choice[shape]
        if 8 <= shape[0] <= 12 and runs == kernel.key():  # what the plan runs there
            assert now == index
            # the tree keeps it: its estimate is the kernel's over the ratio
            before = search.kernel_cost(shape, known.index(runs))[0]
            assert result.kernel_cost(shape, now)[0] == pytest.approx(before / 1.5)
        else:
            assert result.kernels[now].key() == was
    plan = workload_plan(result, None, "config")
    assert plan.kernels[plan.tree.select((9,))].candidate.key() == build.key()
    # a tree of one leaf runs one kernel at every T, whatever the search picked there: the
    # patch takes each T of the cell where that kernel runs (what the plan runs, not the picks)
    flat = workload_plan(search, 0, "config")
    (only,) = {flat.kernels[flat.tree.select(shape)].candidate.key() for shape in search.shapes}
    other = next(b for b in (DataTiledCandidate(), DefaultCandidate()) if b.key() != only)
    result = patched(WorkloadReport(found.workload, search, flat), (8, 12), 9, other, 1.5)
    assert result is not None
    cell = [shape for shape in search.shapes if 8 <= shape[0] <= 12]
    assert {result.kernels[result.choice[shape]].key() for shape in cell} == {other.key()}
    # the build already running there: nothing to patch
    assert patched(WorkloadReport(found.workload, result, plan), (8, 12), 9, build, 1.5) is None


def test_where_the_plan_ran_the_build_that_won_its_next_kernels_take_the_cell(
    tmp_path: Path,
) -> None:
    """Data tiling as one branch of the dispatch is not IREE's data-tiled build of the
    model: where the plan already ran it and lost to that build, the plan's fastest other
    kernel at each shape of the cell takes it (by the search's estimate), IREE's builds
    never."""
    (found,) = _tuned(tmp_path, io.StringIO()).workloads
    search, build = found.search, DataTiledCandidate()
    keys = [c.key() for c in search.candidates]
    codegen = [c for c in search.candidates if not isinstance(c, DefaultCandidate | type(build))]
    first, second = codegen[:2]
    estimate = search.estimate.copy()
    for row, shape in enumerate(search.shapes):
        estimate[row, keys.index(build.key())] = 1.0
        estimate[row, keys.index(first.key())] = 1.02 if shape[0] < 10 else 1.2
        estimate[row, keys.index(second.key())] = 1.05 if shape[0] < 12 else 1.15
        estimate[row, keys.index(DefaultCandidate().key())] = 0.9  # an IREE build: never next
    kernels = [build, first, second, DefaultCandidate()]
    choice = {shape: 0 for shape in search.shapes}  # data tiling at every T
    runs_tiling = dataclasses.replace(
        search, kernels=kernels, choice=choice, estimate=estimate, measured={}
    )
    report = WorkloadReport(found.workload, runs_tiling, workload_plan(runs_tiling, None, "config"))
    assert next_kernels(report, (8, 12), 9, DefaultCandidate(), 1.2) is None  # not what ran
    result = next_kernels(report, (8, 12), 9, build, 1.2)
    assert result is not None
    # lost to the rival plan: whichever IREE build the plan ran there
    rival_lost = next_kernels(report, (8, 12), 9, None, 1.2)
    assert rival_lost is not None and rival_lost.choice == result.choice
    for shape in search.shapes:
        now = result.kernels[result.choice[shape]]
        if not 8 <= shape[0] <= 11:  # T = 12: both more than NEXT_WITHIN behind
            assert now == build
            continue
        assert now == (first if shape[0] < 10 else second)
        assert result.kernel_cost(shape, result.choice[shape])[0] == pytest.approx(1.0 / 1.2)
    plan = workload_plan(result, None, "config")
    assert plan.kernels[plan.tree.select((9,))].candidate == first
    alone = dataclasses.replace(runs_tiling, kernels=[build, DefaultCandidate()])
    report = WorkloadReport(found.workload, alone, workload_plan(alone, None, "config"))
    assert next_kernels(report, (8, 12), 9, build, 1.2) is None  # no other kernel: unchanged


def test_tune_with_the_guard_times_the_module_beside_iree(tmp_path: Path) -> None:
    stream = io.StringIO()
    with Roles(guard=guard_plan).in_scope():  # the real guard (the suite keeps the reports)
        report = _tuned(tmp_path, stream)
    text = stream.getvalue()
    assert f"dcmlir: guard: timed beside iree-default, {TILED} at" in text, text
    ratios = text.split("T:ratio: ")[1].split()
    assert [int(r.split(":")[0]) for r in ratios][:3] == [1, 2, 3]
    assert report.plan.workloads


def test_tune_without_the_guard_prints_nothing_of_it(tmp_path: Path) -> None:
    stream = io.StringIO()
    with Roles(guard=guard_plan).in_scope():
        _tuned(tmp_path, stream, guard=False)
    assert "guard" not in stream.getvalue()


class _Sleeper:
    """A stand-in for a loaded build: each call sleeps ``seconds`` and is counted."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.calls = seconds, 0

    def prepare(self, arrays: object) -> object:
        return arrays

    def invoke(self, prepared: object) -> None:
        self.calls += 1
        time.sleep(self.seconds)


def test_long_calls_get_fewer_rounds_but_never_under_the_floor() -> None:
    """12 rounds of a whole model's 100-ms calls at 96 points took a 12-layer GPT-2's guard
    20 minutes; under ``point_seconds`` a build's rounds are cut, to FEWEST_ROUNDS at least,
    and short calls keep every round."""
    inputs: dict[int, list[np.ndarray]] = {1: [np.zeros(1)]}
    slow = {"a": _Sleeper(0.02), "b": _Sleeper(0.02)}
    times = timed_side_by_side(slow, inputs, 12, 0.0, point_seconds=0.1)
    assert slow["b"].calls == 2 * FEWEST_ROUNDS  # an untimed and a timed call per round
    assert slow["a"].calls == 2 * FEWEST_ROUNDS + 1  # and the first call, timed once
    assert 0.015 < times["a"][1] < 0.2
    fast = {"a": _Sleeper(0.001), "b": _Sleeper(0.001)}
    timed_side_by_side(fast, inputs, 12, 0.0, point_seconds=0.1)
    assert fast["b"].calls == 2 * 12
    unbounded = {"a": _Sleeper(0.02)}
    timed_side_by_side(unbounded, inputs, 12, 0.0)
    assert unbounded["a"].calls == 2 * 12 + 1


def _running_everywhere(found: WorkloadReport, kernel: Candidate) -> WorkloadReport:
    """``found`` with ``kernel`` picked at every shape (a rival plan of one kernel)."""
    search = found.search
    picks = dataclasses.replace(
        search, kernels=[kernel], choice=dict.fromkeys(search.shapes, 0), exact={}
    )
    return WorkloadReport(found.workload, picks, workload_plan(picks, None, "config"))


def test_a_swap_runs_the_rival_plans_kernel_in_the_cell(tmp_path: Path) -> None:
    (found,) = _tuned(tmp_path, io.StringIO()).workloads
    kernel = found.plan.kernels[found.plan.tree.select((9,))].candidate
    build = next(b for b in (DataTiledCandidate(), DefaultCandidate()) if b.key() != kernel.key())
    rival = _running_everywhere(found, build)
    result = swapped(found, rival, (8, 12), 9, 1.25)
    assert result is not None
    for shape in found.search.shapes:
        runs = found.plan.kernels[found.plan.tree.select(shape)].candidate.key()
        now = result.kernels[result.choice[shape]].key()
        in_cell = 8 <= shape[0] <= 12 and runs == kernel.key()
        assert now == (
            build.key() if in_cell else found.search.kernels[found.search.choice[shape]].key()
        )
    plan = workload_plan(result, None, "config")
    assert plan.kernels[plan.tree.select((9,))].candidate.key() == build.key()
    assert swapped(found, found, (8, 12), 9, 1.25) is None  # the same plan: nothing to swap


def test_the_rival_plan_takes_a_point_it_wins_and_is_no_iree_build() -> None:
    times = {
        "dcmlir": {1: 1.0, 2: 1.0, 3: 1.0},
        "iree-default": {1: 2.0, 2: 2.0, 3: 0.5},
        RIVAL: {1: 0.5, 2: 0.99, 3: 0.4},
    }
    losses = _losses(times, {1: [], 2: [], 3: []}, 0.03)
    assert losses == {1: (RIVAL, 2.0), 3: (RIVAL, 2.5)}  # 2: within the margin
    assert _ratio(times, 1) == 0.5  # over the faster IREE build, never over the rival


def test_behind_is_any_point_an_iree_build_beats_never_the_rival() -> None:
    """Where the module is behind IREE's faster build at all, the plan's next kernels are
    tried if it runs that build's branch there; the rival is no build a branch can be."""
    times = {
        "dcmlir": {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0},
        "iree-default": {1: 0.99, 2: 2.0, 3: 0.9, 4: 2.0},
        TILED: {1: 2.0, 2: 1.01, 3: 2.0, 4: 0.95},
        RIVAL: {1: 0.5, 2: 0.5, 3: 2.0, 4: 2.0},
    }
    agree = {1: [], 2: [], 3: [], 4: []}
    behind = _behind(times, agree)  # 2: no build beats it (data tiling 1.01)
    assert {t: n for t, (n, _) in behind.items()} == {
        1: "iree-default",
        3: "iree-default",
        4: TILED,
    }
    assert behind[1][1] == pytest.approx(1 / 0.99)  # within the margin: still behind
    losses = _losses(times, agree, 0.03)  # the rival counts there
    assert {t: n for t, (n, _) in losses.items()} == {
        1: RIVAL,
        2: RIVAL,
        3: "iree-default",
        4: TILED,
    }


def test_the_rival_replaces_the_plan_whole_when_faster_by_geomean() -> None:
    times = {
        "dcmlir": {1: 1.0, 2: 2.0, 3: 4.0},
        "iree-default": {1: 3.0, 2: 3.0, 3: 3.0},
        RIVAL: {1: 0.5, 2: 2.0, 3: 4.0},
    }
    agree = {1: [], 2: [], 3: []}
    assert _rival_over_tuned(times, agree) == pytest.approx(0.5 ** (1 / 3))
    assert _rival_over_tuned(times, agree | {2: [RIVAL]}) is None  # other numbers somewhere
    no_rival = {n: t for n, t in times.items() if n != RIVAL}
    assert _rival_over_tuned(no_rival, agree) is None


def test_the_guard_times_a_rival_plan_and_keeps_what_it_wins(tmp_path: Path) -> None:
    stream = io.StringIO()
    report = _tuned(tmp_path, io.StringIO(), guard=False)
    (found,) = report.workloads
    rival = [_running_everywhere(found, DefaultCandidate())]

    def make_plan(done: Sequence[WorkloadReport]) -> Plan:
        return dataclasses.replace(report.plan, workloads=tuple(r.plan for r in done))

    settings = GuardSettings(points=6, rounds=2)
    kept = guard_plan(
        report.workloads,
        make_plan,
        tmp_path / "dense.mlir",
        stream=stream,
        max_depth=None,
        route="config",
        settings=settings,
        rival=lambda: rival,
    )
    text = stream.getvalue()
    (after,) = kept
    if "its plan replaces the tuned one" in text:  # faster by geomean: the rival, whole
        assert f"dcmlir: guard: timed beside iree-default, {TILED} at 6 T" in text, text
        assert {k.candidate for k in after.plan.kernels} <= {
            DefaultCandidate(),
            DataTiledCandidate(),
        }
        return
    assert f"dcmlir: guard: timed beside iree-default, {TILED}, {RIVAL} at 6 T" in text, text
    assert f"dcmlir: guard: {RIVAL} over the faster IREE build, T:ratio: 1:" in text
    kept_line = next(line for line in text.splitlines() if " at 6 T; " in line)
    for point, instead in re.findall(rf"T=(\d+) to {RIVAL}( \(where[^)]*\))?", kept_line):
        kernel = after.plan.kernels[after.plan.tree.select((int(point),))].candidate
        if instead:  # the plan ran an IREE build there already: its next kernel runs
            assert not isinstance(kernel, DefaultCandidate | DataTiledCandidate), kept_line
        else:  # where the rival won, its kernel runs
            assert kernel == DefaultCandidate(), kept_line
