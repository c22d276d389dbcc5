"""Timing that survives a shared, noisy machine (docs/design.md, section 4).

The pieces, smallest first:

- :func:`random_inputs`: several freshly allocated random input sets (buffer
  placement alone can change a kernel's time several-fold, so one set lies);
- :func:`check_outputs`: every output against a reference, relative to its scale;
- :class:`Timer`: one sample = calls rotating over the sets until a minimum
  time has passed, divided by the number of calls;
- :func:`interleaved`: the order of the rounds, one sample per variant per
  round, who goes first rotating, so slow phases of the machine hit every
  variant alike.

:class:`dcmlir.measure.runner.Runner` applies them: it checks and warms up
every variant, then samples them in :func:`interleaved` order in a supervised
worker process. A variant that fails to load, run or match the reference gets
an error text and an infinite time; it is never dropped.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "Inputs",
    "MeasureSettings",
    "MismatchError",
    "Timer",
    "Timing",
    "check_outputs",
    "interleaved",
    "random_inputs",
    "relative_error",
    "unsettled",
]

Inputs = Sequence[np.ndarray]
CALL_BY_CALL_MIN_TIME = 1e-9
"""A sample's minimum time that makes it one call per input set (call by call)."""
Item = TypeVar("Item")


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure. The defaults suit a kernel of 10 us to 10 ms; tests shrink them."""

    min_time: float = 0.1  # seconds per sample
    rounds: int = 5  # samples per variant, interleaved
    input_sets: int = 4  # distinct random input sets rotated within each sample
    warmup: float = 0.2  # seconds each variant runs before its first sample
    rtol: float = 1e-4  # max |actual - expected| / max |expected| accepted
    seed: int = 0
    # untimed calls of the variant itself right before each of its samples: with samples of
    # one call each, every timed call then starts on the caches its own build left, not on
    # whichever variant ran before it (docs/benchmarks.md, "Noise between identical builds")
    warm_calls: int = 0
    # a shape whose variants all take less than this per call (seconds, read off their
    # warm-up) is sampled call by call, ``short_rounds`` samples each: identical builds then
    # agree within 1-2% where samples of the minimum time put them 5-16% apart, and for
    # calls this short it costs no more (docs/benchmarks.md, "Noise between identical
    # builds"); 0: never
    call_by_call_below: float = 0.0
    short_rounds: int = 50
    # samples of the minimum time: while a variant's median is more than this over its
    # fastest sample (:func:`unsettled`), the group takes another round, up to
    # ``most_rounds`` in all; 0: never (docs/benchmarks.md, "A slow phase of the machine
    # during a tune")
    settle_tolerance: float = 0.0
    most_rounds: int = 0

    def __post_init__(self) -> None:
        if not all(math.isfinite(s) and s >= 0 for s in (self.min_time, self.warmup)):
            raise ValueError("min_time and warmup must be finite numbers of seconds >= 0")
        if self.rounds < 1 or self.input_sets < 1:
            raise ValueError("rounds and input_sets must be >= 1")
        if self.warm_calls < 0:
            raise ValueError("warm_calls must be >= 0")
        if not (math.isfinite(self.call_by_call_below) and self.call_by_call_below >= 0):
            raise ValueError("call_by_call_below must be a finite number of seconds >= 0")
        if self.short_rounds < 1:
            raise ValueError("short_rounds must be >= 1")
        if not (math.isfinite(self.settle_tolerance) and self.settle_tolerance >= 0):
            raise ValueError("settle_tolerance must be a finite number >= 0")
        if self.most_rounds < 0:
            raise ValueError("most_rounds must be >= 0")

    def call_by_call(self, rounds: int) -> MeasureSettings:
        """These settings sampled call by call: ``rounds`` samples of one call per input
        set, each right after an untimed call of the same build (identical builds then
        agree within 3%, where samples of the minimum time put them up to 22% apart;
        docs/benchmarks.md, "Budgets 60 and 240 with c7d5534's search")."""
        return dataclasses.replace(
            self, rounds=rounds, min_time=CALL_BY_CALL_MIN_TIME, warm_calls=1
        )

    @property
    def sampled_call_by_call(self) -> bool:
        """Whether a sample is one call per input set (:meth:`call_by_call`)."""
        return self.min_time <= CALL_BY_CALL_MIN_TIME

    def for_calls(self, seconds: float) -> MeasureSettings:
        """These settings for variants whose calls take ``seconds`` at most: call by call
        below :attr:`call_by_call_below`."""
        if seconds >= self.call_by_call_below:
            return self
        return self.call_by_call(self.short_rounds)


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
    """Takes one sample: seconds per call, over calls rotating the prepared input sets,
    after ``warm_calls`` untimed ones."""

    min_time: float = 0.1
    clock: Callable[[], float] = time.perf_counter
    warm_calls: int = 0

    def sample(self, run: Callable[[Any], Any], prepared: Sequence[Any]) -> tuple[float, int]:
        """(seconds per call, timed calls made). At least one timed call per input set."""
        calls = 0
        with _no_gc():
            for warm in range(self.warm_calls):
                run(prepared[warm % len(prepared)])
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
    # the most CPU (in cores) other measuring processes took during one of its samples
    interference: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.ok else math.inf


def interleaved(
    variants: Sequence[Item], rounds: int, healthy: Callable[[Item], bool], first: int = 0
) -> Iterator[Item]:
    """The variants in the order samples are taken: every healthy one once per round.

    Who goes first rotates from round to round (no fixed-position bias; ``first``: the
    index of the first round, for rounds that follow others), and a variant that failed
    is left out of the rounds after its failure.
    """
    for round_index in range(first, first + rounds):
        order = [v for v in variants if healthy(v)]
        if not order:
            return
        shift = round_index % len(order)
        yield from [*order[shift:], *order[:shift]]


def unsettled(samples: Sequence[float], tolerance: float) -> bool:
    """Whether the median of ``samples`` is more than ``tolerance`` over the fastest one.

    A slow phase of a shared machine lengthens some samples and never shortens one: where
    it took most of a kernel's few samples, their median is the slow phase's. Quiet tunes
    of attention scores on a Zen 4 put a kernel's median 1-3% over its fastest of three
    samples; a neighbour copying memory a quarter of the time moved the medians of three
    0.018 from each other (median |log|; 0.059 at the 90th percentile), and rounds taken
    while a median was more than 5% over its fastest sample brought that to 0.010 (0.027)."""
    return bool(samples) and statistics.median(samples) > min(samples) * (1 + tolerance)
