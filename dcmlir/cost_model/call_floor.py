"""The call's fixed costs: the time every call takes whatever its work, fitted from records.

``time = floor + per_element * outputs + work / (f_MK * pad * occ)``. The floor is the
runtime's fixed cost of a call (submitting the dispatch, waking IREE's workers on
``local-task``, the Python call that times it): about 5 us on ``local-sync`` here and
100 us on ``local-task``, where waking a sleeping core dominates (docs/benchmarks.md,
"Thread hygiene"). Without it a kernel that takes 9 us at T = 3 is "3x slower than the
model" and the search spreads that error over every candidate and shape it corrects. The
floor is chosen the way the occupancy curve is (:mod:`dcmlir.cost_model.calibration`):
as the value under which each candidate's measured ``log f`` varies least over its
shapes; with no floor in the data, subtracting one only adds spread, so 0 stays. The
per-element term (each element of the result set up and stored once,
:func:`fit_fixed_costs`) is told from the work only where the reduction's length varies
(attention's context product, K = T); elsewhere the result grows with the work, the term
is part of ``f``, and 0 stays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "FLOOR_FRACTIONS",
    "FLOOR_GAIN",
    "MIN_FLOOR_GROUPS",
    "busy_seconds",
    "fit_fixed_costs",
    "fit_floor",
]

FLOOR_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(19))
"""Floors tried, as fractions of the fastest observation (0 to 0.9)."""
FLOOR_GAIN = 0.75
"""A floor is kept only when it leaves at most this share of the spread without one."""
MIN_FLOOR_GROUPS = 3
"""Candidates seen on shapes of different work needed before a floor is fitted."""
GAUSS_NEWTON_STEPS = 8
"""Steps of each group's ``log f`` when a per-element term is judged."""
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


def fit_fixed_costs(
    groups: Sequence[Sequence[tuple[float, float, int, int]]],
) -> tuple[float, float]:
    """(the call floor, seconds per element of the result): the floor of :func:`fit_floor`
    and no second term, unless a floor and a second term together predict the groups'
    times clearly better (:data:`FLOOR_GAIN`) than a floor alone.

    ``groups``: per candidate, ``(seconds, work, outputs, reduction)``: ``work`` as in
    :func:`fit_floor`, ``outputs`` the result's elements, ``reduction`` the reduction
    loops' extent. Every element of the result is set up and stored once whatever the
    reduction's length, so where the reduction is dynamic (attention's context product,
    K = T) a call costs more per FLOP the shorter it is: `wg8x128:v2x64:k1` ran 5, 45,
    92 and 156 GFLOP/s at T = 1, 8, 16 and 56 net of the floor, and the model
    extrapolated 4-5x too slow from its small T. Only groups whose reduction spans 2x
    tell that term from a throughput. The two are judged on predicted times
    (:func:`_time_misfit`), not on the spread of ``log f``: a call that is nearly all
    fixed cost says little of ``f``, and its ``log f`` is all noise.
    """
    floor = fit_floor([[(s, w) for s, w, _, _ in group] for group in groups])
    informative = [
        [(s, w, o) for s, w, o, _ in group if s > 0 and w > 0 and o > 0]
        for group in groups
        if len(group) >= 2 and max(r for *_, r in group) >= 2 * max(min(r for *_, r in group), 1)
    ]
    informative = [g for g in informative if len(g) >= 2]
    if len(informative) < MIN_FLOOR_GROUPS:
        return floor, 0.0
    rows = np.array([(s, w, o, i) for i, g in enumerate(informative) for s, w, o in g])
    data = (rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3].astype(int))
    fastest, unit = float(data[0].min()), float(np.min(data[0] / data[2]))
    floors = [f * fastest for f in FLOOR_FRACTIONS]
    alone = min(_time_misfit(data, f, 0.0) for f in floors)
    misfit, fixed, per_output = min(
        (_time_misfit(data, f, a * unit), f, a * unit) for a in FLOOR_FRACTIONS[1:] for f in floors
    )
    if misfit > FLOOR_GAIN * alone:
        return floor, 0.0
    return fixed, per_output


def _time_misfit(
    data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], fixed: float, per_output: float
) -> float:
    """Sum of squared ``log(seconds / predicted)`` with each group's best ``f`` (a few
    Gauss-Newton steps on ``log f``), the call costing ``fixed + per_output * outputs``
    beside its work."""
    seconds, work, outputs, labels = data
    base = fixed + per_output * outputs
    busy = np.maximum(seconds - base, BUSY_SHARE * seconds)
    weight = (busy / seconds) ** 2
    rate = np.bincount(labels, weights=np.log(work / busy) * weight) / np.bincount(
        labels, weights=weight
    )
    for _ in range(GAUSS_NEWTON_STEPS):
        busy = work * np.exp(-rate[labels])
        share = busy / (base + busy)
        residual = np.log(seconds / (base + busy))
        step = np.bincount(labels, weights=residual * share)
        rate -= step / np.maximum(np.bincount(labels, weights=share * share), 1e-12)
    predicted = base + work * np.exp(-rate[labels])
    return float(np.sum(np.log(seconds / predicted) ** 2))
