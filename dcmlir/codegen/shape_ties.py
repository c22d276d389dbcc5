"""Where IREE needs a dispatch cascade's results tied to their sizes, and the tie.

At IREE's global-optimization level (a ``util.func``, IREE's functions after its ABI
conversion) IREE resolves the dims of a region's results only through
``flow.tensor.tie_shape``; so does a cascade inside a loop (``scf.for``) in any function:
IREE resolves the dims of a loop-carried tensor through the shape of the value the loop
yields, which an ``scf.if`` does not give (docs/design.md section 8).
"""

from __future__ import annotations

from collections.abc import Sequence

from dcmlir.ir.mlir import ir

__all__ = ["FUNCTION_OPS", "tie_where_needed"]

FUNCTION_OPS = ("func.func", "util.func")


def tie_where_needed(
    op: ir.Operation, values: Sequence[ir.Value], sizes: Sequence[ir.Value]
) -> list[ir.Value]:
    """``values`` (the cascade replacing ``op``), each tied to ``sizes`` where IREE needs it."""
    if _function_of(op) == "util.func" or _inside_loop(op):
        return [_tie_shape(value, sizes) for value in values]
    return list(values)


def _function_of(op: ir.Operation) -> str | None:
    parent = op.parent
    while parent is not None and parent.name not in FUNCTION_OPS:
        parent = parent.parent
    return None if parent is None else parent.name


def _inside_loop(op: ir.Operation) -> bool:
    """True when a region op other than the function holds ``op`` (``scf.for``, ...): a
    loop carries the cascade's result as a block argument, whose dims IREE resolves only
    through the yielded value's shape, which an ``scf.if`` does not give."""
    parent = op.parent
    while parent is not None and parent.name not in FUNCTION_OPS:
        if parent.name != "scf.if":
            return True
        parent = parent.parent
    return False


def _tie_shape(value: ir.Value, sizes: Sequence[ir.Value]) -> ir.Value:
    """``flow.tensor.tie_shape value : type{sizes}``: the cascade's result with the sizes
    of its dynamic dims, read before it (IREE need not look into the branches)."""
    if not sizes:
        return value
    tied = ir.Operation.create(
        "flow.tensor.tie_shape", results=[value.type], operands=[value, *sizes]
    )
    return tied.results[0]
