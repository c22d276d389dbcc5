"""Exact builds: a shape given IREE's default built static for it, where that beats the pick.

The search's kernels are sized by the hardware; at the smallest shapes a call is a few
tiles plus remainders, and IREE's default on the op made static for the one shape
(:class:`~dcmlir.space.ExactCandidate`) has no remainders and no dynamic bounds. On the
EPYC, attention context on two threads ran 1.03-1.20x over IREE's default at T <= 8
with the kernels of the search, where IREE's per-shape static builds ran 1.36-1.46x;
above T = 8 the kernels were ahead (1.74-1.82x against 1.58-1.71x; docs/design.md
section 13). So after the selection is proven, the search walks up the shapes from the
smallest call and times each shape's exact build beside the kernel chosen there, side by
side and call by call; a build that wins by more than noise (:data:`WIN`) is kept, and
the dispatch runs it when every dynamic extent equals its shape, before the tree.

It costs a compile per build tried and two measurements (:data:`EXACT_SHARE` of the
budget at most), nothing where the chosen kernels read a constant weight packed only
(:func:`reads_weight_as_is`), and the walk stops after :data:`MISSES` shapes in a row
without a win: the fewer tiles a call has, the more an exact build gains, so past the
first misses little is left.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from dcmlir.search.floor_builds import SAME
from dcmlir.search.measured_pairs import MeasuredPairs
from dcmlir.search.selection import weight_layouts
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DefaultCandidate, ExactCandidate, packing_problem
from dcmlir.workload import Workload

__all__ = [
    "EXACT_SHARE",
    "MISSES",
    "WIN",
    "exact_builds",
    "exact_order",
    "reads_weight_as_is",
    "time_side_by_side",
    "walk_exact_builds",
]

EXACT_SHARE = 0.1
"""Of the budget, at most, for exact builds (two measurements a shape tried)."""

MISSES = 2
"""Shapes in a row whose exact build did not win, after which the walk stops."""

WIN = 1.0 - SAME
"""An exact build is kept where it takes at most this share of the chosen kernel's time,
timed side by side: a smaller gain is noise, not worth a branch (issue 14's 0.97x)."""

TimePair = Callable[[Candidate, Candidate, Shape], tuple[float, float]]
"""(build, chosen kernel, shape) -> both median seconds, timed side by side."""


def exact_order(workload: Workload, shapes: Sequence[Shape]) -> list[Shape]:
    """The shapes an exact build is tried at, smallest call first (the product of the
    dynamic extents). Where every dynamic loop shares one range, the diagonal only: such
    loops are most often one length (attention's T x T, what a model runs; the search's
    shapes keep the diagonal for it, :func:`~dcmlir.search.shape_range.shapes_in_range`),
    and off it the builds would be spent on shapes no call has."""
    ranges = {d.range for d in workload.dynamic_dims}
    found = list(shapes)
    if len(workload.dynamic_dims) > 1 and len(ranges) == 1:
        found = [s for s in found if len(set(s)) == 1]
    return sorted(found, key=lambda s: (math.prod(s), s))


def reads_weight_as_is(workload: Workload, kernels: Sequence[Candidate]) -> bool:
    """Whether exact builds cost no memory: the workload has no constant weight to pack, or
    a chosen kernel reads it as it is already. An exact build is IREE's default, which
    reads the weight as it is; where every chosen kernel reads it packed (and so does the
    fallback), a build would keep a second copy of it, the cost the selection pays only
    where one family alone loses to an IREE build (:data:`~dcmlir.search.selection.MIX_GAIN`)."""
    if packing_problem(workload) is not None:
        return True
    return weight_layouts([*kernels, DefaultCandidate()]) == weight_layouts(kernels)


def walk_exact_builds(
    order: Sequence[Shape],
    chosen: Callable[[Shape], Candidate],
    time_pair: TimePair,
    measurements: int,
) -> dict[Shape, float]:
    """Shape -> the exact build's seconds, for the shapes of ``order`` where the build beat
    the kernel ``chosen`` there by :data:`WIN`; at most ``measurements`` timed."""
    bought: dict[Shape, float] = {}
    misses = 0
    for shape in order:
        if measurements < 2 or misses >= MISSES:
            break
        build, pick = ExactCandidate(tuple(shape)), chosen(shape)
        mine, theirs = time_pair(build, pick, shape)
        measurements -= 2
        if math.isfinite(mine) and mine <= WIN * theirs:
            bought[shape] = mine
            misses = 0
        else:
            misses += 1
    return bought


def time_side_by_side(book: MeasuredPairs, calls: int) -> TimePair:
    """A :data:`TimePair` on the search's book: the two timed again in one call, call by
    call (``calls`` samples each), as a family duel's pair; counted in the budget."""

    def time_pair(build: Candidate, pick: Candidate, shape: Shape) -> tuple[float, float]:
        book.measure([(build, shape), (pick, shape)], calls, again={shape})
        mine, theirs = book.again[-2:]
        return mine.seconds, theirs.seconds

    return time_pair


def exact_builds(
    workload: Workload,
    shapes: Sequence[Shape],
    book: MeasuredPairs,
    chosen: Callable[[Shape], Candidate],
    kernels: Sequence[Candidate],
    calls: int,
    measurements: int,
) -> dict[Shape, float]:
    """:func:`walk_exact_builds` over the search's shapes, each pair timed on its ``book``
    (:func:`time_side_by_side`), none where the ``kernels`` chosen read the weight packed
    only (:func:`reads_weight_as_is`)."""
    if not reads_weight_as_is(workload, kernels):
        return {}
    pair = time_side_by_side(book, calls)
    return walk_exact_builds(exact_order(workload, shapes), chosen, pair, measurements)
