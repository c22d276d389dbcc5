"""``dcmlir-split-entry``: leave the shapes where the plan has nothing better than IREE's
data tiling to an untouched copy of the entry function.

A cascade is an ``scf.if`` per op, and IREE forms dispatches inside each branch: with
data tiling that loses what IREE does across ops (an op's output written straight into
the next op's packed layout, elementwise consumers run on the packed tiles). Measured
on GPT-2 (docs/design.md section 12), a module whose ops all run IREE's own data tiling,
written as dcmlir's cascades, is 3-12% slower than IREE's data-tiled build of the
original. So at every T where each packed workload's plan runs data tiling's own tile,
the entry calls a copy of the original function that no dcmlir pass touches, and the
module is compiled with data tiling (:data:`~dcmlir.codegen.packed.DATA_TILING_FLAGS`);
at the other T (:func:`dcmlir_ranges`), the copy with the cascades.

The entry ``@f`` becomes ``@f`` (the same signature and attributes: ``argN.D in ranges ?
@f$dcmlir : @f$iree``), ``@f$dcmlir`` (the function the cascades are emitted into, with
IREE's data-tiling hint so that IREE data-tiles none of its other ops) and ``@f$iree``
(marked :data:`LEFT_TO_IREE`, which ``dcmlir-emit-dispatch`` skips); both copies are
private and never inlined, so each compiles as a function of its own. Where the ranges
are empty, ``@f`` itself is marked and nothing is copied. An entry lowered to global
optimization takes ``!hal.buffer_view`` arguments: T is their ``hal.buffer_view.dim``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcmlir.dim_tracing import ArgDim, trace_dim
from dcmlir.dispatch import Plan, PlanError, WorkloadPlan
from dcmlir.ir.mlir import arith, ir, scf, tensor
from dcmlir.ir.pass_base import ModulePass, PassContext, option
from dcmlir.space import (
    Candidate,
    DataTiledCandidate,
    DefaultCandidate,
    Mmt4dCandidate,
    PackedCandidate,
    data_tiling_m0,
)
from dcmlir.workload import NotAWorkload, workloads

__all__ = [
    "DATA_TILING_HINT",
    "LEFT_TO_IREE",
    "EntrySplit",
    "SplitEntryPass",
    "dcmlir_ranges",
    "split_entry",
]

LEFT_TO_IREE = "dcmlir.left_to_iree"
"""Unit attribute on the function copy that dcmlir leaves as it was."""

DATA_TILING_HINT = "iree.opt.data_tiling"
"""IREE's data-tiling hint (``IREE::Encoding::kDataTilingHint``): where any op of a function
carries it, IREE's ``AnnotateDataTilingHints`` hints no other op there; on the function
op itself it hints none, and ``SetEncoding`` (linalg ops only) encodes none."""

_NEVER_INLINE = "#util.inline.never"


@dataclass(frozen=True)
class SplitEntryPass(ModulePass):
    name = "dcmlir-split-entry"
    summary = (
        "call an untouched copy of the entry where the plan runs only IREE's data tiling "
        "(compile with data tiling)"
    )

    plan: str = option("", "plan file (JSON, docs/plan.md) written by the tuner; required")

    def __post_init__(self) -> None:
        if not self.plan:
            raise ValueError("option 'plan' is required: plan=FILE, a plan JSON the tuner wrote")

    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        try:
            plan = Plan.load(self.plan)
        except PlanError as err:
            raise ctx.fail(module, str(err)) from None
        split_entry(ctx, module, plan)


Ranges = tuple[tuple[int, int], ...]
"""Inclusive ``(lo, hi)`` ranges of an extent, in order, apart."""


@dataclass(frozen=True)
class EntrySplit:
    """Where the entry was split: ``function``'s ``arg_dim`` in ``ranges`` runs dcmlir's
    cascades, in ``default`` IREE's default of the function as it was, every other extent
    IREE's data tiling of it."""

    function: str
    arg_dim: ArgDim
    ranges: Ranges
    default: Ranges = ()  # where every workload runs IREE's default: the function as it was

    def describe(self) -> str:
        if not self.ranges and not self.default:
            return f"@{self.function}: every {self.arg_dim} runs IREE's data tiling of it as it was"
        if len(self.ranges) == 1 and self.ranges[0][0] <= 1 and not self.default:
            return (
                f"@{self.function}: {self.arg_dim} <= {self.ranges[0][1]} runs dcmlir's "
                f"kernels, above it IREE's data tiling of the function as it was"
            )
        runs = [f"in {_spans(self.ranges)} dcmlir's kernels"] if self.ranges else []
        runs += [f"in {_spans(self.default)} IREE's default"] if self.default else []
        return (
            f"@{self.function}: {self.arg_dim} runs, {', '.join(runs)}, elsewhere IREE's data "
            "tiling (IREE's builds: of the function as it was)"
        )


