"""Stop chasing a shape's estimates once never-measured kernels keep missing them there.

The search measures a kernel it never measured at a shape when the cost model estimates
it beats what the shape has. Of many kernels, those estimated fastest are the ones whose
estimates most likely err low (the winner's curse), and a kernel measured once fits its
own measurement, so the by-shape correction learns nothing from the miss: on
``fresh_context_h96`` at a budget of 110 (oracle replay, 2026-12-02) the shape 127x127
took about 12 single-pair rounds, each a new kernel estimated at 155-180 us that measured
184-360 us, and the budget ran out before the shapes elsewhere were proven.

So once the first measurements of never-measured kernels at a shape have come out slower
than their estimates by more than the contender margin ``limit`` times (3, or 3% of the
budget where that is more), no never-measured kernel is estimated at that shape any more:
the rest of the budget proves the measured ones. Replayed on 15 workloads, 3 seeds
(``benchmarks/quality.py``, docs/benchmarks.md): selection quality geomean at B = 110
0.957 -> 0.959, and the T slower than the faster IREE build by more than 3% went from 11 to
8 at B = 60 and from 7 to 5 at B = 110; at B = 240 (limit 7) the geomean moved 0.9828 ->
0.9821. In the 30 live tunes of ``never_slower.py`` (budgets 60 and 240, 2026-12-03) it
never fired: each plan was the same with the limit off.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dcmlir.shapes import Shape
from dcmlir.space import Candidate

__all__ = ["CHASE_LIMIT", "CHASE_SHARE", "ChaseLimit", "FirstMeasurement"]

CHASE_LIMIT = 3  # misses at a shape before its never-measured kernels are estimated no more
CHASE_SHARE = 0.03  # ... or this share of the budget, where that is more


@dataclass(frozen=True)
class FirstMeasurement:
    """A pair of a kernel never measured before its round, and its estimate then (a
    round may time several pairs of one new kernel: each counts at its own shape)."""

    key: str
    shape: Shape
    row: int
    estimate: float


@dataclass
class ChaseLimit:
    """Per shape (row), the never-measured kernels whose first measurement missed."""

    limit: int
    margin: float
    misses: dict[int, int] = field(default_factory=dict)

    @classmethod
    def for_budget(cls, budget: int, margin: float) -> ChaseLimit:
        return cls(max(CHASE_LIMIT, round(CHASE_SHARE * budget)), margin)

    def firsts(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        estimate: np.ndarray,
        columns: Mapping[str, int],
        shape_index: Mapping[Shape, int],
        never_measured: Collection[int],
    ) -> list[FirstMeasurement]:
        """Of ``pairs`` about to be timed, those of the ``never_measured`` columns."""
        found = []
        for candidate, shape in pairs:
            column = columns.get(candidate.key())
            if column not in never_measured or shape not in shape_index:
                continue
            row = shape_index[shape]
            guess = float(estimate[row, column])
            found.append(FirstMeasurement(candidate.key(), shape, row, guess))
        return found

    def count(
        self, firsts: Sequence[FirstMeasurement], measured: Mapping[tuple[str, Shape], float]
    ) -> None:
        """Count the ``firsts`` that came out slower than estimated beyond the margin (a
        failure to build or run is not a miss: the estimates already drop that kernel)."""
        for first in firsts:
            seconds = measured.get((first.key, first.shape), math.inf)
            missed = first.estimate * (1 + self.margin) < seconds < math.inf
            if missed and math.isfinite(first.estimate):
                self.misses[first.row] = self.misses.get(first.row, 0) + 1

    def apply(self, estimate: np.ndarray, never_measured: Sequence[int]) -> None:
        """Estimate the ``never_measured`` columns nowhere at the shapes past the limit."""
        chased = [row for row, count in self.misses.items() if count >= self.limit]
        if chased and never_measured:
            estimate[np.ix_(chased, list(never_measured))] = math.inf
