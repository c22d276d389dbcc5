"""Workload extraction: which linalg ops have dynamic loops, what they compute.

A *workload* is one dynamic-shape linalg contraction described by what a
tuner needs and nothing else: its iteration space (static extents, dynamic
dims and their ranges), the role of each loop (batch, M, N, K), element types
and a structural key that is the same for identical ops in different layers.
Which argument dims a dynamic loop comes from is :mod:`dcmlir.dim_tracing`'s job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from dcmlir.dim_tracing import ArgDim, trace_dim
from dcmlir.ir.mlir import ir, linalg, source_loc
from dcmlir.loop_ties import group_loops, read_equal_loops
from dcmlir.shapes import MAX_SHAPES, Shape, spread

RANGES_ATTR = "dcmlir.dim_ranges"
"""Set by ``dcmlir-annotate-ranges`` on each dynamic op: ``{d0 = array<i64: lo, hi>}``."""

BATCH, M, N, K = "b", "m", "n", "k"

# Ops that only initialise a buffer; they fuse into their consumer and are not workloads.
_INITIALISERS = frozenset({"linalg.fill"})

# layout -> kind name, for the contraction forms a PyTorch import produces
_KNOWN_LAYOUTS = {
    "mk,kn->mn": "matmul",
    "mk,nk->mn": "matmul_transpose_b",
    "km,kn->mn": "matmul_transpose_a",
    "bmk,bkn->bmn": "batch_matmul",
    "bmk,bnk->bmn": "batch_matmul_transpose_b",
    "bkm,bkn->bmn": "batch_matmul_transpose_a",
}


@dataclass(frozen=True)
class DimSource:
    """An operand dimension that holds a loop's extent at run time."""

    operand: int
    dim: int


@dataclass(frozen=True)
class LoopDim:
    index: int
    role: str
    extent: int | None  # None: dynamic
    source: DimSource
    range: tuple[int, int] | None = None  # inclusive, for dynamic dims

    @property
    def dynamic(self) -> bool:
        return self.extent is None

    def describe(self) -> str:
        if self.extent is not None:
            return str(self.extent)
        return "?" if self.range is None else f"?[{self.range[0]}..{self.range[1]}]"


