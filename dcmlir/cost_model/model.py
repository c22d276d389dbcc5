"""The DietCode cost model (DESIGN.md 1.3): predicted seconds of a micro-kernel on a shape.

    time(S, K) = work(S) / (f_MK(K) * pad(S, K) * occ(S, K))

``pad`` and ``occ`` are arithmetic on the candidate's tiles and the shape (no
measurement needed); ``f_MK`` is the micro-kernel's throughput, shape
independent, learned from measurements with the adaptation divided back out,
and extrapolated to unmeasured candidates by a regressor over their features.
Measuring is the expensive part; this module is what lets one measurement per
candidate rank it on every shape. ``docs/cost_model.md`` explains each term,
the choices made against the real records, and the measured quality.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import statistics
import sys
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dcmlir.records.database import Record
from dcmlir.shapes import Shape
from dcmlir.space.candidates import (
    Candidate,
    CpuCandidate,
    DefaultCandidate,
    candidate_from_json,
)
from dcmlir.target import CpuTarget, CudaTarget, Target, target_from_json
from dcmlir.workload import BATCH, DimSource, K, LoopDim, M, N, Workload

__all__ = [
    "DEFAULT_TILE_CHOICES",
    "HARD_CURVE",
    "T4_PRIOR",
    "CostModel",
    "OccupancyCurve",
    "Predictor",
    "QualityReport",
    "ShapeScores",
    "TrivialCostModel",
    "cherry_pick",
    "cherry_pick_split",
    "evaluate",
    "occupancy",
    "pad",
    "pad_tiles",
    "parallel_units_for",
    "prediction_error",
    "rank_correlation",
    "tile_grid",
    "top1_regret",
    "work",
]

"""The dynamic loops' values in loop order, as :attr:`Record.shape`."""

FORMAT = 1
"""Version of the JSON :meth:`CostModel.save` writes."""
MODEL_KIND = "dcmlir.cost_model"

_PARALLEL_ROLES = (BATCH, M, N)


# --- the arithmetic terms ------------------------------------------------------------------


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
    """FLOPs of a contraction on one shape: a multiply and an add per point of the space."""
    return 2 * math.prod(_space(workload, shape))


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
    if isinstance(candidate, DefaultCandidate):
        return None
    levels = candidate.levels(workload)
    parallel = levels.vector if isinstance(candidate, CpuCandidate) else levels.workgroup
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


def _tiling(workload: Workload, candidate: Candidate, default_tile: int) -> _Tiling:
    tiles = pad_tiles(workload, candidate)
    if tiles is None:
        # IREE's default, learned as its own kernel: ``default_tile`` on the dynamic
        # parallel loops (static extents only scale its throughput), grid unknown.
        tiles = tuple(
            default_tile if d.dynamic and d.role in (M, N) and default_tile > 1 else 0
            for d in workload.dims
        )
        return _Tiling(tiles, None)
    return _Tiling(tiles, candidate.levels(workload).workgroup)


