"""The order the search asks for proofs in, where the budget may not reach them all.

A family none of whose kernels was measured: one kernel first
(:func:`one_kernel_per_unseen_family`). Where the first measurements leave a family out
(at budget 60 the explicit mmt4d and packed kernels fill their room), the model ranks
its kernels by what it learnt from the others, and a selection made on that asks for a
proof of each. On `dense_ffn2` (a Zen 4, never_slower.py, budget 60, seed 0) the codegen
kernels were estimated at 868 us at T = 17, where the first of them took 2632 beside
data tiling's 1504: six of them took 12 of the 54 measurements to be ruled out, and the
explicit kernels' proofs that would have kept T = 12..19 and 29..32 (0.5-0.85 of data
tiling's time, as seed 1 showed) found no room. One kernel's pairs tell the model what
the family costs; the selection made after them asks for the rest only where the family
still wins.

Beside data tiling, the floor by itself: each kernel's pair with data tiling at once,
the largest estimated gain first (:func:`beside_floor_by_gain`). Listed kernels first
and data tiling after them, the last round of the same tune (seed 1) measured eight
kernels and data tiling beside two: the 10-row tile, timed at T = 29 without its pair,
did not keep it (0.84 of data tiling's time in seed 0's plan), and the two pairs it had
were the 8- and 12-row tiles at T = 61 and 81, where they tie data tiling.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from dcmlir.search.selection import kernel_families
from dcmlir.shapes import Shape
from dcmlir.space import Candidate

__all__ = ["beside_floor_by_gain", "one_kernel_per_unseen_family"]


def one_kernel_per_unseen_family(
    pairs: Sequence[tuple[Candidate, Shape]],
    candidates: Sequence[Candidate],
    floor_only: Collection[str],
    never: Collection[int],
    builds: Collection[int],
) -> list[tuple[Candidate, Shape]]:
    """``pairs`` less those of every kernel but the first of each family
    (:func:`~dcmlir.search.selection.kernel_families`) all of whose kernels (IREE's
    ``builds``, columns, aside) are ``never`` measured (columns), and less the builds'
    pairs at the shapes only the kernels left out had."""
    columns = {candidate.key(): column for column, candidate in enumerate(candidates)}
    families = kernel_families(candidates, floor_only)
    builds, never = set(builds), set(never)
    kernels = [set(family) - builds for family in families]
    unseen = [members for members in kernels if members and members <= never]
    first: dict[int, int] = {}  # unseen family (its index) -> the kernel proven first
    kept: list[tuple[Candidate, Shape]] = []
    dropped: set[Shape] = set()
    for candidate, shape in pairs:
        column = columns[candidate.key()]
        family = next((i for i, members in enumerate(unseen) if column in members), None)
        if family is not None and first.setdefault(family, column) != column:
            dropped.add(shape)
            continue
        kept.append((candidate, shape))
    if not dropped:
        return kept
    alone = dropped - {s for c, s in kept if columns[c.key()] not in builds}
    return [(c, s) for c, s in kept if columns[c.key()] not in builds or s not in alone]


def beside_floor_by_gain(
    wanted: Sequence[tuple[int, int]], floor: int, estimate: np.ndarray | None
) -> list[tuple[int, int]]:
    """(column, row): each of the kernels' ``wanted`` measurements with ``floor``'s at its
    row right after it, the kernel estimated fastest against the floor there first
    (``estimate`` [row, column]; None, or ties: in the order wanted)."""
    order = list(range(len(wanted)))
    if estimate is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = [estimate[row, floor] / estimate[row, column] for column, row in wanted]
        order.sort(key=lambda i: -gain[i] if np.isfinite(gain[i]) else 0.0)
    return [pair for i in order for pair in (wanted[i], (floor, wanted[i][1]))]
