"""Tuning-time failures: each is one clear line or a failure record, and no record is lost.

- a records file with corrupt, truncated or newer-format lines, or lines of another IREE
  version: reported in one line naming file and lines, skipped, kept byte for byte;
- ``iree-compile`` crashing, hanging or miscompiling on one variant (a fake compiler in
  front of the real one, found through ``IREE_TOOL_PATH``): a failed record for that
  variant only, the rest of its chunk built and timed, the variant never chosen;
- a full disk while records are appended: one line naming the file and the fix, exit 1,
  every record written before intact, and the next run resumes from them;
- an unusable ``--db`` or ``-o``: one line, before any tuning.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DENSE, dense_with_range
from test_measurer import FAST, workload_of

import dcmlir
from dcmlir.build.routes import ConfigRoute
from dcmlir.codegen.kernel import kernel_module_text
from dcmlir.cost_model import TrivialCostModel
from dcmlir.files import temporary_path
from dcmlir.measure.loop import Measurer, MeasureReport
from dcmlir.records import Record, RecordDatabase
from dcmlir.search.measured_pairs import wrong_results
from dcmlir.search.shape_generic import SearchSettings, ShapeGenericSearch
from dcmlir.space import (
    Candidate,
    CpuCandidate,
    DefaultCandidate,
    candidate_from_key,
    space_for,
    workload_space,
)
from dcmlir.target import CpuTarget
from dcmlir.testing import FakeMeasurer
from dcmlir.tools.cli import main

DRIVER = Path(__file__).with_name("tune_driver.py")
TUNE = ["--dims", "1:6", "--level", "input", "--min-time", "0.002", "--rounds", "2"]
QUICK = {"dims": ["1:6"], "level": "input", "min_time": 0.002, "rounds": 2}
CRASHES = candidate_from_key("cpu:wg8x128:v1x16:k8")
MISCOMPILED = candidate_from_key("cpu:wg32x32:v8x16:k4")
HANGS = candidate_from_key("cpu:wg16x64:v4x32:k8")
HEALTHY = candidate_from_key("cpu:wg8x128:v2x32:k4")

FAKE_COMPILER = r'''#!{python}
"""iree-compile, except for the variants the test marks: crash, hang, or compute wrong numbers."""
import os, re, resource, signal, subprocess, sys, time

data = sys.stdin.buffer.read()
text = data.decode()


def marked(name):
    marker = os.environ.get(name)
    return marker if marker and marker in text else None


if marked("DCMLIR_FAKE_CRASH"):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file left behind
    os.kill(os.getpid(), signal.SIGSEGV)
if marked("DCMLIR_FAKE_HANG"):
    time.sleep(3600)
wrong = marked("DCMLIR_FAKE_WRONG")
if wrong:  # the function whose op uses that config: its output starts at 1000, not 0
    config = re.search(r"^#(\w+) = " + re.escape(wrong), text, re.M).group(1)
    info = re.search(
        r"^#(\w+) = #iree_codegen\.compilation_info<lowering_config = #" + config + r"\b",
        text,
        re.M,
    ).group(1)
    functions = text.split("  func.func @")
    for index, function in enumerate(functions):
        if re.search(r"compilation_info = #" + info + r"\b", function):
            functions[index] = function.replace(
                "arith.constant 0.000000e+00 : f32", "arith.constant 1.000000e+03 : f32"
            )
    data = "  func.func @".join(functions).encode()
real = os.environ["DCMLIR_REAL_IREE_COMPILE"]
sys.exit(subprocess.run([real, *sys.argv[1:]], input=data).returncode)
'''


def lowering_config(candidate: Candidate) -> str:
    """The candidate's lowering config as it is printed in a kernel module (its marker)."""
    workload = workload_of(DENSE)
    text = kernel_module_text(workload, [ConfigRoute().variant(workload, candidate, "v")])
    found = re.search(r"^#\w+ = (#iree_cpu\.lowering_config<[^>]*>)$", text, re.M)
    assert found, text
    return found.group(1)


