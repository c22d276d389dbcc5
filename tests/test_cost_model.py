"""The cost model: exact adaptation terms, learning f_MK, failures, persistence, quality."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dcmlir.cost_model import (
    HARD_CURVE,
    T4_PRIOR,
    CostModel,
    OccupancyCurve,
    TrivialCostModel,
    cherry_pick,
    cherry_pick_split,
    evaluate,
    occupancy,
    pad,
    pad_tiles,
    parallel_units_for,
    rank_correlation,
    tile_grid,
    top1_regret,
    work,
)
from dcmlir.cost_model.__main__ import main as report_main
from dcmlir.records import Record, RecordDatabase
from dcmlir.search import model_graph
from dcmlir.search.floor_builds import default_waste
from dcmlir.space import CpuCandidate, CudaCandidate, DefaultCandidate
from dcmlir.target import CpuTarget, CudaTarget, target_from_json
from dcmlir.workload import BATCH, DimSource, K, LoopDim, M, N, Workload

ROOT = Path(__file__).resolve().parent.parent
# a frozen copy of the config-route measurements of docs/results/space_records.jsonl
# (that file grows when benchmarks/space_benchmark.py runs again)
REAL_RECORDS = ROOT / "tests" / "data" / "space_records_config.jsonl"
DENSE_KEY = "5aebb14787f9885e"  # the ?x768 @ 768x768 matmul of the real records
IREE = "3.13.test"
TARGET = CpuTarget(
    vector_bits=512,
    threads=2,
    l1d_bytes=48 * 1024,
    l2_bytes=2 * 1024 * 1024,
    l3_bytes=32 * 1024 * 1024,
    model="test cpu",
)


def dense(n: int = 768, k: int = 768, key: str = DENSE_KEY) -> Workload:
    """``x[?, k] @ w[k, n]``: loops (m, n, k), m dynamic in 1..1024."""
    return Workload(
        op_name="linalg.matmul",
        kind="matmul",
        layout="mk,kn->mn",
        dims=(
            LoopDim(0, M, None, DimSource(0, 0), (1, 1024)),
            LoopDim(1, N, n, DimSource(1, 1)),
            LoopDim(2, K, k, DimSource(0, 1)),
        ),
        element_types=("f32", "f32", "f32"),
        key=key,
        location="test",
        operand_loops=((0, 2), (2, 1), (0, 1)),
    )


def scores() -> Workload:
    """``q[12, ?, 64] @ k[12, 64, ?]``: loops (b, m, n, k), m and n dynamic."""
    return _batch_matmul("scores", n=None, k=64)


def context() -> Workload:
    """``p[12, ?, ?] @ v[12, ?, 64]``: loops (b, m, n, k), m and k dynamic."""
    return _batch_matmul("context", n=64, k=None)


def _batch_matmul(key: str, n: int | None, k: int | None) -> Workload:
    return Workload(
        op_name="linalg.batch_matmul",
        kind="batch_matmul",
        layout="bmk,bkn->bmn",
        dims=(
            LoopDim(0, BATCH, 12, DimSource(0, 0)),
            LoopDim(1, M, None, DimSource(0, 1), (1, 128)),
            LoopDim(2, N, n, DimSource(1, 2), None if n else (1, 128)),
            LoopDim(3, K, k, DimSource(0, 2), None if k else (1, 128)),
        ),
        element_types=("f32", "f32", "f32"),
        key=key,
        location="test",
        operand_loops=((0, 1, 3), (0, 3, 2), (0, 1, 2)),
    )


def cpu(wm: int, wn: int, vm: int, vn: int, vk: int) -> CpuCandidate:
    return CpuCandidate(wm, wn, vm, vn, vk)


CANDIDATES = [
    cpu(8, 128, 1, 16, 1),
    cpu(8, 128, 2, 32, 4),
    cpu(16, 256, 4, 64, 8),
    cpu(32, 128, 8, 32, 8),
    cpu(64, 64, 16, 16, 2),
    cpu(16, 64, 4, 16, 1),
    cpu(32, 32, 8, 16, 4),
    cpu(16, 256, 2, 64, 2),
]


def measured(
    workload: Workload,
    candidate: object,
    m: int,
    seconds: float,
    *,
    target: object = TARGET,
    stamp: int = 0,
) -> Record:
    return Record.measurement(
        workload=workload,
        target=target,
        candidate=candidate,
        route="config",
        dims={0: m},
        times=[seconds],
        iree_version=IREE,
        timestamp=f"2026-01-01T00:00:{stamp:02d}.000+00:00",
    )


def synthetic(
    workload: Workload,
    rates: dict[str, float],
    candidates: list[object],
    ms: list[int],
    units: int = 1,
    curve: OccupancyCurve = HARD_CURVE,
    default_tile: int = 1,
) -> list[Record]:
    """Records timed exactly as the model's formula says, for the given throughputs."""
    records = []
    for candidate in candidates:
        for m in ms:
            shape = (m,)
            adaptation = float(pad(workload, candidate, shape, default_tile=default_tile))
            adaptation *= occupancy(workload, candidate, shape, units, curve)
            seconds = work(workload, shape) / (rates[candidate.key()] * adaptation)
            records.append(measured(workload, candidate, m, seconds))
    return records


