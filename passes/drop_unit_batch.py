"""``dcmlir-drop-unit-batch``: a unit-batch ``linalg.batch_matmul`` becomes a ``linalg.matmul``.

An ONNX ``MatMul`` of activations ``[1, T, K]`` by a weight ``[K, N]`` arrives from IREE's
ONNX importer as a batch matmul with a unit batch, the weight broadcast to ``[1, K, N]``
by a ``linalg.generic``. IREE's data tiling drops the unit batch and packs the weight
once; dcmlir's packed micro-kernels cover ``matmul`` and ``matmul_transpose_b``, so
without this rewrite such a model's projections get codegen tiles only (measured on a
2-layer BERT-base ONNX export: 2x slower than IREE's data tiling at T >= 16, docs/models.md).
``dcmlir import-onnx`` runs it; ``dcmlir-opt`` offers it for modules imported otherwise.

Only the forms with a static unit batch on all three operands and the layouts
``bmk,bkn->bmn`` and ``bmk,bnk->bmn`` are rewritten: A and the init are collapsed to
``[M, K]`` and ``[M, N]``; the weight is the broadcast's 2-D source when it is one (so
the constant stays a constant), else collapsed; the result is expanded back to
``[1, M, N]`` for the op's users.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcmlir.ir.mlir import arith, ir, linalg, tensor
from dcmlir.ir.pass_base import ModulePass, PassContext

__all__ = ["DropUnitBatchPass", "drop_unit_batch"]

_A = "(d0, d1, d3)"
_LAYOUTS = {"(d0, d3, d2)": "kn", "(d0, d2, d3)": "nk"}  # the weight's map -> its layout
_C = "(d0, d1, d2)"


@dataclass(frozen=True)
class DropUnitBatchPass(ModulePass):
    name = "dcmlir-drop-unit-batch"
    summary = "rewrite a linalg.batch_matmul with a unit batch as a linalg.matmul"

    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        for op in drop_unit_batch(module):
            ctx.remark(op, "rewritten as linalg.matmul (unit batch)")


def drop_unit_batch(module: ir.Operation) -> list[ir.Location]:
    """Rewrite every unit-batch ``linalg.batch_matmul`` of ``module``; returns where each was."""
    found: list[ir.Operation] = []
    _collect(module, found)
    done = []
    with module.context:
        for op in found:
            layout = _layout(op)
            if layout is None:
                continue
            done.append(op.location)
            _rewrite(op, layout)
    return done


def _collect(op: ir.Operation, found: list[ir.Operation]) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                if inner.operation.name == "linalg.batch_matmul":
                    found.append(inner.operation)
                _collect(inner.operation, found)


def _layout(op: ir.Operation) -> str | None:
    """``kn`` or ``nk`` for a rewritable op, else None."""
    types = [ir.RankedTensorType(v.type) for v in (*op.operands, op.results[0])]
    if len(op.operands) != 3 or any(t.rank != 3 or t.shape[0] != 1 for t in types):
        return None
    if "indexing_maps" not in op.attributes:
        return "kn"  # the op's default maps
    maps = [str(entry.value).split("->")[-1].strip() for entry in _maps(op)]
    if maps[0] != _A or maps[2] != _C:
        return None
    return _LAYOUTS.get(maps[1])


def _maps(op: ir.Operation) -> list[ir.AffineMapAttr]:
    return list(ir.ArrayAttr(op.attributes["indexing_maps"]))


def _rewrite(op: ir.Operation, layout: str) -> None:
    a, b, init = op.operands
    result = op.results[0]
    with ir.InsertionPoint(op), op.location:
        a2 = _collapse(a)
        b2 = _broadcast_source(b) or _collapse(b)
        c2 = _collapse(init)
        if layout == "kn":
            product = linalg.matmul(a2, b2, outs=[c2])
        else:  # the weight read [N, K]: matmul_transpose_b's maps
            d = [ir.AffineDimExpr.get(i) for i in range(3)]
            maps = [ir.AffineMap.get(3, 0, e) for e in ([d[0], d[2]], [d[1], d[2]], [d[0], d[1]])]
            product = linalg.matmul(a2, b2, outs=[c2], indexing_maps=maps)
        wanted = ir.RankedTensorType(result.type)
        dynamic = ir.ShapedType.get_dynamic_size()
        # M, N or both may be dynamic (RoPE's [1, 32, 1] x [1, 1, T] has N = T): each
        # dynamic dim of the result is the product's size there
        sizes = [
            tensor.DimOp(product, _index(dim - 1)).result
            for dim in (1, 2)
            if wanted.is_dynamic_dim(dim)
        ]
        static = [1, *(dynamic if wanted.is_dynamic_dim(d) else wanted.shape[d] for d in (1, 2))]
        expanded = tensor.ExpandShapeOp(wanted, product, _reassociation(), sizes, static).result
    result.replace_all_uses_with(expanded)
    op.erase()


def _collapse(value: ir.Value) -> ir.Value:
    shaped = ir.RankedTensorType(value.type)
    collapsed = ir.RankedTensorType.get(shaped.shape[1:], shaped.element_type)
    return tensor.CollapseShapeOp(collapsed, value, _reassociation()).result


def _broadcast_source(value: ir.Value) -> ir.Value | None:
    """The 2-D tensor a ``linalg.generic`` only broadcasts to ``[1, ...]``, else None."""
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation):
        return None
    owner = owner.operation
    if owner.name != "linalg.generic" or len(owner.operands) != 2:
        return None
    source = owner.operands[0]
    body = list(owner.regions[0].blocks[0].operations)
    if len(body) != 1 or body[0].operation.name != "linalg.yield":
        return None
    if body[0].operation.operands[0] != owner.regions[0].blocks[0].arguments[0]:
        return None
    maps = [str(entry.value) for entry in ir.ArrayAttr(owner.attributes["indexing_maps"])]
    if maps != ["(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1, d2)"]:
        return None
    return source


def _reassociation() -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    groups = [[0, 1], [2]]
    return ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in group]) for group in groups]
    )


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result