def _pad_parts(space: Sequence[int], tiles: Sequence[int]) -> tuple[int, int]:
    """(real elements, computed elements) of the tiled space; exact integers."""
    real, computed = 1, 1
    for extent, tile in zip(space, tiles, strict=True):
        real *= extent
        computed *= extent if tile <= 0 else -(-extent // tile) * tile
    return real, computed


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
"""``occ = G / (ceil(G/P) * P)``, the formula of DESIGN.md 1.3."""
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


def _better(score: float, shape: Shape, best_score: float, best: Shape) -> bool:
    """Higher ``pad*occ`` wins; equal (to 12 digits) goes to the larger shape (more work)."""
    if not math.isclose(score, best_score, rel_tol=1e-12, abs_tol=0.0):
        return score > best_score
    return (math.prod(shape), shape) > (math.prod(best), best)


def cherry_pick(
    workload: Workload,
    candidate: Candidate,
    shapes_in_range: Sequence[Sequence[int]],
    parallel_units: int = 1,
    curve: OccupancyCurve = HARD_CURVE,
    *,
    default_tile: int = 1,
) -> Shape:
    """The shape in range where ``pad * occ`` is highest, ties to the larger shape.

    Where the candidate measures its own throughput best (DESIGN.md 1.3): the
    adaptation divided out of that measurement is as small as it gets.
    """
    if not shapes_in_range:
        raise ValueError("cherry_pick needs at least one shape")
    tiling = _tiling(workload, candidate, default_tile)
    best: Shape = tuple(int(v) for v in shapes_in_range[0])
    best_score = -1.0
    for raw in shapes_in_range:
        shape = tuple(int(v) for v in raw)
        space = _space(workload, shape)
        real, computed = _pad_parts(space, tiling.pad)
        score = real / computed if computed else 1.0
        if tiling.workgroup is not None:
            score *= curve(_grid(workload, space, tiling.workgroup), parallel_units)
        if _better(score, shape, best_score, best):
            best, best_score = shape, score
    return best


# --- models --------------------------------------------------------------------------------


class Predictor(Protocol):
    """What the quality metrics need: seconds per (shape, candidate)."""

    def predict(self, candidates: Sequence[Candidate], shapes: Sequence[Shape]) -> np.ndarray: ...


def _record_signature(record: Record) -> tuple[Any, ...]:
    """Identifies one record, so an update with records seen before adds nothing."""
    return (
        record.candidate_key,
        record.route,
        record.kind,
        record.shape,
        record.timestamp,
        record.times,
        record.median,
        record.error,
    )


class _AdaptationModel(ABC):
    """What both models share: the adaptation terms, failures, and the predict loop."""

    def __init__(
        self,
        workload: Workload,
        target: Target | None,
        parallel_units: int,
        seed: int,
        route: str | None,
    ) -> None:
        if parallel_units < 1:
            raise ValueError(f"parallel_units={parallel_units} must be >= 1")
        self.workload = workload
        self.target = target
        self.parallel_units = parallel_units
        self.seed = seed
        self.route = route
        self.curve = T4_PRIOR
        self.default_tile = _default_tile_prior(target)
        self.ignored = 0  # records of another workload, target or route
        self._failed_everywhere: set[str] = set()
        self._failed_shapes: set[tuple[str, Shape]] = set()
        self._seen: set[tuple[Any, ...]] = set()
        self._accepted: list[Record] = []  # what a saved model replays
        self._tilings: dict[tuple[str, int], _Tiling] = {}

    # -- records ----------------------------------------------------------------------------
    def _accepts(self, record: Record) -> bool:
        return (
            record.workload == self.workload.key
            and (self.target is None or record.target_key == self.target.key())
            and (self.route is None or record.route == self.route)
        )

    def _note_failure(self, record: Record) -> None:
        """A failed build holds for every shape it covers; a failed run for its shape."""
        if record.kind == "build" and record.all_shapes:
            self._failed_everywhere.add(record.candidate_key)
        else:
            self._failed_shapes.add((record.candidate_key, record.shape))

    def _clear_failure(self, record: Record) -> None:
        """A later success supersedes a failure (a rebuilt variant, a re-measurement)."""
        if record.kind == "build" and record.all_shapes:
            self._failed_everywhere.discard(record.candidate_key)
        elif record.ok:
            self._failed_shapes.discard((record.candidate_key, record.shape))
            self._failed_everywhere.discard(record.candidate_key)

    def _new_records(self, records: Iterable[Record]) -> list[Record]:
        """Records of this workload, target and route not seen before, in order; failures noted."""
        fresh = []
        for record in records:
            if not self._accepts(record):
                self.ignored += 1
                continue
            signature = _record_signature(record)
            if signature in self._seen:
                continue
            self._seen.add(signature)
            self._accepted.append(record)
            fresh.append(record)
            if record.failed:
                self._note_failure(record)
            else:
                self._clear_failure(record)
        return fresh

    def is_failed(self, candidate: Candidate, shape: Sequence[int] | None = None) -> bool:
        """Whether a recorded failure makes the candidate infinitely slow (on ``shape``)."""
        key = candidate.key()
        if key in self._failed_everywhere:
            return True
        return shape is not None and (key, tuple(shape)) in self._failed_shapes

    # -- the adaptation ---------------------------------------------------------------------
    def _tiling_of(self, candidate: Candidate) -> _Tiling:
        cache_key = (candidate.key(), self.default_tile)
        found = self._tilings.get(cache_key)
        if found is None:
            found = _tiling(self.workload, candidate, self.default_tile)
            self._tilings[cache_key] = found
        return found

    def _adaptation_in(self, tiling: _Tiling, space: Sequence[int]) -> float:
        real, computed = _pad_parts(space, tiling.pad)
        padding = real / computed if computed else 1.0
        if tiling.workgroup is None:
            return padding
        return padding * self.curve(
            _grid(self.workload, space, tiling.workgroup), self.parallel_units
        )

    def adaptation(self, candidate: Candidate, shape: Sequence[int]) -> float:
        """``pad * occ`` of one candidate on one shape, with this model's curve and tile."""
        return self._adaptation_in(self._tiling_of(candidate), _space(self.workload, shape))

    def cherry_pick(self, candidate: Candidate, shapes_in_range: Sequence[Sequence[int]]) -> Shape:
        """:func:`cherry_pick` with this model's ``P``, curve and default tile."""
        return cherry_pick(
            self.workload,
            candidate,
            shapes_in_range,
            self.parallel_units,
            self.curve,
            default_tile=self.default_tile,
        )

    def throughput(self, candidate: Candidate) -> float:
        """``f_MK`` in FLOP/s."""
        return self.throughputs([candidate])[0]

    @abstractmethod
    def throughputs(self, candidates: Sequence[Candidate]) -> list[float]:
        """``f_MK`` (FLOP/s) of each candidate: what distinguishes the models."""

    def predict(
        self, candidates: Sequence[Candidate], shapes: Sequence[Sequence[int]]
    ) -> np.ndarray:
        """Seconds, shape ``(len(shapes), len(candidates))``; inf where a build or run failed.

        ``shapes``: the dynamic loops' values in loop order (:attr:`Record.shape`).
        """
        table = np.empty((len(shapes), len(candidates)), dtype=float)
        rates = self.throughputs(candidates)
        shapes = [tuple(int(v) for v in s) for s in shapes]
        spaces = [_space(self.workload, s) for s in shapes]
        flops = [2 * math.prod(space) for space in spaces]
        for column, (candidate, rate) in enumerate(zip(candidates, rates, strict=True)):
            tiling = self._tiling_of(candidate)
            everywhere = candidate.key() in self._failed_everywhere
            for row, (shape, space) in enumerate(zip(shapes, spaces, strict=True)):
                if everywhere or (candidate.key(), shape) in self._failed_shapes:
                    table[row, column] = math.inf
                elif flops[row] == 0:
                    table[row, column] = 0.0
                else:
                    table[row, column] = flops[row] / (rate * self._adaptation_in(tiling, space))
        return table


def _default_tile_prior(target: Target | None) -> int:
    """IREE 3.13's default for an f32 matmul on llvm-cpu tiles M by 8 (checked on AVX-512:
    ``vector_common_parallel = [8, 16, 0]``, masked, no peeling); elsewhere unknown: untiled."""
    return 8 if isinstance(target, CpuTarget) else 1


class TrivialCostModel(_AdaptationModel):
    """``pad * occ`` (hard curve) with a fixed throughput per candidate from a seeded hash.

    Deterministic and free of training: for tests of the search, where a model
    whose ranking is known matters more than one that is right. Failures it is
    given predict inf, as in :class:`CostModel`; without a ``target`` it
    accepts records of any target.
    """

    BASE_FLOPS = 1e10

    def __init__(
        self,
        workload: Workload,
        target: Target | None = None,
        parallel_units: int = 1,
        seed: int = 0,
        *,
        route: str | None = None,
    ) -> None:
        super().__init__(workload, target, parallel_units, seed, route)
        self.curve = HARD_CURVE
        self.default_tile = 1

    def update(self, records: Iterable[Record]) -> None:
        """Only failures matter here."""
        self._new_records(records)

    def throughputs(self, candidates: Sequence[Candidate]) -> list[float]:
        """``BASE_FLOPS * 2**u``, ``u`` in [0, 1) from sha256 of the seed and the key."""
        rates = []
        for candidate in candidates:
            digest = hashlib.sha256(f"{self.seed}:{candidate.key()}".encode()).digest()
            fraction = int.from_bytes(digest[:8], "big") / 2**64
            rates.append(self.BASE_FLOPS * 2.0**fraction)
        return rates


# --- the learned model ---------------------------------------------------------------------

PRIOR_FLOPS = 1e10
"""f_MK of every candidate before any measurement: ranks by ``pad * occ`` alone."""
MIN_CALIBRATION_OBSERVATIONS = 8
"""Informative observations (partial last wave, candidate seen on 2+ shapes) to fit a ``c``."""
CURVE_GRID = tuple(float(c) for c in np.round(np.geomspace(1.0, 64.0, 49), 6))
"""The range calibration searches ``c`` in (1: the hard curve); every 4th value seeds it."""
DEFAULT_TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64)
"""Effective tiles the model may learn for IREE's default on its dynamic parallel loops."""
REGRESSOR_PARAMS = {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 3}
"""Checked against a random forest and extra trees on the real records (docs/cost_model.md)."""


