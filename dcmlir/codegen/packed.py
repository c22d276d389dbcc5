"""The packed kernel as IR in a user's module: IREE's data-tiling encodings, our tile.

What ``dcmlir-emit-dispatch`` writes for a packed kernel (:mod:`dcmlir.space.packed`):
the op on operands carrying IREE's data-tiling encodings
(``iree_encoding.set_encoding`` / ``unset_encoding``), exactly what
``--iree-opt-data-tiling`` writes, except for one number: the encoding's iteration
size of M is the kernel's ``M0`` instead of ``?``. IREE picks its packed tile
from that number (``M0`` rows for ``M0`` in 1, 2, 4, 8, 16 on x86), so each branch
runs the ukernel the plan chose, while IREE still forms one dispatch per branch
(activations packed, mmt4d, unpacked and the consumers fused, tile by tile) and
packs the constant weight once, outside the call. The weight's own encoding keeps
``?`` for M: its layout (``N0 x K0``) is the same for every ``M0``, so one packed
copy serves every branch. :data:`ENCODED_KERNEL_FLAGS` make IREE lower the
encodings without data-tiling any other op (docs/design.md section 12).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dcmlir.ir.mlir import arith, ir, linalg, tensor
from dcmlir.workload import M, Workload

__all__ = [
    "DATA_TILING_FLAGS",
    "ENCODED_KERNEL_FLAGS",
    "data_tile",
    "dispatch_region",
    "encode",
    "encode_weight",
    "encoded_contraction",
    "encoding",
    "loop_dims",
    "region_return",
]

ENCODED_KERNEL_FLAGS = (
    "--iree-dispatch-creation-data-tiling",
    "--iree-dispatch-creation-experimental-set-data-tiling-ops=scaled_matmul",
)
"""IREE's data-tiling path (encodings fused into dispatches, weights' encodings hoisted)
with its own encoding of ops limited to scaled matmuls: only the encodings dcmlir
wrote are data-tiled, every other contraction compiles as it would without."""


DATA_TILING_FLAGS = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
"""IREE's data tiling, as a user turns it on: every contraction packed, the constant
weights packed once (hoisted), mmt4d ukernels. A module whose entry was split
(``dcmlir-split-entry``) is compiled with these: they data-tile the untouched copy, and
lower the encodings dcmlir wrote in the other."""


Dims = Mapping[int, ir.Value]
"""The run-time value of each dynamic loop of a workload, by loop index."""


def loop_dims(op: ir.Operation, workload: Workload) -> dict[int, ir.Value]:
    """``tensor.dim`` of an operand dim carrying each dynamic loop, at the insertion point.

    An operand that is a region's block argument (an ``scf.for`` iter_arg) is the last
    choice: IREE cannot resolve the dim of a loop-carried tensor once it leaves the flow
    dialect ("'tensor.dim' op unexpected during shape cleanup"), while the init's dim
    traces back to a ``tensor.empty`` size.
    """
    found: dict[int, ir.Value] = {}
    for d in workload.dynamic_dims:
        operand, dim = _resolvable_source(op, workload, d.index)
        found[d.index] = tensor.DimOp(
            op.operands[operand], arith.ConstantOp(ir.IndexType.get(), dim)
        ).result
    return found


def _resolvable_source(op: ir.Operation, workload: Workload, loop: int) -> tuple[int, int]:
    """(operand, dim) holding ``loop``'s extent, preferring a value not carried by a loop."""
    sources = [
        (operand, dim)
        for operand, loops in enumerate(workload.operand_loops)
        for dim, carried in enumerate(loops)
        if carried == loop
    ]
    for operand, dim in sources:
        if not _region_argument(op.operands[operand]):
            return operand, dim
    source = workload.dims[loop].source
    return source.operand, source.dim


def _region_argument(value: ir.Value) -> bool:
    """True for a block argument of a region nested in a function (loop-carried)."""
    if not isinstance(value, ir.BlockArgument):
        return False
    return value.owner.owner.operation.name not in ("func.func", "util.func")


def _iteration_sizes(workload: Workload, m0: int | None) -> list[int | None]:
    """Per loop: the static extent, ``m0`` for a dynamic M when given, else None (``?``)."""
    sizes: list[int | None] = []
    for dim in workload.dims:
        if dim.extent is not None:
            sizes.append(dim.extent)
        else:
            sizes.append(m0 if dim.role == M else None)
    return sizes


def encoding(op: ir.Operation, workload: Workload, operand: int, m0: int | None) -> ir.Attribute:
    """The data-tiling encoding of ``op``'s ``operand``: the iteration size of a dynamic M
    is ``m0`` (None: ``?``, as IREE writes it), of any other dynamic loop ``?``."""
    maps = ", ".join(f"affine_map<{m.value}>" for m in linalg.get_indexing_maps(op.opview))
    sizes = ", ".join("?" if s is None else str(s) for s in _iteration_sizes(workload, m0))
    types = ", ".join(workload.element_types)
    return ir.Attribute.parse(
        f"#iree_encoding.encoding<operand_index = {operand}, op_type = matmul, "
        f"element_types = [{types}], user_indexing_maps = [{maps}], iteration_sizes = [{sizes}]>"
    )


def _encoding_dims(workload: Workload, dims: Dims, m0: int | None) -> list[ir.Value]:
    """The values of an encoding's ``?`` iteration sizes, in loop order."""
    sizes = _iteration_sizes(workload, m0)
    return [dims[d.index] for d, size in zip(workload.dims, sizes, strict=True) if size is None]


