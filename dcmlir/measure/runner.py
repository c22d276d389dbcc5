"""The Runner: the one timing path. Variants are timed in a worker process that may hang or crash.

The measuring loop (check, warm-up, rounds in :func:`~dcmlir.measure.timing.interleaved`
order, baselines) runs here in the parent; the worker only loads variants
(:mod:`dcmlir.measure.variants`), keeps input sets on the device and takes one
sample per request. Every request has a time limit: a variant that hangs or
kills the worker becomes a failed measurement, the worker is restarted, and
the other variants go on. All variants of a shape are timed by the same worker
process, interleaved (docs/design.md, section 4).

The reference outputs are a float64 einsum the worker computes, or, for a whole
model, whatever the parent computes (:attr:`ShapeProblem.reference`) and sends
with the inputs.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from dcmlir.codegen.kernel import check_tolerance, input_dtypes, input_shapes
from dcmlir.layouts import weight_seed
from dcmlir.measure.timing import (
    Inputs,
    MeasureSettings,
    Timing,
    interleaved,
    random_inputs,
)
from dcmlir.measure.variants import Variant
from dcmlir.measure.worker import read_frame, write_frame
from dcmlir.workload import Workload

Shape = TypeVar("Shape", bound=Hashable)


@dataclass(frozen=True)
class RunnerSettings:
    """Measurement settings plus what only a supervised worker needs."""

    measure: MeasureSettings = field(default_factory=MeasureSettings)
    driver: str = "local-sync"
    timeout: float = 60.0  # seconds per worker request (one check, warm-up or sample)
    drift_threshold: float = 0.10  # baseline after/before beyond +-10%: flagged
    max_input_bytes: int = 256 << 20  # a shape's input sets beyond this are not measured

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ValueError("timeout must be a finite number of seconds > 0")


@dataclass(frozen=True)
class ShapeProblem:
    """The inputs of one shape: argument shapes, numpy dtypes, and what outputs must be.

    ``einsum``: the worker computes the expected output as this contraction in
    float64. ``reference``: the parent computes the expected outputs of each
    input set (a whole model's float64 twin, or IREE's default build) and sends
    them with the inputs. Exactly one of the two.
    """

    input_shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    einsum: str | None = None
    rtol: float | None = None  # the check's tolerance; None: the settings' (f32's)
    reference: Callable[[Inputs], Sequence[np.ndarray]] | None = None
    # (input, seed): an input that is the same array in every set (a weight, as in a
    # model: :func:`dcmlir.layouts.fixed_weight`); kernel modules may hold it as a constant
    fixed: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        shapes = tuple(tuple(int(d) for d in shape) for shape in self.input_shapes)
        object.__setattr__(self, "input_shapes", shapes)  # hashable, whatever was given
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        if (self.einsum is None) == (self.reference is None):
            raise ValueError("a ShapeProblem needs an einsum or a reference, not both")
        if len(self.dtypes) != len(self.input_shapes):
            raise ValueError("a ShapeProblem needs one dtype per input")

    @classmethod
    def of(
        cls, workload: Workload, dims: Mapping[int, int], *, fixed_weight: bool = False
    ) -> ShapeProblem:
        """The problem of one shape (``{loop: value}``) of a workload, with its tolerance;
        ``fixed_weight``: input 1 is the workload's fixed weight in every set."""
        fixed = ((1, weight_seed(workload.key)),) if fixed_weight else ()
        return cls(
            tuple(input_shapes(workload, dims)),
            tuple(np.dtype(t).name for t in input_dtypes(workload)),
            workload.einsum(),
            check_tolerance(workload),
            fixed=fixed,
        )

    @property
    def elements(self) -> int:
        """Input elements of one set: what "the largest shape" means for a warm-up."""
        return sum(math.prod(shape) for shape in self.input_shapes)

    def arrays(self, sets: int, seed: int) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
        """(input sets, expected outputs of each) as the parent computes them."""
        assert self.reference is not None
        inputs = [
            [array.astype(dtype) for array, dtype in zip(arrays, self.dtypes, strict=True)]
            for arrays in random_inputs(self.input_shapes, sets=sets, seed=seed)
        ]
        return inputs, [list(self.reference(arrays)) for arrays in inputs]


