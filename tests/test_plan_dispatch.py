"""Plans, decision trees and the dispatch cascade ``dcmlir-emit-dispatch`` emits.

The lit plans in ``lit_tests/Inputs/`` are written by :func:`lit_plans` here;
regenerate them with ``DCMLIR_WRITE_LIT_PLANS=1 pytest tests/test_plan_dispatch.py``.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from dispatch_interpreter import walk_cascade
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dcmlir.build.compiler import build
from dcmlir.dispatch import (
    PLAN_FORMAT,
    DecisionTree,
    Leaf,
    Plan,
    PlanError,
    Split,
    TreeReport,
    WorkloadPlan,
    fit_tree,
)
from dcmlir.dispatch.branching import MAX_NESTING, branch_path, evaluated_splits
from dcmlir.dispatch.case_table import case_table
from dcmlir.dispatch.tree import kernels_under
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.iree import load_function
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.ir.pass_base import PassContext, PassFailure
from dcmlir.passes.emit_dispatch import KERNEL_ATTR, emit_dispatch
from dcmlir.space import Candidate, candidate_from_key
from dcmlir.target import CpuTarget
from dcmlir.tools.dcmlir_opt import DcmlirOptMain
from dcmlir.workload import NotAWorkload, Workload, workloads

ROOT = Path(__file__).resolve().parent.parent
LIT_FILE = ROOT / "lit_tests" / "emit_dispatch.mlir"
SPLIT_LIT_FILE = ROOT / "lit_tests" / "split_entry.mlir"
LIT_INPUTS = ROOT / "lit_tests" / "Inputs"

LIT_TARGET = CpuTarget(
    vector_bits=512,
    vector_registers=32,
    threads=1,
    l1d_bytes=48 * 1024,
    l2_bytes=2 * 1024 * 1024,
    l3_bytes=32 * 1024 * 1024,
    model="dcmlir lit test machine",
)

KERNEL_KEYS = ("default", "cpu:wg8x128:v1x16:k8", "cpu:wg32x32:v8x16:k4")
POOL_KEYS = (*KERNEL_KEYS, "cpu:wg16x64:v4x16:k8", "cpu:wg32x128:v8x32:k2", "cpu:wg4x256:v2x32:k1")

DENSE = """func.func @dense(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}
"""

SCORES = """func.func @scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>, %init: tensor<12x?x?xf32>) -> tensor<12x?x?xf32> {
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}
"""

HALF = """func.func @half(%x: tensor<?x128xf16>, %w: tensor<128x256xf16>, %init: tensor<?x256xf16>) -> tensor<?x256xf16> {
  %r = linalg.matmul ins(%x, %w : tensor<?x128xf16>, tensor<128x256xf16>) outs(%init : tensor<?x256xf16>) -> tensor<?x256xf16>
  return %r : tensor<?x256xf16>
}
"""


# --- helpers ---------------------------------------------------------------------------------


def workloads_of(text: str) -> list[Workload]:
    with ir.Context():
        module = parse_module(text)
        return [w for _, w in workloads(module.operation) if not isinstance(w, NotAWorkload)]


def kernels(keys: tuple[str, ...] = KERNEL_KEYS) -> list[Candidate]:
    return [candidate_from_key(key) for key in keys]


def cost_table(shapes: list[tuple[int, ...]], n_kernels: int) -> dict[tuple[int, ...], list[float]]:
    """Deterministic made-up seconds: kernel k costs (volume + k + 1) microseconds."""
    return {s: [(math.prod(s) + k + 1) / 1e6 for k in range(n_kernels)] for s in shapes}


def dense_plan(source: str = "dense.mlir", routes: tuple[str, ...] = ("config",) * 3) -> Plan:
    """M in 1..16: M <= 4 skinny (1), 5..8 IREE's default (0), 9..16 square (2)."""
    (workload,) = workloads_of(DENSE)
    return Plan(LIT_TARGET, source, (dense_workload_plan(workload, routes),))


