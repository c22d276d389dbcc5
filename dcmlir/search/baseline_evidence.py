"""IREE's default measured beside every chosen kernel's evidence: the never-slower rule.

A kernel keeps a shape only where measurements say it beats IREE's default there. A
side-by-side pair is a shape where both were measured; it is evidence for the shapes it
covers (:func:`dcmlir.search.remainders.cover_matrix`): near it (every dynamic extent
within :data:`~dcmlir.search.remainders.REACH`), in a remainder class the kernel and the
default share with at most its remainders. Classes: the kernel's own
(:mod:`dcmlir.search.remainders`) and the default's, from its effective tile in the cost
model (:meth:`RemainderClasses.with_default`). A kernel is ruled out of every shape where
all pairs covering it show it slower, and of every shape no pair covers.
Without this rule, a kernel measured at 157 us at T = 21 of attention scores kept 30 T
against the default's *estimate*; the default was never measured there and takes 39 us.
The kernel ran up to 5.7x slower than the default (benchmarks/never_slower.py, budget
240).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial

import numpy as np

from dcmlir.search.remainders import cover_matrix, greedy_cover

__all__ = [
    "Together",
    "against_builds",
    "baseline_wants",
    "beaten_rows",
    "contested_rows",
    "contested_side_by_side",
    "side_by_side_wants",
    "unpaired_rows",
    "unvouched",
]

Regions = Mapping[int, Sequence[int]]
"""Each chosen kernel's column -> the shape rows it is chosen for."""

AgainLogs = Callable[[int, int], list[tuple[int, float]]]
"""(kernel column, build column) -> (row, log ratio) of the pairs of the two timed again
(:meth:`dcmlir.search.side_by_side.Pairs.again_logs`)."""

RegimeOf = Callable[[int, int, int], tuple[Hashable, bool] | None]
"""(kernel column, build column, row) -> (the regime of a pair there, whether its records
were timed side by side), None for none: the pairs of one regime repeat one comparison
(:meth:`dcmlir.search.packed_rows.PackedRows.regimes`)."""


TileSteps = Callable[[int, int], np.ndarray | None]
"""(kernel column, build column) -> [pair row, row]: the log of the kernel's row tiles per
build tile at the row over those at the pair; a pair speaks for a row beyond
:func:`cover_matrix` where it is not above 0, and its ratio is carried there by it (None:
either steps on no grid; :meth:`dcmlir.search.packed_rows.PackedRows.tile_steps`)."""


Together = Callable[[int, int], set[int]]
"""(kernel column, build column) -> the rows where their first records were timed side by
side, in one call of the measurer (:meth:`.measured_pairs.MeasuredPairs.together_rows`)."""


def _covering(
    joint: np.ndarray, near: np.ndarray, column: int, build: int, tile_steps: TileSteps | None
) -> np.ndarray:
    """[pair row, row]: where a pair of ``column`` and ``build`` is evidence. Where both step
    on the row-tile grid (``tile_steps``), near and where it speaks, whatever the remainder
    classes: both pad their last tile instead of running remainder code, so their times
    follow the tile counts. By the classes, a pair at T = 8 of `dense_ffn1` on a Xeon (an
    8-row kernel 0.6x data tiling's time, one tile each) spoke for no T below 8, ties at
    T = 9, 10 (two 8-row tiles beside one 16-row tile) did, and the plan ran data tiling
    at T = 3..7, 1.45x the 8-row kernel's time there (never_slower.py, budget 60)."""
    found = None if tile_steps is None else tile_steps(column, build)
    if found is not None:
        return near & (found <= 1e-9)
    return cover_matrix(joint[:, column], near)


def unpaired_rows(
    joint: np.ndarray,
    near: np.ndarray,
    regions: Regions,
    measured_rows: Callable[[int], set[int]],
    default: int,
    tile_steps: TileSteps | None = None,
) -> dict[int, list[int]]:
    """Each kernel's rows that no side-by-side pair covers.

    ``joint``: the classes a kernel shares with the default
    (:meth:`RemainderClasses.with_default`); ``near``: which rows are near which.
    """
    have = measured_rows(default)
    found: dict[int, list[int]] = {}
    for column, region in regions.items():
        pairs = sorted(measured_rows(column) & have)
        covered = _covering(joint, near, column, default, tile_steps)[pairs].any(axis=0)
        rows = [row for row in region if not covered[row]]
        if rows:
            found[column] = rows
    return found


