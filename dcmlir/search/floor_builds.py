"""IREE's two builds as the floor where the weight is an argument: which is faster where.

With an argument weight, IREE's data tiling packs it on every call: slower than IREE's
default at small T, faster at large T. Wherever no kernel is proven, the faster of the
two runs, so the search must know where they trade places, and it learns it from pairs
(both builds measured at one shape). Two things went wrong without this module
(benchmarks/never_slower.py, budget 60):

- **Each build estimated on its own.** The default is measured beside every kernel,
  data tiling at a few shapes; their estimates are corrected independently, so between
  two pairs that both showed data tiling 1.2x faster (attention scores, T = 29 and
  105) data tiling was estimated 4% slower at T = 61, and the plan ran the default,
  1.10-1.14x behind data tiling at T = 61 and 65. So data tiling's estimate where it
  was not measured is the default's times their ratio, interpolated from the pairs
  (:meth:`FloorBuilds.estimate`).
- **Nothing between two pairs that disagree, or beyond them.** Attention context had
  pairs at T x T' = 8 x 8 (the default 1.64x faster) and 44 x 128 (data tiling 1.8x
  faster) only; the estimate put data tiling 1.37x slower at T = 17, the plan ran the
  default at T = 17..37, and data tiling was 1.4-2x faster there. So both builds are
  measured at the range's smallest and largest shapes, and pairs that disagree are
  bisected (both measured at the shape between them in log extents) until they are
  within :data:`RESOLUTION` of each other, within :data:`FLOOR_SHARE` of the budget
  (:meth:`FloorBuilds.boundary_row`). The search times these pairs call by call, as a
  family duel (one pair timed as the kernels are said data tiling 0.80x the default
  at 9 x 9; the bench, 1.17x).

A pair's ratio comes from its steady calls (:func:`steady`), and a pair its neighbours
outvote is left out (:meth:`FloorBuilds.trusted`): with either, one noisy pair ran data
tiling 1.2-1.7x slower than the default on a stretch of T.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from dcmlir.cost_model.terms import DEFAULT_DISTRIBUTION
from dcmlir.records import Record
from dcmlir.search.remainders import log_distance
from dcmlir.shapes import Shape
from dcmlir.space import Candidate

__all__ = [
    "FLOOR_SHARE",
    "NEIGHBOURHOOD",
    "OUTVOTED",
    "PARTIAL_TRUST",
    "RATIO_POWER",
    "RESOLUTION",
    "SAME",
    "STEADY_QUANTILE",
    "WASTE_PARTS",
    "FloorBuilds",
    "default_waste",
    "partial_waste",
    "side",
    "steady",
]

RESOLUTION = 1.5
"""Two disagreeing pairs this close (every dynamic extent within this factor) are not
bisected: the floor is settled to within one step of the shape grid there."""

SAME = 0.03
"""A pair within this of a tie takes no side (issue 14's 0.97x: noise, not a floor)."""

FLOOR_SHARE = 0.2
"""Of the budget, at most, for pairs of the two IREE builds (both measured at one shape);
their measurements beside the kernels at other shapes do not count."""

RATIO_POWER = 4
"""The inverse-distance weights' power when the pairs' ratio is interpolated: the nearest
pairs decide. With 2 and distances in linear extents (the shape correction's), pairs at
T = 9, 17 and 24 of attention scores (data tiling 1.27-1.42x slower) pulled the ratio to
1.0 at T = 61..101, beyond pairs at 34 and 128 (0.77x, 0.93x), where data tiling was
1.3-1.5x faster, and the plan ran the default there."""

OUTVOTED = 3
"""A pair is left out, as noise, where at least this many other pairs near it
(:data:`NEIGHBOURHOOD`) take the other side and none takes its own (attention scores,
budget 240: a pair at 18 x 18 said data tiling 0.83x the default among four within 2x
that said 1.09-1.45x; the bench had 0.96-1.08x at T = 17 and 19, and the plan ran data
tiling at T = 19, 1.18x slower than the default)."""

NEIGHBOURHOOD = 2.0
"""Pairs whose every dynamic extent is within this factor of another's are its neighbours
when it is outvoted (:data:`OUTVOTED`)."""

WASTE_PARTS = "reduction"
"""The part of IREE's default's padding (:func:`default_waste`) :meth:`FloorBuilds.estimate`
takes out of the pairs' ratios: its pad tile on the reduction loops only. Data tiling pads
M and N to its own 16 x 16 (AVX-512) tile as the default pads them to its tile, so their
steps on M and N are largely shared, and the ratio of their times does not carry them; its
f32 tiles do not pad K, where the default pads to 16 (attention context). With half of
the whole waste (M, N and K), the ratio carried the model's M and N steps that the two
builds share: at T = 17..24 of attention scores the pairs at 27 x 27 and 30 x 16 (0.98,
1.18) put data tiling 0.66-0.87x the default, the bench had 1.08-1.21x, and the plan ran
it there (never_slower.py, budget 60). Judged on the pairs of 21 tunes (seven attention
workloads; budgets 60 and 240, and 60 again after the change) against the bench's
side-by-side runs (``benchmarks/floor_check.py``): the T where the floor's pick was more
than 1.03x the faster build went from 106 to 67 (docs/benchmarks.md, "The floor's waste on
the reduction loops only")."""

PARTIAL_TRUST = 1.0
"""The power the part of the default's waste its partial distribution tiles make (the cost
model's fitted slowdown, ``partial`` in :meth:`FloorBuilds.estimate`) is taken to."""

STEADY_QUANTILE = 25
"""The percentile of a call-by-call record's samples that a pair's ratio is taken from.
Preemption and clock changes only slow a call down, and in runs of them a median moves:
IREE's default at 15 x 15 of attention scores sampled 11.6 us at best and 16.5 us at the
median (its drift check flagged it), the pair said data tiling 0.92x the default, the
bench had 1.27x, and the plan ran data tiling at T = 8..15, up to 1.7x slower."""

Seconds = Callable[[int, int], float | None]
"""``seconds(column, row)``: a finite measurement, when there is one."""


def side(ratio: float, same: float = SAME) -> int:
    """Which build a pair's ratio (data tiling's time over the default's) favours: -1 data
    tiling, 1 the default, 0 a tie within ``same``."""
    return -1 if ratio < 1 / (1 + same) else (1 if ratio > 1 + same else 0)


def steady(record: Record) -> float:
    """A record's time for a pair: :data:`STEADY_QUANTILE` of its samples when it was
    timed call by call (the floor's pairs are), else its median."""
    if record.extra.get("sampling") != "call-by-call" or not record.times:
        return record.median
    return float(np.percentile(record.times, STEADY_QUANTILE))


class FloorBuilds:
    """IREE's default and data tiling (their columns) over the search's shapes."""

    def __init__(self, shapes: Sequence[Shape], default: int, tiled: int) -> None:
        self.shapes, self.default, self.tiled = list(shapes), default, tiled
        extents = np.asarray(shapes, dtype=float).reshape(len(self.shapes), -1)
        self.logs = np.log(np.maximum(extents, 1.0))
        self.apart = log_distance(self.shapes)  # [row, row]: the largest |log ratio|
        self.asked = set(self.ends())  # the rows of the floor's own pairs, asked for

    def ends(self) -> list[int]:
        """The rows of the range's smallest and largest shapes, and of the largest whose every
        dynamic extent cuts IREE's default's distribution tile (:data:`DEFAULT_DISTRIBUTION`)
        where that is another shape.

        The third is the default at its slowest against its whole tiles: on an AVX2 Zen 3 it
        takes 368 us at 128 x 128 of attention scores and 1234 at 127 x 127. With the two
        ends alone, budget-60 tunes of attention scores there ran the default at T = 127,
        1.34x behind data tiling, and measured the default at 128 x 128 and at shapes under
        3 x 50 and 86 x 2 only: nothing to learn its partial tiles from (never_slower.py)."""
        size = self.logs.sum(axis=1)
        found = [int(np.argmin(size)), int(np.argmax(size))]
        extents = np.asarray(self.shapes, dtype=np.int64).reshape(len(self.shapes), -1)
        partial = np.flatnonzero((extents % DEFAULT_DISTRIBUTION != 0).all(axis=1))
        if len(partial):
            row = int(partial[np.argmax(size[partial])])
            found += [row] if row not in found else []
        return found

    def ratios(self, seconds: Seconds) -> dict[int, float]:
        """Each pair's row -> data tiling's time over the default's."""
        return {
            row: tiled / default
            for row in range(len(self.shapes))
            if (tiled := seconds(self.tiled, row)) is not None
            and (default := seconds(self.default, row)) is not None
        }

    def trusted(self, ratios: dict[int, float], same: float = SAME) -> dict[int, float]:
        """``ratios`` less the outvoted pairs (:data:`OUTVOTED`): one sample of a close
        call is noise more often than a pocket of the other build's."""
        kept = {}
        for row, ratio in ratios.items():
            near = [
                side(other, same)
                for r, other in ratios.items()
                if r != row and self.apart[row, r] <= math.log(NEIGHBOURHOOD) + 1e-9
            ]
            mine = side(ratio, same)
            if mine and mine not in near and near.count(-mine) >= OUTVOTED:
                continue
            kept[row] = ratio
        return kept

    def region(self, estimate: np.ndarray) -> dict[int, list[int]]:
        """Data tiling's rows where it is estimated faster than the default."""
        rows = np.flatnonzero(estimate[:, self.tiled] < estimate[:, self.default])
        return {self.tiled: rows.tolist()} if len(rows) else {}

    def estimate(
        self,
        estimate: np.ndarray,
        seconds: Seconds,
        waste: np.ndarray | None = None,
        partial: np.ndarray | None = None,
    ) -> None:
        """Data tiling's column of ``estimate`` [shape, candidate], in place, where it was
        not measured: the default's estimate times the pairs' ratio, interpolated by
        inverse distance in log extents to the power :data:`RATIO_POWER`; within
        :data:`SAME` of a tie, the default keeps the row (a pair at T = 17 of 16-head
        attention scores said 0.98, the bench 1.08, and the plan ran data tiling at
        T = 14..16, 1.3x slower than the default). At a pair, the ratio is its own (``seconds``
        gives the search's :func:`steady` times), and an outvoted pair (:meth:`trusted`)
        counts as not measured. Left alone without a pair, or where data tiling never
        ran.

        ``waste`` [row] (:func:`default_waste` of :data:`WASTE_PARTS`): how much slower the
        default is than it would be without the padding data tiling does not share. What is
        interpolated is the ratio to the default without it, so that the default's steps
        are not carried into data tiling's estimate: IREE's default pads attention
        context's K to 16 and is flat from 9 x 9 to 16 x 16, data tiling's time grows
        across that stretch; pairs at 8 x 2 and 15 x 15 (data tiling 1.0x and 1.12x the
        default) made it 1.1x slower at 9 x 9, where it was 0.84x, and the plan ran the
        default there (never_slower.py, budget 60)."""
        every = self.ratios(seconds)
        ratios = self.trusted(every)
        if not ratios or not np.isfinite(estimate[:, self.tiled]).any():
            return
        pairs = sorted(ratios)
        distance = np.linalg.norm(self.logs[:, None, :] - self.logs[None, pairs, :], axis=2)
        weights = 1.0 / (distance + 1e-3) ** RATIO_POWER
        waste = np.ones(len(self.shapes)) if waste is None else waste
        partial = np.ones(len(self.shapes)) if partial is None else partial
        waste = waste * partial**PARTIAL_TRUST
        logs = np.log([ratios[row] * waste[row] for row in pairs])
        ratio = np.exp((weights * logs).sum(axis=1) / weights.sum(axis=1)) / waste
        ratio = np.where(ratio > 1 / (1 + SAME), np.maximum(ratio, 1 + SAME), ratio)
        rows = [
            row
            for row in range(len(self.shapes))
            if seconds(self.tiled, row) is None or row in every
        ]
        estimate[rows, self.tiled] = estimate[rows, self.default] * ratio[rows]

    def boundary_row(
        self,
        seconds: Seconds,
        max_pairs: int,
        resolution: float = RESOLUTION,
        same: float = SAME,
    ) -> int | None:
        """The row to measure both builds at next, or None where the boundary is settled
        or the floor asked for ``max_pairs`` pairs (the pairs the kernels' proofs made do
        not count: at budget 60 on attention context's grid they were 7 of 9, the floor
        stopped with pairs at 16 x 16 and 38 x 8 that favoured the default, and the plan
        ran it at T = 17..37, where data tiling was 1.4-2.1x faster).

        The smallest and the largest shape first: packing the weight on every call
        costs most at small T, so the ends bracket the crossing. (One pair at T x T' =
        9 x 9, data tiling 0.85x the default there by one sample, and one at 128 x 128
        made data tiling the floor down to T = 1; the plan ran it at T = 5..7, 1.7x
        slower than the default.) Then, of the disagreeing pairs (data tiling faster by
        more than ``same`` at one, slower at the other) that no pair lies between, the
        closest farther apart than ``resolution``: the row nearest the midpoint of their
        log extents, of those strictly between them (closer to each than they are to
        each other).
        """
        ratios = self.ratios(seconds)
        for end in self.ends():
            if end not in ratios:
                return end  # the range's ends first: the brackets every crossing lies in
        if len(self.asked) >= max_pairs:
            return None
        ratios = self.trusted(ratios, same)  # an outvoted pair brackets no crossing
        faster = [row for row, ratio in ratios.items() if side(ratio, same) < 0]
        slower = [row for row, ratio in ratios.items() if side(ratio, same) > 0]
        brackets = sorted((float(self.apart[a, b]), a, b) for a in faster for b in slower)
        for gap, a, b in brackets:
            if gap <= math.log(resolution) + 1e-9:
                continue
            between = (self.apart[a] < gap) & (self.apart[b] < gap)  # closer to each
            if between[list(ratios)].any():
                continue  # a pair between them speaks for this stretch already
            if between.any():
                middle = (self.logs[a] + self.logs[b]) / 2
                rows = np.flatnonzero(between)
                row = int(rows[np.argmin(np.linalg.norm(self.logs[rows] - middle, axis=1))])
                self.asked.add(row)
                return row
        return None


WASTE_METHODS = {
    "all": "adaptation",
    "reduction": "reduction_padding",
    "partial": "partial_cost",
}
"""The parts of the default's waste :func:`default_waste` knows, and the model's method for
each (``partial_cost`` says how much dearer, the others what share of the work is real)."""


def default_waste(
    model: object,
    default: Candidate,
    shapes: Sequence[Shape],
    predicted: np.ndarray,
    *,
    part: str = "all",
) -> np.ndarray | None:
    """[row] the default's predicted time over that time without its padding (>= 1): its
    steps, as the cost model's effective tiles put them (its fixed costs, the call floor
    and the result's own, are not padded). ``part`` (:data:`WASTE_METHODS`): ``"all"``;
    ``"reduction"``, its padding on the reduction loops only; ``"partial"``, the cost of
    its partial distribution tiles only, its padding kept. None for a model that does not
    say (no such method)."""
    adaptation = getattr(model, WASTE_METHODS[part], None)
    if adaptation is None:
        return None
    fixed = getattr(model, "fixed_seconds", None)
    floor = fixed(shapes) if fixed is not None else 0.0
    pads = np.array([adaptation(default, shape) for shape in shapes], dtype=float)
    if part == "partial":
        pads = 1.0 / pads
    busy = np.maximum(predicted - floor, 0.0)
    smooth = floor + busy * pads
    usable = np.isfinite(predicted) & (smooth > 0) & (predicted > 0)
    return np.where(usable, predicted / np.where(usable, smooth, 1.0), 1.0)


def partial_waste(
    model: object,
    default: Candidate,
    shapes: Sequence[Shape],
    predicted: np.ndarray | None = None,
) -> np.ndarray:
    """[row] what IREE's default's partial distribution tiles add to its time as ``model``
    predicts it (``predicted``: the default's column of its prediction, where it is at hand;
    :func:`default_waste`'s ``"partial"``), 1 without a model that says: the floor's
    estimate and the pairs with the default are carried across shapes net of it."""
    if predicted is None:
        predict = getattr(model, "predict", None)
        if predict is None:
            return np.ones(len(shapes))
        predicted = np.asarray(predict([default], shapes), dtype=float)[:, 0]
    found = default_waste(model, default, shapes, predicted, part="partial")
    return np.ones(len(shapes)) if found is None else found
