"""Building with IREE (cache, errors, targets) and measuring (timer, checks, interleaving).

Every build here is a real ``iree-compile`` run and every timing a real call;
the settings are tiny so the file stays fast on two cores.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from dcmlir.build.batch import COMPILE_FLOOR_S, Builder
from dcmlir.build.compiler import (
    BuildCache,
    BuildError,
    build,
    compile_module,
    default_cache_dir,
    remove_stale_scratch,
    stale_scratch,
)
from dcmlir.ir.iree import CompilerRun, RuntimeFailure, load_function
from dcmlir.measure.host import HostCall
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.timing import (
    MeasureSettings,
    MismatchError,
    Timer,
    check_outputs,
    interleaved,
    random_inputs,
    relative_error,
)
from dcmlir.measure.variants import HostLibrary, HostModel, ModuleFunction

TINY = MeasureSettings(min_time=0.002, rounds=3, input_sets=2, warmup=0.002)
BROKEN = """func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %0 = arith.addf %a, %b : tensor<?xf32>
  return %0 : tensor<?xf32>
}
"""


def example(name: str) -> str:
    return (resources.files("dcmlir") / "examples" / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def dense_vmfb(cache_dir: Path) -> bytes:
    return compile_module(example("bert_dense.mlir"))


# --- build ---------------------------------------------------------------------------------


def test_cache_dir_follows_environment(cache_dir: Path) -> None:
    assert default_cache_dir() == cache_dir


@pytest.mark.parametrize("rows", [1, 5, 128])
def test_dense_example_matches_numpy(dense_vmfb: bytes, rows: int) -> None:
    dense = load_function(dense_vmfb, "dense")
    x, w = random_inputs([(rows, 768), (768, 768)], sets=1, seed=rows)[0]
    (y,) = dense(x, w)
    assert y.shape == (rows, 768)
    expected = x.astype(np.float64) @ w.astype(np.float64)
    assert relative_error(y, expected) <= 1e-4


def test_attention_example_matches_numpy() -> None:
    attention = load_function(compile_module(example("bert_attention.mlir")), "attention")
    for length in (1, 7):
        q, kt, v = random_inputs([(12, length, 64), (12, 64, length), (12, length, 64)], sets=1)[0]
        scores = (q.astype(np.float64) @ kt) / 8.0
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        (context,) = attention(q, kt, v)
        assert relative_error(context, probs @ v) <= 1e-4


def test_second_build_is_a_cache_hit_and_compiles_nothing(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    text = example("bert_dense.mlir")
    first = build(text, cache=cache)
    assert not first.cached and first.seconds > 0
    assert (cache.misses, cache.hits) == (1, 0)

    def no_compiling(*_args: object) -> None:
        raise AssertionError("iree-compile ran on a cache hit")

    second = build(text, cache=cache, compiler=no_compiling)
    assert second.cached and second.vmfb == first.vmfb and second.key == first.key
    assert (cache.misses, cache.hits) == (1, 1)
    assert [p.name for p in cache.entries()] == [f"{first.key}.vmfb"]
    # Anything that changes the output changes the key: here one more flag.
    with pytest.raises(AssertionError, match="cache hit"):
        build(text, extra_flags=("--iree-opt-level=O2",), cache=cache, compiler=no_compiling)


def test_unwritable_cache_costs_time_not_the_build(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    cache = BuildCache(blocker)
    result = build(example("bert_dense.mlir"), cache=cache)
    assert result.vmfb[:2] == b"PK" and not result.cached
    assert cache.entries() == []


def test_clear_empties_the_cache(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    build(example("bert_dense.mlir"), cache=cache)
    assert len(cache.entries()) == 1
    assert cache.clear() == 1
    assert cache.entries() == []
    assert not build(example("bert_dense.mlir"), cache=cache).cached


def test_clear_removes_td_libraries_and_a_killed_writers_temp_files(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    build(example("bert_dense.mlir"), cache=cache)
    (key,) = [path.stem for path in cache.entries()]
    cache.td_dir.mkdir()
    (cache.td_dir / "0123456789abcdef01234567.mlir").write_text("module {}")
    (cache.builds_dir / f".{key}.vmfb.x1y2z3").write_bytes(b"half a modu")  # kill -9 mid-store
    assert cache.size_bytes() == sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert cache.clear() == 1
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [] and cache.size_bytes() == 0


def test_clear_removes_only_what_dcmlir_wrote(tmp_path: Path) -> None:
    """A cache directory pointed at a folder with the user's files keeps them."""
    cache = BuildCache(tmp_path)
    build(example("bert_dense.mlir"), cache=cache)
    ours = cache.entries()
    cache.td_dir.mkdir()
    theirs = [
        tmp_path / "notes.txt",
        cache.builds_dir / "model.vmfb",
        cache.builds_dir / "README.log",
        cache.td_dir / "schedule.mlir",
    ]
    for path in theirs:
        path.write_text("the user's")
    assert cache.entries() == ours and len(ours) == 1
    assert cache.clear() == 1
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(theirs)


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_only_scratch_of_dead_processes_is_stale(tmp_path: Path) -> None:
    alive = subprocess.Popen(["sleep", "60"])
    try:
        dead = dead_pid()
        stale = tmp_path / f"dcmlir-variants-{dead}-k3j2h1"
        (stale / "td-dumps-x").mkdir(parents=True)
        (stale / "abc.vmfb").write_bytes(b"x" * 1000)
        kept = [
            tmp_path / f"dcmlir-build-{alive.pid}-a1b2c3",  # a live run's
            tmp_path / f"dcmlir-variants-{os.getpid()}-q9w8e7",  # this process's own
            tmp_path / "dcmlir-variants-oldstyle",  # no process id: nobody can tell
            tmp_path / f"other-{dead}-abc",  # not ours
        ]
        for path in kept:
            path.mkdir()
        (tmp_path / f"dcmlir-td-{dead}-file").write_text("a file, not a scratch directory")
        assert stale_scratch(tmp_path) == [stale]
        assert remove_stale_scratch(tmp_path) == (1, 1000)
        assert not stale.exists() and all(path.exists() for path in kept)
        assert stale_scratch(tmp_path) == []
    finally:
        alive.kill()
        alive.wait()


