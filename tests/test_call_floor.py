"""The call floor: fitted where the records show one, 0 where they do not, and predicted."""

from __future__ import annotations

import random

import pytest
from test_cost_model import TARGET, dense, measured

from dcmlir.cost_model import CostModel
from dcmlir.cost_model.call_floor import MIN_FLOOR_GROUPS, busy_seconds, fit_floor
from dcmlir.space import CpuCandidate

WORKS = (1e4, 1e5, 1e6, 1e7)


def observations(floor: float, rate: float, noise: float, rng: random.Random) -> list:
    return [(floor + w / rate * (1 + rng.uniform(-noise, noise)), w) for w in WORKS]


@pytest.mark.parametrize("floor", [4e-6, 100e-6])
def test_a_floor_in_the_data_is_found(floor: float) -> None:
    rng = random.Random(0)
    groups = [observations(floor, rate, 0.03, rng) for rate in (5e9, 1e10, 2e10)]
    assert fit_floor(groups) == pytest.approx(floor, rel=0.15)


def test_no_floor_in_the_data_fits_none() -> None:
    rng = random.Random(1)
    groups = [observations(0.0, rate, 0.05, rng) for rate in (5e9, 1e10, 2e10)]
    assert fit_floor(groups) == 0.0


def test_too_few_candidates_on_several_shapes_fit_none() -> None:
    rng = random.Random(2)
    groups = [observations(100e-6, 1e10, 0.0, rng)] * (MIN_FLOOR_GROUPS - 1)
    groups += [[(50e-6, 1e5)]]  # one shape: says nothing of a floor
    assert fit_floor(groups) == 0.0


def test_the_floor_never_takes_a_whole_observation() -> None:
    assert busy_seconds(10e-6, 20e-6) == pytest.approx(0.5e-6)
    assert busy_seconds(10e-6, 4e-6) == pytest.approx(6e-6)


def test_the_model_adds_the_floor_it_fitted_to_every_prediction() -> None:
    """A runtime that costs 100 us per call (local-task waking its workers): fitted, small
    shapes predict the floor instead of a near-zero time, large ones keep their rate."""
    workload = dense()
    floor, rates = 100e-6, {"a": 2e10, "b": 5e10, "c": 8e10}
    kernels = {
        "a": CpuCandidate(16, 64, 4, 16, 1),
        "b": CpuCandidate(32, 128, 8, 32, 2),
        "c": CpuCandidate(16, 256, 4, 64, 4),
    }
    ms = (16, 64, 256, 1024)
    records, stamp = [], 0
    for name, candidate in kernels.items():
        model = CostModel(workload, TARGET, 1)
        for m in ms:
            busy = model.adaptation(candidate, (m,))
            seconds = floor + 2 * m * 768 * 768 / (rates[name] * busy)
            records.append(measured(workload, candidate, m, seconds, stamp=stamp))
            stamp += 1
    model = CostModel(workload, TARGET, 1)
    model.update(records)
    assert model.floor_seconds == pytest.approx(floor, rel=0.1)
    predicted = model.predict(list(kernels.values()), [(16,), (1024,)])
    truth = {m: {r.candidate_key: r.median for r in records if r.shape == (m,)} for m in ms}
    for column, candidate in enumerate(kernels.values()):
        assert predicted[0, column] == pytest.approx(truth[16][candidate.key()], rel=0.1)
        assert predicted[1, column] == pytest.approx(truth[1024][candidate.key()], rel=0.1)
    assert model.to_json()["learned"]["floor_seconds"] == model.floor_seconds
