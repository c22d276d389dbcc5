"""Several threads: each thread pool measured in its own process, sampled when the others are quiet."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_runner import FAST, dense_workload, problem

from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import KernelVariant, kernel_module_text
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.supervised import QUIET_PATIENCE, cpu_seconds, runnable, wait_quiet
from dcmlir.measure.variants import HostLibrary, ModuleFunction
from dcmlir.workload import Workload


@pytest.fixture(scope="module")
def dense_module(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workload, str]:
    """The dense workload and a module file with its IREE default build as ``v_default``."""
    workload = dense_workload()
    path = tmp_path_factory.mktemp("vmfb") / "dense.vmfb"
    path.write_bytes(
        build(kernel_module_text(workload, [KernelVariant("v_default")]), "llvm-cpu").vmfb
    )
    return workload, str(path)


def iree_workers(pid: int) -> int:
    """Threads of process ``pid`` that are IREE ``local-task`` workers."""
    tasks = Path(f"/proc/{pid}/task")
    return sum((t / "comm").read_text().startswith("iree-worker") for t in tasks.iterdir())


def test_each_thread_pool_is_timed_in_its_own_process(dense_module: tuple[Workload, str]) -> None:
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        HostLibrary("numpy", "numpy", workload.einsum()),
    ]
    settings = RunnerSettings(FAST, driver="local-task", threads=2)
    assert settings.isolated
    with Runner(settings) as runner:
        result = runner.measure_shape(variants, problem(workload, 7), baseline="default")
        pools = runner.processes()
        workers = iree_workers(pools["iree"])
    assert set(pools) == {"iree", "numpy"} and pools["iree"] != pools["numpy"]
    assert workers == 2
    for timing in result.timings.values():
        assert timing.ok, timing.error
        assert len(timing.samples) == FAST.rounds
        # sampled once the other process was quiet: it took (almost) no CPU meanwhile
        assert 0.0 <= timing.interference < 0.5, timing.interference
    assert result.baseline_before is not None and result.baseline_after is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_local_task_runs_the_threads_it_is_given(
    dense_module: tuple[Workload, str], threads: int
) -> None:
    workload, path = dense_module
    settings = RunnerSettings(FAST, driver="local-task", threads=threads)
    with Runner(settings) as runner:
        result = runner.measure_shape(
            [ModuleFunction("default", path, "v_default")], problem(workload, 3)
        )
        (pid,) = runner.processes().values()
        assert iree_workers(pid) == threads
    assert result["default"].ok


@pytest.mark.parametrize("threads", [1, 2])
def test_short_calls_on_several_threads_are_sampled_back_to_back_too(
    dense_module: tuple[Workload, str], threads: int
) -> None:
    """On two threads a short call is sampled call by call and back to back, and each build
    keeps the slower of the two; on one thread, call by call only."""
    workload, path = dense_module
    short = dataclasses.replace(FAST, call_by_call_below=1.0, short_rounds=4)
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("again", path, "v_default"),
    ]
    with Runner(RunnerSettings(short, driver="local-task", threads=threads)) as runner:
        result = runner.measure_shape(variants, problem(workload, 3))
    assert result.call_by_call
    assert set(result.back_to_back) == (set() if threads == 1 else {"default", "again"})
    for name, timing in result.timings.items():
        assert timing.ok, timing.error
        sustained = name in result.sustained
        assert len(timing.samples) == (FAST.rounds if sustained else short.short_rounds)
        if name in result.back_to_back:
            assert timing.median >= result.back_to_back[name]  # the slower sampling


def test_one_thread_keeps_one_process(dense_module: tuple[Workload, str]) -> None:
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        HostLibrary("numpy", "numpy", workload.einsum()),
    ]
    with Runner(RunnerSettings(FAST)) as runner:
        result = runner.measure_shape(variants, problem(workload, 2))
        assert list(runner.processes()) == ["shared"]
    assert all(t.ok and t.interference == 0.0 for t in result.timings.values())


def test_a_pool_that_cannot_start_fails_only_its_own_variants(
    dense_module: tuple[Workload, str],
) -> None:
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        HostLibrary("nolib", "no-such-library", workload.einsum()),
    ]
    with Runner(RunnerSettings(FAST, driver="local-task", threads=2)) as runner:
        result = runner.measure_shape(variants, problem(workload, 2))
    assert result["default"].ok
    assert result["nolib"].error is not None and "no-such-library" in result["nolib"].error


def test_waiting_for_quiet_outlasts_a_spinning_process() -> None:
    spin = "import time\nt = time.time()\nwhile time.time() - t < 0.6: pass\ntime.sleep(60)"
    process = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)  # started, spinning
        before = cpu_seconds([process.pid])
        assert before is not None
        waited = wait_quiet([process.pid])
        spent = cpu_seconds([process.pid])
        assert spent is not None and spent > before  # it computed while we waited
        assert waited >= 0.1, waited  # not quiet at once: it spins for 0.6 s from its start
        time.sleep(0.05)
        assert (cpu_seconds([process.pid]) or 0.0) - spent < 0.02  # and it is quiet now
    finally:
        process.kill()
        process.wait()


def _spinner(nice: int) -> subprocess.Popen[bytes]:
    """A process spinning forever on core 0 at ``nice``."""

    def pin() -> None:
        os.sched_setaffinity(0, {0})
        os.nice(nice)

    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)


def test_a_starved_spinning_process_is_not_quiet() -> None:
    """Beside a spinner at full priority on its core, a niced spinner gets a few percent of
    the core: under the CPU share that counts as quiet, yet it still computes whenever it
    gets the core. Waiting for quiet must not end on it (it did before the runnable check)."""
    starved, competitor = _spinner(19), _spinner(0)
    try:
        time.sleep(0.2)
        assert runnable([starved.pid])
        assert wait_quiet([starved.pid]) >= QUIET_PATIENCE
    finally:
        for process in (starved, competitor):
            process.kill()
            process.wait()


def test_a_sleeping_process_is_not_runnable() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        assert not runnable([process.pid])
        assert wait_quiet([process.pid]) < QUIET_PATIENCE
    finally:
        process.kill()
        process.wait()


def test_cpu_seconds_of_a_process_that_is_gone_is_nothing() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert cpu_seconds([process.pid]) == 0.0


def test_a_reference_that_fails_is_every_variant_setup_error(
    dense_module: tuple[Workload, str],
) -> None:
    """The parent computes a model's reference: when it fails, measure_shape records it as
    every variant's setup error, and measure_shapes (its warm-up first) raises it."""
    workload, path = dense_module

    def broken(arrays: object) -> list[object]:
        raise RuntimeError("the reference failed")

    shapes = problem(workload, 3)
    failing = ShapeProblem(shapes.input_shapes, shapes.dtypes, reference=broken)
    variants = [ModuleFunction("default", path, "v_default")]
    for settings in (RunnerSettings(FAST), RunnerSettings(FAST, driver="local-task", threads=2)):
        with Runner(settings) as runner:
            result = runner.measure_shape(variants, failing)
            assert result["default"].error == "setup: the reference failed"
            with pytest.raises(RuntimeError, match="the reference failed"):
                runner.measure_shapes(variants, {(3,): failing})
