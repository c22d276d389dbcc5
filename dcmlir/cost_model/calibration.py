"""Fitting the occupancy curve's ``c`` from records: the curve that makes ``f`` shape free.

``f_MK`` is shape independent by assumption, so the right curve is the one
under which each candidate's measured ``log f`` varies least over its shapes.
:class:`dcmlir.cost_model.CostModel` gathers the observations; this module
scores a curve on them and searches ``c``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dcmlir.cost_model.terms import T4_PRIOR, OccupancyCurve

__all__ = ["CURVE_GRID", "MIN_CALIBRATION_OBSERVATIONS", "CalibrationData", "fit_curve"]

MIN_CALIBRATION_OBSERVATIONS = 8
"""Informative observations (partial last wave, candidate seen on 2+ shapes) to fit a ``c``."""
CURVE_GRID = tuple(float(c) for c in np.round(np.geomspace(1.0, 64.0, 49), 6))
"""The range calibration searches ``c`` in (1: the hard curve); every 4th value seeds it."""


@dataclass(frozen=True)
class CalibrationData:
    """Per observation: ``log f`` with pad divided out, its tile grid, its candidate's group."""

    logs: np.ndarray
    grids: np.ndarray
    groups: np.ndarray

    def spread(self, curve: OccupancyCurve, units: int) -> float:
        """Within-candidate sum of squares of ``log f`` under ``curve``: 0 when f is shape free."""
        if not len(self.logs):
            return 0.0
        rates = self.logs - np.log(curve.array(self.grids, units))
        counts = np.bincount(self.groups)
        means = np.bincount(self.groups, weights=rates) / np.maximum(counts, 1)
        return float(np.sum((rates - means[self.groups]) ** 2))


def fit_curve(data: CalibrationData, free: tuple[str, ...], units: int) -> OccupancyCurve:
    """The ``c`` values named in ``free`` that minimise the spread, the rest at the prior.

    A coarse grid over :data:`CURVE_GRID` (prior first, so ties keep it), then
    Nelder-Mead on ``log c`` from the best point, kept where it helps.
    """

    def curve_of(values: Sequence[float]) -> OccupancyCurve:
        fitted = T4_PRIOR.to_json()
        fitted.update(zip(free, (float(v) for v in values), strict=True))
        return OccupancyCurve(**fitted)

    axes = [(getattr(T4_PRIOR, name), *CURVE_GRID[::4]) for name in free]
    points = [np.array(p) for p in itertools.product(*axes)]
    costs = [data.spread(curve_of(p), units) for p in points]
    start = points[int(np.argmin(costs))]
    low, high = math.log(CURVE_GRID[0]), math.log(CURVE_GRID[-1])
    from scipy.optimize import minimize  # here: importing it costs every command 0.5 s

    found = minimize(
        lambda x: data.spread(curve_of(np.exp(np.clip(x, low, high))), units),
        np.log(start),
        method="Nelder-Mead",
        options={"xatol": 1e-5, "fatol": 1e-12, "maxiter": 400},
    )
    if found.fun < min(costs):
        return curve_of(np.round(np.exp(np.clip(found.x, low, high)), 6))
    return curve_of(start)
