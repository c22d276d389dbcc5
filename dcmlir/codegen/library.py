"""Route (a): whole-dispatch codegen by a transform-dialect library on llvm-cpu.

Each variant (a workload and its :class:`~dcmlir.space.TileLevels`) becomes one
named sequence in one library module: workgroup tiling into an ``scf.forall``
mapped to workgroups, micro-kernel tiling, padding to the static micro-kernel
shape, vectorization, bufferization, vector lowering (docs/design.md,
section 2, "The two faces of a schedule", face 2, and section 3).

How a dispatch picks its sequence (IREE 3.13): the kernel op carries a
``compilation_info`` whose ``translation_info`` names the pipeline
``#iree_codegen.transform_dialect_codegen`` and ``codegen_spec = @<sequence>``
(:func:`annotate_for_library`); ``--iree-codegen-transform-dialect-library``
points at the library holding every sequence, so many variants compile in one
``iree-compile`` call. The library's ``__kernel_config`` entry is a no-op: the
flag requires an entry, and we want no per-variant configuration step.

Never trust a build on its exit code alone: a library that fails to load can
leave IREE on its default pipeline. :func:`verify_td_build` reads two dumps
(the configuration of each dispatch, and the IR right after the transform
lowering) and proves each variant was built by its own sequence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dcmlir.codegen.schedule import pad_to_static
from dcmlir.ir.mlir import ir, structured, transform
from dcmlir.space import TileLevels
from dcmlir.workload import K, Workload

__all__ = [
    "CONFIG_ENTRY",
    "SEQUENCE_ATTR",
    "SEQUENCE_PREFIX",
    "TdVariant",
    "annotate_for_library",
    "build_library",
    "codegen_library",
    "compilation_info",
    "normalize_variants",
    "sequence_symbol",
]

CONFIG_ENTRY = "__kernel_config"
"""The library entry IREE runs on every dispatch at configuration time (a no-op here)."""

SEQUENCE_PREFIX = "__dcmlir_td_"
"""Sequence symbols are ``SEQUENCE_PREFIX + variant name``.

The ``codegen_spec`` reference lives in the input module, so a function with
the same name captures it: IREE renames the function (``@v`` -> ``@_v``, ABI
wrapping) and every use of the symbol with it, and the dispatch then asks the
library for a sequence that does not exist.
"""

SEQUENCE_ATTR = "dcmlir.td_sequence"
"""Set by each sequence on the function it lowered: the guard's proof of who built it."""

TD_PIPELINE = "#iree_codegen.transform_dialect_codegen"
NO_PIPELINE = "#iree_codegen.no_pipeline"
LOWERING_PASS = "iree-codegen-lower-executable-using-transform-dialect"
"""The IREE pass that runs a dispatch's ``codegen_spec``; its output is dumped for the guard."""

CONFIG_DUMP = "configurations"
LOWERED_DUMP = "lowered"
LIBRARY_FILE = "codegen_library.mlir"

_BLOCKS = ("x", "y", "z")  # workgroup ids, innermost tiled loop first
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- variants ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TdVariant:
    """One sequence of the library: a symbol name, a workload, its tile levels."""

    name: str
    workload: Workload
    levels: TileLevels

    def __post_init__(self) -> None:
        if not _SYMBOL.match(self.name):
            raise ValueError(f"sequence name '{self.name}' is not a plain symbol ([A-Za-z_]\\w*)")
        loops = len(self.workload.dims)
        for level in ("workgroup", "vector", "reduction"):
            sizes = getattr(self.levels, level)
            if len(sizes) != loops:
                raise ValueError(
                    f"{self.name}: {level} sizes {sizes} do not match the {loops} loops"
                )
            if any(size < 0 for size in sizes):
                raise ValueError(f"{self.name}: {level} sizes {sizes} must be >= 0")
        if not any(self.workgroup_sizes):
            raise ValueError(f"{self.name}: no loop is tiled at workgroup level")
        if sum(1 for size in self.workgroup_sizes if size) > len(_BLOCKS):
            raise ValueError(
                f"{self.name}: workgroup tiles {self.workgroup_sizes} need more than "
                f"{len(_BLOCKS)} workgroup dimensions"
            )
        if not all(self.micro_kernel):
            raise ValueError(
                f"{self.name}: every loop needs a micro-kernel size, got {self.micro_kernel} "
                "(vector sizes on parallel loops, reduction sizes on K loops)"
            )

    @property
    def workgroup_sizes(self) -> tuple[int, ...]:
        """Reductions are never distributed: a workgroup owns whole K."""
        return tuple(
            0 if dim.role == K else size
            for dim, size in zip(self.workload.dims, self.levels.workgroup, strict=True)
        )

    @property
    def micro_kernel(self) -> tuple[int, ...]:
        """The static tile one micro-kernel computes: vector sizes, reduction sizes on K."""
        return tuple(
            reduction if dim.role == K else vector
            for dim, vector, reduction in zip(
                self.workload.dims, self.levels.vector, self.levels.reduction, strict=True
            )
        )

    @property
    def mapping(self) -> tuple[str, ...]:
        """``#gpu.block<...>`` per workgroup-tiled loop: x for the innermost, then y, z."""
        tiled = [index for index, size in enumerate(self.workgroup_sizes) if size]
        return tuple(f"#gpu.block<{_BLOCKS[len(tiled) - 1 - i]}>" for i in range(len(tiled)))


