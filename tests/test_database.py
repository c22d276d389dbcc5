"""Tuning records: round trips, crash and concurrency safety, tolerant loading, queries."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import SCORES

from dcmlir.ir.mlir import ir, parse_module
from dcmlir.records import FAILURES, FORMAT, DatabaseError, Record, RecordDatabase, failure_of
from dcmlir.workload import Workload, workloads

VERSION = "3.13.0 (test)"
TARGET = {"backend": "llvm-cpu", "cpu": "host", "threads": 1}


def make(
    candidate: str = "cpu:wg8x128:v1x16:k8",
    m: int = 17,
    times: tuple[float, ...] = (2e-3, 1e-3, 3e-3),
    *,
    workload: str = "w0",
    target_key: str = "cpu",
    route: str = "config",
    version: str = VERSION,
    **extra: object,
) -> Record:
    return Record.measurement(
        workload=workload,
        target=TARGET,
        target_key=target_key,
        candidate={"workgroup": [8, 128], "name": candidate},
        candidate_key=candidate,
        route=route,
        dims={0: m},
        space=(m, 768, 768),
        times=times,
        extra=extra,
        iree_version=version,
    )


def fail(
    candidate: str,
    m: int | None = 17,
    *,
    kind: str = "measure",
    workload: str = "w0",
    route: str = "config",
    error: str = "runtime error: out of bounds",
) -> Record:
    return Record.failure(
        workload=workload,
        target=TARGET,
        target_key="cpu",
        candidate={"name": candidate},
        candidate_key=candidate,
        route=route,
        error=error,
        kind=kind,
        dims=None if m is None else {0: m},
        space=None if m is None else (m, 768, 768),
        iree_version=VERSION,
    )


def database(path: Path) -> RecordDatabase:
    return RecordDatabase(path, fsync=False, iree_version=VERSION)


# --- format ---------------------------------------------------------------------------------


def test_round_trip_keeps_every_field(tmp_path):
    ok = make(compile_seconds=0.25, drift={"reference": 1.02})
    build = fail("cpu:wg4x4", None, kind="build", error='iree-compile: error: "x"\nsecond line')
    run = fail("cpu:wg4x4", 5)
    db = database(tmp_path / "r.jsonl")
    for record in (ok, build, run):
        db.append(record)
    loaded = database(tmp_path / "r.jsonl").load()
    assert loaded == [ok, build, run]
    assert loaded[0].median == 2e-3 and loaded[0].times == (2e-3, 1e-3, 3e-3)
    assert loaded[0].dims == {0: 17} and loaded[0].space == (17, 768, 768)
    assert loaded[0].shape == (17,)
    assert loaded[0].extra == {"compile_seconds": 0.25, "drift": {"reference": 1.02}}
    assert loaded[0].candidate == {"workgroup": [8, 128], "name": "cpu:wg8x128:v1x16:k8"}
    assert loaded[0].target == TARGET
    assert loaded[1].median == math.inf and loaded[1].times == () and loaded[1].all_shapes
    assert loaded[1].error == 'iree-compile: error: "x"\nsecond line'
    assert loaded[1].kind == "build" and loaded[2].kind == "measure"
    assert all(r.timestamp.endswith("+00:00") for r in loaded)
    assert all(r.dcmlir_version and r.iree_version == VERSION for r in loaded)
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 3  # the newline in the error text is escaped
    raw = [json.loads(line) for line in lines]
    assert all(obj["format"] == FORMAT == 1 for obj in raw)
    assert raw[1]["median"] is None and raw[0]["dims"] == {"0": 17}


def test_inf_as_string_and_tuples_decode():
    line = json.loads(fail("c").to_line())
    line["median"] = "inf"
    assert Record.from_json(line).median == math.inf
    # JSON-able inputs are stored in their JSON form so the round trip is exact
    record = make()
    assert record == Record.from_line(record.to_line())
    assert Record.measurement(
        workload="w",
        target=TARGET,
        target_key="cpu",
        candidate={"tiles": (8, 16)},
        candidate_key="c",
        route="td",
        dims={},
        space=(4, 4, 4),
        times=[1.0],
        iree_version=VERSION,
    ).candidate == {"tiles": [8, 16]}


class FakeCandidate:
    """Stands for a space candidate: JSON for the record, a short key for the index."""

    def to_json(self) -> dict[str, object]:
        return {"workgroup": {"m": 8, "n": 64}, "vector": {"m": 1, "n": 16}, "k": 8}

    def key(self) -> str:
        return "cpu:wg8x64:v1x16:k8"


def test_objects_give_keys_and_workload_gives_space():
    with ir.Context():
        ((_, workload),) = list(workloads(parse_module(SCORES).operation))
    assert isinstance(workload, Workload)
    record = Record.measurement(
        workload=workload,
        target=TARGET,
        target_key="cpu",
        candidate=FakeCandidate(),
        route="td",
        dims={2: 40, 1: 17},
        times=[1.0],
        iree_version=VERSION,
    )
    assert record.workload == workload.key and record.candidate_key == "cpu:wg8x64:v1x16:k8"
    assert record.candidate == FakeCandidate().to_json()
    assert record.space == (12, 17, 40, 64) and record.shape == (17, 40)
    assert Record.from_line(record.to_line()) == record
    with pytest.raises(ValueError, match="give candidate_key"):
        Record.failure(
            workload="w", target=TARGET, target_key="cpu", candidate={}, route="td", error="e"
        )
    with pytest.raises(ValueError, match="iteration space"):
        Record.measurement(
            workload="w",
            target=TARGET,
            target_key="cpu",
            candidate=FakeCandidate(),
            route="td",
            dims={0: 1},
            times=[1.0],
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"route": "magic"}, "route 'magic'"),
        ({"kind": "guess"}, "kind 'guess'"),
        ({"space": (18, 768, 768)}, "disagree"),
        ({"median": math.inf}, "finite median"),
        ({"median": 0.0}, "median > 0"),
        ({"times": (0.0,), "median": 0.0}, "median > 0"),
        ({"times": (1.0, 0.0)}, "seconds > 0"),
        ({"times": ()}, "needs times"),
        ({"times": (math.nan,)}, "finite"),
        ({"error": "boom"}, "no times"),
        ({"extra": {"x": math.nan}}, "not JSON-able"),
        ({"candidate": {"x": object()}}, "not JSON-able"),
        ({"workload": ""}, "'workload'"),
    ],
)
def test_invalid_records_are_refused(change, message):
    fields = {name: getattr(make(), name) for name in make().__dataclass_fields__}
    with pytest.raises(ValueError, match=message):
        Record(**{**fields, **change})


def test_a_zero_time_on_disk_is_skipped_not_fatal(tmp_path: Path) -> None:
    """One ``median: 0.0`` line made every later tune fail (log(0) in the search)."""
    good = make()
    zero = json.dumps({**good.to_json(), "median": 0.0, "times": [0.0]})
    path = tmp_path / "r.jsonl"
    path.write_text(good.to_line() + "\n" + zero + "\n")
    assert RecordDatabase(path).load() == [good]


@pytest.mark.parametrize(
    ("error", "kind", "failure"),
    [
        ("build: iree-compile: error: too much smem", "build", "build"),
        ('iree-compile: error: "x"', "build", "build"),  # a build record names no step
        ("build: iree-compile ran past the 5 s time limit", "build", "timeout"),
        ("sample: timed out after 60 s", "measure", "timeout"),
        ("setup: timed out after 60 s", "measure", "timeout"),
        ("load: cannot load module", "measure", "load"),
        ("check: MismatchError: relative error 9.1 exceeds 0.001", "measure", "check"),
        ("check: RuntimeError: kernel crashed", "measure", "run"),
        ("warmup: the measuring process died (signal 11): Segmentation fault", "measure", "worker"),
        ("no samples", "measure", "run"),
        ("runtime error: out of bounds", "measure", "run"),
    ],
)
def test_failure_kind_is_inferred_from_the_error_text(error, kind, failure):
    assert failure_of(error, kind) == failure
    record = fail("c", None if kind == "build" else 17, kind=kind, error=error)
    assert record.failure_kind == failure
    assert Record.from_line(record.to_line()).failure_kind == failure


def test_failure_kind_is_written_round_tripped_and_inferred_for_old_lines(tmp_path):
    """The writer's kind wins over the text; a line from before the field gets the inferred
    one, so old record files keep their meaning."""
    path = tmp_path / "r.jsonl"
    hang = Record.failure(
        workload="w0",
        target=TARGET,
        target_key="cpu",
        candidate={"name": "h"},
        candidate_key="h",
        route="config",
        error="the kernel hung",
        failure_kind="timeout",
        dims={0: 17},
        space=(17, 768, 768),
        iree_version=VERSION,
    )
    wrong = fail("w", error="check: MismatchError: relative error 0.3 exceeds 0.0001")
    ok = make()
    db = database(path)
    for record in (hang, wrong, ok):
        db.append(record)
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert [obj["failure_kind"] for obj in raw] == ["timeout", "check", None]
    assert database(path).load() == [hang, wrong, ok]
    assert [r.failure_kind for r in database(path).load()] == ["timeout", "check", None]
    old_lines = []
    for obj in raw:  # as written before failure kinds existed
        del obj["failure_kind"]
        old_lines.append(json.dumps(obj))
    path.write_text("\n".join(old_lines) + "\n")
    old = database(path)
    assert [r.failure_kind for r in old.load()] == ["run", "check", None] and not old.problems
    assert old.load()[1] == wrong  # the same record, whichever way it was read


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"failure_kind": "oops"}, "failure kind 'oops' is not one of"),
        ({"failure_kind": 3}, "'failure_kind' must be a string or null"),
        ({"error": None}, "failure kind 'run' without error text"),
    ],
)
def test_invalid_failure_kinds_are_refused(change, message):
    line = {**json.loads(fail("c").to_line()), **change}
    with pytest.raises(ValueError, match=message):
        Record.from_json(line)
    assert set(FAILURES) == {"build", "timeout", "load", "check", "run", "worker"}


def test_failures_need_error_text():
    with pytest.raises(ValueError, match="error text"):
        fail("c", error="")
    with pytest.raises(ValueError, match="at least one sample"):
        make(times=())


# --- loading ---------------------------------------------------------------------------------


def test_corrupt_and_truncated_lines_are_skipped_and_reported(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    good = [make(m=m) for m in (1, 2, 3)]
    newer = {**json.loads(good[0].to_line()), "format": FORMAT + 1}
    missing = json.loads(good[0].to_line())
    del missing["route"]
    wrong_type = {**json.loads(good[0].to_line()), "space": "17x768"}
    content = b"".join(
        [
            good[0].to_line().encode() + b"\n",
            b"this is not json\n",
            b"\n",  # blank lines are not problems
            json.dumps(newer).encode() + b"\n",
            b"[1, 2]\n",
            json.dumps(missing).encode() + b"\n",
            good[1].to_line().encode() + b"\n",
            b"\xff\xfe{}\n",
            json.dumps(wrong_type).encode() + b"\n",
            good[2].to_line().encode() + b"\n",
            good[0].to_line().encode()[:57],  # a writer died mid-line
        ]
    )
    path.write_bytes(content)
    db = database(path)
    with caplog.at_level(logging.WARNING, logger="dcmlir.records.database"):
        assert db.load() == good
    assert db.problems[:-1] == [
        f"{path}:2: not JSON: Expecting value, column 1",
        f"{path}:4: format 2 is newer than this dcmlir reads (1)",
        f"{path}:5: not a JSON object but list",
        f"{path}:6: missing field 'route'",
        f"{path}:8: not UTF-8 text",
        f"{path}:9: field 'space' must be a list, not str",
    ]
    assert db.problems[-1].startswith(f"{path}:11: not JSON")
    assert db.problems[-1].endswith("(truncated last line: no newline at the end)")
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "skipped 7 unreadable record line(s)" in message and "and 2 more" in message


def test_missing_file_is_empty(tmp_path):
    db = database(tmp_path / "absent.jsonl")
    assert db.load() == [] and db.problems == [] and len(db) == 0


def test_append_after_a_fragment_starts_a_new_line(tmp_path):
    path = tmp_path / "r.jsonl"
    first = make(m=1)
    path.write_bytes(first.to_line().encode() + b"\n" + b'{"format":1,"kind":"mea')
    database(path).append(second := make(m=2))
    db = database(path)
    assert db.load() == [first, second]
    assert len(db.problems) == 1 and db.problems[0].startswith(f"{path}:2: not JSON")
    assert path.read_bytes().endswith(b"\n")


# --- crash safety and concurrency ------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from dcmlir.records import Record, RecordDatabase

    path, writer, count, payload, fsync = sys.argv[1:6]
    db = RecordDatabase(path, fsync=fsync == "1", iree_version="3.13.0 (test)")
    blob = "x" * int(payload)
    print("ready", flush=True)
    i = 0
    while int(count) < 0 or i < int(count):
        db.append(
            Record.measurement(
                workload="w0", target={"b": "llvm-cpu"}, target_key="cpu",
                candidate={"blob": blob}, candidate_key=f"{writer}:{i}", route="config",
                dims={0: 1 + i % 128}, space=(1 + i % 128, 768, 768), times=[1e-3, 2e-3],
                extra={"writer": writer, "seq": i}, iree_version="3.13.0 (test)",
            )
        )
        i += 1
    """
)


