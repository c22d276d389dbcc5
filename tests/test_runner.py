"""The Runner: interleaved timing in a supervised worker; failures become data."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers import DENSE

from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import (
    KernelVariant,
    input_shapes,
    kernel_function_text,
    kernel_module_text,
)
from dcmlir.codegen.kernel import reference as kernel_reference
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.timing import MeasureSettings, Timing, unsettled
from dcmlir.measure.variants import ModuleFunction, Variant
from dcmlir.workload import Workload, workloads

SKINNY = (
    "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
    "distribution = [8, 128, 0], vector_common_parallel = [1, 16, 0], vector_reduction = [0, 0, 8]>,"
    " translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>,"
    " {enable_loop_peeling}>>"
)
FAST = MeasureSettings(min_time=0.005, rounds=3, input_sets=2, warmup=0.005)


def dense_workload() -> Workload:
    with ir.Context():
        ((_, found),) = list(workloads(parse_module(DENSE).operation))
    assert isinstance(found, Workload)
    return found


@pytest.fixture(scope="module")
def dense_module(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workload, str]:
    workload = dense_workload()
    # a wrong kernel with the same signature: B read transposed (N = K = 768)
    transposed = dataclasses.replace(workload, operand_loops=((0, 2), (1, 2), (0, 1)))
    good = kernel_module_text(
        workload,
        [KernelVariant("v_default"), KernelVariant("v_skinny", {"compilation_info": SKINNY})],
    )
    merged = good.rstrip().rstrip("}") + kernel_function_text(transposed, "v_wrong") + "\n}\n"
    path = tmp_path_factory.mktemp("vmfb") / "dense.vmfb"
    path.write_bytes(build(merged, "llvm-cpu").vmfb)
    return workload, str(path)


def problem(workload: Workload, m: int) -> ShapeProblem:
    return ShapeProblem(
        tuple(input_shapes(workload, {0: m})), ("float32", "float32"), workload.einsum()
    )


def test_interleaved_measurement_with_baseline(dense_module: tuple[Workload, str]) -> None:
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("skinny", path, "v_skinny"),
    ]
    samples: list[str] = []
    with Runner(RunnerSettings(FAST)) as runner:
        result = runner.measure_shape(
            variants, problem(workload, 5), baseline="default", on_sample=samples.append
        )
    for timing in result.timings.values():
        assert timing.error is None, timing.error
        assert len(timing.samples) == 3 and all(s > 0 for s in timing.samples)
        assert timing.max_error is not None and timing.max_error < 1e-4
    # interleaved and rotated: round 2 starts with the second variant
    assert samples == ["default", "skinny", "skinny", "default", "default", "skinny"]
    assert result.baseline_before and result.baseline_after
    assert result.drift is not None and math.isfinite(result.drift)


def test_warm_calls_reach_the_worker_and_are_not_counted(
    dense_module: tuple[Workload, str],
) -> None:
    """Call-by-call sampling (``never_slower.py``'s re-measurement): each sample one timed
    call per input set, after an untimed call of the same variant."""
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("skinny", path, "v_skinny"),
    ]
    settings = dataclasses.replace(FAST, min_time=1e-9, rounds=4, warm_calls=1)
    with Runner(RunnerSettings(settings)) as runner:
        result = runner.measure_shape(variants, problem(workload, 5))
    for timing in result.timings.values():
        assert timing.error is None, timing.error
        assert len(timing.samples) == 4 and all(s > 0 for s in timing.samples)
        assert timing.calls == 4 * FAST.input_sets  # the warm calls are not counted


def test_short_calls_are_sampled_call_by_call(dense_module: tuple[Workload, str]) -> None:
    """A shape whose calls are all shorter than ``call_by_call_below`` (read off the
    warm-up) is sampled call by call, ``short_rounds`` samples; longer ones, or a
    threshold of 0, keep samples of the minimum time; an explicit ``measure`` wins."""
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("skinny", path, "v_skinny"),
    ]
    short = dataclasses.replace(FAST, call_by_call_below=1.0, short_rounds=6)
    long = dataclasses.replace(FAST, call_by_call_below=1e-9, short_rounds=6)
    with Runner(RunnerSettings(short)) as runner:
        found = runner.measure_shape(variants, problem(workload, 5))
        asked = runner.measure_shape(variants, problem(workload, 5), measure=FAST)
    with Runner(RunnerSettings(long)) as runner:
        kept = runner.measure_shape(variants, problem(workload, 5))
    assert found.call_by_call and not asked.call_by_call and not kept.call_by_call
    for timing in found.timings.values():
        assert timing.error is None, timing.error
        assert len(timing.samples) == 6 and timing.calls == 6 * FAST.input_sets
    for result in (asked, kept):
        assert all(len(t.samples) == FAST.rounds for t in result.timings.values())


def test_for_calls_chooses_the_sampling_by_the_length_of_a_call() -> None:
    settings = dataclasses.replace(FAST, call_by_call_below=250e-6, short_rounds=50)
    assert settings.for_calls(1e-3) is settings
    short = settings.for_calls(20e-6)
    assert short.sampled_call_by_call and short.rounds == 50 and short.warm_calls == 1
    assert FAST.for_calls(1e-9) is FAST  # 0: never
    with pytest.raises(ValueError, match="call_by_call_below"):
        MeasureSettings(call_by_call_below=-1.0)
    with pytest.raises(ValueError, match="short_rounds"):
        MeasureSettings(short_rounds=0)


class SlowPhaseRunner(Runner):
    """A runner whose first ``slow`` samples of ``name`` are 1.5x what they timed: a slow
    phase of the machine that took most of that variant's first rounds."""

    def __init__(self, settings: RunnerSettings, name: str, slow: int) -> None:
        super().__init__(settings)
        self.name, self.slow = name, slow

    def _sample(self, timing: Timing, variant: Variant, measure: MeasureSettings) -> float | None:
        seconds = super()._sample(timing, variant, measure)
        if seconds is None or variant.name != self.name or self.slow == 0:
            return seconds
        self.slow -= 1
        return 1.5 * seconds


def test_a_median_far_over_the_fastest_sample_is_unsettled() -> None:
    assert not unsettled([100.0, 102.0, 104.0], 0.05)
    assert unsettled([100.0, 150.0, 152.0], 0.05)
    assert not unsettled([100.0, 150.0, 152.0], 0.6)
    assert not unsettled([], 0.05)
    with pytest.raises(ValueError, match="settle_tolerance"):
        MeasureSettings(settle_tolerance=-0.1)
    with pytest.raises(ValueError, match="most_rounds"):
        MeasureSettings(most_rounds=-1)


def test_a_slow_phase_over_most_rounds_gets_the_group_more_rounds(
    dense_module: tuple[Workload, str],
) -> None:
    """Two of three samples of one variant slow: with a settle tolerance every variant
    takes more rounds until that median is one of its unslowed samples (at most
    ``most_rounds`` in all); without one, its median is a slow sample."""
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("skinny", path, "v_skinny"),
    ]
    settle = dataclasses.replace(FAST, settle_tolerance=0.2, most_rounds=12)
    found = {}
    for name, settings in (("settled", settle), ("kept", FAST)):
        with SlowPhaseRunner(RunnerSettings(settings), "skinny", slow=2) as runner:
            found[name] = runner.measure_shape(variants, problem(workload, 64))
    settled, kept = found["settled"], found["kept"]
    assert kept.extra_rounds == 0
    assert all(len(t.samples) == FAST.rounds for t in kept.timings.values())
    assert kept["skinny"].median > 1.3 * min(kept["skinny"].samples)
    assert 2 <= settled.extra_rounds <= 9
    for timing in settled.timings.values():
        assert len(timing.samples) == FAST.rounds + settled.extra_rounds  # every variant
    assert settled["skinny"].median < 1.2 * min(settled["skinny"].samples[2:])