def rates_for(candidates: list[object]) -> dict[str, float]:
    return {c.key(): 1e10 * (1.0 + 0.37 * i) for i, c in enumerate(candidates)}


# --- pad -----------------------------------------------------------------------------------


def test_work_counts_a_multiply_and_an_add_per_point():
    assert work(dense(), (17,)) == 2 * 17 * 768 * 768
    assert work(scores(), (5, 7)) == 2 * 12 * 5 * 7 * 64


def test_pad_is_exact_on_the_vector_tile():
    workload = dense()
    candidate = cpu(32, 128, 8, 32, 8)
    assert pad(workload, candidate, (17,)) == Fraction(17, 24)
    assert pad(workload, candidate, (16,)) == 1
    assert pad(workload, candidate, (1,)) == Fraction(1, 8)
    # the workgroup tile (32) does not count: IREE peels its remainder
    assert pad(workload, candidate, (40,)) == 1


def test_pad_counts_the_reduction_tile_and_static_loops():
    workload = dense(n=100, k=100)
    candidate = cpu(8, 128, 8, 32, 8)  # n: 100 -> 128, k: 100 -> 104
    assert pad(workload, candidate, (8,)) == Fraction(100 * 100, 128 * 104)


def test_pad_with_two_dynamic_loops_and_a_batch():
    workload = scores()
    candidate = cpu(16, 64, 4, 32, 4)
    assert pad_tiles(workload, candidate) == (1, 4, 32, 4)
    assert pad(workload, candidate, (5, 33)) == Fraction(5 * 33, 8 * 64)


def test_pad_of_the_default_is_one_unless_a_tile_is_given():
    workload = dense()
    assert pad_tiles(workload, DefaultCandidate()) is None
    assert pad(workload, DefaultCandidate(), (17,)) == 1
    assert pad(workload, DefaultCandidate(), (17,), default_tile=8) == Fraction(17, 24)


def test_pad_on_cuda_uses_the_workgroup_tile():
    candidate = CudaCandidate(32, 64, 4, 4, 8)
    assert pad(dense(), candidate, (17,)) == Fraction(17, 32)


def test_a_shape_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="dynamic loops"):
        pad(dense(), CANDIDATES[0], (1, 2))


# --- occupancy -----------------------------------------------------------------------------


def test_occupancy_with_one_unit_is_one():
    candidate = cpu(8, 768, 8, 16, 1)
    for m in (1, 17, 40, 513):
        assert occupancy(dense(), candidate, (m,), 1) == 1.0
        assert occupancy(dense(), candidate, (m,), 1, T4_PRIOR) == 1.0


def test_occupancy_hard_curve_is_the_partial_last_wave():
    candidate = cpu(8, 768, 8, 16, 1)  # one workgroup column: G = ceil(M / 8)
    assert tile_grid(dense(), candidate, (40,)) == 5
    assert occupancy(dense(), candidate, (40,), 4) == pytest.approx(5 / 8, abs=0)
    assert occupancy(dense(), candidate, (64,), 4) == 1.0
    assert occupancy(dense(), candidate, (24,), 4) == pytest.approx(3 / 4, abs=0)