def _make_regressor(seed: int) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(random_state=seed, **REGRESSOR_PARAMS)


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


@dataclass(frozen=True)
class _Observation:
    """One successful timing: the shape, its space and FLOPs, the median seconds."""

    shape: Shape
    space: tuple[int, ...]
    flops: int
    seconds: float

    @property
    def usable(self) -> bool:
        """A zero time (a timer too coarse) or an empty space says nothing about f."""
        return self.seconds > 0 and self.flops > 0


class CostModel(_AdaptationModel):
    """DietCode's model: ``work / (f_MK * pad * occ)`` with ``f_MK`` learned.

    Each successful measurement gives ``f = work / (seconds * pad * occ)``.
    A measured candidate's ``f_MK`` is the median of its own observations
    (of ``log f``: a geometric median); an unmeasured one gets the
    regressor's (gradient boosting on ``log f`` over ``candidate.features``),
    trained on the measured candidates. ``P`` (``parallel_units``) is what the
    measurements ran on: 1 for ``local-sync`` (see :func:`parallel_units_for`).
    """

    def __init__(
        self,
        workload: Workload,
        target: Target,
        parallel_units: int,
        seed: int = 0,
        *,
        route: str | None = None,
    ) -> None:
        super().__init__(workload, target, parallel_units, seed, route)
        self.target: Target = target
        self.curve_calibrated = (False, False)  # (below, above) fitted from data
        self.default_tile_fitted = False
        self._candidates: dict[str, Candidate] = {}
        self._observations: dict[str, list[_Observation]] = {}
        self._rates: dict[str, float] = {}  # measured candidates' f_MK
        self._feature_names: tuple[str, ...] = ()
        self._regressor: Any = None
        self._fallback_log_rate = math.log(PRIOR_FLOPS)
        self._predicted: dict[str, float] = {}  # regressor results, cleared on refit

    # -- training ---------------------------------------------------------------------------
    def update(self, records: Iterable[Record]) -> None:
        """Learn from successful measurements; remember failures; records seen before are skipped.

        Incremental and idempotent: passing all records each time is fine.
        Records of another workload, target or route are counted in ``ignored``.
        """
        fresh = self._new_records(records)
        for record in fresh:
            if not record.ok:
                continue
            key = record.candidate_key
            if key not in self._candidates:
                self._candidates[key] = candidate_from_json(record.candidate)
            space = _space(self.workload, record.shape)
            self._observations.setdefault(key, []).append(
                _Observation(record.shape, space, 2 * math.prod(space), record.median)
            )
        if fresh:
            self._refit()

    def _refit(self) -> None:
        self._calibrate_default_tile()
        self._calibrate_curve()
        self._rates = {}
        for key, observations in self._observations.items():
            logs = self._log_rates(self._candidates[key], observations)
            if logs:
                self._rates[key] = math.exp(statistics.median(logs))
        self._fit_regressor()

    def _log_rates(self, candidate: Candidate, observations: Sequence[_Observation]) -> list[float]:
        """``log f`` of each usable observation with the current curve and default tile."""
        tiling = self._tiling_of(candidate)
        return [
            math.log(obs.flops) - math.log(obs.seconds * self._adaptation_in(tiling, obs.space))
            for obs in observations
            if obs.usable
        ]

    def _calibrate_default_tile(self) -> None:
        """The default's effective tile: the choice that makes its f most shape independent.

        Needs its measurements on 2+ shapes; ties (no shape tells them apart)
        keep the prior. The default has no grid, so the curve plays no part.
        """
        prior = _default_tile_prior(self.target)
        self.default_tile, self.default_tile_fitted = prior, False
        default = DefaultCandidate()
        observations = [o for o in self._observations.get(default.key(), []) if o.usable]
        if len({obs.shape for obs in observations}) < 2:
            return
        spreads = {}
        for tile in DEFAULT_TILE_CHOICES:
            tiles = _tiling(self.workload, default, tile).pad
            logs = []
            for obs in observations:
                real, computed = _pad_parts(obs.space, tiles)
                logs.append(math.log(obs.flops * computed / (obs.seconds * real)))
            spreads[tile] = float(np.var(logs))
        lowest = min(spreads.values())
        tied = [tile for tile, spread in spreads.items() if spread <= lowest + 1e-12]
        if prior not in tied:
            self.default_tile, self.default_tile_fitted = tied[0], True

    def _calibrate_curve(self) -> None:
        """Fit ``c`` below and above P where enough observations show a partial last wave.

        The objective is the spread of ``log f`` within each candidate seen on
        2+ shapes: the right curve makes throughput shape independent. Each
        ``c`` with :data:`MIN_CALIBRATION_OBSERVATIONS` informative
        observations is fitted (jointly when both are), the other keeps the
        prior. With ``P = 1`` every curve is 1: nothing to fit.
        """
        self.curve, self.curve_calibrated = T4_PRIOR, (False, False)
        if self.parallel_units == 1:
            return
        data = self._calibration_data()
        units = self.parallel_units
        grids = data.grids
        enough = (
            int(np.sum((grids > 0) & (grids < units))) >= MIN_CALIBRATION_OBSERVATIONS,
            int(np.sum((grids >= units) & (grids % units != 0))) >= MIN_CALIBRATION_OBSERVATIONS,
        )
        if not any(enough):
            return
        free = tuple(name for name, ok in zip(("below", "above"), enough, strict=True) if ok)
        self.curve = _fit_curve(data, free, units)
        self.curve_calibrated = enough

    def _calibration_data(self) -> _CalibrationData:
        """The observations of candidates seen on 2+ shapes, with pad divided out."""
        logs: list[float] = []
        grids: list[int] = []
        groups: list[int] = []
        for key, observations in self._observations.items():
            tiling = self._tiling_of(self._candidates[key])
            usable = [o for o in observations if o.usable]
            if tiling.workgroup is None or len({o.shape for o in usable}) < 2:
                continue  # the default has no grid: the curve does not apply to it
            group = len(set(groups))
            for obs in usable:
                real, computed = _pad_parts(obs.space, tiling.pad)
                logs.append(math.log(obs.flops * computed / (obs.seconds * real)))
                grids.append(_grid(self.workload, obs.space, tiling.workgroup))
                groups.append(group)
        return _CalibrationData(
            np.array(logs, dtype=float), np.array(grids, dtype=float), np.array(groups, dtype=int)
        )

    def _features(self, candidate: Candidate) -> dict[str, float]:
        return candidate.features(self.target)

    def _fit_regressor(self) -> None:
        """``log f`` over the features of the measured candidates (build failures left out)."""
        self._predicted = {}
        self._regressor = None
        keys = [k for k in self._rates if k not in self._failed_everywhere]
        if not keys:
            self._fallback_log_rate = math.log(PRIOR_FLOPS)
            self._feature_names = ()
            return
        targets = np.array([math.log(self._rates[k]) for k in keys])
        self._fallback_log_rate = float(np.mean(targets))
        names: set[str] = set()
        for key in keys:
            names.update(self._features(self._candidates[key]))
        self._feature_names = tuple(sorted(names))
        if len(keys) < 2:
            return
        regressor = _make_regressor(self.seed)
        regressor.fit(self._feature_matrix([self._candidates[k] for k in keys]), targets)
        self._regressor = regressor

    def _feature_matrix(self, candidates: Sequence[Candidate]) -> np.ndarray:
        """One row per candidate in :attr:`feature_names` order; a feature it lacks is 0."""
        rows = np.zeros((len(candidates), len(self._feature_names)), dtype=float)
        for row, candidate in enumerate(candidates):
            values = self._features(candidate)
            for column, name in enumerate(self._feature_names):
                rows[row, column] = values.get(name, 0.0)
        return rows

    # -- prediction -------------------------------------------------------------------------
    @property
    def feature_names(self) -> tuple[str, ...]:
        return self._feature_names

    @property
    def measured_keys(self) -> tuple[str, ...]:
        """Candidates whose f_MK comes from their own measurements."""
        return tuple(self._rates)

    def predicted_throughput(self, candidates: Sequence[Candidate]) -> list[float]:
        """The regressor's f_MK (FLOP/s), measured or not: what an unmeasured candidate gets.

        Before two candidates are measured there is no regressor: the mean
        measured ``log f``, or :data:`PRIOR_FLOPS` before any measurement.
        """
        unique = list({c.key(): c for c in candidates if c.key() not in self._predicted}.values())
        if unique:
            if self._regressor is None:
                logs = [self._fallback_log_rate] * len(unique)
            else:
                logs = self._regressor.predict(self._feature_matrix(unique)).tolist()
            for candidate, log_rate in zip(unique, logs, strict=True):
                self._predicted[candidate.key()] = math.exp(float(log_rate))
        return [self._predicted[c.key()] for c in candidates]

    def throughputs(self, candidates: Sequence[Candidate]) -> list[float]:
        """Own (median) f where measured, else the regressor's."""
        unmeasured = [c for c in candidates if c.key() not in self._rates]
        guesses = dict(
            zip((c.key() for c in unmeasured), self.predicted_throughput(unmeasured), strict=True)
        )
        return [self._rates.get(c.key(), guesses.get(c.key(), 0.0)) for c in candidates]

    # -- persistence ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The settings and every record training accepted, in order, plus what it learned.

        :meth:`from_json` replays the records (deterministic for a seed), so a
        loaded model predicts exactly what this one does and keeps skipping
        the records it has seen. The learned part is there for readers only.
        """
        return {
            "format": FORMAT,
            "kind": MODEL_KIND,
            "sklearn_version": _sklearn_version(),
            "workload": self.workload.to_json(),
            "target": self.target.to_json(),
            "parallel_units": self.parallel_units,
            "seed": self.seed,
            "route": self.route,
            "ignored": self.ignored,
            "records": [record.to_json() for record in self._accepted],
            "learned": {
                "curve": self.curve.to_json(),
                "curve_calibrated": list(self.curve_calibrated),
                "default_tile": self.default_tile,
                "feature_names": list(self._feature_names),
                "throughputs": dict(self._rates),
            },
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CostModel:
        if obj.get("kind") != MODEL_KIND:
            raise ValueError(f"not a dcmlir cost model (kind is not '{MODEL_KIND}')")
        if obj.get("format") != FORMAT:
            raise ValueError(f"cost model format {obj.get('format')!r}; this dcmlir reads {FORMAT}")
        saved = obj.get("sklearn_version")
        if saved != _sklearn_version():
            warnings.warn(
                f"cost model saved with scikit-learn {saved}, refitted with "
                f"{_sklearn_version()}: unmeasured candidates' predictions may differ slightly",
                stacklevel=2,
            )
        model = cls(
            _workload_from_json(obj["workload"]),
            target_from_json(obj["target"]),
            int(obj["parallel_units"]),
            int(obj["seed"]),
            route=obj.get("route"),
        )
        model.update(Record.from_json(line) for line in obj["records"])
        model.ignored = int(obj.get("ignored", 0))
        return model

    def save(self, path: str | Path) -> None:
        """JSON (no pickle): readable, and loadable by another scikit-learn (with a warning)."""
        text = json.dumps(self.to_json(), indent=1, allow_nan=False)
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass(frozen=True)
class _CalibrationData:
    """Per observation: ``log f`` with pad divided out, its tile grid, its candidate's group."""

    logs: np.ndarray
    grids: np.ndarray
    groups: np.ndarray

    def spread(self, curve: OccupancyCurve, units: int) -> float:
        """Within-candidate sum of squares of ``log f`` under ``curve``: 0 when f is shape free."""
        if not len(self.logs):
            return 0.0
        rates = self.logs - np.log(curve.array(self.grids, units))
        counts = np.bincount(self.groups)
        means = np.bincount(self.groups, weights=rates) / np.maximum(counts, 1)
        return float(np.sum((rates - means[self.groups]) ** 2))


