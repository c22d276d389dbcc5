"""Dim tracing: where a dynamic extent comes from, back through the IR to function arguments.

A user bounds a dynamic loop by naming an argument dimension (``arg0.0``), and
two loops are one run-time value when they trace to the same one; both need
the walk from an operand dim through casts, reshapes, slices, IREE's ABI ops
and ``util.assume.int`` to argument dims (:class:`ArgDim`). Kept apart from
:mod:`dcmlir.workload`, which only asks for the answer.

A dim can also be a product of others (:class:`Product`): a flatten of ``[B, T, H]``
to ``[B*T, H]`` sizes the dense layers' ``M`` with ``B*T`` (``arith.muli``,
``affine.apply``, a ``collapse_shape`` of two dynamic dims), attention's batch is
``B*heads``. Its range is the product of its factors' ranges, so a model with batch
and sequence length both dynamic needs no range beyond the two it records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dcmlir.ir.mlir import ir

__all__ = ["ArgDim", "DimOrigin", "Product", "parse_arg_dim", "trace_dim", "trace_index"]


@dataclass(frozen=True)
class ArgDim:
    """A dimension of a function argument, written ``argN.D`` (or ``N.D``)."""

    arg: int
    dim: int

    def __str__(self) -> str:
        return f"arg{self.arg}.{self.dim}"


_ARG_DIM = re.compile(r"^(?:arg|%arg)?(\d+)\.(\d+)$")


def parse_arg_dim(text: str) -> ArgDim:
    match = _ARG_DIM.match(text.strip())
    if not match:
        raise ValueError(f"'{text}' does not name an argument dimension; write argN.D, e.g. arg0.0")
    return ArgDim(int(match.group(1)), int(match.group(2)))


Bounds = tuple[int, int]


@dataclass
class DimOrigin:
    """Where a dynamic extent comes from: function argument dims, IR assumptions, and
    the products of other dims it equals (``arg_dims`` holds only dims it *is*)."""

    arg_dims: set[ArgDim] = field(default_factory=set)
    assumed: tuple[int, int] | None = None
    products: list[Product] = field(default_factory=list)

    def merge_assumption(self, bounds: tuple[int, int]) -> None:
        if self.assumed is None:
            self.assumed = bounds
        else:
            self.assumed = (max(self.assumed[0], bounds[0]), min(self.assumed[1], bounds[1]))

    def add_product(self, product: Product) -> None:
        """The extent equals ``product``: its range (from the factors' assumptions) holds."""
        self.products.append(product)
        bounds = product.bounds(lambda factor: factor.assumed)
        if bounds is not None:
            self.merge_assumption(bounds)


@dataclass(frozen=True)
class Product:
    """A dim that is ``constant`` times the product of ``factors`` (``B*T``, ``B*heads``)."""

    factors: tuple[DimOrigin, ...]
    constant: int = 1

    def bounds(self, factor_bounds: Callable[[DimOrigin], Bounds | None]) -> Bounds | None:
        """The product of the factors' ranges (all sizes are >= 0: the ends multiply);
        None when a factor has none."""
        lo = hi = self.constant
        for factor in self.factors:
            found = factor_bounds(factor)
            if found is None:
                return None
            lo, hi = lo * found[0], hi * found[1]
        return lo, hi


def trace_dim(
    value: ir.Value, dim: int, origin: DimOrigin | None = None, depth: int = 0
) -> DimOrigin:
    """Follow a tensor dimension back to function arguments and ``util.assume.int``."""
    origin = origin if origin is not None else DimOrigin()
    if depth > 64:
        return origin
    if isinstance(value, ir.BlockArgument):
        if _is_function_argument(value):
            origin.arg_dims.add(ArgDim(value.arg_number, dim))
        return origin
    if not isinstance(value, ir.OpResult):
        return origin
    producer = value.owner.operation
    name = producer.name
    if name == "tensor.empty":
        # its operands are exactly the result's dynamic sizes, in order
        return _trace_sized_dim(value, dim, list(producer.operands), origin, depth)
    if name in _SAME_SHAPE_OPS:
        return trace_dim(producer.operands[value.result_number], dim, origin, depth + 1)
    if name in _SIZED_BY_OPERANDS:
        # the result's dynamic dims, in order, are the op's trailing dynamic-size operands
        sizes = _dynamic_size_operands(producer)
        return _trace_sized_dim(value, dim, sizes, origin, depth)
    if name == "tensor.reshape":
        return _trace_reshape_dim(producer, dim, origin, depth)
    if name == "tensor.collapse_shape":
        return _trace_collapsed_dim(producer, dim, origin, depth)
    if name.startswith("linalg.") and len(producer.operands) > len(producer.results):
        # A destination-style op (linalg.softmax included): result i has the shape of its init.
        n_inputs = len(producer.operands) - len(producer.results)
        init = producer.operands[n_inputs + value.result_number]
        return trace_dim(init, dim, origin, depth + 1)
    return origin


_FUNCTIONS = ("func.func", "util.func")
"""Ops whose entry block arguments are the arguments a user's ``argN.D`` names; ``util.func``
is what functions are after IREE's ABI conversion (the global-optimization level)."""

_SAME_SHAPE_OPS = (
    "tensor.cast",
    "util.assume.int",
    "iree_tensor_ext.compute_barrier.start",
    "flow.tensor.tie_shape",
)
"""Ops whose result has the shape of their first operand (IREE's barriers and shape ties)."""

_SIZED_BY_OPERANDS = ("tensor.expand_shape", "tensor.extract_slice", "hal.tensor.import")
"""Ops whose result's dynamic dims are given by index operands of the op."""


def _is_function_argument(value: ir.BlockArgument) -> bool:
    owner = value.owner.owner
    return owner is not None and owner.operation.name in _FUNCTIONS


def _dynamic_size_operands(op: ir.Operation) -> list[ir.Value]:
    """The index operands that size the result's dynamic dims, in order."""
    operands = list(op.operands)
    if op.name == "tensor.expand_shape":
        return operands[1:]  # src, then output_shape's dynamic values
    if op.name == "hal.tensor.import":
        # source buffer view, then the dims of the imported tensor (and maybe a fence)
        return [v for v in operands[1:] if isinstance(v.type, ir.IndexType)]
    # tensor.extract_slice: source, offsets, sizes, strides (segment sizes in an attribute)
    segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    start = segments[0] + segments[1]
    return operands[start : start + segments[2]]


def _trace_sized_dim(
    value: ir.Value, dim: int, sizes: list[ir.Value], origin: DimOrigin, depth: int
) -> DimOrigin:
    shape = value.type.shape
    dynamic = ir.ShapedType.get_dynamic_size()
    if shape[dim] != dynamic:
        return origin
    position = sum(1 for s in shape[:dim] if s == dynamic)
    if position < len(sizes):
        trace_index(sizes[position], origin, depth + 1)
    return origin


def _trace_reshape_dim(reshape: ir.Operation, dim: int, origin: DimOrigin, depth: int) -> DimOrigin:
    """``tensor.reshape %x(%shape)``: dim ``dim`` is element ``dim`` of a ``from_elements``."""
    shape = reshape.operands[1]
    if isinstance(shape, ir.OpResult) and shape.owner.operation.name == "tensor.from_elements":
        elements = shape.owner.operation.operands
        if dim < len(elements):
            trace_index(elements[dim], origin, depth + 1)
    return origin


def _trace_collapsed_dim(
    collapse: ir.Operation, dim: int, origin: DimOrigin, depth: int
) -> DimOrigin:
    """A collapsed dim is a source dim when the rest of its group is static 1s."""
    groups = [
        [int(ir.IntegerAttr(i).value) for i in group]
        for group in collapse.attributes["reassociation"]
    ]
    source = collapse.operands[0]
    if dim >= len(groups) or not isinstance(source.type, ir.RankedTensorType):
        return origin
    dynamic = ir.ShapedType.get_dynamic_size()
    sizes = [source.type.shape[i] for i in groups[dim]]
    others = [s for i, s in zip(groups[dim], sizes, strict=True) if s != 1]
    if len(others) == 1 and others[0] == dynamic:
        position = next(i for i, s in zip(groups[dim], sizes, strict=True) if s == dynamic)
        return trace_dim(source, position, origin, depth + 1)
    # several dynamic dims flattened into one ([B, T, H] -> [B*T, H]): their product
    constant = 1
    factors = []
    for position, size in zip(groups[dim], sizes, strict=True):
        if size == dynamic:
            factors.append(trace_dim(source, position, DimOrigin(), depth + 1))
        else:
            constant *= size
    origin.add_product(Product(tuple(factors), constant))
    return origin


def trace_index(value: ir.Value, origin: DimOrigin | None = None, depth: int = 0) -> DimOrigin:
    """Follow an index value (a tensor.dim, an assumption) to its origins."""
    origin = origin if origin is not None else DimOrigin()
    if depth > 64 or not isinstance(value, ir.OpResult):
        return origin
    producer = value.owner.operation
    if producer.name == "tensor.dim":
        position = _constant_index(producer.operands[1])
        if position is not None:
            trace_dim(producer.operands[0], position, origin, depth + 1)
        return origin
    if producer.name == "util.assume.int":
        bounds = _assumption_bounds(producer, value.result_number)
        if bounds is not None:
            origin.merge_assumption(bounds)
        return trace_index(producer.operands[value.result_number], origin, depth + 1)
    if producer.name in ("arith.index_cast", "arith.index_castui"):
        return trace_index(producer.operands[0], origin, depth + 1)
    if producer.name == "arith.muli":
        return _trace_product(list(producer.operands), 1, origin, depth)
    if producer.name == "affine.apply":
        factors = _affine_product(producer)
        if factors is not None:
            return _trace_product(factors[0], factors[1], origin, depth)
    if producer.name == "hal.buffer_view.dim":
        # IREE's ABI: a dim of an argument passed as a !hal.buffer_view
        view = producer.operands[0]
        if isinstance(view, ir.BlockArgument) and _is_function_argument(view):
            position = int(ir.IntegerAttr(producer.attributes["index"]).value)
            origin.arg_dims.add(ArgDim(view.arg_number, position))
    return origin


def _trace_product(
    values: Sequence[ir.Value], constant: int, origin: DimOrigin, depth: int
) -> DimOrigin:
    """``origin`` is the product of ``values`` (constants fold into ``constant``): record it
    and narrow the assumed range to the product of the factors' assumed ranges."""
    factors = []
    for value in values:
        known = _constant_index(value)
        if known is not None:
            constant *= known
        else:
            factors.append(trace_index(value, DimOrigin(), depth + 1))
    origin.add_product(Product(tuple(factors), constant))
    return origin


def _affine_product(apply: ir.Operation) -> tuple[list[ir.Value], int] | None:
    """The operands and constant of an ``affine.apply`` whose map is a product of its
    operands and constants (``s0 * s1``, what a flatten's size is); None for any other."""
    amap = ir.AffineMapAttr(apply.attributes["map"]).value
    if len(amap.results) != 1:
        return None
    operands = list(apply.operands)
    factors: list[ir.Value] = []
    constant = 1
    pending = [amap.results[0]]
    while pending:
        expr = pending.pop()
        if isinstance(expr, ir.AffineMulExpr):
            pending += [expr.lhs, expr.rhs]
        elif isinstance(expr, ir.AffineConstantExpr):
            constant *= expr.value
        elif isinstance(expr, ir.AffineDimExpr):
            factors.append(operands[expr.position])
        elif isinstance(expr, ir.AffineSymbolExpr):
            factors.append(operands[amap.n_dims + expr.position])
        else:
            return None
    return factors, constant


def _constant_index(value: ir.Value) -> int | None:
    if not isinstance(value, ir.OpResult) or value.owner.operation.name != "arith.constant":
        return None
    attr = value.owner.operation.attributes["value"]
    return int(ir.IntegerAttr(attr).value) if isinstance(attr, ir.IntegerAttr) else None


_UMIN = re.compile(r"umin\s*=\s*(\d+)")
_UMAX = re.compile(r"umax\s*=\s*(\d+)")


def _assumption_bounds(op: ir.Operation, result: int) -> tuple[int, int] | None:
    """Union of the alternatives ``util.assume.int`` gives for one operand."""
    per_operand = ir.ArrayAttr(op.attributes["assumptions"])
    if result >= len(per_operand):
        return None
    alternatives = str(per_operand[result])
    lows = [int(x) for x in _UMIN.findall(alternatives)]
    highs = [int(x) for x in _UMAX.findall(alternatives)]
    if not lows or not highs:
        return None
    return min(lows), max(highs)