def baseline_wants(
    joint: np.ndarray,
    near: np.ndarray,
    regions: Regions,
    measured_rows: Callable[[int], set[int]],
    default: int,
    tile_steps: TileSteps | None = None,
) -> list[tuple[int, int]]:
    """``(column to measure, row)``: what would pair every row of :func:`unpaired_rows`.

    The default first, beside the kernel's own measurements that cover most of them
    (one measurement a pair); for rows none of those covers, the kernel, at a row where
    the default was measured when one covers as many (else the default follows there).
    """
    have = measured_rows(default)
    wants: list[tuple[int, int]] = []
    unpaired = unpaired_rows(joint, near, regions, measured_rows, default, tile_steps)
    for column, missing in unpaired.items():
        cover = _covering(joint, near, column, default, tile_steps)
        own = sorted(measured_rows(column))
        beside = greedy_cover(cover, own, missing, ()) if own else []
        wants += [(default, row) for row in beside]
        left = [row for row in missing if not cover[beside, row].any()]
        if left:
            wants += [(column, row) for row in greedy_cover(cover, regions[column], left, have)]
    return wants


def beaten_rows(
    joint: np.ndarray,
    near: np.ndarray,
    distance: np.ndarray,
    regions: Regions,
    seconds: Callable[[int, int], float | None],
    default: int,
    margin: float,
    regime: RegimeOf | None = None,
    again: AgainLogs | None = None,
    waste: np.ndarray | None = None,
    tile_steps: TileSteps | None = None,
    by_class: bool = True,
) -> dict[int, list[int]]:
    """Each kernel's rows where the closest side-by-side pairs covering them show it
    slower than the default by more than ``margin``. Closest: in the row's own regime first
    where the two step on the row-tile grid (``regime``: the same tile counts, so the same
    comparison), else in its own remainder class (a pair with more remainders timed the
    kernel's remainder code, which the row does not run; docs/design.md section 7 step
    6), then by ``distance[pair row, row]`` (equal to 1e-9; a pair at the row itself
    decides). On the grid a pair's ratio is carried to the rows it covers per tile: times
    the kernel's tiles per build tile at the row over those at the pair (no more there, by
    :meth:`~dcmlir.search.packed_rows.PackedRows.tile_steps`). Taken as it was, a tie of two
    8-row tiles with one 16-row tile at T = 9, 10 of `dense_qkv` on a Xeon ruled one 8-row
    tile out of T = 5, 6, where it runs 0.6x data tiling's time; dropped where the kernel
    runs fewer tiles per build tile than at the pair, a loss of a 12-row mmt4d kernel of
    `novel_linear_t_640` at T = 61 (six 12-row tiles to four 16-row ones, 1.11x) decided
    no T above 64, and the kernel kept T = 65..128 on a win at T = 33 that speaks up to 36
    and its estimate: it ran 1.03-1.07x data tiling's time at T = 77, 112, 127, 128 (Zen 4,
    budget 60). Carried per tile, that loss says 1.04x at T = 77, 1.06x at 112 and 1.02x
    at 127, 128, and 0.95x at T = 108 and 0.93x at 120 (timed: 1.06x, 1.04x, 1.05x, 1.02x;
    0.95x and 0.96x). Not ``by_class``
    (an IREE build in the kernel's place: no remainder code of its own, the classes are
    the default's alone): by distance alone. Class first let a pair at 8 x 26 of attention
    context (8 heads of size 48; data tiling 1.19x the default, both M a multiple of the
    default's 8-row tile) outvote one at 12 x 32 (0.73x), nearer to 24 x 24, and the plan
    ran the default there, 1.17x data tiling's time (never_slower.py, budget 60). Pairs of
    one ``regime`` are one comparison: where some were timed side by side (``again`` too),
    each shows their geomean ratio. ``waste`` [row]: how much slower than smooth the cost
    model has the default there (:func:`dcmlir.search.floor_builds.default_waste`); a
    pair's ratio is carried to a row net of it, so a pair where the default runs whole
    tiles does not speak for a row where it runs partial ones (an AVX2 Zen 3: 102 us at
    64 x 64 of attention scores, 330 at 63 x 63)."""
    found: dict[int, list[int]] = {}
    line = math.log1p(margin)
    steps = np.zeros(joint.shape[0]) if waste is None else np.log(waste)
    for column, region in regions.items():
        pairs = [
            (row, math.log(kernel / baseline))
            for row in range(joint.shape[0])
            if (kernel := seconds(column, row)) is not None
            and (baseline := seconds(default, row)) is not None
        ]
        timed_again = again(column, default) if again is not None else []
        if regime is not None:
            pairs = _pooled(pairs, timed_again, partial(regime, column, default))
        else:
            pairs += timed_again
        if not pairs:
            continue
        cover = _covering(joint, near, column, default, tile_steps)
        kind = _kind_of(
            joint[:, column], by_class, None if regime is None else partial(regime, column, default)
        )
        grid = None if tile_steps is None else tile_steps(column, default)
        beaten = []
        for row in region:
            covering = [
                (
                    (kind(r) != kind(row), round(float(distance[r, row]), 9)),
                    value + (0.0 if grid is None else float(grid[r, row])),
                )
                for r, value in _carried(pairs, steps, row)
                if cover[r, row]
            ]
            if not covering:
                continue
            closest = min(rank for rank, _ in covering)
            if all(value > line for rank, value in covering if rank == closest):
                beaten.append(row)
        if beaten:
            found[column] = beaten
    return found