def _spans(ranges: Ranges) -> str:
    return ", ".join(f"{lo}" if lo == hi else f"{lo}..{hi}" for lo, hi in ranges)


def dcmlir_ranges(plan: Plan) -> Ranges | None:
    """The ranges of M at which some packed workload's tree picks anything but data
    tiling's own tile (a narrower packed kernel, IREE's default, or a kernel that reads the
    weight as it is, as a plan of two weight layouts does): where the entry runs dcmlir's
    cascades. Empty where every packed workload runs data tiling's own at every M (the
    whole entry is IREE's); None without packed workloads (nothing to split)."""
    found: set[int] | None = None
    for planned in plan.workloads:
        if not _is_packed(planned):
            continue
        found = set() if found is None else found
        (dim,) = planned.dims
        lo, hi = dim.range
        for m in range(lo, hi + 1):
            chosen = planned.select({dim.loop: m})  # an exact shape's build too
            kernel = chosen.candidate if chosen is not None else DataTiledCandidate()
            if not _data_tilings_own(kernel):
                found.add(m)
    return None if found is None else _runs(sorted(found))


def _runs(values: list[int]) -> Ranges:
    """Sorted distinct integers as ranges of consecutive ones."""
    ranges: list[tuple[int, int]] = []
    for value in values:
        if ranges and ranges[-1][1] == value - 1:
            ranges[-1] = (ranges[-1][0], value)
        else:
            ranges.append((value, value))
    return tuple(ranges)


def _data_tilings_own(kernel: Candidate) -> bool:
    """Whether ``kernel`` is what IREE's data tiling runs for a dynamic M: its tile for the
    target (:func:`~dcmlir.space.data_tiling_m0`; a packed kernel's N0 is the target's
    lanes). On AVX2 that is 8 rows: a 16-row packed kernel there is a kernel of its own."""
    return isinstance(kernel, DataTiledCandidate) or (
        isinstance(kernel, PackedCandidate) and kernel.m0 == data_tiling_m0(kernel.n0)
    )


def split_entry(ctx: PassContext, module: ir.Operation, plan: Plan) -> EntrySplit | None:
    """Split the entry of the plan's packed workloads (see the module docstring); None,
    with a remark saying why, when it is not split."""
    explicit = _explicit_workloads(plan)
    if explicit:
        ctx.remark(
            module,
            f"entry not split: {', '.join(explicit)} run explicit mmt4d kernels, whose weight "
            "layout is not data tiling's (a data-tiled copy would hold their weights twice)",
        )
        return None
    ranges = dcmlir_ranges(plan)
    if ranges is None:
        ctx.remark(module, "entry not split: no workload runs a packed or data-tiled kernel")
        return None
    with module.context:
        found = _packed_entry(module, plan, ctx.diagnostics.source_name)
        if isinstance(found, _Refusal):
            ctx.remark(found.where, f"entry not split: {found.reason}")
            return None
        function, arg_dim = found
        name = ir.StringAttr(function.attributes["sym_name"]).value
        default = _all_default(function, arg_dim, plan, ranges, ctx.diagnostics.source_name)
        ranges = _runs(sorted(_values(ranges) - _values(default)))
        split = EntrySplit(name, arg_dim, ranges, default)
        ctx.remark(function, f"entry split: {split.describe()}")
        if not ranges and not default:  # nothing for dcmlir: the function as it was, for IREE
            function.attributes[LEFT_TO_IREE] = ir.UnitAttr.get()
        else:
            _split(function, name, arg_dim, split)
    return split


