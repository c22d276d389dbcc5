"""Micro-kernel schedules as transform-dialect scripts built from Python.

A schedule has two halves kept apart on purpose: the *tunable values* (a
:class:`MicroKernel`, mapped onto one op's loops as a :class:`LoopTiling`) and
the *template* (small functions over transform handles: match, tile, pad,
clean up). The tuner varies the first and never touches the second.

The script tiles each target op into micro-kernels with ``tile_using_forall``
over its parallel loops (batch, M, N) and ``tile_using_for`` over its
reductions (K), then pads every tile to the static micro-kernel shape, so the
result shows one static linalg op per micro-kernel region (docs/design.md,
section 2, "The two faces of a schedule", face 1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dcmlir.ir.mlir import interpreter, ir, structured, transform
from dcmlir.workload import BATCH, K, M, N, Workload

TARGET_ATTR = "dcmlir.mk_target"
"""Set by the pass on each op to tile (a unique ``i64``), matched by the script, then removed."""

ENTRY_POINT = "__transform_main"


@dataclass(frozen=True)
class MicroKernel:
    """One micro-kernel: static tile sizes of the batch, M, N and K loops."""

    b: int
    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        for role, size in zip("bmnk", self.sizes, strict=True):
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"micro-kernel size {role}={size!r} must be a positive integer")

    @classmethod
    def from_sizes(cls, sizes: Sequence[int]) -> MicroKernel:
        """``(m, n, k)`` or ``(b, m, n, k)``, as a user writes them; b defaults to 1."""
        values = tuple(sizes)
        if len(values) == 3:
            return cls(1, *values)
        if len(values) == 4:
            return cls(*values)
        raise ValueError(
            f"micro-kernel sizes need 3 values (m,n,k) or 4 values (b,m,n,k), got {len(values)}"
        )

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        return (self.b, self.m, self.n, self.k)

    def size_of(self, role: str) -> int:
        return {BATCH: self.b, M: self.m, N: self.n, K: self.k}[role]

    def describe(self) -> str:
        if self.b == 1:
            return f"{self.m}x{self.n}x{self.k} (m,n,k)"
        return f"{self.b}x{self.m}x{self.n}x{self.k} (b,m,n,k)"


@dataclass(frozen=True)
class LoopTiling:
    """A micro-kernel laid onto one op's loops: a tile size and a role per loop."""

    sizes: tuple[int, ...]
    roles: tuple[str, ...]

    @property
    def parallel_sizes(self) -> tuple[int, ...]:
        """Sizes for ``tile_using_forall``: reduction loops are left whole (0)."""
        return tuple(
            0 if role == K else size for size, role in zip(self.sizes, self.roles, strict=True)
        )

    @property
    def reduction_sizes(self) -> tuple[int, ...]:
        """Sizes for ``tile_using_for``: parallel loops are already tiled (0)."""
        return tuple(
            size if role == K else 0 for size, role in zip(self.sizes, self.roles, strict=True)
        )

    @property
    def has_parallel_loop(self) -> bool:
        return any(role != K for role in self.roles)

    def describe(self) -> str:
        return f"{'x'.join(map(str, self.sizes))} ({','.join(self.roles)})"


def loop_tiling(workload: Workload, kernel: MicroKernel) -> LoopTiling:
    """Give the innermost loop of each role its micro-kernel size and every other loop 1.

    Tiling the outer loops of a role by 1 keeps the micro-kernel the same
    static block whatever the op's layout (e.g. several M loops after a
    reshape); the last loop of a role is the one a kernel vectorises along.
    """
    innermost = {
        role: max(d.index for d in workload.dims_of(role))
        for role in {d.role for d in workload.dims}
    }
    sizes = tuple(
        kernel.size_of(d.role) if innermost[d.role] == d.index else 1 for d in workload.dims
    )
    return LoopTiling(sizes, tuple(d.role for d in workload.dims))


@dataclass(frozen=True)
class TiledOp:
    """One op the schedule tiles: its tag value, its tiling, its operands' element types."""

    tag: int
    tiling: LoopTiling
    element_types: tuple[str, ...]  # every operand, inputs then inits


# --- the template: small functions over transform handles ------------------------------------


def _any_op() -> ir.Type:
    return transform.AnyOpType.get()


def tag_attr(tag: int) -> ir.IntegerAttr:
    """The value of ``TARGET_ATTR`` that marks target ``tag`` (needs an active context)."""
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), tag)


def match_target(root: ir.Value, tag: int) -> ir.Value:
    """The one payload op carrying ``TARGET_ATTR = tag``."""
    return structured.MatchOp(_any_op(), root, op_attrs={TARGET_ATTR: tag_attr(tag)}).result


def tile_parallel(op: ir.Value, sizes: Sequence[int]) -> ir.Value:
    """Tile the parallel loops into an ``scf.forall``; returns the tiled op."""
    return structured.TileUsingForallOp(op, tile_sizes=list(sizes)).tiled_op


def tile_reduction(op: ir.Value, sizes: Sequence[int]) -> ir.Value:
    """Tile the reduction loops into ``scf.for`` inside the micro-kernel region."""
    if not any(sizes):
        return op
    return structured.TileUsingForOp(op, sizes=list(sizes)).tiled_linalg_op


def zero_of(element_type: str) -> ir.Attribute:
    """The padding value for one operand: 0 of its element type."""
    parsed = ir.Type.parse(element_type)
    if isinstance(parsed, ir.IntegerType):
        return ir.IntegerAttr.get(parsed, 0)
    return ir.FloatAttr.get(parsed, 0.0)


