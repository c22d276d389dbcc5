"""How deep a workload's dispatch tree is: shallow where the selection allows, and never
so deep that evaluating it costs the calls more than its picks save.

A call evaluates the tree's branches on its path and every split of the subtree it
reaches (``arith.cmpi`` + ``arith.select`` in IREE's VM on the host:
:mod:`dcmlir.dispatch.branching`), or, where that costs the calls more, reads its case
from a table at the cost of about 12 splits (:mod:`dcmlir.dispatch.case_table`). That is
a cost per call that grows with the splits up to the table's:
on the EPYC, the 40 splits of ``heldout_scores_h80``'s tree evaluated as selects cost
0.45 us per call against a one-compare case (10 us calls at T <= 8: 4%). A tree is
therefore judged on its picks' cost plus its own, against the selection's (which has
none).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dcmlir.dispatch import WorkloadPlan
from dcmlir.dispatch.case_table import TABLE_SPLITS, has_table, tree_splits
from dcmlir.search.shape_generic import SearchResult
from dcmlir.shapes import Shape

__all__ = [
    "SPLIT_SECONDS",
    "TREE_SHAPE_TOLERANCE",
    "TREE_TOLERANCE",
    "dispatch_slowdowns",
    "workload_plan",
]

TREE_TOLERANCE = 0.01
"""A shallower tree is kept when its picks, with the tree's own cost, cost at most 1%
more than the selection's (estimated, geomean and total over the training shapes) ..."""

TREE_SHAPE_TOLERANCE = 0.03
"""... and at most 3% more at every one of those shapes: a shallower tree must not
give a range of small shapes a kernel the selection found slower there (measured on an
H100: a depth-2 tree within 1% overall ran T = 1-3 at 0.60x of IREE's default, which the
selection had kept there)."""

SPLIT_SECONDS = 11e-9
"""What one split a call evaluates costs it: 0.45 us for the 40 splits of
``heldout_scores_h80``'s tree against a one-compare case, side by side on the EPYC
(IREE 3.13's VM, one thread; docs/benchmarks.md)."""


def workload_plan(search: SearchResult, max_depth: int | None, route: str) -> WorkloadPlan:
    """The plan of one searched workload: its kernels, choices and the costs behind them.

    Without ``max_depth`` the tree is the shallowest one whose picks, with the tree's own
    cost per call (:data:`SPLIT_SECONDS` a split evaluated), cost within :data:`TREE_TOLERANCE` of
    the selection overall and within :data:`TREE_SHAPE_TOLERANCE` at every shape: the
    selection often alternates between near-equal kernels from one shape to the next,
    which an exact tree pays for with dozens of splits (and kernels) and no speed. Where
    no depth is within both, the one that exceeds them least.
    """
    predicted: dict[Shape, list[float]] = {}
    measured: dict[Shape, float | None] = {}
    for shape in search.shapes:
        predicted[shape] = [search.kernel_cost(shape, k)[0] for k in range(len(search.kernels))]
        seconds, was_measured = search.kernel_cost(shape, search.choice[shape])
        measured[shape] = seconds if was_measured and math.isfinite(seconds) else None

    def fitted(depth: int | None) -> WorkloadPlan:
        return WorkloadPlan.build(
            search.workload,
            search.kernels,
            search.choice,
            predicted,
            measured,
            depth,
            routes=route,
            exact=search.exact,
        )

    if max_depth is not None:
        return fitted(max_depth)
    exact = fitted(None)
    best: tuple[float, WorkloadPlan] | None = None
    for depth in range(exact.tree.depth + 1):
        candidate = exact if depth == exact.tree.depth else fitted(depth)
        geomean, total, worst = dispatch_slowdowns(candidate, predicted, search.choice)
        excess = max(geomean / TREE_TOLERANCE, total / TREE_TOLERANCE)
        excess = max(excess, worst / TREE_SHAPE_TOLERANCE)
        if excess <= 1.0:
            return candidate
        if best is None or excess < best[0]:
            best = (excess, candidate)
    assert best is not None  # depth 0 is always tried
    return best[1]


def dispatch_slowdowns(
    plan: WorkloadPlan, predicted: Mapping[Shape, Sequence[float]], choice: Mapping[Shape, int]
) -> tuple[float, float, float]:
    """(geomean, total, worst) slowdown over the selection of the tree's picks with the
    splits each call evaluates added to it; a shape whose selected kernel has no finite
    time tells nothing and is left out."""
    loops = plan.tree.loops
    tabled = has_table(plan)  # the form dcmlir-emit-dispatch emits by default
    logs: list[float] = []
    mine_total = chosen_total = 0.0
    worst = 0.0
    for shape, picked in choice.items():
        best = float(predicted[shape][picked])
        if not math.isfinite(best) or best <= 0.0:
            continue
        dims = dict(zip(loops, shape, strict=True))
        overhead = SPLIT_SECONDS * (TABLE_SPLITS if tabled else tree_splits(plan, dims))
        mine = float(predicted[shape][plan.tree.select(shape)]) + overhead
        if not math.isfinite(mine):
            return math.inf, math.inf, math.inf
        logs.append(math.log(mine / best))
        mine_total += mine
        chosen_total += best
        worst = max(worst, mine / best - 1.0)
    if not logs:
        return 0.0, 0.0, 0.0
    geomean = math.exp(sum(logs) / len(logs)) - 1.0
    return geomean, mine_total / chosen_total - 1.0, worst
