"""What the guard changes in a workload's search where the tuned module lost at a point
(:mod:`.guarding`): the cell's shapes that run the kernel it ran there go to an IREE
build (:func:`patched`), to what the rival plan runs (:func:`swapped`), or, where the plan
already runs that IREE build there, to the plan's next kernels (:func:`next_kernels`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from dcmlir.driver.outcome import WorkloadReport
from dcmlir.search.outcome import SearchResult
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate

__all__ = ["NEXT_WITHIN", "next_kernels", "patched", "ran_build", "swapped"]

NEXT_WITHIN = 1.1
"""A next kernel estimated more than this behind the IREE build it would replace is left
out (:func:`next_kernels`): what it makes up is the build's cost as one branch of the
dispatch, 3-12% of that build's time in a 12-layer Llama."""


def patched(
    report: WorkloadReport,
    cell: tuple[int, int],
    point: int,
    build: Candidate,
    ratio: float,
) -> SearchResult | None:
    """``report``'s search with ``build`` chosen at the shapes of ``cell`` where the plan runs
    what it runs at ``point`` (every dim at it), its estimate there the kernel's over
    ``ratio`` (the tuned module's time over the build's, so that the tree keeps it); None
    where the build is not among the search's candidates or already runs there. By what the
    plan runs, not the search's picks: where the tree ran a neighbour's kernel at ``point``
    (within its 1%), a patch keyed on the picks missed ``point`` itself (tests/test_guard.py
    failed so once in CI)."""
    return _chosen_in_cell(report, cell, point, lambda _: build, ratio, {})


def swapped(
    report: WorkloadReport,
    rival: WorkloadReport,
    cell: tuple[int, int],
    point: int,
    ratio: float,
) -> SearchResult | None:
    """``report``'s search with what ``rival``'s plan runs chosen at each shape of ``cell``
    where ``report``'s plan runs what it runs at ``point`` (as :func:`patched` does with
    one build); the rival's exact builds stay. None where nothing changes."""

    def rival_runs(shape: Shape) -> Candidate:
        return rival.plan.kernels[rival.plan.tree.select(shape)].candidate

    return _chosen_in_cell(report, cell, point, rival_runs, ratio, rival.search.exact)


def _chosen_in_cell(
    report: WorkloadReport,
    cell: tuple[int, int],
    point: int,
    build_at: Callable[[Shape], Candidate],
    ratio: float,
    exact_kept: Mapping[Shape, float],
) -> SearchResult | None:
    """:func:`patched` and :func:`swapped`: ``build_at(shape)`` chosen at the cell's shapes
    where the plan runs its kernel at ``point``."""
    search = report.search
    keys = [c.key() for c in search.candidates]
    at = (point,) * len(report.plan.dims)
    ran_key = report.plan.kernels[report.plan.tree.select(at)].candidate.key()
    kernels = list(search.kernels)
    known = [k.key() for k in kernels]
    if ran_key not in known:
        return None
    choice, estimate = dict(search.choice), search.estimate.copy()
    measured = dict(search.measured)
    low, high = cell
    changed = False
    for row, shape in enumerate(search.shapes):
        if not all(low <= d <= high for d in shape):
            continue
        # what the plan runs there, not the search's pick: the tree may run a neighbour's
        if report.plan.kernels[report.plan.tree.select(shape)].candidate.key() != ran_key:
            continue
        build = build_at(shape)
        if build.key() == ran_key or build.key() not in keys:
            continue
        if build.key() not in known:
            kernels.append(build)
            known.append(build.key())
        before, _ = search.kernel_cost(shape, known.index(ran_key))
        choice[shape] = known.index(build.key())
        estimate[row, keys.index(build.key())] = before / ratio
        measured.pop((build.key(), shape), None)  # the estimate holds the guard's evidence
        changed = True
    if not changed:
        return None
    exact = {
        s: t
        for s, t in search.exact.items()
        if s in exact_kept or not all(low <= d <= high for d in s)
    }
    return dataclasses.replace(
        search, kernels=kernels, choice=choice, estimate=estimate, measured=measured, exact=exact
    )


def ran_build(report: WorkloadReport, point: int) -> Candidate | None:
    """The IREE build the plan runs at ``point`` (every dim at it), None where it runs a
    kernel of its own."""
    at = (point,) * len(report.plan.dims)
    ran = report.plan.kernels[report.plan.tree.select(at)].candidate
    return ran if isinstance(ran, DefaultCandidate | DataTiledCandidate) else None


def next_kernels(
    report: WorkloadReport,
    cell: tuple[int, int],
    point: int,
    build: Candidate | None,
    ratio: float,
) -> SearchResult | None:
    """Where the plan already runs ``build`` (None: either IREE build) at ``point`` and still
    lost to IREE's own build of it (or to the rival plan): at each shape of ``cell`` that
    runs it, the plan's fastest other kernel by the search's estimate there, if within
    :data:`NEXT_WITHIN` of the build's (no IREE build; its estimate the build's over
    ``ratio``, as in :func:`patched`). IREE's build written as one branch of a dispatch is
    not IREE's build of the whole model: in a 12-layer Llama data tiling's branch of the
    projections ran the model 3-9% slower than IREE's data-tiled build at T = 15, 16, 31,
    32, where the 8- and 4-row explicit tiles it tied with standalone ran it 0.89-0.95 of
    that build (docs/design.md section 12). None where the plan runs no IREE build (or
    another one) at ``point`` or has no other kernel near enough."""
    search, ran = report.search, ran_build(report, point)
    if ran is None or (build is not None and ran.key() != build.key()):
        return None
    keys = [c.key() for c in search.candidates]
    if ran.key() not in keys:  # no estimate to weigh the others by
        return None
    rows = {shape: row for row, shape in enumerate(search.shapes)}
    own = keys.index(ran.key())
    others = [
        (keys.index(k.key()), k)
        for k in search.kernels
        if not isinstance(k, DefaultCandidate | DataTiledCandidate) and k.key() in keys
    ]

    def fastest_other(shape: Shape) -> Candidate:
        estimate = search.estimate[rows[shape]]
        near = [(estimate[c], k) for c, k in others if estimate[c] <= estimate[own] * NEXT_WITHIN]
        return min(near, key=lambda f: f[0])[1] if near else ran  # the build: no change

    return _chosen_in_cell(report, cell, point, fastest_other, ratio, {})