@pytest.fixture
def fake_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Put the fake iree-compile first; returns a function that marks candidates.

    Its own build cache: a miscompiled module must never reach a cache other tests use.
    """
    from iree.compiler.tools.binaries import find_tool

    real = find_tool("iree-compile")
    tools = tmp_path / "fake-tools"
    tools.mkdir()
    script = tools / "iree-compile"
    script.write_text(FAKE_COMPILER.replace("{python}", sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("DCMLIR_REAL_IREE_COMPILE", real)
    monkeypatch.setenv("IREE_TOOL_PATH", str(tools))
    monkeypatch.setenv("DCMLIR_CACHE_DIR", str(tmp_path / "fake-cache"))

    def mark(how: str, candidate: Candidate) -> None:
        monkeypatch.setenv(f"DCMLIR_FAKE_{how.upper()}", lowering_config(candidate))

    return mark


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`dcmlir` as a user runs it: its own process, its stderr as a terminal would show."""
    return subprocess.run(
        [sys.executable, str(DRIVER), *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )


def lines_of(path: Path) -> list[Record]:
    text = path.read_text()
    assert text.endswith("\n")
    return [Record.from_line(line) for line in text.splitlines()]


# --- the records file ------------------------------------------------------------------------


def test_bad_record_lines_are_reported_in_one_line_skipped_and_kept(tmp_path: Path) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    db = tmp_path / "records.jsonl"
    plan = str(tmp_path / "plan.json")
    dcmlir.tune(source, **QUICK, budget=4, db=db, output=plan, stream=io.StringIO())
    good = db.read_text().splitlines()
    measure = next(line for line in good if '"kind":"measure"' in line)
    other = json.loads(measure)
    other["iree_version"] = "3.12.0 (0123456789abcdef0123456789abcdef01234567)"
    newer = {**json.loads(measure), "format": 99}
    lines = [
        good[0],
        "this is not a record",  # line 2
        *good[1:3],
        json.dumps(other),  # line 5: another compiler's timing
        json.dumps(newer),  # line 6
        *good[3:],
    ]
    cut = good[-1][: len(good[-1]) // 2]  # a writer died mid-line, no newline after it
    content = "\n".join(lines) + "\n" + cut
    db.write_text(content)
    second = run_cli("tune", str(source), *TUNE, "--budget", "6", "--db", str(db), "-o", plan)
    assert second.returncode == 0, second.stderr
    warnings = [line for line in second.stderr.splitlines() if "warning" in line]
    unreadable = [line for line in warnings if "unreadable" in line]
    assert len(unreadable) == 1, second.stderr  # one line for all of them
    assert f"skipped 3 unreadable record line(s): {db}:2: not JSON" in unreadable[0]
    assert f"{db}:6: format 99 is newer than this dcmlir reads (1)" in unreadable[0]
    assert f"{db}:{len(lines) + 1}: not JSON" in unreadable[0]
    assert "(truncated last line: no newline at the end)" in unreadable[0]
    versions = [line for line in warnings if "another IREE version" in line]
    assert len(versions) == 1, second.stderr
    assert f"{db}: 1 record(s) of another IREE version (3.12.0 (0123456789abcdef" in versions[0]
    assert "line 5) kept but not used" in versions[0]
    after = db.read_text()
    assert after.startswith(content)  # the user's lines are kept byte for byte
    appended = after[len(content) :]
    assert appended.startswith("\n")  # the cut line stays a line of its own
    assert all(Record.from_line(line) for line in appended.splitlines()[1:])
    assert "Traceback" not in second.stderr


def test_unusable_db_or_output_is_one_line_before_any_tuning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    (tmp_path / "dir.jsonl").mkdir()
    cases = {
        ("--db", str(tmp_path / "dir.jsonl")): f"cannot read {tmp_path / 'dir.jsonl'}: not a "
        "regular file",
        ("--db", "/dev/full"): "cannot read /dev/full: not a regular file",  # endless zeros
        ("-o", str(tmp_path / "missing" / "plan.json")): f"-o {tmp_path}/missing/plan.json: "
        f"directory {tmp_path}/missing does not exist",
        ("-o", str(tmp_path)): f"-o {tmp_path}: is a directory; give a file name",
    }
    for option, message in cases.items():
        start = time.perf_counter()
        code = main(["tune", str(source), *TUNE, "--db", str(tmp_path / "r.jsonl"), *option])
        err = capsys.readouterr().err
        assert code == 1
        assert err.splitlines()[-1].startswith(f"dcmlir: error: {message}"), err
        assert time.perf_counter() - start < 30  # refused up front, nothing tuned
        assert not (tmp_path / "r.jsonl").exists()


def test_a_plan_that_cannot_be_written_is_one_line_and_the_records_stay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan's file is on a full device (a link to /dev/full, which takes the open and
    fails the write with ENOSPC): it passes the up-front check and fails at the end."""
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    db, plan = tmp_path / "r.jsonl", tmp_path / "plan.json"
    plan.symlink_to("/dev/full")
    args = ["tune", str(source), *TUNE, "--budget", "4", "--db", str(db), "-o", str(plan)]
    assert main(args) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"dcmlir: error: cannot write the plan {plan}: No space left on device; the records "
        f"in {db} are kept: run again (with another -o) to write it without measuring again"
    )
    assert sum(r.kind == "measure" for r in lines_of(db)) == 4


def test_a_full_disk_keeps_the_previous_plan_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills while the new plan is written: the previous plan stays as it was
    (before, it was left as 4096 bytes of invalid JSON)."""
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    db, plan = tmp_path / "r.jsonl", tmp_path / "plan.json"
    args = ["tune", str(source), *TUNE, "--budget", "4", "--db", str(db), "-o", str(plan)]
    assert main(args) == 0
    good = plan.read_bytes()
    temporary_path(plan).symlink_to("/dev/full")  # where the rewrite is staged
    assert main([*args, "--max-kernels", "1"]) == 1
    assert "No space left on device" in capsys.readouterr().err.splitlines()[-1]
    assert plan.read_bytes() == good
    assert not temporary_path(plan).exists() and not temporary_path(plan).is_symlink()


def test_python_m_cli_errors_are_one_line_not_a_traceback(tmp_path: Path) -> None:
    """`python -m dcmlir.tools.cli`: its __main__ module had a CliError class of its own, so
    the errors of every command module (which raise dcmlir.tools.cli.CliError) escaped."""
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    command = [sys.executable, "-m", "dcmlir.tools.cli", "tune", str(source), *TUNE]
    process = subprocess.run(
        [*command, "--db", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert process.returncode == 1
    assert process.stderr == (
        f"dcmlir: error: cannot read {tmp_path}: not a regular file (records live in a file, "
        "e.g. records.jsonl)\n"
    )


def test_disk_full_mid_tuning_stops_in_one_line_and_the_next_run_resumes(tmp_path: Path) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    db = tmp_path / "records.jsonl"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), DCMLIR_TEST_FULL_DISK_AFTER="8")
    args = ["tune", str(source), *TUNE, "--budget", "12", "--db", str(db)]
    full = run_cli(*args, "-o", str(tmp_path / "plan.json"), env=env)
    assert full.returncode == 1
    last = full.stderr.splitlines()[-1]
    assert re.fullmatch(
        rf"dcmlir: error: cannot append a record to {db}: short write, \d+ of \d+ bytes \(is the "
        r"disk full\?\); free some space \(or keep the records on another disk\) and run again: "
        r"every record written so far is kept and reused",
        last,
    ), last
    assert "Traceback" not in full.stderr
    kept = lines_of(db)  # the half line was rolled back: 8 whole records, nothing else
    assert len(kept) == 8
    assert not (tmp_path / "plan.json").exists()
    assert list(scratch.iterdir()) == []  # a clean exit removes its scratch
    env.pop("DCMLIR_TEST_FULL_DISK_AFTER")
    resumed = run_cli(*args, "-o", str(tmp_path / "plan.json"), env=env)
    assert resumed.returncode == 0, resumed.stderr
    records = lines_of(db)
    assert records[:8] == kept
    pairs = [(r.candidate_key, r.shape) for r in records if r.kind == "measure"]
    assert len(pairs) == len(set(pairs)) and len(pairs) <= 12
    new = int(re.search(r"\((\d+) new\)", resumed.stdout).group(1))  # type: ignore[union-attr]
    assert new == sum(r.kind == "measure" for r in records[8:])


# --- iree-compile failing on one variant -----------------------------------------------------


def test_a_crash_and_a_miscompile_fail_their_own_variant_only(
    tmp_path: Path, fake_compiler
) -> None:  # type: ignore[no-untyped-def]
    fake_compiler("crash", CRASHES)
    fake_compiler("wrong", MISCOMPILED)
    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    candidates = [DefaultCandidate(), CRASHES, MISCOMPILED, HEALTHY]
    with Measurer(
        workload, CpuTarget(), db, runner_settings=FAST, stream=io.StringIO()
    ) as measurer:
        report = measurer.measure(candidates, [(2,), (5,)])
    crash = report.records[(CRASHES.key(), (2,))]
    assert crash.kind == "build" and crash.failed
    assert (crash.error or "").startswith("build: iree-compile crashed (SIGSEGV)")
    for shape in [(2,), (5,)]:
        wrong = report.records[(MISCOMPILED.key(), shape)]
        assert wrong.kind == "measure" and wrong_results(wrong)
        assert (wrong.error or "").startswith("check: MismatchError: relative error")
        for candidate in (DefaultCandidate(), HEALTHY):  # the rest of the chunk built and ran
            assert report.records[(candidate.key(), shape)].ok
    builds = {r.candidate_key: r for r in db.records(kind="build", include_failures=True)}
    assert set(builds) == {c.key() for c in candidates}
    assert [key for key, r in builds.items() if r.failed] == [CRASHES.key()]
    assert set(report.build_failures) == {CRASHES.key()}


def test_a_hanging_compile_hits_the_time_limit_and_the_rest_builds(
    tmp_path: Path, fake_compiler
) -> None:  # type: ignore[no-untyped-def]
    fake_compiler("hang", HANGS)
    workload = workload_of(DENSE)
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    start = time.perf_counter()
    with Measurer(
        workload,
        CpuTarget(),
        db,
        runner_settings=FAST,
        build_timeout=5.0,
        stream=io.StringIO(),
    ) as measurer:
        report = measurer.measure([HANGS, HEALTHY], [(3,)])
    hang = report.records[(HANGS.key(), (3,))]
    assert hang.kind == "build" and hang.error == "build: iree-compile ran past the 5 s time limit"
    assert report.records[(HEALTHY.key(), (3,))].ok
    # the chunk [hang, healthy, default] and the half holding the hang: two limits, no more
    assert time.perf_counter() - start < 60
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "fake-tools")], capture_output=True, text=True
    )
    assert leftovers.stdout == ""  # the hung compiler was killed, not left running