def _kind_of(
    masks: np.ndarray, by_class: bool, regime: Callable[[int], tuple[Hashable, bool] | None] | None
) -> Callable[[int], Hashable]:
    """What a pair must share with a row to decide it before nearer pairs: the row-tile
    counts where the two step on a grid (every row of a regime costs each the same), else
    the remainder class (``by_class``), else nothing."""

    def kind(row: int) -> Hashable:
        found = None if regime is None else regime(row)
        if found is not None:
            return found[0]
        return int(masks[row]) if by_class else 0

    return kind


def _carried(
    pairs: list[tuple[int, float]], steps: np.ndarray, row: int
) -> list[tuple[int, float]]:
    """(pair row, log ratio of kernel over build) carried to ``row``: the build's log waste
    (``steps``) at the pair added back, at the row taken out."""
    return [(r, value + float(steps[r] - steps[row])) for r, value in pairs]


def _pooled(
    pairs: list[tuple[int, float]],
    timed_again: list[tuple[int, float]],
    key: Callable[[int], tuple[Hashable, bool] | None],
) -> list[tuple[int, float]]:
    """(row, log ratio) of every pair and pair timed again; in a regime where some were
    timed side by side, each shows the mean of those. Records of two calls minutes apart
    are no comparison beside them: at T = 16 of `dense_ffn1` they said 1.71x where a
    side-by-side pair said 0.89x."""
    groups: dict[Hashable, list[float]] = {}
    for row, value in timed_again:
        if (found := key(row)) is not None:
            groups.setdefault(found[0], []).append(value)
    for row, value in pairs:
        if (found := key(row)) is not None and found[1]:
            groups.setdefault(found[0], []).append(value)
    means = {k: sum(v) / len(v) for k, v in groups.items()}
    pooled = []
    for row, value in [*pairs, *timed_again]:
        found = key(row)
        pooled.append((row, value if found is None else means.get(found[0], value)))
    return pooled