def _values(ranges: Ranges) -> set[int]:
    return {value for lo, hi in ranges for value in range(lo, hi + 1)}


def _all_default(
    function: ir.Operation, arg_dim: ArgDim, plan: Plan, ranges: Ranges, source: str
) -> Ranges:
    """The extents in ``ranges`` at which every workload of the plan in ``function`` runs
    IREE's default: there the entry calls the function as it was, not data-tiled (a cascade
    of defaults is not IREE's default build: its dispatches end at each op). Empty where a
    workload's dims are not all ``arg_dim``, or the plan has workloads elsewhere."""
    found: list[tuple[WorkloadPlan, tuple[int, ...]]] = []
    for op, workload in workloads(function, source):
        planned = None if isinstance(workload, NotAWorkload) else plan.for_workload(workload.key)
        if planned is None:
            continue
        for dim in workload.dynamic_dims:
            origin = trace_dim(op.operands[dim.source.operand], dim.source.dim)
            if origin.arg_dims != {arg_dim}:
                return ()
        found.append((planned, tuple(d.loop for d in planned.dims)))
    if len({planned.key for planned, _ in found}) < len(plan.workloads):
        return ()

    def default_at(m: int) -> bool:
        picks = [planned.select(dict.fromkeys(loops, m)) for planned, loops in found]
        return all(p is not None and isinstance(p.candidate, DefaultCandidate) for p in picks)

    return _runs([m for m in sorted(_values(ranges)) if default_at(m)])


def _explicit_workloads(plan: Plan) -> list[str]:
    """The keys of the workloads whose plan runs explicit mmt4d kernels."""
    return [planned.key for planned in plan.workloads if planned.runs(Mmt4dCandidate)]


def _is_packed(planned: WorkloadPlan) -> bool:
    return len(planned.dims) == 1 and planned.runs(PackedCandidate | DataTiledCandidate)


@dataclass(frozen=True)
class _Refusal:
    where: ir.Operation
    reason: str


def _packed_entry(
    module: ir.Operation, plan: Plan, source: str
) -> tuple[ir.Operation, ArgDim] | _Refusal:
    """The function holding the plan's packed workloads and the argument dim their M is,
    or why there is none."""
    keys = {p.key for p in plan.workloads if _is_packed(p)}
    return _entry_of(module, keys, source)


def _entry_of(
    module: ir.Operation, keys: set[str], source: str
) -> tuple[ir.Operation, ArgDim] | _Refusal:
    functions: list[ir.Operation] = []
    arg_dims: set[ArgDim] = set()
    for op, found in workloads(module, source):
        if isinstance(found, NotAWorkload) or found.key not in keys:
            continue
        if len(found.dynamic_dims) != 1:
            return _Refusal(op, f"workload {found.key} has more than one dynamic dim")
        (dim,) = found.dynamic_dims
        origin = trace_dim(op.operands[dim.source.operand], dim.source.dim)
        if len(origin.arg_dims) != 1:
            return _Refusal(op, f"the M of workload {found.key} is not one argument dim")
        arg_dims |= origin.arg_dims
        function = _function_of(op)
        if function is None:
            return _Refusal(op, f"workload {found.key} is not in a function")
        if function not in functions:
            functions.append(function)
    if not functions:
        return _Refusal(module, "the module has none of the plan's packed workloads")
    if len(functions) > 1 or len(arg_dims) > 1:
        return _Refusal(
            functions[0], "the packed workloads' M are not one argument dim of one function"
        )
    (function,) = functions
    if function.name != "util.func":
        return _Refusal(function, f"the packed workloads are in a {function.name}, not a util.func")
    attributes = function.attributes
    if (
        "sym_visibility" in attributes
        and ir.StringAttr(attributes["sym_visibility"]).value != "public"
    ):
        return _Refusal(function, "the packed workloads are not in a public function")
    if len(function.regions[0].blocks) != 1:
        return _Refusal(function, "the entry function has more than one block")
    return function, arg_dims.pop()


def _function_of(op: ir.Operation) -> ir.Operation | None:
    parent = op.parent
    while parent is not None and parent.name not in ("func.func", "util.func"):
        parent = parent.parent
    return None if parent is None else parent.operation