def test_occupancy_soft_curve_follows_dietcode():
    assert T4_PRIOR(5, 4) == pytest.approx(2.14 * 5 / (1.14 * 5 + 8))
    assert T4_PRIOR(3, 4) == pytest.approx(1.433 * 3 / (0.433 * 3 + 4))
    assert HARD_CURVE(3, 4) == pytest.approx(0.75)
    grids = np.array([0, 1, 3, 4, 5, 9])
    assert T4_PRIOR.array(grids, 4) == pytest.approx([1.0] + [T4_PRIOR(g, 4) for g in grids[1:]])
    with pytest.raises(ValueError):
        OccupancyCurve(0.5, 2.0)


def test_occupancy_of_the_default_is_one():
    assert tile_grid(dense(), DefaultCandidate(), (5,)) is None
    assert occupancy(dense(), DefaultCandidate(), (5,), 8) == 1.0


def test_parallel_units_follow_the_driver():
    assert parallel_units_for(TARGET, "local-sync") == 1
    assert parallel_units_for(TARGET, "local-task") == 2
    assert parallel_units_for(CudaTarget.known("t4"), "cuda") == 40
    with pytest.raises(ValueError):
        parallel_units_for(TARGET, "vulkan")


# --- cherry-picking ------------------------------------------------------------------------


def test_cherry_pick_prefers_an_exact_fit():
    candidate = cpu(32, 128, 8, 32, 8)
    assert cherry_pick(dense(), candidate, [(17,), (16,), (20,)]) == (16,)
    assert cherry_pick(dense(), candidate, [(1,), (17,), (128,), (513,)]) == (128,)


def test_cherry_pick_ties_go_to_the_larger_shape():
    candidate = cpu(32, 128, 8, 32, 8)
    assert cherry_pick(dense(), candidate, [(8,), (24,), (16,)]) == (24,)
    assert cherry_pick(dense(), cpu(8, 128, 1, 16, 1), [(1,), (513,), (17,)]) == (513,)
    assert cherry_pick(dense(), DefaultCandidate(), [(3,), (9,)]) == (9,)


def test_cherry_pick_counts_occupancy():
    candidate = cpu(8, 768, 8, 16, 1)
    # both fit the vector tile; on 4 units 40 rows make 5 workgroups (occ 5/8), 32 make 4
    assert cherry_pick(dense(), candidate, [(32,), (40,)], parallel_units=4) == (32,)
    assert cherry_pick(dense(), candidate, [(32,), (40,)], parallel_units=1) == (40,)


# --- the learned model ---------------------------------------------------------------------


def test_a_model_trained_on_throughputs_reproduces_them():
    workload = dense()
    rates = rates_for(CANDIDATES)
    model = CostModel(workload, TARGET, parallel_units=1, seed=0)
    model.update(synthetic(workload, rates, CANDIDATES, [1, 17, 128], default_tile=8))
    for candidate in CANDIDATES:
        assert model.throughput(candidate) == pytest.approx(rates[candidate.key()], rel=1e-9)
    shapes = [(3,), (100,), (777,)]
    table = model.predict(CANDIDATES, shapes)
    assert table.shape == (3, len(CANDIDATES))
    for column, candidate in enumerate(CANDIDATES):
        for row, shape in enumerate(shapes):
            expected = work(workload, shape) / (
                rates[candidate.key()] * float(pad(workload, candidate, shape))
            )
            assert table[row, column] == pytest.approx(expected, rel=1e-9)


def test_a_measured_candidate_uses_the_median_of_its_own_throughputs():
    workload = dense()
    candidate = CANDIDATES[2]
    model = CostModel(workload, TARGET, 1)
    base = work(workload, (16,))
    model.update(
        [
            measured(workload, candidate, 16, base / 1e10, stamp=1),
            measured(workload, candidate, 16, base / 2e10, stamp=2),
            measured(workload, candidate, 16, base / 8e10, stamp=3),
        ]
    )
    assert model.throughput(candidate) == pytest.approx(2e10)


def test_an_unmeasured_candidate_gets_a_finite_prediction_from_its_features():
    workload = dense()
    rates = rates_for(CANDIDATES)
    unmeasured = cpu(16, 64, 8, 16, 8)
    model = CostModel(workload, TARGET, 1)
    model.update(synthetic(workload, rates, CANDIDATES, [16, 64]))
    assert unmeasured.key() not in model.measured_keys
    rate = model.throughput(unmeasured)
    assert min(rates.values()) / 2 <= rate <= 2 * max(rates.values())
    table = model.predict([unmeasured], [(1,), (33,)])
    assert np.all(np.isfinite(table)) and np.all(table > 0)
    assert "vector_m" in model.feature_names


