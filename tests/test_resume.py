"""Tuning loses nothing to kill -9 or Ctrl-C, and a resumed run reaches the same plan.

The property "a run killed and resumed reaches the plan of an uninterrupted run with the
same seed and budget" only holds when both see the same numbers: real timings differ
between any two runs. So it is checked twice:

- with deterministic times (``dcmlir.testing.FakeRunner``: a function of (candidate, shape)
  only; builds, records, cost model, search and plan are all real), the killed-and-resumed
  plan must be *identical* to the uninterrupted one, and so must the set of measurements;
- with real timings, a kill -9 / Ctrl-C sequence must lose no record, time no pair twice,
  and end on a plan that a further run computes again from the records alone (measuring
  nothing): the plan is a function of (seed, budget, records).

In process, the same holds after a stop at every record boundary (the state kill -9 leaves
there: appends are whole lines), and the search itself decides bit for bit the same when a
resumed run gets its records back in another order than they were timed.

Kill points are defined by progress, not by wall time: ``tune_driver`` holds the process
at an exact point (the N-th record on disk, the N-th sample, inside an ``iree-compile``,
before the plan is written) and the test kills it there. ``docs/reliability.md`` lists them.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers import DENSE, dense_with_range

import dcmlir
from dcmlir.driver import TuneReport
from dcmlir.records import Record, RecordDatabase
from dcmlir.search.shape_generic import SearchResult, SearchSettings, ShapeGenericSearch
from dcmlir.space import space_for
from dcmlir.target import CpuTarget
from dcmlir.testing import FakeMeasurer, FakeRunner, small_cost_model

DRIVER = Path(__file__).with_name("tune_driver.py")
TUNE_ARGS = ["--dims", "1:6", "--seed", "0", "--level", "input"]
FAST = ["--min-time", "0.002", "--rounds", "2"]
NEW = re.compile(r"(\d+) measurements \((\d+) new\)")
INTERRUPTED = re.compile(r"^dcmlir: interrupted; the records in .* are kept: run the same command")


def records_of(path: Path) -> list[Record]:
    """Every line of a records file, each of which must parse (none lost, none corrupt)."""
    if not path.exists():
        return []
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "the last record line is cut"
    return [Record.from_line(line) for line in text.splitlines()]


def measured_pairs(records: list[Record]) -> Counter[tuple[str, tuple[int, ...]]]:
    """First records per pair; a pair timed again side by side (an exact build beside the
    kernel chosen there, a duel) is timed again whole where a stop cut its group."""
    return Counter(
        (r.candidate_key, r.shape)
        for r in records
        if r.kind == "measure" and not r.extra.get("again")
    )


def process_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(stat.parent.name)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int) -> set[int]:
    table = process_table()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, (parent, _) in table.items() if parent in frontier}
        found |= frontier
    return found


def wait_gone(pids: set[int], timeout: float = 20.0) -> set[int]:
    """The pids still running (not exited, not zombies) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        table = process_table()
        alive = {pid for pid in pids if pid in table and table[pid][1] != "Z"}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    held: str | None  # where the process was stopped (None: ran to the end)
    lines_before: int
    records: list[Record]  # the whole file afterwards

    @property
    def appended(self) -> list[Record]:
        return self.records[self.lines_before :]

    @property
    def new(self) -> int:
        """The measurements the run's report says it took itself."""
        match = NEW.search(self.stdout)
        assert match, self.stdout
        return int(match.group(2))