@dataclass
class ShapeResult:
    """Timings of the variants of one shape, measured side by side in one worker."""

    timings: dict[str, Timing]
    baseline: str | None = None
    baseline_before: float | None = None
    baseline_after: float | None = None

    @property
    def drift(self) -> float | None:
        """Relative change of the baseline from before to after the rounds."""
        if not self.baseline_before or self.baseline_after is None:
            return None
        return self.baseline_after / self.baseline_before - 1.0

    def __getitem__(self, name: str) -> Timing:
        return self.timings[name]

    @property
    def medians(self) -> dict[str, float]:
        return {name: t.median for name, t in self.timings.items()}

    def ratio(self, name: str, baseline: str) -> float:
        """Time of ``name`` over time of ``baseline`` (>1: slower), median of per-round ratios.

        Pairing samples of the same round cancels most of the machine's drift.
        Infinite when ``name`` failed, NaN when only the baseline did.
        """
        mine, theirs = self[name], self[baseline]
        if not mine.ok:
            return math.inf
        if not theirs.ok:
            return math.nan
        return statistics.median(a / b for a, b in zip(mine.samples, theirs.samples, strict=False))


def _output_elements(einsum: str, shapes: Sequence[Sequence[int]]) -> int:
    """Elements of ``einsum``'s result for inputs of ``shapes`` (``"mk,kn->mn"``)."""
    inputs, _, output = einsum.partition("->")
    sizes: dict[str, int] = {}
    for letters, shape in zip(inputs.split(","), shapes, strict=False):
        sizes.update(zip(letters, shape, strict=False))
    return math.prod(sizes.get(letter, 1) for letter in output)


class WorkerFailure(Exception):
    """The worker did not answer in time or died; the message says which."""