def dense_workload_plan(workload: Workload, routes: tuple[str, ...]) -> WorkloadPlan:
    shapes = [(m,) for m in range(1, 17)]
    choices = {s: 1 if s[0] <= 4 else 0 if s[0] <= 8 else 2 for s in shapes}
    measured = {(1,): 9.8e-5, (8,): 2.56e-4, (16,): 6.1e-4}
    return WorkloadPlan.build(
        workload,
        kernels(),
        choices,
        cost_table(shapes, 3),
        measured,
        routes=routes,
        ranges={0: (1, 16)},
    )


def scores_workload_plan(workload: Workload) -> WorkloadPlan:
    """M, N in 1..16: M <= 4 skinny (1); else N <= 8 default (0), N > 8 square (2)."""
    shapes = [(m, n) for m in range(1, 17) for n in range(1, 17)]
    choices = {s: 1 if s[0] <= 4 else 0 if s[1] <= 8 else 2 for s in shapes}
    return WorkloadPlan.build(
        workload, kernels(), choices, cost_table(shapes, 3), ranges={1: (1, 16), 2: (1, 16)}
    )


def packed_workload_plan(workload: Workload) -> WorkloadPlan:
    """M in 1..16: M <= 4 the packed kernel with M0 = 4, else M0 = 16."""
    shapes = [(m,) for m in range(1, 17)]
    choices = {s: 0 if s[0] <= 4 else 1 for s in shapes}
    packed = [candidate_from_key("packed:m4n16k1"), candidate_from_key("packed:m16n16k1")]
    return WorkloadPlan.build(workload, packed, choices, cost_table(shapes, 2), ranges={0: (1, 16)})


def explicit_workload_plan(workload: Workload) -> WorkloadPlan:
    """M in 1..16: M <= 2 the explicit mmt4d kernel with M0 = 1, else M0 = 8."""
    shapes = [(m,) for m in range(1, 17)]
    choices = {s: 0 if s[0] <= 2 else 1 for s in shapes}
    explicit = [candidate_from_key("mmt4d:m1n32k1"), candidate_from_key("mmt4d:m8n32k1")]
    return WorkloadPlan.build(
        workload, explicit, choices, cost_table(shapes, 2), ranges={0: (1, 16)}
    )


def exact_workload_plan(workload: Workload) -> WorkloadPlan:
    """M in 1..16: M <= 8 skinny (1), else IREE's default (0); M = 2 and 3 their own build."""
    shapes = [(m,) for m in range(1, 17)]
    choices = {s: 1 if s[0] <= 8 else 0 for s in shapes}
    return WorkloadPlan.build(
        workload,
        kernels(KERNEL_KEYS[:2]),
        choices,
        cost_table(shapes, 2),
        ranges={0: (1, 16)},
        exact={(2,): 1e-6, (3,): 2e-6},
    )


def lit_plans() -> dict[str, Plan]:
    """The plans lit_tests/emit_dispatch.mlir runs with, keyed by file name."""
    found = workloads_of(LIT_FILE.read_text())
    dense, scores = found[0], found[1]
    packed, explicit = (w for w in found if w.constant_operands)
    exact = next(w for w in found if w.operand_shape(1) == (32, 16))
    main = Plan(
        LIT_TARGET,
        "emit_dispatch.mlir",
        (
            dense_workload_plan(dense, ("config",) * 3),
            scores_workload_plan(scores),
            packed_workload_plan(packed),
            explicit_workload_plan(explicit),
            exact_workload_plan(exact),
        ),
    )
    td = Plan(
        LIT_TARGET, "emit_dispatch.mlir", (dense_workload_plan(dense, ("config", "config", "td")),)
    )
    (half,) = workloads_of(HALF)
    other = Plan(LIT_TARGET, "half.mlir", (dense_workload_plan(half, ("config",) * 3),))
    entry = workloads_of(SPLIT_LIT_FILE.read_text().split("// -----")[0])[0]
    split = Plan(LIT_TARGET, "split_entry.mlir", (packed_workload_plan(entry),))
    unsplit = Plan(LIT_TARGET, "split_entry.mlir", (explicit_workload_plan(entry),))
    return {
        "split_entry.plan.json": split,
        "split_entry.mmt4d.plan.json": unsplit,
        "emit_dispatch.plan.json": main,
        "emit_dispatch.td.plan.json": td,
        "emit_dispatch.other.plan.json": other,
    }


