"""``dcmlir bench``: a tuned workload against every baseline a user would pick, side by side.

One workload (a module whose function is one dynamic contraction, like the
six BERT-base workloads of ``benchmarks/bert_workloads.py``) is compiled once
per baseline, then every baseline is timed at each shape in one process,
interleaved in rounds (docs/design.md section 4: largest shape first, random input
sets rotated, one sample per baseline per round, paired ratios), after its
outputs were checked against a float64 numpy reference. The baselines:

===================  =========================================================================
``dcmlir``           the dispatched module (the plan's ``scf.if`` cascade over tuned kernels)
``iree-default``     IREE's default dynamic-shape lowering (the baseline of every ratio)
``iree-static``      IREE compiled per static shape, default configs
``iree-specialized`` IREE's ``iree_codegen.specialization_ranges`` with the plan's ranges
``oracle``           the best candidate of dcmlir's space measured at each shape
``bucketing``        kernels tuned at bucket sizes, inputs padded up to the bucket
``numpy``            numpy (BLAS) with the device's thread count
``torch``            PyTorch (CPU) with the device's thread count, when installed
===================  =========================================================================

A baseline that cannot run here (torch not installed, say) is reported with
the reason, not dropped silently; a variant that fails to build or gives wrong
numbers is a row with its error.

The numbers go into a :class:`~dcmlir.bench.results.BenchResult`;
:mod:`dcmlir.bench.outputs` and :mod:`dcmlir.bench.plots` write it out.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dcmlir.bench.baselines import (
    bucketing_module,
    entry_function,
    leaf_boxes,
    oracle_module,
    shape_label,
    specialized_module,
    static_function,
    static_module,
)
from dcmlir.bench.results import BASELINE, BASELINES, BenchResult, Cell
from dcmlir.build.compiler import BuildError, build, scratch_directory
from dcmlir.dispatch import Plan, PlanError, WorkloadPlan
from dcmlir.driver import TuneError, load_workloads
from dcmlir.driver import compile as compile_plan
from dcmlir.ir.inputs import read_module_source
from dcmlir.ir.iree import cuda_device_available, versions
from dcmlir.measure.host import device_threads
from dcmlir.measure.loop import Measurer, MeasureReport, NoDevice
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.timing import MeasureSettings, Timing
from dcmlir.measure.variants import HostLibrary, ModuleFunction, Variant
from dcmlir.progress import Progress
from dcmlir.records import RecordDatabase
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, candidate_from_key, select_candidates, space_for
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import Workload

__all__ = [
    "DEFAULT_BUCKETS",
    "BenchError",
    "BenchSettings",
    "bench",
    "default_shapes",
    "load_bench_workload",
]

DEFAULT_BUCKETS = (16, 32, 64, 128)


class BenchError(ValueError):
    """A problem with the user's input: one line naming the file or option."""


@dataclass(frozen=True)
class BenchSettings:
    """How to measure. Oracle measurements are many, so they are cheaper per pair."""

    baselines: tuple[str, ...] = tuple(BASELINES)
    device: str = "local-sync"
    min_time: float = 0.05
    rounds: int = 5
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    oracle_min_time: float = 0.01
    oracle_rounds: int = 2
    oracle_candidates: int = 0  # 0: the whole space; N: N spread over it (quick checks)
    timeout: float = 60.0

    def __post_init__(self) -> None:
        unknown = [b for b in self.baselines if b not in BASELINES]
        if unknown:
            raise BenchError(
                f"--baselines: unknown baseline '{unknown[0]}' (known: {', '.join(BASELINES)})"
            )
        if BASELINE not in self.baselines:
            raise BenchError(f"--baselines: '{BASELINE}' is the reference of every ratio; keep it")
        if self.min_time <= 0 or self.oracle_min_time <= 0 or self.timeout <= 0:
            raise BenchError("--min-time, --oracle-min-time and --timeout must be > 0")
        if self.rounds < 1 or self.oracle_rounds < 1:
            raise BenchError("--rounds and --oracle-rounds must be >= 1")
        if not self.buckets or any(b < 1 for b in self.buckets):
            raise BenchError("--buckets: give positive sizes, e.g. 16,32,64,128")


# --- the run ---------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """A baseline ready to time: the variant to run at each shape (or why it cannot run)."""

    variants: dict[Shape, Variant] = field(default_factory=dict)
    kernels: dict[Shape, str] = field(default_factory=dict)
    unavailable: str | None = None