def _fit_curve(data: _CalibrationData, free: tuple[str, ...], units: int) -> OccupancyCurve:
    """The ``c`` values named in ``free`` that minimise the spread, the rest at the prior.

    A coarse grid over :data:`CURVE_GRID` (prior first, so ties keep it), then
    Nelder-Mead on ``log c`` from the best point, kept where it helps.
    """
    from scipy.optimize import minimize

    def curve_of(values: Sequence[float]) -> OccupancyCurve:
        fitted = T4_PRIOR.to_json()
        fitted.update(zip(free, (float(v) for v in values), strict=True))
        return OccupancyCurve(**fitted)

    axes = [(getattr(T4_PRIOR, name), *CURVE_GRID[::4]) for name in free]
    points = [np.array(p) for p in itertools.product(*axes)]
    costs = [data.spread(curve_of(p), units) for p in points]
    start = points[int(np.argmin(costs))]
    low, high = math.log(CURVE_GRID[0]), math.log(CURVE_GRID[-1])
    found = minimize(
        lambda x: data.spread(curve_of(np.exp(np.clip(x, low, high))), units),
        np.log(start),
        method="Nelder-Mead",
        options={"xatol": 1e-5, "fatol": 1e-12, "maxiter": 400},
    )
    if found.fun < min(costs):
        return curve_of(np.round(np.exp(np.clip(found.x, low, high)), 6))
    return curve_of(start)


