"""Remainder classes: which dynamic loops a kernel's tiles leave a remainder on, per shape.

IREE peels the remainder of a vector tile on a dynamic loop into a slower loop, and
what it costs depends on the loop and the tile, not on the workgroup: ``wg16x256:v4x64``
and ``wg8x128:v4x64`` run the same remainder code on N. The search
(:mod:`dcmlir.search.shape_generic`) corrects its estimates per class, learns what a
class costs from a kernel's siblings (the same tiles on the dynamic loops), and keeps no
kernel on shapes of a class it was never measured in (records: a 64-wide N tile measured
only with an M remainder was chosen at T = 48 of attention scores, 22x slower than IREE's
default there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import numpy as np

from dcmlir.cost_model import pad_tiles
from dcmlir.shapes import Shape
from dcmlir.space import Candidate
from dcmlir.workload import M, N, Workload

__all__ = [
    "REACH",
    "UNSEEN_REMAINDER",
    "RemainderClasses",
    "axis_distance",
    "cover_matrix",
    "greedy_cover",
    "log_distance",
]

UNSEEN_REMAINDER = 1.5
"""How much slower than predicted a kernel is assumed on shapes of a remainder class it
was never measured in, when no kernel shows what that class costs: no sibling, and no
kernel with the same (or a wider) tile on each loop the class has a remainder on. Only
what is measured next follows from it: a kernel keeps a shape only with a measurement in
its class within reach (:meth:`RemainderClasses.unproven`). At 2x (before 2026-12-07) a
kernel measured only where its tiles divide T was kept off the other T: on every T of
1..128 of attention context (a Zen 4 oracle, docs/benchmarks.md, "A remainder class never
measured, assumed 1.5x") live plans ran a 2-row kernel at 0.85 of the best at three T of
four where the 4-row kernel they ran at multiples of 4 was the best; the measured
remainders there cost 1.02-1.22x, 1.3-1.9x for 16-wide N tiles of attention scores,
2.8-5.7x for 32 and 64 (the EPYC oracle). Oracle replay, 15 workloads, seeds 0-5: 1.5 met
the replay's two misses of seeds 0-2 and lifted the geomean at 60, 110 and 240; 1.4 and
1.6 each left cells under their lines."""

REACH = 4.0
"""How far one measurement speaks for a kernel: to the shapes whose dynamic extents'
ratios to the measured one's multiply to within this factor to the power of the number
of dynamic loops that vary on their own (tied loops, attention's T x T in a model,
count once), each ratio within it too: on one loop, within 4x; on a T x T' grid, each
ratio within 4x and their product within 16 (:func:`axis_distance`,
:func:`log_distance`). Without a reach, a kernel measured only at T = 1 (a
remainder on every loop, so its class covers all others) kept T = 17..127 of attention
scores at 0.59 of the oracle (quality replay, budget 110). With 4 on each of two free
loops (a square: attention context tuned on its 256-shape T x T' grid), proofs took the
whole budget of 240 before IREE's default was measured beside them, and 28 of 40 T ran
the default, up to 2.5x slower than data tiling. With 16 on each (the square that
replaced it), one measurement at 16 x 16 spoke for T = 1..128 of the diagonal, and
kernels measured there ran at T = 5..7 and 11..14, 1.2-1.4x slower than the default
(benchmarks/never_slower.py). With the product alone, one ratio could reach 16x: a
kernel measured at 5 x 30 (0.64x the default's time) kept 23 x 23 of attention scores,
where it ran 1.3-1.4x slower."""

Points = list[tuple[int, float]]
"""(shape row, log ratio measured/predicted) of one candidate's measurements."""
Penalties = dict[tuple[tuple[int, ...], int], float]
"""(tiles on the dynamic loops, class) -> measured slowdown of the class over none."""


class RemainderClasses:
    """The class of every (shape, candidate): bit i set when the candidate's tile on
    dynamic loop i does not divide the shape's extent (IREE's own builds: always 0)."""

    def __init__(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        shapes: Sequence[Shape],
        reach: float = REACH,
    ) -> None:
        self.workload, self.shapes = workload, list(shapes)
        self.tiles = [_dynamic_tiles(workload, c) for c in candidates]
        self.masks = np.array(
            [[_mask(tiles, shape) for tiles in self.tiles] for shape in shapes], dtype=np.int64
        ).reshape(len(shapes), len(candidates))
        self.distance = axis_distance(self.shapes)
        free_loops = len(_axes(self.shapes))  # tied loops count once
        self.near = self.distance <= math.log(reach) * free_loops + 1e-9
        self.near &= log_distance(self.shapes) <= math.log(reach) + 1e-9  # no loop farther
        self._covers: dict[int, np.ndarray] = {}  # column -> cover matrix (masks are fixed)
        self._classes = {  # every (tiles, class with a remainder) a kernel has here
            (tiles, int(mask))
            for column, tiles in enumerate(self.tiles)
            if tiles
            for mask in self.masks[:, column]
            if mask
        }

    def with_default(self, default_tile: int) -> np.ndarray:
        """The masks with IREE's default's own class in the bits above: the class a kernel
        and the default measured side by side share. The default is taken to tile its
        dynamic M and N loops by ``default_tile`` (the cost model's effective tile)."""
        tiles = tuple(
            default_tile if d.role in (M, N) and default_tile > 1 else 0
            for d in self.workload.dynamic_dims
        )
        own = np.array([_mask(tiles, shape) for shape in self.shapes], dtype=np.int64)
        return self.masks | (own[:, None] << len(tiles))

    def penalties(self, residual: dict[int, Points]) -> Penalties:
        """What each class costs, from the candidates measured both in it and in none.

        A candidate never measured with a remainder takes its siblings' measured ratio
        instead of the blind :data:`UNSEEN_REMAINDER` (records: 4-10x for a 64-wide
        vector tile on an attention batch matmul's dynamic N, where 2x let it be chosen),
        else what the kernels with its tile on each such loop showed (:meth:`_pooled`).
        """
        logs: dict[tuple[tuple[int, ...], int], list[float]] = {}
        for column, points in residual.items():
            tiles = self.tiles[column]
            if not tiles:
                continue
            by_mask: dict[int, list[float]] = {}
            for row, value in points:
                by_mask.setdefault(int(self.masks[row, column]), []).append(value)
            if 0 not in by_mask:
                continue
            for mask, values in by_mask.items():
                if mask:
                    ratio = float(np.mean(values) - np.mean(by_mask[0]))
                    logs.setdefault((tiles, mask), []).append(ratio)
        found = {key: _slowdown(values) for key, values in logs.items()}
        return found | self._pooled(logs, found)

    def _pooled(
        self, logs: dict[tuple[tuple[int, ...], int], list[float]], found: Penalties
    ) -> Penalties:
        """Each (tiles, class) no sibling was measured in: the product over its loops with a
        remainder of what a remainder on that loop cost the kernels with that tile on it (or
        the nearest larger tile: a wider tile peels more), measured alone; for the loops no
        kernel was measured with a remainder on alone, what a class with remainders on them
        and more cost (:func:`_bounded`)."""
        loop_logs: dict[tuple[int, int], list[float]] = {}
        for (tiles, mask), values in logs.items():
            if mask & (mask - 1) == 0:  # one loop
                loop = mask.bit_length() - 1
                loop_logs.setdefault((loop, tiles[loop]), []).extend(values)
        loop_penalty = {key: _slowdown(values) for key, values in loop_logs.items()}
        pooled: Penalties = {}
        for tiles, mask in self._classes - found.keys():
            factors, unknown = [], 0
            for loop in _bits(mask):
                factor = _nearest_larger(loop_penalty, loop, tiles[loop])
                if factor is None:
                    unknown |= 1 << loop
                else:
                    factors.append(factor)
            bound = _bounded(found, tiles, unknown) if unknown else 1.0
            if bound is not None:
                pooled[(tiles, mask)] = math.prod(factors) * bound
        return pooled

    def correction(
        self,
        column: int,
        points: Points,
        penalties: Penalties,
        interpolate: Callable[[Points], np.ndarray],
    ) -> np.ndarray:
        """What one candidate's measurements say beyond the shape correction, per shape.

        Each class is corrected from measurements of the same class, else of a class
        with more remainders (no better than it). A class measured only with fewer
        remainders (or none) is assumed slower there than the model says: by the ratio
        its siblings measured, else by what the class cost kernels with its tiles
        (:meth:`penalties`), else by :data:`UNSEEN_REMAINDER`, until a measurement
        shows otherwise: a kernel that shone on its cherry-picked exact fit is not
        trusted blindly next to it.
        """
        masks = self.masks[:, column]
        groups: dict[int, Points] = {}
        for row, value in points:
            groups.setdefault(int(masks[row]), []).append((row, value))
        correction = np.ones(len(masks))
        for mask in {int(m) for m in masks}:
            rows = masks == mask
            covering = groups.get(mask) or [
                point for m, found in groups.items() if m & mask == mask for point in found
            ]
            if covering:
                correction[rows] = interpolate(covering)[rows]
                continue
            fewer = [point for m, found in groups.items() if m & mask == m for point in found]
            penalty = penalties.get((self.tiles[column], mask), UNSEEN_REMAINDER)
            correction[rows] = interpolate(fewer or points)[rows] * penalty
        return correction

    def cover(self, column: int) -> np.ndarray:
        """[measured row, row]: whether a measurement of ``column`` at the first row is
        evidence at the second: near it, and in its class or one with more remainders
        (no faster)."""
        if column not in self._covers:
            matrix = cover_matrix(self.masks[:, column], self.near)
            matrix.setflags(write=False)  # shared by every later call
            self._covers[column] = matrix
        return self._covers[column]

    def unproven_rows(
        self, regions: dict[int, list[int]], measured_rows: Callable[[int], set[int]]
    ) -> dict[int, list[int]]:
        """Each chosen kernel's rows that none of its measurements covers (:meth:`cover`).

        ``regions``: each chosen kernel's column -> the shape rows it is chosen for. A
        remainder can cost 10x what the model says, and an extent 4x away from the
        nearest measurement is the model's word alone: no kernel keeps such shapes
        (IREE's default is the floor).
        """
        found: dict[int, list[int]] = {}
        for column, region in regions.items():
            measured = sorted(measured_rows(column))
            covered = self.cover(column)[measured].any(axis=0)
            rows = [row for row in region if not covered[row]]
            if rows:
                found[column] = rows
        return found

    def unproven(
        self,
        regions: dict[int, list[int]],
        measured_rows: Callable[[int], set[int]],
        prefer: Collection[int] = (),
    ) -> list[tuple[int, int]]:
        """(column, row) pairs that would prove each chosen kernel where it is chosen.

        Greedy cover of :meth:`unproven_rows`: first the row of the region whose
        measurement covers most of them; on ties a row in ``prefer`` (where IREE's default
        was measured, so the pair of :mod:`.baseline_evidence` costs nothing more).
        """
        pairs: list[tuple[int, int]] = []
        for column, missing in self.unproven_rows(regions, measured_rows).items():
            pairs += [
                (column, row)
                for row in greedy_cover(self.cover(column), regions[column], missing, prefer)
            ]
        return pairs


def _slowdown(logs: Sequence[float]) -> float:
    """A class's penalty from its log ratios: their geometric mean, never below 1 (a
    remainder measured faster is noise, not a bonus)."""
    return max(math.exp(float(np.mean(logs))), 1.0)


def _bounded(found: Penalties, tiles: tuple[int, ...], loops: int) -> float | None:
    """What remainders on ``loops`` cost, bounded from above: the penalty of a measured class
    with remainders on them (and maybe more) of kernels with tiles no smaller there, the
    smallest such tiles first (their geometric mean on ties). A remainder costs no less
    beside another, so this is at least the class's own cost, and no blind guess: on
    attention context (EPYC oracle, budget 240) a 2-row M tile measured at even T only was
    estimated at :data:`UNSEEN_REMAINDER` at odd T, where the 4-row tiles' remainders on
    both loops cost 1.0-1.1x, and lost T = 1..65 to kernels up to 1.2x slower (0.959 of
    the oracle; 0.983 with the bound)."""
    ranked = [
        ((sum(t[i] for i in _bits(loops)), bin(m).count("1")), value)
        for (t, m), value in found.items()
        if m & loops == loops
        and len(t) == len(tiles)
        and all(t[i] >= tiles[i] for i in _bits(loops))
    ]
    if not ranked:
        return None
    nearest = min(rank for rank, _ in ranked)
    return math.exp(float(np.mean([math.log(v) for rank, v in ranked if rank == nearest])))


def _bits(mask: int) -> list[int]:
    """The loops (bit positions) set in ``mask``."""
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _nearest_larger(penalty: dict[tuple[int, int], float], loop: int, tile: int) -> float | None:
    """What a remainder on ``loop`` cost with ``tile`` on it, else with the smallest larger tile."""
    larger = sorted(t for lp, t in penalty if lp == loop and t >= tile)
    return penalty[(loop, larger[0])] if larger else None


def cover_matrix(masks: np.ndarray, near: np.ndarray) -> np.ndarray:
    """[measured row, row]: near, and the measured row's class has the row's remainders."""
    return near & ((masks[:, None] & masks[None, :]) == masks[None, :])


def greedy_cover(
    cover: np.ndarray, rows: Sequence[int], missing: Sequence[int], prefer: Collection[int]
) -> list[int]:
    """Rows among ``rows`` to measure so that every one of ``missing`` is covered
    (``cover[measured, row]``): most newly covered first, a ``prefer`` row on ties."""
    left = np.zeros(cover.shape[0], dtype=bool)
    left[list(missing)] = True
    liked = np.zeros(cover.shape[0], dtype=bool)
    liked[list(prefer)] = True
    options = np.asarray(rows)
    chosen: list[int] = []
    while left.any():
        gains = (cover[options] & left[None, :]).sum(axis=1)
        best = int(np.argmax(gains * 2 + liked[options]))
        if gains[best] == 0:
            break
        chosen.append(int(options[best]))
        left &= ~cover[options[best]]
    return chosen


def log_distance(shapes: Sequence[Shape]) -> np.ndarray:
    """[row, row]: the largest |log ratio| of one shape's dynamic extents to the other's."""
    extents = np.maximum(np.asarray(shapes, dtype=float).reshape(len(shapes), -1), 1.0)
    logs = np.log(extents)
    return np.abs(logs[:, None, :] - logs[None, :, :]).max(axis=2)


def axis_distance(shapes: Sequence[Shape]) -> np.ndarray:
    """[row, row]: the sum over the free axes (:func:`_axes`) of |log ratio| of one
    shape's extent to the other's: a tied pair of loops counts once."""
    extents = np.maximum(np.asarray(shapes, dtype=float).reshape(len(shapes), -1), 1.0)
    logs = np.log(extents[:, _axes(shapes)])
    return np.abs(logs[:, None, :] - logs[None, :, :]).sum(axis=2)


def _axes(shapes: Sequence[Shape]) -> list[int]:
    """One dynamic loop of each group whose values are equal at every shape."""
    values = np.asarray(shapes).reshape(len(shapes), -1)
    found: list[int] = []
    for i in range(values.shape[1]):
        if not any(np.array_equal(values[:, i], values[:, j]) for j in found):
            found.append(i)
    return found


def _dynamic_tiles(workload: Workload, candidate: Candidate) -> tuple[int, ...]:
    """The candidate's pad tiles on the dynamic loops (empty for IREE's own builds)."""
    tiles = pad_tiles(workload, candidate)
    if tiles is None:
        return ()
    return tuple(tiles[d.index] for d in workload.dynamic_dims)


def _mask(tiles: tuple[int, ...], shape: Shape) -> int:
    """Bit i set: the tile on dynamic loop i leaves a remainder at ``shape`` (0: untiled)."""
    return sum(
        1 << i
        for i, (tile, extent) in enumerate(zip(tiles, shape, strict=False))
        if tile and extent % tile
    )
