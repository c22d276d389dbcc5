"""Dynamic loops that are one run-time value: what the IR says, and the user's word.

Two loops of an op are one value when their extents trace back to one argument dim (a
model's ``T`` everywhere) or the program sizes them with one value
(``tensor.empty(%t, %t)``); :func:`dcmlir.workload.equal_dynamic_loops` finds those.
Where nothing in the IR can say it (attention context's ``P[h, T, T']`` arrives as an
argument, and no value sizes both ``T`` and ``T'``), ``--dims arg0.1=arg0.2`` says it:
``dcmlir-annotate-ranges`` records the loops it joins on the op as
``dcmlir.equal_loops = [array<i64: 1, 3>]``, and the search tunes their diagonal
instead of their grid. A tie only narrows which shapes are tuned: every kernel still
computes any shape, so a run that breaks the tie gets right answers from a plan tuned
for shapes it does not run.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence

from dcmlir.ir.mlir import ir

EQUAL_LOOPS_ATTR = "dcmlir.equal_loops"

Groups = tuple[tuple[int, ...], ...]


def read_equal_loops(op: ir.Operation) -> Groups:
    """The groups of loops an op records as one value (``dcmlir.equal_loops``)."""
    if EQUAL_LOOPS_ATTR not in op.attributes:
        return ()
    groups = ir.ArrayAttr(op.attributes[EQUAL_LOOPS_ATTR])
    return tuple(tuple(sorted(ir.DenseI64ArrayAttr(group))) for group in groups)


def write_equal_loops(op: ir.Operation, groups: Collection[Collection[int]]) -> None:
    """Record ``groups`` (with those recorded before, joined where they share a loop)."""
    merged = group_loops({}, [*read_equal_loops(op), *groups])
    if not merged:
        return
    arrays = [ir.DenseI64ArrayAttr.get(list(group)) for group in merged]
    op.attributes[EQUAL_LOOPS_ATTR] = ir.ArrayAttr.get(arrays)


def group_loops(
    origins: Mapping[int, Collection[Hashable]], links: Sequence[Collection[int]] = ()
) -> Groups:
    """Loops joined into groups of two or more: loops whose ``origins`` (what each extent
    traces back to) share an item are one, and so are the loops of each of ``links``."""
    parent: dict[int, int] = {}

    def root(loop: int) -> int:
        parent.setdefault(loop, loop)
        while parent[loop] != loop:
            parent[loop] = parent[parent[loop]]
            loop = parent[loop]
        return loop

    def join(first: int, second: int) -> None:
        parent[root(second)] = root(first)

    owner: dict[Hashable, int] = {}
    for loop, items in origins.items():
        root(loop)
        for item in items:
            join(owner.setdefault(item, loop), loop)
    for link in links:
        members = sorted(link)
        for loop in members[1:]:
            join(members[0], loop)
    found: dict[int, list[int]] = {}
    for loop in sorted(parent):
        found.setdefault(root(loop), []).append(loop)
    return tuple(sorted(tuple(group) for group in found.values() if len(group) > 1))
