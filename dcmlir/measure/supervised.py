"""The parent's side of a measuring process, and the CPU time that shows whether it is quiet.

:class:`WorkerProcess` runs ``python -m dcmlir.measure.worker`` and answers one
request at a time over pipes. :func:`cpu_seconds` and :func:`wait_quiet` read
Linux's CPU-time clocks of processes (``clock_getcpuclockid``) so the Runner can
wait until the measuring processes it is not timing have stopped computing
(OpenBLAS's and torch's worker threads spin for a while after a call) and can
say how much CPU they took during a sample. Elsewhere these report nothing and
waiting is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import Any

from dcmlir.measure.worker import read_frame, write_frame

QUIET_WINDOW = 0.01  # seconds of looking at the other processes: over 2 scheduler ticks
QUIET_SHARE = 0.1  # of the window: below this much CPU they count as quiet
QUIET_PATIENCE = 1.0  # seconds to wait for quiet before sampling anyway


class WorkerFailure(Exception):
    """The worker did not answer in time or died; the message says which."""


class WorkerProcess:
    """A ``python -m dcmlir.measure.worker`` process answering one request at a time over pipes.

    A plain subprocess rather than ``multiprocessing``: spawn would re-import the
    user's ``__main__``, and fork would copy a process that may hold IREE threads.
    It gets this process's ``sys.path``, so a :class:`~dcmlir.measure.variants.HostModel`
    factory imports there as it does here. Frames are 8-byte little-endian lengths
    followed by a pickle. ``threads``: the workers of its ``local-task`` device and of
    the host libraries it loads.
    """

    def __init__(self, driver: str, threads: int) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        path = os.pathsep.join(os.path.abspath(p) for p in sys.path if os.path.isdir(p or "."))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dcmlir.measure.worker", driver, str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, "PYTHONPATH": path},
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def call(self, timeout: float, *request: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            write_frame(self.process.stdin, request)
            reply = read_frame(self.process.stdout, timeout)
        except TimeoutError:
            self.kill()
            raise WorkerFailure(f"timed out after {timeout:g} s") from None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise WorkerFailure(self._death()) from None
        status, payload = reply
        if status == "error":
            raise RuntimeError(payload)
        return payload

    def _death(self) -> str:
        try:
            code = self.process.wait(5.0)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        self.log.seek(0)
        tail = self.log.read().decode("utf-8", "replace").strip().splitlines()[-3:]
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        detail = f": {' / '.join(tail)}" if tail else ""
        return f"the measuring process died ({how}){detail}"

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.alive():
            try:
                assert self.process.stdin is not None
                write_frame(self.process.stdin, ("exit",))
                self.process.wait(2.0)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.log.close()


def _process_clock(pid: int) -> int:
    """Linux's CPU-time clock of process ``pid`` (``clock_getcpuclockid``: every thread)."""
    return ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)


def cpu_seconds(pids: Iterable[int]) -> float | None:
    """CPU time so far of every thread of ``pids``; this process's own counts without the
    calling thread (busy waiting for the sample). None where the clocks are missing.

    Other processes' clocks advance in scheduler ticks (a few ms), so compare them over
    windows longer than a tick.
    """
    if not sys.platform.startswith("linux"):
        return None
    total = 0.0
    for pid in pids:
        if pid == os.getpid():
            total += time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
            total -= time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
            continue
        try:
            total += time.clock_gettime(_process_clock(pid))
        except OSError:
            continue  # the process is gone: it computes nothing
    return total


def runnable(pids: Iterable[int]) -> bool:
    """Whether a thread of ``pids`` (not the calling one) is running or waiting for a core.

    A spinning thread that the scheduler starves takes little CPU over a window yet
    is still runnable (state ``R`` in ``/proc``); CPU time alone would call it quiet
    on a loaded machine. False where ``/proc`` is missing.
    """
    me = threading.get_native_id()
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone, or no /proc
        for task in tasks:
            if int(task) == me:
                continue
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    state = stat.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # the thread ended
            if state == "R":
                return True
    return False


def bystanders(pids: Iterable[int]) -> list[int]:
    """The processes to watch while one is timed: ``pids`` and this one."""
    return [*pids, os.getpid()]


def wait_quiet(pids: Iterable[int]) -> float:
    """Wait until ``pids`` (and this process's other threads) take under
    :data:`QUIET_SHARE` of a core over a window and none of their threads is
    runnable; the seconds waited (at most :data:`QUIET_PATIENCE`)."""
    watched = bystanders(pids)
    start = last = time.perf_counter()
    before = cpu_seconds(watched)
    if before is None:
        return 0.0
    while True:
        time.sleep(QUIET_WINDOW)
        now, clock = cpu_seconds(watched) or 0.0, time.perf_counter()
        if clock - start >= QUIET_PATIENCE:
            return clock - start
        if now - before < QUIET_SHARE * (clock - last) and not runnable(watched):
            return clock - start
        before, last = now, clock
