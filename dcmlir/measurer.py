"""The measuring loop in one place: build candidates, time them per shape, record everything.

:class:`Measurer` ties the roles together for one workload on one target:
:class:`~dcmlir.builder.Builder` (many variants per compile, cached),
:class:`~dcmlir.runner.Runner` (supervised worker, interleaved rounds, IREE's
default as the baseline measured before and after), and the
:class:`~dcmlir.database.RecordDatabase` (append-only). A (candidate, shape)
pair already in the records is never measured again, so an interrupted run
resumes where it stopped; every build and every measurement, failed or not,
becomes a record.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dcmlir.builder import Builder, BuiltVariant, Route
from dcmlir.database import Record, RecordDatabase
from dcmlir.iree import cuda_device_available
from dcmlir.kernel import input_dtypes, input_shapes
from dcmlir.progress import Progress
from dcmlir.runner import Runner, RunnerSettings, RunVariant, ShapeProblem
from dcmlir.space import Candidate, DefaultCandidate
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import Workload

Shape = tuple[int, ...]  # the dynamic loops' values, in loop order


def shape_dims(workload: Workload, shape: Shape) -> dict[int, int]:
    """``(17,)`` -> ``{0: 17}`` for the workload's dynamic loops."""
    loops = [d.index for d in workload.dynamic_dims]
    if len(shape) != len(loops):
        raise ValueError(
            f"shape {shape} gives {len(shape)} values for {len(loops)} dynamic dims "
            f"(loops {', '.join(f'd{i}' for i in loops)})"
        )
    return dict(zip(loops, shape, strict=True))


@dataclass
class MeasureReport:
    """What a measuring call knows afterwards: the newest record of each pair."""

    workload: Workload
    candidates: list[Candidate]
    shapes: list[Shape]
    records: dict[tuple[str, Shape], Record] = field(default_factory=dict)
    build_failures: dict[str, str] = field(default_factory=dict)
    measured: int = 0  # pairs timed by this call (the rest came from the records)
    skipped_no_device: bool = False
    drift: dict[Shape, float] = field(default_factory=dict)

    def median(self, candidate: str, shape: Shape) -> float:
        record = self.records.get((candidate, shape))
        return record.median if record is not None else math.inf

    def best(self, shape: Shape) -> tuple[str, float]:
        found = min(
            ((c.key(), self.median(c.key(), shape)) for c in self.candidates),
            key=lambda item: item[1],
        )
        return found