BROKEN_BUDGET = 20  # a quarter of it is first measurements: IREE's builds and 3 configs


def test_tune_never_chooses_a_crashing_or_miscompiled_candidate(
    tmp_path: Path, fake_compiler
) -> None:  # type: ignore[no-untyped-def]
    """End to end: two of the candidates the search measures first are broken; the tuning
    finishes, records why, and the plan has neither."""
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    workload = dense_with_range(1, 6)
    probe = ShapeGenericSearch(
        workload,
        None,  # type: ignore[arg-type]
        TrivialCostModel(workload, CpuTarget()),
        workload_space(CpuTarget(), workload),
        SearchSettings(budget=BROKEN_BUDGET),
    )
    # the tuned kernels the search measures first (the fake compiler breaks configs)
    first = [c for c, _ in probe.first_pairs() if isinstance(c, CpuCandidate)]
    crashing, miscompiled = first[0], first[1]
    fake_compiler("crash", crashing)
    fake_compiler("wrong", miscompiled)
    report = dcmlir.tune(
        source,
        **QUICK,
        budget=BROKEN_BUDGET,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=io.StringIO(),
    )
    records = RecordDatabase(tmp_path / "r.jsonl").load()
    failed = {r.candidate_key: r.error or "" for r in records if r.failed}
    assert failed[crashing.key()].startswith("build: iree-compile crashed (SIGSEGV)")
    assert "check: MismatchError" in failed[miscompiled.key()]
    chosen = {kernel.candidate_key for kernel in report.plan.workloads[0].kernels}
    assert chosen and not chosen & {crashing.key(), miscompiled.key()}


