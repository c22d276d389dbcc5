"""The explicit packed kernel: ``linalg.pack`` / ``linalg.mmt4d`` / ``linalg.unpack`` with
dcmlir's own tile, lowered by IREE's codegen instead of its ukernels.

IREE's data tiling (and the encoded kernels of :mod:`dcmlir.codegen.packed`) packs f32
weights ``16 x 1`` on AVX-512: each step of an M0 x 16 ukernel tile loads one weight
vector and broadcasts M0 activations, so the load ports, not the FMA units, set its
pace. Twice the lanes per weight tile (``N0 = 32``, M0 <= 8) halves the broadcasts per
FMA; no ukernel has that tile, so IREE's codegen lowers the mmt4d (an unknown tile sent
to the ukernel falls back to its generic C loop, 50x slower: hence
:data:`MMT4D_KERNEL_FLAGS`). Measured on BERT's FFN1 and output projections, one thread,
against IREE's data tiling: 1.0-1.5x at T >= 13, 1.7-2.3x at T <= 8 (docs/design.md
section 12). The weight is packed once before the dispatch (IREE hoists the pack of a
constant out of the call); the activations are packed per call, in a dispatch of their
own, and the unpack takes the fused consumers.
"""

from __future__ import annotations

from dcmlir.codegen.packed import Dims, loop_dims
from dcmlir.ir.mlir import arith, ir, linalg
from dcmlir.shapes import ceil_div
from dcmlir.workload import K, M, N, Workload

__all__ = [
    "MMT4D_KERNEL_FLAGS",
    "explicit_mmt4d",
    "mmt4d_compilation_info",
    "pack_weight",
    "packed_weight_type",
    "rewrite_explicit",
    "tuned_m_bound",
]

MMT4D_KERNEL_FLAGS = ("--iree-llvmcpu-enable-ukernels=none",)
"""IREE's codegen for every mmt4d: its ukernels have no ``N0 = 2 x lanes`` tile."""

_WEIGHT_TRANSPOSED = "mk,nk->mn"  # torch's Linear: the weight is N x K


def _extent(workload: Workload, role: str) -> int:
    (dim,) = workload.dims_of(role)
    assert dim.extent is not None, f"{role} of a packed projection is static"
    return dim.extent


def packed_weight_type(workload: Workload, n0: int) -> ir.Type:
    """``tensor<N1 x K x N0 x 1 x f32>``: the weight in the kernel's layout."""
    n1, k = ceil_div(_extent(workload, N), n0), _extent(workload, K)
    return ir.RankedTensorType.get([n1, k, n0, 1], ir.F32Type.get())


def pack_weight(op: ir.Operation, workload: Workload, n0: int) -> ir.Value:
    """The weight packed ``N0 x 1`` (N padded with zeros), written once before the dispatch:
    every explicit kernel of the op reads this value, which IREE hoists (a constant)."""
    weight = op.operands[1]
    packed_type = packed_weight_type(workload, n0)
    dest = _empty(packed_type, [])
    transposed = workload.layout == _WEIGHT_TRANSPOSED
    zero = arith.ConstantOp(ir.F32Type.get(), 0.0).result
    return linalg.PackOp(
        packed_type,
        weight,
        dest,
        [0, 1] if transposed else [1, 0],
        [],
        [n0, 1],
        padding_value=zero,
        outer_dims_perm=None if transposed else [1, 0],
    ).result


