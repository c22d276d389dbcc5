"""Cherry-picking: the one shape in range where a candidate is measured.

DietCode measures each micro-kernel once, where ``pad * occ`` is highest: the
adaptation divided out of that measurement to get ``f_MK`` is then as small as
it gets, so the throughput learned there transfers best to the other shapes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from dcmlir.cost_model.terms import HARD_CURVE, OccupancyCurve, _grid, _pad_parts, _space, _tiling
from dcmlir.records import Record
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, candidate_from_json
from dcmlir.workload import Workload

__all__ = ["CherryPicker", "cherry_pick", "cherry_pick_split"]


class CherryPicker(Protocol):
    """What :func:`cherry_pick_split` needs of a model: its own choice of shape."""

    def cherry_pick(
        self, candidate: Candidate, shapes_in_range: Sequence[Sequence[int]]
    ) -> Shape: ...


def _better(score: float, shape: Shape, best_score: float, best: Shape) -> bool:
    """Higher ``pad*occ`` wins; equal (to 12 digits) goes to the larger shape (more work)."""
    if not math.isclose(score, best_score, rel_tol=1e-12, abs_tol=0.0):
        return score > best_score
    return (math.prod(shape), shape) > (math.prod(best), best)


def cherry_pick(
    workload: Workload,
    candidate: Candidate,
    shapes_in_range: Sequence[Sequence[int]],
    parallel_units: int = 1,
    curve: OccupancyCurve = HARD_CURVE,
    *,
    default_tile: int = 1,
) -> Shape:
    """The shape in range where ``pad * occ`` is highest, ties to the larger shape.

    Where the candidate measures its own throughput best (docs/design.md section 6): the
    adaptation divided out of that measurement is as small as it gets.
    """
    if not shapes_in_range:
        raise ValueError("cherry_pick needs at least one shape")
    tiling = _tiling(workload, candidate, default_tile)
    best: Shape = tuple(int(v) for v in shapes_in_range[0])
    best_score = -1.0
    for raw in shapes_in_range:
        shape = tuple(int(v) for v in raw)
        space = _space(workload, shape)
        real, computed = _pad_parts(space, tiling.pad)
        score = real / computed if computed else 1.0
        if tiling.workgroup is not None:
            score *= curve(_grid(workload, space, tiling.workgroup), parallel_units)
        if _better(score, shape, best_score, best):
            best, best_score = shape, score
    return best


def cherry_pick_split(
    model: CherryPicker, records: Iterable[Record]
) -> tuple[list[Record], list[Record]]:
    """(train, held out): per candidate, its records on the shape the model would cherry-pick
    among the shapes it was measured on, as the search measures it; the rest held out."""
    records = [r for r in records if r.ok]
    shapes: dict[str, set[Shape]] = {}
    candidates: dict[str, Candidate] = {}
    for record in records:
        shapes.setdefault(record.candidate_key, set()).add(record.shape)
        candidates.setdefault(record.candidate_key, candidate_from_json(record.candidate))
    picked = {
        key: model.cherry_pick(candidates[key], sorted(found)) for key, found in shapes.items()
    }
    train = [r for r in records if r.shape == picked[r.candidate_key]]
    held_out = [r for r in records if r.shape != picked[r.candidate_key]]
    return train, held_out
