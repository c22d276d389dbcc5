"""Verification: which unmeasured (candidate, shape) pairs the search measures next.

In order (:func:`verification_wanted`): the picks that beat a measurement at their own
shape on their estimate alone (:func:`decisive_picks`); each shape's pick, a few per
kernel spread coarse-to-fine over the range; the chosen kernels within a margin of a
shape's pick, and the candidate estimated fastest there when it beats the pick by the
margin; each chosen kernel's reduction siblings never measured without a remainder,
beside it at a shape without one (:func:`siblings_without_remainder`); when none of these
is left to measure, its siblings beside it (:func:`sibling_pairs`), then the contenders
the estimate hides (:func:`hidden_contenders`).

The search's estimate of an unmeasured pair is the model's prediction corrected by what
the measurements showed, and raised (:data:`~dcmlir.search.remainders.UNSEEN_REMAINDER`,
2x when these records were read) in a remainder class the kernel was never measured in:
a safe guess for selection, but
it hides the pairs that would change the answer from verification, which looks at
contenders within a margin of the estimate. Records (EPYC oracle replay, `dense_qkv`,
budget 240): `wg8x128:v4x64:k4`, predicted 252 us at T = 5..7 and measured 212, was
estimated 479-714 us there, never measured, and the search stopped with 19 measurements
left while T = 3..7 ran kernels 1.2-1.3x slower; at budget 480 it stopped at 274 with
the same picks (0.975 of the oracle; 1.000 with them). The model's own prediction is the
optimistic reading: where it is within the margin of a shape's pick, the pair is worth a
measurement, but only once nothing else is. Asked for in every round, they took the
room the picks' own verification had and cost the attention workloads 0.01-0.04 of the
oracle at budgets 240 and 480; the reserve (the search's last measurements, for proofs)
asks for none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dcmlir.shapes import Shape, coarse_to_fine
from dcmlir.space import Candidate
from dcmlir.workload import Workload

__all__ = [
    "decisive_picks",
    "hidden_contenders",
    "reduction_siblings",
    "sibling_pairs",
    "siblings_without_remainder",
    "verification_wanted",
]


def verification_wanted(
    estimate: np.ndarray,
    predicted: np.ndarray,
    shapes: Sequence[Shape],
    picks: Sequence[int],
    measured: np.ndarray,
    per_kernel: int,
    margin: float,
    hidden: bool = True,
    siblings: Mapping[int, Sequence[int]] | None = None,
    classes: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """(column, row) pairs worth a measurement, most useful first (repeats possible):
    ``picks[row]`` is the column each shape runs, ``measured`` [row, column] what the
    records hold, ``per_kernel`` how many of a kernel's own shapes per round; ``hidden``:
    the chosen kernels' ``siblings`` (:func:`reduction_siblings`) never measured without
    a remainder (``classes``: each pair's remainder class), at a row of theirs without
    one, then, when everything else here is measured, the siblings beside them and the
    contenders the estimate hides.

    The siblings without a remainder come after the picks' own verification and the
    close contenders, every round (oracle replay, 15 workloads, budget 240, seeds 0-5,
    worst seed; docs/benchmarks.md, "Reduction siblings where no remainder hides them"):
    attention scores with head sizes 80 and 128 0.962 -> 0.970 and 0.964 -> 0.969
    (fresh, 96: 0.949 -> 0.971), four projections 0.006-0.010 lower (to 0.975-0.991);
    budgets 60 and 110 unchanged (the lists before them fill those rounds). Asked before
    the close contenders, they took `dense_ffn2` at budget 110 from 0.980 to 0.948."""
    row_of = {shape: row for row, shape in enumerate(shapes)}
    order = [row_of[shape] for shape in coarse_to_fine(shapes)]
    wanted = decisive_picks(estimate, picks, measured, 2 * margin)  # 1. on estimates
    counts: dict[int, int] = {}
    for row in order:  # 2. each shape's pick, spread coarse-to-fine over the range
        column = picks[row]
        if measured[row, column]:
            continue
        counts[column] = counts.get(column, 0) + 1
        if counts[column] <= per_kernel:
            wanted.append((column, row))
    kernels = sorted(set(picks))
    for row in order:  # 3. close contenders among the chosen kernels, and the favourite
        best = estimate[row, picks[row]]
        close = [c for c in kernels if c != picks[row] and estimate[row, c] <= best * (1 + margin)]
        wanted += [(column, row) for column in close]
        favourite = int(np.argmin(estimate[row]))
        if estimate[row, favourite] < best * (1 - margin):
            wanted.append((favourite, row))
    siblings = siblings or {}
    if hidden and classes is not None:  # 4. siblings where no remainder hides what they cost
        wanted += siblings_without_remainder(picks, measured, order, siblings, classes)
    if not hidden or not all(measured[row, column] for column, row in wanted):
        return wanted
    beside = sibling_pairs(picks, measured, order, siblings)  # 5. nothing else: unmeasured
    return wanted + (beside or hidden_contenders(estimate, predicted, picks, measured, margin))


def reduction_siblings(workload: Workload, candidates: Sequence[Candidate]) -> dict[int, list[int]]:
    """Column -> the other columns of its kind with the same tiles but the reduction's.

    Siblings share the tile grid (padding, occupancy, remainder classes): they differ in
    the reduction micro-tile alone, which the model's throughput predicts worst. Records
    (EPYC oracle, attention scores with head size 80): `k1` kernels were the fastest at 9
    of 31 T, 3-20% ahead of their `k8` siblings, and predicted 2-4x slower than they ran
    at 7 of them; IREE's own builds (no tiles known) have none."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for column, candidate in enumerate(candidates):
        levels = candidate.levels(workload)
        if levels is not None:
            key = (candidate.kind, levels.workgroup, levels.vector, levels.cache)
            groups.setdefault(key, []).append(column)
    return {c: [s for s in group if s != c] for group in groups.values() for c in group}


def sibling_pairs(
    picks: Sequence[int],
    measured: np.ndarray,
    order: Sequence[int],
    siblings: Mapping[int, Sequence[int]],
) -> list[tuple[int, int]]:
    """(column, row): each chosen kernel's unmeasured siblings at the first row (in
    ``order``) it is picked for and measured at, so that a sibling's one measurement
    stands beside the kernel's own.

    Asked for once nothing else is (oracle replay, 9 workloads x 3 seeds, worst seed): the
    same at budgets 60 and 110; at 240 no workload lower, `dense_out` 0.986 -> 0.989 and
    attention scores with head size 80 0.957 -> 0.958 (mean 0.960 -> 0.964); at 480
    `dense_qkv` 0.977 -> 0.999 and head size 80 0.973 -> 0.979 (`dense_ffn2` 0.997 -> 0.995)."""
    return [
        (s, anchor)
        for column, anchor in _anchors(picks, measured, order)
        for s in siblings.get(column, ())
        if not measured[anchor, s]
    ]


def _anchors(
    picks: Sequence[int],
    measured: np.ndarray,
    order: Sequence[int],
    classes: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """(column, row): each chosen kernel and the first row (in ``order``) it is picked for
    and measured at; with ``classes``, the first such row without a remainder."""
    found = []
    for column in dict.fromkeys(picks):
        rows = (r for r in order if picks[r] == column and measured[r, column])
        if classes is not None:
            rows = (r for r in rows if classes[r, column] == 0)
        anchor = next(rows, None)
        if anchor is not None:
            found.append((column, anchor))
    return found


def siblings_without_remainder(
    picks: Sequence[int],
    measured: np.ndarray,
    order: Sequence[int],
    siblings: Mapping[int, Sequence[int]],
    classes: np.ndarray,
) -> list[tuple[int, int]]:
    """(column, row): each chosen kernel's siblings never measured without a remainder
    (``classes`` [row, column]: :class:`~dcmlir.search.remainders.RemainderClasses`), at
    the first row (in ``order``) without one that the kernel is picked for and measured at.

    A sibling measured only with a remainder is estimated without one from that bound, and
    a reduction tile's cost depends on the remainder: beside its `k8` sibling
    `wg64x64:v8x16:k1` runs 0.92-1.04x where its vector tile divides T and 1.13-2.14x where
    it does not (EPYC oracle, attention scores with head size 80); the search measured it
    at T = 12 only and estimated it at 60 us at T = 40, where it runs 29."""
    return [
        (s, anchor)
        for column, anchor in _anchors(picks, measured, order, classes)
        for s in siblings.get(column, ())
        if not (measured[:, s] & (classes[:, s] == 0)).any()
    ]


def decisive_picks(
    estimate: np.ndarray,
    picks: Sequence[int],
    measured: np.ndarray,
    margin: float,
) -> list[tuple[int, int]]:
    """(column, row) of each row's pick where it is not ``measured`` and some candidate
    measured there is within ``margin`` of its estimate, the closest calls first.

    There the answer rests on one estimate against a measurement, and one measurement
    settles it. Oracle replay (docs/benchmarks.md, "Picks decided on an estimate"): at
    T = 24..64 of `dense_qkv`, budget 110, `wg32x128:v8x32:k4`, never measured there and
    estimated up to 4% faster than `k8` measured there, ran 5-19% slower (T = 8: 2.1x);
    at T = 64 of attention scores a kernel measured only at T = 128, estimated at 32 us
    beside one measured at 35, took 55. Asked for before the picks' spread verification
    and within twice the contender margin, the worst of three seeds went 0.923 -> 0.958
    (`dense_qkv`) and 0.929 -> 0.956 (attention scores) at budget 110."""
    found: list[tuple[float, int, int]] = []
    for row, column in enumerate(picks):
        if measured[row, column]:
            continue
        rivals = [estimate[row, c] for c in np.flatnonzero(measured[row]) if c != column]
        closest = min(rivals, default=np.inf) / estimate[row, column]
        if closest <= 1 + margin:
            found.append((closest, row, column))
    return [(column, row) for _, row, column in sorted(found)]


def hidden_contenders(
    estimate: np.ndarray,
    predicted: np.ndarray,
    picks: Sequence[int],
    measured: np.ndarray,
    margin: float,
) -> list[tuple[int, int]]:
    """(column, row) pairs not ``measured`` whose prediction or estimate is within
    ``margin`` of the estimate of the row's pick (``picks[row]``, a column), the most
    promising (lowest ratio) first."""
    rows = np.arange(len(picks))
    best = estimate[rows, np.asarray(picks)]
    optimistic = np.minimum(estimate, np.where(np.isfinite(estimate), predicted, np.inf))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = optimistic / best[:, None]
    ratio[measured | ~np.isfinite(ratio)] = np.inf
    found = np.argwhere(ratio <= 1 + margin)
    order = np.argsort(ratio[found[:, 0], found[:, 1]], kind="stable")
    return [(int(found[i, 1]), int(found[i, 0])) for i in order]
