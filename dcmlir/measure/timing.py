"""Timing that survives a shared, noisy machine (DESIGN.md section 4).

The pieces, smallest first:

- :func:`random_inputs`: several freshly allocated random input sets (buffer
  placement alone can change a kernel's time several-fold, so one set lies);
- :class:`Timer`: one sample = calls rotating over the sets until a minimum
  time has passed, divided by the number of calls;
- :func:`measure_interleaved`: every variant checked against a reference,
  warmed up, then sampled in rounds, one sample per variant per round, so slow
  phases of the machine hit every variant alike; medians and paired ratios;
- :func:`measure_shapes`: the same over several shapes, warming up at the
  largest first (a process measured small-first can stay in a slow state).

A variant that fails to prepare, run or match the reference gets an error text
and an infinite time; it is never dropped.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from dcmlir.ir.iree import LoadedFunction

__all__ = [
    "Comparison",
    "IreeVariant",
    "MeasureSettings",
    "MismatchError",
    "PythonVariant",
    "Timer",
    "Timing",
    "Variant",
    "check_outputs",
    "measure_interleaved",
    "measure_shapes",
    "random_inputs",
    "relative_error",
]

Inputs = Sequence[np.ndarray]
Shape = TypeVar("Shape", bound=Hashable)


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure. The defaults suit a kernel of 10 us to 10 ms; tests shrink them."""

    min_time: float = 0.1  # seconds per sample
    rounds: int = 5  # samples per variant, interleaved
    input_sets: int = 4  # distinct random input sets rotated within each sample
    warmup: float = 0.2  # seconds each variant runs before its first sample
    rtol: float = 1e-4  # max |actual - expected| / max |expected| accepted
    seed: int = 0

    def __post_init__(self) -> None:
        if self.min_time < 0 or self.warmup < 0:
            raise ValueError("min_time and warmup must be >= 0 seconds")
        if self.rounds < 1 or self.input_sets < 1:
            raise ValueError("rounds and input_sets must be >= 1")


# --- inputs and checks ---------------------------------------------------------------------


def random_inputs(
    shapes: Sequence[Sequence[int]],
    *,
    sets: int = 4,
    dtype: DTypeLike = np.float32,
    seed: int = 0,
) -> list[list[np.ndarray]]:
    """``sets`` input sets, one fresh array per shape in each; values in [-1, 1), never all zero."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype)
    found: list[list[np.ndarray]] = []
    for _ in range(sets):
        if np.issubdtype(kind, np.floating):
            arrays = [(rng.random(tuple(s)) * 2.0 - 1.0).astype(kind) for s in shapes]
        else:
            arrays = [rng.integers(-8, 8, size=tuple(s)).astype(kind) for s in shapes]
        found.append(arrays)
    return found


class MismatchError(ValueError):
    """A variant's output differs from the reference beyond the tolerance."""


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| relative to the output's scale (its largest magnitude)."""
    if actual.shape != expected.shape:
        raise MismatchError(f"output shape {actual.shape} differs from expected {expected.shape}")
    expected64 = np.asarray(expected, dtype=np.float64)
    if expected64.size == 0:
        return 0.0
    scale = float(np.max(np.abs(expected64)))
    diff = float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected64)))
    if not math.isfinite(diff):
        return math.inf
    return diff / scale if scale > 0 else diff


def check_outputs(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float
) -> float:
    """The worst relative error over all outputs; :class:`MismatchError` above ``rtol``."""
    if len(actual) != len(expected):
        raise MismatchError(f"{len(actual)} outputs, expected {len(expected)}")
    worst = max((relative_error(a, e) for a, e in zip(actual, expected, strict=True)), default=0.0)
    if worst > rtol:
        raise MismatchError(f"relative error {worst:.3g} exceeds {rtol:g}")
    return worst


# --- variants ------------------------------------------------------------------------------


class Variant(Protocol):
    """One thing to time: inputs are prepared once, then ``run`` is the timed call."""

    name: str

    def prepare(self, inputs: Inputs) -> Any: ...

    def run(self, prepared: Any) -> Any: ...

    def outputs(self, result: Any) -> list[np.ndarray]: ...


@dataclass
class IreeVariant:
    """A compiled function; inputs live on its device, so a call is only the VM invoke."""

    name: str
    function: LoadedFunction

    def prepare(self, inputs: Inputs) -> Any:
        return self.function.prepare(inputs)

    def run(self, prepared: Any) -> Any:
        return self.function.invoke(prepared)

    def outputs(self, result: Any) -> list[np.ndarray]:
        return self.function.to_host(result)


@dataclass
class PythonVariant:
    """A Python callable on host arrays (numpy as a peer); gets its own copies of the inputs."""

    name: str
    fn: Callable[..., Any]

    def prepare(self, inputs: Inputs) -> Any:
        return [np.array(array, copy=True) for array in inputs]

    def run(self, prepared: Any) -> Any:
        return self.fn(*prepared)

    def outputs(self, result: Any) -> list[np.ndarray]:
        if isinstance(result, np.ndarray):
            return [result]
        return [np.asarray(r) for r in result]


# --- timing --------------------------------------------------------------------------------