def _workload_from_json(obj: Mapping[str, Any]) -> Workload:
    """The inverse of ``Workload.to_json`` (what a saved model needs to predict again)."""
    dims = tuple(
        LoopDim(
            index=int(loop["dim"]),
            role=str(loop["role"]),
            extent=None if loop["extent"] is None else int(loop["extent"]),
            source=DimSource(int(loop["source"]["operand"]), int(loop["source"]["dim"])),
            range=tuple(loop["range"]) if loop.get("range") else None,
        )
        for loop in obj["loops"]
    )
    return Workload(
        op_name=str(obj["op"]),
        kind=str(obj["kind"]),
        layout=str(obj["layout"]),
        dims=dims,
        element_types=tuple(obj["element_types"]),
        key=str(obj["key"]),
        location=str(obj["location"]),
        operand_loops=tuple(tuple(loops) for loops in obj["operand_loops"]),
    )


# --- quality -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeScores:
    """A score per shape, their mean and the worst one (lowest correlation, highest regret)."""

    per_shape: Mapping[Shape, float]
    mean: float
    worst: float

    def to_json(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "worst": self.worst,
            "per_shape": {",".join(map(str, s)): v for s, v in self.per_shape.items()},
        }


def _measured_table(
    records: Iterable[Record],
) -> tuple[list[Candidate], dict[Shape, dict[str, float]]]:
    """Candidates and ``{shape: {candidate key: median seconds}}`` of the successful records.

    Several records of one pair count with the median of their medians.
    """
    candidates: dict[str, Candidate] = {}
    samples: dict[Shape, dict[str, list[float]]] = {}
    for record in records:
        if not record.ok:
            continue
        candidates.setdefault(record.candidate_key, candidate_from_json(record.candidate))
        samples.setdefault(record.shape, {}).setdefault(record.candidate_key, []).append(
            record.median
        )
    table = {
        shape: {key: statistics.median(times) for key, times in per.items()}
        for shape, per in sorted(samples.items())
    }
    return list(candidates.values()), table


