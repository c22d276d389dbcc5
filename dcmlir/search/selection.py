"""Selection: from the estimated (shape x candidate) table to a few kernels and each shape's pick.

1. Kernel families: the packed kernels read a weight packed and the others read it
   as it is; one workload's kernels come from one family, so a weight lives in one
   layout only (docs/design.md section 12). Each family is selected on its own; the
   one that loses least to the best IREE build at each shape (IREE's default or its
   data tiling, whichever is faster there; beyond ``tie_margin``) wins, then the
   faster (geomean over the shapes). Before, the codegen family won `dense_out` by
   geomean and ran 5-27% slower than data tiling at 20 of 40 T (never_slower.py,
   budget 240).
2. Within a family: greedy set cover of the shapes' top-k by at most ``max_kernels``
   kernels, then kernels that lower the geomean of the per-shape best are added.
3. Ties: a shape takes the kernel that serves most shapes among those within
   ``tie_margin`` of its best, so near-equal kernels do not alternate from one
   shape to the next (a tree could not follow them, and they gain nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate, PackedCandidate

__all__ = ["SelectionSettings", "kernel_families", "select_kernels"]


class SelectionSettings(Protocol):
    max_kernels: int
    top_k: int
    tie_margin: float


def kernel_families(candidates: Sequence[Candidate]) -> list[list[int]]:
    """Column groups one workload's kernels all come from: the kernels that read the
    weight packed (the packed family, with IREE's data tiling when it is offered beside
    it), and the rest."""
    packs_weight = any(isinstance(c, PackedCandidate) for c in candidates)
    packed = [
        i
        for i, c in enumerate(candidates)
        if isinstance(c, PackedCandidate) or (packs_weight and isinstance(c, DataTiledCandidate))
    ]
    in_family = set(packed)
    rest = [i for i in range(len(candidates)) if i not in in_family]
    return [columns for columns in (rest, packed) if columns]


def select_kernels(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
) -> tuple[list[int], dict[Shape, int]]:
    """(kernel columns, shape -> index into them) of the family that loses least to the
    best IREE build at each shape, then whose selection is fastest (geomean)."""
    best: tuple[tuple[float, float], list[int], dict[Shape, int]] | None = None
    row_of = {shape: row for row, shape in enumerate(shapes)}
    builds = [
        i for i, c in enumerate(candidates) if isinstance(c, DefaultCandidate | DataTiledCandidate)
    ]
    floor = estimate[:, builds].min(axis=1) if builds else np.full(len(shapes), np.inf)
    for columns in kernel_families(candidates):
        used, choice = _select_among(estimate, shapes, columns, settings)
        times = {
            shape: min(float(estimate[row_of[shape], used[k]]), 1e9) for shape, k in choice.items()
        }
        cost = sum(math.log(t) for t in times.values())
        lost = sum(
            max(0.0, math.log(t / float(floor[row_of[shape]])) - math.log1p(settings.tie_margin))
            for shape, t in times.items()
            if math.isfinite(floor[row_of[shape]])
        )
        if best is None or (lost, cost) < best[0]:
            best = ((lost, cost), used, choice)
    assert best is not None  # a space is never empty: IREE's default is in it
    return best[1], best[2]


def _select_among(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    columns: list[int],
    settings: SelectionSettings,
) -> tuple[list[int], dict[Shape, int]]:
    """Greedy set cover of the shapes' top-k by at most ``max_kernels`` of ``columns``."""
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