@dataclass(frozen=True)
class Workload:
    op_name: str
    kind: str
    layout: str
    dims: tuple[LoopDim, ...]
    element_types: tuple[str, ...]  # inputs then outputs
    key: str
    location: str = field(compare=False)
    # loop index of each dimension of each operand (inputs then output): the indexing maps
    operand_loops: tuple[tuple[int, ...], ...] = ()
    # groups of dynamic loops whose extents are one run-time value (attention's T x T: both
    # loops come from the same argument dim); a model only ever runs shapes with them equal
    equal_loops: tuple[tuple[int, ...], ...] = field(default=(), compare=False)
    # inputs that are constants of the program (weights): IREE hoists work on them out of
    # the call, so packing them is free at run time (the packed family needs it)
    constant_operands: tuple[int, ...] = field(default=(), compare=False)

    def operand_shape(self, operand: int) -> tuple[int | None, ...]:
        """Static extents of one operand's dims, None where dynamic."""
        return tuple(self.dims[loop].extent for loop in self.operand_loops[operand])

    def operand_type(self, operand: int) -> str:
        """The operand's tensor type as MLIR prints it, e.g. ``tensor<?x768xf32>``."""
        shape = "x".join("?" if e is None else str(e) for e in self.operand_shape(operand))
        return f"tensor<{shape}x{self.element_types[operand]}>"

    def einsum(self) -> str:
        """The contraction as a numpy einsum spec (one letter per loop), e.g. ``ac,cb->ab``."""
        letters = [chr(ord("a") + index) for index in range(len(self.dims))]
        spelled = ["".join(letters[loop] for loop in loops) for loops in self.operand_loops]
        return f"{','.join(spelled[:-1])}->{spelled[-1]}"

    def concrete(self, values: dict[int, int]) -> tuple[int, ...]:
        """The full iteration space with dynamic loops set from ``{loop: extent}``."""
        return tuple(d.extent if d.extent is not None else values[d.index] for d in self.dims)

    @property
    def dynamic_dims(self) -> tuple[LoopDim, ...]:
        return tuple(d for d in self.dims if d.dynamic)

    def shape_dims(self, shape: Shape) -> dict[int, int]:
        """``(17,)`` -> ``{0: 17}``: a shape's values by the dynamic loop they belong to."""
        loops = [d.index for d in self.dynamic_dims]
        if len(shape) != len(loops):
            raise ValueError(
                f"shape {shape} gives {len(shape)} values for {len(loops)} dynamic dims "
                f"(loops {', '.join(f'd{i}' for i in loops)})"
            )
        return dict(zip(loops, shape, strict=True))

    def dims_of(self, role: str) -> tuple[LoopDim, ...]:
        return tuple(d for d in self.dims if d.role == role)

    def tied_shapes(self) -> list[tuple[int, ...]] | None:
        """The dynamic shapes a run can have when some dynamic loops are one value; else None.

        Each equal group (attention's T x T) is one axis, its diagonal; the other loops
        (a batch of ``B*heads``) are axes of their own; shapes are every combination.
        Each axis is sampled past :data:`~dcmlir.shapes.MAX_SHAPES` values in all (see
        :func:`~dcmlir.shapes.spread`). None without a group or with a group whose
        loops' ranges differ.
        """
        ranges = {d.index: d.range for d in self.dynamic_dims if d.range is not None}
        groups = [g for g in self.equal_loops if set(g) <= set(ranges)]
        if not groups or len(ranges) < len(self.dynamic_dims):
            return None
        axes = groups + [(loop,) for loop in ranges if not any(loop in g for g in groups)]
        if any(len({ranges[loop] for loop in axis}) != 1 for axis in axes):
            return None
        per_axis = max(2, int(MAX_SHAPES ** (1 / len(axes)))) if len(axes) > 1 else MAX_SHAPES
        shapes: list[dict[int, int]] = [{}]
        for axis in axes:
            lo, hi = ranges[axis[0]]
            values = spread(lo, hi, per_axis)
            shapes = [{**shape, **dict.fromkeys(axis, v)} for shape in shapes for v in values]
        return [tuple(shape[loop] for loop in sorted(ranges)) for shape in shapes]

    def describe(self) -> str:
        space = "x".join(d.describe() for d in self.dims)
        roles = "".join(d.role for d in self.dims)
        types = ",".join(self.element_types)
        tied = ", ".join("=".join(f"d{loop}" for loop in group) for group in self.equal_loops)
        return f"{self.kind} ({roles}) {space} {types} key={self.key}" + (
            f" ({tied} at run time)" if tied else ""
        )

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "op": self.op_name,
            "kind": self.kind,
            "layout": self.layout,
            "location": self.location,
            "element_types": list(self.element_types),
            "operand_loops": [list(loops) for loops in self.operand_loops],
            "equal_loops": [list(group) for group in self.equal_loops],
            "constant_operands": list(self.constant_operands),
            "loops": [
                {
                    "dim": d.index,
                    "role": d.role,
                    "extent": d.extent,
                    "range": list(d.range) if d.range else None,
                    "source": {"operand": d.source.operand, "dim": d.source.dim},
                }
                for d in self.dims
            ],
        }


class NotAWorkload(Exception):
    """A dynamic linalg op dcmlir does not tune; the message says why."""


def _maps_or_none(op: ir.Operation) -> list[ir.AffineMap] | None:
    try:
        return [attr.value for attr in linalg.get_indexing_maps(op.opview)]
    except Exception:  # not a structured op: the binding raises a generic error
        return None


def _shaped_operand_shape(value: ir.Value) -> list[int] | None:
    if isinstance(value.type, ir.RankedTensorType | ir.MemRefType):
        return list(value.type.shape)
    return None


