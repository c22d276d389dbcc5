"""The Runner: times compiled variants in a worker process that may hang or crash.

The measuring loop (rounds, rotation, baselines) runs here in the parent; the
worker only loads modules, keeps input sets on the device and takes one
sample per request. Every request has a time limit: a variant that hangs or
kills the worker becomes a failed measurement, the worker is restarted, and
the other variants go on. All variants of a shape are timed by the same worker
process, interleaved (DESIGN.md section 4).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from dcmlir.measure.timing import MeasureSettings, Timing

if TYPE_CHECKING:
    from dcmlir.workload import Workload


@dataclass(frozen=True)
class RunnerSettings:
    """Measurement settings plus what only a supervised worker needs."""

    measure: MeasureSettings = field(default_factory=MeasureSettings)
    driver: str = "local-sync"
    timeout: float = 60.0  # seconds per worker request (one check, warm-up or sample)
    drift_threshold: float = 0.10  # baseline after/before beyond +-10%: flagged

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")


HOST_PREFIX = "host:"
"""``vmfb_path`` of a host-library variant: ``host:numpy`` or ``host:torch`` (see
:meth:`RunVariant.host`); the worker computes the contraction with that library."""


@dataclass(frozen=True)
class RunVariant:
    """One function of a compiled module file, or a host library's contraction."""

    name: str
    vmfb_path: str
    function: str

    @classmethod
    def host(cls, name: str, library: str, einsum: str) -> RunVariant:
        """``library`` (numpy, torch) computing ``einsum`` with the device's thread count."""
        return cls(name, f"{HOST_PREFIX}{library}", einsum)


@dataclass(frozen=True)
class ShapeProblem:
    """The inputs of one shape: argument shapes, numpy dtypes, and an einsum reference."""

    input_shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    einsum: str
    rtol: float | None = None  # the check's tolerance; None: the settings' (f32's)

    @classmethod
    def of(cls, workload: Workload, dims: Mapping[int, int]) -> ShapeProblem:
        """The problem of one shape (``{loop: value}``) of a workload, with its tolerance."""
        from dcmlir.codegen.kernel import check_tolerance, input_dtypes, input_shapes

        return cls(
            tuple(input_shapes(workload, dims)),
            tuple(np.dtype(t).name for t in input_dtypes(workload)),
            workload.einsum(),
            check_tolerance(workload),
        )


@dataclass
class ShapeResult:
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


class WorkerFailure(Exception):
    """The worker did not answer in time or died; the message says which."""


class _Worker:
    """A ``python -m dcmlir.measure.runner`` process answering one request at a time over pipes.

    A plain subprocess rather than ``multiprocessing``: spawn would re-import the
    user's ``__main__``, and fork would copy a process that may hold IREE threads.
    Frames are 8-byte little-endian lengths followed by a pickle.
    """

    def __init__(self, driver: str) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dcmlir.measure.runner", driver],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def call(self, timeout: float, *request: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            _write_frame(self.process.stdin, request)
            reply = _read_frame(self.process.stdout, timeout)
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
                _write_frame(self.process.stdin, ("exit",))
                self.process.wait(2.0)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.log.close()


def _write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read_exact(stream: IO[bytes], size: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    fd = stream.fileno()
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, remaining)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes], timeout: float | None = None) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = struct.unpack("<Q", _read_exact(stream, 8, deadline))
    return pickle.loads(_read_exact(stream, size, deadline))


