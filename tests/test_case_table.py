"""The dispatch read from a table (:mod:`dcmlir.dispatch.case_table`): the table holds what
the plan picks at every shape of its range, IREE runs the case the table names (the exact
shapes' builds too), and the plans that keep the tree."""

from __future__ import annotations

import itertools

import numpy as np
from test_dispatch_probe import branch_ran, probe_module
from test_plan_dispatch import (
    DENSE,
    LIT_TARGET,
    SCORES,
    cost_table,
    kernels,
    scores_workload_plan,
    workloads_of,
)

from dcmlir.build.compiler import build
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.dispatch.case_table import (
    MOST_CASES,
    MOST_ENTRIES,
    TABLE_SPLITS,
    can_table,
    case_table,
    has_table,
    tree_splits,
)
from dcmlir.ir.iree import load_function


def _dense(
    exact: dict[tuple[int, ...], float], top: int = 16, splits: int = 2, kernel_count: int = 3
) -> WorkloadPlan:
    """M in 1..``top``: skinny (1) up to 4, then IREE's default (0) up to 8 (with
    ``splits`` 2), then square (2); ``exact``: shapes with their own build;
    ``kernel_count`` 1: the skinny kernel everywhere."""
    (workload,) = workloads_of(DENSE)
    shapes = [(m,) for m in range(1, top + 1)]
    choices = {s: 1 if s[0] <= 4 else 0 if s[0] <= 8 or splits == 1 else 2 for s in shapes}
    if kernel_count == 1:
        choices = dict.fromkeys(shapes, 1)
    return WorkloadPlan.build(
        workload,
        kernels(),
        choices,
        cost_table(shapes, 3),
        routes="config",
        ranges={0: (1, top)},
        exact=exact,
    )


def _case(plan: WorkloadPlan, dims: dict[int, int]) -> int:
    """The case a shape runs: its exact shape's (after the tree's kernels), else its
    kernel's position among the tree's kernels."""
    order = plan.tree.kernels()
    values = tuple(dims[d.loop] for d in plan.dims)
    for number, found in enumerate(plan.exact):
        if found.dims == values:
            return len(order) + number
    return order.index(plan.tree.select(dims))


def test_the_table_holds_what_the_plan_picks_at_every_shape() -> None:
    plan = _dense({(3,): 1e-5, (13,): 2e-5})
    table = case_table(plan, always=True)
    assert table is not None
    assert (table.lows, table.extents, table.count) == ((1,), (16,), 5)
    assert list(table.cases) == [_case(plan, {0: m}) for m in range(1, 17)]
    assert table.cases[2] == 3 and table.cases[12] == 4  # M = 3 and 13: their own builds
    # two dims, row-major with the last fastest
    scores = scores_workload_plan(workloads_of(SCORES)[0])
    table = case_table(scores, always=True)
    assert table is not None and table.extents == (16, 16)
    for m, n in itertools.product(range(1, 17), range(1, 17)):
        assert table.cases[(m - 1) * 16 + (n - 1)] == _case(scores, {1: m, 2: n}), (m, n)


def test_a_table_where_it_costs_the_calls_less_than_the_tree() -> None:
    """``auto``: two splits cost a call less than the table's load; twelve exact shapes'
    equality tests before them cost more."""
    few = _dense({})
    assert tree_splits(few, {0: 3}) == 2 < TABLE_SPLITS
    assert not has_table(few) and case_table(few) is None
    crowded = _dense({(m,): 1e-5 for m in range(1, 13)})
    assert tree_splits(crowded, {0: 14}) == 12 + 2
    assert has_table(crowded) and case_table(crowded) is not None


def test_the_plans_no_table_fits() -> None:
    assert not can_table(_dense({}, splits=1, kernel_count=1))  # one case: nothing to read
    assert can_table(_dense({}, splits=1))
    assert not can_table(_dense({}, top=MOST_ENTRIES + 1))  # a range too large
    crowded = {(m,): 1e-5 for m in range(1, MOST_CASES)}  # 3 kernels + 31 exact shapes
    assert not can_table(_dense(crowded, top=40))
    assert case_table(_dense(crowded, top=40), always=True) is None


def test_iree_runs_the_case_the_table_names() -> None:
    """Each kernel's op swapped for a fill of its position (the exact shapes' builds too),
    built by IREE and called at every M of the range and around it."""
    planned = _dense({(3,): 1e-5, (13,): 2e-5})
    plan = Plan(LIT_TARGET, "dense.mlir", (planned,))
    built = build(probe_module(DENSE, plan, table="always"), "llvm-cpu", [])
    function = load_function(built.vmfb, "dense")
    weight = np.ones((768, 768), np.float32)
    wrong = {}
    for m in range(1, 21):
        picked = planned.select({0: m})
        want = -1 if picked is None else picked.index
        got = branch_ran(function, [np.ones((m, 768), np.float32), weight])
        if got != want:
            wrong[m] = (got, want)
    assert not wrong, f"(IREE ran, plan picks) by M: {wrong}"
