"""The chase limit: a shape whose never-measured kernels keep measuring slower than
their estimates stops asking for more of them (:mod:`dcmlir.search.chase`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from helpers import fake_dense_search

from dcmlir.cost_model import TrivialCostModel
from dcmlir.search.chase import ChaseLimit, FirstMeasurement
from dcmlir.target import CpuTarget
from dcmlir.testing import FakeMeasurer
from dcmlir.testing.fakes import quirk

TARGET = CpuTarget()
CURSED = (20,)
BUDGET = 100  # a limit of 3
CURSE = 8  # the model's promise at T = 20: up to 9x too fast


def test_the_limit_is_three_misses_or_three_percent_of_the_budget() -> None:
    assert ChaseLimit.for_budget(60, 0.15).limit == 3
    assert ChaseLimit.for_budget(110, 0.15).limit == 3
    assert ChaseLimit.for_budget(240, 0.15).limit == 7


def test_only_new_kernels_pairs_slower_beyond_the_margin_count() -> None:
    chase = ChaseLimit(limit=2, margin=0.15)
    firsts = [
        FirstMeasurement("a", (5,), 0, 1.0),  # 1.2x: a miss
        FirstMeasurement("b", (5,), 0, 1.0),  # 1.1x: within the margin
        FirstMeasurement("c", (5,), 0, 1.0),  # failed to run: the estimates drop it already
        FirstMeasurement("d", (6,), 1, math.inf),  # estimated nowhere: no promise to miss
    ]
    chase.count(firsts, {("a", (5,)): 1.2, ("b", (5,)): 1.1, ("c", (5,)): math.inf})
    assert chase.misses == {0: 1}
    estimate = np.ones((2, 3))
    chase.apply(estimate, [1, 2])
    assert np.isfinite(estimate).all()  # one miss of two
    chase.count([FirstMeasurement("e", (5,), 0, 1.0)], {("e", (5,)): 3.0})
    chase.apply(estimate, [1, 2])
    assert np.isinf(estimate[0, 1:]).all() and np.isfinite(estimate[0, 0])
    assert np.isfinite(estimate[1]).all()


class CursedModel(TrivialCostModel):
    """The trivial model, but at T = 20 it promises each kernel up to 9x faster than it
    runs: the winner's curse of a model over many kernels, one kernel at a time
    (a kernel's own measurement there corrects its estimate, not the next one's)."""

    def predict(self, candidates, shapes):  # type: ignore[no-untyped-def]
        times = super().predict(candidates, shapes)
        for row, shape in enumerate(shapes):
            if tuple(shape) != CURSED:
                continue
            for column, candidate in enumerate(candidates):
                times[row, column] /= 1 + CURSE * (quirk(candidate.key(), CURSED) - 1)
        return times


def first_measured_at(measurer: FakeMeasurer, shape: tuple[int, ...]) -> int:
    """Kernels whose first pair anywhere was at ``shape``."""
    seen: set[str] = set()
    count = 0
    for key, timed in measurer.timed:
        if key not in seen and timed == shape:
            count += 1
        seen.add(key)
    return count


def run(tmp_path: Path, name: str, limit: int | None) -> FakeMeasurer:
    db = tmp_path / name
    measurer, search = fake_dense_search(db, BUDGET, verify_batch=8, model=CursedModel, seed=7)
    if limit is not None:
        search.chase.limit = limit
    search.run()
    return measurer


def test_a_cursed_shape_stops_taking_new_kernels_after_the_limit(tmp_path: Path) -> None:
    """Without the limit T = 20 takes 20 of the 100 pairs, each a new kernel that
    misses its promise; with it, 3."""
    unlimited = first_measured_at(run(tmp_path, "a.jsonl", limit=10**6), CURSED)
    limited = first_measured_at(run(tmp_path, "b.jsonl", limit=None), CURSED)
    assert limited <= 3 < unlimited