def loop_extents(op: ir.Operation) -> list[tuple[int | None, DimSource]] | None:
    """Extent of every loop (None if dynamic) and an operand dim that carries it."""
    maps = _maps_or_none(op)
    if maps is None:
        return None
    n_loops = maps[0].n_dims
    found: list[tuple[int | None, DimSource] | None] = [None] * n_loops
    dynamic = ir.ShapedType.get_dynamic_size()
    for operand_index, (value, amap) in enumerate(zip(op.operands, maps, strict=False)):
        shape = _shaped_operand_shape(value)
        if shape is None:
            continue
        for position, expr in enumerate(amap.results):
            if not isinstance(expr, ir.AffineDimExpr):
                continue
            loop = expr.position
            size = shape[position]
            extent = None if size == dynamic else size
            current = found[loop]
            if current is None or (current[0] is None and extent is not None):
                found[loop] = (extent, DimSource(operand_index, position))
    if any(entry is None for entry in found):
        return None
    return [entry for entry in found if entry is not None]


def is_dynamic_linalg(op: ir.Operation) -> bool:
    extents = loop_extents(op) if op.name.startswith("linalg.") else None
    return extents is not None and any(extent is None for extent, _ in extents)


def functions_with_workloads(module: ir.Operation) -> list[str]:
    """The names of the top-level functions that hold a dynamic linalg op, in IR order:
    what a benchmark calls when the module's entry is not named ``main``."""
    names = []
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name not in ("func.func", "util.func"):
            continue
        if dynamic_linalg_ops(op.operation):
            names.append(ir.StringAttr(op.operation.attributes["sym_name"]).value)
    return names


def entry_function(module: ir.Operation) -> str:
    """The public function that holds the module's workloads (the first, if several), what
    a benchmark or a timing calls; where they are all private (a wrapper passes them a
    constant weight), the first public function, else ``main``."""
    public = [
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in module.regions[0].blocks[0].operations
        if op.operation.name in ("func.func", "util.func")
        and "sym_visibility" not in op.operation.attributes
    ]
    holding = [name for name in functions_with_workloads(module) if name in public]
    return next(iter(holding + public), "main")


