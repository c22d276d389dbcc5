"""The cost models, which differ only in ``f_MK``, the micro-kernel's throughput.

    time(S, K) = work(S) / (f_MK(K) * pad(S, K) * occ(S, K))

:class:`CostModel` learns ``f_MK``; :class:`TrivialCostModel` hashes it (for
tests of the search). ``pad`` and ``occ`` come from :mod:`dcmlir.cost_model.terms` (shared through
:class:`~dcmlir.cost_model.adaptation.AdaptationModel`); ``f_MK`` is the
micro-kernel's throughput, shape independent, learned from measurements with
the adaptation divided back out, and extrapolated to unmeasured candidates by
a regressor over their features. ``docs/cost_model.md`` explains the choices
made against the real records.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dcmlir.cost_model.adaptation import AdaptationModel, default_tile_prior
from dcmlir.cost_model.calibration import (
    MIN_CALIBRATION_OBSERVATIONS,
    CalibrationData,
    fit_curve,
)
from dcmlir.cost_model.call_floor import busy_seconds, fit_fixed_costs
from dcmlir.cost_model.default_slowdown import DEFAULT_SLOWDOWNS, shows_slowdown
from dcmlir.cost_model.terms import (
    HARD_CURVE,
    T4_PRIOR,
    _flops,
    _grid,
    _space,
    _tiling,
    _tiling_parts,
    outputs,
)
from dcmlir.records import Record
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DefaultCandidate, candidate_from_json
from dcmlir.target import Target, target_from_json
from dcmlir.workload import DimSource, K, LoopDim, Workload

__all__ = [
    "DEFAULT_TILE_CHOICES",
    "FORMAT",
    "MODEL_KIND",
    "PRIOR_FLOPS",
    "REGRESSOR_PARAMS",
    "CostModel",
    "TrivialCostModel",
]

FORMAT = 1
"""Version of the JSON :meth:`CostModel.save` writes."""
MODEL_KIND = "dcmlir.cost_model"
"""What a saved model's ``kind`` says, so a plan or a record file is not loaded as one."""
PRIOR_FLOPS = 1e10
"""f_MK of every candidate before any measurement: ranks by ``pad * occ`` alone."""
DEFAULT_TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64)
"""Effective tiles the model may learn for IREE's default on its dynamic parallel loops."""
FIXED_BOUND = 0.5
"""A kernel whose every measurement is at least this much fixed cost (floor and result,
:func:`~dcmlir.cost_model.call_floor.fit_fixed_costs`) takes the regressor's f: on
attention context at T <= 16 a call is 3-8 us, nearly all of it fixed, and the f left
over is noise, 4-70x too low, which the regressor then spread to the kernel's neighbours."""
REGRESSOR_PARAMS = {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 3}
"""Checked against a random forest and extra trees on the real records (docs/cost_model.md)."""


class TrivialCostModel(AdaptationModel):
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


# scikit-learn is imported on the first fit only: importing it costs every dcmlir command
# (most never fit a model) over a second of start-up.


def _make_regressor(seed: int, params: Mapping[str, Any] | None = None) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(random_state=seed, **{**REGRESSOR_PARAMS, **(params or {})})


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


@dataclass(frozen=True)
class _Observation:
    """One successful timing: shape, space, FLOPs, result elements, median seconds."""

    shape: Shape
    space: tuple[int, ...]
    flops: int
    outputs: int
    seconds: float

    @property
    def usable(self) -> bool:
        """A zero time (a timer too coarse) or an empty space says nothing about f."""
        return self.seconds > 0 and self.flops > 0


