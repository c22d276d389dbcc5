"""The packed family's estimates: time on the M-tile grid, and the M each kernel serves.

A packed kernel (:mod:`dcmlir.space.packed`) states an M bound to IREE: it serves
shapes up to its ``M0`` only, where it is one tile and its time is flat; IREE's own
data tiling (``datatiled``, in the packed family) serves every M, stepping with its
widest tile, and so does an explicit mmt4d kernel with its ``M0``. Both are estimated
from their own measurements with
:mod:`dcmlir.cost_model.row_tiles` instead of the generic model, which scales a
throughput with the work and cannot see the flat steps (docs/design.md section 12).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from dcmlir.cost_model.row_tiles import tile_grid_estimate, tiles, two_points
from dcmlir.shapes import Shape
from dcmlir.space import PACKED_M0, Candidate, DataTiledCandidate, Mmt4dCandidate, PackedCandidate
from dcmlir.workload import Workload

__all__ = ["PackedRows"]


class PackedRows:
    """The packed family of one workload's candidates (a one-dimensional M)."""

    def __init__(self, workload: Workload, candidates: Sequence[Candidate]) -> None:
        self.one_dim = len(workload.dynamic_dims) == 1
        self.packs_weight = any(isinstance(c, PackedCandidate) for c in candidates)
        self.candidates = list(candidates)

    def bound(self, candidate: Candidate) -> int | None:
        """The largest M a packed kernel serves (its ``M0``, the M it tells IREE)."""
        if isinstance(candidate, PackedCandidate) and self.one_dim:
            return candidate.m0
        return None

    def tile(self, candidate: Candidate) -> int | None:
        """The M tile the kernel's time steps with; None for the generic model's kernels."""
        if not self.one_dim:
            return None
        if isinstance(candidate, PackedCandidate | Mmt4dCandidate):
            return candidate.m0
        if isinstance(candidate, DataTiledCandidate) and self.packs_weight:
            return max(PACKED_M0)
        return None

    def pooled(
        self, candidate: Candidate, shape: Shape, measured: Mapping[tuple[str, Shape], float]
    ) -> float:
        """``candidate``'s measured time at ``shape`` as evidence: on the tile grid, the
        median of its measurements of that tile count (what its estimate is too). Every
        shape of a count costs the same, so they are repeats of one comparison; one of them
        alone ruled the explicit family out of `dense_out` (8-row tiles 1.10x data tiling's
        at T = 16, 0.91x at T = 15: two tiles against one at both)."""
        key, tile = candidate.key(), self.tile(candidate)
        if tile is None:
            return measured[(key, shape)]
        count = tiles(shape[0], tile)
        return statistics.median(
            seconds
            for (other, at), seconds in measured.items()
            if other == key and math.isfinite(seconds) and tiles(at[0], tile) == count
        )

    def picks(self, candidate: Candidate, shapes: Sequence[Shape]) -> list[Shape]:
        """Where to measure it first: one tile and the most tiles in range (a bounded
        kernel: both ends of the rows it serves)."""
        rows = sorted(shape[0] for shape in shapes)
        bound = self.bound(candidate)
        if bound is not None:
            served = [r for r in rows if r <= bound] or rows[:1]
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
    ) -> None:
        """Overwrite the family's columns of ``estimate`` [shape, candidate] in place."""
        for column, candidate in enumerate(self.candidates):
            tile = self.tile(candidate)
            if tile is None or not np.isfinite(estimate[:, column]).any():
                continue
            points = [(s[0], t) for (key, s), t in measured.items() if key == keys[column]]
            found = tile_grid_estimate(tile, points, [shape[0] for shape in shapes])
            bound = self.bound(candidate)
            timed = [seconds for _, seconds in points if math.isfinite(seconds)]
            if found is None and bound is not None and timed:
                found = [float(np.mean(timed))] * len(shapes)  # one tile: flat
            if found is not None:
                estimate[:, column] = found
            if bound is not None:
                estimate[[shape[0] > bound for shape in shapes], column] = math.inf