def dynamic_linalg_ops(module: ir.Operation) -> list[ir.Operation]:
    """Every linalg op with a dynamic loop, in IR order, initialisers excluded."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name not in _INITIALISERS and is_dynamic_linalg(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def read_ranges(op: ir.Operation) -> dict[int, tuple[int, int]]:
    """The ``dcmlir.dim_ranges`` of an op as ``{loop: (lo, hi)}``."""
    if RANGES_ATTR not in op.attributes:
        return {}
    ranges: dict[int, tuple[int, int]] = {}
    for named in ir.DictAttr(op.attributes[RANGES_ATTR]):
        lo, hi = list(ir.DenseI64ArrayAttr(named.attr))
        ranges[int(named.name.lstrip("d"))] = (lo, hi)
    return ranges


def write_ranges(op: ir.Operation, ranges: dict[int, tuple[int, int]]) -> None:
    entries = {f"d{loop}": ir.DenseI64ArrayAttr.get(list(r)) for loop, r in sorted(ranges.items())}
    op.attributes[RANGES_ATTR] = ir.DictAttr.get(entries)


def analyse(op: ir.Operation, source_name: str = "-") -> Workload:
    """Describe a dynamic linalg op as a workload, or raise :class:`NotAWorkload`."""
    extents = loop_extents(op)
    if extents is None:
        raise NotAWorkload(f"'{op.name}' is not a structured linalg op on ranked tensors")
    if not linalg.isa_contraction_op(op.opview):
        raise NotAWorkload(f"'{op.name}' is not a contraction (only contractions are tuned)")
    if len(op.results) > 1 or len(op.operands) != 3:
        raise NotAWorkload(f"'{op.name}' is not a two-input contraction")
    dims = linalg.infer_contraction_dimensions(op.opview)
    if dims is None:
        raise NotAWorkload(f"'{op.name}': contraction dimensions could not be inferred")
    roles: dict[int, str] = {}
    for role, loops in ((BATCH, dims.batch), (M, dims.m), (N, dims.n), (K, dims.k)):
        for loop in loops:
            roles[int(loop)] = role
    if len(roles) != len(extents):
        raise NotAWorkload(f"'{op.name}': some loops are neither batch, M, N nor K")
    maps = _maps_or_none(op) or []
    if not all(isinstance(e, ir.AffineDimExpr) for m in maps for e in m.results):
        raise NotAWorkload(f"'{op.name}': indexing maps are not projected permutations")
    element_types = tuple(str(v.type.element_type) for v in op.operands)
    if not all(t in SUPPORTED_ELEMENT_TYPES for t in element_types):
        raise NotAWorkload(
            f"'{op.name}': element types {','.join(element_types)} are not supported "
            f"(supported: {', '.join(SUPPORTED_ELEMENT_TYPES)})"
        )
    ranges = read_ranges(op)
    loop_dims = tuple(
        LoopDim(index, roles[index], extent, source, ranges.get(index) if extent is None else None)
        for index, (extent, source) in enumerate(extents)
    )
    layout = _layout(maps, roles)
    return Workload(
        op_name=op.name,
        kind=_KNOWN_LAYOUTS.get(layout, "contraction"),
        layout=layout,
        dims=loop_dims,
        element_types=element_types,
        key=structural_key(op, maps, extents, element_types),
        location=str(source_loc(op.location, source_name)),
        operand_loops=tuple(
            tuple(expr.position for expr in amap.results)  # projected permutations: dims only
            for amap in maps
        ),
        equal_loops=equal_dynamic_loops(op, extents),
        constant_operands=tuple(i for i in (0, 1) if is_constant_value(op.operands[i])),
    )


_CONSTANT_SOURCES = frozenset({"arith.constant", "flow.tensor.constant", "util.global.load"})
"""Ops whose result is fixed for the program's life (a ``util.global.load`` when the global
is immutable)."""
_PURE_TENSOR_OPS = frozenset(
    {
        "linalg.transpose",
        "linalg.broadcast",
        "linalg.generic",
        "linalg.fill",
        "tensor.empty",
        "tensor.cast",
        "tensor.collapse_shape",
        "tensor.expand_shape",
        "tensor.extract_slice",
    }
)
"""Ops IREE's const-expr hoisting evaluates once when every tensor operand is a constant."""