def run_pass(module: ir.Module, plan: Plan, table: str = "auto") -> tuple[int, list[str]]:
    engine = DiagnosticEngine("input.mlir")
    count = emit_dispatch(PassContext(engine, io.StringIO()), module.operation, plan, table=table)
    return count, [d.format() for d in engine.diagnostics]


def opt(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = DcmlirOptMain(args=args, stdout=out, stderr=err).run()
    return code, out.getvalue(), err.getvalue()


def info_text(op: ir.Operation) -> str | None:
    return str(op.attributes["compilation_info"]) if "compilation_info" in op.attributes else None


# --- plan file -------------------------------------------------------------------------------


def test_plan_round_trip(tmp_path: Path) -> None:
    plan = dense_plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = Plan.load(path)
    assert loaded == plan
    assert Plan.from_json(json.loads(path.read_text())) == plan
    obj = json.loads(path.read_text())
    assert obj["format"] == PLAN_FORMAT == 1
    assert obj["target_key"] == LIT_TARGET.key()
    assert obj["source"] == "dense.mlir"
    assert set(obj) >= {"iree_version", "dcmlir_version", "target", "workloads"}
    (workload,) = obj["workloads"]
    assert workload["key"] == "5aebb14787f9885e"
    assert workload["kind"] == "matmul"
    assert workload["dims"] == [
        {"loop": 0, "role": "m", "source": {"operand": 0, "dim": 0}, "range": [1, 16]}
    ]
    assert [k["candidate_key"] for k in workload["kernels"]] == list(KERNEL_KEYS)
    assert [k["index"] for k in workload["kernels"]] == [0, 1, 2]
    assert {k["route"] for k in workload["kernels"]} == {"config"}
    assert workload["tree_report"]["accuracy"] == 1.0
    assert workload["tree_report"]["total_slowdown"] == 0.0
    first, *_, last = workload["shapes"]
    assert first == {"dims": [1], "kernel": 1, "predicted": 3e-6, "measured": 9.8e-5}
    assert last["dims"] == [16] and last["kernel"] == 2 and last["measured"] == 6.1e-4
    assert workload["shapes"][1]["measured"] is None


def test_plan_lookup_and_selection() -> None:
    plan = dense_plan()
    workload_plan = plan.for_workload("5aebb14787f9885e")
    assert workload_plan is not None
    assert plan.for_workload("0000000000000000") is None
    assert plan.keys() == ["5aebb14787f9885e"]
    picked = [workload_plan.select({0: m}) for m in range(0, 20)]
    assert picked[0] is None and picked[17] is None  # outside 1..16: IREE's default
    assert [k.candidate_key for k in picked[1:5] if k] == [KERNEL_KEYS[1]] * 4
    assert [k.candidate_key for k in picked[5:9] if k] == [KERNEL_KEYS[0]] * 4
    assert [k.candidate_key for k in picked[9:17] if k] == [KERNEL_KEYS[2]] * 8


def test_infinite_times_survive_json() -> None:
    (workload,) = workloads_of(DENSE)
    shapes = [(1,), (2,)]
    plan = WorkloadPlan.build(
        workload,
        kernels(KERNEL_KEYS[:2]),
        {(1,): 0, (2,): 1},
        {(1,): [1e-5, math.inf], (2,): [math.inf, 2e-5]},
        {(1,): math.inf},
        ranges={0: (1, 2)},
    )
    text = Plan(LIT_TARGET, "x", (plan,)).dumps()
    assert "Infinity" not in text and '"inf"' in text
    assert Plan.from_json(json.loads(text)).workloads[0].shapes[0].measured == math.inf
    assert [s.dims for s in plan.shapes] == shapes


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            obj = obj[int(part)] if part.isdigit() else obj[part]  # type: ignore[index]
        del obj[last]

    return edit


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            obj = obj[int(part)] if part.isdigit() else obj[part]  # type: ignore[index]
        obj[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set("format", 2), "format 2 is not supported (this dcmlir reads format 1)"),
        (_delete("format"), "format None is not supported"),
        (_delete("workloads"), "plan: missing field 'workloads'"),
        (_delete("workloads.0.kernels"), "workloads[0]: missing field 'kernels'"),
        (_delete("workloads.0.kernels.1.route"), "workloads[0].kernels[1]: missing field 'route'"),
        (_delete("workloads.0.tree.root.left"), "workloads[0].tree: tree node field 'left'"),
        (_set("workloads.0.dims.0.range", [4]), "workloads[0].dims[0].range must be [lo, hi]"),
        (_set("workloads.0.kernels.2.candidate_key", "cpu:wg1x1:v1x1:k1"), "does not match"),
        (_set("workloads.0.kernels.2.route", "magic"), "unknown route 'magic'"),
        (_set("workloads.0.tree.root.right.kernel", 7), "a tree leaf names kernel 7"),
        (_set("target_key", "llvm-cpu:other"), "target_key 'llvm-cpu:other' does not match"),
        (_set("workloads.0.shapes.0.predicted", None), "predicted must be a number"),
    ],
)
def test_load_errors_name_the_file_and_the_field(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    obj = dense_plan().to_json()
    edit(obj)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(PlanError) as raised:
        Plan.load(path)
    assert str(raised.value).startswith(f"plan {path}: ")
    assert message in str(raised.value)


def test_load_errors_for_missing_and_malformed_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(PlanError, match=f"plan {missing}: cannot read: No such file"):
        Plan.load(missing)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(PlanError, match=f"plan {garbage}: not JSON: .*line 1 column 2"):
        Plan.load(garbage)
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    with pytest.raises(PlanError, match="expected a JSON object, got list"):
        Plan.load(listed)


def test_build_rejects_shapes_outside_the_range_and_missing_ranges() -> None:
    (workload,) = workloads_of(DENSE)
    with pytest.raises(ValueError, match="d0=17 is outside"):
        WorkloadPlan.build(
            workload, kernels(), {(17,): 0}, cost_table([(17,)], 3), ranges={0: (1, 16)}
        )
    with pytest.raises(ValueError, match="loop d0 has no range; run dcmlir-annotate-ranges"):
        WorkloadPlan.build(workload, kernels(), {(1,): 0}, cost_table([(1,)], 3))
    with pytest.raises(ValueError, match="has 2 costs for 3 kernels"):
        WorkloadPlan.build(workload, kernels(), {(1,): 0}, {(1,): [1.0, 2.0]}, ranges={0: (1, 1)})


def test_plan_rejects_duplicate_workloads() -> None:
    plan = dense_plan()
    with pytest.raises(ValueError, match="appear more than once: 5aebb14787f9885e"):
        Plan(LIT_TARGET, "x", plan.workloads * 2)


@pytest.mark.parametrize("name", sorted(lit_plans()))
def test_lit_plans_are_current(name: str) -> None:
    """The lit inputs are what this file generates (versions aside: they follow the install)."""
    plan = lit_plans()[name]
    path = LIT_INPUTS / name
    if os.environ.get("DCMLIR_WRITE_LIT_PLANS"):
        LIT_INPUTS.mkdir(exist_ok=True)
        plan.save(path)
    stored = Plan.load(path)
    assert stored.to_json() | _VERSIONS == plan.to_json() | _VERSIONS, (
        f"{path} is stale: DCMLIR_WRITE_LIT_PLANS=1 pytest {Path(__file__).name}"
    )


_VERSIONS = {"iree_version": "-", "dcmlir_version": "-"}


# --- decision tree ---------------------------------------------------------------------------


def _shapes(ranges: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = [()]
    for lo, hi in ranges:
        shapes = [(*s, v) for s in shapes for v in range(lo, hi + 1)]
    return shapes


selections = st.builds(
    lambda ranges, n_kernels, seed: (ranges, n_kernels, seed),
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(0, 24)).map(lambda r: (r[0], r[0] + r[1])),
        min_size=1,
        max_size=2,
    ),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
)


