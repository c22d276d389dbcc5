"""``dcmlir.tune`` and ``dcmlir.compile``: the whole product in two calls.

``tune`` finds the dynamic workloads of a module or a whole model (identical ops
in different layers tuned once), splits one measurement budget over them by
their estimated share of model time, runs the shape-generic search for each and
writes a plan (and, beside it, the model's workload graph); ``compile`` emits
the plan's ``scf.if`` dispatch into the module and builds it with IREE. The CLI
(``dcmlir tune`` / ``dcmlir compile``) is a thin layer over these.

Workloads are tuned in the form IREE's codegen sees (DESIGN.md section 3): with
``level="global-optimization"`` the module is first lowered with ``iree-compile
--compile-to=global-optimization`` (transposes folded into contractions,
epilogues next to them), the dispatch is emitted into that IR, and IREE resumes
with ``--compile-from=global-optimization``. ``level="auto"`` takes that route
exactly when it changes the workloads (docs/model_tuning.md has the measurements).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dcmlir.build.compiler import BuildError, build
from dcmlir.build.routes import route_named
from dcmlir.cost_model.model import CostModel, parallel_units_for
from dcmlir.dispatch.plan import LEVELS, Plan, WorkloadPlan
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.inputs import read_module_source
from dcmlir.ir.iree import versions
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext, PassFailure
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records.database import RecordDatabase
from dcmlir.search.model_graph import (
    PROBE_FRACTIONS,
    ModelGraph,
    graph_path_for,
    probe_shapes,
    run_shapes,
)
from dcmlir.search.shape_generic import SearchResult, SearchSettings, ShapeGenericSearch
from dcmlir.shapes import Shape
from dcmlir.space.candidates import DefaultCandidate, space_for
from dcmlir.target import CpuTarget, Target, target_from_name
from dcmlir.workload import Workload

LEVEL_CHOICES = ("auto", *LEVELS)
PROBES_FROM = 2 * len(PROBE_FRACTIONS)
"""Budget per workload from which IREE's default is probed for the split (half of it at
most goes to probes); below that the shares are FLOPs shares."""
GLOBAL_OPT = "global-optimization"


class TuneError(ValueError):
    """A problem with the user's input: one line, already naming the file or option."""


@dataclass
class WorkloadReport:
    workload: Workload
    search: SearchResult
    plan: WorkloadPlan

    @property
    def exhaustive(self) -> int:
        """Pairs per-shape exhaustive tuning of the same space would time."""
        return len(self.search.candidates) * len(self.search.shapes)


@dataclass
class TuneReport:
    plan: Plan
    workloads: list[WorkloadReport] = field(default_factory=list)
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # dynamic ops left to IREE, with reasons
    graph: ModelGraph | None = None
    level: str = "input"
    level_reason: str = ""
    probes: int = 0  # measurements of IREE's default for the budget split
    graph_path: Path | None = None

    @property
    def measurements(self) -> int:
        """Measurements the whole tuning counted: the probes and every search's."""
        return self.probes + sum(item.search.measurements for item in self.workloads)

    @property
    def measured_now(self) -> int:
        return sum(item.search.measured_now for item in self.workloads)

    def model_lines(self) -> list[str]:
        """The level, the graph and the table of where model time goes (and the split)."""
        if self.graph is None:
            return []
        lines = [f"level: {self.level} ({self.level_reason})", self.graph.summary()]
        if self.probes:
            lines.append(
                "where model time goes, IREE's default per call averaged over the range "
                f"(from {self.probes} probe measurements); the budget follows the shares:"
            )
        elif len(self.workloads) > 1:
            lines.append(
                "where model time goes, by FLOPs (budget too small to probe IREE's default); "
                "the budget follows the shares:"
            )
        else:
            lines.append("where model time goes (one workload: the whole budget is its own):")
        lines += [f"  {line}" for line in self.graph.table()]
        lines.append(
            f"total: {self.measurements} measurements ({self.probes} probes), "
            f"{self.seconds:.0f} s tuning wall time"
        )
        return lines

    def lines(self) -> list[str]:
        out = []
        for item in self.workloads:
            search, plan = item.search, item.plan
            report = plan.report
            out.append(
                f"{item.workload.kind} key={item.workload.key} range {plan.describe_range()}: "
                f"{len(plan.kernels)} kernels, tree depth {plan.tree.depth} "
                f"(accuracy {report.accuracy:.0%}), {search.measurements} measurements "
                f"({search.measured_now} new) vs {item.exhaustive} exhaustive "
                f"({item.exhaustive / max(search.measurements, 1):.0f}x fewer), "
                f"{search.seconds:.0f} s"
            )
            for index, kernel in enumerate(plan.kernels):
                shapes = sum(1 for s in plan.shapes if s.kernel == index)
                out.append(f"  kernel {index}: {kernel.candidate_key} ({shapes} shapes)")
        return out


