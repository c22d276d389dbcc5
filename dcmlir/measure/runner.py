"""The Runner: the one timing path. Variants are timed in a worker process that may hang or crash.

The measuring loop (check, warm-up, rounds in :func:`~dcmlir.measure.timing.interleaved`
order, baselines) runs here in the parent; the worker only loads variants
(:mod:`dcmlir.measure.variants`), keeps input sets on the device and takes one
sample per request. Every request has a time limit: a variant that hangs or
kills the worker becomes a failed measurement, the worker is restarted, and
the other variants go on. All variants of a shape are timed interleaved
(docs/design.md, section 4): by one worker process on one thread, and with more
than one thread by one worker per thread pool (IREE, numpy's OpenBLAS, torch,
onnxruntime), each sample taken once the others are quiet, with the CPU time the
others took during it kept as the sample's ``interference``.

The reference outputs are a float64 einsum the worker computes, or, for a whole
model, whatever the parent computes (:attr:`ShapeProblem.reference`) and sends
with the inputs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from dcmlir.measure.host import device_threads
from dcmlir.measure.shape_problem import ShapeProblem, ShapeResult
from dcmlir.measure.supervised import (
    WorkerFailure,
    WorkerProcess,
    bystanders,
    cpu_seconds,
    wait_quiet,
)
from dcmlir.measure.timing import (
    MeasureSettings,
    Timing,
    interleaved,
    unsettled,
)
from dcmlir.measure.variants import Variant

__all__ = ["Runner", "RunnerSettings", "ShapeProblem", "ShapeResult", "WorkerFailure"]

Shape = TypeVar("Shape", bound=Hashable)


@dataclass(frozen=True)
class RunnerSettings:
    """Measurement settings plus what only a supervised worker needs."""

    measure: MeasureSettings = field(default_factory=MeasureSettings)
    driver: str = "local-sync"
    timeout: float = 60.0  # seconds per worker request (one check, warm-up or sample)
    drift_threshold: float = 0.10  # baseline after/before beyond +-10%: flagged
    max_input_bytes: int = 256 << 20  # a shape's input sets beyond this are not measured
    threads: int | None = None  # local-task's workers (and the peers'); None: every core
    isolate: bool | None = None  # a process per thread pool; None: when threads > 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ValueError("timeout must be a finite number of seconds > 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, not {self.threads}")

    @property
    def thread_count(self) -> int:
        """Threads the device (and every peer) computes with: 1 on ``local-sync``."""
        return device_threads(self.driver, self.threads)

    @property
    def isolated(self) -> bool:
        """Whether each thread pool is timed in a process of its own."""
        if self.isolate is not None:
            return self.isolate
        return self.driver == "local-task" and self.thread_count > 1


def _output_elements(einsum: str, shapes: Sequence[Sequence[int]]) -> int:
    """Elements of ``einsum``'s result for inputs of ``shapes`` (``"mk,kn->mn"``)."""
    inputs, _, output = einsum.partition("->")
    sizes: dict[str, int] = {}
    for letters, shape in zip(inputs.split(","), shapes, strict=False):
        sizes.update(zip(letters, shape, strict=False))
    return math.prod(sizes.get(letter, 1) for letter in output)


@dataclass
class _Pool:
    """One measuring process and its state: what it loaded, whether it has this shape's inputs."""

    worker: WorkerProcess | None = None
    loaded: set[Hashable] = field(default_factory=set)
    inputs_sent: bool = False


SHARED = "shared"  # the one pool of a runner that is not isolated


