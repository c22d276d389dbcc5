"""Tuning a workload again once the whole model's plan shows why.

A workload is searched on its own; two things only the model's plan shows send it back
to the search with some of its kernels left out: kernels IREE rejects fused into the
model (global-optimization level), and packed-family kernels in a plan whose explicit
kernels keep the entry whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from dcmlir.dispatch import Plan
from dcmlir.driver.compiling import rejected_kernels
from dcmlir.driver.outcome import WorkloadReport
from dcmlir.search.shape_generic import SearchResult
from dcmlir.space import DataTiledCandidate, Mmt4dCandidate, PackedFamily, packing_problem

__all__ = ["MODULE_CHECKS", "retuned_in_one_layout", "retuned_without_rejected"]

Search = Callable[..., SearchResult]
"""A workload's search with the candidates whose keys are given left out (and, as a third
argument, those kept as the floor only: measured, never run)."""


MODULE_CHECKS = 3
"""How many times a model's plan is compiled at the end of tuning to find the kernels IREE
rejects fused into the model (each time those workloads are tuned again without them)."""


def retuned_without_rejected(
    reports: Sequence[WorkloadReport],
    search_of: Search,
    plan_of: Callable[[Sequence[WorkloadReport]], Plan],
    input: str | Path,
    stream: IO[str],
) -> Iterator[tuple[str, SearchResult]]:
    """(workload key, its search again) for each workload whose kernels IREE rejects fused
    into the model, without them; the caller puts each into ``reports`` before the next
    check, at most :data:`MODULE_CHECKS` of them."""
    excluded: dict[str, frozenset[str]] = {}
    for _ in range(MODULE_CHECKS):
        fresh = {
            key: frozenset(keys) - excluded.get(key, frozenset())
            for key, keys in rejected_kernels(input, plan_of(reports)).items()
        }
        if not any(fresh.values()):
            return
        for report in list(reports):
            key = report.workload.key
            if not fresh.get(key):
                continue
            excluded[key] = excluded.get(key, frozenset()) | fresh[key]
            print(
                f"dcmlir: IREE cannot compile {', '.join(sorted(fresh[key]))} fused into"
                f" {Path(str(input)).name} for workload {key}: tuning it again without them",
                file=stream,
            )
            yield key, search_of(report.workload, excluded[key])


def retuned_in_one_layout(
    reports: Sequence[WorkloadReport], search_of: Search, stream: IO[str]
) -> Iterator[tuple[str, SearchResult]]:
    """(workload key, its search again) for each constant-weight projection whose plan runs
    the packed family while another's runs explicit mmt4d kernels, without that family.

    Explicit kernels keep the entry whole (``dcmlir-split-entry``: a data-tiled copy of
    the entry would hold their weights twice), so above the narrow packed kernels there is
    no untouched copy for IREE's data tiling to run: the packed family's kernels run in
    cascades, which lose data tiling's work across ops. Measured on a 2-layer GPT-2 whose
    FFN1 took the packed family and the other projections explicit kernels: 0.95-1.16 of
    data tiling's time at T = 13..128; all four explicit: 0.79-1.02 above T = 16
    (docs/design.md section 12).

    IREE's data tiling stays in the search as the floor, measured and never run: without
    it the floor was IREE's default alone, which the codegen family (holding the default)
    never loses to, so the codegen family won whatever its speed (`dense_out` on two
    threads: codegen kernels 0.77-1.19x of IREE's default at T = 17..96, where data tiling
    ran 1.2-2.7x, 1.23x geomean against 1.63x before the search went this way).

    A projection whose own plan runs explicit kernels is left alone: data tiling there
    runs the rows its kernels lose to it (:mod:`dcmlir.search.proven_selection`), and
    with data tiling the floor only, they ran `mmt4d:m12n32k1` 1.09-1.11x behind it at
    T = 61, 63 of `dense_ffn2` (a Zen 4, budget 60; never_slower.py)."""
    if not any(r.plan.runs(Mmt4dCandidate) for r in reports):
        return
    for report in reports:
        if packing_problem(report.workload) is not None or not report.plan.runs(PackedFamily):
            continue
        if report.plan.runs(Mmt4dCandidate):
            continue  # data tiling takes the rows its explicit kernels lose
        family = [c for c in report.search.candidates if isinstance(c, PackedFamily)]
        tiling = frozenset(c.key() for c in family if isinstance(c, DataTiledCandidate))
        print(
            f"dcmlir: workload {report.workload.key} tuned again without the packed family: "
            "the plan's explicit mmt4d kernels keep the entry whole, where packed kernels "
            "lose data tiling's work across ops (IREE's data tiling stays the floor to beat)",
            file=stream,
        )
        excluded = frozenset(c.key() for c in family) - tiling
        yield report.workload.key, search_of(report.workload, excluded, tiling)
