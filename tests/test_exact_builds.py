"""Exact builds: IREE's default made static for one shape, bought by the search where it
beats the chosen kernel side by side, and run by the dispatch before the tree."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import DENSE, dense_with_range

from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import KernelVariant, kernel_module_text
from dcmlir.cost_model import TrivialCostModel
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.ir.iree import load_function
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.records import RecordDatabase
from dcmlir.search.exact_builds import (
    MISSES,
    WIN,
    exact_order,
    reads_weight_as_is,
    walk_exact_builds,
)
from dcmlir.search.shape_generic import SearchSettings, ShapeGenericSearch
from dcmlir.space import (
    Candidate,
    DefaultCandidate,
    ExactCandidate,
    candidate_from_json,
    candidate_from_key,
    space_for,
)
from dcmlir.target import CpuTarget
from dcmlir.testing import FakeMeasurer
from dcmlir.workload import Workload, workloads

TARGET = CpuTarget()

SCORES = """func.func @scores(%q: tensor<2x?x8xf32>, %k: tensor<2x8x?xf32>) -> tensor<2x?x?xf32> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c1 : tensor<2x?x8xf32>
  %s = tensor.dim %k, %c2 : tensor<2x8x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t, %s) : tensor<2x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x?x?xf32>) -> tensor<2x?x?xf32>
  %r = linalg.batch_matmul ins(%q, %k : tensor<2x?x8xf32>, tensor<2x8x?xf32>) outs(%init : tensor<2x?x?xf32>) -> tensor<2x?x?xf32>
  return %r : tensor<2x?x?xf32>
}
"""


def workload_of(text: str, ranges: tuple[tuple[int, int], ...]) -> Workload:
    with ir.Context():
        (found,) = [w for _, w in workloads(parse_module(text).operation)]
    assert isinstance(found, Workload)
    given = iter(ranges)
    dims = tuple(dataclasses.replace(d, range=next(given)) if d.dynamic else d for d in found.dims)
    return dataclasses.replace(found, dims=dims)


def test_an_exact_build_has_a_key_and_json_that_round_trip() -> None:
    build = ExactCandidate((5, 7))
    assert build.key() == "exact:5x7"
    assert candidate_from_key("exact:5x7") == build
    assert candidate_from_json(build.to_json()) == build
    assert build.serves((5, 7)) and not build.serves((5, 8))
    with pytest.raises(ValueError, match="positive integers"):
        candidate_from_json({"kind": "exact", "shape": [0, 3]})
    with pytest.raises(ValueError, match="list of integers"):
        candidate_from_json({"kind": "exact", "shape": "5x7"})


def test_the_walk_goes_up_from_the_smallest_call() -> None:
    dense = dense_with_range(1, 64)
    assert exact_order(dense, [(9,), (1,), (3,)]) == [(1,), (3,), (9,)]
    # loops sharing one range: the diagonal only, as a model runs attention's T x T
    scores = workload_of(SCORES, ((1, 16), (1, 16)))
    assert exact_order(scores, [(2, 2), (1, 3), (1, 1), (3, 1)]) == [(1, 1), (2, 2)]
    ranged = workload_of(SCORES, ((1, 16), (1, 32)))
    assert exact_order(ranged, [(2, 2), (1, 3), (1, 1)]) == [(1, 1), (1, 3), (2, 2)]


def test_builds_are_kept_where_they_win_beyond_noise_and_the_walk_stops_after_misses() -> None:
    ratios = {1: 0.5, 2: WIN + 0.01, 3: 0.6, 4: 1.2, 5: 1.0, 6: 0.1}  # 4, 5: MISSES in a row
    assert MISSES == 2
    timed: list[tuple[str, str]] = []

    def time_pair(build: Candidate, pick: Candidate, shape: tuple[int, ...]) -> tuple[float, float]:
        timed.append((build.key(), pick.key()))
        return ratios[shape[0]] * 1e-5, 1e-5

    order = [(t,) for t in range(1, 7)]
    bought = walk_exact_builds(order, lambda s: DefaultCandidate(), time_pair, 99)
    assert bought == {(1,): 5e-6, (3,): 6e-6}
    assert [b for b, _ in timed] == ["exact:1", "exact:2", "exact:3", "exact:4", "exact:5"]
    assert {p for _, p in timed} == {"default"}
    # two measurements a shape: 5 measurements try two shapes
    assert walk_exact_builds(order, lambda s: DefaultCandidate(), time_pair, 5) == {(1,): 5e-6}
    failed = walk_exact_builds(order, lambda s: DefaultCandidate(), lambda *a: (math.inf, 1.0), 9)
    assert failed == {}


class SmallShapesWin(FakeMeasurer):
    """The synthetic machine, where an exact build takes a third of IREE's default at
    M <= 4 and twice it above."""

    def time(self, candidate: Candidate, shape: tuple[int, ...]) -> float:
        if isinstance(candidate, ExactCandidate):
            factor = 1 / 3 if shape[0] <= 4 else 2.0
            return factor * super().time(DefaultCandidate(), shape)
        return super().time(candidate, shape)


def test_the_search_buys_exact_builds_within_its_budget_and_the_plan_runs_them(
    tmp_path: Path,
) -> None:
    workload = dense_with_range(1, 32)
    measurer = SmallShapesWin(workload, RecordDatabase(tmp_path / "r.jsonl", fsync=False))
    settings = SearchSettings(budget=80, max_kernels=4, verify_batch=16)
    search = ShapeGenericSearch(
        workload,
        measurer,  # type: ignore[arg-type]
        TrivialCostModel(workload, TARGET, seed=0),
        space_for(TARGET),
        settings,
        stream=io.StringIO(),
    )
    result = search.run()
    assert result.measurements <= 80
    exact = [(k, s) for k, s in measurer.timed if k.startswith("exact:")]
    assert len(exact) <= settings.exact_budget // 2
    assert set(result.exact) <= {(1,), (2,), (3,), (4,)} and result.exact
    for shape, seconds in result.exact.items():
        chosen = result.kernels[result.choice[shape]]
        assert seconds <= WIN * measurer.time(chosen, shape)
    plan = workload_plan(result, None, "config")
    for shape in result.exact:
        assert plan.select({0: shape[0]}).candidate == ExactCandidate(shape)
    assert plan.select({0: 20}).candidate.key() != "exact:20"
    loaded = WorkloadPlan.from_json(plan.to_json(), "plan")
    assert loaded == plan
    none = ShapeGenericSearch(
        workload,
        SmallShapesWin(workload, RecordDatabase(tmp_path / "n.jsonl", fsync=False)),  # type: ignore[arg-type]
        TrivialCostModel(workload, TARGET, seed=0),
        space_for(TARGET),
        dataclasses.replace(settings, exact_share=0),
        stream=io.StringIO(),
    ).run()
    assert none.exact == {}


def test_a_plan_rejects_an_exact_shape_without_its_own_build() -> None:
    workload = dense_with_range(1, 16)
    shapes = [(m,) for m in range(1, 17)]
    plan = WorkloadPlan.build(
        workload,
        [DefaultCandidate()],
        {s: 0 for s in shapes},
        {s: [1e-6] for s in shapes},
        exact={(3,): 1e-7},
    )
    assert [k.candidate_key for k in plan.kernels] == ["default", "exact:3"]
    assert plan.shapes[2].kernel == 1 and plan.shapes[2].measured == 1e-7
    wrong = plan.to_json() | {"exact": [{"dims": [4], "kernel": 1}]}
    with pytest.raises(ValueError, match=r"exact shape \[4\] names kernel 1 \(exact:3\)"):
        WorkloadPlan.from_json(wrong, "plan")
    outside = plan.to_json() | {"exact": [{"dims": [3], "kernel": 0}]}
    with pytest.raises(ValueError, match="not its own build"):
        WorkloadPlan.from_json(outside, "plan")
    older = {k: v for k, v in plan.to_json().items() if k != "exact"}
    assert WorkloadPlan.from_json(older, "plan").exact == ()


def test_an_exact_kernel_module_builds_static_and_computes_right(tmp_path: Path) -> None:
    """What the measurer times: the op cast to the shape; IREE's dispatch is static."""
    workload = workload_of(SCORES, ((1, 16), (1, 16)))
    text = kernel_module_text(workload, [KernelVariant("e", exact=(3, 5))])
    dump = tmp_path / "sources"
    built = build(text, "llvm-cpu", [f"--iree-hal-dump-executable-sources-to={dump}"])
    sources = "\n".join(p.read_text() for p in dump.glob("*.mlir"))
    assert "tensor<2x3x8xf32>" in sources and "tensor<2x8x5xf32>" in sources
    assert "tensor<2x?x8xf32>" not in sources
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 3, 8), np.float32), rng.standard_normal((2, 8, 5), np.float32)
    (out,) = load_function(built.vmfb, "e")(q, k)
    np.testing.assert_allclose(out, q @ k, rtol=1e-5, atol=1e-5)


