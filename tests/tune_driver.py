"""``dcmlir`` (the real CLI ``main``) with test hooks, for tests that kill a tuning process.

Run as ``python tests/tune_driver.py tune ...``; environment variables switch the hooks
on (none set: exactly ``python -m dcmlir.tools.cli``):

- ``DCMLIR_TEST_HOLD=WHERE:N`` with ``DCMLIR_TEST_MARKER=PATH``: when the process reaches
  that point it writes PATH (naming the point) and waits there for the test to kill or
  interrupt it, so kill points are defined by progress, not by wall time. WHERE is
  ``append`` (just after the N-th record line is on disk), ``compile`` (while the N-th
  ``iree-compile`` really runs), ``sample`` (after the N-th timing sample of the run, the
  worker holding the shape's modules, none of the shape's records written) or ``save``
  (after the last record, before the plan is written; N is ignored).
- ``DCMLIR_TEST_FAKE_TIMES=1``: the runner answers every sample with a deterministic
  time, a function of (candidate, shape) only, so two runs that measure the same pairs see
  the same numbers and must reach the same plan; builds, records and search stay real.
- ``DCMLIR_TEST_SMALL_MODEL=1``: the cost model's regressor grows 20 trees instead of its
  usual number (same code path, a fraction of the fitting time of every round).
- ``DCMLIR_TEST_FULL_DISK_AFTER=N``: after N record lines, the disk is "full": the next
  record write lands half a line and reports the short count, later ones fail with ENOSPC.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

SMALL_MODEL_TREES = 20
HOLD = os.environ.get("DCMLIR_TEST_HOLD", "")
MARKER = os.environ.get("DCMLIR_TEST_MARKER", "")
_counts: dict[str, int] = {}


def _hold(where: str) -> None:
    """Tell the test where we are, then wait to be killed (or interrupted)."""
    temporary = f"{MARKER}.tmp"
    Path(temporary).write_text(where)
    os.replace(temporary, MARKER)  # the test never sees half a marker
    while True:
        time.sleep(60)


def _reached(kind: str) -> bool:
    """Count one more ``kind`` event; whether it is the one to hold at."""
    _counts[kind] = _counts.get(kind, 0) + 1
    wanted_kind, _, count = HOLD.partition(":")
    return wanted_kind == kind and (kind == "save" or _counts[kind] == int(count))


def fake_seconds(name: str, input_shapes: Any) -> float:
    """A time that depends on the candidate and the shape only: flops over a per-candidate
    rate, times a per-(candidate, shape) quirk the cost model cannot see."""
    a, b = input_shapes
    flops = 2 * math.prod(a) * b[-1]
    rate = 1.0 + hashlib.sha256(name.encode()).digest()[0] / 256
    quirk = 1.0 + hashlib.sha256(f"{name}:{input_shapes}".encode()).digest()[0] / 512
    return flops / (2e10 * rate) * quirk


class FakeRunner:
    """The Runner's interface answered by :func:`fake_seconds` (no worker process)."""

    def __init__(self, settings: Any = None) -> None:
        from dcmlir.measure.runner import RunnerSettings

        self.settings = settings or RunnerSettings()

    def measure_shape(self, variants, problem, *, baseline=None, on_sample=None):  # type: ignore[no-untyped-def]
        from dcmlir.measure.runner import ShapeResult
        from dcmlir.measure.timing import Timing

        timings = {v.name: Timing(v.name, max_error=0.0) for v in variants}
        for _ in range(self.settings.measure.rounds):
            for variant in variants:
                timing = timings[variant.name]
                timing.samples.append(fake_seconds(variant.name, problem.input_shapes))
                timing.calls += 1
                if on_sample is not None:
                    on_sample(variant.name)
        result = ShapeResult(timings, baseline)
        if baseline is not None:
            result.baseline_before = fake_seconds(baseline, problem.input_shapes)
            result.baseline_after = result.baseline_before
        return result

    def close(self) -> None:
        return None


class _FullDisk:
    """``os`` for dcmlir.records.database: real, until N record writes have gone through."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: bytes) -> int:
        self.writes += 1
        if self.writes <= self.after:
            return os.write(fd, data)
        if self.writes == self.after + 1:
            return os.write(fd, data[: len(data) // 2])  # half a line lands, like a full disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def install() -> None:
    import dcmlir.build.compiler
    import dcmlir.dispatch.plan
    import dcmlir.measure.loop
    import dcmlir.measure.runner
    import dcmlir.records.database

    if os.environ.get("DCMLIR_TEST_SMALL_MODEL") == "1":
        import dcmlir.cost_model.model

        dcmlir.cost_model.model.REGRESSOR_PARAMS["n_estimators"] = SMALL_MODEL_TREES
    if os.environ.get("DCMLIR_TEST_FAKE_TIMES") == "1":
        dcmlir.measure.loop.Runner = FakeRunner  # type: ignore[misc,assignment]
    full_after = os.environ.get("DCMLIR_TEST_FULL_DISK_AFTER")
    if full_after is not None:
        dcmlir.records.database.os = _FullDisk(int(full_after))  # type: ignore[assignment]
    if not HOLD:
        return

    append = dcmlir.records.database.RecordDatabase.append

    def held_append(self, record):  # type: ignore[no-untyped-def]
        append(self, record)
        if _reached("append"):
            _hold(f"append:{_counts['append']}")

    dcmlir.records.database.RecordDatabase.append = held_append  # type: ignore[method-assign]

    run_compile = dcmlir.build.compiler.run_compile

    def held_compile(*args, **kwargs):  # type: ignore[no-untyped-def]
        if _reached("compile"):
            threading.Thread(target=run_compile, args=args, kwargs=kwargs, daemon=True).start()
            time.sleep(0.05)  # iree-compile started: the kill lands in a real compile
            _hold(f"compile:{_counts['compile']}")
        return run_compile(*args, **kwargs)

    dcmlir.build.compiler.run_compile = held_compile

    for runner_class in {dcmlir.measure.loop.Runner, dcmlir.measure.runner.Runner}:
        _hook_samples(runner_class)

    save = dcmlir.dispatch.plan.Plan.save

    def held_save(self, path):  # type: ignore[no-untyped-def]
        if _reached("save"):
            _hold("save")
        save(self, path)

    dcmlir.dispatch.plan.Plan.save = held_save  # type: ignore[method-assign]


def _hook_samples(runner_class: type) -> None:
    measure_shape = runner_class.measure_shape

    def held_measure_shape(self, variants, problem, *, baseline=None, on_sample=None):  # type: ignore[no-untyped-def]
        def counted(name: str) -> None:
            if on_sample is not None:
                on_sample(name)
            if _reached("sample"):
                _hold(f"sample:{_counts['sample']}")

        return measure_shape(self, variants, problem, baseline=baseline, on_sample=counted)

    runner_class.measure_shape = held_measure_shape  # type: ignore[attr-defined]


if __name__ == "__main__":
    install()
    from dcmlir.tools.cli import main

    sys.exit(main(sys.argv[1:]))