class Session:
    """One records file, build cache and $TMPDIR, tuned by successive `dcmlir tune` processes."""

    def __init__(
        self, root: Path, fake_times: bool, cache: Path | None = None, budget: int = 12
    ) -> None:
        root.mkdir()
        self.budget = budget
        self.root = root
        self.db = root / "records.jsonl"
        self.plan = root / "plan.json"
        self.tmp = root / "tmp"
        self.tmp.mkdir()
        self.cache = cache or root / "cache"  # its own: the kill points include compiles
        self.env = dict(
            os.environ,
            DCMLIR_CACHE_DIR=str(self.cache),
            TMPDIR=str(self.tmp),
            DCMLIR_TEST_SMALL_MODEL="1",
        )
        if fake_times:
            self.env["DCMLIR_TEST_FAKE_TIMES"] = "1"
        self.source = root / "dense.mlir"
        self.source.write_text(DENSE)

    def tune(self, hold: str | None = None, how: signal.Signals = signal.SIGKILL) -> Run:
        """Run `dcmlir tune`; with ``hold``, stop it there with ``how`` and check the aftermath:
        the file only grew, every line parses, no process of the run is left behind."""
        before = self.db.read_bytes() if self.db.exists() else b""
        marker = self.root / "held"
        marker.unlink(missing_ok=True)
        env = dict(self.env)
        if hold is not None:
            env.update(DCMLIR_TEST_HOLD=hold, DCMLIR_TEST_MARKER=str(marker))
        command = [sys.executable, str(DRIVER), "tune", self.source.name, *TUNE_ARGS, *FAST]
        command += ["--budget", str(self.budget)]
        command += ["--db", str(self.db), "-o", str(self.plan)]
        process = subprocess.Popen(
            command,
            env=env,
            cwd=self.root,  # the graph names the source as given: the same in every session
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a terminal job
        )
        held = None
        try:
            if hold is not None:
                held = self._wait_for(marker, process)
                children = descendants(process.pid)
                if how in (signal.SIGKILL, signal.SIGTERM):
                    os.kill(process.pid, how)  # the tuner only, as `kill -9 PID` / `kill PID`
                else:
                    os.killpg(process.pid, how)  # Ctrl-C reaches the whole foreground group
            stdout, stderr = process.communicate(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        if hold is not None:
            assert not wait_gone(children), f"processes left running after {how.name} at {hold}"
        after = self.db.read_bytes() if self.db.exists() else b""
        assert after.startswith(before), "the records file was rewritten, not appended to"
        return Run(
            process.returncode,
            stdout,
            stderr,
            held,
            before.count(b"\n"),
            records_of(self.db),
        )

    def _wait_for(self, marker: Path, process: subprocess.Popen[str]) -> str:
        deadline = time.monotonic() + 180
        while not marker.exists():
            if process.poll() is not None:
                _, stderr = process.communicate()
                pytest.fail(f"the run ended before its kill point:\n{stderr[-2000:]}")
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.02)
        return marker.read_text()


def plan_files(session: Session) -> tuple[dict, dict]:  # type: ignore[type-arg]
    graph = session.plan.with_name("plan.graph.json")
    return json.loads(session.plan.read_text()), json.loads(graph.read_text())


