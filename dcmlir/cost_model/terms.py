"""The arithmetic of DietCode's formula: ``work``, ``pad`` and ``occ`` of a candidate on a shape.

    time(S, K) = work(S) / (f_MK(K) * pad(S, K) * occ(S, K))

Everything here is exact arithmetic on the candidate's tiles and the shape (no
measurement), which is what lets one measurement per candidate rank it on
every shape (docs/design.md section 6). The learned ``f_MK`` lives in
:mod:`dcmlir.cost_model.throughput`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dcmlir.space import (
    Candidate,
    CpuCandidate,
    DataTiledCandidate,
    DefaultCandidate,
    Mmt4dCandidate,
    PackedCandidate,
)
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import BATCH, K, M, N, Workload

__all__ = [
    "HARD_CURVE",
    "T4_PRIOR",
    "OccupancyCurve",
    "occupancy",
    "outputs",
    "pad",
    "pad_tiles",
    "parallel_units_for",
    "tile_grid",
    "work",
]

_PARALLEL_ROLES = (BATCH, M, N)
"""The loops whose workgroup tiles make the grid that occupancy counts."""


def _space(workload: Workload, shape: Sequence[int]) -> tuple[int, ...]:
    """The full iteration space of one shape (dynamic values in loop order)."""
    dynamic = workload.dynamic_dims
    if len(shape) != len(dynamic):
        raise ValueError(
            f"shape {list(shape)} has {len(shape)} values, the workload has "
            f"{len(dynamic)} dynamic loops"
        )
    return workload.concrete({d.index: int(v) for d, v in zip(dynamic, shape, strict=True)})


def work(workload: Workload, shape: Sequence[int]) -> int:
    """FLOPs of a contraction on one shape: a multiply and an add per point of the space.

    An exact int, the one count of work: the cost model divides it by a rate
    and the model graph (:mod:`dcmlir.search.model_graph`) weighs workloads by it.
    """
    return _flops(_space(workload, shape))


def _flops(space: Sequence[int]) -> int:
    """:func:`work` of an iteration space already computed (the models keep spaces)."""
    return 2 * math.prod(space)


def pad_tiles(workload: Workload, candidate: Candidate) -> tuple[int, ...] | None:
    """The per-loop tile the pad term divides by (0: loop not tiled); None for IREE's default.

    CPU: the vector tile on parallel loops and the reduction tile on K. IREE
    peels the workgroup remainder (``enable_loop_peeling``), so a workgroup
    tile that does not divide costs nothing extra; a vector tile that does not
    divide runs a remainder iteration about as slow as a full one, which is
    what the records show (docs/cost_model.md). CUDA: the workgroup tile on
    parallel loops (a block is DietCode's micro-kernel) and the reduction tile
    on K; not yet checked against GPU records.
    """
    if isinstance(candidate, DefaultCandidate | DataTiledCandidate):
        return None
    levels = candidate.levels(workload)
    if levels is None:  # IREE's own tiles (an exact build's): not known here
        return None
    parallel = (
        levels.vector
        if isinstance(candidate, CpuCandidate | PackedCandidate | Mmt4dCandidate)
        else levels.workgroup
    )
    return tuple(
        levels.reduction[d.index] if d.role == K else parallel[d.index] for d in workload.dims
    )


@dataclass(frozen=True)
class _Tiling:
    """One candidate's tiles on one workload, computed once: all that pad and occ need.

    ``pad``: the per-loop tile of the pad term (0: untiled); ``workgroup``:
    the per-loop workgroup tile the grid counts, None where it is unknown
    (IREE's default: occupancy 1).
    """

    pad: tuple[int, ...]
    workgroup: tuple[int, ...] | None
    partial: tuple[int, ...] | None = None  # IREE's default: its distribution tile per loop
    slowdown: float = 1.0  # what an element of a partial distribution tile costs, relative


DEFAULT_DISTRIBUTION = 64
"""IREE 3.13's distribution tile for an f32 matmul on llvm-cpu, on M and N (read from its
lowering config on an AVX2 and an AVX-512 host: ``distribution = [1, 64, 64, 0]`` for
attention scores). A workgroup whose tile is cut by the loop's end runs masked vectors: on
an AVX2 Zen 3 its elements cost 3.6-5.3x those of whole tiles (the default takes 102 us at
64 x 64 of attention scores and 330 at 63 x 63); on the AVX-512 EPYC no more than whole
ones (its records fit no slowdown; docs/cost_model.md)."""


def _tiling(
    workload: Workload,
    candidate: Candidate,
    default_tile: int,
    reduction_tile: int = 0,
    slowdown: float = 1.0,
) -> _Tiling:
    tiles = pad_tiles(workload, candidate)
    if tiles is None:
        # An IREE build, learned as its own kernel: ``default_tile`` on the dynamic
        # parallel loops and ``reduction_tile`` on a dynamic K (static extents only
        # scale its throughput), grid unknown; IREE's default also ``slowdown`` on the
        # elements of its partial distribution tiles.
        tiles = tuple(
            _build_tile(d.role, default_tile, reduction_tile) if d.dynamic else 0
            for d in workload.dims
        )
        if slowdown == 1.0 or not isinstance(candidate, DefaultCandidate):
            return _Tiling(tiles, None)
        partial = tuple(
            DEFAULT_DISTRIBUTION if d.dynamic and d.role in (M, N) else 0 for d in workload.dims
        )
        return _Tiling(tiles, None, partial, slowdown)
    return _Tiling(tiles, candidate.levels(workload).workgroup)


def _build_tile(role: str, parallel: int, reduction: int) -> int:
    tile = reduction if role == K else (parallel if role in (M, N) else 0)
    return tile if tile > 1 else 0


def _pad_parts(space: Sequence[int], tiles: Sequence[int]) -> tuple[int, int]:
    """(real elements, computed elements) of the tiled space; exact integers."""
    real, computed = 1, 1
    for extent, tile in zip(space, tiles, strict=True):
        real *= extent
        computed *= extent if tile <= 0 else -(-extent // tile) * tile
    return real, computed


def _tiling_parts(space: Sequence[int], tiling: _Tiling) -> tuple[int, float]:
    """(real elements, computed elements) of one candidate's tiling: :func:`_pad_parts`,
    with the elements of IREE's default's partial distribution tiles weighed by its
    slowdown."""
    real, computed = _pad_parts(space, tiling.pad)
    if tiling.partial is None or tiling.slowdown == 1.0:
        return real, computed
    whole = 1  # the computed elements inside whole distribution tiles
    for extent, tile, step in zip(space, tiling.pad, tiling.partial, strict=True):
        padded = extent if tile <= 0 else -(-extent // tile) * tile
        whole *= padded if step <= 0 else (extent // step) * step
    return real, whole + tiling.slowdown * (computed - whole)


def outputs(workload: Workload, space: Sequence[int]) -> int:
    """Elements of the result on one shape: the product of the parallel loops' extents."""
    return math.prod(space[dim.index] for dim in workload.dims if dim.role in _PARALLEL_ROLES)


def _grid(workload: Workload, space: Sequence[int], workgroup: Sequence[int]) -> int:
    """Workgroup tiles over the parallel loops (an untiled loop is one tile)."""
    grid = 1
    for dim in workload.dims:
        if dim.role not in _PARALLEL_ROLES:
            continue
        extent, tile = space[dim.index], workgroup[dim.index]
        if extent == 0:
            return 0
        grid *= -(-extent // tile) if tile > 0 else 1
    return grid


def pad(
    workload: Workload,
    candidate: Candidate,
    shape: Sequence[int],
    *,
    default_tile: int = 1,
) -> Fraction:
    """``prod E_i / prod ceil(E_i / t_i) * t_i``: the fraction of computed elements that are real.

    Exact (a Fraction). IREE's default has no known tiles: 1 unless
    ``default_tile`` (the tile :class:`CostModel` learns for it) is given.
    An empty space (a zero extent) computes nothing: 1.
    """
    tiling = _tiling(workload, candidate, default_tile)
    real, computed = _pad_parts(_space(workload, shape), tiling.pad)
    if computed == 0:
        return Fraction(1)
    return Fraction(real, computed)


def tile_grid(workload: Workload, candidate: Candidate, shape: Sequence[int]) -> int | None:
    """``G = prod ceil(E_i / wg_i)`` over the parallel loops; None for IREE's default (unknown)."""
    workgroup = _tiling(workload, candidate, 1).workgroup
    if workgroup is None:
        return None
    return _grid(workload, _space(workload, shape), workgroup)


@dataclass(frozen=True)
class OccupancyCurve:
    """Wave efficiency ``c*G / ((c-1)*G + ceil(G/P)*P)``, one ``c`` below and one above P.

    ``c = 1`` is the hard curve ``G / (ceil(G/P)*P)``; larger ``c`` forgives
    a partial last wave more (a large ``c`` makes it 1). DietCode fitted
    ``below = 1.433`` (G < P) and ``above = 2.14`` on a T4.
    """

    below: float = 1.433
    above: float = 2.14

    def __post_init__(self) -> None:
        for name in ("below", "above"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 1.0:
                raise ValueError(f"OccupancyCurve.{name}={value!r} must be finite and >= 1")

    def __call__(self, grid: int, parallel_units: int) -> float:
        if parallel_units < 1:
            raise ValueError(f"parallel_units={parallel_units} must be >= 1")
        if parallel_units == 1 or grid <= 0:
            return 1.0
        waves = -(-grid // parallel_units) * parallel_units
        c = self.below if grid < parallel_units else self.above
        return c * grid / ((c - 1.0) * grid + waves)

    def array(self, grids: np.ndarray, parallel_units: int) -> np.ndarray:
        """:meth:`__call__` over an array of grids (calibration evaluates many at once)."""
        grids = np.asarray(grids, dtype=float)
        if parallel_units == 1:
            return np.ones_like(grids)
        waves = np.ceil(grids / parallel_units) * parallel_units
        c = np.where(grids < parallel_units, self.below, self.above)
        efficiency = c * grids / np.maximum((c - 1.0) * grids + waves, 1.0)
        return np.where(grids > 0, efficiency, 1.0)

    def to_json(self) -> dict[str, float]:
        return {"below": self.below, "above": self.above}


HARD_CURVE = OccupancyCurve(1.0, 1.0)
"""``occ = G / (ceil(G/P) * P)``, the formula of docs/design.md section 6."""
T4_PRIOR = OccupancyCurve()
"""DietCode's T4 fit; the prior the model starts from until it can calibrate its own."""


def occupancy(
    workload: Workload,
    candidate: Candidate,
    shape: Sequence[int],
    parallel_units: int,
    curve: OccupancyCurve = HARD_CURVE,
) -> float:
    """Wave efficiency of the candidate's tile grid on ``parallel_units``; 1 for the default."""
    grid = tile_grid(workload, candidate, shape)
    if grid is None:
        return 1.0
    return curve(grid, parallel_units)


def parallel_units_for(target: Target, driver: str) -> int:
    """``P`` of the occupancy term: 1 on ``local-sync``, the threads on ``local-task``, SMs."""
    if isinstance(target, CudaTarget):
        return target.sm_count
    if driver == "local-sync":
        return 1
    if driver == "local-task":
        return target.threads
    raise ValueError(f"unknown driver '{driver}' for {target.backend} (local-sync, local-task)")