def test_search_never_chooses_a_kernel_that_computed_wrong_numbers_once(tmp_path: Path) -> None:
    """Synthetic machine: the fastest candidate everywhere runs right on the first shape it
    is measured on and wrong on the second; it must then be chosen nowhere, not only not
    there (a kernel that failed on some shapes only would otherwise stay in the running)."""
    workload = dense_with_range(1, 16)
    target = CpuTarget()

    class OneWrong(FakeMeasurer):
        culprit: str | None = None
        culprit_shapes: list[tuple[int, ...]]  # where it was measured, in order

        def measure_pairs(self, pairs, calls=None, again=False):  # type: ignore[no-untyped-def]
            report = MeasureReport(self.workload, [c for c, _ in pairs], [s for _, s in pairs])
            for candidate, shape in pairs:
                if candidate.key() == self.culprit:
                    self.culprit_shapes.append(shape)
                if candidate.key() == self.culprit and len(self.culprit_shapes) == 2:
                    record = Record.failure(
                        workload=self.workload,
                        target=target,
                        candidate=candidate,
                        route="config",
                        dims={0: shape[0]},
                        error="check: MismatchError: relative error 9.1 exceeds 0.001",
                    )
                else:
                    seconds = self.time(candidate, shape)
                    if candidate.key() == self.culprit:
                        seconds /= 100  # by far the best wherever it does run
                    record = Record.measurement(
                        workload=self.workload,
                        target=target,
                        candidate=candidate,
                        route="config",
                        dims={0: shape[0]},
                        times=[seconds],
                    )
                self.db.append(record)
                report.records[(candidate.key(), shape)] = record
                report.measured += 1
            return report

    def search(culprit: str | None) -> tuple[list[str], dict[tuple[str, tuple[int, ...]], float]]:
        measurer = OneWrong(workload, RecordDatabase(tmp_path / f"{culprit}.jsonl", fsync=False))
        measurer.culprit, measurer.culprit_shapes = culprit, []
        result = ShapeGenericSearch(
            workload,
            measurer,  # type: ignore[arg-type]
            TrivialCostModel(workload, target, seed=0),
            space_for(target),
            SearchSettings(budget=60, max_kernels=4, verify_batch=16),
            stream=io.StringIO(),
        ).run()
        return [k.key() for k in result.kernels], result.measured

    kernels, _ = search(None)
    culprit = kernels[0]
    kernels, measured = search(culprit)
    runs = sorted(seconds for (key, _), seconds in measured.items() if key == culprit)
    assert len(runs) >= 2 and math.isinf(runs[-1]) and math.isfinite(runs[0])  # right, then wrong
    assert culprit not in kernels
