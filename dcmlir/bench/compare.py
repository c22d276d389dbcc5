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
``iree-data-tiling`` IREE with ``--iree-opt-data-tiling``: packed layout, mmt4d ukernels
``iree-static``      IREE compiled per static shape, default configs
``iree-specialized`` IREE's ``iree_codegen.specialization_ranges`` with the plan's ranges
``oracle``           the best candidate of dcmlir's space measured at each shape
``bucketing``        kernels tuned at bucket sizes, inputs padded up to the bucket
``numpy``            numpy (BLAS) with the device's thread count
``torch``            PyTorch (CPU) with the device's thread count, when installed
``onnxruntime``      the contraction as an ONNX model in ONNX Runtime, the device's threads
===================  =========================================================================

Weights (:mod:`dcmlir.bench.weights`): in ``constant`` mode (the default when
operand 1 has no dynamic dim, as a projection's weight) every baseline holds
one fixed random operand 1 as a constant and takes only the activation; in
``argument`` mode both operands are inputs, rotated over the input sets.

A baseline that cannot run here (torch not installed, say) is reported with
the reason, not dropped silently; a variant that fails to build or gives wrong
numbers is a row with its error.

:mod:`dcmlir.bench.peers` builds each baseline; the numbers go into a
:class:`~dcmlir.bench.results.BenchResult`;
:mod:`dcmlir.bench.outputs` and :mod:`dcmlir.bench.plots` write it out.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from dcmlir.bench.baselines import entry_function, shape_label
from dcmlir.bench.peers import Builder, Context, Prepared, prepare
from dcmlir.bench.results import BASELINE, BASELINES, BenchResult, Cell
from dcmlir.bench.weights import (
    ARGUMENT,
    CONSTANT,
    WEIGHT_MODES,
    ConstantWeightReference,
    WeightError,
    check_weight_arguments,
    constant_weight_problem,
    default_weight_mode,
    weight_array,
    weight_problem,
)
from dcmlir.build.compiler import scratch_directory
from dcmlir.dispatch import Plan, PlanError, WorkloadPlan
from dcmlir.driver import TuneError, load_workloads
from dcmlir.ir.inputs import read_module_source
from dcmlir.ir.iree import cuda_device_available, versions
from dcmlir.measure.host import device_threads
from dcmlir.measure.loop import Measurer, MeasureReport, NoDevice
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.timing import MeasureSettings, Timing
from dcmlir.progress import Progress
from dcmlir.records import RecordDatabase
from dcmlir.shapes import Shape
from dcmlir.space import select_candidates, space_for
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
    threads: int | None = None  # local-task's workers and every peer's; None: every core
    min_time: float = 0.05
    rounds: int = 5
    warm_calls: int = 0  # untimed calls of a baseline before each of its samples
    processes: int = 1  # fresh measuring processes; a cell is the median over them
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    oracle_min_time: float = 0.01
    oracle_rounds: int = 2
    oracle_candidates: int = 0  # 0: the whole space; N: N spread over it (quick checks)
    timeout: float = 60.0
    weights: str | None = None  # constant, argument; None: constant where operand 1 is static

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
        if self.warm_calls < 0:
            raise BenchError("--warm-calls must be >= 0")
        if self.processes < 1:
            raise BenchError("--processes must be >= 1")
        if self.threads is not None and (self.device != "local-task" or self.threads < 1):
            raise BenchError("--threads: a count >= 1, with --device local-task")
        if not self.buckets or any(b < 1 for b in self.buckets):
            raise BenchError("--buckets: give positive sizes, e.g. 16,32,64,128")
        if self.weights is not None and self.weights not in WEIGHT_MODES:
            raise BenchError(
                f"--weights: unknown mode '{self.weights}' (known: {', '.join(WEIGHT_MODES)})"
            )


# --- the run ---------------------------------------------------------------------------------


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
    threads = device_threads(device, settings.threads) if device != "cuda" else 0
    mismatch = loaded.device_mismatch(device, threads) if device != "cuda" else None
    if mismatch is not None:
        print(f"dcmlir bench: warning: {mismatch}", file=stream)
    ranks = len(workload.dynamic_dims)
    given = [s * ranks if len(s) == 1 else tuple(s) for s in shapes or ()]
    shape_list = list(dict.fromkeys(given)) or default_shapes(workload, planned)
    for shape in shape_list:
        workload.shape_dims(shape)  # a ValueError names a shape of the wrong rank
    weights = _weight_mode(settings.weights, workload, text, stream)
    weight = weight_array(workload) if weights == CONSTANT else None
    start = time.perf_counter()
    with scratch_directory("bench") as workdir:
        builder = Builder(Path(workdir), target, source, stream, weight, workload.operand_type(1))
        oracle = None
        if {"oracle", "bucketing"} & set(settings.baselines):
            oracle, oracle_info = _measure_oracle(
                workload, target, shape_list, settings, device, db, stream
            )
        ctx = Context(
            Path(str(input)),
            text,
            workload,
            planned,
            loaded,
            shape_list,
            oracle,
            settings.buckets,
            device,
            builder,
            entry_function(text),
            threads,
        )
        prepared = {baseline: prepare(baseline, ctx) for baseline in settings.baselines}
        rows = _time(_problems(workload, weight), shape_list, prepared, settings, device, stream)
    info: dict[str, Any] = {
        **versions(),
        "python": sys.version.split()[0],
        "settings": {
            "min_time": settings.min_time,
            "rounds": settings.rounds,
            "warm_calls": settings.warm_calls,
            "processes": settings.processes,
            "buckets": list(settings.buckets),
            "oracle_min_time": settings.oracle_min_time,
            "oracle_rounds": settings.oracle_rounds,
            "oracle_candidates": settings.oracle_candidates,
            "weights": weights,
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
        threads,
        list(settings.baselines),
        {b: p.unavailable for b, p in prepared.items() if p.unavailable},
        shape_list,
        rows,
        info,
        weights,
    )


def _weight_mode(asked: str | None, workload: Workload, text: str, stream: IO[str]) -> str:
    """The weight mode: as asked, else constant where the module can hold operand 1 as one."""
    mode = asked or default_weight_mode(workload)
    if asked == CONSTANT and (reason := weight_problem(workload)) is not None:
        raise BenchError(f"--weights constant: {reason}")
    if mode != CONSTANT:
        return mode
    try:
        check_weight_arguments(text, workload.operand_type(1))
    except WeightError as err:
        if asked == CONSTANT:
            raise BenchError(f"--weights constant: {err}; use --weights argument") from None
        print(f"dcmlir bench: weights as arguments: {err}", file=stream)
        return ARGUMENT
    return mode


def _problems(workload: Workload, weight: np.ndarray | None) -> Callable[[Shape], ShapeProblem]:
    """Each shape's inputs and reference: both operands, or the activation and the weight."""
    if weight is None:
        return lambda shape: ShapeProblem.of(workload, workload.shape_dims(shape))
    reference = ConstantWeightReference(workload.einsum(), weight)  # one for every shape
    return lambda shape: constant_weight_problem(workload, workload.shape_dims(shape), reference)


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
        threads=settings.threads if device == "local-task" else None,
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


def _time(
    problems: Callable[[Shape], ShapeProblem],
    shapes: list[Shape],
    prepared: dict[str, Prepared],
    settings: BenchSettings,
    device: str,
    stream: IO[str],
) -> dict[Shape, dict[str, Cell]]:
    """Every available baseline at every shape, interleaved, largest shape first, in
    ``settings.processes`` fresh measuring processes one after another: a process's
    moment (where its threads landed, what the machine did then) moves every ratio of
    that run together on two threads, so a cell is the median over the processes."""
    runner_settings = RunnerSettings(
        MeasureSettings(
            min_time=settings.min_time,
            rounds=settings.rounds,
            warmup=settings.min_time,
            warm_calls=settings.warm_calls,
        ),
        driver=device,
        timeout=settings.timeout,
        threads=settings.threads if device == "local-task" else None,
    )
    order = sorted(shapes, key=lambda s: (math.prod(s), s), reverse=True)
    progress = Progress(len(order) * settings.processes, "bench", stream)
    runs: dict[Shape, dict[str, list[Timing]]] = {}
    for process in range(settings.processes):
        with Runner(runner_settings) as runner:
            for shape in order:
                variants = [
                    p.variants[shape]
                    for b, p in prepared.items()
                    if p.unavailable is None and shape in p.variants
                ]
                result = runner.measure_shape(variants, problems(shape), baseline=BASELINE)
                for name, timing in result.timings.items():
                    runs.setdefault(shape, {}).setdefault(name, []).append(timing)
                note = shape_label(shape)
                if settings.processes > 1:
                    note += f", process {process + 1} of {settings.processes}"
                progress.advance(note=note)
    return {
        shape: {
            name: _cell(timings, runs[shape].get(BASELINE), prepared[name].kernels.get(shape, ""))
            for name, timings in runs[shape].items()
        }
        for shape in shapes
    }


def _cell(timings: list[Timing], references: list[Timing] | None, kernel: str) -> Cell:
    """One baseline at one shape from its timing in each process (paired by process
    with the reference's): the median of the processes' medians and of their
    speedups (each the median of that process's per-round ratios)."""
    medians = [t.median for t in timings if t.ok]
    speedups = [
        statistics.median(b / a for a, b in zip(t.samples, r.samples, strict=False))
        for t, r in zip(timings, references or [], strict=False)
        if t.ok and r.ok and t.samples and r.samples
    ]
    failed = next((t for t in timings if not t.ok), None)
    errors = [t.max_error for t in timings if t.max_error is not None]
    return Cell(
        statistics.median(medians) * 1e6 if failed is None else math.inf,
        [s * 1e6 for t in timings for s in t.samples],
        statistics.median(speedups) if speedups and failed is None else math.nan,
        max(errors) if errors else None,
        failed.error if failed is not None else None,
        kernel,
    )