def _scores(per_shape: dict[Shape, float], worst_is_high: bool) -> ShapeScores:
    if not per_shape:
        return ShapeScores({}, math.nan, math.nan)
    values = list(per_shape.values())
    worst = max(values) if worst_is_high else min(values)
    return ShapeScores(per_shape, float(np.mean(values)), float(worst))


def _shape_rows(
    model: Predictor, records: Iterable[Record]
) -> list[tuple[Shape, np.ndarray, np.ndarray]]:
    """Per shape: (shape, predicted, measured) over the candidates measured there."""
    candidates, table = _measured_table(records)
    by_key = {c.key(): c for c in candidates}
    rows = []
    for shape, times in table.items():
        keys = list(times)
        predicted = np.asarray(model.predict([by_key[k] for k in keys], [shape]), dtype=float)[0]
        rows.append((shape, predicted, np.array([times[k] for k in keys])))
    return rows


def rank_correlation(model: Predictor, records: Iterable[Record]) -> ShapeScores:
    """Spearman's rho between predicted and measured times over the candidates, per shape.

    Shapes with fewer than 3 candidates, or where either side is constant, have
    no correlation and are left out.
    """
    from scipy.stats import spearmanr

    per_shape = {}
    for shape, predicted, measured in _shape_rows(model, records):
        if len(measured) < 3 or np.ptp(measured) == 0:
            continue
        finite = np.where(np.isfinite(predicted), predicted, np.finfo(float).max)
        if np.ptp(finite) == 0:
            continue
        per_shape[shape] = float(spearmanr(finite, measured).statistic)
    return _scores(per_shape, worst_is_high=False)