def test_an_untrained_model_ranks_by_adaptation_alone():
    model = CostModel(dense(), TARGET, 1)
    model.update([])
    table = model.predict([cpu(32, 128, 8, 32, 8), cpu(8, 128, 1, 16, 1)], [(1,)])
    assert np.all(np.isfinite(table))
    assert table[0, 0] == pytest.approx(8 * table[0, 1])  # pad 1/8 against 1


def test_a_failed_build_predicts_inf_everywhere():
    workload = dense()
    broken = CANDIDATES[3]
    records = synthetic(workload, rates_for(CANDIDATES), CANDIDATES, [16, 64])
    failure = Record.failure(
        workload=workload,
        target=TARGET,
        candidate=broken,
        route="config",
        error="iree-compile: error",
        kind="build",
        iree_version=IREE,
    )
    model = CostModel(workload, TARGET, 1)
    model.update([*records, failure])
    table = model.predict(CANDIDATES, [(1,), (16,), (500,)])
    column = CANDIDATES.index(broken)
    assert np.all(np.isinf(table[:, column]))
    others = np.delete(table, column, axis=1)
    assert np.all(np.isfinite(others))


def test_a_failed_run_is_inf_on_its_shape_until_it_succeeds_there():
    workload = dense()
    candidate = CANDIDATES[0]
    failure = Record.failure(
        workload=workload,
        target=TARGET,
        candidate=candidate,
        route="config",
        error="wrong results",
        dims={0: 7},
        iree_version=IREE,
    )
    model = CostModel(workload, TARGET, 1)
    model.update([measured(workload, candidate, 16, 1e-3), failure])
    table = model.predict([candidate], [(7,), (8,)])
    assert math.isinf(table[0, 0]) and math.isfinite(table[1, 0])
    model.update([measured(workload, candidate, 7, 1e-3, stamp=5)])
    assert math.isfinite(model.predict([candidate], [(7,)])[0, 0])


def test_update_skips_records_seen_before_and_other_workloads():
    workload = dense()
    records = synthetic(workload, rates_for(CANDIDATES), CANDIDATES, [16])
    other = measured(dense(key="another"), CANDIDATES[0], 16, 1.0)
    model = CostModel(workload, TARGET, 1)
    model.update([*records, other])
    before = model.predict(CANDIDATES, [(5,)])
    model.update(records)  # the search passes every record each time
    assert np.array_equal(model.predict(CANDIDATES, [(5,)]), before)
    assert model.ignored == 1


def test_the_default_learns_its_own_tile():
    workload = dense()
    candidates = [DefaultCandidate(), *CANDIDATES]
    rates = rates_for(candidates)
    records = synthetic(workload, rates, candidates[:1], [1, 17, 128, 513], default_tile=16)
    records += synthetic(workload, rates, candidates[1:], [128])
    model = CostModel(workload, TARGET, 1)
    assert model.default_tile == 8  # the prior: IREE's default vector tile on llvm-cpu
    model.update(records)
    assert model.default_tile == 16 and model.default_tile_fitted
    assert model.throughput(DefaultCandidate()) == pytest.approx(rates["default"], rel=1e-9)


def _default_records(workload: Workload, shapes, seconds, loops=(1, 2)) -> list[Record]:
    """IREE's default measured at each (a, b) of ``shapes``: ``loops`` are their loops."""
    return [
        Record.measurement(
            workload=workload,
            target=TARGET,
            candidate=DefaultCandidate(),
            route="config",
            dims=dict(zip(loops, shape, strict=True)),
            times=[seconds(*shape)],
            iree_version=IREE,
            timestamp=f"2026-01-01T00:00:{i:02d}.000+00:00",
        )
        for i, shape in enumerate(shapes)
    ]


