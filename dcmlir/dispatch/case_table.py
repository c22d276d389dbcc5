"""The dispatch as a table: the case every shape of a workload's range runs, read with
one load per call instead of evaluating the tree (issue 14).

``dcmlir-emit-dispatch`` evaluates a tree as compares and selects in IREE's VM on the
host, every split of the subtree a call reaches, and the shapes with their own build as
one equality test each, before the call dispatches anything: on the Xeon,
``novel_scores_h32``'s dispatch evaluated about 55 VM ops before running IREE's default at
T = 4..16, 0.1-0.2 us on 4-5 us calls (1.02-1.05x IREE's default build; read from the
table 0.97-0.99x of that, ``benchmarks/table_dispatch.py``). A table of the
case at every shape of the range (row-major over the plan's dims, one byte each) is read
with one ``util.buffer.load`` at ``sum((d - lo) * stride)``: a handful of ops whatever
the tree's size. The table holds what :meth:`WorkloadPlan.select` picks, so it runs
exactly what the tree and the exact shapes run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from dcmlir.dispatch.branching import MAX_NESTING, evaluated_splits
from dcmlir.dispatch.workload_plan import WorkloadPlan

__all__ = [
    "MOST_CASES",
    "MOST_ENTRIES",
    "TABLE_SPLITS",
    "CaseTable",
    "can_table",
    "case_table",
    "has_table",
    "tree_splits",
]

MOST_ENTRIES = 1 << 16
"""The largest table (bytes: one per shape of the range); a larger range keeps the tree."""

MOST_CASES = 2 ** (MAX_NESTING - 1)
"""Cases at most: the range check and the balanced search over the cases nest within
:data:`~dcmlir.dispatch.branching.MAX_NESTING` ``scf.if`` levels."""


@dataclass(frozen=True)
class CaseTable:
    """Which case each shape of the range runs: cases ``0 .. len(kernels) - 1`` are the
    tree's kernels (``plan.tree.kernels()`` order), the next ``len(plan.exact)`` the
    shapes with their own build (``plan.exact`` order)."""

    lows: tuple[int, ...]  # per dim of the plan (``plan.dims`` order): the range's low end
    extents: tuple[int, ...]  # per dim: how many values the range has
    cases: bytes  # row-major over the dims, the last fastest
    count: int  # how many cases


TABLE_SPLITS = 12
"""What reading the table costs a call, in tree splits evaluated as selects: on the Xeon
``benchmarks/dispatch_forms.py`` put the table at +0.06-0.07 us over the kernel alone and
50 splits as selects at +0.20-0.32 us (5 splits: +0.02-0.08 us)."""


def can_table(plan: WorkloadPlan) -> bool:
    """Whether ``plan`` fits a table: at most :data:`MOST_ENTRIES` shapes in its range and
    :data:`MOST_CASES` cases, and more than one case."""
    cases = len(plan.tree.kernels()) + len(plan.exact)
    if not 1 < cases <= MOST_CASES:
        return False
    return math.prod(d.range[1] - d.range[0] + 1 for d in plan.dims) <= MOST_ENTRIES


def tree_splits(plan: WorkloadPlan, dims: Mapping[int, int]) -> int:
    """What the tree form costs a call at ``dims``, in splits: the exact shapes' equality
    tests (a compare per dim each, about a split per dim) and the tree's evaluated splits."""
    return len(plan.exact) * len(plan.dims) + evaluated_splits(plan.tree, dims)


def has_table(plan: WorkloadPlan) -> bool:
    """Whether ``plan``'s dispatch reads its case from a table (``table=auto``): where it
    fits one (:func:`can_table`) and the table's :data:`TABLE_SPLITS` cost its shapes'
    calls less than the tree form does, each shape's cost over its predicted time (a
    split weighs most on the shortest calls)."""
    if not can_table(plan):
        return False
    timed = [s for s in plan.shapes if math.isfinite(s.predicted) and s.predicted > 0]
    if not timed:
        return False
    loops = [d.loop for d in plan.dims]
    tree = sum(
        tree_splits(plan, dict(zip(loops, s.dims, strict=True))) / s.predicted for s in timed
    )
    return sum(TABLE_SPLITS / s.predicted for s in timed) < tree


def case_table(plan: WorkloadPlan, always: bool = False) -> CaseTable | None:
    """``plan``'s table; None where it has none (:func:`has_table`; ``always``: wherever
    it fits one, :func:`can_table`)."""
    if not (can_table(plan) if always else has_table(plan)):
        return None
    kernels = plan.tree.kernels()
    count = len(kernels) + len(plan.exact)
    lows = tuple(d.range[0] for d in plan.dims)
    extents = tuple(d.range[1] - d.range[0] + 1 for d in plan.dims)
    position = {kernel: case for case, kernel in enumerate(kernels)}
    exact = {e.dims: len(kernels) + number for number, e in enumerate(plan.exact)}
    loops = [d.loop for d in plan.dims]
    cases = bytearray()
    grid = itertools.product(*(range(low, low + n) for low, n in zip(lows, extents, strict=True)))
    for shape in grid:  # row-major: the last dim fastest
        found = exact.get(shape)
        if found is None:
            found = position[plan.tree.select(dict(zip(loops, shape, strict=True)))]
        cases.append(found)
    return CaseTable(lows, extents, bytes(cases), count)