def _random_choices(shapes: list[tuple[int, ...]], n_kernels: int, seed: int) -> list[int]:
    """Random labels, sometimes in runs (as a real selection), sometimes noise."""
    rng = random.Random(seed)
    if rng.random() < 0.5:
        return [rng.randrange(n_kernels) for _ in shapes]
    cuts = {loop: sorted(rng.sample(range(0, 70), 3)) for loop in range(len(shapes[0]))}
    regions: dict[tuple[int, ...], int] = {}
    choices = []
    for shape in shapes:
        region = tuple(sum(v > c for c in cuts[i]) for i, v in enumerate(shape))
        choices.append(regions.setdefault(region, rng.randrange(n_kernels)))
    return choices


@settings(max_examples=40, deadline=None)
@given(selections)
def test_tree_reproduces_any_selection_without_a_depth_cap(selection: Any) -> None:
    ranges, n_kernels, seed = selection
    shapes = _shapes(ranges)
    choices = _random_choices(shapes, n_kernels, seed)
    costs = [[1.0 + k for k in range(n_kernels)] for _ in shapes]
    tree, report = fit_tree(shapes, choices, costs=costs)
    assert report.accuracy == 1.0 and report.mistakes == 0
    assert report.total_slowdown == 0.0 and report.geomean_slowdown == 0.0
    assert [tree.select(s) for s in shapes] == choices
    assert all(isinstance(s.threshold, int) for s in tree.splits())
    assert DecisionTree.from_json(json.loads(json.dumps(tree.to_json()))) == tree
    _assert_merged(tree.root)


