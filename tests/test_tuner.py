"""dcmlir.tune / dcmlir.compile end to end: a tiny budget, every shape checked against numpy."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import DENSE, SCORES

import dcmlir
from dcmlir.dispatch import Plan
from dcmlir.dispatch.branching import evaluated_splits
from dcmlir.dispatch.case_table import TABLE_SPLITS, has_table
from dcmlir.driver import TuneError, workload_plan
from dcmlir.driver.plan_tree import SPLIT_SECONDS, dispatch_slowdowns
from dcmlir.ir.iree import load_function
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.search.shape_generic import SearchResult
from dcmlir.space import DefaultCandidate, candidate_from_key
from dcmlir.workload import workloads

FAST = {"min_time": 0.002, "rounds": 2}


def check(function, inputs: list[np.ndarray], spec: str) -> None:
    (out,) = function(*inputs)
    expected = np.einsum(spec, *(a.astype(np.float64) for a in inputs))
    assert out.shape == expected.shape
    if expected.size:
        scale = float(np.max(np.abs(expected)))
        assert float(np.max(np.abs(out - expected))) <= 1e-4 * scale


def test_dense_tuned_and_compiled_matches_numpy_on_every_shape(tmp_path: Path) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    report = dcmlir.tune(
        source,
        dims=["1:12"],
        budget=24,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=io.StringIO(),
        **FAST,
    )
    (item,) = report.workloads
    assert item.search.measurements <= 24
    assert 1 <= len(item.plan.kernels) <= 8
    # no depth given: the shallowest tree whose picks cost within 1% of the selection's
    report = item.plan.report
    assert report.geomean_slowdown <= 0.01 and report.total_slowdown <= 0.01
    plan = Plan.load(tmp_path / "plan.json")
    assert plan.workloads[0].key == item.workload.key
    result = dcmlir.compile(
        source,
        plan=tmp_path / "plan.json",
        output=tmp_path / "dense.vmfb",
        emit_mlir=tmp_path / "dense.dispatch.mlir",
    )
    assert result.dispatched == 1
    mlir = (tmp_path / "dense.dispatch.mlir").read_text()
    assert "scf.if" in mlir and "compilation_info" in mlir and "func.func @dense(" in mlir
    function = load_function((tmp_path / "dense.vmfb").read_bytes(), "dense")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((768, 768), dtype=np.float32)
    for m in range(0, 17):  # 0 and 13..16 go to IREE's default (outside 1..12)
        check(function, [rng.standard_normal((m, 768), dtype=np.float32), w], "ac,cb->ab")


def test_batch_matmul_with_two_dynamic_dims(tmp_path: Path) -> None:
    source = tmp_path / "scores.mlir"
    source.write_text(SCORES.replace("%init: tensor<12x?x?xf32>", "%init: tensor<12x?x?xf32>"))
    report = dcmlir.tune(
        source,
        dims=["1:5"],
        budget=16,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=io.StringIO(),
        **FAST,
    )
    assert report.workloads[0].workload.kind == "batch_matmul"
    result = dcmlir.compile(source, plan=tmp_path / "plan.json")
    function = load_function(result.vmfb, "scores")
    rng = np.random.default_rng(1)
    for t in range(0, 7):
        for s in range(0, 7):
            q = rng.standard_normal((12, t, 64), dtype=np.float32)
            k = rng.standard_normal((12, 64, s), dtype=np.float32)
            init = np.zeros((12, t, s), dtype=np.float32)
            (out,) = function(q, k, init)
            np.testing.assert_allclose(out, np.einsum("bmk,bkn->bmn", q, k), rtol=1e-4, atol=1e-4)


def test_tune_needs_a_range(tmp_path: Path) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    with pytest.raises(TuneError, match=r"dense.mlir:8:8: no range for dynamic loop d0 of matmul"):
        dcmlir.tune(source, db=tmp_path / "r.jsonl", output=None, stream=io.StringIO())


def test_compile_with_a_plan_for_another_module_names_the_mismatch(tmp_path: Path) -> None:
    dense = tmp_path / "dense.mlir"
    dense.write_text(DENSE)
    dcmlir.tune(
        dense,
        dims=["1:4"],
        budget=6,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=io.StringIO(),
        **FAST,
    )
    other = tmp_path / "other.mlir"
    other.write_text(DENSE.replace("768", "512"))
    with pytest.raises(TuneError, match="5aebb14787f9885e"):
        dcmlir.compile(other, plan=tmp_path / "plan.json")


def dense_search(
    shapes: list[tuple[int]], kernels: list, table: np.ndarray, choice: dict
) -> SearchResult:
    """A search result on DENSE over T = 1..len(shapes) with a given cost table: no tuning."""
    with ir.Context():
        (workload,) = [w for _, w in workloads(parse_module(DENSE).operation)]
    workload = dataclasses.replace(
        workload,
        dims=tuple(
            dataclasses.replace(d, range=(1, len(shapes))) if d.dynamic else d
            for d in workload.dims
        ),
    )
    return SearchResult(
        workload=workload,
        shapes=shapes,
        candidates=kernels,
        kernels=kernels,
        choice=choice,
        estimate=table,
        predicted=table,
        measured={},
        measurements=0,
        measured_now=0,
        rounds=0,
        seconds=0.0,
    )


def test_tree_is_pruned_to_the_tolerance_but_an_asked_depth_is_kept() -> None:
    """Near-equal kernels alternating by shape: the exact tree needs a split per shape,
    a single kernel costs 0.5% more; with max_depth given, that depth is used."""
    shapes = [(m,) for m in range(1, 17)]
    kernels = [
        candidate_from_key("cpu:wg8x128:v1x16:k8"),
        candidate_from_key("cpu:wg32x32:v8x16:k4"),
    ]
    table = np.array([[1.0, 1.005] if m % 2 else [1.005, 1.0] for (m,) in shapes]) * 1e-4
    search = dense_search(shapes, kernels, table, {s: int(s[0] % 2 == 0) for s in shapes})
    pruned = workload_plan(search, None, "config")
    assert pruned.tree.depth == 0 and pruned.report.geomean_slowdown <= 0.01
    exact = workload_plan(search, 64, "config")
    assert exact.report.accuracy == 1.0 and exact.report.leaves == 16


def test_a_tree_is_no_deeper_than_its_own_cost_per_call_allows() -> None:
    """Each split a call evaluates costs it (SPLIT_SECONDS): two kernels 5% apart,
    alternating by shape, are worth an exact tree on 1 ms calls, not on 2 us calls, where
    the splits each call evaluates would cost it more than the 5% it gains on half of them."""
    shapes = [(m,) for m in range(1, 17)]
    kernels = [
        candidate_from_key("cpu:wg8x128:v1x16:k8"),
        candidate_from_key("cpu:wg32x32:v8x16:k4"),
    ]
    alternating = np.array([[1.0, 1.05] if m % 2 else [1.05, 1.0] for (m,) in shapes])
    choice = {s: int(s[0] % 2 == 0) for s in shapes}
    long = dense_search(shapes, kernels, alternating * 1e-3, choice)
    long_calls = workload_plan(long, None, "config")
    assert long_calls.report.accuracy == 1.0 and len(long_calls.tree.splits()) == 15
    short = dense_search(shapes, kernels, alternating * 2e-6, choice)
    short_calls = workload_plan(short, None, "config")
    assert short_calls.tree.depth == 0
    exact = workload_plan(short, 64, "config")
    predicted = {s: list(short.estimate[i]) for i, s in enumerate(shapes)}
    evaluated = [evaluated_splits(exact.tree, {0: m}) for (m,) in shapes]
    assert sum(evaluated) < 15 * len(shapes)  # branches on the path, then one subtree
    cut, exact_cost = (dispatch_slowdowns(p, predicted, choice)[0] for p in (short_calls, exact))
    as_tree = math.exp(np.mean([math.log1p(n * SPLIT_SECONDS / 2e-6) for n in evaluated])) - 1
    # the exact tree's calls evaluate more than a table costs: the dispatch reads a table
    assert has_table(exact) and as_tree > TABLE_SPLITS * SPLIT_SECONDS / 2e-6
    assert exact_cost == pytest.approx(TABLE_SPLITS * SPLIT_SECONDS / 2e-6, rel=1e-6)
    assert cut < exact_cost


def test_a_shallower_tree_never_costs_a_shape_more_than_3_percent() -> None:
    """Within 1% overall is not enough: the tree keeps the default where it is faster.

    The H100 case (docs/benchmarks-cuda.md): the selection kept IREE's default at the
    smallest shapes, measured faster there by 20%; a depth-0 tree running the kernel
    everywhere cost under 1% geomean over 64 shapes, and ran those shapes slower.
    """
    shapes = [(m,) for m in range(1, 65)]
    kernels = [DefaultCandidate(), candidate_from_key("cpu:wg8x128:v1x16:k8")]
    table = np.array([[1.0, 1.2] if m <= 2 else [2.0, 1.0] for (m,) in shapes]) * 1e-4
    search = dense_search(shapes, kernels, table, {s: 0 if s[0] <= 2 else 1 for s in shapes})
    single = workload_plan(search, 0, "config").report
    assert single.geomean_slowdown <= 0.01 and single.total_slowdown <= 0.01
    assert single.worst_slowdown == pytest.approx(0.2)
    plan = workload_plan(search, None, "config")
    assert plan.tree.depth == 1 and plan.report.worst_slowdown == 0.0
    assert plan.select({0: 2}).candidate_key == "default"
    assert plan.select({0: 3}).candidate_key == "cpu:wg8x128:v1x16:k8"
