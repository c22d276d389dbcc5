"""What ``dcmlir-emit-dispatch`` checks before it rewrites anything: the plan's kernels
parse and fit the op, packed kernels have a weight to pack, every planned workload has its
op (so a failing plan leaves the module as it was)."""

from __future__ import annotations

from collections.abc import Sequence

from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext
from dcmlir.space import DataTiledCandidate, Mmt4dCandidate, PackedCandidate, packing_problem
from dcmlir.workload import Workload

__all__ = [
    "Remark",
    "check_all_matched",
    "check_packing",
    "encoded_kernels",
    "explicit_kernels",
    "kernel_infos",
]

Remark = tuple[ir.Operation, str, bool]
"""(op, message, is a warning): a diagnostic the pass emits once every check passed."""


def kernel_infos(
    ctx: PassContext, op: ir.Operation, workload: Workload, planned: WorkloadPlan
) -> dict[int, ir.Attribute | None]:
    """The parsed ``compilation_info`` of every kernel a leaf runs; errors name the kernel."""
    dynamic = [d.index for d in workload.dynamic_dims]
    loops = [d.loop for d in planned.dims]
    if dynamic != loops:
        raise ctx.fail(
            op,
            f"plan for workload {workload.key} dispatches on loops {_loops(loops)}, "
            f"the op's dynamic loops are {_loops(dynamic)}",
        )
    infos: dict[int, ir.Attribute | None] = {}
    for index in planned.tree.kernels():
        kernel = planned.kernels[index]
        if isinstance(kernel.candidate, PackedCandidate | DataTiledCandidate | Mmt4dCandidate):
            infos[index] = None
            continue
        if kernel.route != "config":
            raise ctx.fail(
                op,
                f"plan for workload {workload.key}: kernel {index} ({kernel.candidate_key}) "
                f"uses route '{kernel.route}'; dcmlir-emit-dispatch emits only 'config' "
                "kernels (compilation_info)",
            )
        text = kernel.candidate.compilation_info(workload)
        if text is None:
            infos[index] = None
            continue
        try:
            infos[index] = ir.Attribute.parse(text)
        except ir.MLIRError as err:
            raise ctx.fail(
                op,
                f"kernel {index} ({kernel.candidate_key}): compilation_info does not parse: {err}",
            ) from None
    return infos


def encoded_kernels(planned: WorkloadPlan) -> dict[int, int | None]:
    """M's iteration size of every packed or data-tiled kernel the tree runs (None: ``?``)."""
    found: dict[int, int | None] = {}
    for index in planned.tree.kernels():
        candidate = planned.kernels[index].candidate
        if isinstance(candidate, DataTiledCandidate):
            found[index] = None
        elif isinstance(candidate, PackedCandidate):
            found[index] = candidate.m0
    return found


def check_packing(
    ctx: PassContext,
    op: ir.Operation,
    workload: Workload,
    planned: WorkloadPlan,
    explicit: dict[int, Mmt4dCandidate],
    remarks: list[Remark],
) -> None:
    """An op whose tree packs the weight (a packed or explicit kernel; IREE's data tiling
    alone packs both inputs anyway) fails where it cannot be packed, and is warned about
    where its weight is not a constant (packed on every call)."""
    tree = planned.tree.kernels()
    packs = any(isinstance(planned.kernels[k].candidate, PackedCandidate) for k in tree)
    if not packs and not explicit:
        return
    problem = packing_problem(workload)
    if problem is not None and 1 in workload.constant_operands:
        raise ctx.fail(op, f"plan for workload {workload.key} runs packed kernels: {problem}")
    if problem is not None:
        remarks.append(
            (op, "the weight is not a constant: packed kernels pack it on every call", True)
        )


def explicit_kernels(planned: WorkloadPlan) -> dict[int, Mmt4dCandidate]:
    """The explicit mmt4d kernels the tree runs, by kernel index."""
    found = {}
    for index in planned.tree.kernels():
        candidate = planned.kernels[index].candidate
        if isinstance(candidate, Mmt4dCandidate):
            found[index] = candidate
    return found


def _loops(loops: Sequence[int]) -> str:
    return ", ".join(f"d{loop}" for loop in loops) or "none"


def check_all_matched(
    ctx: PassContext,
    module: ir.Operation,
    plan: Plan,
    origin: str,
    matched: set[str],
    module_keys: dict[str, str],
) -> None:
    """A planned workload with no op is a plan for another module: say which and what is here."""
    missing = [w for w in plan.workloads if w.key not in matched]
    if not missing:
        return
    wanted = ", ".join(f"{w.key} ({w.kind})" for w in missing)
    here = ", ".join(f"{key} ({kind})" for key, kind in module_keys.items()) or "none"
    raise ctx.fail(
        module,
        f"plan {origin} (for '{plan.source}') has workloads that match no op in this module: "
        f"{wanted}; the module's workloads: {here}",
    )
