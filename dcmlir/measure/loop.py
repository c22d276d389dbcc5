"""The measuring loop in one place: build candidates, time them per shape, record everything.

:class:`Measurer` ties the roles together for one workload on one target:
:class:`~dcmlir.build.batch.Builder` (many variants per compile, cached),
:class:`~dcmlir.measure.runner.Runner` (supervised worker, interleaved rounds, IREE's
default as the baseline measured before and after), and the
:class:`~dcmlir.records.database.RecordDatabase` (append-only). A (candidate, shape)
pair already in the records is never measured again, so an interrupted run
resumes where it stopped; every build and every measurement, failed or not,
becomes a record.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, ClassVar

from dcmlir.build.batch import Builder, BuiltVariant, Route
from dcmlir.build.compiler import DISPATCH_REPEAT_FLAG, remove_stale_scratch, scratch_directory
from dcmlir.build.routes import ConfigRoute
from dcmlir.ir.iree import cuda_device_available
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.timing import MeasureSettings
from dcmlir.measure.variants import ModuleFunction
from dcmlir.progress import Progress
from dcmlir.records import Record, RecordDatabase, failure_of
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DefaultCandidate, packing_problem
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import Workload

CUDA_DISPATCH_REPEAT = 32
"""On a GPU, each kernel module repeats its dispatch this many times per call and a sample is
divided by it: the device's time per op, as the dispatched module spends it. One synchronized
IREE call cost 160-360 us on the lent H100, against kernels of 10-90 us, and tuning on single
calls picked kernels 1.8x apart at random (docs/benchmarks-cuda.md)."""

CUDA_WARMUP = 0.05
"""Seconds each variant runs on a GPU before its first sample, at least. Between the
search's rounds the GPU idles and its clocks drop; with 5 ms of warm-up, IREE's default
at T = 1 of `dense_ffn2` took 62, 62 and 29 us in three samples on the H100 (29-33 us
once warm) and the search ran a kernel 1.5x slower there."""

BASELINE_MIN_GROUP = 4
"""Candidates a shape needs before IREE's default is timed beside them as a drift baseline."""

TD_ON_CUDA = (
    "the transform-dialect route (--route td) builds llvm-cpu only; on cuda use --route config "
    "(IREE's TileAndFuse pipeline; docs/routes.md says why)"
)


