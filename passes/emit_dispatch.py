"""``dcmlir-emit-dispatch``: replace each planned dynamic op by its tuned kernels' dispatcher.

Every dynamic op whose workload is in the plan becomes an ``scf.if`` cascade
(docs/design.md, section 8 (plans, the decision tree and the dispatch shape)): the
dynamic loop extents are read with ``tensor.dim``; a shape outside the tuned range
runs the op as it was, for IREE's default lowering (which also handles 0 and
anything above the range); inside it, where it costs the plan's calls less, the case is
read from a table of every shape of the range with one ``util.buffer.load``
(:mod:`dcmlir.dispatch.case_table`: a handful of VM ops per call whatever the tree's
size), else a large tree's top levels are ``scf.if``
branches and the subtree a shape reaches, evaluated as ``arith.cmpi``/``arith.select``
(:mod:`dcmlir.dispatch.branching`: about 11 ns a split per call), gives the position
of the chosen kernel among the subtree's kernels, and a balanced ``scf.if`` search
over those positions runs the clone of the op carrying that kernel's
``compilation_info``. One clone per distinct kernel (per side of a branch), not per
leaf, and a nesting depth of log2(kernels): IREE 3.13 miscompiled the leaf-per-branch
form at 8 nested levels around ops that share an input (a null buffer in a dispatch at
run time, see docs/model_tuning.md), and ran the wrong kernel with the tree as nested
``scf.if`` over an index (docs/design.md, section 8).

Two things keep the dispatched module as fast as IREE's own around the tuned op:

- *fused consumers move into the branches*: the elementwise ops IREE would fuse
  into the op's dispatch (bias, GELU, residual add, a transpose: a chain of
  single-use, all-parallel ``linalg.generic`` ops) are cloned into every branch
  after the op, so each branch still forms one dispatch; left after the
  ``scf.if`` they would become dispatches of their own;
- *shapes are tied at IREE's global-optimization level*: in a ``util.func``
  (IREE's functions after its ABI conversion) the cascade's dynamic results get
  ``flow.tensor.tie_shape`` with their sizes, which IREE needs to resolve the
  dims of a region's results; so do cascades inside a loop (``scf.for``) in any
  function: IREE resolves the dims of a loop-carried tensor through the shape of
  the value the loop yields, which an ``scf.if`` does not give.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dcmlir.codegen.branches import PackedBranch, PackedForms
from dcmlir.codegen.case_lookup import load_case, outside_range
from dcmlir.codegen.exact import balanced_cases, exact_cascade, fix_extents
from dcmlir.codegen.fusion import FusedGroup, fused_consumers
from dcmlir.codegen.packed import dispatch_region, loop_dims, region_return
from dcmlir.codegen.shape_ties import FUNCTION_OPS, tie_where_needed
from dcmlir.dispatch import Leaf, Node, Plan, PlanError, Split, WorkloadPlan, kernels_under
from dcmlir.dispatch.branching import branch_levels, is_branched
from dcmlir.dispatch.case_table import CaseTable, case_table
from dcmlir.ir.mlir import arith, ir, scf
from dcmlir.ir.pass_base import ModulePass, PassContext, option
from dcmlir.passes.dispatch_checks import (
    Remark,
    check_all_matched,
    check_packing,
    encoded_kernels,
    explicit_kernels,
    kernel_infos,
)
from dcmlir.passes.split_entry import LEFT_TO_IREE
from dcmlir.space import Mmt4dCandidate, packing_problem
from dcmlir.workload import M, NotAWorkload, Workload, workloads

KERNEL_ATTR = "dcmlir.kernel"
"""Set on every op the pass emits (the kernel's candidate key, or ``fallback``), so that
running the pass again leaves its own output alone."""

FALLBACK = "fallback"
COMPILATION_INFO = "compilation_info"
TABLE_CHOICES = ("auto", "always", "never")


@dataclass(frozen=True)
class EmitDispatchPass(ModulePass):
    name = "dcmlir-emit-dispatch"
    summary = "replace each planned dynamic op by an scf.if cascade over its tuned kernels"

    plan: str = option("", "plan file (JSON, docs/plan.md) written by the tuner; required")
    table: str = option(
        "auto",
        "read each shape's case from a table with one load: auto (where that costs the"
        " plan's calls less than the tree), always (wherever it fits), never",
    )

    def __post_init__(self) -> None:
        if not self.plan:
            raise ValueError("option 'plan' is required: plan=FILE, a plan JSON the tuner wrote")
        if self.table not in TABLE_CHOICES:
            raise ValueError(f"option 'table' is {self.table!r}: one of {', '.join(TABLE_CHOICES)}")

    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        try:
            plan = Plan.load(self.plan)
        except PlanError as err:
            raise ctx.fail(module, str(err)) from None
        emit_dispatch(ctx, module, plan, origin=self.plan, table=self.table)


@dataclass(frozen=True)
class _Target:
    """One op to dispatch, with everything checked before the IR is touched."""

    op: ir.Operation
    workload: Workload
    plan: WorkloadPlan
    infos: dict[int, ir.Attribute | None]  # kernel index -> compilation_info (None: default)
    group: FusedGroup  # the op and the consumers IREE fuses after it
    # kernel index -> M's iteration size in its encodings (None: ``?``), for the packed and
    # data-tiled kernels: they run on IREE's data-tiling encodings (docs/design.md section 12)
    encoded: dict[int, int | None] = field(default_factory=dict)
    # kernel index -> the explicit pack / mmt4d / unpack kernels (dcmlir.codegen.mmt4d)
    explicit: dict[int, Mmt4dCandidate] = field(default_factory=dict)

    @property
    def packs_weight(self) -> bool:
        """Whether the kernels read the weight packed (the packed families: a constant
        weight, packed once before the dispatch)."""
        return bool(self.encoded or self.explicit) and packing_problem(self.workload) is None

    @property
    def fallback(self) -> int | None:
        """The kernel outside the tuned range when the weight is packed (it then lives packed
        only): any encoded kernel, run as IREE's own data tiling (M's size ``?``, valid for
        every M), else the explicit kernel with the most rows (valid for every M); None
        otherwise (the op as it was)."""
        if not self.packs_weight:
            return None
        if self.encoded:
            return min(self.encoded)
        return max(self.explicit, key=lambda k: (self.explicit[k].m0, -k))

    def serves_every_size(self, kernel: int) -> bool:
        """Whether ``kernel`` is valid for every M as the tree runs it (IREE's own data
        tiling, an explicit kernel), so a tree of it alone needs no range check."""
        return kernel in self.explicit or (kernel in self.encoded and self.encoded[kernel] is None)


def emit_dispatch(
    ctx: PassContext, module: ir.Operation, plan: Plan, origin: str = "<plan>", table: str = "auto"
) -> int:
    """Rewrite every op of ``module`` that ``plan`` covers; returns how many were rewritten.
    ``table``: each shape's case is read from a table (:mod:`dcmlir.dispatch.case_table`)
    where it costs the calls less than the tree (``auto``), wherever it fits (``always``),
    or never.

    All checks (keys, routes, attributes) run before the first rewrite, so a
    failing plan leaves the module as it was.
    """
    targets: list[_Target] = []
    remarks: list[Remark] = []  # in IR order, emitted once all checks pass
    module_keys: dict[str, str] = {}
    matched: set[str] = set()
    taken: set[ir.Operation] = set()  # fused into an earlier target's group
    with module.context:
        for op, found in list(workloads(module, ctx.diagnostics.source_name)):
            if _left_to_iree(op):  # a copy dcmlir-split-entry keeps as it was: IREE runs it
                if not isinstance(found, NotAWorkload):
                    module_keys.setdefault(found.key, found.kind)
                    matched.add(found.key)
                continue
            if isinstance(found, NotAWorkload):
                remarks.append((op, f"left untouched: {found}", False))
                continue
            module_keys.setdefault(found.key, found.kind)
            if KERNEL_ATTR in op.attributes:  # emitted by an earlier run of this pass
                matched.add(found.key)
                continue
            planned = plan.for_workload(found.key)
            if planned is None:
                remarks.append(
                    (
                        op,
                        f"left untouched: workload {found.key} ({found.kind}) is not in the plan",
                        False,
                    )
                )
                continue
            matched.add(found.key)
            group = fused_consumers(op, taken)
            taken.update(group.members)
            infos = kernel_infos(ctx, op, found, planned)
            encoded, explicit = encoded_kernels(planned), explicit_kernels(planned)
            check_packing(ctx, op, found, planned, explicit, remarks)
            targets.append(_Target(op, found, planned, infos, group, encoded, explicit))
            fused = f", {len(group)} fused consumer(s) in each branch" if len(group) else ""
            remarks.append(
                (
                    op,
                    f"dispatch: {len(planned.tree.kernels())} kernels, "
                    f"tree depth {planned.tree.depth}, range {planned.describe_range()}{fused}"
                    + (f", {len(planned.exact)} exact shape(s) first" if planned.exact else ""),
                    False,
                )
            )
        check_all_matched(ctx, module, plan, origin, matched, module_keys)
        for op, message, warning in remarks:
            (ctx.warning if warning else ctx.remark)(op, message)
        for target in targets:
            tabled = None if table == "never" else case_table(target.plan, table == "always")
            _rewrite(target, tabled)
    return len(targets)


# --- the cascade -----------------------------------------------------------------------------


def _rewrite(target: _Target, table: CaseTable | None) -> None:
    """Build the cascade where the group's last op was, route its uses there, erase the group.

    The group is the op and its fused consumers; every operand of the group is
    defined before its last op, and no op outside the group reads a value inside it.
    """
    op, group = target.op, target.group
    last = group.last
    result_types = [group.output_type]
    with ir.InsertionPoint(last), last.location:
        dims = loop_dims(op, target.workload)
        sizes = group.output_sizes()
        kernels = target.plan.tree.kernels()  # the distinct kernels the tree picks
        m_bound = next((d.range[1] for d in target.plan.dims if d.role == M), None)
        packed = PackedForms.of(
            op, target.workload, dims, target.encoded, target.explicit, target.packs_weight, m_bound
        )
        alone = len(kernels) == 1 and target.serves_every_size(kernels[0])
        if alone and target.fallback is not None and not target.plan.exact:
            # one kernel valid for every M, inside the range and out of it: no cascade at all
            chosen = _clone_group(target, sizes, *_kernel(target, kernels[0], packed))
            _replace_group(target, [group.restore(chosen[0], sizes)])
            return
        values = [dims[d.loop] for d in target.plan.dims]
        outside = outside_range(values, [d.range for d in target.plan.dims])
        cascade = scf.IfOp(outside, result_types, has_else=True)
        with ir.InsertionPoint(cascade.then_block):
            fallback = target.fallback
            if fallback is None:
                scf.YieldOp(_clone_group(target, sizes, FALLBACK, None))
            else:
                branch = packed.branch(fallback, any_size=True)
                scf.YieldOp(_clone_group(target, sizes, FALLBACK, None, branch))
        with ir.InsertionPoint(cascade.else_block):
            if table is not None:
                case = load_case(values, table.lows, table.extents, table.cases)
                scf.YieldOp(_emit_table(target, sizes, case, table.count, result_types, packed))
            else:
                levels, root = branch_levels(target.plan.tree), target.plan.tree.root
                scf.YieldOp(
                    _with_exact(
                        target,
                        values,
                        result_types,
                        lambda: _emit_tree(target, sizes, root, dims, result_types, packed, levels),
                    )
                )
        results = list(cascade.results)
        results = tie_where_needed(op, results, sizes)
        results = [group.restore(value, sizes) for value in results]
    _replace_group(target, results)


def _with_exact(
    target: _Target,
    dims: Sequence[ir.Value],
    result_types: list[ir.Type],
    tree: Callable[[], list[ir.Value]],
) -> list[ir.Value]:
    """The shapes with their own build first (:mod:`dcmlir.codegen.exact`), then the tree."""
    exact = target.plan.exact
    if not exact:
        return tree()
    build = functools.partial(_exact_clone, target)
    return exact_cascade([e.dims for e in exact], dims, result_types, build, tree)


def _exact_clone(target: _Target, number: int) -> list[ir.Value]:
    """The op built for the plan's ``number``-th exact shape (its extents static)."""
    found = target.plan.exact[number]
    clone = _clone(target.op, target.plan.kernels[found.kernel].candidate_key, None)
    fix_extents(clone, target.workload, found.dims)
    return [target.group.clone_after(clone)]


