"""The plan the guard times beside the tuned one: the same search without its explicit
mmt4d kernels.

Those kernels are timed as modules of one op, whose weight stays in cache between calls,
and a module that runs any of them is compiled with IREE's ukernels off (their tiles
have none), so every packed or data-tiled kernel beside them runs as IREE's codegen. In
a model whose weights do not fit the caches the ranking can flip: on the demo's 2-layer
encoder (56 MB of weights, 32 MB of L3) ``mmt4d:m2n32k1`` took 122 us alone at T = 1
where IREE's ``packed:m1n16k1`` ukernel took 172 us, yet the model ran 2.26 ms with the
first and 1.82 ms with the second. At T = 9..24 the same kernels' 12-row tiles made the
model 30% faster than data tiling's 16-row tiles. So the guard times both plans and keeps
the faster: whole where it is faster by geomean, else cell by cell (:mod:`.guarding`).
The rival is searched again with the explicit kernels left out of the space, on the same
budget: its own kernels measured, never guessed (selected again from the first search's
estimates instead, it ran kernels no one had timed and lost everywhere on the demo), the
first search's measurements read from the records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dcmlir.driver.outcome import WorkloadReport
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.search.outcome import SearchResult
from dcmlir.space import Mmt4dCandidate
from dcmlir.workload import Workload

__all__ = ["runs_explicit_kernels", "without_explicit_kernels"]

SearchWithout = Callable[[Workload, frozenset[str]], SearchResult]
"""Searches a workload with the candidates of the given keys left out of its space."""


def runs_explicit_kernels(reports: Sequence[WorkloadReport]) -> bool:
    """Whether any report's plan runs an explicit mmt4d kernel."""
    return any(isinstance(k.candidate, Mmt4dCandidate) for r in reports for k in r.plan.kernels)


def without_explicit_kernels(
    reports: Sequence[WorkloadReport],
    search_without: SearchWithout,
    max_depth: int | None,
    route: str,
) -> list[WorkloadReport]:
    """Each report whose space holds explicit mmt4d kernels searched again with them left
    out (a report whose space holds none, as it is). Also where its plan runs none: they
    took part of its budget, so the search without them measures what they displaced (the
    demo's out projection planned IREE's default at T = 1..4 with them in its space, a
    packed kernel without)."""
    found = []
    for report in reports:
        candidates = report.search.candidates
        left_out = frozenset(c.key() for c in candidates if isinstance(c, Mmt4dCandidate))
        if not left_out:
            found.append(report)
            continue
        result = search_without(report.workload, left_out)
        plan = workload_plan(result, max_depth, route)
        found.append(WorkloadReport(report.workload, result, plan))
    return found
