"""The search's first measurements: what each candidate is measured at before any model.

Most telling first, never more than the budget: IREE's default; IREE's data tiling at
one tile and at the most tiles (its line: the strongest IREE build, which every family
is compared with), or, without a constant weight, at its pick and the largest shape
(the floor's other build, compared with the default before any kernel); each packed
kernel at its bound; the other candidates on their cherry-picked shapes (a spread
subset when they are more than ``most`` pairs); last, the packed kernels' second points
(M = 1).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from dcmlir.search.packed_rows import PackedRows
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate

__all__ = ["first_measurements", "spread_subset"]


def first_measurements(
    candidates: Sequence[Candidate],
    shapes: Sequence[Shape],
    rows: PackedRows,
    picked: Callable[[Candidate], Shape],
    budget: int,
    most: int,
) -> list[tuple[Candidate, Shape]]:
    """(candidate, shape) pairs in the order to measure; ``picked``: a candidate's
    cherry-picked shape (where its padding and occupancy are best)."""
    first: list[tuple[Candidate, Shape]] = []
    later: list[tuple[Candidate, Shape]] = []
    rest: list[Candidate] = []
    for candidate in candidates:
        tile = rows.tile(candidate)
        if tile is None and isinstance(candidate, DataTiledCandidate):
            largest = max(shapes, key=math.prod)
            first += [(candidate, s) for s in dict.fromkeys([picked(candidate), largest])]
        elif tile is None and isinstance(candidate, DefaultCandidate):
            first.append((candidate, picked(candidate)))
        elif tile is None:
            rest.append(candidate)
        elif rows.bound(candidate) is None:
            first += [(candidate, shape) for shape in rows.picks(candidate, shapes)]
        else:  # a bounded kernel: its bound first (the most rows it serves)
            found = rows.picks(candidate, shapes)
            first.append((candidate, found[-1]))
            later += [(candidate, shape) for shape in found[:-1]]
    room = max(most - len({c.key() for c, _ in first}), 0)
    if len(rest) > room:
        rest = spread_subset(rest, room)
    return (first + [(c, picked(c)) for c in rest] + later)[:budget]


def spread_subset(candidates: Sequence[Candidate], count: int) -> list[Candidate]:
    """``count`` candidates spread evenly over the list; where that takes one value of a
    size the list varies (the stride a multiple of how the space lists a tile's
    variants), each pick moves one further along its run.

    The space lists a tile's reduction variants together: every fifth of a Zen 3's 40
    kernels were all reduction tile 1, and the model knew nothing of the others."""
    step = len(candidates) / max(count, 1)
    plain = [candidates[int(i * step)] for i in range(count)]
    if count < 2 or not _one_value_of_a_varied_size(plain, candidates):
        return plain
    run = max(int(step), 1)
    last = len(candidates) - 1
    return [candidates[min(int(i * step) + i % run, last)] for i in range(count)]


def _one_value_of_a_varied_size(chosen: Sequence[Candidate], every: Sequence[Candidate]) -> bool:
    names = {f.name for c in every for f in dataclasses.fields(c)}
    return any(
        len({getattr(c, n, None) for c in chosen}) == 1
        and len({getattr(c, n, None) for c in every}) > 1
        for n in names
    )
