"""``dcmlir-microkernel-tile``: lay one micro-kernel over every dynamic contraction.

Each dynamic contraction becomes an ``scf.forall`` over micro-kernel tiles
whose body holds the op padded to the static micro-kernel shape: the form a
DietCode kernel has, and the one lit tests check. The pass only builds the
inputs of :mod:`dcmlir.codegen.schedule` (which ops, which sizes) and applies its
script; the script itself lives there so the tuner can reuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dcmlir.codegen.schedule import (
    TARGET_ATTR,
    LoopTiling,
    MicroKernel,
    ScheduleError,
    TiledOp,
    apply_schedule,
    build_schedule,
    loop_tiling,
    tag_attr,
)
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import ModulePass, PassContext, option
from dcmlir.workload import K, NotAWorkload, Workload, workloads


@dataclass(frozen=True)
class MicrokernelTilePass(ModulePass):
    name = "dcmlir-microkernel-tile"
    summary = "tile each dynamic contraction into padded static micro-kernels (transform dialect)"

    sizes: tuple[int, ...] = option(
        (8, 16, 8), "micro-kernel tile sizes: m,n,k or b,m,n,k (all positive)"
    )
    print_schedule: bool = option(
        False, "print the transform script instead of applying it (IR unchanged)"
    )

    def __post_init__(self) -> None:
        expected = "3 values (m,n,k) or 4 values (b,m,n,k), all positive"
        if len(self.sizes) not in (3, 4):
            raise ValueError(
                f"option 'sizes' needs {expected}; got {len(self.sizes)}: {_join(self.sizes)}"
            )
        if any(size < 1 for size in self.sizes):
            raise ValueError(f"option 'sizes' needs {expected}; got {_join(self.sizes)}")

    @property
    def kernel(self) -> MicroKernel:
        return MicroKernel.from_sizes(self.sizes)

    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        tagged = _tagged_ops(module)
        if tagged:
            raise ctx.fail(tagged[0], f"attribute '{TARGET_ATTR}' is reserved for {self.name}")
        ops, targets, single_tiles = self._targets(ctx, module)
        with module.context, ir.Location.unknown():
            schedule = build_schedule(targets)
            if self.print_schedule:
                ctx.stdout.write(f"{schedule}\n")
                return
            if not targets:
                return
            for op, target in zip(ops, targets, strict=True):
                op.attributes[TARGET_ATTR] = tag_attr(target.tag)
            # The script replaces the target ops: their Python handles dangle once it has
            # run (reading one crashed the process), so keep what is needed now.
            locations = {target.tag: op.location for op, target in zip(ops, targets, strict=True)}
            del ops
            try:
                apply_schedule(module, schedule)
            except ScheduleError as err:
                _strip_tags(module)
                where = err.location if err.location is not None else locations[0]
                raise ctx.fail(where, f"micro-kernel schedule failed: {err.message}") from None
            try:
                self._check_static(ctx, module, locations, single_tiles)
            finally:
                _strip_tags(module)

    def _targets(
        self, ctx: PassContext, module: ir.Operation
    ) -> tuple[list[ir.Operation], list[TiledOp], set[int]]:
        """The contractions to tile, with remarks for the dynamic ops left alone.

        Also the tags of the targets whose parallel loops fit in one tile (see
        :func:`_single_parallel_tile`).
        """
        ops: list[ir.Operation] = []
        targets: list[TiledOp] = []
        single_tiles: set[int] = set()
        for op, found in workloads(module, ctx.diagnostics.source_name):
            if isinstance(found, NotAWorkload):
                ctx.remark(op, f"left untouched: {found}")
                continue
            if not all(isinstance(v.type, ir.RankedTensorType) for v in op.operands):
                ctx.remark(op, "left untouched: micro-kernel tiling needs ranked tensor operands")
                continue
            tiling = loop_tiling(found, self.kernel)
            if not tiling.has_parallel_loop:
                ctx.remark(op, "left untouched: no parallel loop to tile into micro-kernels")
                continue
            if _single_parallel_tile(found, tiling):
                single_tiles.add(len(targets))
            targets.append(TiledOp(len(targets), tiling, found.element_types))
            ops.append(op)
            ctx.remark(op, f"micro-kernel {tiling.describe()}")
        return ops, targets, single_tiles

    def _check_static(
        self,
        ctx: PassContext,
        module: ir.Operation,
        locations: dict[int, ir.Location],
        single_tiles: set[int],
    ) -> None:
        """Every target must now be a static linalg op inside an ``scf.forall``.

        Except where the parallel loops fit in one tile: that ``scf.forall`` has one
        iteration and canonicalization folds it away, leaving the static op in place.
        ``locations``: each target's location by tag, read before the script ran.
        """
        found: dict[int, list[ir.Operation]] = {tag: [] for tag in locations}
        for op in _tagged_ops(module):
            found[ir.IntegerAttr(op.attributes[TARGET_ATTR]).value].append(op)
        for tag, inner_ops in found.items():
            if not inner_ops:
                raise ctx.fail(locations[tag], "micro-kernel tiling left no linalg op behind")
            for inner in inner_ops:
                if not _inside_forall(inner) and tag not in single_tiles:
                    raise ctx.fail(inner, "micro-kernel op is not inside an scf.forall region")
                dynamic = [str(v.type) for v in inner.operands if not _is_static(v.type)]
                if dynamic:
                    raise ctx.fail(
                        inner,
                        f"micro-kernel op still has dynamic operands after padding: "
                        f"{', '.join(dynamic)}",
                    )


def _single_parallel_tile(workload: Workload, tiling: LoopTiling) -> bool:
    """Whether every parallel loop is static and no larger than its tile (one forall step)."""
    return all(
        dim.extent is not None and dim.extent <= size
        for dim, size, role in zip(workload.dims, tiling.sizes, tiling.roles, strict=True)
        if role != K
    )


def _join(sizes: tuple[int, ...]) -> str:
    return ",".join(map(str, sizes)) or "(none)"


def _tagged_ops(module: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if TARGET_ATTR in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _strip_tags(module: ir.Operation) -> None:
    for op in _tagged_ops(module):
        del op.attributes[TARGET_ATTR]


def _inside_forall(op: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None:
        # .operation: on an OpView of func.func, .name is the symbol, not the op name.
        if parent.operation.name == "scf.forall":
            return True
        parent = parent.operation.parent
    return False


def _is_static(value_type: ir.Type) -> bool:
    return not isinstance(value_type, ir.ShapedType) or value_type.has_static_shape
