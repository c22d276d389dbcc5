"""``dcmlir-annotate-ranges``: record the value range of every dynamic loop.

Each dynamic-shape linalg op gets ``dcmlir.dim_ranges = {dN = array<i64: lo, hi>}``
(inclusive) for its dynamic loops, which later passes and the tuner read.
Where a range comes from, strongest first:

1. ``dims=argN.D=LO:HI,...``: the user's word for one function-argument dim, or
   for the factors of a loop that is their product (``B*T`` of a flattened
   ``[B, T, H]``: the product of the factors' ranges);
2. what the IR already says: a ``dcmlir.dim_ranges`` entry recorded earlier,
   else ``util.assume.int`` bounds (a frontend's facts), multiplied out for a loop
   that is a product of dims;
3. ``range=LO:HI``: a default for every dynamic dim the above leave open.

A dynamic loop with none of these is left without a range and gets a warning.

``dims=argN.D=argM.E`` ties two argument dims as one run-time value: the loops of an op
they size get one range (the overlap of theirs) and are recorded as one group,
``dcmlir.equal_loops`` (:mod:`dcmlir.loop_ties`), which the tuner searches on its diagonal.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from dcmlir.dim_tracing import ArgDim, DimOrigin, parse_arg_dim, trace_dim
from dcmlir.ir.mlir import ir, linalg
from dcmlir.ir.pass_base import ModulePass, PassContext, option
from dcmlir.loop_ties import write_equal_loops
from dcmlir.shapes import parse_range
from dcmlir.workload import dynamic_linalg_ops, loop_extents, read_ranges, write_ranges


@dataclass(frozen=True)
class AnnotateRangesPass(ModulePass):
    name = "dcmlir-annotate-ranges"
    summary = "record the value range of each dynamic loop of each dynamic-shape linalg op"

    range: str = option("", "LO:HI (inclusive) for every dynamic dim without a better source")
    dims: tuple[str, ...] = option(
        (),
        "per-argument ranges: argN.D=LO:HI,... (argument N, dim D); argN.D=argM.E ties two "
        "dims that are one value at run time",
    )

    missing_hint: ClassVar[str | None] = "pass range=LO:HI or dims=argN.D=LO:HI"
    """What the warning for a dynamic loop left without a range tells the user to do; None:
    no warning (the caller reports missing ranges itself, or needs none)."""

    def __post_init__(self) -> None:
        if self.range:
            parse_range(self.range)
        self.overrides()  # validates

    def default_range(self) -> tuple[int, int] | None:
        return parse_range(self.range) if self.range else None

    def overrides(self) -> dict[ArgDim, tuple[int, int]]:
        """The ``argN.D=LO:HI`` items by argument dim, each range shared by the dims tied to
        it (:meth:`tie_classes`); one dim given twice is an error (the last one used to win
        silently), and so are tied dims whose ranges do not overlap."""
        found: dict[ArgDim, tuple[int, int]] = {}
        given: dict[ArgDim, str] = {}
        for item in self.dims:
            where, text = _split_item(item)
            arg_dim = parse_arg_dim(where)
            if _names_arg_dim(text):
                continue  # a tie: tie_classes
            if arg_dim in given:
                raise ValueError(
                    f"two ranges for {arg_dim} ('{given[arg_dim]}' and '{item}'); give one"
                )
            found[arg_dim] = parse_range(text)
            given[arg_dim] = item
        for members in self.tie_classes():
            ranges = {arg: found[arg] for arg in members if arg in found}
            if not ranges:
                continue
            lo, hi = max(r[0] for r in ranges.values()), min(r[1] for r in ranges.values())
            if lo > hi:
                spelled = ", ".join(sorted(f"{arg}={r[0]}:{r[1]}" for arg, r in ranges.items()))
                raise ValueError(f"tied dims have ranges that do not overlap ({spelled})")
            found.update(dict.fromkeys(members, (lo, hi)))
        return found

    def tie_classes(self) -> list[set[ArgDim]]:
        """The ``argN.D=argM.E`` items: argument dims that are one value at run time, joined
        into classes (``arg0.1=arg0.2`` with ``arg0.2=arg1.1``: all three)."""
        classes: list[set[ArgDim]] = []
        for item in self.dims:
            where, text = _split_item(item)
            if not _names_arg_dim(text):
                continue
            joined = {parse_arg_dim(where), parse_arg_dim(text)}
            for found in [c for c in classes if c & joined]:
                classes.remove(found)
                joined |= found
            classes.append(joined)
        return classes

    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        overrides, ties = self.overrides(), self.tie_classes()
        named = {*overrides, *(arg for members in ties for arg in members)}
        self.check_overrides_exist(ctx, module, named)
        default = self.default_range()
        for op in dynamic_linalg_ops(module):
            recorded = read_ranges(op)
            ranges: dict[int, tuple[int, int]] = {}
            origins = dynamic_loop_origins(op)
            for loop, origin in origins.items():
                if loop in recorded:
                    origin.merge_assumption(recorded[loop])
                found = self.resolve(ctx, op, loop, origin, overrides, default)
                if found is not None:
                    ranges[loop] = found
            groups = _tied_loops(origins, ties)
            for group in groups:  # one value: one range, the ranges' overlap
                _share_range(ctx, op, group, ranges)
            if ranges:
                write_ranges(op, ranges)
            if groups:
                write_equal_loops(op, groups)

    def resolve(
        self,
        ctx: PassContext,
        op: ir.Operation,
        loop: int,
        origin: DimOrigin,
        overrides: dict[ArgDim, tuple[int, int]],
        default: tuple[int, int] | None,
    ) -> tuple[int, int] | None:
        given = [overrides[arg] for arg in sorted(origin.arg_dims, key=str) if arg in overrides]
        if given:
            lo = max(r[0] for r in given)
            hi = min(r[1] for r in given)
            if lo > hi:
                names = ", ".join(str(a) for a in sorted(origin.arg_dims, key=str))
                raise ctx.fail(
                    op, f"loop d{loop} has the extent of {names}, whose ranges do not overlap"
                )
            return lo, hi
        derived = _product_range(origin, overrides)
        if derived is not None:
            return derived
        if origin.assumed is not None:
            if origin.assumed[0] > origin.assumed[1]:
                raise ctx.fail(op, f"loop d{loop}: the ranges the IR records for it do not overlap")
            return origin.assumed
        if default is not None:
            return default
        if self.missing_hint is not None:
            ctx.warning(op, f"no range for dynamic loop d{loop}; {self.missing_hint}")
        return None

    @staticmethod
    def check_overrides_exist(
        ctx: PassContext, module: ir.Operation, overrides: Collection[ArgDim]
    ) -> None:
        """An override or a tie naming no dynamic argument dim is a typo: say so, do not
        ignore it.

        ``argN.D`` numbers the arguments of every function alike: one that names a dynamic
        dim of several functions bounds each of them, which gets a warning naming them.
        """
        if not overrides:
            return
        functions = dynamic_argument_dims_by_function(module)
        dynamic = {arg_dim for found in functions.values() for arg_dim in found}
        for arg_dim in overrides:
            if arg_dim not in dynamic:
                known = ", ".join(str(a) for a in sorted(dynamic, key=str)) or "none"
                raise ctx.fail(
                    module,
                    f"dims: {arg_dim} is not a dynamic dimension of any function argument "
                    f"(dynamic ones: {known})",
                )
            holders = [function for function, found in functions.items() if arg_dim in found]
            if len(holders) > 1:
                names = ", ".join(f"@{_symbol(function)}" for function in holders)
                ctx.warning(
                    holders[1],
                    f"dims: {arg_dim} is a dynamic dimension of {len(holders)} functions "
                    f"({names}): its range bounds each of them (argN.D numbers the arguments "
                    "of every function)",
                )


def _split_item(item: str) -> tuple[str, str]:
    """``argN.D=VALUE`` -> (``argN.D``, ``VALUE``); a ValueError for an item without ``=``."""
    where, has_value, text = item.partition("=")
    if not has_value:
        raise ValueError(f"'{item}' in dims is not argN.D=LO:HI or argN.D=argM.E")
    return where, text


def _names_arg_dim(text: str) -> bool:
    """Whether a ``dims`` item's value is another argument dim (a tie), not a range."""
    try:
        parse_arg_dim(text)
    except ValueError:
        return False
    return True


