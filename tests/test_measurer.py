"""The measuring loop: builds, correct results, records, resume, failures as data."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import DENSE, SCORES

from dcmlir.build.batch import Builder
from dcmlir.build.routes import TransformLibraryRoute
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase
from dcmlir.space import CpuCandidate, DefaultCandidate, candidate_from_key, space_for
from dcmlir.target import CpuTarget, CudaTarget
from dcmlir.tools.cli import main
from dcmlir.tools.cmd_measure import select_candidates
from dcmlir.workload import Workload, workloads

FAST = RunnerSettings(MeasureSettings(min_time=0.003, rounds=2, input_sets=2, warmup=0.003))
PICKED = [
    DefaultCandidate(),
    candidate_from_key("cpu:wg8x128:v1x16:k8"),
    candidate_from_key("cpu:wg32x32:v8x16:k4"),
]


def workload_of(text: str) -> Workload:
    with ir.Context():
        ((_, found),) = list(workloads(parse_module(text).operation))
    assert isinstance(found, Workload)
    return found


@dataclass(frozen=True)
class BrokenCandidate:
    """A candidate whose config IREE cannot take: its build must fail, not abort."""

    def key(self) -> str:
        return "test:broken"

    def to_json(self) -> dict[str, str]:
        return {"kind": "test-broken"}

    def compilation_info(self, workload: Workload) -> str:
        return "#iree_codegen.compilation_info<this is not an attribute>"


def test_measures_records_and_resumes(tmp_path: Path) -> None:
    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "records.jsonl", fsync=False)
    stream = io.StringIO()
    with Measurer(workload, CpuTarget(), db, runner_settings=FAST, stream=stream) as measurer:
        report = measurer.measure(PICKED, [(1,), (9,)])
    assert report.measured == 6
    for candidate in PICKED:
        for shape in [(1,), (9,)]:
            record = report.records[(candidate.key(), shape)]
            assert record.ok, record.error
            assert record.extra["max_error"] < 1e-4  # checked against numpy first
            assert record.space == (shape[0], 768, 768)
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds.count("build") == 3 and kinds.count("measure") == 6
    # a second run finds everything in the records: nothing built, nothing timed
    with Measurer(
        workload, CpuTarget(), RecordDatabase(tmp_path / "records.jsonl"), runner_settings=FAST
    ) as again:
        resumed = again.measure(PICKED, [(1,), (9,)])
        assert resumed.measured == 0
        assert len((tmp_path / "records.jsonl").read_text().splitlines()) == len(lines)
        # one new shape: only that shape is measured, and only the pairs asked for
        extended = again.measure(PICKED, [(1,), (9,), (4,)])
        assert extended.measured == 3
        single = again.measure_pairs([(PICKED[1], (6,))])
        assert single.measured == 1 and single.records[(PICKED[1].key(), (6,))].ok
        assert "sampling" not in single.records[(PICKED[1].key(), (6,))].extra
        # call by call (the search's family duel): one call per input set a sample, after
        # an untimed call of the same build
        duel = again.measure_pairs([(PICKED[1], (7,)), (PICKED[2], (7,))], calls=9)
        for candidate in PICKED[1:]:
            record = duel.records[(candidate.key(), (7,))]
            assert record.ok and record.extra["sampling"] == "call-by-call"
            assert len(record.times) == 9
            assert record.extra["calls"] == 9 * FAST.measure.input_sets
            # the pair was timed side by side: each record names the other
            assert {PICKED[1].key(), PICKED[2].key()} <= set(record.extra["together"])
        # timed again side by side where one of the two has a record: both timed, marked
        pair = [(PICKED[1], (6,)), (PICKED[2], (6,))]
        retimed = again.measure_pairs(pair, calls=9, again=True)
        assert retimed.measured == 2
        first = single.records[(PICKED[1].key(), (6,))]
        for candidate, shape in pair:
            record = retimed.records[(candidate.key(), shape)]
            assert record.ok and record.extra["again"] and record is not first
            assert {PICKED[1].key(), PICKED[2].key()} <= set(record.extra["together"])
        # a plain call is answered by the first record, a second call again by these
        plain = again.measure_pairs([(PICKED[1], (6,))])
        assert plain.measured == 0 and "again" not in plain.records[(PICKED[1].key(), (6,))].extra
        assert again.measure_pairs(pair, calls=9, again=True).measured == 0
    with Measurer(
        workload, CpuTarget(), RecordDatabase(tmp_path / "records.jsonl"), runner_settings=FAST
    ) as resumed_again:  # and so is a resumed run's
        answered = resumed_again.measure_pairs(pair, calls=9, again=True)
        assert answered.measured == 0
        assert answered.records[(PICKED[2].key(), (6,))].extra["again"]
        # a pair with a record of its own, timed again beside a new partner: timed again
        other = resumed_again.measure_pairs([(PICKED[0], (6,)), (PICKED[1], (6,))], again=True)
        assert other.measured == 2


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a reaped child's pid no longer exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_one_measuring_process_at_a_time(tmp_path: Path) -> None:
    """A model tuning keeps a measurer per workload: the one measuring stops the others'
    process, so memory does not grow with the number of distinct workloads."""
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    stream = io.StringIO()
    with (
        Measurer(workload_of(DENSE), CpuTarget(), db, runner_settings=FAST, stream=stream) as a,
        Measurer(workload_of(SCORES), CpuTarget(), db, runner_settings=FAST, stream=stream) as b,
    ):
        a.measure(PICKED[:1], [(2,)])
        assert a._runner is not None
        (first,) = a._runner.processes().values()
        b.measure(PICKED[:1], [(2, 3)])
        assert a._runner is None and not _alive(first)  # stopped, not left running
        assert b._runner is not None
        again = a.measure(PICKED[:1], [(3,)])  # a restarts its own; b's stops
        assert again.records[(PICKED[0].key(), (3,))].ok
        assert b._runner is None and a._runner is not None


def test_batch_matmul_with_two_dynamic_dims(tmp_path: Path) -> None:
    workload = workload_of(SCORES)
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    with Measurer(workload, CpuTarget(), db, runner_settings=FAST, stream=io.StringIO()) as m:
        report = m.measure(PICKED, [(3, 5)])
    assert all(report.records[(c.key(), (3, 5))].ok for c in PICKED)
    assert report.records[(PICKED[1].key(), (3, 5))].space == (12, 3, 5, 64)


def test_failed_build_is_a_record_not_an_abort(tmp_path: Path) -> None:
    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    candidates = [DefaultCandidate(), BrokenCandidate(), PICKED[1]]
    with Measurer(workload, CpuTarget(), db, runner_settings=FAST, stream=io.StringIO()) as m:
        report = m.measure(candidates, [(2,)])
    assert "test:broken" in report.build_failures
    broken = report.records[("test:broken", (2,))]
    assert broken.failed and broken.kind == "build" and "does not parse" in (broken.error or "")
    assert report.records[(PICKED[1].key(), (2,))].ok  # the others were built and timed
    assert db.measured(workload.key, CpuTarget().key(), "test:broken", (2,), "config")


def test_builder_cache_hit_compiles_nothing(tmp_path: Path) -> None:
    workload = workload_of(DENSE)
    with Builder(CpuTarget()) as first:
        first.build(workload, PICKED)
    with Builder(CpuTarget()) as second:
        built = second.build(workload, PICKED)
    assert second.stats.compiles == 0 and second.stats.cached == 1
    assert all(b.ok and b.cached and b.seconds == 0.0 for b in built)


def test_cuda_without_gpu_builds_records_and_says_so(tmp_path: Path) -> None:
    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    stream = io.StringIO()
    target = CudaTarget.from_overrides({"arch": "sm_90"})
    candidates = [DefaultCandidate(), candidate_from_key("cuda:wg32x64:t4x4:k8:p")]
    with Measurer(
        workload, target, db, runner_settings=FAST, stream=stream, compile_only=True
    ) as m:
        report = m.measure(candidates, [(4,)])
    assert report.skipped_no_device
    assert "no CUDA GPU present: built 2 variant(s) for sm_90" in stream.getvalue()
    builds = [r for r in db.records(include_failures=True) if r.kind == "build"]
    assert {r.candidate_key for r in builds} == {c.key() for c in candidates}


def test_cli_measure_prints_the_table_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    argv = [
        "measure",
        str(source),
        "--shapes",
        "1,6",
        "--candidates",
        "3",
        "--db",
        str(tmp_path / "r.jsonl"),
        "--min-time",
        "0.003",
        "--rounds",
        "2",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "measured 6 pairs now, 0 from the records" in out
    assert "  1 (us)" in out and "  6 (us)" in out and "default" in out
    assert main(argv) == 0
    assert "measured 0 pairs now, 6 from the records" in capsys.readouterr().out


def test_cli_measure_shapes_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "scores.mlir"
    source.write_text(SCORES)
    code = main(["measure", str(source), "--shapes", "4x5x6", "--db", str(tmp_path / "r.jsonl")])
    assert code == 1
    assert (
        "--shapes: '4x5x6' gives 3 values, the workload has 2 dynamic dims"
        in capsys.readouterr().err
    )


def test_cli_measure_cuda_without_gpu_exits_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    code = main(
        [
            "measure",
            str(source),
            "--target",
            "cuda",
            "--arch",
            "sm_80",
            "--shapes",
            "8",
            "--candidates",
            "2",
            "--db",
            str(tmp_path / "r.jsonl"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert [line for line in captured.err.splitlines() if "no CUDA GPU" in line] == [
        "dcmlir: no CUDA GPU present: built 2 variant(s) for sm_80 and recorded the builds; nothing was timed"
    ]
    assert "built 2 of 2 variants; no GPU here to time them" in captured.out


def test_spread_selection_keeps_default_first() -> None:
    space = space_for(CpuTarget())
    picked = select_candidates(space, 5)
    assert isinstance(picked[0], DefaultCandidate) and len(picked) == 5
    assert len({c.key() for c in picked}) == 5
    assert all(isinstance(c, CpuCandidate) for c in picked[1:])


def test_td_route_builds_checks_and_times_through_the_same_loop(tmp_path: Path) -> None:
    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    with Measurer(
        workload,
        CpuTarget(),
        db,
        route=TransformLibraryRoute(),
        runner_settings=FAST,
        stream=io.StringIO(),
    ) as measurer:
        report = measurer.measure(PICKED, [(5,)])
    for candidate in PICKED:
        record = report.records[(candidate.key(), (5,))]
        assert record.ok and record.route == "td", record.error
        assert record.extra["max_error"] < 1e-4
    # the guard's verdicts are cached with the build: a second builder compiles nothing
    with Builder(CpuTarget(), TransformLibraryRoute()) as again:
        built = again.build(workload, PICKED)
    assert again.stats.compiles == 0 and all(b.ok and b.cached for b in built)


def test_a_dispatch_repeat_builds_repeated_modules_and_records_time_per_dispatch(
    tmp_path: Path,
) -> None:
    """R repeats each dispatch R times per call (the GPU's default, CUDA_DISPATCH_REPEAT):
    the module computes the same output, a sample is divided by R, the record says R, and
    a measurer with another R does not take those records. On a GPU each variant also warms
    up for at least CUDA_WARMUP."""
    from dcmlir.measure.loop import CUDA_DISPATCH_REPEAT, CUDA_WARMUP
    from dcmlir.testing import FakeRunner, fake_seconds

    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "records.jsonl", fsync=False)
    flags: list[tuple[str, ...]] = []

    class SeenBuilder(Builder):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            flags.append(self.extra_flags)

    with Measurer(
        workload, CpuTarget(), db, runner_settings=FAST, stream=io.StringIO(), dispatch_repeat=3
    ) as real:
        report = real.measure(PICKED[:2], [(5,)])
    for candidate in PICKED[:2]:
        record = report.records[(candidate.key(), (5,))]
        assert record.ok, record.error
        assert record.extra["max_error"] < 1e-4  # the repeated dispatch writes the same output
        assert record.extra["dispatch_repeat"] == 3
    with Measurer(
        workload,
        CpuTarget(),
        db,
        runner_settings=FAST,
        runner=FakeRunner,
        builder=SeenBuilder,
        stream=io.StringIO(),
        dispatch_repeat=4,
    ) as fake:
        found = fake.measure_pairs([(PICKED[1], (5,))])
    assert found.measured == 1  # R = 3's record is not R = 4's
    assert flags == [("--iree-hal-benchmark-dispatch-repeat-count=4",)]
    record = found.records[(PICKED[1].key(), (5,))]
    once = fake_seconds(PICKED[1].key(), ((5, 768), (768, 768)))  # as ShapeProblem holds them
    assert record.times == pytest.approx([once / 4] * FAST.measure.rounds)
    with Measurer(workload, CpuTarget(), db, runner=FakeRunner, builder=SeenBuilder) as plain:
        assert plain.dispatch_repeat == 1 and plain.measure_pairs([(PICKED[1], (5,))]).measured
    assert flags[-1] == ()  # no repeat on the CPU unless asked
    on_gpu = Measurer(workload, CudaTarget(), db, runner_settings=FAST)
    assert on_gpu.dispatch_repeat == CUDA_DISPATCH_REPEAT
    assert on_gpu.runner_settings.measure.warmup == CUDA_WARMUP  # clocks up before sampling
    with pytest.raises(ValueError, match="dispatch_repeat must be at least 1"):
        Measurer(workload, CpuTarget(), db, dispatch_repeat=0)


def test_a_shape_of_short_calls_is_recorded_as_timed_call_by_call(tmp_path: Path) -> None:
    """Tuning's rule (``call_by_call_below``): a shape whose calls are all short is sampled
    call by call, and its records say so."""
    import dataclasses

    short = RunnerSettings(
        dataclasses.replace(FAST.measure, call_by_call_below=1.0, short_rounds=4)
    )
    db = RecordDatabase(tmp_path / "records.jsonl", fsync=False)
    with Measurer(workload_of(DENSE), CpuTarget(), db, runner_settings=short) as measurer:
        report = measurer.measure_pairs([(PICKED[1], (3,))])
    record = report.records[(PICKED[1].key(), (3,))]
    assert record.ok and record.extra["sampling"] == "call-by-call" and len(record.times) == 4