def is_constant_value(value: ir.Value, depth: int = 8) -> bool:
    """Whether ``value`` is computed from constants only (a weight, its transpose); an
    argument of a private function counts when every call passes a constant (IREE
    inlines such a call, so the op reads the constant)."""
    if depth <= 0:
        return False
    if isinstance(value, ir.BlockArgument):
        return _constant_argument(value, depth - 1)
    if not isinstance(value, ir.OpResult):
        return False
    op = value.owner
    name = op.name
    if name in _CONSTANT_SOURCES:
        return name != "util.global.load" or not _mutable_global(op)
    if name not in _PURE_TENSOR_OPS or len(op.regions) > 1:
        return False
    tensors = [v for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
    return all(is_constant_value(v, depth - 1) for v in tensors)


_CALLS = ("func.call", "util.call")


def _constant_argument(argument: ir.BlockArgument, depth: int) -> bool:
    """Whether every call of the private function ``argument`` belongs to passes a
    constant for it (at least one call)."""
    owner = argument.owner.owner
    if owner is None:
        return False
    function = owner.operation
    if function.name not in ("func.func", "util.func"):
        return False
    attributes = function.attributes
    if "sym_visibility" not in attributes:
        return False  # public: anyone may call it
    if ir.StringAttr(attributes["sym_visibility"]).value != "private":
        return False
    name = ir.StringAttr(attributes["sym_name"]).value
    module = function.parent
    if module is None:
        return False
    calls: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in _CALLS and ir.FlatSymbolRefAttr(op.attributes["callee"]).value == name:
            calls.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return bool(calls) and all(
        is_constant_value(call.operands[argument.arg_number], depth) for call in calls
    )


def _mutable_global(load: ir.Operation) -> bool:
    """Whether the global a ``util.global.load`` reads is mutable (unknown: mutable)."""
    if "global" not in load.attributes:
        return True
    name = ir.FlatSymbolRefAttr(load.attributes["global"]).value
    parent = load.parent
    while parent is not None and parent.name != "builtin.module":
        parent = parent.parent
    if parent is None:
        return True
    for op in parent.regions[0].blocks[0].operations:
        if op.operation.name == "util.global" and (
            ir.StringAttr(op.operation.attributes["sym_name"]).value == name
        ):
            return "is_mutable" in op.operation.attributes
    return True


def equal_dynamic_loops(
    op: ir.Operation, extents: list[tuple[int | None, DimSource]]
) -> tuple[tuple[int, ...], ...]:
    """Groups (two or more) of dynamic loops whose extents are one run-time value.

    Every operand dim that carries a loop is traced back to argument dims; loops that
    share one (directly, or through another loop) are one group. An output sized
    ``tensor.empty(%t, %t)`` ties its two loops even when the inputs come from
    different arguments: the program says they are equal. Loops the user tied
    (``dcmlir.equal_loops``, :mod:`dcmlir.loop_ties`) are one group too.
    """
    maps = _maps_or_none(op) or []
    dynamic = ir.ShapedType.get_dynamic_size()
    loops = [loop for loop, (extent, _) in enumerate(extents) if extent is None]
    origins: dict[int, set[ArgDim]] = {loop: set() for loop in loops}
    for value, amap in zip(op.operands, maps, strict=False):
        shape = _shaped_operand_shape(value)
        if shape is None:
            continue
        for position, expr in enumerate(amap.results):
            loop = expr.position if isinstance(expr, ir.AffineDimExpr) else None
            if loop in origins and shape[position] == dynamic:
                origins[loop] |= trace_dim(value, position).arg_dims
    return group_loops(origins, read_equal_loops(op))


SUPPORTED_ELEMENT_TYPES = ("f32", "f16", "bf16")


def _layout(maps: list[ir.AffineMap], roles: dict[int, str]) -> str:
    def letters(amap: ir.AffineMap) -> str:
        return "".join(
            roles.get(expr.position, "?") if isinstance(expr, ir.AffineDimExpr) else "?"
            for expr in amap.results
        )

    inputs = ",".join(letters(m) for m in maps[:-1])
    return f"{inputs}->{letters(maps[-1])}"


def structural_key(
    op: ir.Operation,
    maps: list[ir.AffineMap],
    extents: list[tuple[int | None, DimSource]],
    element_types: tuple[str, ...],
) -> str:
    """Same for ops that compute the same thing on the same static extents."""
    body: list[str] = []
    if op.name == "linalg.generic":
        for inner in op.regions[0].blocks[0].operations:
            body.append(f"{inner.name}:{','.join(str(r.type) for r in inner.results)}")
    iterators = str(op.attributes["iterator_types"]) if "iterator_types" in op.attributes else ""
    payload = {
        "op": op.name,
        "maps": [str(m) for m in maps],
        "iterators": iterators,
        "extents": [extent for extent, _ in extents],
        "types": list(element_types),
        "body": body,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def workloads(
    module: ir.Operation, source_name: str = "-"
) -> Iterator[tuple[ir.Operation, Workload | NotAWorkload]]:
    """Each dynamic linalg op with its workload, or the reason it is not one."""
    for op in dynamic_linalg_ops(module):
        try:
            yield op, analyse(op, source_name)
        except NotAWorkload as reason:
            yield op, reason