def test_killed_at_every_kind_of_point_and_resumed_reaches_the_uninterrupted_plan(
    tmp_path: Path,
) -> None:
    """Deterministic times: kill -9 in a burst of build records, during a sample, inside
    iree-compile, in a burst of measure records and after the last record; the resumed
    run's plan and measurements are those of one uninterrupted run, each pair timed once."""
    # 24: a quarter of it (6 first measurements) builds in one burst, after the floor's
    # two builds and four end pairs (an argument weight), and more kernels are built after
    # the first runs' kill points
    killed = Session(tmp_path / "killed", fake_times=True, budget=24)
    points = ["append:8", "sample:4", "compile:1", "append:3", "save"]
    runs = [killed.tune(hold) for hold in points]
    last = killed.tune()
    assert last.returncode == 0, last.stderr
    assert last.new == 0 and last.appended == []  # everything came from the records
    # the uninterrupted run after it, on the same build cache: it compiles nothing
    reference = Session(tmp_path / "reference", fake_times=True, cache=killed.cache, budget=24)
    whole = reference.tune()
    assert whole.returncode == 0, whole.stderr
    expected = records_of(reference.db)
    assert whole.new == sum(r.kind == "measure" for r in expected)
    # past the kill points, within the budget; the search may stop below it when nothing
    # it estimates can beat its choice: which kernels it estimates so follows the host
    # (the cost model reads its caches and lanes), and on the EPYC it stopped at 12, data
    # tiling proved at all six T, where the Xeon went on to 13-24
    assert 12 <= whole.new <= 24

    for hold, run in zip(points, runs, strict=True):
        assert run.returncode == -signal.SIGKILL and run.held == hold
        if hold.startswith("append:"):
            assert len(run.appended) == int(hold.split(":")[1])  # on disk the moment it died
    assert [r.kind for r in runs[0].appended[-2:]] == ["build", "build"]  # mid-burst of builds
    assert runs[1].appended and all(r.kind == "build" for r in runs[1].appended)  # in a shape
    assert runs[3].appended[-1].kind == "measure"  # mid-burst of measure records
    assert len(runs[4].records) == len(expected) and runs[4].appended  # then no plan written

    assert plan_files(killed) == plan_files(reference)
    records = records_of(killed.db)
    pairs = measured_pairs(records)
    assert set(pairs.values()) == {1}, "a (candidate, shape) pair was measured twice"
    assert pairs == measured_pairs(expected)
    times = {(r.candidate_key, r.shape): r.times for r in records if r.kind == "measure"}
    assert times == {(r.candidate_key, r.shape): r.times for r in expected if r.kind == "measure"}
    builds = Counter(r.candidate_key for r in records if r.kind == "build")
    assert builds == Counter(r.candidate_key for r in expected if r.kind == "build")
    assert set(builds.values()) == {1}  # a variant rebuilt from the cache adds no line
    # what kill -9 cannot clean up, the next run did
    assert list(killed.tmp.iterdir()) == []
    assert "left in" in runs[1].stderr + runs[2].stderr + last.stderr


def test_real_timings_kill_9_and_ctrl_c_lose_nothing_and_measure_nothing_twice(
    tmp_path: Path,
) -> None:
    """Real builds and timings: kill -9, Ctrl-C (SIGINT to the process group, as a
    terminal sends it: iree-compile and the measuring worker get it too) and `kill PID`
    (SIGTERM to the tuner only) at several points;
    no record lost or cut, no pair timed twice, no spurious failure, and the final plan is
    what the records give: one more run measures nothing and writes the same plan."""
    session = Session(tmp_path / "real", fake_times=False)
    steps = [  # each reachable whatever the timings: the cache starts empty
        ("compile:1", signal.SIGINT),  # Ctrl-C while iree-compile runs (the first chunk)
        ("sample:3", signal.SIGKILL),  # the worker holds the shape's modules
        ("append:2", signal.SIGKILL),  # between two records of one burst
        ("sample:2", signal.SIGINT),  # Ctrl-C during measurement
        ("sample:2", signal.SIGTERM),  # `kill PID`: handled as Ctrl-C is
    ]
    seen = 0
    for hold, how in steps:
        run = session.tune(hold, how)
        assert run.held == hold
        if how in (signal.SIGINT, signal.SIGTERM):  # a clean exit: one line, scratch removed
            assert run.returncode == (130 if how == signal.SIGINT else 143), run.stderr
            assert INTERRUPTED.match(run.stderr.splitlines()[-1]), run.stderr
            assert "Traceback" not in run.stderr
            assert list(session.tmp.iterdir()) == []
        else:
            assert run.returncode == -signal.SIGKILL
        assert not [r for r in run.records if r.failed], "an interrupt became a failure record"
        seen = len(run.records)
    final = session.tune()
    assert final.returncode == 0, final.stderr
    records = records_of(session.db)
    assert final.new == sum(r.kind == "measure" for r in records[seen:])
    pairs = measured_pairs(records)
    assert set(pairs.values()) == {1}, "a (candidate, shape) pair was measured twice"
    assert sum(pairs.values()) <= 12  # the budget holds across the runs
    plan = plan_files(session)
    replay = session.tune()
    assert replay.returncode == 0 and replay.new == 0 and replay.appended == []
    assert plan_files(session) == plan
    assert list(session.tmp.iterdir()) == []


