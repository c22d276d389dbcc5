"""The shapes a search tunes for: every combination of the dynamic dims' ranges, or a
deterministic sample of it that keeps what matters most (both ends, the small values)."""

from __future__ import annotations

import itertools
import math
import random

from dcmlir.shapes import Shape
from dcmlir.workload import Workload

__all__ = ["free_grid_note", "shapes_in_range"]


def shapes_in_range(workload: Workload, max_shapes: int, seed: int = 0) -> list[Shape]:
    """Every combination of the dynamic dims' ranges, or a deterministic sample of it.

    A sample keeps both ends of each range and the small values (1..8), where
    kernels differ most, the diagonal when all dims share one range, and fills
    the rest uniformly.
    """
    ranges = []
    for dim in workload.dynamic_dims:
        if dim.range is None:
            raise ValueError(
                f"dynamic loop d{dim.index} of {workload.kind} has no range; "
                "give one (--dims LO:HI)"
            )
        ranges.append(dim.range)
    total = math.prod(hi - lo + 1 for lo, hi in ranges)
    if total <= max_shapes:
        return [tuple(s) for s in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges))]
    rng = random.Random(seed)
    must: set[Shape] = set()  # kept whatever the sampling: both ends, the small values
    if len(ranges) == 1:
        lo, hi = ranges[0]
        must = {(v,) for v in (*range(lo, min(hi, lo + 7) + 1), hi)}
    elif len(set(ranges)) == 1:
        # dims with one range are often one length (attention's T x T): keep the diagonal
        lo, hi = ranges[0]
        values = set(range(lo, min(hi, lo + 7) + 1)) | {hi}
        values |= set(rng.sample(range(lo, hi + 1), min(hi - lo + 1, max_shapes // 2)))
        must = {(v,) * len(ranges) for v in values}
    axes = []
    per_axis = max(2, round(max_shapes ** (1 / len(ranges))))
    for lo, hi in ranges:
        small = list(range(lo, min(hi, lo + 7) + 1))
        rest = sorted(rng.sample(range(lo, hi + 1), min(hi - lo + 1, per_axis)))
        axes.append(sorted({*small, *rest, lo, hi}))
    found = sorted(set(itertools.product(*axes)) - must)
    room = max_shapes - len(must)
    if len(found) > room:
        found = rng.sample(found, max(room, 0))
    return sorted(must | set(found))


def free_grid_note(workload: Workload) -> str | None:
    """A note for dynamic loops that share one range but that nothing in the IR ties: the
    search covers their grid, while a user whose loops are one length at run time (a
    standalone attention kernel's T and T') runs only its diagonal. Measured on a Zen 4 at
    budget 60, fresh records: three seeds' plans for attention scores differed by 8-11%
    over the grid and by 3-4% on the diagonal, which was also faster (docs/benchmarks.md,
    "Item 4 with T' = T said in the IR"). None where no two free loops share a range."""
    tied = {loop for group in workload.equal_loops for loop in group}
    by_range: dict[tuple[int, int], list[int]] = {}
    for dim in workload.dynamic_dims:
        if dim.index not in tied and dim.range is not None:
            by_range.setdefault(dim.range, []).append(dim.index)
    loops = next((found for found in by_range.values() if len(found) > 1), None)
    if loops is None:
        return None
    names = " and ".join(f"d{loop}" for loop in loops)
    return (
        f"dcmlir: note: {workload.kind} key={workload.key}: loops {names} vary on their own, "
        "so the search covers their grid; if they are one length at run time, tie them "
        "(--dims argN.D=argM.E, naming their argument dims) or size them with one value in "
        "the IR (e.g. tensor.empty(%t, %t)) and it tunes the diagonal"
    )
