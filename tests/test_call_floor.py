"""The call floor and the per-element cost: fitted where the records show them, 0 where
they do not, and predicted."""

from __future__ import annotations

import random

import pytest
from test_cost_model import TARGET, context, cpu, dense, measured

from dcmlir.cost_model import CostModel
from dcmlir.cost_model.call_floor import (
    MIN_FLOOR_GROUPS,
    busy_seconds,
    fit_fixed_costs,
    fit_floor,
)
from dcmlir.records import Record
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


def element_groups(floor: float, per_element: float, reductions: tuple[int, ...]) -> list:
    """(seconds, work, outputs, reduction) of three candidates: a context-like product whose
    result has 768 * T elements and whose reduction is T long."""
    rng = random.Random(3)
    groups = []
    for rate in (1e11, 2e11, 3e11):
        group = []
        for t in reductions:
            outputs, work = 768 * t, 2 * 768 * t * t
            seconds = floor + per_element * outputs + work / rate
            group.append((seconds * (1 + rng.uniform(-0.02, 0.02)), work, outputs, t))
        groups.append(group)
    return groups


def test_a_cost_per_result_element_is_found_where_the_reduction_is_dynamic() -> None:
    floor, per_element = fit_fixed_costs(element_groups(3e-6, 0.4e-9, (1, 4, 16, 64, 128)))
    assert per_element == pytest.approx(0.4e-9, rel=0.2)
    assert floor == pytest.approx(3e-6, rel=0.3)


def test_a_fixed_reduction_fits_the_floor_alone() -> None:
    """With K fixed the result's elements grow with the work: no term tells them apart."""
    rng = random.Random(4)
    groups = [
        [(3e-6 + w / rate * (1 + rng.uniform(-0.03, 0.03)), w, w // 128, 64) for w in WORKS]
        for rate in (5e9, 1e10, 2e10)
    ]
    floor, per_element = fit_fixed_costs(groups)
    assert per_element == 0.0
    assert floor == fit_floor([[(s, w) for s, w, _, _ in g] for g in groups])


def test_the_model_predicts_a_dynamic_reduction_from_its_small_shapes() -> None:
    """Attention's context product (K = T): kernels measured at T = 2..128 give the
    floor and the per-element term; a kernel measured at T = 64 only predicts T = 128
    within 10%, and one measured at T = 2 and 8 only, mostly fixed cost there, takes the
    regressor's f, not its own."""
    workload = context()
    floor, per_element = 3e-6, 0.4e-9
    kernels = [cpu(8, 128, 4, 64, 1), cpu(8, 128, 2, 64, 1), cpu(16, 64, 4, 32, 4)]
    kernels += [cpu(32, 128, 8, 32, 2), cpu(8, 128, 1, 16, 1)]
    rates = dict(zip((k.key() for k in kernels), (3.8e11, 3.4e11, 3e11, 2.5e11, 1e11), strict=True))
    shapes = {0: (2, 8, 32, 128), 1: (4, 16, 64), 2: (2, 24, 96), 3: (64,), 4: (2, 8)}

    def seconds(candidate: CpuCandidate, t: int) -> float:
        model = CostModel(workload, TARGET, 1)
        busy = 2 * 12 * t * 64 * t / (rates[candidate.key()] * model.adaptation(candidate, (t, t)))
        return floor + per_element * 12 * t * 64 + busy

    records = [
        Record.measurement(
            workload=workload,
            target=TARGET,
            candidate=kernels[i],
            route="config",
            dims={1: t, 3: t},
            times=[seconds(kernels[i], t)],
            iree_version="test",
            timestamp=f"2026-01-01T00:00:{n:02d}.000+00:00",
        )
        for n, (i, t) in enumerate((i, t) for i, ts in shapes.items() for t in ts)
    ]
    model = CostModel(workload, TARGET, 1)
    model.update(records)
    assert model.output_seconds == pytest.approx(per_element, rel=0.25)
    (predicted,) = model.predict([kernels[3]], [(128, 128)])[0]
    assert predicted == pytest.approx(seconds(kernels[3], 128), rel=0.1)
    assert kernels[4].key() not in model.measured_keys
    assert kernels[3].key() in model.measured_keys
    assert model.to_json()["learned"]["output_seconds"] == model.output_seconds
    fixed = model.floor_seconds + model.output_seconds * 12 * 128 * 64
    assert model.fixed_seconds([(128, 128)])[0] == pytest.approx(fixed)