def _tied_loops(origins: dict[int, DimOrigin], ties: list[set[ArgDim]]) -> list[list[int]]:
    """The op's dynamic loops each tie class joins (two or more: one loop is no tie)."""
    found = []
    for members in ties:
        loops = [loop for loop, origin in sorted(origins.items()) if origin.arg_dims & members]
        if len(loops) > 1:
            found.append(loops)
    return found


def _share_range(
    ctx: PassContext, op: ir.Operation, loops: list[int], ranges: dict[int, tuple[int, int]]
) -> None:
    """Give tied ``loops`` one range, the overlap of theirs (an error where none)."""
    known = [ranges[loop] for loop in loops if loop in ranges]
    if not known:
        return
    lo, hi = max(r[0] for r in known), min(r[1] for r in known)
    if lo > hi:
        names = ", ".join(f"d{loop}" for loop in loops)
        raise ctx.fail(op, f"loops {names} are tied by dims but their ranges do not overlap")
    ranges.update(dict.fromkeys(loops, (lo, hi)))


def _product_range(
    origin: DimOrigin, overrides: dict[ArgDim, tuple[int, int]]
) -> tuple[int, int] | None:
    """The range of a loop that is a product of dims when ``overrides`` bound one of its
    factors: each factor's override (else its assumed range) multiplied out; None else."""

    def factor_range(factor: DimOrigin) -> tuple[int, int] | None:
        given = [overrides[arg] for arg in factor.arg_dims if arg in overrides]
        if not given:
            return factor.assumed
        return max(r[0] for r in given), min(r[1] for r in given)

    ranges = [
        product.bounds(factor_range)
        for product in origin.products
        if any(arg in overrides for factor in product.factors for arg in factor.arg_dims)
    ]
    found = [r for r in ranges if r is not None]
    if not found:
        return None
    return max(r[0] for r in found), min(r[1] for r in found)