def _assert_merged(node: Any) -> None:
    if isinstance(node, Split):
        assert node.left != node.right, f"identical siblings under {node.loop}<={node.threshold}"
        _assert_merged(node.left)
        _assert_merged(node.right)


@settings(max_examples=25, deadline=None)
@given(selections, st.integers(0, 3))
def test_depth_cap_reports_its_mistakes(selection: Any, max_depth: int) -> None:
    ranges, n_kernels, seed = selection
    shapes = _shapes(ranges)
    choices = _random_choices(shapes, n_kernels, seed)
    rng = random.Random(seed)
    costs = [[rng.uniform(1.0, 3.0) for _ in range(n_kernels)] for _ in shapes]
    tree, report = fit_tree(shapes, choices, costs=costs, max_depth=max_depth)
    picked = [tree.select(s) for s in shapes]
    wrong = sum(p != c for p, c in zip(picked, choices, strict=True))
    assert tree.depth <= max_depth
    assert report.depth == tree.depth and report.leaves == len(tree.leaves())
    assert report.mistakes == wrong and report.accuracy == pytest.approx(1 - wrong / len(shapes))
    mine = [costs[i][p] for i, p in enumerate(picked)]
    best = [costs[i][c] for i, c in enumerate(choices)]
    assert report.total_slowdown == pytest.approx(sum(mine) / sum(best) - 1)
    geomean = math.exp(np.mean([math.log(m / b) for m, b in zip(mine, best, strict=True)]))
    assert report.geomean_slowdown == pytest.approx(geomean - 1)
    ratios = [
        m / b if p != c else 1.0 for m, b, p, c in zip(mine, best, picked, choices, strict=True)
    ]
    assert report.worst_slowdown == pytest.approx(max(ratios) - 1)
    _assert_merged(tree.root)


def test_depth_cap_on_a_known_selection() -> None:
    shapes = [(m,) for m in range(1, 9)]
    choices = [1, 1, 1, 1, 0, 0, 2, 2]
    costs = [[2.0, 1.0, 4.0]] * 4 + [[1.0, 3.0, 1.5]] * 2 + [[1.5, 3.0, 1.0]] * 2
    exact, exact_report = fit_tree(shapes, choices, costs=costs)
    assert exact.root == Split(0, 4, Leaf(1), Split(0, 6, Leaf(0), Leaf(2)))
    assert exact_report.depth == 2 and exact_report.leaves == 3
    capped, report = fit_tree(shapes, choices, costs=costs, max_depth=1)
    assert capped.depth == 1
    assert report.mistakes == 2 and report.accuracy == 0.75
    # The right side runs one of kernels 0/2 on all of 5..8: two shapes pay 1.5 s for 1 s.
    assert report.total_slowdown == pytest.approx((4 + 2 + 3) / (4 + 2 + 2) - 1)
    assert report.geomean_slowdown == pytest.approx(1.5 ** (2 / 8) - 1)
    assert report.worst_slowdown == pytest.approx(0.5)
    assert TreeReport.from_json(report.to_json()) == report
    assert exact_report.worst_slowdown == 0.0
    single, single_report = fit_tree(shapes, choices, max_depth=0)
    assert single.root == Leaf(1) and single_report.mistakes == 4
    assert single_report.total_slowdown is None