def _dims_arguments(dims: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """``["1:128", "arg0.1=1:64"]`` -> ("1:128", ("arg0.1=1:64",)) for annotate-ranges."""
    default = ""
    overrides = []
    for item in dims:
        if not item.strip():
            raise TuneError("--dims: an empty range; write LO:HI (e.g. 1:128) or ARG.DIM=LO:HI")
        if "=" in item:
            overrides.append(item)
        elif default:
            raise TuneError(f"--dims: two ranges for every dim ('{default}' and '{item}')")
        else:
            default = item
    return default, tuple(overrides)


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


def _annotated(
    text: str, source: str, annotate: object, stream: IO[str], target: Target | None
) -> tuple[str, ModelGraph, list[str]]:
    """Parse, record ranges, add the target's module attributes; (text, graph, skipped)."""
    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        try:
            annotate.apply(PassContext(engine, stream), module.operation)  # type: ignore[attr-defined]
        except PassFailure:
            raise TuneError(engine.first_error()) from None
        if target is not None:
            _add_module_attributes(module, target)
        graph = ModelGraph.from_module(module.operation, source)
        skipped = [
            f"{engine.locate(op)}: {op.name}: {reason}" for op, reason in _not_workloads(module)
        ]
        return str(module), graph, skipped


def _not_workloads(module: ir.Module) -> list[tuple[ir.Operation, str]]:
    """Dynamic ops left to IREE, with why: not contractions, or types dcmlir cannot time."""
    from dcmlir.codegen.kernel import unmeasurable
    from dcmlir.workload import NotAWorkload, workloads

    found = []
    for op, result in workloads(module.operation):
        reason = str(result) if isinstance(result, NotAWorkload) else unmeasurable(result)
        if reason is not None:
            found.append((op, reason))
    return found


def _add_module_attributes(module: ir.Module, target: Target) -> None:
    attributes = target.module_attributes()
    if attributes:
        for named in ir.DictAttr(ir.Attribute.parse(f"{{{attributes}}}")):
            module.operation.attributes[named.name] = named.attr


def lower_to_global_optimization(text: str, target: Target, source: str = "<input>") -> str:
    """The module after IREE's global optimization (cached like every build)."""
    try:
        built = build(text, target, ("--compile-to=global-optimization",), source_name=source)
    except BuildError as err:
        raise TuneError(f"IREE could not lower {source} to global optimization:\n{err}") from None
    return built.vmfb.decode("utf-8")


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
    from dcmlir.passes.annotate_ranges import AnnotateRangesPass

    if level not in LEVEL_CHOICES:
        raise TuneError(f"--level: '{level}' is not one of {', '.join(LEVEL_CHOICES)}")
    try:
        source, text = read_module_source(str(path), sys.stdin)
    except ValueError as err:
        raise TuneError(str(err)) from None
    default, overrides = _dims_arguments(dims)
    try:
        annotate = AnnotateRangesPass(range=default, dims=overrides)
    except ValueError as err:
        raise TuneError(f"--dims: {err}") from None
    annotated, graph, skipped = _annotated(text, source, annotate, stream, target)
    chosen, reason = "input", "asked for" if level == "input" else ""
    if level != "input":
        lowered = lower_to_global_optimization(annotated, target or _cpu(), source)
        fill = AnnotateRangesPass(range=default)
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


def load_workloads(
    path: str | Path, dims: Sequence[str], stream: IO[str], *, level: str = "input"
) -> tuple[str, list[Workload], list[str]]:
    """(source name, distinct workloads with ranges, ops left to IREE) of a module file."""
    model = load_model(path, dims, stream, level=level)
    return model.source, model.workloads, model.skipped


def tune(
    input: str | Path,
    *,
    dims: Sequence[str] = (),
    target: str | Target = "llvm-cpu",
    arch: str | None = None,
    budget: int = 400,
    max_kernels: int = 8,
    db: str | Path = "records.jsonl",
    output: str | Path | None = "plan.json",
    route: str = "config",
    seed: int = 0,
    max_depth: int | None = None,
    device: str = "local-sync",
    min_time: float = 0.03,
    rounds: int = 3,
    timeout: float = 60.0,
    level: str = "auto",
    stream: IO[str] | None = None,
) -> TuneReport:
    """Tune every dynamic workload of ``input`` (a kernel or a whole model), write the plan.

    ``dims``: ``LO:HI`` for every dynamic dim and/or ``argN.D=LO:HI`` per
    argument dim (ranges in the IR, ``util.assume.int``, count too);
    ``budget``: timed (candidate, shape) pairs for the whole module. With more
    than one distinct workload, IREE's default is first timed at a few probe
    shapes of each (counted in the budget), and the rest is split by each
    workload's estimated share of model time, with a floor per workload.
    Records already in ``db`` count, so a resumed run re-measures nothing.
    ``level``: ``input``, ``global-optimization`` or ``auto`` (see the module doc).
    The model's workload graph is saved beside the plan (``plan.graph.json``).
    """
    stream = stream if stream is not None else sys.stderr
    start = time.perf_counter()
    _check_writable(output, "-o")  # before the tuning, not after it
    target_object = target if not isinstance(target, str) else target_from_name(target, arch)
    model = load_model(input, dims, stream, level=level, target=target_object)
    found = model.workloads
    if not found:  # nothing to tune: an empty plan, so that dcmlir compile passes it through
        plan = Plan(target_object, Path(str(input)).name, (), level=model.level)
        return TuneReport(
            plan,
            [],
            time.perf_counter() - start,
            model.skipped,
            level=model.level,
            level_reason=model.level_reason,
            graph_path=_save_plan(plan, model.graph, output, db) if output is not None else None,
        )
    records = RecordDatabase(db)
    records.load()
    runner = RunnerSettings(
        MeasureSettings(min_time=min_time, rounds=rounds, warmup=min_time),
        driver=device,
        timeout=timeout,
    )
    graph = model.graph
    reports: list[WorkloadReport] = []
    failed: list[str] = []  # workloads no kernel could run, with why
    with ExitStack() as stack:
        measurers = {
            w.key: stack.enter_context(
                Measurer(
                    w,
                    target_object,
                    records,
                    route=route_named(route),
                    runner_settings=runner,
                    stream=stream,
                )
            )
            for w in found
        }
        probes = (
            _probe_defaults(graph, measurers, stream)
            if len(found) > 1 and budget >= PROBES_FROM * len(found)
            else {}
        )
        graph.estimate(lambda w: probes.get(w.key, {}))
        probe_count = sum(len(p) for p in probes.values())
        parts = graph.split(max(budget - probe_count, len(found)))
        for workload in found:
            measurer = measurers[workload.key]
            model_ = CostModel(
                workload,
                target_object,
                parallel_units_for(target_object, measurer.runner_settings.driver),
                seed,
                route=route,
            )
            settings = SearchSettings(
                budget=parts[workload.key], max_kernels=max_kernels, seed=seed
            )
            search = ShapeGenericSearch(
                workload,
                measurer,
                model_,
                space_for(target_object),
                settings,
                stream=stream,
                shapes=workload.tied_shapes(),
            ).run()
            failure = _nothing_ran(workload, search, records, target_object)
            if failure is not None:  # every kernel failed: the op stays with IREE's default
                failed.append(failure)
                continue
            reports.append(
                WorkloadReport(workload, search, workload_plan(search, max_depth, route))
            )
            _record_outcome(graph, workload, search, len(probes.get(workload.key, {})))
    if failed and not reports:
        raise TuneError(failed[0])
    for failure in failed:
        print(f"dcmlir: warning: {failure}; left to IREE", file=stream)
    plan = Plan(
        target_object,
        Path(str(input)).name,
        tuple(r.plan for r in reports),
        level=model.level,
    )
    graph_path = _save_plan(plan, graph, output, db) if output is not None else None
    return TuneReport(
        plan,
        reports,
        time.perf_counter() - start,
        model.skipped,
        graph=graph,
        level=model.level,
        level_reason=model.level_reason,
        probes=probe_count,
        graph_path=graph_path,
    )


def _nothing_ran(
    workload: Workload, search: SearchResult, records: RecordDatabase, target: Target
) -> str | None:
    """Why no kernel of ``workload`` can be planned (every measurement failed), or None."""
    if any(math.isfinite(seconds) for seconds in search.measured.values()):
        return None
    failures = records.records(
        workload.key, target.key(), include_failures=True, only_current_version=True
    )
    errors = [r.error for r in failures if r.error]
    first = errors[-1].splitlines()[0] if errors else "no measurement ran"
    return (
        f"{workload.location}: every measurement of {workload.kind} {workload.key} failed "
        f"({len(search.measured)} pairs), so there is nothing to choose from; last error: {first}"
    )


def _save_plan(plan: Plan, graph: ModelGraph, output: str | Path, db: str | Path) -> Path:
    """Write the plan and its workload graph beside it; the graph's path."""
    graph_path = graph_path_for(output)
    try:
        plan.save(output)
        graph.save(graph_path)
    except OSError as err:
        raise TuneError(
            f"cannot write the plan {err.filename or output}: {err.strerror or err}; the "
            f"records in {db} are kept: run again (with another -o) to write it without "
            "measuring again"
        ) from None
    return graph_path


def _check_writable(output: str | Path | None, option: str) -> None:
    """A TuneError now if ``output`` cannot be written at the end (missing or read-only
    directory), rather than after hours of tuning."""
    if output is None:
        return
    directory = Path(output).parent
    if Path(output).is_dir():
        raise TuneError(f"{option} {output}: is a directory; give a file name (plan.json)")
    if not directory.is_dir():
        raise TuneError(f"{option} {output}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise TuneError(f"{option} {output}: directory {directory} is not writable")


def _probe_defaults(
    graph: ModelGraph, measurers: Mapping[str, Measurer], stream: IO[str]
) -> dict[str, dict[Shape, float]]:
    """IREE's default timed at a few shapes of each workload (from the records when there)."""
    found: dict[str, dict[Shape, float]] = {}
    default = DefaultCandidate()
    for key, workload in graph.workloads.items():
        shapes = probe_shapes(workload)
        print(
            f"dcmlir: probe IREE's default on {workload.kind} key={key} at "
            f"{', '.join('x'.join(map(str, s)) for s in shapes)}",
            file=stream,
        )
        report = measurers[key].measure([default], shapes)
        found[key] = {shape: report.median(default.key(), shape) for shape in shapes}
    return found


def _record_outcome(
    graph: ModelGraph, workload: Workload, search: SearchResult, probes: int
) -> None:
    """Per-call estimates after tuning: the chosen kernels' and IREE's default over the range."""
    estimate = graph.estimates[workload.key]
    estimate.measurements = search.measurements + probes
    shapes = [s for s in run_shapes(workload) if s in set(search.shapes)] or search.shapes
    default_column = next(
        (i for i, c in enumerate(search.candidates) if isinstance(c, DefaultCandidate)), None
    )
    tuned = [search.kernel_cost(shape, search.choice[shape])[0] for shape in shapes]
    if not all(math.isfinite(t) for t in tuned):
        return
    estimate.tuned_seconds = estimate.ops * sum(tuned) / len(tuned)
    if default_column is not None:
        rows = [search.shapes.index(s) for s in shapes]
        default = [float(search.estimate[row, default_column]) for row in rows]
        if all(math.isfinite(t) for t in default):
            estimate.default_search_seconds = estimate.ops * sum(default) / len(default)


TREE_TOLERANCE = 0.01
"""A shallower tree is kept when its picks cost at most 1% more than the selection's
(estimated, geomean and total over the training shapes)."""


def workload_plan(search: SearchResult, max_depth: int | None, route: str) -> WorkloadPlan:
    """The plan of one searched workload: its kernels, choices and the costs behind them.

    Without ``max_depth`` the tree is the shallowest one whose picks cost within
    :data:`TREE_TOLERANCE` of the selection: the selection often alternates between
    near-equal kernels from one shape to the next, which an exact tree pays for with
    dozens of splits (and kernels) and no speed.
    """
    predicted: dict[tuple[int, ...], list[float]] = {}
    measured: dict[tuple[int, ...], float | None] = {}
    for shape in search.shapes:
        row = []
        for index in range(len(search.kernels)):
            seconds, _ = search.kernel_cost(shape, index)
            row.append(seconds)
        predicted[shape] = row
        seconds, was_measured = search.kernel_cost(shape, search.choice[shape])
        measured[shape] = seconds if was_measured and math.isfinite(seconds) else None

    def fitted(depth: int | None) -> WorkloadPlan:
        return WorkloadPlan.build(
            search.workload,
            search.kernels,
            search.choice,
            predicted,
            measured,
            depth,
            routes=route,
        )

    if max_depth is not None:
        return fitted(max_depth)
    exact = fitted(None)
    for depth in range(exact.tree.depth):
        candidate = fitted(depth)
        if _within(candidate.report.geomean_slowdown) and _within(candidate.report.total_slowdown):
            return candidate
    return exact


def _within(slowdown: float | None) -> bool:
    return slowdown is None or slowdown <= TREE_TOLERANCE


@dataclass
class CompileResult:
    vmfb: bytes
    mlir: str
    dispatched: int  # ops rewritten into a dispatch


def compile(
    input: str | Path,
    *,
    plan: str | Path | Plan,
    target: str | None = None,
    output: str | Path | None = None,
    emit_mlir: str | Path | None = None,
    allow_other_iree: bool = False,
    stream: IO[str] | None = None,
) -> CompileResult:
    """Emit ``plan``'s dispatch into ``input`` and compile it with IREE for the plan's target.

    A plan tuned at the global-optimization level lowers ``input`` there first and
    resumes IREE from it; ``emit_mlir`` then holds that level's IR with the dispatch.
    A plan tuned with another IREE is refused unless ``allow_other_iree``; one tuned
    on another CPU is used with a warning; a module without dynamic ops passes through.
    """
    from dcmlir.dispatch.plan import PlanError
    from dcmlir.passes.emit_dispatch import emit_dispatch

    stream = stream if stream is not None else sys.stderr
    try:
        loaded = plan if isinstance(plan, Plan) else Plan.load(plan)
    except PlanError as err:
        raise TuneError(str(err)) from None
    if target is not None and target != loaded.target.backend:
        raise TuneError(
            f"--target {target} but the plan was tuned for {loaded.target.backend} "
            f"({loaded.target_key}); tune again for {target}"
        )
    _check_plan_origin(loaded, str(plan), allow_other_iree, stream)
    try:
        source, text = read_module_source(str(input), sys.stdin)
    except ValueError as err:
        raise TuneError(str(err)) from None
    if loaded.workloads and not _has_dynamic_ops(text, source):
        print(
            f"dcmlir: {source} has no dynamic-shape linalg op: compiled as IREE compiles it,"
            " the plan is not used",
            file=stream,
        )
        loaded = dataclasses.replace(loaded, workloads=(), level="input")
    flags: tuple[str, ...] = ()
    if loaded.level == GLOBAL_OPT:
        text = lower_to_global_optimization(
            _with_module_attributes(text, source, loaded.target), loaded.target, source
        )
        flags = ("--compile-from=global-optimization",)
    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        ctx = PassContext(engine, stream)
        try:
            dispatched = emit_dispatch(ctx, module.operation, loaded, origin=str(plan))
        except PassFailure:
            raise TuneError(engine.first_error()) from None
        if loaded.level != GLOBAL_OPT:
            _add_module_attributes(module, loaded.target)
        mlir = str(module)
    if emit_mlir is not None:
        Path(emit_mlir).write_text(mlir, encoding="utf-8")
    try:
        built = build(mlir, loaded.target, flags, source_name=source)
    except BuildError as err:
        raise TuneError(f"IREE could not compile the dispatched module:\n{err}") from None
    if output is not None:
        Path(output).write_bytes(built.vmfb)
    return CompileResult(built.vmfb, mlir, dispatched)


def _check_plan_origin(plan: Plan, name: str, allow_other_iree: bool, stream: IO[str]) -> None:
    """Another IREE: refused (its configs may mean something else); another CPU: a warning."""
    current = versions()["iree"]
    if plan.iree_version != current and not allow_other_iree:
        raise TuneError(
            f"plan {name} was tuned with IREE {plan.iree_version}, this is IREE {current}:"
            " its kernels were measured with another compiler; tune again (dcmlir tune),"
            " or pass --allow-other-iree to use it anyway"
        )
    if not isinstance(plan.target, CpuTarget) or plan.target.target_cpu != "host":
        return
    here = CpuTarget()
    if here.key() != plan.target.key():
        print(
            f"dcmlir: warning: plan {name} was tuned on {plan.target.describe()}; this host is"
            f" {here.describe()}: the dispatch computes the same results, but its kernels may"
            " not be the fastest here (tune again on this host)",
            file=stream,
        )


def _has_dynamic_ops(text: str, source: str) -> bool:
    from dcmlir.workload import dynamic_linalg_ops

    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        return bool(dynamic_linalg_ops(module.operation))


def _with_module_attributes(text: str, source: str, target: Target) -> str:
    """The module text with the target's module attributes (an explicit CUDA target)."""
    if not target.module_attributes():
        return text
    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        _add_module_attributes(module, target)
        return str(module)


def compile_default(
    input: str | Path, target: str | Target = "llvm-cpu", *, arch: str | None = None
) -> bytes:
    """IREE's own compilation of ``input`` for ``target``: the baseline a dispatch is timed
    against (same flags, same cache)."""
    target_object = target if not isinstance(target, str) else target_from_name(target, arch)
    try:
        source, text = read_module_source(str(input), sys.stdin)
    except ValueError as err:
        raise TuneError(str(err)) from None
    try:
        return build(_with_module_attributes(text, source, target_object), target_object).vmfb
    except BuildError as err:
        raise TuneError(f"IREE could not compile {source}:\n{err}") from None