class Runner:
    """Measures variants shape by shape; keep one per tuning run (the worker is reused)."""

    def __init__(self, settings: RunnerSettings | None = None) -> None:
        self.settings = settings or RunnerSettings()
        self._pools: dict[str, _Pool] = {}
        self._variants: Sequence[Variant] = ()
        self._problem: ShapeProblem | None = None
        self._load_errors: dict[str, str] = {}  # by variant name, kept across shapes
        self._arrays: dict[ShapeProblem, tuple[Any, Any]] = {}  # parent-computed references
        self._warm: ShapeProblem | None = None  # the warm-up's problem: its arrays are kept
        self._last_pool: str | None = None  # whose request ran last (isolated pools)

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for pool in self._pools.values():
            if pool.worker is not None:
                pool.worker.close()
        self._pools.clear()

    def processes(self) -> dict[str, int]:
        """The live measuring processes: pool name -> pid (``shared``: the only one)."""
        return {
            name: pool.worker.pid
            for name, pool in self._pools.items()
            if pool.worker is not None and pool.worker.alive()
        }

    # -- plumbing -------------------------------------------------------------------------
    def _pool_of(self, variant: Variant) -> str:
        return variant.pool if self.settings.isolated else SHARED

    def _ensure_ready(self, name: str) -> WorkerProcess:
        """Pool ``name``'s worker with this shape's variants loaded and its inputs on the device.

        A worker that died or timed out is replaced and brought back to the
        same state; a live one only loads what it lacks.
        """
        pool = self._pools.setdefault(name, _Pool())
        worker = pool.worker
        if worker is None or not worker.alive():
            if worker is not None:
                worker.kill()
            worker = pool.worker = WorkerProcess(self.settings.driver, self.settings.thread_count)
            pool.loaded = set()
            pool.inputs_sent = False
        self._load_missing(pool, worker, name)
        if not pool.inputs_sent and self._problem is not None:
            worker.call(self.settings.timeout, *self._inputs_request(self._problem))
            pool.inputs_sent = True
        return worker

    def _inputs_request(self, problem: ShapeProblem) -> tuple[Any, ...]:
        """Inputs the worker generates (an einsum problem) or arrays the parent computed."""
        measure = self.settings.measure
        if problem.reference is None:
            return (
                "inputs",
                problem.input_shapes,
                problem.dtypes,
                problem.einsum,
                measure.input_sets,
                measure.seed,
                problem.fixed,
            )
        if problem not in self._arrays:
            self._arrays[problem] = problem.arrays(measure.input_sets, measure.seed)
        return ("arrays", *self._arrays[problem])

    def _load_missing(self, pool: _Pool, worker: WorkerProcess, name: str) -> None:
        by_group: dict[Hashable, list[Variant]] = {}
        for variant in self._variants:
            if variant.key not in pool.loaded and self._pool_of(variant) == name:
                by_group.setdefault(variant.group, []).append(variant)
        for group in by_group.values():
            try:
                keys = [v.key for v in group]
                failed = worker.call(self.settings.timeout, "load", group, keys)
            except RuntimeError as err:  # the whole module: every function in it fails
                failed = {v.key: str(err) for v in group}
            for variant in group:
                pool.loaded.add(variant.key)
                if variant.key in failed:
                    self._load_errors[variant.name] = f"load: {failed[variant.key]}"

    def _start_shape(self, variants: Sequence[Variant], problem: ShapeProblem) -> dict[str, str]:
        """Make the workers serve this shape: load what they lack, replace the inputs.

        Returns why a pool could not be set up (its variants fail), by pool name. The
        parent's reference outputs are computed first: their failure is raised.
        """
        self._arrays = {p: a for p, a in self._arrays.items() if p in (problem, self._warm)}
        self._inputs_request(problem)  # the parent's part (a reference that fails raises)
        self._variants, self._problem = tuple(variants), problem
        for pool in self._pools.values():
            pool.inputs_sent = False
        failed: dict[str, str] = {}
        for name in dict.fromkeys(self._pool_of(v) for v in variants):
            try:
                self._ensure_ready(name)
            except WorkerFailure as err:
                self._pools[name].worker = None
                failed[name] = str(err)
            except RuntimeError as err:  # the worker could not make the inputs (MemoryError)
                failed[name] = str(err)
        return failed

    def _request(
        self, timing: Timing, command: str, variant: Variant, argument: float | tuple[float, int]
    ) -> Any:
        """One worker request for one variant; any failure becomes that variant's error."""
        name = self._pool_of(variant)
        try:
            worker = self._ensure_ready(name)
            if command == "sample" and self.settings.isolated:
                return self._quiet_sample(timing, worker, name, variant.key, argument)
            self._last_pool = name
            return worker.call(self.settings.timeout, command, variant.key, argument)
        except WorkerFailure as err:
            self._pools[name].worker = None  # replaced (and reloaded) on the next request
            timing.error = f"{command}: {err}"
        except RuntimeError as err:
            timing.error = f"{command}: {err}"
        timing.samples.clear()
        return None

    def _quiet_sample(
        self,
        timing: Timing,
        worker: WorkerProcess,
        name: str,
        key: Hashable,
        argument: float | tuple[float, int],
    ) -> Any:
        """A sample taken once the other pools' processes (and this one's other threads) are
        quiet; the cores they took meanwhile raise ``timing.interference``.

        Only after another pool's turn: it waits, then makes one untimed call per input
        set, so the sample starts with warm caches and awake workers as a sample after
        one of its own pool's does (a pool that gets no requests does not wake up).
        """
        others = [pid for pool, pid in self.processes().items() if pool != name]
        if self._last_pool not in (None, name):
            wait_quiet(others)
            worker.call(self.settings.timeout, "warmup", key, 0.0)
        self._last_pool = name
        watched = bystanders(others)
        before, start = cpu_seconds(watched), time.perf_counter()
        reply = worker.call(self.settings.timeout, "sample", key, argument)
        wall, after = time.perf_counter() - start, cpu_seconds(watched)
        if before is not None and after is not None and wall > 0:
            timing.interference = max(timing.interference, (after - before) / wall)
        return reply

    # -- the loop -------------------------------------------------------------------------
    def measure_shape(
        self,
        variants: Sequence[Variant],
        problem: ShapeProblem,
        *,
        baseline: str | None = None,
        on_sample: Callable[[str], None] | None = None,
        measure: MeasureSettings | None = None,
    ) -> ShapeResult:
        """Check, warm up and time every variant on one shape, interleaved in rounds.

        ``baseline`` (a variant name, e.g. IREE's default) is also sampled once
        before and once after the rounds, so drift of the machine shows. ``measure``:
        this shape's sampling (rounds, min_time, warm_calls), instead of the runner's.
        """
        names = [v.name for v in variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be distinct: {names}")
        settings = measure or self.settings.measure
        timings = {v.name: Timing(v.name) for v in variants}
        result = ShapeResult(timings, baseline)
        too_large = self._too_large(problem)
        if too_large is not None:  # failed as data: the search leaves such shapes to IREE
            for timing in timings.values():
                timing.error = f"setup: {too_large}"
            return result
        try:
            setup_failed = self._start_shape(variants, problem)
        except RuntimeError as err:  # the parent's reference failed: nothing can be checked
            for timing in timings.values():
                timing.error = f"setup: {err}"
            return result
        for variant in variants:
            if self._pool_of(variant) in setup_failed:
                timings[variant.name].error = f"setup: {setup_failed[self._pool_of(variant)]}"
            elif variant.name in self._load_errors:
                timings[variant.name].error = self._load_errors[variant.name]
        healthy = self._check_all(variants, timings)
        warm = [self._request(timings[v.name], "warmup", v, settings.warmup) for v in healthy]
        if measure is None:  # call by call when every call is short (MeasureSettings.for_calls)
            settings = settings.for_calls(max((w[0] for w in warm if w), default=math.inf))
        result.call_by_call = settings.sampled_call_by_call
        by_name = {v.name: v for v in variants}
        if baseline is not None:
            result.baseline_before = self._sample(timings[baseline], by_name[baseline], settings)

        def running(variant: Variant) -> bool:
            return timings[variant.name].error is None

        self._rounds(healthy, timings, settings, running, on_sample)
        result.extra_rounds = self._settle(healthy, timings, settings, running)
        if baseline is not None:
            result.baseline_after = self._sample(timings[baseline], by_name[baseline], settings)
        if measure is None and result.call_by_call and self.settings.thread_count > 1:
            self._sustained_too(healthy, timings, result)  # not for a caller's own sampling
        return result

    def _sustained_too(
        self, variants: Sequence[Variant], timings: dict[str, Timing], result: ShapeResult
    ) -> None:
        """With several threads, short calls sampled call by call are sampled back to back
        as well (the runner's own sampling, :attr:`RunnerSettings.measure`); each variant
        keeps the slower of its two samplings (:attr:`ShapeResult.sustained`: those that
        took the second). A caller's own sampling (a duel's pairs) is left as it asked.

        On ``local-task`` how calls follow each other moves one build against another: the
        plan of `dense_out` ran 1.7x faster than IREE's default call by call at T = 1 and
        0.7-0.8x back to back (docs/benchmarks.md, "Every core"). A user's calls come
        either way, so a kernel is chosen only where it wins both.
        """
        sustained = self.settings.measure
        if sustained.sampled_call_by_call:
            return
        again = {v.name: Timing(v.name) for v in variants}
        self._rounds(variants, again, sustained, lambda v: timings[v.name].ok)
        for name, timing in again.items():
            first = timings[name]
            if not (first.ok and timing.samples):
                continue
            result.back_to_back[name] = timing.median
            if timing.median > first.median:
                first.samples, first.calls = timing.samples, first.calls + timing.calls
                result.sustained.add(name)

    def _settle(
        self,
        variants: Sequence[Variant],
        timings: dict[str, Timing],
        settings: MeasureSettings,
        healthy: Callable[[Variant], bool],
    ) -> int:
        """Rounds after ``settings.rounds``, one at a time, of every ``healthy`` variant
        while one of them is :func:`~dcmlir.measure.timing.unsettled`, up to
        ``settings.most_rounds`` in all; how many. Not for samples of one call: there are
        many of them already."""
        tolerance, extra = settings.settle_tolerance, 0
        if tolerance <= 0 or settings.sampled_call_by_call:
            return 0
        one = dataclasses.replace(settings, rounds=1)
        for first in range(settings.rounds, settings.most_rounds):
            found = [timings[v.name].samples for v in variants if healthy(v)]
            if not any(unsettled(samples, tolerance) for samples in found):
                break
            self._rounds(variants, timings, one, healthy, first=first)
            extra += 1
        return extra

    def _rounds(
        self,
        variants: Sequence[Variant],
        into: dict[str, Timing],
        settings: MeasureSettings,
        healthy: Callable[[Variant], bool],
        on_sample: Callable[[str], None] | None = None,
        first: int = 0,
    ) -> None:
        """``settings.rounds`` interleaved rounds (the first of them round ``first``), each
        sample added to ``into``."""
        for variant in interleaved(variants, settings.rounds, healthy, first):
            timing = into[variant.name]
            seconds = self._sample(timing, variant, settings)
            if seconds is not None:
                timing.samples.append(seconds)
            if on_sample is not None:
                on_sample(variant.name)

    def measure_shapes(
        self,
        variants: Sequence[Variant],
        problems: Mapping[Shape, ShapeProblem],
        *,
        progress: Callable[[Shape], None] | None = None,
    ) -> dict[Shape, ShapeResult]:
        """:meth:`measure_shape` at each shape in the given order, after a warm-up at the
        largest (most input elements): a process measured small-first can stay in a slow
        state."""
        if not problems:
            return {}
        largest = max(problems, key=lambda shape: problems[shape].elements)
        self.warm_up(variants, problems[largest])
        results: dict[Shape, ShapeResult] = {}
        for shape, problem in problems.items():
            if progress is not None:
                progress(shape)
            results[shape] = self.measure_shape(variants, problem)
        self._warm = None
        self._arrays.clear()
        return results

    def warm_up(self, variants: Sequence[Variant], problem: ShapeProblem) -> None:
        """Run every variant that loads for the warm-up time on ``problem``, untimed and
        unchecked; a failure here is found again (and recorded) by :meth:`measure_shape`."""
        self._warm = problem
        setup_failed = self._start_shape(variants, problem)
        for variant in variants:
            if variant.name not in self._load_errors and self._pool_of(variant) not in setup_failed:
                self._request(Timing(variant.name), "warmup", variant, self.settings.measure.warmup)

    def _too_large(self, problem: ShapeProblem) -> str | None:
        """Why a shape's inputs are not made (they would not fit in memory), else None."""
        sets = self.settings.measure.input_sets
        size = sets * sum(
            math.prod(shape) * np.dtype(dtype).itemsize
            for shape, dtype in zip(problem.input_shapes, problem.dtypes, strict=True)
        )
        if problem.einsum is not None:  # the float64 reference and the result, per set
            size += sets * _output_elements(problem.einsum, problem.input_shapes) * (8 + 4)
        if size <= self.settings.max_input_bytes:
            return None
        return (
            f"its {sets} input sets take {size / 2**30:.3g} GiB, over the measuring limit of "
            f"{self.settings.max_input_bytes / 2**30:.3g} GiB: not measured here"
        )

    def _check_all(self, variants: Sequence[Variant], timings: dict[str, Timing]) -> list[Variant]:
        """Check each variant's output against the reference on every input set."""
        healthy = []
        for variant in variants:
            timing = timings[variant.name]
            if timing.error is not None:
                continue
            rtol = self.settings.measure.rtol
            if self._problem is not None and self._problem.rtol is not None:
                rtol = max(rtol, self._problem.rtol)
            worst = self._request(timing, "check", variant, rtol)
            if timing.error is None:
                timing.max_error = worst
                healthy.append(variant)
        return healthy

    def _sample(self, timing: Timing, variant: Variant, measure: MeasureSettings) -> float | None:
        if timing.error is not None:
            return None
        found = self._request(timing, "sample", variant, (measure.min_time, measure.warm_calls))
        if found is None:
            return None
        seconds, calls = found
        timing.calls += calls
        return float(seconds)
