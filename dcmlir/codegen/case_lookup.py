"""The host-side ops a dispatch decides with: the range check, and the case read from a
table (:mod:`dcmlir.dispatch.case_table`) with one ``util.buffer.load``.

IREE keeps ``util.buffer.constant`` as read-only data in the module and turns the load
into one VM buffer read; checked against IREE 3.13 at the input and the
global-optimization levels (tests/test_case_table.py runs every case of a table).
"""

from __future__ import annotations

from collections.abc import Sequence

from dcmlir.ir.mlir import arith, ir

__all__ = ["load_case", "outside_range"]


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def outside_range(dims: Sequence[ir.Value], ranges: Sequence[tuple[int, int]]) -> ir.Value:
    """``d < lo || d > hi`` over every dim (no ``d < 0`` test: unsigned)."""
    checks = []
    for value, (lo, hi) in zip(dims, ranges, strict=True):
        if lo > 0:
            checks.append(arith.CmpIOp(arith.CmpIPredicate.ult, value, _index(lo)).result)
        checks.append(arith.CmpIOp(arith.CmpIPredicate.ugt, value, _index(hi)).result)
    outside = checks[0]
    for check in checks[1:]:
        outside = arith.OrIOp(outside, check).result
    return outside


def load_case(
    dims: Sequence[ir.Value], lows: Sequence[int], extents: Sequence[int], cases: bytes
) -> ir.Value:
    """The case (an index) at the shape ``dims``, inside the range: byte
    ``sum((d - low) * stride)`` of ``cases`` (row-major over ``dims``, the last fastest)."""
    index = ir.IndexType.get()
    i8 = ir.IntegerType.get_signless(8)
    flat: ir.Value | None = None
    for value, low, extent in zip(dims, lows, extents, strict=True):
        offset = value if low == 0 else arith.SubIOp(value, _index(low)).result
        flat = (
            offset
            if flat is None
            else arith.AddIOp(arith.MulIOp(flat, _index(extent)).result, offset).result
        )
    assert flat is not None, "a table over no dim"
    data = ir.DenseElementsAttr.get(
        memoryview(cases), type=ir.RankedTensorType.get([len(cases)], i8)
    )
    table = ir.Operation.create(
        "util.buffer.constant",
        results=[ir.Type.parse("!util.buffer")],
        attributes={"value": data},
    ).result
    loaded = ir.Operation.create(
        "util.buffer.load",
        results=[i8],
        operands=[table, _index(len(cases)), flat, _index(1)],
    ).result
    return arith.IndexCastUIOp(index, loaded).result
