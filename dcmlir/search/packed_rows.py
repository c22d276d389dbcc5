"""The packed family's estimates: time on the M-tile grid, and the M each kernel serves.

A packed kernel (:mod:`dcmlir.space.packed`) states an M bound to IREE: it serves
shapes up to its ``M0`` only, where it is one tile and its time is flat; IREE's own
data tiling (``datatiled``, in the packed family) serves every M, stepping with its
tile for the target (:func:`~dcmlir.space.data_tiling_m0`), and so does an explicit
mmt4d kernel with its ``M0``. Both are estimated from their own measurements with
:mod:`dcmlir.cost_model.row_tiles` instead of the generic model, which scales a
throughput with the work and cannot see the flat steps (docs/design.md section 12).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dcmlir.cost_model.row_tiles import TileGridLine, tile_grid_estimate, tiles, two_points
from dcmlir.search.side_by_side import Pairs, side_by_side
from dcmlir.shapes import Shape
from dcmlir.space import (
    Candidate,
    DataTiledCandidate,
    Mmt4dCandidate,
    OneTileMmt4dCandidate,
    PackedCandidate,
    data_tiling_m0,
)
from dcmlir.workload import Workload

__all__ = [
    "CLEAR_WIN",
    "FEWER_ROWS",
    "MOST_TILES",
    "PAIR_OUTLIER",
    "PROPORTIONAL_FROM",
    "PackedRows",
    "Regime",
]

Regime = tuple[int, int]
"""The row-tile counts of a kernel and an IREE build at a shape."""

CLEAR_WIN = 1.5
"""A kernel timed at a shape at 1 / CLEAR_WIN or less of the time IREE's data tiling took at a
shape of the same row-tile count (where data tiling's time is the same) keeps the shape
without a side-by-side pair (:meth:`PackedRows.clear_wins`)."""

PAIR_OUTLIER = 1.3
"""A side-by-side pair is left out of its regime's ratio (:meth:`PackedRows.paired`) where
one of its samples is this much further above its kernel's other measurements of that
tile count (their median, two or more) than the other sample is above its own: a sample
the machine slowed alone, not a slow moment that slowed both. On `dense_ffn2`
(never_slower.py, budget 240, 2026-12-06) data tiling took 1084-1306 us in the one pair
of the 14-row tile's one-tile regime (T = 13), where its 16 other one-tile measurements
took 696-839, and the 14-row tile 642-683 beside it (599-604 at T = 9, 12, 14): the pair's
0.59 made the 14-row tile's estimate 458 us there, and it took T = 9..12 from the 12-row
tile (531 measured)."""


FEWER_ROWS = 0.95
"""A one-tile explicit kernel serves the M where its tiles compute at most this share of the
rows of every tile that serves every M (:meth:`PackedRows.serves`): 5% fewer rows, 5% less
time, beyond the selection's 2% tie margin and the floor's 3% loss margin."""


MOST_TILES = 3
"""A one-tile explicit kernel is searched for at most this many of its tiles: its estimate
there is its one measured tile times their count, and the further from that measurement,
the less it says. On a Zen 3 two and three 5-row tiles took 1.9x and 2.1-2.6x one
(`odd_head_1000`); without the cap `novel_down_2048` ran five 6-row tiles at T = 29 at 1.40x
onnxruntime's time, where eight 4-row tiles had run 1.20x (:meth:`PackedRows.serves`)."""

PROPORTIONAL_FROM = 4
"""Rows from which a tile's time is the rows it computes: one tile at T = 1 took 0.26, 0.32,
0.49, 0.75 and 1.0 of data tiling's time with 4, 5, 8, 12 and 16 rows (0.061-0.065 a row),
but 0.17 with 2 rows (0.085 a row; Zen 4). Smaller full tiles pad less and run slower, so
:meth:`PackedRows.serves` does not weigh their padding."""


class PackedRows:
    """The packed family of one workload's candidates (a one-dimensional M)."""

    def __init__(self, workload: Workload, candidates: Sequence[Candidate]) -> None:
        self.one_dim = len(workload.dynamic_dims) == 1
        # a packed kernel's N0 is the target's f32 lanes (space.packed_space)
        lanes = [c.n0 for c in candidates if isinstance(c, PackedCandidate)]
        self.tiling_m0 = data_tiling_m0(lanes[0]) if lanes else None
        self.candidates = list(candidates)
        full = {c.m0 for c in candidates if type(c) is Mmt4dCandidate and c.m0 >= PROPORTIONAL_FROM}
        if self.tiling_m0 is not None and any(
            isinstance(c, DataTiledCandidate) for c in candidates
        ):
            full.add(self.tiling_m0)
        self.full_tiles = sorted(full)
        """The M tiles of the kernels that serve every M, data tiling's and the full explicit
        ones, whose time is their rows (:data:`PROPORTIONAL_FROM`)."""

    def bound(self, candidate: Candidate) -> int | None:
        """The largest M a packed kernel serves (its ``M0``, the M it tells IREE), and a
        one-tile explicit kernel's one tile (its ``M0``; past it, :meth:`serves`)."""
        if isinstance(candidate, PackedCandidate | OneTileMmt4dCandidate) and self.one_dim:
            return candidate.m0
        return None

    def serves(self, candidate: Candidate, rows: int) -> bool:
        """Whether the search gives ``candidate`` the M of ``rows``: a bounded kernel up to
        its bound, and a one-tile explicit kernel past it where its tiles (at most
        :data:`MOST_TILES`) pad least, at most :data:`FEWER_ROWS` of the rows of every tile
        that serves every M (:attr:`full_tiles`). Past data tiling's tile every kernel pads
        (T = 17: 20 rows in 4-row tiles, 32 in data tiling's; onnxruntime, rows as they
        come, was 1.10-1.21x ahead there on seven projections), and a tile's time is the
        rows it computes (two 9-row tiles at T = 17: 0.50-0.56 of data tiling's time on a
        Zen 4, two 12-row tiles 0.66-0.74). Where its rows tie those of a tile of every M it
        never competes: those tie regimes are where the ten-tile space lost its draws
        (design.md section 12)."""
        bound = self.bound(candidate)
        if bound is None or rows <= bound:
            return True
        if not isinstance(candidate, OneTileMmt4dCandidate) or not self.full_tiles:
            return False
        if tiles(rows, candidate.m0) > MOST_TILES:
            return False
        least = min(tiles(rows, tile) * tile for tile in self.full_tiles)
        return tiles(rows, candidate.m0) * candidate.m0 <= FEWER_ROWS * least

    def tile(self, candidate: Candidate) -> int | None:
        """The M tile the kernel's time steps with; None for the generic model's kernels."""
        if not self.one_dim:
            return None
        if isinstance(candidate, PackedCandidate | Mmt4dCandidate):
            return candidate.m0
        if isinstance(candidate, DataTiledCandidate):
            return self.tiling_m0
        return None

    def regime(self, candidate: Candidate, build: Candidate, shape: Shape) -> Regime | None:
        """The tile counts of a kernel and a build at ``shape``, where both step on the tile
        grid: every shape of a regime costs each of them the same, so the pairs timed side
        by side in it are repeats of one comparison (None: no such grid)."""
        mine, theirs = self.tile(candidate), self.tile(build)
        if mine is None or theirs is None:
            return None
        return tiles(shape[0], mine), tiles(shape[0], theirs)

    def clear_wins(
        self,
        column: int,
        rows: Sequence[int],
        build: int | None,
        shapes: Sequence[Shape],
        seconds: Callable[[int, int], float | None],
    ) -> list[int]:
        """Of ``rows``, those where the kernel ``column`` was timed and took at most
        1 / :data:`CLEAR_WIN` of the fastest time of ``build`` (one stepping on its row tiles,
        data tiling; None: no rows) at a shape of the same tile count: a win no drift between
        two calls explains, so no side-by-side pair is needed there. Without it, on a
        `?x768 @ 768x768` projection with T in 1..512 (budget 60, a Zen 4), an mmt4d kernel
        with 4-row tiles timed at T = 3 (49 us; data tiling 171 at T = 2 and 5, one 16-row
        tile) had no pair near enough and gave T = 3 to a 2-row kernel (two tiles, 61 us)."""
        if build is None:
            return []
        tile = self.tile(self.candidates[build])
        if tile is None:
            return []
        counts = [tiles(shape[0], tile) for shape in shapes]
        fastest: dict[int, float] = {}  # the build's fastest record per tile count
        for row, count in enumerate(counts):
            if (value := seconds(build, row)) is not None:
                fastest[count] = min(value, fastest.get(count, math.inf))
        return [
            row
            for row in rows
            if (mine := seconds(column, row)) is not None
            and mine * CLEAR_WIN <= fastest.get(counts[row], 0.0)
        ]

    def regimes(
        self, shapes: Sequence[Shape], pairs: Pairs
    ) -> Callable[[int, int, int], tuple[Regime, bool] | None]:
        """(kernel column, build column, row) -> (:meth:`regime`, whether the two's records
        there were timed side by side), None where they step on no grid."""
        keys = [c.key() for c in self.candidates]

        def regime(column: int, build: int, row: int) -> tuple[Regime, bool] | None:
            found = self.regime(self.candidates[column], self.candidates[build], shapes[row])
            if found is None:
                return None
            return found, side_by_side(pairs.records, keys[column], keys[build], shapes[row])

        return regime

    def tile_steps(self, shapes: Sequence[Shape]) -> Callable[[int, int], np.ndarray | None]:
        """(kernel column, build column) -> [pair row, row]: the log of the kernel's row
        tiles per build tile at the row over those at the pair (None: either steps on no
        grid). A pair speaks for a row where this is not above 0, the kernel running no
        more row tiles per build tile there than at the pair: at T = 3 of `dense_ffn1` on
        an AVX2 Zen 3 one 4-row tile took 0.5x data tiling's one 8-row tile; at T = 5..8,
        two beside one, 1.07-1.11x. Its ratio is carried to the row by it."""
        rows = np.array([shape[0] for shape in shapes], dtype=float)
        found: dict[tuple[int, int], np.ndarray] = {}  # by the two tiles: asked every proof

        def tile_steps(column: int, build: int) -> np.ndarray | None:
            mine = self.tile(self.candidates[column])
            theirs = self.tile(self.candidates[build])
            if mine is None or theirs is None:
                return None
            if (mine, theirs) not in found:
                logs = np.log(np.ceil(rows / mine) / np.ceil(rows / theirs))
                found[mine, theirs] = logs[None, :] - logs[:, None]
            return found[mine, theirs]

        return tile_steps

    def paired(
        self,
        candidate: Candidate,
        build: Candidate,
        pairs: Pairs,
        measured: Mapping[tuple[str, Shape], float] | None = None,
    ) -> dict[Regime, float]:
        """Per regime, the kernel's time over the build's: the geomean over the pairs the
        two were timed in side by side (:class:`~dcmlir.search.side_by_side.Pairs`), less
        those one of whose samples the machine slowed alone (:data:`PAIR_OUTLIER`, read
        from the ``measured`` times)."""
        logs: dict[Regime, list[float]] = {}
        for shape, mine, theirs in pairs.samples(candidate.key(), build.key()):
            regime = self.regime(candidate, build, shape)
            if regime is None:
                continue
            pair = ((candidate, mine), (build, theirs))
            if measured is not None and self._slowed_alone(pair, shape, measured):
                continue
            logs.setdefault(regime, []).append(math.log(mine / theirs))
        return {regime: math.exp(sum(v) / len(v)) for regime, v in logs.items()}

    def _slowed_alone(
        self,
        pair: tuple[tuple[Candidate, float], tuple[Candidate, float]],
        shape: Shape,
        measured: Mapping[tuple[str, Shape], float],
    ) -> bool:
        """Whether one sample of a ``pair`` (kernel, seconds) at ``shape`` is over
        :data:`PAIR_OUTLIER` times further above its kernel's other measurements of the
        same row-tile count (their median, two or more each) than the other's."""
        above = []
        for candidate, seconds in pair:
            tile = self.tile(candidate)
            assert tile is not None
            count = tiles(shape[0], tile)
            others = [
                value
                for (key, where), value in measured.items()
                if key == candidate.key()
                and where != shape
                and math.isfinite(value)
                and tiles(where[0], tile) == count
            ]
            if len(others) < 2:
                return False
            above.append(math.log(seconds / statistics.median(others)))
        return abs(above[0] - above[1]) > math.log(PAIR_OUTLIER)

    def picks(self, candidate: Candidate, shapes: Sequence[Shape]) -> list[Shape]:
        """Where to measure it first: one tile and the most tiles in range (a bounded
        kernel: both ends of the rows it serves; a one-tile explicit kernel: its bound)."""
        rows = sorted(shape[0] for shape in shapes)
        bound = self.bound(candidate)
        if bound is not None:
            served = [r for r in rows if r <= bound] or rows[:1]
            if isinstance(candidate, OneTileMmt4dCandidate):
                return [(served[-1],)]  # one tile from the first row on: flat (k tiles: k times)
            return sorted({(served[0],), (served[-1],)})
        tile = self.tile(candidate)
        assert tile is not None
        wanted = two_points(tile, rows[0], rows[-1])
        return sorted({(min(rows, key=lambda r: (abs(r - w), r)),) for w in wanted})

    def estimate(
        self,
        estimate: np.ndarray,
        shapes: Sequence[Shape],
        keys: Sequence[str],
        measured: Mapping[tuple[str, Shape], float],
        pairs: Pairs | None = None,
    ) -> None:
        """Overwrite the family's columns of ``estimate`` [shape, candidate] in place
        (``pairs``: the measurements timed side by side)."""
        for column, candidate in enumerate(self.candidates):
            tile = self.tile(candidate)
            if tile is None or not np.isfinite(estimate[:, column]).any():
                continue
            points = [(s[0], t) for (key, s), t in measured.items() if key == keys[column]]
            found = tile_grid_estimate(tile, points, [shape[0] for shape in shapes])
            bound = self.bound(candidate)
            timed = [seconds for _, seconds in points if math.isfinite(seconds)]
            if found is None and bound is not None and timed:
                found = _per_tile(tile, points, [shape[0] for shape in shapes])
            if found is not None:
                estimate[:, column] = found
            if bound is not None:
                estimate[[not self.serves(candidate, s[0]) for s in shapes], column] = math.inf
        if pairs is not None:
            self._beside_data_tiling(estimate, shapes, pairs, measured)

    def _beside_data_tiling(
        self,
        estimate: np.ndarray,
        shapes: Sequence[Shape],
        pairs: Pairs,
        measured: Mapping[tuple[str, Shape], float],
    ) -> None:
        """In a regime where a kernel and data tiling were timed side by side, the kernel's
        estimate is data tiling's times their paired ratio. Each alone is the median of
        samples taken minutes apart: on `dense_out` 8-row tiles took 208 us at T = 15 beside
        data tiling's 230, and data tiling's median over its one-tile shapes was 187 us,
        so the explicit family was estimated 1.12x slower where it was timed 0.90x (a pair
        one of whose samples was slowed alone is left out: :data:`PAIR_OUTLIER`)."""
        build = next((c for c in self.candidates if isinstance(c, DataTiledCandidate)), None)
        if build is None or self.tile(build) is None:
            return
        theirs = self.candidates.index(build)
        for column, candidate in enumerate(self.candidates):
            if column == theirs or self.tile(candidate) is None:
                continue
            ratios = self.paired(candidate, build, pairs, measured)
            for row, shape in enumerate(shapes):
                regime = self.regime(candidate, build, shape)
                ratio = None if regime is None else ratios.get(regime)
                if ratio is not None and np.isfinite(estimate[row, [column, theirs]]).all():
                    estimate[row, column] = estimate[row, theirs] * ratio


def _per_tile(tile: int, points: Sequence[tuple[int, float]], rows: Sequence[int]) -> list[float]:
    """A bounded kernel timed at one tile count only: flat within a tile, and in proportion
    to the tiles past it (a tile's time is the rows it computes; the explicit 4-row tile of
    `dense_qkv` took 130, 128 and 127 us a tile at 2, 3 and 6 tiles on a Zen 4)."""
    timed = [(tiles(value, tile), s) for value, s in points if math.isfinite(s)]
    line = TileGridLine(tile, 0.0, float(np.mean([s / count for count, s in timed])))
    return [line.predict(value) for value in rows]
