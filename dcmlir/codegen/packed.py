"""The packed kernel as IR in a user's module: weight pack once, then pack, mmt4d, unpack.

What ``dcmlir-emit-dispatch`` writes for a packed kernel (:mod:`dcmlir.space.packed`),
in the form IREE's own data tiling produces, with the tile chosen by the plan
instead of IREE's "dynamic M is large" default:

- :func:`pack_weight`: ``linalg.pack`` of the weight into ``N0 x K0`` tiles, emitted
  once per op before its dispatch and shared by every packed branch; the weight is
  a constant, so IREE hoists the pack out of the call (evaluated at compile time for
  an inline constant, in the module's initializer for a parameter);
- :func:`packed_contraction`: in a branch, the activations packed ``M0 x K0``
  (zero padded to a multiple of ``M0``), the op's init packed ``M0 x N0``,
  ``linalg.mmt4d``, and ``linalg.unpack`` back to the op's result type.
"""

from __future__ import annotations

from dcmlir.codegen.kernel import PackedTile, weight_layout
from dcmlir.ir.mlir import arith, ir, linalg, tensor
from dcmlir.workload import Workload

__all__ = ["pack_weight", "packed_contraction"]


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def _zero(element: ir.Type) -> ir.Value:
    return arith.ConstantOp(element, ir.FloatAttr.get(element, 0.0)).result


def _ceildiv(value: ir.Value, tile: int) -> ir.Value:
    return arith.CeilDivUIOp(value, _index(tile)).result


def _packed_rows(
    source: ir.Value, rows: ir.Value, columns: int, tiles: tuple[int, int]
) -> ir.Value:
    """``source`` (``rows x columns``) packed into ``tiles``, zero padded: ``[R1, C1, r0, c0]``."""
    element = source.type.element_type
    outer_rows = _ceildiv(rows, tiles[0])
    outer_columns = -(-columns // tiles[1])
    empty = tensor.EmptyOp([outer_rows, outer_columns, *tiles], element).result
    dynamic = ir.ShapedType.get_dynamic_size()
    result = ir.RankedTensorType.get([dynamic, outer_columns, *tiles], element)
    return linalg.PackOp(
        result, source, empty, [0, 1], [], list(tiles), padding_value=_zero(element)
    ).result


def pack_weight(weight: ir.Value, workload: Workload, tile: PackedTile) -> ir.Value:
    """The weight (``K x N`` or ``N x K``) packed ``[N1, K1, N0, K0]``, zero padded."""
    layout = weight_layout(workload)
    shape = list(weight.type.shape)
    k, n = shape if layout == "kn" else shape[::-1]
    element = weight.type.element_type
    outer = [-(-n // tile.n0), -(-k // tile.k0)]
    empty = tensor.EmptyOp([*outer, tile.n0, tile.k0], element).result
    result = ir.RankedTensorType.get([*outer, tile.n0, tile.k0], element)
    if layout == "kn":
        return linalg.PackOp(
            result,
            weight,
            empty,
            [1, 0],
            [],
            [tile.n0, tile.k0],
            padding_value=_zero(element),
            outer_dims_perm=[1, 0],
        ).result
    return linalg.PackOp(
        result, weight, empty, [0, 1], [], [tile.n0, tile.k0], padding_value=_zero(element)
    ).result


def packed_contraction(
    activations: ir.Value,
    packed_weight: ir.Value,
    init: ir.Value,
    rows: ir.Value,
    tile: PackedTile,
) -> ir.Operation:
    """``init + activations @ weight`` through ``linalg.mmt4d``; returns the unpack op.

    ``rows`` is M (the activations' dynamic dim 0); ``init`` (``M x N``) is packed as
    the accumulator, so an init that is not zero (a bias) keeps its meaning.
    """
    k = activations.type.shape[1]
    n = init.type.shape[1]
    lhs = _packed_rows(activations, rows, k, (tile.m0, tile.k0))
    acc = _packed_rows(init, rows, n, (tile.m0, tile.n0))
    product = linalg.mmt4d(lhs, packed_weight, outs=[acc])
    element = init.type.element_type
    empty = tensor.EmptyOp([rows, n], element).result
    return linalg.UnPackOp(init.type, product, empty, [0, 1], [], [tile.m0, tile.n0]).operation