def test_cache_command_reports_and_clears_scratch_of_killed_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dcmlir.tools.cli import main

    monkeypatch.setenv("DCMLIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / f"dcmlir-variants-{dead_pid()}-zz11yy"
    left.mkdir()
    (left / "v.vmfb").write_bytes(b"x" * 2500)
    assert main(["cache"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1] == "0 cached module(s), 0 B"
    assert shown[2] == (
        f"1 temporary dir(s) of killed runs in {tmp_path}, 2.5 KB (dcmlir cache --clear removes"
        " them)"
    )
    assert main(["cache", "--clear"]) == 0
    cleared = capsys.readouterr().out.splitlines()
    assert cleared[1] == f"removed 1 temporary dir(s) of killed runs (2.5 KB) from {tmp_path}"
    assert not left.exists()
    assert main(["cache"]) == 0 and len(capsys.readouterr().out.splitlines()) == 2


def test_iree_compile_temp_files_stay_in_a_scratch_dir_that_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iree-compile links through NAME-XXXXXX.o/.so in $TMPDIR; killed mid-link it leaves
    them. It gets its own dcmlir-compile-PID-* directory, removed after every compile."""
    from iree.compiler.tools.binaries import find_tool

    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    seen = tmp_path / "seen-tmpdir"
    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "iree-compile"
    fake.write_text(  # leaves a file where a killed link would, then compiles for real
        f'#!/bin/sh\necho "$TMPDIR" > {seen}\ntouch "$TMPDIR/dense_dispatch_0-1a2b3c.o"\n'
        f'exec {find_tool("iree-compile")} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("IREE_TOOL_PATH", str(tools))
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    result = build(example("bert_dense.mlir"), use_cache=False)
    assert result.vmfb[:2] == b"PK"
    used = Path(seen.read_text().strip())
    assert used.parent == system_tmp and used.name.startswith(f"dcmlir-compile-{os.getpid()}-")
    assert list(system_tmp.iterdir()) == []  # the directory and what was left in it: gone


def test_a_crash_names_the_signal(tmp_path: Path) -> None:
    def crashed(text: str, flags: object, timeout: object) -> CompilerRun:
        return CompilerRun(-11, b"", "Stack dump:\n0. Program arguments: iree-compile -\n")

    with pytest.raises(BuildError) as caught:
        build(BROKEN, cache=BuildCache(tmp_path), compiler=crashed)
    assert str(caught.value).splitlines() == [
        "iree-compile crashed (SIGSEGV)",
        "Stack dump:",
        "0. Program arguments: iree-compile -",
    ]
    assert not (tmp_path / "builds").exists()  # a crash may not come again: not remembered


def test_compile_time_limit_grows_with_the_chunk_and_is_capped() -> None:
    assert Builder("llvm-cpu", timeout=600.0).time_limit(1) == COMPILE_FLOOR_S + 10.0
    assert Builder("llvm-cpu", timeout=600.0).time_limit(48) == 540.0
    assert Builder("llvm-cpu", timeout=600.0).time_limit(100) == 600.0
    assert Builder("llvm-cpu", timeout=5.0).time_limit(3) == 5.0
    assert Builder("llvm-cpu", timeout=None).time_limit(3) is None


def test_broken_module_raises_build_error_with_iree_message(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as caught:
        build(BROKEN, cache=BuildCache(tmp_path), source_name="broken.mlir")
    message = str(caught.value)
    assert message.startswith("broken.mlir:2:23: error: use of undeclared SSA value name")
    assert "Traceback" not in message and "Invoked with" not in message
    assert len(message.splitlines()) <= 13
    assert "broken.mlir:2:23" in caught.value.log
    assert BuildCache(tmp_path).entries() == []  # failures are not cached as modules

    def no_compiling(*_args: object) -> None:
        raise AssertionError("iree-compile ran on a failure it had given before")

    # ... but remembered: the same input and flags fail again at once, under their new name
    with pytest.raises(BuildError) as again:
        build(BROKEN, cache=BuildCache(tmp_path), source_name="b.mlir", compiler=no_compiling)
    assert str(again.value).startswith("b.mlir:2:23: error: use of undeclared SSA value name")
    assert BuildCache(tmp_path).clear() == 0 and not list((tmp_path / "builds").iterdir())


def test_compile_past_time_limit_is_a_build_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"ran past the 0\.001 s time limit"):
        build(example("bert_attention.mlir"), cache=BuildCache(tmp_path), timeout=0.001)


def test_unknown_target_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown target 'tpu'.*llvm-cpu, cuda"):
        build(example("bert_dense.mlir"), target="tpu")


def test_cuda_compile_only_produces_a_vmfb_for_sm_80(tmp_path: Path) -> None:
    result = build(example("bert_dense.mlir"), target="cuda", cache=BuildCache(tmp_path))
    assert result.vmfb[:2] == b"PK"  # a vmfb is a zip archive around module.fb
    assert b"cuda-nvptx-fb" in result.vmfb and b"sm_80" in result.vmfb
    assert b"embedded-elf" not in result.vmfb


def test_loading_a_missing_function_says_which_exist(dense_vmfb: bytes) -> None:
    with pytest.raises(RuntimeFailure, match=r"no function 'matmul' .*it has: dense"):
        load_function(dense_vmfb, "matmul")


# --- measure -------------------------------------------------------------------------------


def test_random_inputs_are_fresh_distinct_and_not_zero() -> None:
    sets = random_inputs([(4, 8), (8, 3)], sets=3, seed=1)
    assert len(sets) == 3 and [a.shape for a in sets[0]] == [(4, 8), (8, 3)]
    assert all(a.dtype == np.float32 and np.count_nonzero(a) > 0 for s in sets for a in s)
    assert not np.array_equal(sets[0][0], sets[1][0])
    assert not np.shares_memory(sets[0][0], sets[1][0])
    assert all(np.abs(a).max() <= 1.0 for s in sets for a in s)


def test_relative_error_is_relative_to_output_scale() -> None:
    expected = np.array([1000.0, -2000.0, 0.5])
    assert relative_error(expected + np.array([0.0, 0.1, 0.0]), expected) == pytest.approx(5e-5)
    assert check_outputs([expected], [expected], 1e-4) == 0.0
    with pytest.raises(MismatchError, match="exceeds"):
        check_outputs([expected + 1.0], [expected], 1e-4)
    with pytest.raises(MismatchError, match="shape"):
        relative_error(np.zeros(2), np.zeros(3))
    assert relative_error(np.array([np.nan]), np.array([1.0])) == math.inf


def test_timer_runs_every_input_set_and_until_min_time() -> None:
    ticks = itertools.count()  # a clock that advances one second per reading
    seen: list[int] = []
    timer = Timer(min_time=5.0, clock=lambda: float(next(ticks)))
    per_call, calls = timer.sample(seen.append, [0, 1, 2])
    assert calls == 5 and seen == [0, 1, 2, 0, 1]  # rotates over the sets
    assert per_call == pytest.approx(1.0)
    per_call, calls = Timer(min_time=0.0).sample(seen.append, [7, 8, 9])
    assert calls == 3  # at least one call per input set


def test_timer_warm_calls_run_before_the_clock_starts() -> None:
    reads: list[int] = []
    seen: list[int] = []

    def clock() -> float:
        reads.append(len(seen))  # how many calls had run when the clock was read
        return float(len(reads))

    per_call, calls = Timer(min_time=0.0, clock=clock, warm_calls=3).sample(seen.append, [0, 1])
    assert seen == [0, 1, 0, 0, 1]  # three untimed calls, then one timed call per set
    assert calls == 2 and reads[0] == 3  # the clock starts after the warm calls
    assert per_call == pytest.approx(1.0)  # two timed calls, two clock ticks
    with pytest.raises(ValueError, match="warm_calls"):
        MeasureSettings(warm_calls=-1)


def test_interleaved_rotates_who_goes_first_and_drops_the_failed() -> None:
    assert "".join(interleaved("abc", 3, lambda v: True)) == "abcbcacab"
    failed: set[str] = set()
    order = []
    for variant in interleaved("abc", 3, lambda v: v not in failed):
        order.append(variant)
        if variant == "b":
            failed.add("b")  # b fails in the first round: the rounds after go on without it
    assert "".join(order) == "abc" + "ca" + "ac"


def float64_matmul(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The reference the parent computes: x @ w in float64."""
    x, w = inputs
    return [np.asarray(x, dtype=np.float64) @ np.asarray(w, dtype=np.float64)]


def test_the_runner_times_a_module_and_numpy_against_a_parent_reference(
    dense_vmfb: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "dense.vmfb"
    path.write_bytes(dense_vmfb)
    variants = [
        ModuleFunction("iree", str(path), "dense"),
        HostLibrary("numpy", "numpy", "mk,kn->mn"),
    ]
    problem = ShapeProblem(((4, 768), (768, 768)), ("float32", "float32"), reference=float64_matmul)
    with Runner(RunnerSettings(TINY)) as runner:
        result = runner.measure_shape(variants, problem)
    for timing in result.timings.values():
        assert timing.ok, timing.error
        assert len(timing.samples) == TINY.rounds
        assert timing.calls >= TINY.rounds * TINY.input_sets
        assert 0 < timing.median < 1.0
        assert timing.max_error is not None and timing.max_error <= 1e-4
    ratio = result.ratio("iree", "numpy")
    assert math.isfinite(ratio) and ratio > 0
    assert result.ratio("numpy", "numpy") == 1.0


def test_wrong_or_failing_variants_are_recorded_not_dropped() -> None:
    variants = [
        HostModel("right", functools.partial(HostCall, np.matmul)),
        HostModel("wrong", functools.partial(HostCall, np.add)),  # same shape, other values
        HostModel("broken", functools.partial(HostCall, np.linalg.cholesky)),  # one argument
    ]
    problem = ShapeProblem(((4, 4), (4, 4)), ("float32", "float32"), reference=float64_matmul)
    with Runner(RunnerSettings(TINY)) as runner:
        result = runner.measure_shape(variants, problem)
    assert list(result.timings) == ["right", "wrong", "broken"]
    assert result["right"].ok
    assert (result["wrong"].error or "").startswith("check: MismatchError: relative error")
    assert (result["broken"].error or "").startswith("check: TypeError")
    assert result.medians["wrong"] == math.inf and result.ratio("broken", "right") == math.inf
    assert math.isnan(result.ratio("right", "wrong"))


def test_measure_shapes_warms_up_at_the_largest_shape_first() -> None:
    problems = {
        rows: ShapeProblem(((rows, 6), (6, 3)), ("float32", "float32"), "mk,kn->mn")
        for rows in (2, 9, 4)
    }
    seen: list[tuple[str, int]] = []
    with Runner(RunnerSettings(TINY)) as runner:
        request = runner._request

        def logged(timing, command, variant, argument):  # type: ignore[no-untyped-def]
            assert runner._problem is not None
            seen.append((command, runner._problem.input_shapes[0][0]))
            return request(timing, command, variant, argument)

        runner._request = logged  # type: ignore[method-assign]
        results = runner.measure_shapes([HostLibrary("numpy", "numpy", "mk,kn->mn")], problems)
    assert list(results) == [2, 9, 4]
    assert seen[0] == ("warmup", 9)
    assert all(results[rows]["numpy"].ok for rows in results)
    # After the warm-up, shapes are measured in the order given, each checked first.
    checked = [rows for command, rows in seen if command == "check"]
    assert checked == [2, 9, 4]


def test_a_shape_problem_needs_exactly_one_reference() -> None:
    with pytest.raises(ValueError, match="an einsum or a reference"):
        ShapeProblem(((2, 2),), ("float32",))
    with pytest.raises(ValueError, match="an einsum or a reference"):
        ShapeProblem(((2, 2),), ("float32",), "mk->mk", reference=float64_matmul)


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        MeasureSettings(rounds=0)
    with pytest.raises(ValueError):
        MeasureSettings(min_time=-1.0)