def _emit_table(
    target: _Target,
    sizes: Sequence[ir.Value],
    case: ir.Value,
    count: int,
    result_types: list[ir.Type],
    packed: PackedForms,
) -> list[ir.Value]:
    """The balanced search over a table's ``count`` cases: the tree's kernels, then the
    exact shapes (:class:`~dcmlir.dispatch.case_table.CaseTable`)."""
    order = target.plan.tree.kernels()

    def build(number: int) -> list[ir.Value]:
        if number >= len(order):
            return _exact_clone(target, number - len(order))
        return _clone_group(target, sizes, *_kernel(target, order[number], packed))

    return balanced_cases(case, list(range(count)), result_types, build)


def _replace_group(target: _Target, results: Sequence[ir.Value]) -> None:
    """Route the uses of the group's results to ``results`` and erase the group."""
    last = target.group.last
    for old, new in zip(last.results, results, strict=True):
        old.replace_all_uses_with(new)
    for member in reversed(target.group.members):
        member.erase()
    target.op.erase()


def _left_to_iree(op: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None and parent.name not in FUNCTION_OPS:
        parent = parent.parent
    return parent is not None and LEFT_TO_IREE in parent.attributes


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def _emit_tree(
    target: _Target,
    sizes: Sequence[ir.Value],
    node: Node,
    dims: dict[int, ir.Value],
    result_types: list[ir.Type],
    packed: PackedForms,
    levels: int,
) -> list[ir.Value]:
    """The kernel ``node``'s subtree picks: its top splits as ``scf.if`` branches while
    :func:`~dcmlir.dispatch.branching.is_branched` (each side evaluates its own subtree),
    then the subtree as selects and the balanced search over its kernels."""
    kernels = kernels_under(node)
    if len(kernels) == 1:
        return _clone_group(target, sizes, *_kernel(target, kernels[0], packed))
    if is_branched(node, levels):
        assert isinstance(node, Split)
        below = arith.CmpIOp(arith.CmpIPredicate.ule, dims[node.loop], _index(node.threshold))
        branch = scf.IfOp(below.result, result_types, has_else=True)
        for block, side in ((branch.then_block, node.left), (branch.else_block, node.right)):
            with ir.InsertionPoint(block):
                picked = _emit_tree(target, sizes, side, dims, result_types, packed, levels - 1)
                scf.YieldOp(picked)
        return list(branch.results)
    positions = {kernel: position for position, kernel in enumerate(target.plan.tree.kernels())}
    case = _select_tree(node, dims, positions)
    return _emit_cases(target, sizes, case, kernels, result_types, packed)


def _select_tree(node: Node, dims: dict[int, ir.Value], cases: dict[int, int]) -> ir.Value:
    """The case number (index into the tree's kernels) the tree picks, as arith.select ops."""
    if isinstance(node, Leaf):
        return _index(cases[node.kernel])
    below = arith.CmpIOp(arith.CmpIPredicate.ule, dims[node.loop], _index(node.threshold))
    left = _select_tree(node.left, dims, cases)
    right = _select_tree(node.right, dims, cases)
    return arith.SelectOp(below.result, left, right).result


def _emit_cases(
    target: _Target,
    sizes: Sequence[ir.Value],
    case: ir.Value,
    kernels: Sequence[int],
    result_types: list[ir.Type],
    packed: PackedForms,
) -> list[ir.Value]:
    """The kernel whose position is ``case``: a balanced scf.if search over the positions."""
    order = target.plan.tree.kernels()

    def build(position: int) -> list[ir.Value]:
        return _clone_group(target, sizes, *_kernel(target, order[position], packed))

    return balanced_cases(case, [order.index(k) for k in kernels], result_types, build)


def _kernel(
    target: _Target, kernel: int, packed: PackedForms
) -> tuple[str, ir.Attribute | None, PackedBranch | None]:
    return target.plan.kernels[kernel].candidate_key, target.infos[kernel], packed.branch(kernel)


def _clone_group(
    target: _Target,
    sizes: Sequence[ir.Value],
    kernel: str,
    info: ir.Attribute | None,
    packed: PackedBranch | None = None,
) -> list[ir.Value]:
    """The op (config replaced by ``info``, or its packed form) and its fused consumers,
    reading the clones; an encoded group is one ``flow.dispatch.region`` (result sizes
    ``sizes``), as IREE's data tiling forms it."""
    group = target.group
    if packed is not None and not packed.region:
        return [group.clone_after(_marked(packed.build(), kernel))]
    if packed is not None:
        region = dispatch_region([group.output_type], sizes)
        with ir.InsertionPoint(region.regions[0].blocks[0]):
            region_return([group.clone_after(_marked(packed.build(), kernel))])
        return list(region.results)
    return [group.clone_after(_clone(target.op, kernel, info))]


def _marked(op: ir.Operation, kernel: str) -> ir.Operation:
    op.attributes[KERNEL_ATTR] = ir.StringAttr.get(kernel)
    return op


def _clone(op: ir.Operation, kernel: str, info: ir.Attribute | None) -> ir.Operation:
    """The op with operands unchanged (same block nesting), its config replaced by ``info``."""
    clone = op.clone()
    if COMPILATION_INFO in clone.attributes:
        del clone.attributes[COMPILATION_INFO]
    if info is not None:
        clone.attributes[COMPILATION_INFO] = info
    clone.attributes[KERNEL_ATTR] = ir.StringAttr.get(kernel)
    return clone