def explicit_mmt4d(
    op: ir.Operation,
    workload: Workload,
    dims: Dims,
    m0: int,
    n0: int,
    weight: ir.Value,
    m_bound: int | None,
) -> ir.Operation:
    """The op as pack(activations, ``M0 x 1``) -> mmt4d(weight packed by
    :func:`pack_weight`) -> unpack; returns the ``linalg.unpack`` (the op's result).
    ``m_bound``: the top of M's tuned range (see :func:`mmt4d_compilation_info`)."""
    f32 = ir.F32Type.get()
    index = ir.IndexType.get()
    m = dims[workload.dims_of(M)[0].index]
    k, n = _extent(workload, K), _extent(workload, N)
    n1 = ceil_div(n, n0)
    zero = arith.ConstantOp(f32, 0.0).result
    rows = arith.CeilDivUIOp(m, arith.ConstantOp(index, m0).result).result
    dynamic = ir.ShapedType.get_dynamic_size()
    lhs_type = ir.RankedTensorType.get([dynamic, k, m0, 1], f32)
    lhs = linalg.PackOp(
        lhs_type,
        op.operands[0],
        _empty(lhs_type, [rows]),
        [0, 1],
        [],
        [m0, 1],
        padding_value=zero,
    ).result
    acc_type = ir.RankedTensorType.get([dynamic, n1, m0, n0], f32)
    acc = _packed_init(op.operands[len(op.operands) - 1], acc_type, rows, m0, n0)
    product = linalg.mmt4d(lhs, weight, outs=[acc])
    info = mmt4d_compilation_info(m0, n0, m_bound)
    if info is not None:
        product.owner.attributes["compilation_info"] = ir.Attribute.parse(info)
    result_type = op.results[0].type
    return linalg.UnPackOp(
        result_type, product, _empty(result_type, [m]), [0, 1], [], [m0, n0]
    ).operation


def rewrite_explicit(
    op: ir.Operation, workload: Workload, m0: int, n0: int, m_bound: int | None
) -> None:
    """Replace ``op`` by its explicit pack / mmt4d / unpack form, the weight packed right
    before it (IREE hoists that pack when the weight is a constant): one kernel for every
    M, no dispatch (the tuned kernel's module, a benchmark's model)."""
    with ir.InsertionPoint(op), op.location:
        dims = loop_dims(op, workload)
        weight = pack_weight(op, workload, n0)
        unpacked = explicit_mmt4d(op, workload, dims, m0, n0, weight, m_bound)
    op.results[0].replace_all_uses_with(unpacked.results[0])
    op.erase()


def mmt4d_compilation_info(m0: int, n0: int, m_bound: int | None) -> str | None:
    """The mmt4d's configuration: one workgroup per ``N0``-column block of the weight, over
    the rows up to ``m_bound``, the top of M's tuned range (None: IREE's own).

    IREE's own gives a workgroup 4 row tiles of one block and walks the blocks first, so
    the weight (2.4-9.4 MB, past L2) streams from memory once per 4 x M0 rows: in a GPT-2
    at T = 64..128, M0 = 8 then ran 1.09-1.15x data tiling's time, which walks the rows of
    a block first. With the rows of the range in one workgroup each block is read once
    (kept in L2 across the rows): 0.85-0.93 of data tiling's time there, two runs
    (``benchmarks/explicit_in_model.py``, docs/design.md section 12). The activations a
    workgroup reads (its rows x K) are re-read per block, from cache.
    """
    if m_bound is None:
        return None
    rows = ceil_div(m_bound, m0)
    config = (
        f"#iree_cpu.lowering_config<distribution = [{rows}, 1, 0, 0, 0, 0], "
        f"vector_common_parallel = [1, 1, 0, {m0}, {n0}, 0], "
        "vector_reduction = [0, 0, 1, 0, 0, 1]>"
    )
    return (
        f"#iree_codegen.compilation_info<lowering_config = {config}, translation_info = "
        "#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<Mmt4dTilingExpert>>>"
    )


def tuned_m_bound(workload: Workload) -> int | None:
    """The top of M's range in ``workload`` (None where it has none)."""
    (dim,) = workload.dims_of(M)
    return None if dim.range is None else dim.range[1]


def _empty(tensor_type: ir.Type, sizes: list[ir.Value]) -> ir.Value:
    return ir.Operation.create("tensor.empty", results=[tensor_type], operands=sizes).results[0]


def _packed_init(init: ir.Value, acc_type: ir.Type, rows: ir.Value, m0: int, n0: int) -> ir.Value:
    """The accumulator in the packed layout: a fill is re-created packed (the value filled
    stays), anything else (a bias) is packed."""
    owner = init.owner if isinstance(init, ir.OpResult) else None
    empty = _empty(acc_type, [rows])
    if owner is not None and owner.name == "linalg.fill":
        return linalg.fill(owner.operands[0], outs=[empty])
    zero = arith.ConstantOp(ir.F32Type.get(), 0.0).result
    return linalg.PackOp(acc_type, init, empty, [0, 1], [], [m0, n0], padding_value=zero).result