def _result_dims(workload: Workload, dims: Dims) -> list[ir.Value]:
    """The values of the output's dynamic dims (what an ``unset_encoding`` result needs)."""
    return [dims[loop] for loop in workload.operand_loops[2] if workload.dims[loop].extent is None]


def _encoded_type(value: ir.Value, attribute: ir.Attribute) -> ir.Type:
    plain = ir.RankedTensorType(value.type)
    return ir.RankedTensorType.get(plain.shape, plain.element_type, attribute)


def encode(value: ir.Value, attribute: ir.Attribute, dims: Sequence[ir.Value] = ()) -> ir.Value:
    """``iree_encoding.set_encoding value``: the value in the encoding's packed layout;
    ``dims``: the values of the encoding's ``?`` iteration sizes."""
    op = ir.Operation.create(
        "iree_encoding.set_encoding",
        results=[_encoded_type(value, attribute)],
        operands=[value, *dims],
    )
    return op.results[0]


def _encoded_init(
    init: ir.Value, attribute: ir.Attribute, sizes: Sequence[ir.Value], dims: Sequence[ir.Value]
) -> ir.Value:
    """The accumulator in the result's encoding: a fill of an empty tensor is re-created
    encoded (what IREE's data tiling writes), anything else (a bias) is encoded."""
    owner = init.owner if isinstance(init, ir.OpResult) else None
    if owner is None or owner.name != "linalg.fill":
        return encode(init, attribute, dims)
    encoded = _encoded_type(init, attribute)
    empty = ir.Operation.create("tensor.empty", results=[encoded], operands=list(sizes))
    return linalg.fill(owner.operands[0], outs=[empty.results[0]])


def encode_weight(op: ir.Operation, workload: Workload, dims: Dims) -> ir.Value:
    """The weight in its data-tiling encoding, written once before the dispatch: the
    encoding keeps M's ``?`` (the layout does not depend on ``M0``), so every branch reads
    this one value, which IREE hoists out of the call (the weight is a constant)."""
    return encode(
        op.operands[1], encoding(op, workload, 1, None), _encoding_dims(workload, dims, None)
    )


def encoded_contraction(
    op: ir.Operation,
    workload: Workload,
    dims: Dims,
    m0: int | None,
    weight: ir.Value | None = None,
) -> ir.Operation:
    """A clone of ``op`` on encoded operands, its result decoded back to ``op``'s type;
    returns the ``unset_encoding`` op.

    ``m0``: the iteration size written for a dynamic M (IREE picks its tile from it);
    None writes ``?``, IREE's own choice for a large M. ``weight``: operand 1 already
    encoded (:func:`encode_weight`); None encodes it here, on every call.
    """
    first_init = len(op.operands) - len(op.results)
    unknown = _encoding_dims(workload, dims, m0)
    activations = encode(op.operands[0], encoding(op, workload, 0, m0), unknown)
    if weight is None:
        weight = encode(op.operands[1], encoding(op, workload, 1, m0), unknown)
    sizes = _result_dims(workload, dims)
    init = _encoded_init(op.operands[first_init], encoding(op, workload, 2, m0), sizes, unknown)
    clone = op.clone()
    clone.operands[0] = activations
    clone.operands[1] = weight
    clone.operands[first_init] = init
    plain = clone.results[0].type
    clone.results[0].set_type(init.type)
    if "compilation_info" in clone.attributes:
        del clone.attributes["compilation_info"]
    segments = ir.DenseI32ArrayAttr.get([1, len(sizes), len(unknown)])  # source, result, encoding
    return ir.Operation.create(
        "iree_encoding.unset_encoding",
        results=[plain],
        operands=[clone.results[0], *sizes, *unknown],
        attributes={"operandSegmentSizes": segments},
    )


def dispatch_region(types: Sequence[ir.Type], sizes: Sequence[ir.Value]) -> ir.Operation:
    """An empty ``flow.dispatch.region`` with results of ``types`` (``sizes``: the values
    of their dynamic dims, in order): what IREE's data tiling forms before it sets
    encodings, so packing, mmt4d, unpacking and the fused consumers are one dispatch."""
    sizes = list(sizes)
    region = ir.Operation.create(
        "flow.dispatch.region",
        results=list(types),
        operands=sizes,
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(sizes), 0])},
        regions=2,
    )
    region.regions[0].blocks.append()
    return region


def region_return(values: Sequence[ir.Value]) -> None:
    """``flow.return values``: the end of a :func:`dispatch_region`'s body."""
    ir.Operation.create("flow.return", operands=list(values))


def data_tile(
    op: ir.Operation, workload: Workload, m0: int | None, constant_weight: bool
) -> ir.Operation:
    """Replace ``op`` by its form on data-tiling encodings (in a dispatch region, M's
    iteration size ``m0``; the weight, when constant, encoded before it): the form a
    packed or data-tiled kernel has in a dispatch branch, for its kernel module.
    Returns the region op."""
    with ir.InsertionPoint(op), op.location:
        dims = loop_dims(op, workload)
        weight = encode_weight(op, workload, dims) if constant_weight else None
        region = dispatch_region([op.results[0].type], _result_dims(workload, dims))
        with ir.InsertionPoint(region.regions[0].blocks[0]):
            decoded = encoded_contraction(op, workload, dims, m0, weight)
            region_return(list(decoded.results))
    op.results[0].replace_all_uses_with(region.results[0])
    op.erase()
    return region
