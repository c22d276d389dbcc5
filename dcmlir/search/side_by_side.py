"""Pairs of kernels timed in one call of the measurer: what a close call stands on.

Two records of one shape are a pair where each names the other in ``extra.together``
(interleaved rounds, the same inputs); records from calls minutes apart are not (a
"pair" at T = 16 of `dense_ffn1`, two calls 22 s apart, showed 1.71x where the real pair
showed 0.89x). A pair may also be timed *again*, side by side, at a shape where one of
the two has a record already (``extra.again``): the search keeps its first records as
they were, so a resumed run sees what it saw, and holds these beside them. Without them
a regime could go untimed: on `heldout_large_ffn1` at budget 240, data tiling had records
at every shape of 12-row tiles' two-tile regime (T = 13..16) from other pairs, no pair of
the two could be timed there, and the plan ran 12-row tiles 1.16x slower at T = 15, 16.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dcmlir.records import Record
from dcmlir.shapes import Shape

__all__ = ["Pairs", "Records", "side_by_side"]

Records = Mapping[tuple[str, Shape], Record]
"""The search's records of its measured (candidate key, shape) pairs."""


def side_by_side(records: Records, mine: str, theirs: str, shape: Shape) -> bool:
    """Whether the two kernels' records at ``shape`` come from one call of the measurer
    (interleaved rounds, the same inputs), not from calls minutes apart."""
    first, second = records.get((mine, shape)), records.get((theirs, shape))
    if first is None or second is None:
        return False
    return theirs in first.extra.get("together", ()) and mine in second.extra.get("together", ())


class Pairs:
    """The side-by-side pairs of the search's records and of its records timed again."""

    def __init__(self, records: Records, again: Sequence[Record] = ()) -> None:
        self.records = records
        self.again: dict[tuple[Shape, tuple[str, ...], str], Record] = {
            (r.shape, tuple(r.extra.get("together", ())), r.candidate_key): r for r in again if r.ok
        }

    def logs(self, mine: str, theirs: str) -> list[tuple[Shape, float]]:
        """``log(mine / theirs)`` of every pair of the two (a shape may hold two)."""
        return self.first_logs(mine, theirs) + self.again_logs(mine, theirs)

    def samples(self, mine: str, theirs: str) -> list[tuple[Shape, float, float]]:
        """(shape, mine's seconds, theirs') of every pair of the two, as :meth:`logs`."""
        return self._first(mine, theirs) + self._again(mine, theirs)

    def first_logs(self, mine: str, theirs: str) -> list[tuple[Shape, float]]:
        """``log(mine / theirs)`` of the pairs of the two's first records timed side by side."""
        return [(shape, math.log(a / b)) for shape, a, b in self._first(mine, theirs)]

    def again_logs(self, mine: str, theirs: str) -> list[tuple[Shape, float]]:
        """``log(mine / theirs)`` of the pairs of the two timed again."""
        return [(shape, math.log(a / b)) for shape, a, b in self._again(mine, theirs)]

    def _first(self, mine: str, theirs: str) -> list[tuple[Shape, float, float]]:
        found = []
        for (key, shape), record in self.records.items():
            other = self.records.get((theirs, shape))
            if key != mine or other is None or not (record.ok and other.ok):
                continue
            if side_by_side(self.records, mine, theirs, shape):
                found.append((shape, record.median, other.median))
        return found

    def _again(self, mine: str, theirs: str) -> list[tuple[Shape, float, float]]:
        found = []
        for (shape, together, key), record in self.again.items():
            other = self.again.get((shape, together, theirs))
            if key == mine and other is not None:
                found.append((shape, record.median, other.median))
        return found