def load_bench_workload(
    input: str | Path, plan: Plan, dims: Sequence[str], stream: IO[str]
) -> tuple[str, str, Workload, WorkloadPlan]:
    """(source name, module text, the one workload, its plan); errors name the problem."""
    try:
        source, text = read_module_source(str(input), sys.stdin)
    except ValueError as err:
        raise BenchError(str(err)) from None
    if not dims:
        ranges = {d.range for w in plan.workloads for d in w.dims}
        dims = [f"{lo}:{hi}" for lo, hi in ranges] if len(ranges) == 1 else []
    try:
        _, found, _ = load_workloads(input, dims, stream)
    except TuneError as err:
        raise BenchError(str(err)) from None
    if len(found) != 1:
        raise BenchError(
            f"{source}: dcmlir bench measures one workload, the module has {len(found)} "
            "distinct dynamic contractions (time a whole model with dcmlir run-model)"
        )
    (workload,) = found
    planned = plan.for_workload(workload.key)
    if planned is None:
        raise BenchError(
            f"{source}: the plan has no workload {workload.key} ({workload.kind}); "
            f"it was tuned for {', '.join(plan.keys())}"
        )
    return source, text, workload, planned


def default_shapes(workload: Workload, planned: WorkloadPlan) -> list[Shape]:
    """1..8, powers of two and their next value, and the top of the plan's range."""
    lo, hi = planned.dims[0].range
    values = {v for v in range(lo, min(lo + 8, hi + 1))}
    power = 16
    while power <= hi:
        values |= {power, power + 1}
        power *= 2
    values |= {hi - 1, hi}
    ranks = len(workload.dynamic_dims)
    return [(v,) * ranks for v in sorted(v for v in values if lo <= v <= hi)]


def bench(
    input: str | Path,
    *,
    plan: str | Path | Plan,
    dims: Sequence[str] = (),
    shapes: Sequence[Shape] | None = None,
    settings: BenchSettings | None = None,
    db: str | Path = "bench-records.jsonl",
    name: str | None = None,
    stream: IO[str] | None = None,
) -> BenchResult:
    """Compile every baseline of one workload and time them side by side at each shape."""
    settings = settings or BenchSettings()
    stream = stream if stream is not None else sys.stderr
    try:
        loaded = plan if isinstance(plan, Plan) else Plan.load(plan)
    except PlanError as err:
        raise BenchError(str(err)) from None
    source, text, workload, planned = load_bench_workload(input, loaded, dims, stream)
    target = loaded.target
    device = settings.device
    if isinstance(target, CudaTarget):
        if not cuda_device_available():
            raise NoDevice.for_arch(target.arch)
        device = "cuda"
    ranks = len(workload.dynamic_dims)
    given = [s * ranks if len(s) == 1 else tuple(s) for s in shapes or ()]
    shape_list = list(dict.fromkeys(given)) or default_shapes(workload, planned)
    for shape in shape_list:
        workload.shape_dims(shape)  # a ValueError names a shape of the wrong rank
    start = time.perf_counter()
    with scratch_directory("bench") as workdir:
        builder = _Builder(Path(workdir), target, source, stream)
        oracle = None
        if {"oracle", "bucketing"} & set(settings.baselines):
            oracle, oracle_info = _measure_oracle(
                workload, target, shape_list, settings, device, db, stream
            )
        ctx = _Context(
            Path(str(input)),
            text,
            workload,
            planned,
            loaded,
            shape_list,
            oracle,
            settings,
            device,
            builder,
            entry_function(text),
        )
        prepared = {baseline: _prepare(baseline, ctx) for baseline in settings.baselines}
        rows = _time(workload, shape_list, prepared, settings, device, stream)
    info: dict[str, Any] = {
        **versions(),
        "python": sys.version.split()[0],
        "settings": {
            "min_time": settings.min_time,
            "rounds": settings.rounds,
            "buckets": list(settings.buckets),
            "oracle_min_time": settings.oracle_min_time,
            "oracle_rounds": settings.oracle_rounds,
            "oracle_candidates": settings.oracle_candidates,
        },
        "plan_kernels": [k.candidate_key for k in planned.kernels],
        "plan_tree_depth": planned.tree.depth,
        "seconds": time.perf_counter() - start,
        "build_seconds": builder.seconds,
    }
    if oracle is not None:
        info["oracle"] = oracle_info
    return BenchResult(
        name or Path(source).stem,
        source,
        workload.describe(),
        target.describe(),
        device,
        device_threads(device) if device != "cuda" else 0,
        list(settings.baselines),
        {b: p.unavailable for b, p in prepared.items() if p.unavailable},
        shape_list,
        rows,
        info,
    )


