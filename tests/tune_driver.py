"""``dcmlir`` (the real CLI ``main``) with fake or held roles, for tests that kill a tuning.

Run as ``python tests/tune_driver.py tune ...``; environment variables choose the roles
that ``dcmlir.tune`` is given (through :meth:`dcmlir.driver.Roles.in_scope`, nothing is
patched; none set: exactly ``python -m dcmlir.tools.cli``):

- ``DCMLIR_TEST_HOLD=WHERE:N`` with ``DCMLIR_TEST_MARKER=PATH``: when the process reaches
  that point it writes PATH (naming the point) and waits there for the test to kill or
  interrupt it, so kill points are defined by progress, not by wall time. WHERE is
  ``append`` (just after the N-th record line is on disk), ``compile`` (while the N-th
  ``iree-compile`` really runs), ``sample`` (after the N-th timing sample of the run, the
  worker holding the shape's modules, none of the shape's records written) or ``save``
  (after the last record, as the plan file given with ``-o`` is opened for writing: seen
  through an audit hook, PEP 578; N is ignored).
- ``DCMLIR_TEST_FAKE_TIMES=1``: the runner is :class:`dcmlir.testing.FakeRunner`, every
  sample a function of (candidate, shape) only, so two runs that measure the same pairs
  see the same numbers and must reach the same plan; builds, records and search stay real.
- ``DCMLIR_TEST_SMALL_MODEL=1``: the cost model is :func:`dcmlir.testing.small_cost_model`
  (the same code path, a fraction of the fitting time of every round).
- ``DCMLIR_TEST_FULL_DISK_AFTER=N``: the records are a :class:`dcmlir.testing.FullDiskDatabase`:
  after N record lines the next write lands half a line and reports the short count,
  later ones fail with ENOSPC.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dcmlir.build.batch import Builder
from dcmlir.driver import Roles
from dcmlir.files import temporary_path
from dcmlir.ir.iree import CompilerRun, run_compile
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem, ShapeResult
from dcmlir.measure.timing import MeasureSettings
from dcmlir.measure.variants import Variant
from dcmlir.records import Record
from dcmlir.testing import (
    FakeRunner,
    FullDiskDatabase,
    keep_placement,
    keep_reports,
    small_cost_model,
)
from dcmlir.tools.cli import main

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


class HeldDatabase(FullDiskDatabase):
    """The records, held just after the N-th line is on disk (``append:N``)."""

    def append(self, record: Record) -> None:
        super().append(record)
        if _reached("append"):
            _hold(f"append:{_counts['append']}")


class HeldRunner:
    """A runner held after the N-th timing sample (``sample:N``)."""

    def __init__(self, inner: Runner | FakeRunner) -> None:
        self.inner = inner

    @classmethod
    def around(cls, make: Callable[[RunnerSettings], Any]) -> Callable[[RunnerSettings], Any]:
        return lambda settings: cls(make(settings))

    def measure_shape(
        self,
        variants: Sequence[Variant],
        problem: ShapeProblem,
        *,
        baseline: str | None = None,
        on_sample: Callable[[str], None] | None = None,
        measure: MeasureSettings | None = None,
    ) -> ShapeResult:
        def counted(name: str) -> None:
            if on_sample is not None:
                on_sample(name)
            if _reached("sample"):
                _hold(f"sample:{_counts['sample']}")

        return self.inner.measure_shape(
            variants, problem, baseline=baseline, on_sample=counted, measure=measure
        )

    def close(self) -> None:
        self.inner.close()


class HeldBuilder(Builder):
    """A builder held while its N-th real ``iree-compile`` runs (``compile:N``).

    Its compiler seam starts the real compile in a thread and, at the N-th call (cache
    hits never call it), holds this process while that compile goes on.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, compiler=self._held_compile, **kwargs)

    @staticmethod
    def _held_compile(text: str, flags: Sequence[str], timeout: float | None) -> CompilerRun:
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                outcome["run"] = run_compile(text, flags, timeout)
            except BaseException as err:  # handed to the calling thread
                outcome["error"] = err
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
        if _reached("compile"):
            # hold once iree-compile runs (its scratch directory is there): the kill lands
            # in a real compile, and a Ctrl-C reaches the compiler too
            scratch = Path(tempfile.gettempdir())
            while not done.is_set() and not any(scratch.glob(f"dcmlir-compile-{os.getpid()}-*")):
                time.sleep(0.002)
            time.sleep(0.05)
            try:
                _hold(f"compile:{_counts['compile']}")
            except BaseException:
                # dcmlir compiles in the calling thread, so its scratch directory is gone
                # before an interrupt unwinds past the build: wait for the compile thread
                # (a daemon) to remove it too, or the interpreter's exit may cut it short
                done.wait(timeout=60)
                raise
        done.wait()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["run"]  # type: ignore[no-any-return]


def roles_from_environment() -> Roles:
    """The roles the environment asks for (module doc); the rest built as ``dcmlir tune`` does."""
    held = HOLD.partition(":")[0]
    fake_times = os.environ.get("DCMLIR_TEST_FAKE_TIMES") == "1"
    runner: Callable[[RunnerSettings], Any] | None = FakeRunner if fake_times else None
    if held == "sample":
        runner = HeldRunner.around(runner or Runner)
    full_after = os.environ.get("DCMLIR_TEST_FULL_DISK_AFTER")
    after = int(full_after) if full_after is not None else None
    database = None
    if held == "append" or after is not None:
        database = (HeldDatabase if held == "append" else FullDiskDatabase).factory(after)
    small = os.environ.get("DCMLIR_TEST_SMALL_MODEL") == "1"
    return Roles(
        builder=HeldBuilder if held == "compile" else None,
        runner=runner,
        database=database,
        cost_model=small_cost_model() if small else None,
        placement=keep_placement,  # a resumed tune must write the same plan: no timing after
        guard=keep_reports,
    )


def hold_when_opened(path: str) -> None:
    """``save``: hold when ``path`` is opened for writing (the plan, after every record):
    the plan is staged in :func:`~dcmlir.files.temporary_path` and renamed, so that file."""
    target = os.path.abspath(temporary_path(os.path.realpath(path)))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or "w" not in str(args[1]):
            return
        opened = os.fspath(args[0]) if isinstance(args[0], os.PathLike) else args[0]
        if isinstance(opened, str) and os.path.abspath(opened) == target and _reached("save"):
            _hold("save")

    sys.addaudithook(hook)


def output_of(argv: Sequence[str]) -> str:
    """The plan path a ``dcmlir tune`` command line writes (its ``-o``, else the default)."""
    for index, arg in enumerate(argv):
        if arg in ("-o", "--output") and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--output="):
            return arg.partition("=")[2]
    return "plan.json"


if __name__ == "__main__":
    # Ctrl-C must reach the tuner as in a terminal, even when the test suite itself runs
    # in the background (`cmd &` and nohup start it with SIGINT ignored, which every
    # child inherits, and Python then installs no KeyboardInterrupt handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if HOLD.startswith("save"):
        hold_when_opened(output_of(sys.argv[1:]))
    with roles_from_environment().in_scope():
        sys.exit(main(sys.argv[1:]))