class Measurer:
    """Measures (candidate, shape) pairs of one workload on one target."""

    def __init__(
        self,
        workload: Workload,
        target: Target,
        db: RecordDatabase,
        *,
        route: Route | None = None,
        runner_settings: RunnerSettings | None = None,
        chunk_size: int = 48,
        build_timeout: float | None = 600.0,
        stream: IO[str] | None = None,
    ) -> None:
        from dcmlir.routes import ConfigRoute

        self.workload = workload
        self.target = target
        self.db = db
        self.route = route if route is not None else ConfigRoute()
        settings = runner_settings or RunnerSettings()
        if isinstance(target, CudaTarget) and settings.driver.startswith("local-"):
            settings = dataclasses.replace(settings, driver="cuda")  # a GPU target runs on it
        self.runner_settings = settings
        self.chunk_size = chunk_size
        self.build_timeout = build_timeout
        self.stream = stream if stream is not None else sys.stderr

    # -- records ---------------------------------------------------------------------------
    def _known(self, candidate: Candidate, shape: Shape) -> Record | None:
        return self.db.lookup(
            self.workload.key, self.target.key(), candidate.key(), shape, self.route.name
        )

    def _record_build(self, built: BuiltVariant) -> Record:
        common = {
            "workload": self.workload,
            "target": self.target,
            "candidate": built.candidate,
            "route": self.route.name,
        }
        extra = {"compile_seconds": built.seconds, "cached": built.cached}
        if built.error is not None:
            record = Record.failure(**common, error=built.error, kind="build", extra=extra)
        else:
            record = Record.built(**common, extra=extra)
        self.db.append(record)
        return record

    # -- the loop ----------------------------------------------------------------------------
    def measure(self, candidates: Sequence[Candidate], shapes: Sequence[Shape]) -> MeasureReport:
        """Build what is needed, time every unrecorded pair, return the newest records."""
        candidates = list(candidates)
        keys = [c.key() for c in candidates]
        if len(set(keys)) != len(keys):
            raise ValueError("candidates must be distinct")
        report = MeasureReport(self.workload, candidates, [tuple(s) for s in shapes])
        todo: dict[Shape, list[Candidate]] = {}
        for shape in report.shapes:
            shape_dims(self.workload, shape)  # validates the arity early
            for candidate in candidates:
                known = self._known(candidate, shape)
                if known is not None:
                    report.records[(candidate.key(), shape)] = known
                    continue
                todo.setdefault(shape, []).append(candidate)
        if not todo:
            return report
        needed = {c.key(): c for group in todo.values() for c in group}
        baseline = DefaultCandidate()
        needed.setdefault(baseline.key(), baseline)
        with tempfile.TemporaryDirectory(prefix="dcmlir-variants-") as workdir:
            built = self._build(list(needed.values()), Path(workdir))
            for key, variant in built.items():
                if variant.error is None:
                    continue
                report.build_failures[key] = variant.error
                for shape, group in todo.items():
                    if any(c.key() == key for c in group):
                        report.records[(key, shape)] = self._build_failures[key]
            if isinstance(self.target, CudaTarget) and not cuda_device_available():
                report.skipped_no_device = True
                ok = sum(v.ok for v in built.values())
                print(
                    f"dcmlir: no CUDA GPU present: built {ok} variant(s) for {self.target.arch}"
                    " and recorded the builds; nothing was timed",
                    file=self.stream,
                )
                return report
            with Runner(self.runner_settings) as runner:
                for shape in sorted(todo, key=math.prod, reverse=True):  # largest first: warm-up
                    group = [c for c in todo[shape] if built[c.key()].ok]
                    if group:
                        self._measure_shape(runner, shape, group, built, report)
        return report

    def _build(self, candidates: list[Candidate], workdir: Path) -> dict[str, BuiltVariant]:
        progress = Progress(len(candidates), f"build {self.workload.kind}", self.stream)
        self._build_failures: dict[str, Record] = {}
        with Builder(
            self.target,
            self.route,
            workdir=workdir,
            chunk_size=self.chunk_size,
            timeout=self.build_timeout,
            module_attributes=self.target.module_attributes(),
        ) as builder:
            results = builder.build(
                self.workload, candidates, progress=lambda done, _total: progress.set(done)
            )
        found = {}
        for result in results:
            record = self._record_build(result)
            found[result.candidate.key()] = result
            if result.error is not None:
                self._build_failures[result.candidate.key()] = record
        return found

    def _measure_shape(
        self,
        runner: Runner,
        shape: Shape,
        group: list[Candidate],
        built: Mapping[str, BuiltVariant],
        report: MeasureReport,
    ) -> None:
        """Time ``group`` (plus IREE's default as the baseline) on one shape; record each."""
        dims = shape_dims(self.workload, shape)
        baseline = DefaultCandidate().key()
        members = {c.key(): c for c in group}
        if built[baseline].ok:
            members.setdefault(baseline, built[baseline].candidate)
        variants = [
            RunVariant(key, built[key].vmfb_path or "", built[key].function) for key in members
        ]
        problem = ShapeProblem(
            tuple(input_shapes(self.workload, dims)),
            tuple(np_type.__name__ for np_type in input_dtypes(self.workload)),
            self.workload.einsum(),
        )
        label = "x".join(str(v) for v in shape)
        progress = Progress(
            len(variants) * self.runner_settings.measure.rounds, f"measure {label}", self.stream
        )
        result = runner.measure_shape(
            variants,
            problem,
            baseline=baseline if baseline in members else None,
            on_sample=lambda _name: progress.advance(),
        )
        progress.set(progress.total)
        drift = result.drift
        if drift is not None:
            report.drift[shape] = drift
        flagged = drift is not None and abs(drift) > self.runner_settings.drift_threshold
        if flagged:
            print(
                f"dcmlir: warning: shape {label}: IREE's default drifted {drift:+.0%} between "
                "before and after the rounds; this shape's times are noisy",
                file=self.stream,
            )
        for key in (c.key() for c in group):
            timing = result.timings[key]
            extra = {
                "max_error": timing.max_error,
                "calls": timing.calls,
                "baseline_drift": drift,
                "drift_flagged": flagged,
                "runner": self.runner_settings.driver,
            }
            common = {
                "workload": self.workload,
                "target": self.target,
                "candidate": members[key],
                "route": self.route.name,
                "dims": dims,
                "extra": extra,
            }
            if timing.ok:
                record = Record.measurement(**common, times=timing.samples)
            else:
                record = Record.failure(**common, error=timing.error or "no samples")
            self.db.append(record)
            report.records[(key, shape)] = record
            report.measured += 1