def top1_regret(model: Predictor, records: Iterable[Record], k: int = 1) -> ShapeScores:
    """Per shape: the measured time of the best of the model's top-``k`` over the true best, - 1.

    0 means the model's pick is the fastest candidate measured on that shape.
    Ties in prediction go to the earlier record's candidate.
    """
    if k < 1:
        raise ValueError(f"k={k} must be >= 1")
    per_shape = {}
    for shape, predicted, measured in _shape_rows(model, records):
        best = float(np.min(measured))
        picks = np.argsort(predicted, kind="stable")[:k]
        chosen = float(np.min(measured[picks]))
        per_shape[shape] = chosen / best - 1.0 if best > 0 else 0.0
    return _scores(per_shape, worst_is_high=True)


def prediction_error(model: Predictor, records: Iterable[Record]) -> ShapeScores:
    """Per shape: how far off the absolute times are, ``exp(median |log(predicted / measured)|)``.

    1.0 is exact; 3.0 means a typical prediction is 3x too fast or too slow.
    The ranking metrics ignore a common factor; this one does not.
    """
    per_shape = {}
    for shape, predicted, measured in _shape_rows(model, records):
        usable = np.isfinite(predicted) & (predicted > 0) & (measured > 0)
        if not np.any(usable):
            continue
        ratios = np.abs(np.log(predicted[usable] / measured[usable]))
        per_shape[shape] = float(np.exp(np.median(ratios)))
    return _scores(per_shape, worst_is_high=True)


def cherry_pick_split(
    model: CostModel | TrivialCostModel, records: Iterable[Record]
) -> tuple[list[Record], list[Record]]:
    """(train, held out): per candidate, its records on the shape the model would cherry-pick
    among the shapes it was measured on, as the search measures it; the rest held out."""
    records = [r for r in records if r.ok]
    shapes: dict[str, set[Shape]] = {}
    candidates: dict[str, Candidate] = {}
    for record in records:
        shapes.setdefault(record.candidate_key, set()).add(record.shape)
        candidates.setdefault(record.candidate_key, candidate_from_json(record.candidate))
    picked = {
        key: model.cherry_pick(candidates[key], sorted(found)) for key, found in shapes.items()
    }
    train = [r for r in records if r.shape == picked[r.candidate_key]]
    held_out = [r for r in records if r.shape != picked[r.candidate_key]]
    return train, held_out


@dataclass(frozen=True)
class QualityReport:
    """How well the model ranks, on pairs it did not train on."""

    train_pairs: int
    held_out_pairs: int
    rank_correlation: ShapeScores
    regret: ShapeScores
    regret_top3: ShapeScores
    error: ShapeScores
    unmeasured_rank_correlation: ShapeScores
    unmeasured_regret: ShapeScores
    curve: OccupancyCurve
    default_tile: int

    def to_json(self) -> dict[str, Any]:
        return {
            "train_pairs": self.train_pairs,
            "held_out_pairs": self.held_out_pairs,
            "rank_correlation": self.rank_correlation.to_json(),
            "top1_regret": self.regret.to_json(),
            "top3_regret": self.regret_top3.to_json(),
            "prediction_error": self.error.to_json(),
            "unmeasured_rank_correlation": self.unmeasured_rank_correlation.to_json(),
            "unmeasured_top1_regret": self.unmeasured_regret.to_json(),
            "curve": self.curve.to_json(),
            "default_tile": self.default_tile,
        }


def evaluate(
    workload: Workload,
    target: Target,
    records: Sequence[Record],
    parallel_units: int,
    seed: int = 0,
    folds: int = 5,
) -> QualityReport:
    """Train on the cherry-picked measurements only (one shape per candidate), score the rest.

    The ``unmeasured`` scores: candidates split into ``folds`` groups; each
    group is predicted at every shape by a model trained on the other groups'
    cherry-picked measurements, so its throughputs come from the regressor
    alone (how the search ranks candidates it has not measured).
    """
    if folds < 2:
        raise ValueError(f"folds={folds}: cross-validation needs at least 2")
    records = [
        r for r in records if r.ok and r.workload == workload.key and r.target_key == target.key()
    ]
    model = CostModel(workload, target, parallel_units, seed)
    train, held_out = cherry_pick_split(model, records)
    model.update(train)
    keys = sorted({r.candidate_key for r in records})
    order = np.random.default_rng(seed).permutation(len(keys))
    groups = [{keys[i] for i in order[fold::folds]} for fold in range(folds)]
    blind = _FoldPredictor(workload, target, parallel_units, seed, train, groups)
    return QualityReport(
        train_pairs=len(train),
        held_out_pairs=len(held_out),
        rank_correlation=rank_correlation(model, held_out),
        regret=top1_regret(model, held_out),
        regret_top3=top1_regret(model, held_out, k=3),
        error=prediction_error(model, held_out),
        unmeasured_rank_correlation=rank_correlation(blind, records),
        unmeasured_regret=top1_regret(blind, records),
        curve=model.curve,
        default_tile=model.default_tile,
    )


