"""Reading a module and finding its workloads, at the level IREE's codegen will see them.

The first step of ``dcmlir.tune``: the module is parsed, its dynamic dims get their
ranges (``--dims``), and its workloads are collected into a :class:`ModelGraph`
(identical ops in different layers become one workload). With
``level="global-optimization"`` the module is first lowered with ``iree-compile
--compile-to=global-optimization`` (transposes folded into contractions, epilogues
next to them) and the workloads are found in that IR; ``level="auto"`` takes that
route exactly when it changes the workloads (docs/model_tuning.md has the measurements).
Every problem with the user's input is a one-line :class:`TuneError`.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dcmlir.build.compiler import BuildError, build
from dcmlir.codegen.kernel import unmeasurable
from dcmlir.dispatch import LEVELS
from dcmlir.files import unwritable
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.inputs import read_module_source
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext, PassFailure
from dcmlir.passes.annotate_ranges import AnnotateRangesPass, QuietDimsOptionPass
from dcmlir.search.model_graph import ModelGraph
from dcmlir.target import Target, target_from_name
from dcmlir.workload import NotAWorkload, Workload, workloads

LEVEL_CHOICES = ("auto", *LEVELS)
GLOBAL_OPT = "global-optimization"


class TuneError(ValueError):
    """A problem with the user's input: one line, already naming the file or option."""


def check_writable(output: str | Path | None, option: str, example: str = "") -> None:
    """A TuneError now if ``output`` cannot be written at the end (a directory, a missing or
    read-only folder), rather than after the work; ``example``: a file name to suggest."""
    if output is None:
        return
    reason = unwritable(output)
    if reason is None:
        return
    hint = f" ({example})" if example and reason.startswith("is a directory") else ""
    raise TuneError(f"{option} {output}: {reason}{hint}")


@dataclass
class LoadedModel:
    """A module ready to tune: at the chosen level, with its workload graph."""

    source: str
    level: str
    level_reason: str
    text: str  # the module at ``level``: what the dispatch is emitted into
    graph: ModelGraph
    skipped: list[str]

    @property
    def workloads(self) -> list[Workload]:
        return list(self.graph.workloads.values())


def load_model(
    path: str | Path,
    dims: Sequence[str],
    stream: IO[str],
    *,
    level: str = "auto",
    target: Target | None = None,
) -> LoadedModel:
    """Read a module, give its dynamic dims ranges and find its workloads at ``level``.

    Ranges are recorded on the input (``argN.D`` names its function arguments); at
    the global-optimization level, ops IREE re-created without them get the default
    range or the bounds the IR assumes (``util.assume.int``).
    """
    if level not in LEVEL_CHOICES:
        raise TuneError(f"--level: '{level}' is not one of {', '.join(LEVEL_CHOICES)}")
    source, text = read_source(path)
    try:  # a loop left without a range is one error line below, not a warning before it
        annotate = QuietDimsOptionPass.from_dims(dims)
    except ValueError as err:
        raise TuneError(f"--dims: {err}") from None
    annotated, graph, skipped = _annotated(text, source, annotate, stream, target)
    chosen, reason = "input", "asked for" if level == "input" else ""
    if level != "input":
        lowered = lower_to_global_optimization(annotated, target or _cpu(), source)
        fill = QuietDimsOptionPass(range=annotate.range)
        go_text, go_graph, go_skipped = _annotated(lowered, source, fill, stream, None)
        before = Counter(graph.counts())
        after = Counter(go_graph.counts())
        if level == GLOBAL_OPT:
            chosen, reason = GLOBAL_OPT, "asked for"
        elif before != after:
            chosen = GLOBAL_OPT
            reason = "auto: IREE's global optimization changes the workloads " + _difference(
                graph, go_graph
            )
        else:
            reason = "auto: IREE's global optimization leaves the workloads as they are"
        if chosen == GLOBAL_OPT:
            annotated, graph, skipped = go_text, go_graph, go_skipped
    graph.level = chosen
    for workload in graph.workloads.values():
        missing = [d.index for d in workload.dynamic_dims if d.range is None]
        if missing:
            raise TuneError(
                f"{workload.location}: no range for dynamic loop d{missing[0]} of "
                f"{workload.kind}; give --dims LO:HI (or ARG.DIM=LO:HI)"
            )
    return LoadedModel(source, chosen, reason, annotated, graph, skipped)


