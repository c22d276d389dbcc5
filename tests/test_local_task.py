"""Tuning for ``local-task``: --threads, what the plan records, records kept per device."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import DENSE

import dcmlir
from dcmlir.dispatch import Plan
from dcmlir.driver import TuneError, TuneReport
from dcmlir.measure.host import device_threads
from dcmlir.testing import FakeRunner, small_cost_model
from dcmlir.tools.cli import main


def tune(tmp_path: Path, db: str, output: str, **options: object) -> TuneReport:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    return dcmlir.tune(
        source,
        dims=["1:6"],
        budget=12,
        db=tmp_path / db,
        output=tmp_path / output,
        level="input",
        stream=io.StringIO(),
        runner=FakeRunner,
        cost_model=small_cost_model(),
        **options,  # type: ignore[arg-type]
    )


def records(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_plan_records_the_device_and_threads_it_was_tuned_with(tmp_path: Path) -> None:
    report = tune(tmp_path, "r.jsonl", "plan.json", device="local-task", threads=1)
    plan = Plan.load(tmp_path / "plan.json")
    assert (plan.device, plan.threads) == ("local-task", 1)
    assert plan.target.threads == 1  # the cost model's P, and the records' target key
    assert plan == report.plan
    measures = [r for r in records(tmp_path / "r.jsonl") if r["kind"] == "measure"]
    assert measures and {r["extra"]["runner"] for r in measures} == {"local-task"}
    assert {r["target_key"] for r in measures} == {plan.target.key()}

    sync = tune(tmp_path, "s.jsonl", "sync.json")
    assert (sync.plan.device, sync.plan.threads) == ("local-sync", 1)


def test_local_sync_timings_are_not_reused_on_local_task(tmp_path: Path) -> None:
    """The two devices share the target (and its key): a local-task run on a local-sync
    run's records times everything again, and a second local-task run nothing."""
    sync = tune(tmp_path, "r.jsonl", "sync.json")
    task = tune(tmp_path, "r.jsonl", "task.json", device="local-task")
    # every pair the local-task search counted was timed by it (none came from the
    # local-sync records; the two searches may stop after different counts)
    assert sync.measured_now > 0 and task.measured_now == task.measurements > 0
    again = tune(tmp_path, "r.jsonl", "task2.json", device="local-task")
    assert again.measured_now == 0
    assert (tmp_path / "task2.json").read_text() == (tmp_path / "task.json").read_text()


def test_threads_is_refused_where_there_is_no_thread_pool(tmp_path: Path) -> None:
    with pytest.raises(TuneError, match="--threads applies to --device local-task"):
        tune(tmp_path, "r.jsonl", "plan.json", threads=2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "2"], "--threads applies to --device local-task"),
        (["--device", "local-task", "--threads", "0"], "'0' must be at least 1"),
        (["--device", "local-task", "--threads", "two"], "'two' is not an integer"),
    ],
)
def test_threads_option_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    code = main(["tune", str(source), "--dims", "1:6", "--db", str(tmp_path / "r.jsonl"), *argv])
    err = capsys.readouterr().err
    assert code != 0 and message in err
    assert not (tmp_path / "r.jsonl").exists()  # refused before any work


def test_a_plan_names_a_device_mismatch() -> None:
    plan = Plan.from_json({**_empty_plan_json(), "device": "local-task", "threads": 4}, "plan.json")
    assert plan.device_mismatch("local-task", 4) is None
    found = plan.device_mismatch("local-task", 2)
    assert found is not None and "local-task with 4 thread(s)" in found
    assert "--threads 2" in found
    assert "--device local-sync" in (plan.device_mismatch("local-sync", 1) or "")
    old = Plan.from_json(_empty_plan_json(), "plan.json")  # written before it was recorded
    assert old.device is None and old.device_mismatch("local-sync", 1) is None
    with pytest.raises(ValueError, match="threads"):
        Plan.from_json({**_empty_plan_json(), "threads": 0}, "plan.json")


def _empty_plan_json() -> dict:  # type: ignore[type-arg]
    from dcmlir.target import CpuTarget

    found = Plan(CpuTarget(), "m.mlir", ()).to_json()
    assert "device" not in found and "threads" not in found
    return found


def test_compile_warns_when_a_local_task_plan_has_other_threads_than_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tune(tmp_path, "r.jsonl", "plan.json", device="local-task")
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["threads"] == device_threads("local-task")
    code = main(
        [
            "compile",
            str(tmp_path / "dense.mlir"),
            "--plan",
            str(tmp_path / "plan.json"),
            "-o",
            str(tmp_path / "same.vmfb"),
        ]
    )
    assert code == 0 and "warning" not in capsys.readouterr().err
    other = device_threads("local-task") + 7
    (tmp_path / "other.json").write_text(json.dumps({**plan, "threads": other}))
    code = main(
        [
            "compile",
            str(tmp_path / "dense.mlir"),
            "--plan",
            str(tmp_path / "other.json"),
            "-o",
            str(tmp_path / "other.vmfb"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0
    assert f"tuned on local-task with {other} threads" in err
    assert f"--task_topology_max_group_count={other}" in err


def test_a_gpu_plan_says_cuda_whatever_device_was_given() -> None:
    from dcmlir.driver.tuning import _timed_on
    from dcmlir.target import CpuTarget, target_from_name

    gpu = target_from_name("cuda", "sm_80")
    assert _timed_on(gpu, "local-sync", None) == {"device": "cuda", "threads": None}
    assert _timed_on(CpuTarget(), "local-task", 3) == {"device": "local-task", "threads": 3}
    assert _timed_on(CpuTarget(), "local-sync", None) == {"device": "local-sync", "threads": 1}