class _FoldPredictor:
    """Predicts each candidate with the model that never saw it (cross-validation)."""

    def __init__(
        self,
        workload: Workload,
        target: Target,
        parallel_units: int,
        seed: int,
        train: Sequence[Record],
        groups: Sequence[set[str]],
    ) -> None:
        self.models: dict[str, CostModel] = {}
        for group in groups:
            model = CostModel(workload, target, parallel_units, seed)
            model.update([r for r in train if r.candidate_key not in group])
            for key in group:
                self.models[key] = model

    def predict(self, candidates: Sequence[Candidate], shapes: Sequence[Shape]) -> np.ndarray:
        columns = [self.models[c.key()].predict([c], shapes)[:, 0] for c in candidates]
        return np.stack(columns, axis=1) if columns else np.empty((len(shapes), 0))


# --- command line --------------------------------------------------------------------------


def _workloads_of(mlir: str) -> list[Workload]:
    from dcmlir.ir.mlir import ir, parse_module
    from dcmlir.workload import workloads

    text = Path(mlir).read_text(encoding="utf-8")
    with ir.Context():
        found = [w for _, w in workloads(parse_module(text).operation, mlir)]
    return [w for w in found if isinstance(w, Workload)]


def _driver_units(target: Target, records: Sequence[Record]) -> int:
    drivers = {str(r.extra.get("runner", "local-sync")) for r in records}
    if len(drivers) != 1:
        raise SystemExit(
            f"records ran on several drivers ({', '.join(sorted(drivers))}): give --parallel-units"
        )
    return parallel_units_for(target, drivers.pop())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dcmlir.cost_model.model RECORDS``: the quality of the model on recorded timings."""
    from importlib import resources

    from dcmlir.records.database import RecordDatabase

    parser = argparse.ArgumentParser(prog="python -m dcmlir.cost_model.model", description=main.__doc__)
    parser.add_argument("records", help="a JSON-lines record file")
    parser.add_argument(
        "--mlir",
        default=str(resources.files("dcmlir") / "examples" / "bert_dense.mlir"),
        help="the module whose workloads the records measured (default: the BERT dense layer)",
    )
    parser.add_argument("--parallel-units", type=int, help="P (default: from the records' driver)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    database = RecordDatabase(args.records)
    all_records = [r for r in database.records(only_current_version=False) if r.ok]
    found = 0
    for workload in _workloads_of(args.mlir):
        records = [r for r in all_records if r.workload == workload.key]
        for target_key in sorted({r.target_key for r in records}):
            group = [r for r in records if r.target_key == target_key]
            target = target_from_json(group[0].target)
            units = args.parallel_units or _driver_units(target, group)
            report = evaluate(workload, target, group, units, args.seed)
            found += 1
            if args.json:
                print(
                    json.dumps(
                        {"workload": workload.key, "target": target_key, **report.to_json()},
                        indent=1,
                    )
                )
                continue
            _print_report(workload, target_key, units, report)
    if not found:
        print(f"no records of the workloads in {args.mlir}", file=sys.stderr)
        return 1
    return 0


def _print_report(workload: Workload, target_key: str, units: int, report: QualityReport) -> None:
    print(f"{workload.describe()}\n  target {target_key}, P = {units}")
    print(
        f"  trained on {report.train_pairs} cherry-picked pairs, scored on "
        f"{report.held_out_pairs} held-out pairs; default tile {report.default_tile}, "
        f"curve c = {report.curve.below:g} / {report.curve.above:g}"
    )
    columns = [
        ("rho", report.rank_correlation),
        ("top1-regret", report.regret),
        ("top3-regret", report.regret_top3),
        ("error-x", report.error),
        ("unmeasured-rho", report.unmeasured_rank_correlation),
        ("unmeasured-top1", report.unmeasured_regret),
    ]
    print("  " + f"{'shape':8s}" + "".join(f"{name:>16s}" for name, _ in columns))
    shapes = sorted({s for _, scores in columns for s in scores.per_shape})
    for shape in shapes:
        cells = "".join(f"{scores.per_shape.get(shape, math.nan):16.3f}" for _, scores in columns)
        print("  " + f"{','.join(map(str, shape)):8s}" + cells)
    print("  " + f"{'mean':8s}" + "".join(f"{scores.mean:16.3f}" for _, scores in columns))
    print("  " + f"{'worst':8s}" + "".join(f"{scores.worst:16.3f}" for _, scores in columns))


if __name__ == "__main__":
    sys.exit(main())