def start_writer(
    path: Path, writer: str, count: int, payload: int, fsync: bool = False
) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            str(path),
            writer,
            str(count),
            str(payload),
            str(int(fsync)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.mark.parametrize(
    ("delay", "payload", "fsync"),
    [(0.05, 200_000, False), (0.1, 50_000, True), (0.2, 1_000_000, False), (0.2, 3_000, False)],
)
def test_kill_9_leaves_a_parseable_file(tmp_path, delay, payload, fsync):
    path = tmp_path / "r.jsonl"
    child = start_writer(path, "a", -1, payload, fsync)
    deadline = time.monotonic() + 30
    while not (path.exists() and path.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.001)  # count the moments from the first append, however busy the machine
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    db = database(path)
    records = db.load()
    n_lines = len(path.read_bytes().split(b"\n"))
    assert records, "the writer appended nothing before it was killed"
    assert len(db.problems) <= 1
    if db.problems:  # only the line in flight, which is the last one
        assert db.problems[0].startswith(f"{path}:{n_lines}:"), db.problems
    assert [r.extra["seq"] for r in records] == list(range(len(records)))

    db.append(after := make())
    again = database(path)
    assert again.load()[-1] == after
    assert len(again.load()) == len(records) + 1
    # the fragment is still reported, no longer as the last line
    assert [p.split(": ")[0] for p in again.problems] == [p.split(": ")[0] for p in db.problems]


def test_concurrent_writers_never_interleave(tmp_path):
    path = tmp_path / "r.jsonl"
    writers, count = 4, 120
    children = [start_writer(path, f"w{n}", count, 40_000 + 7_000 * n) for n in range(writers)]
    for child in children:
        assert child.wait(timeout=120) == 0
    db = database(path)
    records = db.load()
    assert db.problems == []
    assert len(path.read_bytes().splitlines()) == writers * count
    for n in range(writers):
        mine = [r for r in records if r.extra["writer"] == f"w{n}"]
        assert [r.extra["seq"] for r in mine] == list(range(count))
        assert all(len(r.candidate["blob"]) == 40_000 + 7_000 * n for r in mine)


def test_append_waits_for_the_lock(tmp_path):
    path = tmp_path / "r.jsonl"
    path.touch()
    with open(path, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        child = start_writer(path, "late", 1, 10)
        time.sleep(0.5)
        assert child.poll() is None and path.stat().st_size == 0
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
        assert child.wait(timeout=30) == 0
    assert [r.candidate_key for r in database(path).load()] == ["late:0"]


def test_fsync_is_called_unless_disabled(tmp_path, monkeypatch):
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    RecordDatabase(tmp_path / "a.jsonl", iree_version=VERSION).append(make())
    assert len(calls) == 1
    database(tmp_path / "b.jsonl").append(make())
    assert len(calls) == 1


# --- write failures --------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_device_raises_a_clear_error():
    with pytest.raises(DatabaseError, match=r"/dev/full: No space left on device") as info:
        database(Path("/dev/full")).append(make())
    assert info.value.errno == errno.ENOSPC and info.value.path == Path("/dev/full")


def test_full_device_error_names_the_fix():
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with pytest.raises(DatabaseError) as info:
        database(Path("/dev/full")).append(make())
    assert str(info.value).endswith(
        "No space left on device; free some space (or keep the records on another disk) and "
        "run again: every record written so far is kept and reused"
    )


def test_loading_anything_but_a_regular_file_is_refused_not_read_forever(tmp_path):
    """/dev/full and /dev/zero read as endless zeros (a load would fill memory), a FIFO
    blocks until a writer comes: both are refused before reading."""
    fifo = tmp_path / "records.fifo"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo, tmp_path):
        with pytest.raises(DatabaseError, match=rf"cannot read {path}: not a regular file"):
            database(path).load()


def test_unwritable_place_raises_a_clear_error(tmp_path):
    path = tmp_path / "no-such-dir" / "r.jsonl"
    with pytest.raises(DatabaseError, match=r"cannot open .*no-such-dir/r.jsonl: No such file"):
        database(path).append(make())


def test_enospc_leaves_the_file_parseable(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    db = database(path)
    db.append(first := make(m=1))
    before = path.read_bytes()

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", full)
        with pytest.raises(DatabaseError, match=rf"{path}: No space left on device"):
            db.append(make(m=2))
    assert path.read_bytes() == before
    db.append(third := make(m=3))
    assert database(path).load() == [first, third]


def test_short_write_is_rolled_back(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    db = database(path)
    db.append(first := make(m=1))
    before = path.read_bytes()
    real = os.write

    def half(fd: int, data: bytes) -> int:
        return real(fd, data[: len(data) // 2])

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", half)
        with pytest.raises(DatabaseError, match=r"short write, \d+ of \d+ bytes") as info:
            db.append(make(m=2))
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    db.append(third := make(m=3))
    reread = database(path)
    assert reread.load() == [first, third] and reread.problems == []


def test_short_write_that_cannot_be_rolled_back_costs_one_line(tmp_path, monkeypatch, caplog):
    path = tmp_path / "r.jsonl"
    db = database(path)
    db.append(first := make(m=1))
    real = os.write

    def half(fd: int, data: bytes) -> int:
        return real(fd, data[: len(data) // 2])

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", half)
        patch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(DatabaseError, match="short write"):
            db.append(make(m=2))
    assert not path.read_bytes().endswith(b"\n")  # the fragment stayed
    assert "cannot remove a partial record line" in caplog.text
    db.append(third := make(m=3))
    reread = database(path)
    assert reread.load() == [first, third]
    assert len(reread.problems) == 1 and reread.problems[0].startswith(f"{path}:2: not JSON")


# --- queries ---------------------------------------------------------------------------------


@pytest.fixture
def filled(tmp_path) -> RecordDatabase:
    """Four candidates on three shapes of workload w0, plus noise the queries must ignore."""
    db = database(tmp_path / "r.jsonl")
    timings = {  # candidate: {m: median}
        "A": {1: 1.0, 17: 4.0, 128: 40.0},
        "B": {1: 2.0, 17: 2.0, 128: 10.0},
        "default": {1: 4.0, 17: 8.0, 128: 20.0},
        "C": {1: 0.5},
    }
    for candidate, per_shape in timings.items():
        for m, median in per_shape.items():
            db.append(make(candidate, m, (median,)))
    db.append(fail("C", 17))  # C cannot serve m=17
    db.append(fail("D", None, kind="build", error="iree-compile: error: too much smem"))
    db.append(make("B", 1, (9.0,), route="td"))  # the other route is another kernel
    db.append(make("A", 1, (0.1,), workload="w1"))  # another workload
    db.append(make("A", 1, (0.1,), target_key="cuda"))  # another target
    db.append(make("E", 128, (0.1,), version="3.12.0 (old)"))  # another IREE
    return db


def test_records_filters(filled):
    assert len(filled.records("w0", "cpu")) == 11
    assert len(filled.records("w0", "cpu", include_failures=True)) == 13
    assert len(filled.records("w0", "cpu", "td")) == 1
    assert len(filled.records(candidate_key="A")) == 5
    assert filled.records(candidate_key="E") == []
    assert len(filled.records(candidate_key="E", only_current_version=False)) == 1
    assert [r.candidate_key for r in filled.records(kind="build", include_failures=True)] == ["D"]
    assert filled.other_versions() == {"3.12.0 (old)": 1}
    assert len(filled) == 16 and len(list(filled)) == 16


def test_best_per_shape(filled):
    best = filled.best_per_shape("w0", "cpu")
    assert {shape: r.candidate_key for shape, r in best.items()} == {
        (1,): "C",
        (17,): "B",
        (128,): "B",
    }
    assert best[(128,)].median == 10.0
    old = filled.best_per_shape("w0", "cpu", only_current_version=False)
    assert old[(128,)].iree_version == "3.12.0 (old)"
    assert filled.best_per_shape("w0", "cpu", route="td")[(1,)].median == 9.0
    assert filled.best_per_shape("nothing", "cpu") == {}


def test_top_k_ranks_by_geomean_slowdown(filled):
    ranked = filled.top_k("w0", "cpu", 10)
    # best: m=1 0.5 (C), m=17 2.0 (B), m=128 10.0 (B); C failed at 17, D failed to build
    expected = {
        ("B", "config"): (4.0 * 1.0 * 1.0) ** (1 / 3),
        ("A", "config"): (2.0 * 2.0 * 4.0) ** (1 / 3),
        ("default", "config"): (8.0 * 4.0 * 2.0) ** (1 / 3),
        ("B", "td"): 18.0,
    }
    assert [(s.candidate_key, s.route) for s in ranked] == list(expected)
    for score in ranked:
        assert score.score == pytest.approx(expected[(score.candidate_key, score.route)])
    assert ranked[0].times == {(1,): 2.0, (17,): 2.0, (128,): 10.0} and ranked[0].shapes == 3
    assert ranked[0].record.candidate_key == "B"
    assert [s.candidate_key for s in filled.top_k("w0", "cpu", 2)] == ["B", "A"]
    assert [s.candidate_key for s in filled.top_k("w0", "cpu", 5, min_shapes=3)] == [
        "B",
        "A",
        "default",
    ]


def test_failed_candidates(filled):
    failed = filled.failed_candidates("w0", "cpu")
    assert list(failed) == [("C", "config"), ("D", "config")]
    assert failed[("D", "config")][0].error == "iree-compile: error: too much smem"
    # a later success on the shape clears the failure
    filled.append(make("C", 17, (1.0,)))
    assert list(filled.failed_candidates("w0", "cpu")) == [("D", "config")]
    assert filled.top_k("w0", "cpu", 1)[0].candidate_key == "C"


def test_lookup_and_measured_for_resuming(filled):
    found = filled.lookup("w0", "cpu", "A", (17,), "config")
    assert found is not None and found.median == 4.0
    assert filled.lookup("w0", "cpu", "A", {0: 17}, "config") == found
    assert filled.lookup("w0", "cpu", "A", (18,), "config") is None
    assert filled.lookup("w0", "cpu", "A", (17,), "td") is None
    assert not filled.measured("w0", "cpu", "E", (128,), "config")  # only under IREE 3.12
    assert filled.measured("w0", "cpu", "E", (128,), "config", only_current_version=False)
    # a failure is a result: skipped on resume unless failures are retried
    assert filled.measured("w0", "cpu", "C", (17,), "config")
    assert not filled.measured("w0", "cpu", "C", (17,), "config", include_failures=False)
    # a variant that did not build counts as measured on every shape
    assert filled.lookup("w0", "cpu", "D", (99,), "config").kind == "build"
    assert not filled.measured("w0", "cpu", "D", (99,), "td")


def test_newer_records_supersede(filled):
    filled.append(make("A", 17, (1.5,)))
    assert filled.lookup("w0", "cpu", "A", (17,), "config").median == 1.5
    assert filled.best_per_shape("w0", "cpu")[(17,)].candidate_key == "A"
    assert len(filled.records("w0", "cpu", candidate_key="A")) == 4  # all kept in the file


def test_queries_see_other_writers_after_load(tmp_path):
    path = tmp_path / "r.jsonl"
    mine, theirs = database(path), database(path)
    mine.append(make("A", 1))
    assert len(mine) == 1  # loaded lazily, then kept up to date by own appends
    theirs.append(make("B", 1))
    assert [r.candidate_key for r in mine] == ["A"]
    mine.load()
    assert [r.candidate_key for r in mine] == ["A", "B"]
