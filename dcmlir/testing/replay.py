"""A measurer that replays recorded timings: kernel_tuner's simulation runner for the search.

:class:`ReplayMeasurer` answers ``measure_pairs`` from one records file (an oracle: every
candidate measured on a set of shapes), so a search strategy can be run many times, with
many seeds and budgets, on real timings and without IREE: no build, no timing. The
search then sees the candidate space and the shapes the records hold, nothing else; a
pair the records do not hold is an error (:class:`ReplayError`), never a guess; or, for a
run's own records replayed by a search that has changed since (``unrecorded="failed"``),
a failed run there, labelled as such: the kernel is out of that shape, as a kernel that
failed there is.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dcmlir.measure.loop import MeasureReport
from dcmlir.records import Record, RecordDatabase
from dcmlir.shapes import Shape
from dcmlir.space import Candidate
from dcmlir.workload import Workload

__all__ = ["PassNoiseMeasurer", "ReplayError", "ReplayMeasurer", "ReplayTable", "one_pass"]

Pair = tuple[str, Shape]
"""(candidate key, shape)."""


class ReplayError(LookupError):
    """A pair the replayed records do not hold was asked for."""


@dataclass(frozen=True)
class ReplayTable:
    """The newest ``measure`` record of every (candidate, shape) of one workload on one target.

    A failed build that holds for every shape (or for one) answers the pairs it covers
    with that failure, as the real measurer does from its records.
    """

    workload: str
    target_key: str
    records: Mapping[Pair, Record]

    @classmethod
    def from_records(
        cls, records: Iterable[Record], workload: str, target_key: str | None = None
    ) -> ReplayTable:
        """The table of ``workload`` (on ``target_key``; None: the only target it was timed on)."""
        mine = [r for r in records if r.workload == workload]
        targets = sorted({r.target_key for r in mine if r.kind == "measure"})
        if target_key is None:
            if len(targets) != 1:
                found = ", ".join(targets) or "none"
                raise ReplayError(
                    f"workload {workload}: measurements of one target needed (found: {found})"
                )
            target_key = targets[0]
        measured: dict[Pair, Record] = {}
        failed_builds: list[Record] = []
        for record in mine:
            if record.target_key != target_key:
                continue
            if record.kind == "measure":
                measured[(record.candidate_key, record.shape)] = record  # the newest wins
            elif record.kind == "build" and record.failed:
                failed_builds.append(record)
        if not measured:
            raise ReplayError(f"workload {workload} has no measurements on {target_key}")
        shapes = {shape for _, shape in measured}
        for build in failed_builds:
            covered = shapes if build.all_shapes else {build.shape}
            for shape in covered:
                measured.setdefault((build.candidate_key, shape), build)
        return cls(workload, target_key, measured)

    @classmethod
    def load(cls, path: str, workload: str, target_key: str | None = None) -> ReplayTable:
        """The table of ``workload`` in a records file, whatever IREE version timed it."""
        db = RecordDatabase(path, fsync=False)
        return cls.from_records(db.load(), workload, target_key)

    @property
    def shapes(self) -> list[Shape]:
        return sorted({shape for _, shape in self.records})

    @property
    def candidate_keys(self) -> list[str]:
        """Keys in the records' order."""
        return list(dict.fromkeys(key for key, _ in self.records))

    @property
    def target(self) -> Mapping[str, object]:
        """The target the records were timed on (``Target.to_json()``)."""
        return next(iter(self.records.values())).target

    def complete(self) -> bool:
        """Whether every candidate has a record at every shape (an oracle)."""
        return len(self.records) == len(self.shapes) * len(self.candidate_keys)

    def seconds(self, key: str, shape: Shape) -> float:
        """The recorded median (inf: failed); a :class:`ReplayError` when not recorded."""
        record = self.records.get((key, tuple(shape)))
        if record is None:
            raise ReplayError(
                f"workload {self.workload}: ({key}, {shape}) is not in the replayed records"
                " (a replay answers recorded pairs only)"
            )
        return record.seconds

    def best(self, shape: Shape) -> tuple[str, float]:
        """(key, seconds) of the fastest recorded candidate at ``shape``."""
        found = [(self.seconds(key, shape), key) for key in self.candidate_keys]
        seconds, key = min(found)
        return key, seconds


