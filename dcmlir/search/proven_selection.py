"""The selection once the budget is spent: no kernel in it on estimates alone.

A kernel is ruled out of the rows its evidence does not keep (its own measurements, its
pairs with IREE's builds: :mod:`dcmlir.search.baseline_evidence`), the rest is selected
again, and so on until every kernel left is proven where it is chosen.

Where data tiling is the floor by itself (a constant weight), each family is proven on
its own, with data tiling beside it to take the rows its kernels lose (a second layout of
the weight, where ``weight_layouts`` allows one), and the proven one that loses least,
then runs fastest, is kept. Selected again over every family, a family that lost some
rows to the evidence lost them to the estimate too, and the next was taken, proven or not:
on `dense_ffn2` (a Zen 4, budget 60) the explicit mmt4d kernels, proven 4-7x faster than
data tiling at T = 1..3 side by side, lost T = 58..127 to ties with data tiling; the
packed family took over, its kernels had no pair with data tiling, and the plan ran data
tiling at every T (never_slower.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from dcmlir.search.selection import (
    LOSS_MARGIN,
    SelectionSettings,
    kernel_families,
    measured_first,
    scored,
    select_among,
)
from dcmlir.shapes import Shape
from dcmlir.space import Candidate

__all__ = ["Selection", "fallback_groups", "proven_selection"]

Selection = tuple[list[int], dict[Shape, int]]
"""(kernel columns, shape -> index into them)."""

RuledOut = Callable[[list[int], dict[Shape, int]], dict[int, list[int]]]
"""(kernels, choice) -> each kernel's rows its evidence does not keep."""


def fallback_groups(
    candidates: Sequence[Candidate], settings: SelectionSettings, floor: int
) -> list[list[int]]:
    """Each family's columns with ``floor`` beside them, where ``weight_layouts`` allows the
    weight a second layout (else the family alone: the floor's own family has it)."""
    mixed = settings.weight_layouts > 1 and candidates[floor].key() not in settings.floor_only
    families = kernel_families(candidates, settings.floor_only)
    return [sorted({*columns, floor}) if mixed else columns for columns in families]


def proven_selection(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    candidates: Sequence[Candidate],
    settings: SelectionSettings,
    select: Callable[[np.ndarray], Selection],
    ruled_out: RuledOut,
    seconds: Callable[[int, int], float | None],
    groups: Sequence[list[int]] | None = None,
    floor: int | None = None,
) -> Selection:
    """The proven selection: with ``select`` over every family, or (``groups``) within each
    group on its own, the best proven one kept (:func:`fallback_groups`; ``floor``: the
    build beside each, :func:`_floor_where_faster`, and what each loses against: with a
    constant weight data tiling, never slower than the default, is the floor by itself,
    and the default estimated 4-7% faster at T = 6, 7 of `dense_ffn1`, where the explicit
    family's group ran data tiling, scored it a loss beside a packed family that ran data
    tiling at 120 of 128 T; Zen 4, budget 60)."""
    if groups is None:
        return _proven(estimate, shapes, select, ruled_out, seconds, settings.tie_margin)[:2]
    found = []
    for columns in groups:

        def among(table: np.ndarray, columns: list[int] = columns) -> Selection:
            chosen = select_among(table, shapes, columns, candidates, settings)
            return chosen.kernels, chosen.choice

        kernels, choice, final = _proven(
            estimate, shapes, among, ruled_out, seconds, settings.tie_margin
        )
        if floor in columns:
            kernels, choice = _floor_where_faster(final, shapes, kernels, choice, floor)
        score = scored(final, shapes, kernels, choice, candidates, floor)
        found.append((score, kernels, choice))
    _, kernels, choice = min(found, key=lambda item: item[0])
    return kernels, choice


def _proven(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    select: Callable[[np.ndarray], Selection],
    ruled_out: RuledOut,
    seconds: Callable[[int, int], float | None],
    margin: float,
) -> tuple[list[int], dict[Shape, int], np.ndarray]:
    """Select, rule out, select again; the last selection and the estimate it was made on.
    A measurement takes a tied estimate's shape (``measured_first``)."""
    estimate = estimate.copy()
    while True:
        kernels, choice = select(estimate)
        kernels, choice = measured_first(estimate, shapes, kernels, choice, seconds, margin)
        out = ruled_out(kernels, choice)
        finite = [(c, rows) for c, rows in out.items() if np.isfinite(estimate[rows, c]).any()]
        if not finite:  # proven, or nothing proven is left to take those rows
            return kernels, choice, estimate
        for column, rows in finite:
            estimate[rows, column] = math.inf


def _floor_where_faster(
    estimate: np.ndarray,
    shapes: Sequence[Shape],
    kernels: list[int],
    choice: dict[Shape, int],
    floor: int,
) -> Selection:
    """``choice`` with the shapes where ``floor`` (a group's build, which needs no proof) is
    estimated more than :data:`LOSS_MARGIN` faster than the pick given to it. The selection
    adds a kernel only for 0.1% of the geomean, so the floor can be left out where a kept
    kernel is a few percent slower; scored as a loss there, the explicit kernels of
    `dense_qkv` (Zen 4, budget 60), estimated 1.2x faster than data tiling by geomean and
    proven everywhere, lost to a family that ran data tiling at 126 of 128 T over four T
    where an mmt4d kernel was estimated 1.037x data tiling's time (never_slower.py)."""
    rows = {shape: row for row, shape in enumerate(shapes)}
    slower = {
        shape
        for shape, k in choice.items()
        if estimate[rows[shape], kernels[k]] > estimate[rows[shape], floor] * (1 + LOSS_MARGIN)
    }
    if not slower:
        return kernels, choice
    kernels = kernels if floor in kernels else [*kernels, floor]
    at = kernels.index(floor)
    return kernels, {shape: at if shape in slower else k for shape, k in choice.items()}