class Runner:
    """Measures variants shape by shape; keep one per tuning run (the worker is reused)."""

    def __init__(self, settings: RunnerSettings | None = None) -> None:
        self.settings = settings or RunnerSettings()
        self._worker: _Worker | None = None
        self._variants: Sequence[RunVariant] = ()
        self._problem: ShapeProblem | None = None
        self._load_errors: dict[str, str] = {}  # by variant name, kept across shapes
        self._loaded: set[tuple[str, str]] = set()
        self._inputs_sent = False

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
        """A worker with this shape's modules loaded and its inputs on the device.

        A worker that died or timed out is replaced and brought back to the
        same state; a live one only loads what it lacks.
        """
        worker = self._worker
        if worker is None or not worker.alive():
            if worker is not None:
                worker.kill()
            worker = self._worker = _Worker(self.settings.driver)
            self._loaded: set[tuple[str, str]] = set()
            self._inputs_sent = False
        self._load_missing(worker)
        if not self._inputs_sent and self._problem is not None:
            measure = self.settings.measure
            worker.call(
                self.settings.timeout,
                "inputs",
                self._problem.input_shapes,
                self._problem.dtypes,
                self._problem.einsum,
                measure.input_sets,
                measure.seed,
            )
            self._inputs_sent = True
        return worker

    def _load_missing(self, worker: _Worker) -> None:
        by_path: dict[str, list[RunVariant]] = {}
        for variant in self._variants:
            if (variant.vmfb_path, variant.function) not in self._loaded:
                by_path.setdefault(variant.vmfb_path, []).append(variant)
        for path, group in by_path.items():
            try:
                failed = worker.call(
                    self.settings.timeout, "load", path, [v.function for v in group]
                )
            except RuntimeError as err:  # the whole module: every function in it fails
                failed = {v.function: str(err) for v in group}
            for variant in group:
                self._loaded.add((variant.vmfb_path, variant.function))
                if variant.function in failed:
                    self._load_errors[variant.name] = f"load: {failed[variant.function]}"

    def _start_shape(self, variants: Sequence[RunVariant], problem: ShapeProblem) -> None:
        """Make the worker serve this shape: load what it lacks, replace the inputs."""
        self._variants, self._problem = tuple(variants), problem
        self._inputs_sent = False
        self._ensure_ready()

    def _request(self, timing: Timing, command: str, variant: RunVariant, argument: float) -> Any:
        """One worker request for one variant; any failure becomes that variant's error."""
        try:
            worker = self._ensure_ready()
            return worker.call(
                self.settings.timeout, command, variant.vmfb_path, variant.function, argument
            )
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
        variants: Sequence[RunVariant],
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
        try:
            self._start_shape(variants, problem)
        except WorkerFailure as err:
            self._worker = None
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
        for round_index in range(settings.rounds):
            order = [v for v in healthy if timings[v.name].error is None]
            if not order:
                break
            shift = round_index % len(order)  # rotate who goes first: no position bias
            for variant in order[shift:] + order[:shift]:
                timing = timings[variant.name]
                seconds = self._sample(timing, variant)
                if seconds is not None:
                    timing.samples.append(seconds)
                if on_sample is not None:
                    on_sample(variant.name)
        if baseline is not None:
            result.baseline_after = self._sample(timings[baseline], by_name[baseline])
        return result

    def _check_all(
        self, variants: Sequence[RunVariant], timings: dict[str, Timing]
    ) -> list[RunVariant]:
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

    def _sample(self, timing: Timing, variant: RunVariant) -> float | None:
        if timing.error is not None:
            return None
        found = self._request(timing, "sample", variant, self.settings.measure.min_time)
        if found is None:
            return None
        seconds, calls = found
        timing.calls += calls
        return float(seconds)


# --- the worker process --------------------------------------------------------------------


def _worker_main(driver: str) -> None:
    """Serve requests on stdin/stdout until told to exit.

    Every reply is ("ok", payload) or ("error", text). Anything else the process
    prints goes to stderr, so stdout carries only frames.
    """
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt frames
    from dcmlir.ir.iree import load_functions
    from dcmlir.measure.host import load_host_functions
    from dcmlir.measure.timing import Timer, check_outputs, random_inputs
    from dcmlir.reference import contract

    functions: dict[tuple[str, str], Any] = {}
    prepared: dict[tuple[str, str], list[Any]] = {}
    inputs: list[list[np.ndarray]] = []
    expected: list[list[np.ndarray]] = []

    def handle(request: tuple[Any, ...]) -> Any:
        nonlocal inputs, expected
        command = request[0]
        if command == "load":
            _, path, names = request
            if path.startswith(HOST_PREFIX):
                loaded, failed = load_host_functions(path[len(HOST_PREFIX) :], names, driver)
            else:
                with open(path, "rb") as handle_:
                    vmfb = handle_.read()
                loaded, failed = load_functions(vmfb, names, driver)
            for name, function in loaded.items():
                functions[(path, name)] = function
            return failed
        if command == "inputs":
            _, shapes, dtypes, spec, sets, seed = request
            prepared.clear()
            inputs = [
                [array.astype(dtype) for array, dtype in zip(arrays, dtypes, strict=True)]
                for arrays in random_inputs(shapes, sets=sets, seed=seed)
            ]
            expected = [
                [contract(spec, *(a.astype(np.float64) for a in arrays))] for arrays in inputs
            ]
            return None
        _, path, name, argument = request
        function = functions[(path, name)]
        key = (path, name)
        if key not in prepared:
            prepared[key] = [function.prepare(arrays) for arrays in inputs]
        sets = prepared[key]
        if command == "check":
            return max(
                check_outputs(function.to_host(function.invoke(args)), wanted, argument)
                for args, wanted in zip(sets, expected, strict=True)
            )
        if command == "warmup":
            Timer(argument).sample(function.invoke, sets)
            return None
        if command == "sample":
            return Timer(argument).sample(function.invoke, sets)
        raise ValueError(f"unknown request {command!r}")

    while True:
        try:
            request = _read_frame(requests)
        except EOFError:
            return
        if request[0] == "exit":
            return
        try:
            reply = ("ok", handle(request))
        except Exception as err:  # reported to the parent as this variant's error
            reply = ("error", f"{type(err).__name__}: {err}")
        _write_frame(replies, reply)


if __name__ == "__main__":
    _worker_main(sys.argv[1])