def pad_to_static(op: ir.Value, sizes: Sequence[int], element_types: Sequence[str]) -> ir.Value:
    """Pad every loop of a tile up to the micro-kernel size, so its operands are static."""
    return structured.PadOp(
        op,
        pad_to_multiple_of=list(sizes),
        padding_values=[zero_of(t) for t in element_types],
        padding_dimensions=list(range(len(sizes))),
        copy_back_op="none",
    ).padded


def enclosing_func(op: ir.Value) -> ir.Value:
    """The nearest isolated-from-above parent: ``func.func``, or ``util.func`` in IREE's IR."""
    return transform.GetParentOp(_any_op(), op, isolated_from_above=True, deduplicate=True).result


def cleanup(funcs: ir.Value) -> None:
    """Fold the affine/slice arithmetic tiling leaves behind, then merge duplicates."""
    patterns = transform.ApplyPatternsOp(funcs)
    with ir.InsertionPoint(patterns.patterns):
        structured.ApplyTilingCanonicalizationPatternsOp()
        transform.ApplyCanonicalizationPatternsOp()
    transform.ApplyCommonSubexpressionEliminationOp(funcs)


def micro_kernel(root: ir.Value, target: TiledOp) -> ir.Value:
    """Tile one target into padded static micro-kernels; returns its enclosing func."""
    op = match_target(root, target.tag)
    tiled = tile_parallel(op, target.tiling.parallel_sizes)
    tiled = tile_reduction(tiled, target.tiling.reduction_sizes)
    padded = pad_to_static(tiled, target.tiling.sizes, target.element_types)
    return enclosing_func(padded)


# --- the script ----------------------------------------------------------------------------


def build_schedule(targets: Sequence[TiledOp]) -> ir.Module:
    """A ``transform.with_named_sequence`` module whose ``@__transform_main`` tiles ``targets``.

    Needs an active ``ir.Context`` and ``ir.Location`` (the payload's context,
    if the script is to be applied to it).
    """
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        sequence = transform.NamedSequenceOp(
            ENTRY_POINT,
            [_any_op()],
            [],
            arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}],
        )
        with ir.InsertionPoint(sequence.body):
            funcs = [micro_kernel(sequence.bodyTarget, target) for target in targets]
            if funcs:
                merged = funcs[0] if len(funcs) == 1 else _merge(funcs)
                cleanup(merged)
            transform.YieldOp([])
    return module


def _merge(handles: Sequence[ir.Value]) -> ir.Value:
    return transform.MergeHandlesOp(list(handles), deduplicate=True).result


def entry_point(schedule: ir.Module) -> ir.Operation:
    for op in schedule.body.operations:
        if op.operation.name == "transform.named_sequence" and op.sym_name.value == ENTRY_POINT:
            return op.operation
    raise LookupError(f"schedule has no @{ENTRY_POINT}")


class ScheduleError(Exception):
    """The interpreter rejected a step of the script.

    ``location`` is the payload place the interpreter named (in the payload's
    context), or None when it named none.
    """

    def __init__(self, message: str, location: ir.Location | None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location


def apply_schedule(payload: ir.Operation, schedule: ir.Module) -> None:
    """Run the script on ``payload`` in place; raises :class:`ScheduleError` if a step fails.

    The bindings report a failed sequence as a ``ValueError`` holding the
    diagnostics as text (they bypass the context's handlers), or as an
    ``ir.MLIRError``: both become one :class:`ScheduleError`.
    """
    try:
        interpreter.apply_named_sequence(payload, entry_point(schedule), schedule.operation)
    except ir.MLIRError as err:
        raise _from_mlir_error(err) from None
    except ValueError as err:
        raise _from_text(str(err), payload.context) from None


def _from_mlir_error(err: ir.MLIRError) -> ScheduleError:
    diagnostics = list(err.error_diagnostics)
    notes = [note for diag in diagnostics for note in diag.notes]
    located = [d.location for d in diagnostics + notes if isinstance(d.location, ir.FileLineColLoc)]
    return ScheduleError(
        _join_messages([d.message for d in diagnostics], [n.message for n in notes]) or err.message,
        located[0] if located else None,
    )


# 'Diagnostic message at loc(unknown): failed to pad op' then notes 'at loc("-":2:3): target op'
_TEXT_DIAGNOSTIC = re.compile(r"at loc\((?P<loc>[^)]*)\): (?P<message>.*)$")
_FILE_LINE_COL = re.compile(r'^"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)$')


def _from_text(text: str, context: ir.Context) -> ScheduleError:
    errors: list[str] = []
    notes: list[str] = []
    location: ir.Location | None = None
    for line in text.splitlines():
        found = _TEXT_DIAGNOSTIC.search(line)
        if found is None:
            continue
        is_error = line.startswith("Diagnostic message")
        (errors if is_error else notes).append(found.group("message"))
        place = _FILE_LINE_COL.match(found.group("loc"))
        if place is not None and location is None:
            location = ir.Location.file(
                place.group("file"), int(place.group("line")), int(place.group("col")), context
            )
    return ScheduleError(_join_messages(errors, notes) or text.strip(), location)


def _join_messages(errors: list[str], notes: list[str]) -> str:
    return "; ".join(errors + [f"note: {note}" for note in notes])