def normalize_variants(
    variants: Iterable[tuple[str, Workload, TileLevels] | TdVariant],
) -> list[TdVariant]:
    found = [v if isinstance(v, TdVariant) else TdVariant(*v) for v in variants]
    names = [v.name for v in found]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"sequence names must be distinct: {', '.join(duplicates)}")
    return found


# --- what goes on the kernel op ------------------------------------------------------------


def sequence_symbol(name: str) -> str:
    """The library symbol of variant ``name`` (see :data:`SEQUENCE_PREFIX`)."""
    return f"{SEQUENCE_PREFIX}{name}"


def lowering_config(levels: TileLevels) -> str:
    """The sizes as an inert ``lowering_config``: IREE needs one, our sequence matches on it."""
    rows = (levels.workgroup, levels.vector, levels.reduction)
    text = ", ".join("[" + ", ".join(map(str, row)) + "]" for row in rows)
    return f"#iree_codegen.lowering_config<tile_sizes = [{text}]>"


def compilation_info(name: str, levels: TileLevels) -> str:
    """The ``compilation_info`` that sends a dispatch down sequence ``@name`` of the library."""
    return (
        f"#iree_codegen.compilation_info<lowering_config = {lowering_config(levels)}, "
        f"translation_info = #iree_codegen.translation_info<pipeline = {TD_PIPELINE} "
        f"codegen_spec = @{sequence_symbol(name)}>>"
    )


def annotate_for_library(name: str, levels: TileLevels) -> str:
    """The attribute dictionary to put on a kernel op, e.g. ``linalg.matmul {...} ins(...)``."""
    return f"{{compilation_info = {compilation_info(name, levels)}}}"


# --- the template: small functions over transform handles ------------------------------------


def _any_op() -> ir.Type:
    return transform.AnyOpType.get()


def _create(name: str, operands: Sequence[ir.Value] = (), results: int = 0) -> ir.Operation:
    """An IREE transform op that has no Python builder, in generic form."""
    return ir.Operation.create(name, results=[_any_op()] * results, operands=list(operands))


def _patterns(target: ir.Value, *patterns: str) -> None:
    """``apply_patterns`` with operand-free pattern ops given in their own syntax.

    Pattern ops carry enum options (``lowering_strategy = "outerproduct"``)
    whose generic form is a bare integer; parsing the documented spelling
    keeps the names checked by the parser instead of magic numbers here.
    """
    apply = transform.ApplyPatternsOp(target)
    for text in patterns:
        apply.patterns.append(ir.Operation.parse(text))


def match_funcs(root: ir.Value) -> ir.Value:
    """A fresh handle to the dispatch function: steps that rewrite it invalidate old ones."""
    return structured.MatchOp(_any_op(), root, ops=["func.func"]).result


def match_root(root: ir.Value, levels: TileLevels) -> ir.Value:
    """The kernel op: the one that carries this variant's ``lowering_config``."""
    config = ir.Attribute.parse(lowering_config(levels))
    return structured.MatchOp(_any_op(), root, op_attrs={"lowering_config": config}).result


def tile_to_workgroups(op: ir.Value, variant: TdVariant) -> tuple[ir.Value, ir.Value]:
    """``scf.forall`` over workgroup tiles, mapped to workgroup ids; (tiled op, forall)."""
    mapping = ir.ArrayAttr.get([ir.Attribute.parse(m) for m in variant.mapping])
    tiled = structured.TileUsingForallOp(
        op, tile_sizes=list(variant.workgroup_sizes), mapping=mapping
    )
    return tiled.tiled_op, tiled.forall_op


def resolve_dims(funcs: ir.Value) -> None:
    """Fold ``tensor.dim`` of loaded buffers to the dispatch's dynamic sizes.

    The forall's bounds read the input tensor's dim; the workgroup count region
    can only be built from values that exist outside the dispatch (the
    push constants), not from a buffer load.
    """
    _patterns(funcs, "transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims")


def populate_workgroup_count(forall: ir.Value) -> None:
    """Give the export a workgroup count computed from the forall's trip counts."""
    _create("transform.iree.populate_workgroup_count_region_using_num_threads_slice", [forall])


def fuse_fill(root: ir.Value, forall: ir.Value) -> None:
    """Move the ``linalg.fill`` of the output into each workgroup tile."""
    fills = structured.MatchOp(_any_op(), root, ops=["linalg.fill"]).result
    structured.FuseIntoContainingOp(fills, forall)


def tile_micro_kernels(op: ir.Value, sizes: Sequence[int]) -> ir.Value:
    """``scf.for`` nests over micro-kernel tiles (K innermost); returns the tiled op."""
    return structured.TileUsingForOp(op, sizes=list(sizes)).tiled_linalg_op


