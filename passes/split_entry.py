"""``dcmlir-split-entry``: leave the shapes where the plan has nothing better than IREE's
data tiling to an untouched copy of the entry function.

A cascade is an ``scf.if`` per op, and IREE forms dispatches inside each branch: with
data tiling that loses what IREE does across ops (an op's output written straight into
the next op's packed layout, elementwise consumers run on the packed tiles). Measured
on GPT-2 (docs/design.md section 12), a module whose ops all run IREE's own data tiling,
written as dcmlir's cascades, is 3-12% slower than IREE's data-tiled build of the
original. So where every packed workload's plan runs data tiling's own tile (T above the
widest bound of the other kernels), the entry calls a copy of the original function that no
dcmlir pass touches, and the module is compiled with data tiling
(:data:`~dcmlir.codegen.packed.DATA_TILING_FLAGS`); below it, the copy with the cascades.

The entry ``@f`` becomes ``@f`` (the same signature and attributes: ``argN.D <= S ?
@f$dcmlir : @f$iree``), ``@f$dcmlir`` (the function the cascades are emitted into) and
``@f$iree`` (marked :data:`LEFT_TO_IREE`, which ``dcmlir-emit-dispatch`` skips); both
copies are private and never inlined, so each compiles as a function of its own.
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
    Mmt4dCandidate,
    PackedCandidate,
    data_tiling_m0,
)
from dcmlir.workload import NotAWorkload, workloads

__all__ = [
    "LEFT_TO_IREE",
    "EntrySplit",
    "SplitEntryPass",
    "peer_threshold",
    "split_entry",
]

LEFT_TO_IREE = "dcmlir.left_to_iree"
"""Unit attribute on the function copy that dcmlir leaves as it was."""

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


@dataclass(frozen=True)
class EntrySplit:
    """Where the entry was split: ``function``'s ``arg_dim`` <= ``threshold`` runs dcmlir."""

    function: str
    arg_dim: ArgDim
    threshold: int

    def describe(self) -> str:
        return (
            f"@{self.function}: {self.arg_dim} <= {self.threshold} runs dcmlir's kernels, "
            f"above it IREE's data tiling of the function as it was"
        )


def peer_threshold(plan: Plan) -> int | None:
    """The largest M at which a packed workload's tree picks anything but data tiling's own
    tile (a narrower packed kernel, or a kernel that reads the weight as it is, as a plan
    of two weight layouts does); None when no workload does (nothing to split for)."""
    found: int | None = None
    for planned in plan.workloads:
        if not _is_packed(planned):
            continue
        (dim,) = planned.dims
        lo, hi = dim.range
        for m in range(lo, hi + 1):
            chosen = planned.select({dim.loop: m})  # an exact shape's build too
            kernel = chosen.candidate if chosen is not None else DataTiledCandidate()
            if not _data_tilings_own(kernel):
                found = m if found is None else max(found, m)
    return found


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
    threshold = peer_threshold(plan)
    if threshold is None:
        ctx.remark(
            module,
            "entry not split: no workload runs a packed kernel narrower than data tiling's tile",
        )
        return None
    with module.context:
        found = _packed_entry(module, plan, ctx.diagnostics.source_name)
        if isinstance(found, _Refusal):
            ctx.remark(found.where, f"entry not split: {found.reason}")
            return None
        function, arg_dim = found
        name = ir.StringAttr(function.attributes["sym_name"]).value
        split = EntrySplit(name, arg_dim, threshold)
        ctx.remark(function, f"entry split: {split.describe()}")
        _split(function, name, arg_dim, threshold)
    return split


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


def _split(function: ir.Operation, name: str, arg_dim: ArgDim, threshold: int) -> None:
    with ir.InsertionPoint(function.parent.regions[0].blocks[0]):
        peer = function.clone()
        entry = function.clone()
    never = ir.Attribute.parse(_NEVER_INLINE)
    for copy, suffix in ((function, "dcmlir"), (peer, "iree")):
        copy.attributes["sym_name"] = ir.StringAttr.get(f"{name}${suffix}")
        copy.attributes["sym_visibility"] = ir.StringAttr.get("private")
        copy.attributes["inlining_policy"] = never
        if "iree.reflection" in copy.attributes:
            del copy.attributes["iree.reflection"]
    peer.attributes[LEFT_TO_IREE] = ir.UnitAttr.get()
    block = entry.regions[0].blocks[0]
    for op in reversed(list(block.operations)):
        op.erase()
    results = ir.FunctionType(ir.TypeAttr(entry.attributes["function_type"]).value).results
    arguments = list(block.arguments)
    with ir.InsertionPoint(block), entry.location:
        size = tensor.DimOp(arguments[arg_dim.arg], _index(arg_dim.dim)).result
        small = arith.CmpIOp(arith.CmpIPredicate.ule, size, _index(threshold)).result
        branch = scf.IfOp(small, results, has_else=True)
        for region, callee in (
            (branch.then_block, f"{name}$dcmlir"),
            (branch.else_block, f"{name}$iree"),
        ):
            with ir.InsertionPoint(region):
                call = ir.Operation.create(
                    "util.call",
                    results=results,
                    operands=arguments,
                    attributes={"callee": ir.FlatSymbolRefAttr.get(callee)},
                )
                scf.YieldOp(list(call.results))
        ir.Operation.create("util.return", operands=list(branch.results))


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result
