"""Side-by-side evidence where a family's picks and the best IREE build are a close call.

A workload's kernels come from one family (:mod:`dcmlir.search.selection`), and the
family that loses least to the best IREE build wins before the faster one. The packed
family holds IREE's data tiling itself, so it never loses to it; any other family is
compared with it through single samples taken minutes apart, on a machine whose IREE
default drifted by up to 76% between two rounds of one run. A family 1.1-1.2x faster
by geomean then lost on a few noisy cells (the explicit mmt4d family on BERT's
projections, 2026-11-26), and, once chosen, it ran 8% slower than data tiling at T =
13..16 of `dense_out` where its estimate said it won. So the contested family (a faster
one estimated to lose somewhere, else the chosen one when no IREE build is in it) has
its pick and the best IREE build timed at one shape in one call of the measurer
(interleaved, the same input sets), at shapes where neither was measured, one per
tile-count regime (at any of its shapes); a regime whose pairs, twice or more, show a
loss beyond 3% and beyond their standard error is a real loss and ends the duel (the
estimates now carry it, data tiling's times the regime's paired ratio), and the duel
never takes more than its share of the budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from dcmlir.cost_model.row_tiles import tiles
from dcmlir.search.selection import LOSS_MARGIN, SelectionSettings, contested_family
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate

__all__ = ["FamilyDuel"]

Seconds = Callable[[int, int], "float | None"]  # (column, row) -> measured seconds or None
Tile = Callable[[Candidate], "int | None"]  # the M tile a kernel's time steps with


Regime = tuple[int, int, int, int]  # (rival column, build column, their tile counts)
AgainLogs = Callable[[int, int], list[tuple[int, float]]]  # (column, build) -> (row, log ratio)


class FamilyDuel:
    """The duel's state across the search's rounds: the shapes it timed, by regime."""

    def __init__(self, candidates: Sequence[Candidate], budget: int, share: float) -> None:
        self.candidates = list(candidates)
        self.room = int(budget * share)
        self.used = 0
        self.timed: dict[Shape, Regime] = {}
        self.retimed: set[tuple[Shape, Regime]] = set()
        self.again: set[Shape] = set()  # of the last pairs, the shapes to time again
        self.builds = [
            i
            for i, c in enumerate(self.candidates)
            if isinstance(c, DefaultCandidate | DataTiledCandidate)
        ]

    def pairs(
        self,
        estimate: np.ndarray,
        shapes: Sequence[Shape],
        settings: SelectionSettings,
        seconds: Seconds,
        tile: Tile,
        limit: int,
        again: AgainLogs | None = None,
    ) -> list[tuple[Candidate, Shape]]:
        """The next pairs to time (the contested family's pick and the build at one
        shape), or none: nothing contested, a regime whose pairs show the loss, or the
        share is spent.

        A regime is the rival's kernel and the build with their row-tile counts: every
        shape of it costs the same, so its pairs are repeats of one comparison. A regime
        the estimate still shows losing gets a pair, the regimes timed least first (an
        estimate averages every sample of a tile count, the duel's and the others'); the
        loss is real when the mean of two or more pairs of one regime, less its standard
        error, shows it (:data:`~dcmlir.search.selection.LOSS_MARGIN`). A regime's pair
        may be timed at any of its shapes, also where the rival picks another kernel (on
        `dense_qkv` the only shape of 8-row tiles against data tiling's one 16-row tile
        left to time was T = 15; at T = 9..14 the rival ran 12 and 14 rows). Pairs of a
        regime where the rival no longer loses are moot: its estimate moved, and the rival
        moved with it. A regime none of whose shapes is free (both unmeasured) is timed
        again at one of them (:mod:`dcmlir.search.side_by_side`; ``again``: those pairs,
        and :attr:`again` the shapes to time so)."""
        self.again = set()
        room = min(self.room - self.used, limit)
        if room < 2 or not self.builds:
            return []
        contest = contested_family(estimate, shapes, self.candidates, settings)
        if contest is None:
            return []
        rival, threshold = contest
        line = math.log1p(LOSS_MARGIN)
        losing: set[Regime] = set()  # where the rival's pick is estimated to lose
        for row, shape in enumerate(shapes):
            column = rival.kernels[rival.choice[shape]]
            build = min(self.builds, key=lambda c: float(estimate[row, c]))
            if float(estimate[row, column] / estimate[row, build]) > threshold:
                losing.add((column, build, *self._counts(shape, column, build, tile)))
        ratios: dict[Regime, list[float]] = {}
        row_of = {shape: row for row, shape in enumerate(shapes)}
        for shape, regime in self.timed.items():
            if regime not in losing:
                continue  # the rival no longer loses with that kernel there: the pair is moot
            mine, theirs = seconds(regime[0], row_of[shape]), seconds(regime[1], row_of[shape])
            if mine is not None and theirs is not None:
                ratios.setdefault(regime, []).append(math.log(mine / theirs))
        for column, build in {regime[:2] for regime in losing} if again else ():
            for row, value in again(column, build):
                regime = (column, build, *self._counts(shapes[row], column, build, tile))
                if regime in losing:
                    ratios.setdefault(regime, []).append(value)
        for found in ratios.values():
            if len(found) >= 2 and _mean_less_error(found) > line:
                return []  # timed side by side, twice or more, beyond their spread: real
        wanted: dict[Regime, tuple[tuple[int, bool, float], Shape]] = {}
        for regime in losing:  # any shape of the regime repeats the comparison
            column, build = regime[:2]
            for row, shape in enumerate(shapes):
                if self.timed.get(shape) == regime or (shape, regime) in self.retimed:
                    continue
                if (column, build, *self._counts(shape, column, build, tile)) != regime:
                    continue
                free = shape not in self.timed and seconds(column, row) is None
                free = free and seconds(build, row) is None
                if not (free or again):
                    continue
                ratio = float(estimate[row, column] / estimate[row, build])
                # regimes timed least first; free shapes (their records feed the estimate)
                score = (-len(ratios.get(regime, [])), free, ratio)
                if regime not in wanted or score > wanted[regime][0]:
                    wanted[regime] = (score, shape)
        found: list[tuple[Candidate, Shape]] = []
        ranked = sorted(wanted.items(), key=lambda item: item[1], reverse=True)
        for regime, ((_, free, _), shape) in ranked:
            if len(found) + 2 > room or any(shape == s for _, s in found):
                continue  # one pair a shape: a shape is timed once or again, not both
            found += [(self.candidates[regime[0]], shape), (self.candidates[regime[1]], shape)]
            if free:
                self.timed[shape] = regime
            else:
                self.retimed.add((shape, regime))
                self.again.add(shape)
        self.used += len(found)
        return found

    def _counts(self, shape: Shape, column: int, build: int, tile: Tile) -> tuple[int, int]:
        return (
            _count(shape, tile(self.candidates[column])),
            _count(shape, tile(self.candidates[build])),
        )


def _mean_less_error(logs: list[float]) -> float:
    """The mean of log ratios less its standard error: a regime of 8-row tiles against data
    tiling's 16-row one on `dense_qkv` gave 1.064 and 1.005 (mean 1.034, past the 3% line)
    and then 0.97-1.07 over five more shapes, 1.018 in all: a tie, not a loss."""
    return statistics.mean(logs) - statistics.stdev(logs) / math.sqrt(len(logs))


def _count(shape: Shape, tile: int | None) -> int:
    """The regime of a shape for a kernel: its row-tile count, else the shape's M."""
    return tiles(shape[0], tile) if tile else shape[0]