def cleanup(funcs: ir.Value) -> None:
    """Fold what tiling and padding leave behind, so vectorization sees static shapes."""
    _patterns(
        funcs,
        "transform.apply_patterns.linalg.tiling_canonicalization",
        "transform.apply_patterns.scf.for_loop_canonicalization",
        "transform.apply_patterns.canonicalization",
    )
    transform.ApplyCommonSubexpressionEliminationOp(funcs)


def vectorize(funcs: ir.Value) -> ir.Value:
    """Vectorize the static micro-kernels and their pads; returns the new function handle."""
    vectorized = structured.VectorizeChildrenAndApplyPatternsOp(funcs, vectorize_padding=True)
    _patterns(vectorized.result, "transform.apply_patterns.canonicalization")
    transform.ApplyCommonSubexpressionEliminationOp(vectorized.result)
    return vectorized.result


def bufferize(funcs: ir.Value) -> ir.Value:
    """IREE's one-shot bufferization; returns the bufferized functions."""
    _create("transform.iree.eliminate_empty_tensors", [funcs])
    bufferized = _create("transform.iree.bufferize", [funcs], results=1).result
    return match_funcs(bufferized)


def distribute(funcs: ir.Value) -> None:
    """Replace the workgroup ``scf.forall`` by workgroup ids."""
    _create("transform.iree.forall_to_workgroup", [funcs])


def lower_vectors(funcs: ir.Value) -> None:
    """Contractions to FMAs, transfers to loads/stores: one pattern set at a time.

    One combined set (as in IREE's example library) ping-pongs forever on
    micro-kernels with a unit dimension (1x64x16): transfer_to_scf, shape_cast
    lowering and canonicalization undo each other. Stages converge.
    """
    stages = (
        (
            'transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"',
            "transform.apply_patterns.vector.transfer_permutation_patterns",
        ),
        (
            "transform.apply_patterns.vector.split_transfer_full_partial "
            'split_transfer_strategy = "linalg-copy"',
        ),
        (
            "transform.apply_patterns.vector.transfer_to_scf "
            "max_transfer_rank = 1 full_unroll = true",
        ),
        ("transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1",),
        (
            "transform.apply_patterns.vector.lower_shape_cast",
            'transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_1d"',
        ),
        ("transform.apply_patterns.canonicalization",),
    )
    for stage in stages:
        _patterns(funcs, *stage)
    transform.ApplyCommonSubexpressionEliminationOp(funcs)


def annotate(funcs: ir.Value, name: str, value: ir.Attribute) -> None:
    """Set attribute ``name`` on every payload op of ``funcs``."""
    param = transform.ParamConstantOp(transform.AnyParamType.get(), value).result
    transform.AnnotateOp(funcs, name, param=param)


def mark_lowered(funcs: ir.Value, sequence: str) -> None:
    """Tell IREE the dispatch is fully lowered, and record which sequence did it."""
    annotate(
        funcs,
        "translation_info",
        ir.Attribute.parse(f"#iree_codegen.translation_info<pipeline = {NO_PIPELINE}>"),
    )
    annotate(funcs, SEQUENCE_ATTR, ir.StringAttr.get(sequence))


def codegen(root: ir.Value, variant: TdVariant) -> None:
    """The whole dispatch: workgroups -> micro-kernels -> static pads -> vectors -> buffers."""
    op = match_root(root, variant.levels)
    tiled, forall = tile_to_workgroups(op, variant)
    resolve_dims(match_funcs(root))
    populate_workgroup_count(forall)
    fuse_fill(root, forall)
    micro = tile_micro_kernels(tiled, variant.micro_kernel)
    pad_to_static(micro, variant.micro_kernel, variant.workload.element_types)
    funcs = match_funcs(root)
    cleanup(funcs)
    funcs = bufferize(vectorize(funcs))
    distribute(funcs)
    lower_vectors(funcs)
    mark_lowered(funcs, variant.name)


# --- the library ---------------------------------------------------------------------------


def _sequence(name: str) -> transform.NamedSequenceOp:
    return transform.NamedSequenceOp(
        name, [_any_op()], [], arg_attrs=[{"transform.readonly": ir.UnitAttr.get()}]
    )


def build_library(variants: Iterable[tuple[str, Workload, TileLevels] | TdVariant]) -> ir.Module:
    """The library module, one sequence per variant plus the no-op entry.

    Needs an active ``ir.Context`` and ``ir.Location``.
    """
    module = ir.Module.create()
    module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    with ir.InsertionPoint(module.body):
        entry = _sequence(CONFIG_ENTRY)
        with ir.InsertionPoint(entry.body):
            transform.YieldOp([])
        for variant in normalize_variants(variants):
            sequence = _sequence(sequence_symbol(variant.name))
            with ir.InsertionPoint(sequence.body):
                codegen(sequence.bodyTarget, variant)
                transform.YieldOp([])
    return module


def codegen_library(variants: Sequence[tuple[str, Workload, TileLevels] | TdVariant]) -> str:
    """The library as text for ``--iree-codegen-transform-dialect-library`` (verified)."""
    with ir.Context(), ir.Location.unknown():
        module = build_library(variants)
        if not module.operation.verify():
            raise ValueError("the generated transform library does not verify")
        return str(module)