def test_wrong_result_is_a_failed_measurement(dense_module: tuple[Workload, str]) -> None:
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("wrong", path, "v_wrong"),
    ]
    with Runner(RunnerSettings(FAST)) as runner:
        result = runner.measure_shape(variants, problem(workload, 3))
    assert result.timings["default"].ok
    wrong = result.timings["wrong"]
    assert not wrong.ok and math.isinf(wrong.median)
    assert wrong.error is not None and wrong.error.startswith(
        "check: MismatchError: relative error"
    )


def test_missing_function_is_a_load_error(dense_module: tuple[Workload, str]) -> None:
    workload, path = dense_module
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("ghost", path, "no_such_fn"),
    ]
    with Runner(RunnerSettings(FAST)) as runner:
        result = runner.measure_shape(variants, problem(workload, 2))
    assert result.timings["default"].ok
    assert "module has no function 'no_such_fn'" in (result.timings["ghost"].error or "")


def test_a_hanging_request_times_out_and_the_rest_go_on(dense_module: tuple[Workload, str]) -> None:
    workload, path = dense_module
    # a sample asked to run for 30 s against a 4 s limit stands in for a hung kernel; the
    # limit is every request's, and with 1 s a slow CI machine's load timed out instead
    slow = RunnerSettings(
        MeasureSettings(min_time=30.0, rounds=1, input_sets=1, warmup=0.0), timeout=4.0
    )
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("skinny", path, "v_skinny"),
    ]
    start = time.monotonic()
    with Runner(slow) as runner:
        result = runner.measure_shape(variants, problem(workload, 2))
    assert time.monotonic() - start < 40  # 60 s had either sample run its course
    for timing in result.timings.values():
        assert timing.error == "sample: timed out after 4 s"