class CostModel(AdaptationModel):
    """DietCode's model: ``work / (f_MK * pad * occ)`` with ``f_MK`` learned.

    Each successful measurement gives ``f = work / (busy * pad * occ)``, ``busy`` its
    seconds less the call's fixed costs (:mod:`dcmlir.cost_model.call_floor`).
    A measured candidate's ``f_MK`` is the median of its own observations
    (of ``log f``: a geometric median) unless they are all fixed cost
    (:data:`FIXED_BOUND`); an unmeasured one gets the
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
        regressor_params: Mapping[str, Any] | None = None,
        call_floor: bool = True,
    ) -> None:
        super().__init__(workload, target, parallel_units, seed, route)
        self.call_floor = call_floor  # False: no floor fitted (the model before call_floor.py)
        self.target: Target = target
        self.regressor_params = dict(regressor_params or {})  # over REGRESSOR_PARAMS (tests)
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
            result = outputs(self.workload, space)
            observation = _Observation(record.shape, space, _flops(space), result, record.median)
            self._observations.setdefault(key, []).append(observation)
        if fresh:
            self._refit()

    def _refit(self) -> None:
        self.default_tile, self.curve = default_tile_prior(self.target), T4_PRIOR
        self.default_reduction_tile, self.default_slowdown = 0, 1.0
        self._calibrate_floor()
        self._calibrate_default_tile()
        self._calibrate_curve()
        self._rates = {}
        for key, observations in self._observations.items():
            if not self._shows_throughput(observations):
                continue
            logs = self._log_rates(self._candidates[key], observations)
            if logs:
                self._rates[key] = math.exp(statistics.median(logs))
        self._fit_regressor()

    def _shows_throughput(self, observations: Sequence[_Observation]) -> bool:
        """Whether an observation is under FIXED_BOUND fixed cost (else the regressor's f
        stands). Only with the result's cost fitted: with the floor alone, a like rule cost
        `attention_scores` 0.04 of the oracle at budget 110 (benchmarks.md)."""
        if not self.output_seconds:
            return True
        return any(o.usable and self._busy(o) > (1 - FIXED_BOUND) * o.seconds for o in observations)

    def _log_rates(self, candidate: Candidate, observations: Sequence[_Observation]) -> list[float]:
        """``log f`` of each usable observation with the current curve and default tile."""
        tiling = self._tiling_of(candidate)
        return [
            math.log(obs.flops) - math.log(self._busy(obs) * self._adaptation_in(tiling, obs.space))
            for obs in observations
            if obs.usable
        ]

    def _busy(self, obs: _Observation) -> float:
        """The observation's seconds without the call floor and the result's own cost."""
        return busy_seconds(obs.seconds, self._fixed(obs.outputs))

    def _calibrate_floor(self) -> None:
        """The call floor and the cost per result element
        (:mod:`dcmlir.cost_model.call_floor`), with the prior tile and curve."""
        self.floor_seconds = self.output_seconds = 0.0
        if not self.call_floor:
            return
        groups = []
        for key, observations in self._observations.items():
            tiling = self._tiling_of(self._candidates[key])
            groups.append(
                [
                    (
                        obs.seconds,
                        obs.flops / self._adaptation_in(tiling, obs.space),
                        obs.outputs,
                        obs.flops // (2 * obs.outputs) if obs.outputs else 0,
                    )
                    for obs in observations
                    if obs.usable
                ]
            )
        self.floor_seconds, self.output_seconds = fit_fixed_costs(groups)

    def _calibrate_default_tile(self) -> None:
        """The default's effective tiles and slowdown: the (parallel, reduction, slowdown)
        that makes its f most shape independent (:data:`DEFAULT_TILE_CHOICES` on dynamic M
        and N, none or one on a dynamic K; the slowdown by :func:`shows_slowdown`'s rule).
        IREE's default on attention context pads M to 8 and K to 16 (6.4-6.7 us up to 8 x 8,
        9.3-9.9 from 9 x 9 to 16 x 16); with M alone the model put its step at 16 and none
        at 9 (never_slower.py, budget 60). Needs 2+ shapes; ties keep the prior."""
        prior = (default_tile_prior(self.target), 0, 1.0)
        self.default_tile_fitted = False
        default = DefaultCandidate()
        observations = [o for o in self._observations.get(default.key(), []) if o.usable]
        if len({obs.shape for obs in observations}) < 2:
            return
        dynamic = {d.role for d in self.workload.dims if d.dynamic}
        reduction = (0, *DEFAULT_TILE_CHOICES[1:]) if K in dynamic else (0,)
        spreads = {}
        for tiles in itertools.product(DEFAULT_TILE_CHOICES, reduction, DEFAULT_SLOWDOWNS):
            tiling = _tiling(self.workload, default, *tiles)
            logs = []
            for obs in observations:
                real, computed = _tiling_parts(obs.space, tiling)
                logs.append(math.log(obs.flops * computed / (self._busy(obs) * real)))
            spreads[tiles] = float(np.var(logs))
        if not shows_slowdown(spreads, len({obs.shape for obs in observations})):
            spreads = {tiles: spread for tiles, spread in spreads.items() if tiles[2] == 1.0}
        lowest = min(spreads.values())
        tied = [tiles for tiles, spread in spreads.items() if spread <= lowest + 1e-12]
        if prior not in tied:
            self.default_tile, self.default_reduction_tile, self.default_slowdown = tied[0]
            self.default_tile_fitted = True

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
        self.curve = fit_curve(data, free, units)
        self.curve_calibrated = enough

    def _calibration_data(self) -> CalibrationData:
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
                real, computed = _tiling_parts(obs.space, tiling)
                logs.append(math.log(obs.flops * computed / (self._busy(obs) * real)))
                grids.append(_grid(self.workload, obs.space, tiling.workgroup))
                groups.append(group)
        return CalibrationData(
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
        regressor = _make_regressor(self.seed, self.regressor_params)
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
                "default_reduction_tile": self.default_reduction_tile,
                "default_slowdown": self.default_slowdown,
                "floor_seconds": self.floor_seconds,
                "output_seconds": self.output_seconds,
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
