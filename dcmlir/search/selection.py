"""Selection: from the estimated (shape x candidate) table to a few kernels and each shape's pick.

1. Kernel families: the packed kernels read a weight packed ``16 x 1`` (IREE's
   encodings), the explicit mmt4d kernels read it packed ``32 x 1``, and the others read
   it as it is; one workload's kernels come from one family, so a weight lives in one
   layout only (docs/design.md section 12). Each family is selected on its own; the
   one that loses least to the best IREE build at each shape (IREE's default or its
   data tiling, whichever is faster there; beyond :data:`LOSS_MARGIN`) wins, then the
   faster (geomean over the shapes). Before, the codegen family won `dense_out` by
   geomean and ran 5-27% slower than data tiling at 20 of 40 T (never_slower.py,
   budget 240). With ``weight_layouts`` 2, two families together (a second copy of
   the weight) take over where the best family still loses (:func:`chosen_selection`).
2. Within a family: greedy set cover of the shapes' top-k by at most ``max_kernels``
   kernels, then kernels that lower the geomean of the per-shape best are added.
3. Ties: a shape takes the kernel that serves most shapes among those within
   ``tie_margin`` of its best, so near-equal kernels do not alternate from one
   shape to the next (a tree could not follow them, and they gain nothing).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dcmlir.shapes import Shape
from dcmlir.space import (
    Candidate,
    DataTiledCandidate,
    DefaultCandidate,
    Mmt4dCandidate,
    OneTileMmt4dCandidate,
    PackedCandidate,
)

__all__ = [
    "CLOSE_CALL",
    "LOSS_MARGIN",
    "MIX_GAIN",
    "FamilySelection",
    "SelectionSettings",
    "build_floor",
    "chosen_selection",
    "contested_family",
    "family_selections",
    "kernel_families",
    "layout_mixes",
    "measured_favoured",
    "measured_first",
    "scored",
    "select_among",
    "select_kernels",
    "weight_layouts",
]


LOSS_MARGIN = 0.03
"""A family loses at a shape when its pick is estimated more than 3% slower than the best
IREE build there (issue 14's line: at least 0.97x at every T); closer is noise."""


CLOSE_CALL = 0.10
"""A pick estimated within 10% of the best IREE build is a close call: single samples on
this machine differ by that much between identical builds (docs/benchmarks.md)."""


MIX_GAIN = 0.10
"""Two families together keep a constant weight in two layouts (one more copy of it in
memory). They replace the best one-family selection only where that one loses to the
best IREE build and they lose at least this much less (log time beyond
:data:`LOSS_MARGIN`, summed over the shapes): a second copy buys never-slower, not
speed. On two threads the packed family of `dense_out` ran 0.57-0.88x of IREE's default
at T <= 8 and the codegen family 0.89-0.94x at T = 119, 128 (2.4-2.9x behind data
tiling): each family alone lost somewhere (docs/benchmarks.md, "Every core")."""


class SelectionSettings(Protocol):
    max_kernels: int
    top_k: int
    tie_margin: float
    weight_layouts: int  # a weight's layouts in one workload's kernels: 1, or 2 (a mix)
    floor_only: frozenset[str]  # IREE builds (keys) that are the floor but never run


def kernel_families(
    candidates: Sequence[Candidate], floor_only: Collection[str] = ()
) -> list[list[int]]:
    """Column groups one workload's kernels all come from: the kernels that read the
    weight packed by IREE's encodings (the packed family, with IREE's data tiling when it
    is offered beside it), the explicit mmt4d kernels of each ``N0``, and the rest; the
    candidates keyed in ``floor_only`` in none (measured as the floor, never run)."""
    packs_weight = any(isinstance(c, PackedCandidate) for c in candidates)
    packed = [
        i
        for i, c in enumerate(candidates)
        if isinstance(c, PackedCandidate) or (packs_weight and isinstance(c, DataTiledCandidate))
    ]
    explicit: dict[int, list[int]] = {}
    for i, c in enumerate(candidates):
        if isinstance(c, Mmt4dCandidate):
            explicit.setdefault(c.n0, []).append(i)
    in_family = set(packed).union(*explicit.values())
    rest = [i for i in range(len(candidates)) if i not in in_family]
    families = [rest, packed, *(explicit[n0] for n0 in sorted(explicit))]
    kept = [[i for i in columns if candidates[i].key() not in floor_only] for columns in families]
    return [columns for columns in kept if columns]


@dataclass(frozen=True)
class FamilySelection:
    """One family's selection: its kernels (columns) and each shape's pick (index into
    them); ``lost``: the log time over the best IREE build beyond the tie margin, summed
    over the shapes; ``cost``: the log time summed (lower is faster)."""

    kernels: list[int]
    choice: dict[Shape, int]
    lost: float
    cost: float
    columns: list[int]  # the family's members


def build_floor(estimate: np.ndarray, candidates: Sequence[Candidate]) -> np.ndarray:
    """Per shape, the estimate of the best IREE build (its default or its data tiling)."""
    builds = [
        i for i, c in enumerate(candidates) if isinstance(c, DefaultCandidate | DataTiledCandidate)
    ]
    return estimate[:, builds].min(axis=1) if builds else np.full(len(estimate), np.inf)


def weight_layouts(candidates: Sequence[Candidate]) -> int:
    """How many layouts of a constant weight these kernels read: as it is (IREE's default,
    the codegen kernels), IREE's encodings (the packed kernels, data tiling), and each
    explicit mmt4d kernel's ``N0 x 1``."""
    layouts: set[object] = set()
    for candidate in candidates:
        if isinstance(candidate, PackedCandidate | DataTiledCandidate):
            layouts.add("encodings")
        elif isinstance(candidate, Mmt4dCandidate):
            layouts.add(candidate.n0)
        else:
            layouts.add("as it is")
    return len(layouts)


def layout_mixes(families: Sequence[Sequence[int]], weight_layouts: int) -> list[list[int]]:
    """The column groups of two families together, when ``weight_layouts`` allows two."""
    if weight_layouts < 2:
        return []
    return [sorted({*a, *b}) for a, b in itertools.combinations(families, 2)]


def family_selections(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> list[FamilySelection]:
    """Each family's own selection (:func:`kernel_families` order)."""
    floor = build_floor(estimate, candidates)
    beyond = _beyond_cap(candidates)
    return [
        _selection(estimate, shapes, columns, floor, settings, *beyond)
        for columns in kernel_families(candidates, settings.floor_only)
    ]


def chosen_selection(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> FamilySelection:
    """The family that loses least to the best IREE build at each shape, then whose
    selection is fastest (geomean); or two families together where that one loses
    (:data:`MIX_GAIN`)."""
    found = family_selections(estimate, shapes, candidates, settings)
    return _chosen(found, estimate, shapes, candidates, settings)


def _chosen(
    found: Sequence[FamilySelection],
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> FamilySelection:
    """:func:`chosen_selection` from the families' own selections, ``found``."""
    best = min(found, key=_rank)  # a space is never empty
    mixes = layout_mixes([f.columns for f in found], settings.weight_layouts)
    if not mixes:
        return best
    floor = build_floor(estimate, candidates)
    beyond = _beyond_cap(candidates)
    mixed_ones = (_selection(estimate, shapes, c, floor, settings, *beyond) for c in mixes)
    mixed = min(mixed_ones, key=_rank)
    return mixed if mixed.lost <= best.lost - math.log1p(MIX_GAIN) else best


def select_kernels(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> tuple[list[int], dict[Shape, int]]:
    """(kernel columns, shape -> index into them) of :func:`chosen_selection`."""
    chosen = chosen_selection(estimate, shapes, candidates, settings)
    return chosen.kernels, chosen.choice


def _rank(selection: FamilySelection) -> tuple[float, float]:
    return selection.lost, selection.cost


def _selection(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    columns: list[int],
    floor: np.ndarray,
    settings: SelectionSettings,
    free: Collection[int] = (),
    uncapped: Collection[int] = (),
) -> FamilySelection:
    """The selection among ``columns``, with what it loses to ``floor`` and costs."""
    used, choice = _select_among(estimate, shapes, columns, settings, free, uncapped)
    return FamilySelection(used, choice, *_scores(estimate, shapes, used, choice, floor), columns)


def _scores(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    kernels: list[int],
    choice: dict[Shape, int],
    floor: np.ndarray,
) -> tuple[float, float]:
    """(lost, cost) of a selection (:class:`FamilySelection`) against ``floor`` [row]."""
    row_of = {shape: row for row, shape in enumerate(shapes)}
    times = {
        shape: min(float(estimate[row_of[shape], kernels[k]]), 1e9) for shape, k in choice.items()
    }
    cost = sum(math.log(t) for t in times.values())
    lost = sum(
        max(0.0, math.log(t / float(floor[row_of[shape]])) - math.log1p(LOSS_MARGIN))
        for shape, t in times.items()
        if math.isfinite(floor[row_of[shape]])
    )
    return lost, cost


def select_among(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    columns: list[int],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> FamilySelection:
    """The selection among ``columns`` alone (any group of them, not only a family)."""
    floor = build_floor(estimate, candidates)
    return _selection(estimate, shapes, columns, floor, settings, *_beyond_cap(candidates))


def scored(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    kernels: list[int],
    choice: dict[Shape, int],
    candidates: Sequence[Candidate],
    floor: int | None = None,
) -> tuple[float, float]:
    """(lost, cost) of a selection, as :class:`FamilySelection` has them: lower is better
    (lost against ``floor``'s estimate where one build is the floor, else the best IREE
    build's)."""
    builds = build_floor(estimate, candidates) if floor is None else estimate[:, floor]
    return _scores(estimate, shapes, kernels, choice, builds)


def contested_family(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> tuple[FamilySelection, float] | None:
    """The family whose picks side-by-side measurements should check, and the ratio to the
    best IREE build above which a pick is checked; None when no family needs it.

    Each family's picks are single samples, the builds' too, and the noise between them
    decides a close race. A family faster than the selected one (by geomean) that loses
    somewhere is checked where it loses (beyond :data:`LOSS_MARGIN`); else the selected
    family, when no IREE build is in it (it reads the weight in a layout of its own), is
    checked at its close calls (within :data:`CLOSE_CALL` of the build)."""
    found = family_selections(estimate, shapes, candidates, settings)
    chosen = _chosen(found, estimate, shapes, candidates, settings)
    faster = [f for f in found if f.cost < chosen.cost and f.lost > 0]
    if faster:
        return min(faster, key=lambda f: f.cost), 1 + LOSS_MARGIN
    builds = DefaultCandidate | DataTiledCandidate
    if any(isinstance(candidates[c], builds) for c in chosen.columns):
        return None
    return chosen, 1 - CLOSE_CALL


def _select_among(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    columns: list[int],
    settings: SelectionSettings,
    free: Collection[int] = (),
    uncapped: Collection[int] = (),
) -> tuple[list[int], dict[Shape, int]]:
    """Greedy set cover of the shapes' top-k by at most ``max_kernels`` of ``columns``, and
    the ``free`` and ``uncapped`` columns among them beyond that (:func:`_beyond_cap`; the
    ``uncapped`` ones are left out of the cover, so they take no kernel's place)."""
    all_columns, columns = columns, [c for c in columns if c not in uncapped] or columns
    k = min(settings.top_k, len(columns))
    allowed = np.asarray(columns)
    order = allowed[np.argsort(estimate[:, allowed], axis=1, kind="stable")]
    top = [set(order[row, :k].tolist()) for row in range(len(shapes))]
    uncovered = set(range(len(shapes)))
    chosen: list[int] = []
    while uncovered and len(chosen) < settings.max_kernels:
        gains = {
            column: _cover_gain(estimate, top, uncovered, column)
            for column in columns
            if column not in chosen
        }
        if not gains:
            break
        best = max(gains, key=lambda column: gains[column])
        if gains[best][0] == 0:
            break
        chosen.append(best)
        uncovered = {row for row in uncovered if best not in top[row]}
    if not chosen:
        chosen = [int(order[0, 0])]
    # shapes outside every chosen kernel's top-k: the best chosen kernel still serves them;
    # improve the set by swapping in kernels that lower the total cost, while room remains
    chosen = _fill(estimate, chosen, columns, settings.max_kernels)
    chosen += [c for c in all_columns if (c in free or c in uncapped) and c not in chosen]
    choice = _within_noise(estimate, shapes, chosen, settings.tie_margin)
    used = sorted({chosen[i] for i in choice.values()})
    remap = {column: index for index, column in enumerate(used)}
    return used, {shape: remap[chosen[i]] for shape, i in choice.items()}


def _within_noise(
    estimate: np.ndarray, shapes: Sequence[Shape], chosen: list[int], tie_margin: float
) -> dict[Shape, int]:
    """Each shape's kernel (an index into ``chosen``): the best one, or one within
    ``tie_margin`` of it that serves more shapes (greedy cover: the kernel acceptable
    on most shapes takes them all, then the next)."""
    rows = range(len(shapes))
    best = [min(estimate[row, c] for c in chosen) for row in rows]
    margin = 1 + tie_margin
    acceptable = [
        {i for i, c in enumerate(chosen) if estimate[row, c] <= best[row] * margin} for row in rows
    ]
    choice: dict[Shape, int] = {}
    open_rows = set(rows)
    while open_rows:
        counts = {i: sum(1 for r in open_rows if i in acceptable[r]) for i in range(len(chosen))}
        kernel = max(counts, key=lambda i: (counts[i], -i))
        nothing = counts[kernel] == 0  # infinite everywhere left: the first kernel
        for row in [r for r in open_rows if nothing or kernel in acceptable[r]]:
            choice[shapes[row]] = 0 if nothing else kernel
            open_rows.discard(row)
    return choice


def _beyond_cap(candidates: Sequence[Candidate]) -> tuple[list[int], list[int]]:
    """The columns a selection may add beyond the cap on kernels: (free, uncapped).

    Free: IREE's default, always a choice (it is the op as it was, one executable with the
    fallback). Capped, `novel_context_h48` (budget 240) kept 7 kernels and data tiling, and
    ran data tiling at T = 13 and 15 where the default was estimated 3-7% faster (measured
    1.28x and 1.34x).

    Uncapped: the one-tile kernels, left out of the cover too. Each serves the rows of its
    one tile and few more (`PackedRows.serves`) and wins at most a few of them (a branch for a
    few T, in the family's weight layout); capped, they took the places of the tiles that
    serve every M, or lost theirs to them: with 8 kernels, `dense_ffn2` at budget 240 ran
    T = 3 on the 4-row tile (1.34x the 3-row tile measured there) and T = 9..11 on the
    14-row one (1.58x onnxruntime at T = 9)."""
    free = [i for i, c in enumerate(candidates) if isinstance(c, DefaultCandidate)]
    uncapped = [i for i, c in enumerate(candidates) if isinstance(c, OneTileMmt4dCandidate)]
    return free, uncapped


def _fill(
    estimate: np.ndarray, chosen: list[int], columns: list[int], max_kernels: int
) -> list[int]:
    """Add kernels of ``columns`` (up to the cap) that most lower the geomean of the
    per-shape best."""
    chosen = list(chosen)
    logs = np.log(np.where(np.isfinite(estimate), estimate, 1e9))
    rows = logs.shape[0]
    while len(chosen) < max_kernels:
        current = logs[:, chosen].min(axis=1).sum()
        gains = [
            (current - np.minimum(logs[:, chosen].min(axis=1), logs[:, c]).sum(), -c)
            for c in columns
            if c not in chosen
        ]
        if not gains:
            break
        best_gain, negative = max(gains)
        if best_gain <= 1e-3 * rows:  # < 0.1% geomean improvement
            break
        chosen.append(-negative)
    return chosen


def _cover_gain(
    estimate: np.ndarray, top: list[set[int]], uncovered: set[int], column: int
) -> tuple[int, float, int]:
    """(shapes newly covered, -their log cost, -column): more cover, then cheaper, then first."""
    covered = [row for row in uncovered if column in top[row]]
    cost = float(np.sum(np.log(estimate[covered, column]))) if covered else 0.0
    return (len(covered), -cost, -column)


def finite_geomean(values: Sequence[float]) -> float:
    """The geomean, infinite where a value is not finite and positive."""
    finite = [v for v in values if math.isfinite(v) and v > 0]
    if not finite or len(finite) != len(values):
        return math.inf
    return math.exp(sum(math.log(v) for v in finite) / len(finite))


def measured_first(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    kernels: list[int],
    choice: dict[Shape, int],
    seconds: Callable[[int, int], float | None],
    margin: float,
) -> tuple[list[int], dict[Shape, int]]:
    """``choice`` with each shape not measured with its pick given to a chosen kernel
    measured there within ``margin`` of the pick's estimate (the fastest of them): a tie
    between an estimate and a measurement goes to the measurement.

    Oracle replay, `heldout_scores_h80`, budget 240: at T = 32, `wg32x32:v8x16:k2`, never
    measured there, was estimated at 14 us, as fast as `wg32x128:v8x32:k2` measured there,
    took the shape (it serves more) and ran 16 us."""
    picked: dict[Shape, int] = {}
    for row, shape in enumerate(shapes):
        index = choice[shape]
        pick = kernels[index]
        if seconds(pick, row) is None:
            line = estimate[row, pick] * (1 + margin)
            found = [
                (there, i)
                for i, column in enumerate(kernels)
                if math.isfinite(estimate[row, column])
                and (there := seconds(column, row)) is not None
                and there <= line
            ]
            index = min(found)[1] if found else index
        picked[shape] = index
    used = sorted({kernels[i] for i in picked.values()})
    remap = {column: position for position, column in enumerate(used)}
    return used, {shape: remap[kernels[i]] for shape, i in picked.items()}


def measured_favoured(
    estimate: np.ndarray, measured: np.ndarray, margin: float, grid: Sequence[int] = ()
) -> np.ndarray:
    """``estimate`` with each pair not ``measured`` [row, column] made ``margin`` slower at
    the rows where some candidate was measured and ran: the final selection's table.

    There an estimate stands against a measurement, and of many estimates the fastest is
    the likeliest to err low (the winner's curse). Oracle replay, attention scores with
    head size 128, budget 240: at T = 64 eight kernels, each estimated fastest there in
    turn, were measured 1.2-1.8x their estimates; the ninth, measured only at 32, 96 and
    128, estimated at 54 us beside one measured at 57, kept T = 64 and ran 67 (the
    oracle: 44); with 5% the selection ran the one measured there. Over 15 workloads and
    3 seeds (docs/benchmarks.md, "An estimate beside a measurement"), 5% took the worst
    seed at budget 240 from 0.954 to 0.962 (head size 80) and 0.956 to 0.964 (128) and
    lowered no workload's worst seed by more than 0.003; 10% lost 0.02 at budget 110 on
    the BERT scores.

    The ``grid`` columns (kernels whose time steps with their row tiles) are left alone:
    their estimate is their own measurements at a row's tile count, not the model's word.
    Tried on every column (2026-11-29, 10%), the margin cost `dense_out` and
    `heldout_linear_t` a fifth of their speed at budget 60 live: the explicit mmt4d
    family, measured at few of its rows, lost the family choice to data tiling's
    (docs/design.md, step 5)."""
    ran = measured & np.isfinite(estimate)
    slower = ran.any(axis=1)[:, None] & ~measured
    slower[:, list(grid)] = False
    found = estimate.copy()
    found[slower] *= 1 + margin
    return found