def load_workloads(
    path: str | Path, dims: Sequence[str], stream: IO[str], *, level: str = "input"
) -> tuple[str, list[Workload], list[str]]:
    """(source name, distinct workloads with ranges, ops left to IREE) of a module file."""
    model = load_model(path, dims, stream, level=level)
    return model.source, model.workloads, model.skipped


def read_source(path: str | Path) -> tuple[str, str]:
    """(source name, text) of a module file (``-``: stdin); a TuneError if unreadable."""
    try:
        return read_module_source(str(path), sys.stdin)
    except ValueError as err:
        raise TuneError(str(err)) from None


def lower_to_global_optimization(
    text: str, target: Target, source: str = "<input>", flags: tuple[str, ...] = ()
) -> str:
    """The module after IREE's global optimization (cached like every build). ``flags``
    that shape the executable targets must be given here: the lowered module carries its
    targets as attributes, and a later compile's flags no longer change them."""
    try:
        built = build(
            text, target, ("--compile-to=global-optimization", *flags), source_name=source
        )
    except BuildError as err:
        raise TuneError(f"IREE could not lower {source} to global optimization:\n{err}") from None
    return built.vmfb.decode("utf-8")


def add_module_attributes(module: ir.Module, target: Target) -> None:
    """Put the target's module attributes (an explicit CUDA target's) on ``module``."""
    attributes = target.module_attributes()
    if attributes:
        for named in ir.DictAttr(ir.Attribute.parse(f"{{{attributes}}}")):
            module.operation.attributes[named.name] = named.attr


def _annotated(
    text: str,
    source: str,
    annotate: AnnotateRangesPass,
    stream: IO[str],
    target: Target | None,
) -> tuple[str, ModelGraph, list[str]]:
    """Parse, record ranges, add the target's module attributes; (text, graph, skipped).

    The pass's warnings (a ``--dims`` item that bounds several functions) go to ``stream``.
    """
    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        try:
            annotate.apply(PassContext(engine, stream), module.operation)
        except PassFailure:
            raise TuneError(engine.first_error()) from None
        for diagnostic in engine.diagnostics:
            if diagnostic.severity == "warning":
                print(diagnostic.format(), file=stream)
        if target is not None:
            add_module_attributes(module, target)
        graph = ModelGraph.from_module(module.operation, source)
        skipped = [
            f"{engine.locate(op)}: {op.name}: {reason}" for op, reason in _not_workloads(module)
        ]
        return str(module), graph, skipped


def _not_workloads(module: ir.Module) -> list[tuple[ir.Operation, str]]:
    """Dynamic ops left to IREE, with why: not contractions, or types dcmlir cannot time."""
    found = []
    for op, result in workloads(module.operation):
        reason = str(result) if isinstance(result, NotAWorkload) else unmeasurable(result)
        if reason is not None:
            found.append((op, reason))
    return found


def _difference(before: ModelGraph, after: ModelGraph) -> str:
    kinds_before = Counter(w.kind for w in before.workloads.values())
    kinds_after = Counter(w.kind for w in after.workloads.values())
    gone = ", ".join(sorted((kinds_before - kinds_after).elements()))
    new = ", ".join(sorted((kinds_after - kinds_before).elements()))
    if gone or new:
        return f"({gone or 'none'} -> {new or 'none'})"
    return "(same kinds, different ops or extents)"


def _cpu() -> Target:
    return target_from_name("llvm-cpu", None)