class _Builder:
    """Compiles each baseline's module once (cached) into a file the runner loads."""

    def __init__(self, workdir: Path, target: Target, source: str, stream: IO[str]) -> None:
        self.workdir, self.target, self.source, self.stream = workdir, target, source, stream
        self.seconds = 0.0

    def __call__(self, label: str, text: str) -> str:
        print(f"dcmlir bench: building {label}", file=self.stream)
        built = build(text, self.target, source_name=f"{self.source} ({label})")
        self.seconds += built.seconds
        return self.save(label, built.vmfb)

    def save(self, label: str, vmfb: bytes) -> str:
        path = self.workdir / f"{label}.vmfb"
        path.write_bytes(vmfb)
        return str(path)


def _measure_oracle(
    workload: Workload,
    target: Target,
    shapes: list[Shape],
    settings: BenchSettings,
    device: str,
    db: str | Path,
    stream: IO[str],
) -> tuple[MeasureReport, dict[str, Any]]:
    """Every candidate of the space at every shape (and bucket size), resumable from ``db``."""
    ranks = len(workload.dynamic_dims)
    wanted = list(dict.fromkeys([*shapes, *((b,) * ranks for b in settings.buckets)]))
    space = select_candidates(space_for(target), settings.oracle_candidates)
    records = RecordDatabase(db)
    records.load()
    runner = RunnerSettings(
        MeasureSettings(
            min_time=settings.oracle_min_time,
            rounds=settings.oracle_rounds,
            warmup=settings.oracle_min_time / 2,
        ),
        driver=device,
        timeout=settings.timeout,
    )
    print(
        f"dcmlir bench: oracle: {len(space)} candidates x {len(wanted)} shapes "
        f"(records {db}; a second run resumes)",
        file=stream,
    )
    start = time.perf_counter()
    with Measurer(workload, target, records, runner_settings=runner, stream=stream) as measurer:
        report = measurer.measure(space, wanted)
    info = {
        "candidates": len(space),
        "shapes": len(wanted),
        "pairs": len(space) * len(wanted),
        "measured_now": report.measured,
        "seconds_now": time.perf_counter() - start,
        "records": str(db),
    }
    return report, info


@dataclass
class _Context:
    """What every baseline's preparation may need."""

    input: Path
    text: str
    workload: Workload
    planned: WorkloadPlan
    plan: Plan
    shapes: list[Shape]
    oracle: MeasureReport | None
    settings: BenchSettings
    device: str
    build: _Builder
    function: str  # the module's function that holds the workload (not always ``main``)


def _prepare(baseline: str, ctx: _Context) -> _Prepared:
    """Build one baseline; a build failure becomes the baseline's reason, not an exception."""
    try:
        return _PREPARERS[baseline](ctx)
    except BuildError as err:
        return _Prepared(unavailable=f"IREE could not compile it: {str(err).splitlines()[0]}")


def _everywhere(ctx: _Context, name: str, path: str, function: str | None = None) -> _Prepared:
    """``function`` at every shape; by default the user's own (their module, built by IREE)."""
    called = function if function is not None else ctx.function
    return _Prepared({s: ModuleFunction(name, path, called) for s in ctx.shapes})


def _prepare_dcmlir(ctx: _Context) -> _Prepared:
    try:
        compiled = compile_plan(ctx.input, plan=ctx.plan, stream=ctx.build.stream)
    except TuneError as err:
        return _Prepared(unavailable=str(err).splitlines()[0])
    prepared = _everywhere(ctx, "dcmlir", ctx.build.save("dcmlir", compiled.vmfb))
    for shape in ctx.shapes:
        chosen = ctx.planned.select(ctx.workload.shape_dims(shape))
        prepared.kernels[shape] = chosen.candidate_key if chosen else "IREE default (out of range)"
    return prepared


def _prepare_default(ctx: _Context) -> _Prepared:
    return _everywhere(ctx, "iree-default", ctx.build("iree-default", ctx.text))


def _prepare_static(ctx: _Context) -> _Prepared:
    path = ctx.build("iree-static", static_module(ctx.workload, ctx.shapes))
    return _Prepared(
        {s: ModuleFunction("iree-static", path, static_function(s)) for s in ctx.shapes},
        {s: f"static {shape_label(s)}" for s in ctx.shapes},
    )


def _prepare_specialized(ctx: _Context) -> _Prepared:
    boxes = [box for box, _ in leaf_boxes(ctx.planned.tree, ctx.planned.dims)]
    module = specialized_module(ctx.text, ctx.workload.key, boxes)
    prepared = _everywhere(ctx, "iree-specialized", ctx.build("iree-specialized", module))
    prepared.kernels = {s: f"{len(boxes)} ranges" for s in ctx.shapes}
    return prepared


