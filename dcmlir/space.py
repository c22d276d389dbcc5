"""The micro-kernel space: candidates generated from a target's limits, never from shapes.

A candidate is stated in contraction roles (b, m, n, k) so one candidate serves
every workload of a kind; :meth:`levels` lays it onto one workload's loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcmlir.workload import Workload


@dataclass(frozen=True)
class TileLevels:
    """Per-loop tile sizes of one candidate on one workload (0: loop not tiled at that level).

    ``workgroup``: the tile one workgroup computes (IREE's ``distribution``);
    ``vector``: the micro-kernel tile of the parallel loops
    (``vector_common_parallel``); ``reduction``: the micro-kernel tile of the
    reduction loops (``vector_reduction``).
    """

    workgroup: tuple[int, ...]
    vector: tuple[int, ...]
    reduction: tuple[int, ...]


def per_loop(workload: Workload, by_role: dict[str, int], others: int = 1) -> tuple[int, ...]:
    """Give the innermost loop of each role its size; other loops of a role get ``others``.

    A role missing from ``by_role`` gets 0 on every loop (not tiled at this level).
    """
    innermost = {role: max(d.index for d in workload.dims_of(role)) for role in by_role}
    sizes = []
    for dim in workload.dims:
        if dim.role not in by_role:
            sizes.append(0)
        elif innermost[dim.role] == dim.index:
            sizes.append(by_role[dim.role])
        else:
            sizes.append(others if by_role[dim.role] else 0)
    return tuple(sizes)