def dynamic_loop_origins(op: ir.Operation) -> dict[int, DimOrigin]:
    """For each dynamic loop, where every operand that carries it gets its extent."""
    extents = loop_extents(op) or []
    maps = [attr.value for attr in linalg.get_indexing_maps(op.opview)]
    dynamic_size = ir.ShapedType.get_dynamic_size()
    origins = {loop: DimOrigin() for loop, (extent, _) in enumerate(extents) if extent is None}
    for value, amap in zip(op.operands, maps, strict=False):
        if not isinstance(value.type, ir.RankedTensorType):
            continue
        for position, expr in enumerate(amap.results):
            if not isinstance(expr, ir.AffineDimExpr) or expr.position not in origins:
                continue
            if value.type.shape[position] == dynamic_size:
                trace_dim(value, position, origins[expr.position])
    return origins


def dynamic_argument_dims(module: ir.Operation) -> set[ArgDim]:
    """Every dynamic dim of a ``func.func`` argument of ``module``, as ``argN.D``."""
    return {
        arg_dim for found in dynamic_argument_dims_by_function(module).values() for arg_dim in found
    }


def dynamic_argument_dims_by_function(module: ir.Operation) -> dict[ir.Operation, set[ArgDim]]:
    """The dynamic argument dims of each ``func.func`` with a body, in IR order."""
    found: dict[ir.Operation, set[ArgDim]] = {}
    dynamic_size = ir.ShapedType.get_dynamic_size()

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name != "func.func" or not op.regions[0].blocks:
            return ir.WalkResult.ADVANCE
        dims = found.setdefault(op, set())
        for arg in op.regions[0].blocks[0].arguments:
            if isinstance(arg.type, ir.RankedTensorType):
                for dim, size in enumerate(arg.type.shape):
                    if size == dynamic_size:
                        dims.add(ArgDim(arg.arg_number, dim))
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _symbol(function: ir.Operation) -> str:
    return ir.StringAttr(function.attributes["sym_name"]).value


@dataclass(frozen=True)
class DimsOptionPass(AnnotateRangesPass):
    """The pass behind the ``--dims`` option of the ``dcmlir`` commands (repeatable: one
    ``LO:HI`` for every dim, ``ARG.DIM=LO:HI`` per argument dim, ``ARG.DIM=ARG.DIM`` a tie):
    its hints name that option, not the pass's ``range=``."""

    missing_hint: ClassVar[str | None] = "give --dims LO:HI (or ARG.DIM=LO:HI)"

    @classmethod
    def from_dims(cls, items: Sequence[str]) -> Self:
        """The pass for ``--dims`` given as ``items``; a ValueError (one line, without the
        option's name) for an empty item, two ``LO:HI`` or a malformed range."""
        default = ""
        overrides = []
        for item in items:
            if not item.strip():
                raise ValueError("an empty range; write LO:HI (e.g. 1:128) or ARG.DIM=LO:HI")
            if "=" in item:
                overrides.append(item)
            elif default:
                raise ValueError(f"two ranges for every dim ('{default}' and '{item}')")
            else:
                default = item
        return cls(range=default, dims=tuple(overrides))


@dataclass(frozen=True)
class QuietDimsOptionPass(DimsOptionPass):
    """``--dims`` where a missing range needs no warning: ``dcmlir tune`` stops on it with
    one error line of its own, ``dcmlir measure`` takes its shapes from ``--shapes``."""

    missing_hint: ClassVar[str | None] = None