def test_merge_folds_identical_siblings() -> None:
    # Capped at depth 2, sklearn ends both branches in two leaves with the same majority.
    shapes = [(m,) for m in range(1, 13)]
    choices = [0, 0, 1, 0, 0, 0, 2, 2, 2, 0, 2, 2]
    tree, report = fit_tree(shapes, choices, max_depth=2)
    assert tree.root == Split(0, 6, Leaf(0), Leaf(2))
    assert report.depth == 1 and report.mistakes == 2


def test_tree_input_errors() -> None:
    with pytest.raises(ValueError, match="no training shapes"):
        fit_tree([], [])
    with pytest.raises(ValueError, match=r"shape \(1,\) appears more than once"):
        fit_tree([(1,), (1,)], [0, 1])
    with pytest.raises(ValueError, match="2 shapes but 1 choices"):
        fit_tree([(1,), (2,)], [0])
    with pytest.raises(ValueError, match="not one of its loops"):
        DecisionTree((0,), Split(3, 1, Leaf(0), Leaf(1)))


# --- the cascade -----------------------------------------------------------------------------


def _plan_for(
    text: str,
    workload_ranges: dict[int, tuple[int, int]],
    pool: list[int],
    seed: int,
    depth: int | None,
) -> tuple[Plan, Workload]:
    (workload,) = workloads_of(text)
    shapes = _shapes([workload_ranges[d.index] for d in workload.dynamic_dims])
    candidates = [candidate_from_key(POOL_KEYS[i]) for i in pool]
    choices = dict(zip(shapes, _random_choices(shapes, len(candidates), seed), strict=True))
    workload_plan = WorkloadPlan.build(
        workload,
        candidates,
        choices,
        cost_table(shapes, len(candidates)),
        max_depth=depth,
        ranges=workload_ranges,
    )
    return Plan(LIT_TARGET, "x.mlir", (workload_plan,)), workload


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["dense", "scores"]),
    st.integers(0, 3),
    st.integers(0, 12),
    st.lists(st.integers(0, len(POOL_KEYS) - 1), min_size=1, max_size=5, unique=True),
    st.integers(0, 2**32 - 1),
    st.one_of(st.none(), st.integers(1, 3)),
    st.sampled_from(["auto", "always", "never"]),
)
@example("dense", 1, 12, [0, 1, 2, 3, 4], 7, None, "never")  # 10 splits: top levels branched
@example("scores", 1, 12, [0, 1, 2, 3, 4], 7, None, "never")  # 37 splits over two loops
@example("dense", 1, 12, [0, 1, 2, 3, 4], 7, None, "always")  # the same read from a table
@example("scores", 1, 12, [0, 1, 2, 3, 4], 7, None, "always")
def test_cascade_selects_what_the_tree_selects(
    which: str, lo: int, width: int, pool: list[int], seed: int, depth: int | None, table: str
) -> None:
    """Walk the emitted IR for every shape in range (and around it): same kernel as the
    tree, evaluated as the tree or read from the table (where the plan has one)."""
    text = DENSE if which == "dense" else SCORES
    loops = [0] if which == "dense" else [1, 2]
    ranges = {loop: (lo + i, lo + i + width // len(loops)) for i, loop in enumerate(loops)}
    plan, workload = _plan_for(text, ranges, pool, seed, depth)
    (workload_plan,) = plan.workloads
    with ir.Context():
        module = parse_module(text)
        count, diagnostics = run_pass(module, plan, table)
        assert count == 1, diagnostics
        tabled = "util.buffer.load" in str(module)
        if table != "never":  # where the table was asked for and fits, it is there
            assert tabled == (case_table(workload_plan, table == "always") is not None)
        expected_info = {
            k.index: _parsed_info(k.candidate, workload) for k in workload_plan.kernels
        }
        func = module.body.operations[0]
        probes = {loop: _probes(ranges[loop]) for loop in loops}
        for values in _shapes([(0, len(probes[loop]) - 1) for loop in loops]):
            dims = {loop: probes[loop][v] for loop, v in zip(loops, values, strict=True)}
            selects: list[bool] = []
            reached, path = walk_cascade(func, _arg_shapes(which, dims), selects=selects)
            kernel = workload_plan.select(dims)
            if kernel is None:
                assert path == [True], dims  # the fallback: first branch of the range check
                assert info_text(reached) is None
                assert ir.StringAttr(reached.attributes[KERNEL_ATTR]).value == "fallback"
                continue
            assert path[0] is False, dims
            if tabled:  # the range check, one load, the balanced search over every case
                case = workload_plan.tree.kernels().index(kernel.index)
                cases = len(workload_plan.tree.kernels())
                assert len(path) == 1 + _search_depth(case, cases) and not selects, dims
                assert len(path) <= MAX_NESTING
            else:
                _check_tree_path(workload_plan, dims, kernel.index, path, selects)
            assert info_text(reached) == expected_info[kernel.index], dims
            assert ir.StringAttr(reached.attributes[KERNEL_ATTR]).value == kernel.candidate_key


def _check_tree_path(
    workload_plan: WorkloadPlan,
    dims: dict[int, int],
    kernel: int,
    path: list[bool],
    selects: list[bool],
) -> None:
    """The path of a shape through the tree as the dispatch evaluates it: the range
    check, the tree's branches on this shape's path, then a balanced search over the
    distinct kernels of the subtree it reached."""
    branches, subtree = _branches_to(workload_plan.tree, dims)
    position = subtree.index(kernel)
    assert len(path) == 1 + branches + _search_depth(position, len(subtree)), dims
    assert len(path) <= MAX_NESTING
    # the selects evaluated: the reached subtree's splits, what the plan charges
    assert branches + len(selects) == evaluated_splits(workload_plan.tree, dims), dims


def _parsed_info(candidate: Candidate, workload: Workload) -> str | None:
    """The compilation_info as the printer writes it (what the emitted op carries)."""
    text = candidate.compilation_info(workload)
    return None if text is None else str(ir.Attribute.parse(text))


def _probes(bounds: tuple[int, int]) -> list[int]:
    """Every value in range, 0, and two above it."""
    lo, hi = bounds
    return sorted({*range(lo, hi + 1), 0, hi + 1, hi + 7})


def _branches_to(tree: DecisionTree, dims: dict[int, int]) -> tuple[int, list[int]]:
    """The tree's branches (scf.if) on the path of ``dims`` and the kernels of the
    subtree it reaches."""
    branches, node = branch_path(tree, dims)
    return branches, kernels_under(node)


def _search_depth(position: int, count: int) -> int:
    """scf.if levels to reach ``position`` among ``count`` kernels split in halves."""
    depth = 0
    while count > 1:
        half = count // 2
        position, count = (position, half) if position < half else (position - half, count - half)
        depth += 1
    return depth


def _arg_shapes(which: str, dims: dict[int, int]) -> list[tuple[int, ...]]:
    if which == "dense":
        return [(dims[0], 768), (768, 768)]
    return [(12, dims[1], 64), (12, 64, dims[2]), (12, dims[1], dims[2])]


def test_ops_outside_the_plan_stay_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    dense_plan().save(plan_path)
    source = tmp_path / "in.mlir"
    source.write_text(DENSE + SCORES)
    pipeline = f"dcmlir-emit-dispatch{{plan={plan_path}}}"
    code, once, err = opt([str(source), "-p", pipeline])
    assert code == 0, err
    assert "remark: dispatch: 3 kernels, tree depth 2, range d0=1:16" in err
    assert (
        "remark: left untouched: workload 3a268f7f08e08fdd (batch_matmul) is not in the plan" in err
    )
    assert once.count("linalg.matmul") == 4 and once.count("linalg.batch_matmul") == 1
    again = tmp_path / "once.mlir"
    again.write_text(once)
    code, twice, err = opt([str(again), "-p", pipeline])
    assert code == 0, err
    assert twice == once


def test_fallback_drops_an_existing_config_and_leaves_replace_it() -> None:
    (workload,) = workloads_of(DENSE)
    info = candidate_from_key("cpu:wg16x64:v4x16:k8").compilation_info(workload)
    text = DENSE.replace(
        "%r = linalg.matmul ins", f"%r = linalg.matmul {{compilation_info = {info}}} ins"
    )
    with ir.Context():
        module = parse_module(text)
        run_pass(module, dense_plan())
        func = module.body.operations[0]
        fallback, _ = walk_cascade(func, [(0, 768), (768, 768)])
        default, _ = walk_cascade(func, [(6, 768), (768, 768)])
        skinny, _ = walk_cascade(func, [(2, 768), (768, 768)])
        assert info_text(fallback) is None and info_text(default) is None
        assert "distribution = [8, 128, 0]" in (info_text(skinny) or "")


def test_errors_leave_the_module_unchanged() -> None:
    with ir.Context():
        module = parse_module(DENSE)
        before = str(module)
        with pytest.raises(PassFailure, match=r"kernel 2 \(cpu:wg32x32:v8x16:k4\) uses route 'td'"):
            run_pass(module, dense_plan(routes=("config", "config", "td")))
        assert str(module) == before
        (half,) = workloads_of(HALF)
        other = Plan(LIT_TARGET, "half.mlir", (dense_workload_plan(half, ("config",) * 3),))
        with pytest.raises(PassFailure, match=f"{half.key} \\(matmul\\).*5aebb14787f9885e"):
            run_pass(module, other)
        assert str(module) == before


def test_pass_option_and_file_errors(tmp_path: Path) -> None:
    source = tmp_path / "in.mlir"
    source.write_text(DENSE)
    code, _, err = opt([str(source), "-p", "dcmlir-emit-dispatch"])
    assert code == 1 and "option 'plan' is required" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dense_plan().to_json() | {"format": 9}))
    code, out, err = opt([str(source), "-p", f"dcmlir-emit-dispatch{{plan={bad}}}"])
    assert code == 1 and out == ""
    assert f"error: plan {bad}: format 9 is not supported" in err


