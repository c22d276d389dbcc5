"""The call floor: the time every call takes whatever its work, fitted from records.

``time = floor + work / (f_MK * pad * occ)``. The floor is the runtime's fixed cost of a
call (submitting the dispatch, waking IREE's workers on ``local-task``, the Python call
that times it): about 5 us on ``local-sync`` here and 100 us on ``local-task``, where
waking a sleeping core dominates (docs/benchmarks.md, "Thread hygiene"). Without it a
kernel that takes 9 us at T = 3 is "3x slower than the model" and the search spreads
that error over every candidate and shape it corrects. The floor is chosen the way the
occupancy curve is (:mod:`dcmlir.cost_model.calibration`): as the value under which each
candidate's measured ``log f`` varies least over its shapes; with no floor in the data,
subtracting one only adds spread, so 0 stays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["FLOOR_FRACTIONS", "FLOOR_GAIN", "MIN_FLOOR_GROUPS", "busy_seconds", "fit_floor"]

FLOOR_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(19))
"""Floors tried, as fractions of the fastest observation (0 to 0.9)."""
FLOOR_GAIN = 0.75
"""A floor is kept only when it leaves at most this share of the spread without one."""
MIN_FLOOR_GROUPS = 3
"""Candidates seen on shapes of different work needed before a floor is fitted."""
BUSY_SHARE = 0.05
"""Never take more than 95% of an observation for the floor (a noisy fast sample)."""


def busy_seconds(seconds: float, floor: float) -> float:
    """The part of ``seconds`` that scales with work."""
    return max(seconds - floor, BUSY_SHARE * seconds)


def fit_floor(groups: Sequence[Sequence[tuple[float, float]]]) -> float:
    """The floor (seconds) that makes ``log(work / (seconds - floor))`` most constant
    within each group, or 0 when none does clearly better than no floor.

    ``groups``: one per candidate, its observations as ``(seconds, work)`` with ``work``
    the FLOPs over ``pad * occ`` (so a constant ``f`` means a constant ratio). Only
    groups whose works differ tell a floor from a throughput.
    """
    informative = [
        [(s, w) for s, w in group if s > 0 and w > 0]
        for group in groups
        if len({w for _, w in group}) >= 2
    ]
    informative = [g for g in informative if len(g) >= 2 and _span(g) >= 2.0]
    if len(informative) < MIN_FLOOR_GROUPS:
        return 0.0
    fastest = min(s for group in informative for s, _ in group)
    scores = {
        fraction * fastest: _spread(informative, fraction * fastest) for fraction in FLOOR_FRACTIONS
    }
    best = min(scores, key=lambda floor: scores[floor])
    if best == 0.0 or scores[best] > FLOOR_GAIN * scores[0.0]:
        return 0.0
    step = FLOOR_FRACTIONS[1] * fastest  # refine between the grid's neighbours
    finer = np.linspace(best - step, min(best + step, (1 - BUSY_SHARE) * fastest), 21)
    return float(min(finer, key=lambda floor: _spread(informative, float(floor))))


def _span(group: Sequence[tuple[float, float]]) -> float:
    works = [w for _, w in group]
    return max(works) / min(works)


def _spread(groups: Sequence[Sequence[tuple[float, float]]], floor: float) -> float:
    """Pooled within-group variance of ``log f`` with ``floor`` taken off every time."""
    total, count = 0.0, 0
    for group in groups:
        logs = np.array([math.log(w / busy_seconds(s, floor)) for s, w in group])
        total += float(np.sum((logs - logs.mean()) ** 2))
        count += len(logs) - 1
    return total / max(count, 1)