@contextmanager
def _no_gc() -> Iterator[None]:
    """A collection in the middle of a sample would be charged to the kernel."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Timer:
    """Takes one sample: seconds per call, over calls rotating the prepared input sets."""

    min_time: float = 0.1
    clock: Callable[[], float] = time.perf_counter

    def sample(self, run: Callable[[Any], Any], prepared: Sequence[Any]) -> tuple[float, int]:
        """(seconds per call, calls made). At least one call per input set."""
        calls = 0
        with _no_gc():
            start = self.clock()
            while True:
                run(prepared[calls % len(prepared)])
                calls += 1
                elapsed = self.clock() - start
                if elapsed >= self.min_time and calls >= len(prepared):
                    break
        return elapsed / calls, calls


@dataclass
class Timing:
    """Samples of one variant (seconds per call); with an error it failed: infinitely slow."""

    name: str
    samples: list[float] = field(default_factory=list)
    calls: int = 0
    max_error: float | None = None  # relative error against the reference, when checked
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.ok else math.inf


@dataclass
class Comparison:
    """Timings of variants measured side by side in one process."""

    timings: list[Timing]
    rounds: int

    def __getitem__(self, name: str) -> Timing:
        for timing in self.timings:
            if timing.name == name:
                return timing
        raise KeyError(name)

    @property
    def medians(self) -> dict[str, float]:
        return {t.name: t.median for t in self.timings}

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

    def ratios(self, baseline: str) -> dict[str, float]:
        return {t.name: self.ratio(t.name, baseline) for t in self.timings}


def _fail(timing: Timing, stage: str, err: BaseException) -> None:
    """Record the whole error text (records keep it); displays show its first line."""
    timing.error = f"{stage}: {str(err).strip() or type(err).__name__}"
    timing.samples.clear()


def measure_interleaved(
    variants: Sequence[Variant],
    inputs: Sequence[Inputs],
    *,
    settings: MeasureSettings | None = None,
    reference: Callable[[Inputs], Sequence[np.ndarray]] | None = None,
) -> Comparison:
    """Time every variant on the same input sets, interleaved in rounds.

    With ``reference``, every variant's outputs on every input set are checked
    first; a mismatch is recorded as that variant's error.
    """
    settings = settings or MeasureSettings()
    if not inputs:
        raise ValueError("measure_interleaved needs at least one input set")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must be distinct: {names}")
    timings = [Timing(v.name) for v in variants]
    if not variants:
        return Comparison(timings, settings.rounds)
    prepared: list[list[Any]] = [[] for _ in variants]
    expected = [list(reference(s)) for s in inputs] if reference is not None else None
    for variant, timing, sets in zip(variants, timings, prepared, strict=True):
        _prepare_and_check(variant, timing, sets, inputs, expected, settings.rtol)
    warm_up(variants, prepared, timings, settings.warmup)
    timer = Timer(settings.min_time)
    for round_index in range(settings.rounds):
        shift = round_index % len(variants)  # rotate who goes first: no fixed-position bias
        for index in [*range(shift, len(variants)), *range(shift)]:
            variant, timing = variants[index], timings[index]
            if timing.error is not None:
                continue
            try:
                seconds, calls = timer.sample(variant.run, prepared[index])
            except Exception as err:
                _fail(timing, "run", err)
                continue
            timing.samples.append(seconds)
            timing.calls += calls
    return Comparison(timings, settings.rounds)


def _prepare_and_check(
    variant: Variant,
    timing: Timing,
    sets: list[Any],
    inputs: Sequence[Inputs],
    expected: list[list[np.ndarray]] | None,
    rtol: float,
) -> None:
    try:
        sets.extend(variant.prepare(s) for s in inputs)
    except Exception as err:
        _fail(timing, "prepare", err)
        return
    if expected is None:
        return
    try:
        worst = 0.0
        for prepared, wanted in zip(sets, expected, strict=True):
            worst = max(worst, check_outputs(variant.outputs(variant.run(prepared)), wanted, rtol))
        timing.max_error = worst
    except Exception as err:
        _fail(timing, "check", err)


def warm_up(
    variants: Sequence[Variant],
    prepared: Sequence[Sequence[Any]],
    timings: Sequence[Timing],
    seconds: float,
) -> None:
    """Run each healthy variant for ``seconds`` (caches, page faults, lazy init) untimed."""
    timer = Timer(seconds)
    for variant, sets, timing in zip(variants, prepared, timings, strict=True):
        if timing.error is not None or not sets:
            continue
        try:
            timer.sample(variant.run, sets)
        except Exception as err:
            _fail(timing, "run", err)


def measure_shapes(
    variants: Sequence[Variant],
    shapes: Sequence[Shape],
    input_shapes: Callable[[Shape], Sequence[Sequence[int]]],
    *,
    settings: MeasureSettings | None = None,
    reference: Callable[[Inputs], Sequence[np.ndarray]] | None = None,
    dtype: DTypeLike = np.float32,
    progress: Callable[[Shape], None] | None = None,
) -> dict[Shape, Comparison]:
    """:func:`measure_interleaved` at each shape, after a warm-up at the largest.

    ``input_shapes(shape)`` gives the argument shapes for one value of the
    dynamic dims; the largest is the one with the most input elements.
    """
    settings = settings or MeasureSettings()
    if not shapes:
        return {}
    largest = max(shapes, key=lambda s: sum(math.prod(dims) for dims in input_shapes(s)))
    warm_inputs = random_inputs(input_shapes(largest), sets=1, dtype=dtype, seed=settings.seed)
    prepared: list[list[Any]] = []
    warm_timings = [Timing(v.name) for v in variants]
    for variant, timing in zip(variants, warm_timings, strict=True):
        try:
            prepared.append([variant.prepare(warm_inputs[0])])
        except Exception as err:  # measured again per shape, where the error is recorded
            _fail(timing, "prepare", err)
            prepared.append([])
    warm_up(variants, prepared, warm_timings, settings.warmup)
    results: dict[Shape, Comparison] = {}
    for shape in shapes:
        if progress is not None:
            progress(shape)
        inputs = random_inputs(
            input_shapes(shape), sets=settings.input_sets, dtype=dtype, seed=settings.seed
        )
        results[shape] = measure_interleaved(
            variants, inputs, settings=settings, reference=reference
        )
    return results