@pytest.mark.parametrize("checked_by", ["worker", "parent"])
def test_a_crashing_worker_fails_one_variant_and_is_restarted(
    dense_module: tuple[Workload, str], checked_by: str
) -> None:
    """The restarted worker gets the inputs again: generated there, or the parent's arrays."""
    workload, path = dense_module
    settings = RunnerSettings(
        MeasureSettings(min_time=0.5, rounds=2, input_sets=1, warmup=0.0), timeout=30
    )
    variants = [
        ModuleFunction("default", path, "v_default"),
        ModuleFunction("skinny", path, "v_skinny"),
    ]
    with Runner(settings) as runner:
        request = runner._request
        killer: list[threading.Thread] = []

        def request_then_kill(timing, command, variant, argument):
            """Kill the worker 0.2 s into the first sample (each sample runs 0.5 s).

            Timed from the sample request, not from the start: on a loaded machine
            loading and checking alone can take longer than any fixed delay.
            """
            if command == "sample" and not killer:
                (pid,) = runner.processes().values()
                killer.append(threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)))
                killer[0].start()
            return request(timing, command, variant, argument)

        runner._request = request_then_kill  # type: ignore[method-assign]
        shapes = problem(workload, 2)
        if checked_by == "parent":
            reference = functools.partial(kernel_reference, workload)
            shapes = ShapeProblem(shapes.input_shapes, shapes.dtypes, reference=reference)
        result = runner.measure_shape(variants, shapes)
        killer[0].join()
    errors = [t.error for t in result.timings.values()]
    assert sum(e is not None and "died (signal 9)" in e for e in errors) == 1
    survivors = [t for t in result.timings.values() if t.error is None]
    assert len(survivors) == 1 and len(survivors[0].samples) == 2


def test_a_module_that_does_not_load_is_a_failed_variant(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.vmfb"
    bogus.write_bytes(b"not a flatbuffer")
    workload = dense_workload()
    with Runner(RunnerSettings(FAST)) as runner:
        result = runner.measure_shape([ModuleFunction("x", str(bogus), "f")], problem(workload, 1))
    assert result.timings["x"].error is not None
    assert "cannot load module" in result.timings["x"].error
