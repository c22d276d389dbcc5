"""How well a cost model ranks candidates: the metrics, and the protocol that computes them.

The search trusts the model to rank candidates it measured on one shape at
every other shape, and candidates it never measured at all; these scores
check both on recorded timings (``python -m dcmlir.cost_model RECORDS``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dcmlir.cost_model.cherry_pick import cherry_pick_split
from dcmlir.cost_model.terms import OccupancyCurve
from dcmlir.cost_model.throughput import CostModel
from dcmlir.records import Record
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, candidate_from_json
from dcmlir.target import Target
from dcmlir.workload import Workload

__all__ = [
    "Predictor",
    "QualityReport",
    "ShapeScores",
    "evaluate",
    "prediction_error",
    "rank_correlation",
    "top1_regret",
]


class Predictor(Protocol):
    """What the quality metrics need: seconds per (shape, candidate)."""

    def predict(self, candidates: Sequence[Candidate], shapes: Sequence[Shape]) -> np.ndarray: ...


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
    from scipy.stats import spearmanr  # here: importing scipy.stats costs every command 2 s

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
