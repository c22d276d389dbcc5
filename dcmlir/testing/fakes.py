"""Fake roles for ``dcmlir.tune`` and the search: deterministic, no worker, no GPU.

Each stands in for one role of :mod:`dcmlir.driver.roles`, so that a test passes it in
(``dcmlir.tune(..., runner=FakeRunner)``) rather than patching the module that uses
the real one, and the rest of the data flow stays real:

- :class:`FakeRunner` (the runner): every sample is :func:`fake_seconds`, a function of
  (candidate, shape) only, so two runs that time the same pairs see the same numbers
  and must reach the same plan; builds, records, cost model and search stay real.
- :class:`FakeMeasurer` (builder and runner together, for the search alone): a
  synthetic machine, the trivial model times a per-(candidate, shape) quirk, that
  appends real records to a real database; no IREE at all.
- :class:`FullDiskDatabase` (the records): a real database on a disk that fills up
  after N record writes, half a line landing first, as a real full disk does.
- :func:`small_cost_model` (the cost model): the real :class:`~dcmlir.cost_model.CostModel`
  growing fewer trees, the same code path at a fraction of every round's fitting time.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from dcmlir.cost_model import CostModel, TrivialCostModel
from dcmlir.dispatch import Plan
from dcmlir.measure.loop import MeasureReport, together_again
from dcmlir.measure.runner import RunnerSettings, ShapeProblem, ShapeResult
from dcmlir.measure.timing import MeasureSettings, Timing
from dcmlir.measure.variants import Variant
from dcmlir.records import Record, RecordDatabase
from dcmlir.shapes import Shape
from dcmlir.space import Candidate
from dcmlir.target import CpuTarget, Target
from dcmlir.workload import Workload

SMALL_MODEL_TREES = 20
"""Trees of :func:`small_cost_model`'s regressor (the real one grows 300)."""


def fake_seconds(name: str, input_shapes: Sequence[Sequence[int]]) -> float:
    """A time that depends on the candidate and the shape only: flops over a per-candidate
    rate, times a per-(candidate, shape) quirk the cost model cannot see."""
    a, b = input_shapes
    flops = 2 * math.prod(a) * b[-1]
    rate = 1.0 + hashlib.sha256(name.encode()).digest()[0] / 256
    quirk = 1.0 + hashlib.sha256(f"{name}:{input_shapes}".encode()).digest()[0] / 512
    return flops / (2e10 * rate) * quirk


class FakeRunner:
    """The :class:`~dcmlir.measure.runner.Runner`'s interface answered by :func:`fake_seconds`
    (no worker process, nothing loaded): pass the class as ``runner=``."""

    def __init__(self, settings: RunnerSettings | None = None) -> None:
        self.settings = settings or RunnerSettings()

    def measure_shape(
        self,
        variants: Sequence[Variant],
        problem: ShapeProblem,
        *,
        baseline: str | None = None,
        on_sample: Callable[[str], None] | None = None,
        measure: MeasureSettings | None = None,
    ) -> ShapeResult:
        """Every variant sampled ``rounds`` times, interleaved, as the real runner does."""
        timings = {v.name: Timing(v.name, max_error=0.0) for v in variants}
        for _ in range((measure or self.settings.measure).rounds):
            for variant in variants:
                timing = timings[variant.name]
                timing.samples.append(fake_seconds(variant.name, problem.input_shapes))
                timing.calls += 1
                if on_sample is not None:
                    on_sample(variant.name)
        result = ShapeResult(timings, baseline)
        if baseline is not None:
            result.baseline_before = fake_seconds(baseline, problem.input_shapes)
            result.baseline_after = result.baseline_before
        return result

    def close(self) -> None:
        """Nothing to stop: there is no worker."""


def quirk(key: str, shape: Shape) -> float:
    """A deterministic factor in [1, 2): what measuring shows beyond the model."""
    digest = hashlib.sha256(f"{key}:{shape}".encode()).digest()
    return 1.0 + digest[0] / 256


