"""The by-shape part of the search's estimate correction, kept apart from each candidate's
own model error.

The search corrects the cost model twice from the measurements' log ratios
measured/predicted (:meth:`dcmlir.search.shape_generic.ShapeGenericSearch.estimate`):
by shape (what every candidate near a shape showed, e.g. a memory floor the model does
not know) and then by candidate. Taken as it comes, one measurement is all of its
shape's correction, so one kernel the model mispredicts moves every candidate's
estimate near it (records, attention scores on ``local-task``: a kernel predicted at
3625 us took 353 us at 96 x 96, and IREE's default, measured at 600-750 us at 73 and
105, was estimated at 68 us there and kept 96..127, up to 2x slower than a kernel).
Here each candidate's bias and each shape's effect are told apart, both shrunk toward
the median of all ratios where few measurements back them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dcmlir.shapes import Shape

PRIOR_WEIGHT = 3.0
"""Measurements' worth of "no effect" a candidate's bias and a shape's effect start from:
one measurement of a candidate counts a quarter toward its bias, three half. Chosen on
the oracle replay (benchmarks/quality.py, 6 workloads x 3 seeds, budgets 110 and 240):
1 and 3 around a mean level, and 3 around the median, were within the seeds' spread of
each other at 240; the last was best at 110 (0.915-0.938 against 0.905-0.929)."""


def log_ratios(
    measured: Mapping[tuple[str, Shape], float],
    columns: Mapping[str, int],
    shape_index: Mapping[Shape, int],
    predicted: np.ndarray,
) -> tuple[list[tuple[int, int, float]], set[int]]:
    """(row, column, log measured / predicted) of each finite measurement of the table's
    pairs, and the columns whose every measurement failed (a build or run failure)."""
    observed: list[tuple[int, int, float]] = []
    runs: dict[int, int] = {}
    failed: dict[int, int] = {}
    for (key, shape), seconds in measured.items():
        if key not in columns or shape not in shape_index:
            continue
        row, column = shape_index[shape], columns[key]
        runs[column] = runs.get(column, 0) + 1
        if not math.isfinite(seconds):
            failed[column] = failed.get(column, 0) + 1
            continue
        if predicted[row, column] > 0 and math.isfinite(predicted[row, column]):
            observed.append((row, column, math.log(seconds / predicted[row, column])))
    return observed, {column for column, count in failed.items() if count == runs[column]}


def shape_effects(observed: list[tuple[int, int, float]]) -> list[tuple[int, float]]:
    """(row, log ratio) to interpolate over shapes, one per measured row.

    ``observed``: (row, column, log ratio) of every measurement. A candidate's bias is
    its mean ratio's distance from the median of all, shrunk by :data:`PRIOR_WEIGHT`;
    a row's effect is the median of its measurements less their candidates' biases,
    shrunk the same way toward the median of all (a median: one 10x error is not the
    level every shape is pulled to).
    """
    if not observed:
        return []
    grand = statistics.median(value for _, _, value in observed)
    by_column: dict[int, list[float]] = {}
    for _, column, value in observed:
        by_column.setdefault(column, []).append(value)
    bias = {column: _shrunk(values, grand) - grand for column, values in by_column.items()}
    by_row: dict[int, list[float]] = {}
    for row, column, value in observed:
        by_row.setdefault(row, []).append(value - bias[column])
    return [(row, _shrunk(values, grand, statistics.median)) for row, values in by_row.items()]


def _shrunk(
    values: list[float], toward: float, center: Callable[[list[float]], float] = statistics.fmean
) -> float:
    """``center(values)`` pulled toward ``toward`` as if :data:`PRIOR_WEIGHT` more
    measurements had said it."""
    n = len(values)
    return (n * center(values) + PRIOR_WEIGHT * toward) / (n + PRIOR_WEIGHT)


def interpolate(
    shapes: Sequence[Shape], points: list[tuple[int, float]], log_extents: bool = False
) -> np.ndarray:
    """exp of the inverse-distance-weighted mean of log ratios ``points`` (row, value) at
    every shape: distances in the dynamic dims' space (``log_extents``: of their logs),
    each normalised by its range; several values at one row are averaged first.

    A candidate's own error is interpolated over the logs (the search's estimate): it is
    a ratio that changes with the regime (call overhead at T = 5, the tile grid at 33 and
    127), so T = 33 speaks for 127 more than T = 5 does. Records (EPYC oracle replay,
    attention scores, budget 110): `wg64x64:v8x16:k8`, measured at 0.59x its prediction
    at T = 33 and 1.33x at 5, was estimated at 0.86x at 127 over linear extents and lost
    T = 56..127 to a kernel 1.2-1.5x slower (docs/benchmarks.md, "A candidate's error
    interpolated over log T")."""
    if not points:
        return np.ones(len(shapes))
    grouped: dict[int, list[float]] = {}
    for row, value in points:
        grouped.setdefault(row, []).append(value)
    rows = sorted(grouped)
    values = np.asarray([float(np.mean(grouped[row])) for row in rows])
    extents = np.asarray(shapes, dtype=float)
    if log_extents:
        extents = np.log(np.maximum(extents, 1.0))
    scale = np.maximum(extents.max(axis=0) - extents.min(axis=0), 1.0)
    anchors = extents[rows] / scale
    distance = np.linalg.norm(extents[:, None, :] / scale - anchors[None, :, :], axis=2)
    weights = 1.0 / (distance + 1e-3) ** 2
    return np.exp((weights * values).sum(axis=1) / weights.sum(axis=1))