class ReplayMeasurer:
    """Answers ``measure_pairs`` from a :class:`ReplayTable`, as a real measurer from a run.

    ``measured`` counts the distinct pairs answered (each one a measurement a real
    tuning run would have paid for); ``timed`` lists them in the order asked. With
    ``db``, each answered record is appended to it, as the real measurer records what it
    times (a fresh database per run keeps runs independent).
    """

    def __init__(
        self,
        workload: Workload,
        table: ReplayTable,
        db: RecordDatabase | None = None,
        unrecorded: str = "raise",
    ) -> None:
        if unrecorded not in ("raise", "failed"):
            raise ValueError(f"unrecorded must be 'raise' or 'failed', not {unrecorded!r}")
        if workload.key != table.workload:
            raise ReplayError(
                f"the records replayed are of workload {table.workload}, not {workload.key}"
            )
        self.workload = workload
        self.table = table
        self.db = db
        self.unrecorded = unrecorded
        self.timed: list[Pair] = []
        self._answered: set[Pair] = set()
        self.calls = 0  # measure_pairs calls answered so far

    def _answer(self, pair: Pair) -> Record | None:
        """The record that answers ``pair`` in this call (None: not recorded)."""
        return self.table.records.get(pair)

    @property
    def measured(self) -> int:
        return len(self._answered)

    def measure_pairs(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        calls: int | None = None,
        again: bool = False,
    ) -> MeasureReport:
        """The recorded outcome of every pair; nothing is answered if one is not recorded
        (however it was sampled: ``calls`` and ``again`` are the search's wishes, not the
        records': a pair timed again is its one record once more)."""
        wanted = [(candidate.key(), tuple(shape)) for candidate, shape in pairs]
        missing = [pair for pair in wanted if pair not in self.table.records]
        if missing and self.unrecorded == "raise":
            key, shape = missing[0]
            self.table.seconds(key, shape)  # raises, naming the pair
        report = MeasureReport(self.workload, [c for c, _ in pairs], [tuple(s) for _, s in pairs])
        self.calls += 1
        for (candidate, _), pair in zip(pairs, wanted, strict=True):
            record = self._answer(pair) or self._unrecorded(candidate, pair[1])
            if pair not in self._answered:
                self._answered.add(pair)
                self.timed.append(pair)
                report.measured += 1
                if self.db is not None:
                    self.db.append(record)
            report.records[pair] = record
        return report

    def _unrecorded(self, candidate: Candidate, shape: Shape) -> Record:
        """A failed run: the records do not hold this pair (``unrecorded="failed"``)."""
        route = next(iter(self.table.records.values())).route
        return Record.failure(
            workload=self.workload,
            target=self.table.target,
            target_key=self.table.target_key,
            candidate=candidate,
            route=route,
            error="not in the replayed records (a replay answers recorded pairs only)",
            failure_kind="run",
            dims=self.workload.shape_dims(shape),
        )


class PassNoiseMeasurer(ReplayMeasurer):
    """A replay of a merged oracle (``benchmarks/oracle.py --merge``) that answers each
    pair with one pass's median and samples instead of the median of the passes and all
    their samples: the measurements a live tune makes are single passes, rounds apart, on
    a machine that drifts.

    The pass is drawn per (``seed``, call, shape): pairs timed in one call at one shape
    come from one pass, as a tune times them interleaved there, while another call (a
    later round) draws again. A record without ``extra["passes"]`` answers as recorded.
    """

    def __init__(
        self,
        workload: Workload,
        table: ReplayTable,
        seed: int,
        db: RecordDatabase | None = None,
        unrecorded: str = "raise",
    ) -> None:
        super().__init__(workload, table, db, unrecorded)
        self.seed = seed

    def _answer(self, pair: Pair) -> Record | None:
        record = self.table.records.get(pair)
        passes = record.extra.get("passes") if record is not None and record.ok else None
        if not passes:
            return record
        key = f"{self.seed}:{self.calls}:{pair[1]}".encode()
        return one_pass(record, hashlib.sha256(key).digest()[0] % len(passes))


def one_pass(record: Record, index: int) -> Record:
    """A merged oracle's ``record`` as its pass ``index`` timed it: that pass's median and
    samples (the floor's pairs are read by their quantiles,
    :func:`~dcmlir.search.floor_builds.steady`), as a live tune's record holds one
    timing's. The samples are pooled in the passes' order, ``extra["pass_samples"]`` of
    each (merges before it: as many each); where they do not add up, all are kept."""
    passes, times = record.extra["passes"], record.times
    counts = record.extra.get("pass_samples") or [len(times) // len(passes)] * len(passes)
    if sum(counts) != len(times):
        return dataclasses.replace(record, median=float(passes[index]))
    start = sum(counts[:index])
    times = times[start : start + counts[index]]
    return dataclasses.replace(record, median=float(passes[index]), times=times)
