"""A dependency-free progress bar on stderr for long builds and measurements."""

from __future__ import annotations

import sys
import time
from typing import IO


class Progress:
    """``label [#####.....] 12/40 note`` redrawn in place on a terminal.

    Elsewhere (CI logs, pipes) it prints a line at most every ``interval``
    seconds and at the end, so logs stay short but show the run is alive.
    """

    def __init__(
        self,
        total: int,
        label: str,
        stream: IO[str] | None = None,
        width: int = 24,
        interval: float = 10.0,
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.interval = interval
        self.done = 0
        self.started = time.monotonic()
        self._last_print = 0.0
        self._finished = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def advance(self, count: int = 1, note: str = "") -> None:
        self.done = min(self.total, self.done + count)
        self._draw(note, final=self.done >= self.total)

    def set(self, done: int, note: str = "") -> None:
        self.done = min(self.total, max(done, 0))
        self._draw(note, final=self.done >= self.total)

    def line(self, note: str = "") -> str:
        filled = self.width * self.done // self.total if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.started
        text = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s"
        return f"{text} {note}".rstrip()

    def _draw(self, note: str, final: bool) -> None:
        if self._finished:
            return
        self._finished = final
        now = time.monotonic()
        if self._tty:
            end = "\n" if final else ""
            self.stream.write(f"\r\033[K{self.line(note)}{end}")
            self.stream.flush()
            return
        if final or now - self._last_print >= self.interval:
            self._last_print = now
            self.stream.write(self.line(note) + "\n")
            self.stream.flush()