def _split(function: ir.Operation, name: str, arg_dim: ArgDim, split: EntrySplit) -> None:
    """``function`` becomes the entry calling its copies: ``$dcmlir`` (the cascades go in,
    where ``split.ranges``), ``$default`` (where ``split.default``) and ``$iree``."""
    suffixes = [s for s, on in (("dcmlir", split.ranges), ("default", split.default)) if on]
    with ir.InsertionPoint(function.parent.regions[0].blocks[0]):
        copies = [function] + [function.clone() for _ in suffixes]
        entry = function.clone()
    never = ir.Attribute.parse(_NEVER_INLINE)
    for copy, suffix in zip(copies, [*suffixes, "iree"], strict=True):
        copy.attributes["sym_name"] = ir.StringAttr.get(f"{name}${suffix}")
        copy.attributes["sym_visibility"] = ir.StringAttr.get("private")
        copy.attributes["inlining_policy"] = never
        if "iree.reflection" in copy.attributes:
            del copy.attributes["iree.reflection"]
        if suffix != "dcmlir":
            copy.attributes[LEFT_TO_IREE] = ir.UnitAttr.get()
        if suffix != "iree":
            # any op with IREE's data-tiling hint stops IREE hinting the others in its
            # function: in $dcmlir the cascades' own encodings are all that is data-tiled,
            # and a `default` branch runs IREE's default lowering as the search measured it
            # (data-tiled in its branch, its weight was packed on every call: 1.4x data
            # tiling's time at T <= 8 on a t5); $default is IREE's default build
            copy.attributes[DATA_TILING_HINT] = ir.UnitAttr.get()
    block = entry.regions[0].blocks[0]
    for op in reversed(list(block.operations)):
        op.erase()
    results = ir.FunctionType(ir.TypeAttr(entry.attributes["function_type"]).value).results
    arguments = list(block.arguments)
    with ir.InsertionPoint(block), entry.location:
        size = _arg_dim(arguments[arg_dim.arg], arg_dim.dim)
        choices = [(split.default, f"{name}$default"), (split.ranges, f"{name}$dcmlir")]
        found = _calls(size, [c for c in choices if c[0]], f"{name}$iree", arguments, results)
        ir.Operation.create("util.return", operands=found)


def _calls(
    size: ir.Value,
    choices: list[tuple[Ranges, str]],
    otherwise: str,
    arguments: list[ir.Value],
    results: list[ir.Type],
) -> list[ir.Value]:
    """The results of calling the first choice whose ranges hold ``size`` (else ``otherwise``),
    as nested ``scf.if``."""
    if not choices:
        call = ir.Operation.create(
            "util.call",
            results=results,
            operands=arguments,
            attributes={"callee": ir.FlatSymbolRefAttr.get(otherwise)},
        )
        return list(call.results)
    (ranges, callee), rest = choices[0], choices[1:]
    branch = scf.IfOp(_within(size, ranges), results, has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp(_calls(size, [], callee, arguments, results))
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp(_calls(size, rest, otherwise, arguments, results))
    return list(branch.results)


def _within(size: ir.Value, ranges: Ranges) -> ir.Value:
    """``size`` in one of ``ranges`` (a first range from 1 down: ``size <= hi``)."""
    found: ir.Value | None = None
    for lo, hi in ranges:
        inside = arith.CmpIOp(arith.CmpIPredicate.ule, size, _index(hi)).result
        if lo > 1:
            above = arith.CmpIOp(arith.CmpIPredicate.uge, size, _index(lo)).result
            inside = arith.AndIOp(above, inside).result
        found = inside if found is None else arith.OrIOp(found, inside).result
    assert found is not None, "no range to run dcmlir's cascades in"
    return found


def _arg_dim(argument: ir.Value, dim: int) -> ir.Value:
    """The extent of ``argument``'s ``dim``: a tensor's, or (a module lowered to global
    optimization, past IREE's ABI) a ``!hal.buffer_view``'s."""
    if not str(argument.type).startswith("!hal.buffer_view"):
        return tensor.DimOp(argument, _index(dim)).result
    return ir.Operation.create(
        "hal.buffer_view.dim",
        results=[ir.IndexType.get()],
        operands=[argument],
        attributes={"index": ir.IntegerAttr.get(ir.IndexType.get(), dim)},
    ).result


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result