def against_builds(
    builds: Sequence[tuple[int, np.ndarray]],
    near: np.ndarray,
    distance: np.ndarray,
    regions: Regions,
    measured_rows: Callable[[int], set[int]],
    seconds: Callable[[int, int], float | None],
    margin: float,
    regime: RegimeOf | None = None,
    again: AgainLogs | None = None,
    waste: Mapping[int, np.ndarray] | None = None,
    *,
    tile_steps: TileSteps | None = None,
    floor: int | None = None,
    together: Together | None = None,
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(each kernel's rows that no pair with any of ``builds`` covers, its rows where the
    pairs with one of them show it slower): ``builds`` are (column, the classes a kernel
    shares with it) of IREE's builds, the floor being the faster of them. A build chosen
    for some rows is a kernel there, with evidence beside the other builds only, and a
    tie within ``margin`` goes to the other build: a pair no faster than the other is no
    evidence that it is (never_slower.py, budget 60: a pair at 33 x 33 of 16 heads of size
    80 said data tiling 1.0x the default, and it ran T = 17..19, 1.12x slower).

    With IREE's default alone, a budget of 36 left a GPT-2 projection's packed families
    unproven at 113 of 128 T (36 measurements cannot pair every remainder class with the
    default) and its plan ran IREE's default, 2-4x slower than data tiling: a packed
    family serves every M or none. IREE's data tiling is the other build; a pair beside
    it covers rows too (docs/design.md section 12). ``waste``: a build's column -> its
    waste per row (:func:`beaten_rows`), for the builds the cost model has one for.
    ``floor``: the build a kernel's tie with it goes to, as a build's tie with the other
    does (data tiling with a constant weight: pairs said 1.01x and 0.99x at T = 13, 14 of
    `dense_ffn1` on an AVX2 Zen 3, and the plan ran 1.16x and 1.18x its time there);
    ``tile_steps``: where a pair is evidence beyond its cover (:data:`TileSteps`); ``together``:
    with it, a pair with ``floor`` is evidence only where the two were timed side by side
    (:func:`_side_by_side_only`)."""
    unpaired: dict[int, set[int]] = {}
    beaten: dict[int, list[int]] = {}
    columns = {build for build, _ in builds}
    for column, region in regions.items():
        others = [(build, joint) for build, joint in builds if build != column]
        if others:
            unpaired[column] = set(region)
        for build, joint in others:
            line = -margin if column in columns or build == floor else margin
            own = {column: region}
            rows, timed = measured_rows, seconds
            if build == floor and together is not None:
                rows, timed = _side_by_side_only(column, build, rows, timed, together, again)
            found = unpaired_rows(joint, near, own, rows, build, tile_steps)
            unpaired[column] &= set(found.get(column, []))
            steps = (waste or {}).get(build)
            args = (line, regime, again, steps, tile_steps, column not in columns)
            lost = beaten_rows(joint, near, distance, own, timed, build, *args)
            beaten.setdefault(column, []).extend(lost.get(column, []))
    return (
        {c: sorted(rows) for c, rows in unpaired.items() if rows},
        {c: rows for c, rows in beaten.items() if rows},
    )


def _timed_together(
    column: int, build: int, together: Together, again: AgainLogs | None
) -> set[int]:
    """The rows where the two were timed side by side: first records or timed again."""
    return together(column, build) | _timed_again(column, build, again)


def _timed_again(column: int, build: int, again: AgainLogs | None) -> set[int]:
    """The rows where the two were timed again side by side."""
    return {row for row, _ in again(column, build)} if again is not None else set()


def _side_by_side_only(
    column: int,
    build: int,
    measured_rows: Callable[[int], set[int]],
    seconds: Callable[[int, int], float | None],
    together: Together,
    again: AgainLogs | None,
) -> tuple[Callable[[int], set[int]], Callable[[int, int], float | None]]:
    """``measured_rows`` and ``seconds`` with the two columns' pairs those timed side by side
    only. Records of two calls are no evidence against the floor: on `dense_ffn2` (an AVX2
    Zen 3, budget 60) data tiling's record at T = 5 took 1258 us, its record at T = 8 (the
    same one 8-row tile) 792, and a 4-row kernel kept T = 5..8 on it, 1.05-1.11x slower
    than data tiling there (benchmarks/never_slower.py)."""
    first = together(column, build)
    timed = first | _timed_again(column, build, again)
    pair = (column, build)

    def rows(c: int) -> set[int]:
        return timed if c in pair else measured_rows(c)

    def seconds_of(c: int, row: int) -> float | None:
        return seconds(c, row) if c not in pair or row in first else None

    return rows, seconds_of


def side_by_side_wants(
    joint: np.ndarray,
    near: np.ndarray,
    regions: Regions,
    measured_rows: Callable[[int], set[int]],
    build: int,
    together: Together,
    again: AgainLogs | None,
    tile_steps: TileSteps | None = None,
) -> list[tuple[int, int]]:
    """``(kernel column, row)``: where to time a kernel and ``build`` (the floor) side by
    side so that every row of its region has a pair timed so covering it; rows where
    neither was measured first (two first records that feed the estimates too)."""
    wants: list[tuple[int, int]] = []
    have = measured_rows(build)
    for column, region in regions.items():
        cover = _covering(joint, near, column, build, tile_steps)
        timed = sorted(_timed_together(column, build, together, again))
        covered = cover[timed].any(axis=0)
        missing = [row for row in region if not covered[row]]
        if not missing:
            continue
        fresh = set(region) - measured_rows(column) - have
        wants += [(column, row) for row in greedy_cover(cover, region, missing, fresh)]
    return wants


def contested_side_by_side(
    beaten: Regions,
    measured_rows: Callable[[int], set[int]],
    build: int,
    together: Together,
    again: AgainLogs | None,
) -> list[tuple[int, int]]:
    """``(kernel column, row)``: the rows of ``beaten`` where the kernel was measured and not
    timed side by side with ``build``: a pair there decides (:func:`contested_rows`)."""
    wanted: list[tuple[int, int]] = []
    for column, rows in beaten.items():
        open_rows = measured_rows(column) - _timed_together(column, build, together, again)
        wanted += [(column, row) for row in rows if row in open_rows]
    return wanted


def unvouched(
    found: Regions,
    seconds: Callable[[int, int], float | None],
    kernels: Sequence[int],
    holds: Callable[[int, int], bool],
) -> dict[int, list[int]]:
    """``found`` (rows a kernel loses to IREE's builds) less the rows where it was measured
    no slower than one of ``kernels`` measured there that holds the row on its own
    evidence (``holds``): faster than a kernel that beats IREE's builds there, it beats
    them too, whatever its own pairs farther away say.

    On a fake machine (tests/test_search.py) a kernel measured at 1.28 ms at T = 17 lost
    the row to pairs at other T, and one measured at 1.40 ms beside it kept it."""
    kept: dict[int, list[int]] = {}
    for column, rows in found.items():
        left = [row for row in rows if not _vouched(column, row, seconds, kernels, holds)]
        if left:
            kept[column] = left
    return kept


def _vouched(
    column: int,
    row: int,
    seconds: Callable[[int, int], float | None],
    kernels: Sequence[int],
    holds: Callable[[int, int], bool],
) -> bool:
    mine = seconds(column, row)
    if mine is None:
        return False
    for other in kernels:
        theirs = seconds(other, row)
        if other != column and theirs is not None and theirs >= mine and holds(other, row):
            return True
    return False


def contested_rows(
    beaten: Regions, measured_rows: Callable[[int], set[int]], builds: Sequence[int]
) -> list[tuple[int, int]]:
    """(build, row): each of IREE's ``builds`` not measured at a row of ``beaten`` (a
    kernel's rows where pairs with them show it slower) where the kernel was measured.
    There a pair at the row itself decides, instead of pairs farther away.

    Oracle replay, `heldout_linear_t`, budget 110: `wg64x64:v8x16:k16`, measured at
    T = 32 at 521 us (the best of 87 candidates there), lost T = 32 to a pair with data
    tiling at T = 80 (4.6% slower there), and a kernel that takes 580 us ran it; with
    these pairs the worst of three seeds went 0.952 -> 0.984."""
    have = {build: measured_rows(build) for build in builds}
    wanted: list[tuple[int, int]] = []
    for column, rows in beaten.items():
        mine = measured_rows(column)
        wanted += [(b, row) for row in rows if row in mine for b in builds if row not in have[b]]
    return wanted