# --- the dispatched module runs ----------------------------------------------------------------


def test_dispatched_dense_module_matches_numpy_for_every_m(tmp_path: Path) -> None:
    """Range 1..16 with three kernels; M=0 and M>16 take the fallback."""
    with ir.Context():
        module = parse_module(DENSE)
        run_pass(module, dense_plan())
        text = str(module)
    dump = tmp_path / "sources"
    built = build(text, "llvm-cpu", [f"--iree-hal-dump-executable-sources-to={dump}"])
    sources = "\n".join(p.read_text() for p in dump.glob("*.mlir"))
    # The configs really reached codegen (misspelled ones would be dropped silently).
    assert "distribution = [8, 128, 0], vector_common_parallel = [1, 16, 0]" in sources
    assert "distribution = [32, 32, 0], vector_common_parallel = [8, 16, 0]" in sources
    dense = load_function(built.vmfb, "dense")
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((768, 768)).astype(np.float32)
    for m in range(0, 21):
        x = rng.standard_normal((m, 768)).astype(np.float32)
        (y,) = dense(x, weights)
        want = x.astype(np.float64) @ weights.astype(np.float64)
        assert y.shape == (m, 768)
        if m:
            error = np.abs(y - want).max() / np.abs(want).max()
            assert error <= 1e-4, (m, error)


def test_a_plan_cut_down_to_its_data_tiling_branch_runs_it_everywhere(tmp_path: Path) -> None:
    """benchmarks/data_tiling_branch.py's ``branch alone`` (benchmarks/kernel_alone.py's
    plan surgery): a committed attention-context plan with its data-tiling kernel alone,
    over the whole tuned range, no exact shape; the result still loads as a plan. A kernel
    the plan does not run is an error."""
    import sys

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    from kernel_alone import alone_plan

    source = root / "docs" / "results" / "bench" / "local-task" / "plans" / "attention_context.json"
    with pytest.raises(SystemExit, match="runs no kernel mmt4d:m4n16k1"):
        alone_plan(source, "mmt4d:m4n16k1", tmp_path / "none.json")
    loaded = Plan.load(alone_plan(source, "datatiled", tmp_path / "alone.json"))
    (workload,) = loaded.workloads
    assert [k.candidate_key for k in workload.kernels] == ["datatiled"]
    assert workload.tree.kernels() == [0]
    assert not workload.exact
    for t in (1, 17, 61, 128):
        assert workload.select({d.loop: t for d in workload.dims}).candidate_key == "datatiled"