class Stopped(Exception):
    """Where the in-process run stops: the state kill -9 after that record leaves."""


def test_interrupted_after_every_record_resumes_to_the_same_plan(tmp_path: Path) -> None:
    """In process, deterministic times: the run stops after record 1, 2, ... N (the state a
    kill -9 there leaves on disk: appends are whole lines) and a second run finishes it."""
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)

    def tune(db: Path, output: Path, database: RecordDatabase | None = None) -> TuneReport:
        return dcmlir.tune(
            source,
            dims=["1:6"],
            budget=12,
            db=db,
            output=output,
            level="input",
            stream=io.StringIO(),
            runner=FakeRunner,
            cost_model=small_cost_model(),
            database=database,
        )

    tune(tmp_path / "whole.jsonl", tmp_path / "whole.json")
    expected = (tmp_path / "whole.json").read_text()
    total = len(records_of(tmp_path / "whole.jsonl"))

    for stop_after in range(1, total):
        db = tmp_path / f"stopped-{stop_after}.jsonl"
        with pytest.raises(Stopped):
            tune(db, tmp_path / "unused.json", StoppingDatabase(db, stop_after))
        report = tune(db, tmp_path / f"resumed-{stop_after}.json")
        assert (tmp_path / f"resumed-{stop_after}.json").read_text() == expected, stop_after
        assert report.measured_now == sum(r.kind == "measure" for r in records_of(db)[stop_after:])
        assert set(measured_pairs(records_of(db)).values()) == {1}


class MeasurerOrder(FakeMeasurer):
    """test_search's synthetic machine, answering in the real Measurer's order: pairs found
    in the records first, then the timed ones largest shape first."""

    def measure_pairs(self, pairs, calls=None, again=False):  # type: ignore[no-untyped-def]
        timed_before = len(self.timed)
        report = super().measure_pairs(pairs, calls, again)
        fresh = set(self.timed[timed_before:])
        known = [(pair, r) for pair, r in report.records.items() if pair not in fresh]
        timed = sorted(
            ((pair, r) for pair, r in report.records.items() if pair in fresh),
            key=lambda item: -math.prod(item[0][1]),
        )
        report.records = dict(known + timed)
        return report


class StoppingDatabase(RecordDatabase):
    def __init__(self, path: Path, stop_after: int | None) -> None:
        super().__init__(path, fsync=False)
        self.stop_after, self.written = stop_after, 0

    def append(self, record: Record) -> None:
        if self.written == self.stop_after:
            raise Stopped
        super().append(record)
        self.written += 1


def test_search_resumed_mid_batch_decides_bit_for_bit_the_same(tmp_path: Path) -> None:
    """The search with the real cost model over more rounds: stopped after every third
    record, a resumed search gets the records back in another order than the uninterrupted
    one timed them, and must still reach the same estimate table to the last bit."""
    workload = dense_with_range(1, 24)
    target = CpuTarget()

    def search(db: RecordDatabase) -> SearchResult:
        return ShapeGenericSearch(
            workload,
            MeasurerOrder(workload, db),  # type: ignore[arg-type]
            small_cost_model()(workload, target, 1, seed=0),
            space_for(target),
            SearchSettings(budget=60, max_kernels=4, verify_batch=16),
            stream=io.StringIO(),
        ).run()

    whole = search(StoppingDatabase(tmp_path / "whole.jsonl", None))
    for stop_after in range(1, whole.measurements, 3):
        path = tmp_path / f"stopped-{stop_after}.jsonl"
        with pytest.raises(Stopped):
            search(StoppingDatabase(path, stop_after))
        resumed = search(StoppingDatabase(path, None))
        cut = whole.measurements - stop_after  # + 1 where a side-by-side pair was cut in two
        assert resumed.measured_now in (cut, cut + 1)
        assert np.array_equal(resumed.estimate, whole.estimate), stop_after
        assert [k.key() for k in resumed.kernels] == [k.key() for k in whole.kernels]
        assert resumed.choice == whole.choice