def _prepare_oracle(ctx: _Context) -> _Prepared:
    assert ctx.oracle is not None
    best = {s: ctx.oracle.best(s) for s in ctx.shapes}
    usable = {s: key for s, (key, seconds) in best.items() if math.isfinite(seconds)}
    if not usable:
        return _Prepared(unavailable="no candidate of the space ran at any shape")
    picks = sorted(set(usable.values()))
    module = oracle_module(ctx.workload, [candidate_from_key(k) for k in picks])
    path = ctx.build("oracle", module)
    return _Prepared(
        {s: ModuleFunction("oracle", path, f"o{picks.index(k)}") for s, k in usable.items()},
        dict(usable),
    )


def _prepare_bucketing(ctx: _Context) -> _Prepared:
    assert ctx.oracle is not None
    ranks = len(ctx.workload.dynamic_dims)
    tuned: dict[int, Candidate] = {}
    for size in ctx.settings.buckets:
        key, seconds = ctx.oracle.best((size,) * ranks)
        if math.isfinite(seconds):
            tuned[size] = candidate_from_key(key)
    if not tuned:
        return _Prepared(unavailable="no candidate ran at any bucket size")
    module = bucketing_module(ctx.workload, tuned)  # a module of dcmlir's: its @main
    prepared = _everywhere(ctx, "bucketing", ctx.build("bucketing", module), "main")
    for shape in ctx.shapes:
        size = next((b for b in sorted(tuned) if max(shape) <= b), None)
        prepared.kernels[shape] = (
            f"pad to {size}: {tuned[size].key()}" if size else "IREE default (above buckets)"
        )
    return prepared


def _host_preparer(library: str) -> Callable[[_Context], _Prepared]:
    def prepare(ctx: _Context) -> _Prepared:
        if library == "numpy" and ctx.device == "cuda":
            return _Prepared(unavailable="numpy runs on the host; the plan is for a GPU")
        if importlib.util.find_spec(library) is None:
            return _Prepared(
                unavailable=f"{library} is not installed (pip install 'dcmlir[torch]')"
            )
        variant = HostLibrary(library, library, ctx.workload.einsum())
        return _Prepared({s: variant for s in ctx.shapes}, {s: library for s in ctx.shapes})

    return prepare


_PREPARERS: dict[str, Callable[[_Context], _Prepared]] = {
    "dcmlir": _prepare_dcmlir,
    "iree-default": _prepare_default,
    "iree-static": _prepare_static,
    "iree-specialized": _prepare_specialized,
    "oracle": _prepare_oracle,
    "bucketing": _prepare_bucketing,
    "numpy": _host_preparer("numpy"),
    "torch": _host_preparer("torch"),
}


def _time(
    workload: Workload,
    shapes: list[Shape],
    prepared: dict[str, _Prepared],
    settings: BenchSettings,
    device: str,
    stream: IO[str],
) -> dict[Shape, dict[str, Cell]]:
    """Every available baseline at every shape, interleaved, largest shape first."""
    runner_settings = RunnerSettings(
        MeasureSettings(
            min_time=settings.min_time, rounds=settings.rounds, warmup=settings.min_time
        ),
        driver=device,
        timeout=settings.timeout,
    )
    order = sorted(shapes, key=lambda s: (math.prod(s), s), reverse=True)
    progress = Progress(len(order), "bench", stream)
    rows: dict[Shape, dict[str, Cell]] = {}
    with Runner(runner_settings) as runner:
        for shape in order:
            variants = [
                p.variants[shape]
                for b, p in prepared.items()
                if p.unavailable is None and shape in p.variants
            ]
            problem = ShapeProblem.of(workload, workload.shape_dims(shape))
            result = runner.measure_shape(variants, problem, baseline=BASELINE)
            reference = result.timings.get(BASELINE)
            rows[shape] = {
                name: _cell(timing, reference, prepared[name].kernels.get(shape, ""))
                for name, timing in result.timings.items()
            }
            progress.advance(note=shape_label(shape))
    return {shape: rows[shape] for shape in shapes}


def _cell(timing: Timing, reference: Timing | None, kernel: str) -> Cell:
    speedup = math.nan
    if timing.ok and reference is not None and reference.ok:
        speedup = statistics.median(
            b / a for a, b in zip(timing.samples, reference.samples, strict=False)
        )
    return Cell(
        timing.median * 1e6,
        [s * 1e6 for s in timing.samples],
        speedup,
        timing.max_error,
        timing.error,
        kernel,
    )