def test_the_default_learns_a_tile_on_a_dynamic_reduction_too():
    """Attention context (K = T dynamic): IREE's default pads M to 8 and K to 16, flat from
    9 x 9 to 16 x 16 (never_slower.py); the model learns both, so its prediction steps
    where the default does and :func:`default_waste` says by how much."""
    workload = context()
    shapes = [(1, 1), (8, 2), (4, 40), (15, 15), (16, 16), (24, 24), (33, 33), (77, 77), (128, 5)]

    def seconds(m: int, k: int) -> float:
        computed = -(-m // 8) * 8 * -(-k // 16) * 16
        return 2 * 12 * 64 * computed / 1e10

    model = CostModel(workload, TARGET, 1, call_floor=False)
    model.update(_default_records(workload, shapes, seconds, loops=(1, 3)))
    assert (model.default_tile, model.default_reduction_tile) == (8, 16)
    assert model.default_tile_fitted
    table = model.predict([DefaultCandidate()], [(8, 8), (9, 9), (16, 16), (17, 17)])[:, 0]
    assert table == pytest.approx([seconds(*s) for s in [(8, 8), (9, 9), (16, 16), (17, 17)]])
    waste = default_waste(model, DefaultCandidate(), [(9, 9), (16, 16)], table[1:3])
    assert waste == pytest.approx([16 * 16 / 81, 1.0])
    # the part data tiling does not share: K's (its f32 tiles pad M and N, not K)
    reduction = default_waste(
        model, DefaultCandidate(), [(9, 9), (16, 16)], table[1:3], part="reduction"
    )
    assert reduction == pytest.approx([16 / 9, 1.0])


def test_the_default_learns_what_its_partial_distribution_tiles_cost():
    """Attention scores on an AVX2 Zen 3: IREE's default takes 102 us at 64 x 64 and 330 at
    63 x 63, its elements in partial 64 x 64 tiles 3.5-5x dearer than in whole ones
    (masked vectors); on the AVX-512 EPYC no dearer. The model learns the slowdown from the
    default's own records, and none where its records show none."""
    workload = scores()
    shapes = [(1, 1), (8, 8), (40, 40), (63, 63), (64, 64), (100, 100), (127, 127), (128, 128)]

    def seconds(m: int, n: int, slowdown: float = 4.0) -> float:
        padded = -(-m // 8) * 8 * -(-n // 8) * 8
        whole = (m // 64) * 64 * (n // 64) * 64
        return 2 * 12 * 64 * (whole + slowdown * (padded - whole)) / 1e10

    model = CostModel(workload, TARGET, 1, call_floor=False)
    model.update(_default_records(workload, shapes, seconds))
    assert model.default_slowdown == 4.0 and model.default_tile == 8
    checked = [(65, 65), (96, 96), (128, 128), (33, 7)]
    table = model.predict([DefaultCandidate()], checked)[:, 0]
    assert table == pytest.approx([seconds(*s) for s in checked])
    waste = default_waste(model, DefaultCandidate(), [(63, 63), (128, 128)], table[:2])
    assert waste[0] > 3.5 and waste[1] == pytest.approx(1.0)
    ends = [(63, 63), (128, 128)]
    no_k = default_waste(model, DefaultCandidate(), ends, table[:2], part="reduction")
    assert no_k == pytest.approx([1.0, 1.0])  # scores: K is static, nothing data tiling lacks

    even = CostModel(workload, TARGET, 1, call_floor=False)
    even.update(_default_records(workload, shapes, lambda m, n: seconds(m, n, 1.0)))
    assert even.default_slowdown == 1.0
    ends = CostModel(workload, TARGET, 1, call_floor=False)  # any slowdown fits two shapes
    ends.update(_default_records(workload, [(1, 1), (127, 127), (128, 128)], seconds))
    assert ends.default_slowdown == 1.0


def test_the_occupancy_curve_is_calibrated_when_there_are_enough_measurements():
    workload = dense()
    truth = OccupancyCurve(below=3.0, above=6.0)
    candidates = [cpu(wm, 768, vm, 16, 1) for wm, vm in ((8, 8), (16, 8), (16, 16), (32, 8))]
    rates = rates_for(candidates)
    ms = [8, 16, 24, 40, 48, 72, 104, 136, 200, 264]
    model = CostModel(workload, TARGET, parallel_units=4)
    model.update(synthetic(workload, rates, candidates, ms, units=4, curve=truth))
    assert model.curve_calibrated == (True, True)
    assert model.curve.below == pytest.approx(3.0, rel=0.01)
    assert model.curve.above == pytest.approx(6.0, rel=0.01)
    for candidate in candidates:
        assert model.throughput(candidate) == pytest.approx(rates[candidate.key()], rel=0.02)


def test_the_curve_keeps_the_prior_without_enough_measurements():
    workload = dense()
    candidates = [cpu(8, 768, 8, 16, 1)]
    model = CostModel(workload, TARGET, parallel_units=4)
    model.update(synthetic(workload, rates_for(candidates), candidates, [8, 40], units=4))
    assert model.curve == T4_PRIOR and model.curve_calibrated == (False, False)
    single = CostModel(workload, TARGET, parallel_units=1)
    single.update(synthetic(workload, rates_for(CANDIDATES), CANDIDATES, [8, 40, 200]))
    assert single.curve == T4_PRIOR


def test_save_and_load_round_trip_predictions_exactly(tmp_path):
    workload = dense()
    candidates = [DefaultCandidate(), *CANDIDATES]
    records = synthetic(workload, rates_for(candidates), candidates, [1, 17, 128], default_tile=8)
    failure = Record.failure(
        workload=workload,
        target=TARGET,
        candidate=CANDIDATES[1],
        route="config",
        error="no",
        kind="build",
        iree_version=IREE,
    )
    model = CostModel(workload, TARGET, 1, seed=3)
    model.update([*records, failure])
    path = tmp_path / "model.json"
    model.save(path)
    loaded = CostModel.load(path)
    everyone = [*candidates, cpu(16, 64, 8, 16, 8), cpu(4, 256, 1, 64, 16)]
    shapes = [(1,), (9,), (128,), (1000,)]
    assert np.array_equal(loaded.predict(everyone, shapes), model.predict(everyone, shapes))
    assert loaded.seed == 3 and loaded.workload == workload and loaded.default_tile == 8
    loaded.update(records)  # seen before: nothing changes
    assert np.array_equal(loaded.predict(everyone, shapes), model.predict(everyone, shapes))
    saved = json.loads(path.read_text())
    assert saved["kind"] == "dcmlir.cost_model" and len(saved["records"]) == len(records) + 1
    with pytest.raises(ValueError, match="not a dcmlir cost model"):
        CostModel.from_json({"kind": "plan"})


def test_a_fixed_seed_gives_the_same_model():
    workload = dense()
    records = synthetic(workload, rates_for(CANDIDATES), CANDIDATES[:5], [1, 64])
    everyone = [*CANDIDATES, cpu(16, 64, 8, 16, 8)]
    tables = []
    for _ in range(2):
        model = CostModel(workload, TARGET, 1, seed=7)
        model.update(records)
        tables.append(model.predict(everyone, [(3,), (50,)]))
    assert np.array_equal(tables[0], tables[1])


# --- the trivial model ---------------------------------------------------------------------


def test_trivial_model_is_deterministic_and_seeded():
    workload = dense()
    shapes = [(1,), (17,), (128,)]
    first = TrivialCostModel(workload, seed=1).predict(CANDIDATES, shapes)
    again = TrivialCostModel(workload, seed=1).predict(CANDIDATES, shapes)
    other = TrivialCostModel(workload, seed=2).predict(CANDIDATES, shapes)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    rates = TrivialCostModel(workload, seed=1).throughputs(CANDIDATES)
    assert all(1e10 <= r < 2e10 for r in rates)


def test_trivial_model_is_pad_times_occupancy():
    workload = dense()
    model = TrivialCostModel(workload, TARGET, parallel_units=4)
    candidate = cpu(8, 768, 8, 16, 1)
    table = model.predict([candidate], [(32,), (36,)])
    # 36 rows: pad 36/40, 5 workgroups on 4 units: occ 5/8
    expected = (36 / 32) / ((36 / 40) * (5 / 8))
    assert table[1, 0] / table[0, 0] == pytest.approx(expected)


def test_trivial_model_remembers_failures():
    workload = dense()
    failure = Record.failure(
        workload=workload,
        target=TARGET,
        candidate=CANDIDATES[0],
        route="config",
        error="no",
        kind="build",
        iree_version=IREE,
    )
    model = TrivialCostModel(workload)
    model.update([failure])
    assert np.isinf(model.predict(CANDIDATES[:1], [(1,)])[0, 0])


# --- quality metrics -----------------------------------------------------------------------


class _Oracle:
    """Predicts the measured times themselves (or their reverse order)."""

    def __init__(self, records: list[Record], reverse: bool = False) -> None:
        self.times = {(r.candidate_key, r.shape): r.median for r in records}
        self.reverse = reverse

    def predict(self, candidates, shapes):
        table = np.array([[self.times[(c.key(), s)] for c in candidates] for s in shapes])
        return 1.0 / table if self.reverse else table


def test_quality_metrics_score_a_perfect_and_a_reversed_model():
    workload = dense()
    records = synthetic(workload, rates_for(CANDIDATES), CANDIDATES, [1, 17, 128])
    perfect = _Oracle(records)
    assert rank_correlation(perfect, records).mean == pytest.approx(1.0)
    assert top1_regret(perfect, records).worst == 0.0
    reversed_ = _Oracle(records, reverse=True)
    assert rank_correlation(reversed_, records).mean == pytest.approx(-1.0)
    regret = top1_regret(reversed_, records)
    for shape, value in regret.per_shape.items():
        times = sorted(r.median for r in records if r.shape == shape)
        assert value == pytest.approx(times[-1] / times[0] - 1.0)
    assert regret.worst == max(regret.per_shape.values())
    assert top1_regret(reversed_, records, k=len(CANDIDATES)).worst == 0.0


def test_cherry_pick_split_trains_on_one_shape_per_candidate():
    workload = dense()
    records = synthetic(workload, rates_for(CANDIDATES), CANDIDATES, [1, 17, 128, 513])
    model = CostModel(workload, TARGET, 1)
    train, held_out = cherry_pick_split(model, records)
    assert len(train) == len(CANDIDATES) and len(held_out) == 3 * len(CANDIDATES)
    picked = {r.candidate_key: r.shape for r in train}
    assert picked[cpu(8, 128, 1, 16, 1).key()] == (513,)  # fits everywhere: the largest
    assert picked[cpu(32, 128, 8, 32, 8).key()] == (128,)


def test_evaluate_on_formula_records_is_perfect():
    workload = dense()
    records = synthetic(workload, rates_for(CANDIDATES), CANDIDATES, [1, 17, 128, 513])
    report = evaluate(workload, TARGET, records, parallel_units=1, folds=2)
    assert report.train_pairs == len(CANDIDATES)
    assert report.rank_correlation.mean == pytest.approx(1.0)
    assert report.regret.worst == pytest.approx(0.0, abs=1e-12)
    assert math.isfinite(report.unmeasured_rank_correlation.mean)
    assert set(report.to_json()) >= {"rank_correlation", "top1_regret"}


def test_real_records_are_ranked_well_from_cherry_picked_measurements():
    database = RecordDatabase(REAL_RECORDS)
    records = [r for r in database.records(only_current_version=False) if r.ok]
    assert len(records) == 464
    target = target_from_json(records[0].target)
    model = CostModel(dense(), target, parallel_units_for(target, "local-sync"), seed=0)
    train, held_out = cherry_pick_split(model, records)
    assert len(train) == 116
    model.update(train)
    correlation = rank_correlation(model, held_out)
    regret = top1_regret(model, held_out)
    assert set(correlation.per_shape) == {(1,), (17,), (128,), (513,)}
    assert correlation.mean > 0.9 and correlation.worst > 0.85
    assert regret.mean < 0.05 and regret.worst < 0.1
    # without a call floor, the default's records say its effective tile is 16 (17 rows
    # cost 32); with one, the floor takes the time that does not grow with M (the weight
    # streamed at M = 1: 65 us of the fastest call's 93) and the tile no longer shows
    full = CostModel(dense(), target, 1, call_floor=False)
    full.update(records)
    assert full.default_tile == 16 and full.floor_seconds == 0.0
    floored = CostModel(dense(), target, 1)
    floored.update(records)
    assert 50e-6 < floored.floor_seconds < 80e-6


def test_the_report_command_prints_the_documented_protocol_on_the_real_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m dcmlir.cost_model RECORDS`` (docs/cost_model.md): one report per workload."""
    assert report_main([str(REAL_RECORDS)]) == 0
    out = capsys.readouterr().out
    assert f"key={DENSE_KEY}" in out and ", P = 1" in out
    assert "trained on 116 cherry-picked pairs, scored on 348 held-out pairs" in out


def test_the_model_graph_counts_work_with_the_cost_model():
    """One ``work``: the model graph's time shares weigh the FLOPs the cost model divides."""
    assert model_graph.work is work
    assert isinstance(work(dense(), (17,)), int)
