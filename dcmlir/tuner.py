"""``dcmlir.tune`` and ``dcmlir.compile``: the whole product in two calls.

``tune`` finds the dynamic workloads of a module (identical ops tuned once),
runs the shape-generic search for each under one measurement budget and
writes a plan; ``compile`` emits the plan's ``scf.if`` dispatch into the
module and builds it with IREE. The CLI (``dcmlir tune`` / ``dcmlir compile``)
is a thin layer over these.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dcmlir.build import BuildError, build
from dcmlir.cost_model import CostModel, parallel_units_for
from dcmlir.database import RecordDatabase
from dcmlir.diagnostics import DiagnosticEngine
from dcmlir.inputs import read_source
from dcmlir.measure import MeasureSettings
from dcmlir.measurer import Measurer
from dcmlir.mlir import ir
from dcmlir.pass_base import PassContext, PassFailure
from dcmlir.plan import Plan, WorkloadPlan
from dcmlir.routes import route_named
from dcmlir.runner import RunnerSettings
from dcmlir.search import SearchResult, SearchSettings, ShapeGenericSearch
from dcmlir.space import space_for
from dcmlir.target import Target, target_from_name
from dcmlir.workload import Workload, workloads


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
        if "=" in item:
            overrides.append(item)
        elif default:
            raise TuneError(f"--dims: two ranges for every dim ('{default}' and '{item}')")
        else:
            default = item
    return default, tuple(overrides)


def load_workloads(
    path: str | Path, dims: Sequence[str], stream: IO[str]
) -> tuple[str, list[Workload], list[str]]:
    """(source name, distinct workloads with ranges, ops left to IREE) of a module file."""
    from dcmlir.passes.annotate_ranges import AnnotateRangesPass

    try:
        source, text = read_source(str(path), sys.stdin)
    except ValueError as err:
        raise TuneError(str(err)) from None
    default, overrides = _dims_arguments(dims)
    try:
        annotate = AnnotateRangesPass(range=default, dims=overrides)
    except ValueError as err:
        raise TuneError(f"--dims: {err}") from None
    engine = DiagnosticEngine(source)
    found: dict[str, Workload] = {}
    skipped: list[str] = []
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        try:
            annotate.apply(PassContext(engine, stream), module.operation)
        except PassFailure:
            raise TuneError(engine.first_error()) from None
        for op, result in workloads(module.operation, source):
            if isinstance(result, Workload):
                found.setdefault(result.key, result)
            else:
                skipped.append(f"{engine.locate(op)}: {op.name}: {result}")
    for workload in found.values():
        missing = [d.index for d in workload.dynamic_dims if d.range is None]
        if missing:
            raise TuneError(
                f"{workload.location}: no range for dynamic loop d{missing[0]} of "
                f"{workload.kind}; give --dims LO:HI (or ARG.DIM=LO:HI)"
            )
    return source, list(found.values()), skipped


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
    stream: IO[str] | None = None,
) -> TuneReport:
    """Tune every dynamic workload of ``input`` and write the plan to ``output``.

    ``dims``: ``LO:HI`` for every dynamic dim and/or ``argN.D=LO:HI`` per
    argument dim (ranges in the IR, ``util.assume.int``, count too);
    ``budget``: timed (candidate, shape) pairs for the whole module, split
    evenly over its distinct workloads (records already in ``db`` count, so a
    resumed run re-measures nothing).
    """
    stream = stream if stream is not None else sys.stderr
    start = time.perf_counter()
    target_object = target if not isinstance(target, str) else target_from_name(target, arch)
    source, found, skipped = load_workloads(input, dims, stream)
    if not found:
        raise TuneError(f"{source}: no dynamic-shape contraction to tune")
    records = RecordDatabase(db)
    records.load()
    per_workload = max(1, budget // len(found))
    runner = RunnerSettings(
        MeasureSettings(min_time=min_time, rounds=rounds, warmup=min_time),
        driver=device,
        timeout=timeout,
    )
    settings = SearchSettings(budget=per_workload, max_kernels=max_kernels, seed=seed)
    reports: list[WorkloadReport] = []
    for workload in found:
        with Measurer(
            workload,
            target_object,
            records,
            route=route_named(route),
            runner_settings=runner,
            stream=stream,
        ) as measurer:
            model = CostModel(
                workload,
                target_object,
                parallel_units_for(target_object, measurer.runner_settings.driver),
                seed,
                route=route,
            )
            search = ShapeGenericSearch(
                workload, measurer, model, space_for(target_object), settings, stream=stream
            ).run()
        reports.append(WorkloadReport(workload, search, workload_plan(search, max_depth, route)))
    plan = Plan(target_object, Path(str(input)).name, tuple(r.plan for r in reports))
    if output is not None:
        plan.save(output)
    return TuneReport(plan, reports, time.perf_counter() - start, skipped)


def workload_plan(search: SearchResult, max_depth: int | None, route: str) -> WorkloadPlan:
    """The plan of one searched workload: its kernels, choices and the costs behind them."""
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
    return WorkloadPlan.build(
        search.workload,
        search.kernels,
        search.choice,
        predicted,
        measured,
        max_depth,
        routes=route,
    )


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
    stream: IO[str] | None = None,
) -> CompileResult:
    """Emit ``plan``'s dispatch into ``input`` and compile it with IREE for the plan's target."""
    from dcmlir.passes.emit_dispatch import emit_dispatch
    from dcmlir.plan import PlanError

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
    try:
        source, text = read_source(str(input), sys.stdin)
    except ValueError as err:
        raise TuneError(str(err)) from None
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
        attributes = loaded.target.module_attributes()
        if attributes:
            for named in ir.DictAttr(ir.Attribute.parse(f"{{{attributes}}}")):
                module.operation.attributes[named.name] = named.attr
        mlir = str(module)
    if emit_mlir is not None:
        Path(emit_mlir).write_text(mlir, encoding="utf-8")
    try:
        built = build(mlir, loaded.target, source_name=source)
    except BuildError as err:
        raise TuneError(f"IREE could not compile the dispatched module:\n{err}") from None
    if output is not None:
        Path(output).write_bytes(built.vmfb)
    return CompileResult(built.vmfb, mlir, dispatched)