class NoDevice(RuntimeError):
    """Timing was asked for on a target whose device is not here (CUDA without a GPU)."""

    @classmethod
    def for_arch(cls, arch: str) -> NoDevice:
        return cls(
            f"no CUDA GPU present: timing {arch} kernels needs one (compile-only: dcmlir measure"
            " --target cuda builds candidates, dcmlir compile builds a CUDA plan)"
        )


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
    """Measures (candidate, shape) pairs of one workload on one target.

    One measuring process per Python process at a time: a measurer that starts
    measuring stops another's process (see :meth:`_start_runner`).

    Keep one per tuning run (``with Measurer(...) as m:``): variants built once
    are reused by later calls, and the measuring process stays up.

    A CUDA target on a machine without a GPU: with ``compile_only`` the
    variants are built and recorded and the call says so in one line;
    without it, :meth:`measure_pairs` raises :class:`NoDevice` before building
    (a tuner that needs timings must stop, not loop on empty reports).
    """

    _running: ClassVar[Measurer | None] = None  # whose measuring process is up

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
        compile_only: bool = False,
        runner: Callable[[RunnerSettings], Runner] | None = None,
        builder: Callable[..., Builder] | None = None,
        dispatch_repeat: int | None = None,
    ) -> None:
        self.workload = workload
        self.target = target
        self.db = db
        self.route = route if route is not None else ConfigRoute()
        if isinstance(target, CudaTarget) and self.route.name == "td":
            raise ValueError(TD_ON_CUDA)
        self.compile_only = compile_only
        settings = runner_settings or RunnerSettings()
        if isinstance(target, CudaTarget) and settings.driver.startswith("local-"):
            settings = dataclasses.replace(settings, driver="cuda")  # a GPU target runs on it
        if isinstance(target, CudaTarget) and settings.measure.warmup < CUDA_WARMUP:
            warm = dataclasses.replace(settings.measure, warmup=CUDA_WARMUP)
            settings = dataclasses.replace(settings, measure=warm)
        self.runner_settings = settings
        if dispatch_repeat is None:
            dispatch_repeat = CUDA_DISPATCH_REPEAT if isinstance(target, CudaTarget) else 1
        if dispatch_repeat < 1:
            raise ValueError(f"dispatch_repeat must be at least 1, got {dispatch_repeat}")
        self.dispatch_repeat = dispatch_repeat  # R: a sample is R dispatches' time / R
        self.chunk_size = chunk_size
        self.build_timeout = build_timeout
        self.stream = stream if stream is not None else sys.stderr
        self._built: dict[str, BuiltVariant] = {}
        self._build_failures: dict[str, Record] = {}
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._recorded_builds: set[str] | None = None  # candidates with a successful build
        self._runner: Runner | None = None
        self._make_runner = runner or Runner  # injected roles (dcmlir.testing has fakes)
        self._make_builder = builder or Builder

    # -- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the measuring process and delete the compiled variants."""
        self._stop_runner()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
        self._built.clear()

    def _start_runner(self) -> Runner:
        """This measurer's measuring process, after stopping any other measurer's.

        A model tuning keeps one measurer per workload; one measuring process each, all
        alive, would hold every workload's modules and inputs at once (memory growing with
        the number of distinct workloads). One at a time costs a process start per switch.
        """
        running = Measurer._running
        if running is not None and running is not self:
            running._stop_runner()
        if self._runner is None:
            self._runner = self._make_runner(self.runner_settings)
        Measurer._running = self
        return self._runner

    def _stop_runner(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if Measurer._running is self:
            Measurer._running = None

    # -- records ---------------------------------------------------------------------------
    def _index(self) -> tuple[dict[tuple[str, Shape], Record], dict[str, Record], list[Record]]:
        """(newest measure record per pair, newest failed build per candidate, the records
        timed again) of this workload, target and route: one pass over the records instead
        of one per pair.

        Timings count only from this runner's device (``local-sync`` and ``local-task``
        share the target; a record without one is from ``local-sync``), and only with this
        measurer's dispatch repeat (a record without one had none). A pair timed again
        (``again``) stays out of the first: a resumed search sees what it saw the first time.
        """
        measures: dict[tuple[str, Shape], Record] = {}
        again: list[Record] = []
        builds: dict[str, Record] = {}
        driver = self.runner_settings.driver
        for record in self.db.records(
            self.workload.key, self.target.key(), self.route.name, include_failures=True
        ):
            if record.kind == "measure":
                if record.extra.get("runner", "local-sync") != driver:
                    continue
                if record.extra.get("dispatch_repeat", 1) != self.dispatch_repeat:
                    continue
                if record.extra.get("again"):
                    again.append(record)
                else:
                    measures[(record.candidate_key, record.shape)] = record
            elif record.all_shapes:
                builds[record.candidate_key] = record
        failed_builds = {key: r for key, r in builds.items() if r.failed}
        return measures, failed_builds, again

    def _record_build(self, built: BuiltVariant) -> Record | None:
        """Record a failed build, or the first successful one (a resumed run that rebuilds
        a variant from the cache adds no line: the records say it builds already)."""
        if built.error is None and built.candidate.key() in self._built_before():
            return None
        common = {
            "workload": self.workload,
            "target": self.target,
            "candidate": built.candidate,
            "route": self.route.name,
        }
        extra = {"compile_seconds": built.seconds, "cached": built.cached}
        if built.error is not None:
            record = Record.failure(
                **common,
                error=built.error,
                kind="build",
                failure_kind=failure_of(built.error, "build"),
                extra=extra,
            )
        else:
            record = Record.built(**common, extra=extra)
        self.db.append(record)
        if built.error is None:
            self._built_before().add(built.candidate.key())
        return record

    def _built_before(self) -> set[str]:
        if self._recorded_builds is None:
            self._recorded_builds = {
                record.candidate_key
                for record in self.db.records(
                    self.workload.key, self.target.key(), self.route.name, kind="build"
                )
                if record.all_shapes
            }
        return self._recorded_builds

    # -- the loop ----------------------------------------------------------------------------
    def measure(self, candidates: Sequence[Candidate], shapes: Sequence[Shape]) -> MeasureReport:
        """Every candidate on every shape (see :meth:`measure_pairs`)."""
        shapes = [tuple(s) for s in shapes]
        pairs = [(candidate, shape) for shape in shapes for candidate in candidates]
        return self.measure_pairs(pairs, candidates=candidates, shapes=shapes)

    def measure_pairs(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        *,
        candidates: Sequence[Candidate] | None = None,
        shapes: Sequence[Shape] | None = None,
        calls: int | None = None,
        again: bool = False,
    ) -> MeasureReport:
        """Build what is needed, time every pair the records lack, return the newest records.

        Pairs already recorded (a timing, or a failed build of the candidate)
        are taken from the records; the rest are timed shape by shape, largest
        shape first, IREE's default alongside as the baseline. ``calls``: time them
        call by call instead, that many samples of each (:meth:`MeasureSettings.call_by_call`).
        ``again``: time each shape's pairs side by side in one call, also where they have
        records; their records say ``again`` and are answered only to a call that asks the
        same (a record of the pair timed again together with all of its shape's pairs).
        """
        settings = self.runner_settings.measure
        measure = None if calls is None else settings.call_by_call(calls)
        pairs = [(candidate, tuple(shape)) for candidate, shape in pairs]
        if candidates is None:
            candidates = list({c.key(): c for c, _ in pairs}.values())
        if shapes is None:
            shapes = list(dict.fromkeys(shape for _, shape in pairs))
        keys = [c.key() for c in candidates]
        if len(set(keys)) != len(keys):
            raise ValueError("candidates must be distinct")
        report = MeasureReport(self.workload, list(candidates), [tuple(s) for s in shapes])
        measures, failed_builds, timed_again = self._index()
        if again:
            measures = together_again(timed_again, pairs)
        todo: dict[Shape, dict[str, Candidate]] = {}
        for candidate, shape in pairs:
            self.workload.shape_dims(shape)  # validates the arity early
            known = measures.get((candidate.key(), shape)) or failed_builds.get(candidate.key())
            if known is not None:
                report.records[(candidate.key(), shape)] = known
                continue
            todo.setdefault(shape, {})[candidate.key()] = candidate
        if not todo:
            return report
        no_gpu = isinstance(self.target, CudaTarget) and not cuda_device_available()
        if no_gpu and not self.compile_only:
            raise NoDevice.for_arch(self.target.arch)
        needed = {key: c for group in todo.values() for key, c in group.items()}
        needed.setdefault(DefaultCandidate().key(), DefaultCandidate())
        built = self._build(list(needed.values()))
        for shape, group in todo.items():
            for key in list(group):
                if built[key].error is None:
                    continue
                report.build_failures[key] = built[key].error or ""
                report.records[(key, shape)] = self._build_failures[key]
                del group[key]
        if no_gpu:
            report.skipped_no_device = True
            ok = sum(v.ok for v in built.values())
            print(
                f"dcmlir: no CUDA GPU present: built {ok} variant(s) for {self.target.arch}"
                " and recorded the builds; nothing was timed",
                file=self.stream,
            )
            return report
        runner = self._start_runner()
        for shape in sorted(todo, key=math.prod, reverse=True):  # largest first: warm-up
            if todo[shape]:
                group = list(todo[shape].values())
                self._measure_shape(runner, shape, group, built, report, measure, again)
        self._warn_drift(report)
        return report

    def _warn_drift(self, report: MeasureReport) -> None:
        """One line for the whole call: which shapes saw IREE's default move by > threshold."""
        threshold = self.runner_settings.drift_threshold
        drifted = {s: d for s, d in report.drift.items() if abs(d) > threshold}
        if not drifted:
            return
        worst_shape, worst = max(drifted.items(), key=lambda item: abs(item[1]))
        label = "x".join(map(str, worst_shape))
        print(
            f"dcmlir: warning: IREE's default drifted by more than {threshold:.0%} between before"
            f" and after the rounds on {len(drifted)} of {len(report.drift)} shapes (worst"
            f" {worst:+.0%} at {label}): the machine is noisy; ratios measured side by side"
            " still hold, absolute times less so",
            file=self.stream,
        )

    def _sweep_leftovers(self) -> None:
        """Remove the scratch directories of runs killed before they could (kill -9)."""
        removed, freed = remove_stale_scratch()
        if removed:
            print(
                f"dcmlir: removed {removed} temporary director{'y' if removed == 1 else 'ies'}"
                f" ({freed / 1e6:.1f} MB) left in {tempfile.gettempdir()} by killed runs",
                file=self.stream,
            )

    def _build(self, candidates: list[Candidate]) -> dict[str, BuiltVariant]:
        """Build the candidates this measurer has not built yet; all of them, by key."""
        missing = [c for c in candidates if c.key() not in self._built]
        if missing:
            if self._workdir is None:
                self._sweep_leftovers()
                self._workdir = scratch_directory("variants")
            progress = Progress(len(missing), f"build {self.workload.kind}", self.stream)
            repeat = {}
            if self.dispatch_repeat > 1:
                repeat["extra_flags"] = (f"{DISPATCH_REPEAT_FLAG}={self.dispatch_repeat}",)
            with self._make_builder(
                self.target,
                self.route,
                workdir=Path(self._workdir.name),
                chunk_size=self.chunk_size,
                timeout=self.build_timeout,
                module_attributes=self.target.module_attributes(),
                **repeat,
            ) as builder:
                results = builder.build(
                    self.workload, missing, progress=lambda done, _total: progress.set(done)
                )
            for result in results:
                record = self._record_build(result)
                self._built[result.candidate.key()] = result
                if result.error is not None and record is not None:
                    self._build_failures[result.candidate.key()] = record
        return {c.key(): self._built[c.key()] for c in candidates}

    def _measure_shape(
        self,
        runner: Runner,
        shape: Shape,
        group: list[Candidate],
        built: Mapping[str, BuiltVariant],
        report: MeasureReport,
        measure: MeasureSettings | None = None,
        again: bool = False,
    ) -> None:
        """Time ``group`` (plus IREE's default as the baseline) on one shape; record each.

        The default is timed alongside, before and after (to show drift), when
        it is in the group or the group has :data:`BASELINE_MIN_GROUP` members:
        the search verifies its choices one shape at a time, and a baseline
        there would cost more than the measurement it watches.
        """
        dims = self.workload.shape_dims(shape)
        baseline = DefaultCandidate().key()
        members = {c.key(): c for c in group}
        if built[baseline].ok and len(members) >= BASELINE_MIN_GROUP:
            members.setdefault(baseline, built[baseline].candidate)
        variants = [
            ModuleFunction(key, built[key].vmfb_path or "", built[key].function) for key in members
        ]
        # a packed kernel's module holds the weight (a model's is a constant, packed once):
        # every variant of the workload then reads that same weight
        problem = ShapeProblem.of(
            self.workload, dims, fixed_weight=packing_problem(self.workload) is None
        )
        label = "x".join(str(v) for v in shape)
        rounds = (measure or self.runner_settings.measure).rounds
        progress = Progress(len(variants) * rounds, f"measure {label}", self.stream)
        result = runner.measure_shape(
            variants,
            problem,
            baseline=baseline if baseline in members else None,
            on_sample=lambda _name: progress.advance(),
            measure=measure,
        )
        progress.set(progress.total)
        drift = result.drift
        if drift is not None:
            report.drift[shape] = drift
        flagged = drift is not None and abs(drift) > self.runner_settings.drift_threshold
        for key in (c.key() for c in group):
            timing = result.timings[key]
            extra = {
                "max_error": timing.max_error,
                "calls": timing.calls,
                "baseline_drift": drift,
                "drift_flagged": flagged,
                "runner": self.runner_settings.driver,
                "together": sorted(members),  # timed side by side with these, interleaved
            }
            if key in result.sustained:  # slower back to back: those samples (several threads)
                extra["sampling"] = "sustained"
            elif result.call_by_call:
                extra["sampling"] = "call-by-call"
            extra |= {"extra_rounds": result.extra_rounds} if result.extra_rounds else {}
            if again:
                extra["again"] = True  # a pair with a record already, timed side by side
            extra |= {"dispatch_repeat": self.dispatch_repeat} if self.dispatch_repeat > 1 else {}
            if self.runner_settings.isolated:
                extra["threads"] = self.runner_settings.thread_count
                extra["interference"] = round(timing.interference, 4)
            common = {
                "workload": self.workload,
                "target": self.target,
                "candidate": members[key],
                "route": self.route.name,
                "dims": dims,
                "extra": extra,
            }
            if timing.ok:
                times = [t / self.dispatch_repeat for t in timing.samples]
                record = Record.measurement(**common, times=times)
            else:
                error = timing.error or "no samples"
                record = Record.failure(**common, error=error, failure_kind=failure_of(error))
            self.db.append(record)
            report.records[(key, shape)] = record
            report.measured += 1


def together_again(
    timed_again: Sequence[Record], pairs: Sequence[tuple[Candidate, Shape]]
) -> dict[tuple[str, Shape], Record]:
    """Per pair, the newest record timed again in one call with every pair of its shape;
    a shape that lacks one (a run stopped while recording) is timed again whole."""
    wanted: dict[Shape, set[str]] = {}
    for candidate, shape in pairs:
        wanted.setdefault(shape, set()).add(candidate.key())
    found: dict[tuple[str, Shape], Record] = {}
    for record in timed_again:
        group = wanted.get(record.shape)
        if group and group <= set(record.extra.get("together", ())):
            found[(record.candidate_key, record.shape)] = record
    whole = {s for s, group in wanted.items() if all((key, s) in found for key in group)}
    return {pair: record for pair, record in found.items() if pair[1] in whole}