class FakeMeasurer:
    """Answers ``measure_pairs`` from a formula and appends real records to a real database.

    A synthetic machine for the search: the times are the trivial model's (seed 7)
    times :func:`quirk`, so the search's logic is tested without IREE and every run
    is exactly repeatable. Pairs already in the records are answered from them, as
    the real :class:`~dcmlir.measure.loop.Measurer` does; ``timed`` lists what it timed.
    """

    target: Target = CpuTarget()

    def __init__(self, workload: Workload, db: RecordDatabase) -> None:
        self.workload = workload
        self.db = db
        self.truth = TrivialCostModel(workload, self.target, seed=7)
        self.timed: list[tuple[str, Shape]] = []

    def time(self, candidate: Candidate, shape: Shape) -> float:
        return float(self.truth.predict([candidate], [shape])[0, 0]) * quirk(candidate.key(), shape)

    def measure_pairs(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        calls: int | None = None,
        again: bool = False,
    ) -> MeasureReport:
        """The machine's time of each pair (``calls``, call by call, changes nothing here;
        ``again``: timed again side by side, as the real one)."""
        report = MeasureReport(self.workload, [c for c, _ in pairs], [s for _, s in pairs])
        mine = self.db.records(self.workload.key)
        known = {(r.candidate_key, r.shape): r for r in mine if not r.extra.get("again")}
        if again:
            known = together_again([r for r in mine if r.extra.get("again")], pairs)
        together: dict[Shape, list[str]] = {}  # timed in one call per shape, as the real one
        for candidate, shape in pairs:
            if (candidate.key(), shape) not in known:
                together.setdefault(shape, []).append(candidate.key())
        for candidate, shape in pairs:
            record = known.get((candidate.key(), shape))
            if record is None:
                seconds = self.time(candidate, shape)
                extra: dict[str, object] = {"together": sorted(together[shape])}
                if again:
                    extra["again"] = True
                record = Record.measurement(
                    workload=self.workload,
                    target=self.target,
                    candidate=candidate,
                    route="config",
                    dims={0: shape[0]},
                    times=[seconds],
                    extra=extra,
                )
                self.db.append(record)
                self.timed.append((candidate.key(), shape))
                report.measured += 1
            report.records[(candidate.key(), shape)] = record
        return report


class FullDiskDatabase(RecordDatabase):
    """A real records file on a disk that is full after ``after`` record writes (None: never).

    The next write lands half its line and reports the short count; later ones
    fail with ``ENOSPC``, so the database's own rollback and error paths run.
    """

    def __init__(self, path: str | os.PathLike[str], *, after: int | None, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.after = after
        self.writes = 0

    def _write(self, fd: int, data: bytes) -> int:
        self.writes += 1
        if self.after is None or self.writes <= self.after:
            return super()._write(fd, data)
        if self.writes == self.after + 1:
            return super()._write(fd, data[: len(data) // 2])  # half a line, like a full disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    @classmethod
    def factory(cls, after: int | None) -> Callable[[str | Path], FullDiskDatabase]:
        """A ``database=`` role: the run's ``db`` path on a disk full after ``after`` writes."""
        return functools.partial(cls, after=after)


def small_cost_model(trees: int = SMALL_MODEL_TREES) -> Callable[..., CostModel]:
    """A ``cost_model=`` role: the real cost model, its regressor growing ``trees`` trees."""
    return functools.partial(CostModel, regressor_params={"n_estimators": trees})


def keep_placement(plan: Plan, input: str | Path, *, stream: IO[str]) -> Plan:
    """The placement role that times nothing: the plan as the search made it (the suite's
    default, :mod:`tests.conftest`; compiling four placements per tune would double it)."""
    return plan


def keep_reports(reports: list[Any], make_plan: Any, input: str | Path, **_: Any) -> list[Any]:
    """The guard role that times nothing: the search's reports as they are (the suite's
    default, :mod:`tests.conftest`; the guard compiles the module three more times)."""
    return list(reports)
