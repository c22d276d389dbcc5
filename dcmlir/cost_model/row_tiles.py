"""Time as a function of the tile grid: ``t(M) = a + b * ceil(M / M0)``, fitted per kernel.

A packed kernel (:mod:`dcmlir.space.packed`) runs one ukernel call per ``M0``-row
tile of the activations over the whole packed weight: every tile streams the
weight once, and the rest (packing a few rows, unpacking them, the call) is a
small constant. So its time is a straight line in the number of row tiles, not in
``M``: flat from ``M = 1`` to ``M0``, then a step per tile. Two measurements (one
tile, many tiles) fix the line; every further one refines it by least squares.
The generic cost model, which scales a throughput by the work, cannot see the
flat part (it would predict ``M = 1`` sixteen times cheaper than ``M = 16`` for
``M0 = 16``); docs/design.md section 12 shows the records this is read from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dcmlir.shapes import ceil_div

__all__ = ["TileGridLine", "fit_tile_grid", "tile_grid_estimate", "tiles", "two_points"]


def tiles(rows: int, tile: int) -> int:
    """Row tiles of ``rows`` rows: ``ceil(rows / tile)``."""
    return ceil_div(rows, tile)


@dataclass(frozen=True)
class TileGridLine:
    """``seconds = fixed + per_tile * ceil(rows / tile)``."""

    tile: int
    fixed: float
    per_tile: float

    def predict(self, rows: int) -> float:
        return self.fixed + self.per_tile * tiles(rows, self.tile)


def fit_tile_grid(tile: int, points: Sequence[tuple[int, float]]) -> TileGridLine | None:
    """The line through measured ``(rows, seconds)`` points; None without two tile counts.

    Least squares on ``(1, tiles)``; a negative part is clamped to zero (noise on
    a line that is almost through the origin), keeping the line through the
    points' mean.
    """
    finite = [(tiles(rows, tile), s) for rows, s in points if math.isfinite(s) and s > 0]
    if len({count for count, _ in finite}) < 2:
        return None
    n = len(finite)
    mean_x = sum(x for x, _ in finite) / n
    mean_y = sum(y for _, y in finite) / n
    spread = sum((x - mean_x) ** 2 for x, _ in finite)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in finite) / spread
    slope = max(slope, 0.0)
    fixed = mean_y - slope * mean_x
    if fixed < 0:
        fixed = 0.0
        slope = sum(x * y for x, y in finite) / sum(x * x for x, _ in finite)
    return TileGridLine(tile, fixed, slope)


def two_points(tile: int, low: int, high: int) -> list[int]:
    """Where to measure a kernel first: one tile (``min(tile, high)`` rows) and the most
    tiles the range allows (its largest multiple of ``tile``, else ``high``)."""
    first = max(low, min(tile, high))
    last = (high // tile) * tile
    if last < low or last <= first:
        last = high
    return sorted({first, last})


def tile_grid_estimate(
    tile: int, points: Sequence[tuple[int, float]], rows: Sequence[int]
) -> list[float] | None:
    """Seconds at each of ``rows``: the measured time of the same tile count where there
    is one (the count, not the rows, sets the time; the median of its measurements: the
    search's data-tiling kernel of `dense_ffn2` took 1040 us at M = 1 and 575-587 at
    M = 13..16, and the mean of the four, 694, let a kernel 1.17x slower than data
    tiling at 13..16 keep them, never_slower.py at budget 60), else the line corrected by the
    residuals of the nearest measured tile counts on either side (the line is not
    exact: one tile costs a little more than the line says, measured on the records).

    More tiles never take less time: a measurement above one of more tiles is noise (a
    sample the machine slowed; seen at 1.4x on the records), so every time is capped by
    the fastest measurement of a larger tile count.
    """
    by_count: dict[int, list[float]] = {}
    for value, seconds in points:
        if math.isfinite(seconds) and seconds > 0:
            by_count.setdefault(tiles(value, tile), []).append(seconds)
    measured = {count: statistics.median(v) for count, v in by_count.items()}
    cap = math.inf
    for count in sorted(measured, reverse=True):
        measured[count] = min(measured[count], cap)
        cap = measured[count]
    line = fit_tile_grid(tile, points)
    if line is None:
        return None
    residual = {
        count: math.log(t / max(line.fixed + line.per_tile * count, 1e-12))
        for count, t in measured.items()
    }
    counts = sorted(residual)
    found = []
    for value in rows:
        count = tiles(value, tile)
        if count in measured:
            found.append(measured[count])
            continue
        below = [c for c in counts if c < count]
        above = [c for c in counts if c > count]
        if below and above:
            lo, hi = below[-1], above[0]
            weight = (count - lo) / (hi - lo)
            correction = residual[lo] * (1 - weight) + residual[hi] * weight
        else:
            correction = residual[below[-1] if below else above[0]]
        above_cap = min((measured[c] for c in above), default=math.inf)
        found.append(min(line.predict(value) * math.exp(correction), above_cap))
    return found