class _Worker:
    """A ``python -m dcmlir.measure.worker`` process answering one request at a time over pipes.

    A plain subprocess rather than ``multiprocessing``: spawn would re-import the
    user's ``__main__``, and fork would copy a process that may hold IREE threads.
    It gets this process's ``sys.path``, so a :class:`~dcmlir.measure.variants.HostModel`
    factory imports there as it does here. Frames are 8-byte little-endian lengths
    followed by a pickle.
    """

    def __init__(self, driver: str) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        path = os.pathsep.join(os.path.abspath(p) for p in sys.path if os.path.isdir(p or "."))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dcmlir.measure.worker", driver],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, "PYTHONPATH": path},
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def call(self, timeout: float, *request: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            write_frame(self.process.stdin, request)
            reply = read_frame(self.process.stdout, timeout)
        except TimeoutError:
            self.kill()
            raise WorkerFailure(f"timed out after {timeout:g} s") from None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise WorkerFailure(self._death()) from None
        status, payload = reply
        if status == "error":
            raise RuntimeError(payload)
        return payload

    def _death(self) -> str:
        try:
            code = self.process.wait(5.0)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        self.log.seek(0)
        tail = self.log.read().decode("utf-8", "replace").strip().splitlines()[-3:]
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        detail = f": {' / '.join(tail)}" if tail else ""
        return f"the measuring process died ({how}){detail}"

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.alive():
            try:
                assert self.process.stdin is not None
                write_frame(self.process.stdin, ("exit",))
                self.process.wait(2.0)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.log.close()


class Runner:
    """Measures variants shape by shape; keep one per tuning run (the worker is reused)."""

    def __init__(self, settings: RunnerSettings | None = None) -> None:
        self.settings = settings or RunnerSettings()
        self._worker: _Worker | None = None
        self._variants: Sequence[Variant] = ()
        self._problem: ShapeProblem | None = None
        self._load_errors: dict[str, str] = {}  # by variant name, kept across shapes
        self._loaded: set[Hashable] = set()
        self._inputs_sent = False
        self._arrays: dict[ShapeProblem, tuple[Any, Any]] = {}  # parent-computed references
        self._warm: ShapeProblem | None = None  # the warm-up's problem: its arrays are kept

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    # -- plumbing -------------------------------------------------------------------------
    def _ensure_ready(self) -> _Worker:
        """A worker with this shape's variants loaded and its inputs on the device.

        A worker that died or timed out is replaced and brought back to the
        same state; a live one only loads what it lacks.
        """
        worker = self._worker
        if worker is None or not worker.alive():
            if worker is not None:
                worker.kill()
            worker = self._worker = _Worker(self.settings.driver)
            self._loaded = set()
            self._inputs_sent = False
        self._load_missing(worker)
        if not self._inputs_sent and self._problem is not None:
            worker.call(self.settings.timeout, *self._inputs_request(self._problem))
            self._inputs_sent = True
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

    def _load_missing(self, worker: _Worker) -> None:
        by_group: dict[Hashable, list[Variant]] = {}
        for variant in self._variants:
            if variant.key not in self._loaded:
                by_group.setdefault(variant.group, []).append(variant)
        for group in by_group.values():
            try:
                keys = [v.key for v in group]
                failed = worker.call(self.settings.timeout, "load", group, keys)
            except RuntimeError as err:  # the whole module: every function in it fails
                failed = {v.key: str(err) for v in group}
            for variant in group:
                self._loaded.add(variant.key)
                if variant.key in failed:
                    self._load_errors[variant.name] = f"load: {failed[variant.key]}"

    def _start_shape(self, variants: Sequence[Variant], problem: ShapeProblem) -> None:
        """Make the worker serve this shape: load what it lacks, replace the inputs."""
        self._arrays = {p: a for p, a in self._arrays.items() if p in (problem, self._warm)}
        self._variants, self._problem = tuple(variants), problem
        self._inputs_sent = False
        self._ensure_ready()

    def _request(self, timing: Timing, command: str, variant: Variant, argument: float) -> Any:
        """One worker request for one variant; any failure becomes that variant's error."""
        try:
            worker = self._ensure_ready()
            return worker.call(self.settings.timeout, command, variant.key, argument)
        except WorkerFailure as err:
            self._worker = None  # replaced (and reloaded) on the next request
            timing.error = f"{command}: {err}"
        except RuntimeError as err:
            timing.error = f"{command}: {err}"
        timing.samples.clear()
        return None

    # -- the loop -------------------------------------------------------------------------
    def measure_shape(
        self,
        variants: Sequence[Variant],
        problem: ShapeProblem,
        *,
        baseline: str | None = None,
        on_sample: Callable[[str], None] | None = None,
    ) -> ShapeResult:
        """Check, warm up and time every variant on one shape, interleaved in rounds.

        ``baseline`` (a variant name, e.g. IREE's default) is also sampled once
        before and once after the rounds, so drift of the machine shows.
        """
        names = [v.name for v in variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be distinct: {names}")
        settings = self.settings.measure
        timings = {v.name: Timing(v.name) for v in variants}
        result = ShapeResult(timings, baseline)
        too_large = self._too_large(problem)
        if too_large is not None:  # failed as data: the search leaves such shapes to IREE
            for timing in timings.values():
                timing.error = f"setup: {too_large}"
            return result
        try:
            self._start_shape(variants, problem)
        except WorkerFailure as err:
            self._worker = None
            for timing in timings.values():
                timing.error = f"setup: {err}"
            return result
        except RuntimeError as err:  # the worker could not make the inputs (MemoryError)
            for timing in timings.values():
                timing.error = f"setup: {err}"
            return result
        for name in timings:
            if name in self._load_errors:
                timings[name].error = self._load_errors[name]
        healthy = self._check_all(variants, timings)
        for variant in healthy:
            self._request(timings[variant.name], "warmup", variant, settings.warmup)
        by_name = {v.name: v for v in variants}
        if baseline is not None:
            result.baseline_before = self._sample(timings[baseline], by_name[baseline])
        for variant in interleaved(
            healthy, settings.rounds, lambda v: timings[v.name].error is None
        ):
            timing = timings[variant.name]
            seconds = self._sample(timing, variant)
            if seconds is not None:
                timing.samples.append(seconds)
            if on_sample is not None:
                on_sample(variant.name)
        if baseline is not None:
            result.baseline_after = self._sample(timings[baseline], by_name[baseline])
        return result

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
        try:
            self._start_shape(variants, problem)
        except WorkerFailure:
            self._worker = None
            return
        for variant in variants:
            if variant.name not in self._load_errors:
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

    def _sample(self, timing: Timing, variant: Variant) -> float | None:
        if timing.error is not None:
            return None
        found = self._request(timing, "sample", variant, self.settings.measure.min_time)
        if found is None:
            return None
        seconds, calls = found
        timing.calls += calls
        return float(seconds)