def test_the_dispatched_module_runs_exact_builds_at_their_shapes_only(tmp_path: Path) -> None:
    from test_plan_dispatch import run_pass  # the pass as the lit test runs it

    workload = dense_with_range(1, 16)
    shapes = [(m,) for m in range(1, 17)]
    planned = WorkloadPlan.build(
        workload,
        [DefaultCandidate(), candidate_from_key("cpu:wg8x128:v1x16:k8")],
        {s: 1 if s[0] <= 8 else 0 for s in shapes},
        {s: [2e-6, 1e-6] for s in shapes},
        exact={(3,): 1e-7, (5,): 1e-7},
    )
    with ir.Context():
        module = parse_module(DENSE)
        count, _ = run_pass(module, Plan(TARGET, "dense.mlir", (planned,)))
        text = str(module)
    assert count == 1
    dump = tmp_path / "sources"
    built = build(text, "llvm-cpu", [f"--iree-hal-dump-executable-sources-to={dump}"])
    sources = "\n".join(p.read_text() for p in dump.glob("*.mlir"))
    assert "tensor<3x768xf32>" in sources and "tensor<5x768xf32>" in sources
    name = parse_name(DENSE)
    run = load_function(built.vmfb, name)
    rng = np.random.default_rng(5)
    weights = rng.standard_normal((768, 768)).astype(np.float32)
    for m in (0, 1, 3, 4, 5, 6, 16, 17):
        x = rng.standard_normal((m, 768)).astype(np.float32)
        (y,) = run(x, weights)
        want = x.astype(np.float64) @ weights.astype(np.float64)
        assert y.shape == (m, 768)
        if m:
            assert np.abs(y - want).max() / np.abs(want).max() <= 1e-4, m


def parse_name(text: str) -> str:
    return text.split("@", 1)[1].split("(", 1)[0]


def test_exact_builds_are_not_bought_where_the_weight_lives_packed_only() -> None:
    """An exact build reads a constant weight as it is: a second copy where every chosen
    kernel (and the fallback) reads it packed."""
    import test_packed

    constant = test_packed.workload_of(test_packed.constant_projection("nk"))
    packed = [candidate_from_key("packed:m2n16k1"), candidate_from_key("datatiled")]
    assert not reads_weight_as_is(constant, packed)
    assert reads_weight_as_is(constant, [*packed, DefaultCandidate()])
    assert reads_weight_as_is(constant, [candidate_from_key("cpu:wg8x128:v1x16:k8")])
    assert reads_weight_as_is(dense_with_range(1, 16), packed)  # an argument: nothing held
