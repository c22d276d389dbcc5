"""The record file: append-only JSON lines, one record per line, safe against crashes.

Tuning is slow and machines die, so what was measured must survive a crash
and be reused by the next run (TVM meta_schedule's database, for dynamic
shapes). The file is the interface between tuning runs, processes and tools:

- one :class:`~dcmlir.records.schema.Record` per line, ``"format": 1`` in each
  (see ``docs/records.md``);
- :meth:`RecordDatabase.append` writes a whole line with one ``os.write`` under
  an exclusive ``flock`` and ``fsync``-s it, so concurrent writers never
  interleave and a ``kill -9`` loses at most the line in flight;
- :meth:`RecordDatabase.load` skips and reports (``problems`` plus one warning
  on the ``dcmlir.records.database`` logger) every line it cannot read, never fails;
- a failed build or run is a record with ``median = inf``, its error text and its
  failure kind (docs/design.md, section 4), so a resumed run does not retry it and the
  search can treat it as infinitely slow.

The tuning questions (:meth:`RecordDatabase.top_k` and friends) filter here and
are answered by :mod:`dcmlir.records.queries`.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from dcmlir.records import queries
from dcmlir.records.queries import CandidateScore
from dcmlir.records.schema import Record, current_iree_version

__all__ = ["FULL_DISK_FIX", "DatabaseError", "RecordDatabase"]

log = logging.getLogger(__name__)

_MAX_PROBLEMS_LOGGED = 5
FULL_DISK_FIX = (
    "free some space (or keep the records on another disk) and run again: "
    "every record written so far is kept and reused"
)


class DatabaseError(Exception):
    """The record file could not be written; the message names the file and the OS reason."""

    def __init__(self, message: str, path: Path, errno_: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno_


class RecordDatabase:
    """One JSON-lines record file: crash-safe appends, tolerant loads, tuning queries.

    Queries see the records of the last :meth:`load` (run on first use) plus
    this object's own appends; call :meth:`load` again to see other writers'.
    By default they keep only records of ``iree_version`` (the installed
    compiler's unless given): timings from another IREE say little about this one.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = True, iree_version: str | None = None
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._iree_version = iree_version
        self._records: list[Record] | None = None
        self._line_numbers: list[int] = []  # of each record in the file; 0: appended since
        self._versions_reported = False
        self.problems: list[str] = []

    @property
    def iree_version(self) -> str:
        """The IREE version queries keep by default."""
        if self._iree_version is None:
            self._iree_version = current_iree_version()
        return self._iree_version

    # --- writing ---------------------------------------------------------------------------

    def append(self, record: Record) -> None:
        """Add one line, atomically with respect to other appenders and crashes.

        Under an exclusive ``flock``: if the file does not end with a newline
        (a writer died or ran out of space mid-line), one is written first, so
        the fragment stays a line of its own that readers skip; then the record
        and its newline go out in a single ``os.write``. A short write is rolled
        back (truncated away) where possible. The descriptor is read-write only
        to look at that last byte; ``O_APPEND`` puts every write at the end.
        """
        data = (record.to_line() + "\n").encode("ascii")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise self._error("cannot open", err) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            try:
                written = self._write(fd, data)
            except OSError as err:
                _rollback(fd, size)
                raise self._error("cannot append a record to", err) from err
            if written != len(data):
                _rollback(fd, size)
                reason = f"short write, {written} of {len(data)} bytes (is the disk full?)"
                raise DatabaseError(
                    f"cannot append a record to {self.path}: {reason}; {FULL_DISK_FIX}",
                    self.path,
                    errno.ENOSPC,
                )
            if self.fsync:
                os.fsync(fd)
        except DatabaseError:
            raise
        except OSError as err:
            raise self._error("cannot append a record to", err) from err
        finally:
            os.close(fd)  # releases the lock
        if self._records is not None:
            self._records.append(record)
            self._line_numbers.append(0)

    def _write(self, fd: int, data: bytes) -> int:
        """The one ``os.write`` of a line: the seam where dcmlir.testing fills the disk."""
        return os.write(fd, data)

    def _error(self, action: str, err: OSError) -> DatabaseError:
        reason = err.strerror or str(err)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            reason = f"{reason}; {FULL_DISK_FIX}"
        return DatabaseError(f"{action} {self.path}: {reason}", self.path, err.errno)

    # --- reading ---------------------------------------------------------------------------

    def load(self) -> list[Record]:
        """Read the whole file again: every record, of every IREE version, in file order.

        Unreadable lines (corrupt, truncated, a newer format) are skipped;
        ``problems`` lists them as ``file:line: reason`` and one warning on the
        ``dcmlir.records.database`` logger sums them up. A missing file is empty; anything but
        a regular file (a device such as ``/dev/full``, which reads as endless zeros; a
        FIFO, which blocks) is a :class:`DatabaseError`.
        """
        self.problems = []
        records: list[Record] = []
        numbers: list[int] = []
        try:
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                raise DatabaseError(
                    f"cannot read {self.path}: not a regular file (records live in a file, "
                    "e.g. records.jsonl)",
                    self.path,
                )
            with open(self.path, "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH)  # no half-appended line in view
                content = handle.read()
        except FileNotFoundError:
            content = b""
        except OSError as err:
            raise self._error("cannot read", err) from err
        lines = content.split(b"\n")
        last = len(lines) - 1  # after the final newline: b"" in a well-formed file
        for index, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                records.append(Record.from_line(raw.decode("utf-8")))
                numbers.append(index + 1)
            except UnicodeDecodeError:
                self._problem(index + 1, "not UTF-8 text")
            except ValueError as err:
                truncated = " (truncated last line: no newline at the end)" if index == last else ""
                self._problem(index + 1, f"{err}{truncated}")
        if self.problems:
            shown = "; ".join(self.problems[:_MAX_PROBLEMS_LOGGED])
            more = len(self.problems) - _MAX_PROBLEMS_LOGGED
            suffix = f"; and {more} more" if more > 0 else ""
            log.warning(
                "dcmlir: warning: skipped %d unreadable record line(s): %s%s",
                len(self.problems),
                shown,
                suffix,
            )
        self._records = records
        self._line_numbers = numbers
        self._versions_reported = False
        return list(records)

    def _problem(self, line: int, reason: str) -> None:
        self.problems.append(f"{self.path}:{line}: {reason}")

    def _all(self) -> list[Record]:
        if self._records is None:
            self.load()
        assert self._records is not None
        return self._records

    def __iter__(self) -> Iterator[Record]:
        """Every readable record, all IREE versions, in file order."""
        return iter(list(self._all()))

    def __len__(self) -> int:
        return len(self._all())

    def other_versions(self) -> dict[str, int]:
        """Records per IREE version other than :attr:`iree_version`: kept, filtered by default."""
        counts: dict[str, int] = {}
        for record in self._all():
            if record.iree_version != self.iree_version:
                counts[record.iree_version] = counts.get(record.iree_version, 0) + 1
        return counts

    # --- queries ---------------------------------------------------------------------------

    def records(
        self,
        workload: str | None = None,
        target_key: str | None = None,
        route: str | None = None,
        *,
        candidate_key: str | None = None,
        kind: str | None = None,
        include_failures: bool = False,
        only_current_version: bool = True,
    ) -> list[Record]:
        """Every matching record in file order (re-measurements included); None matches all.

        The first query after a load that leaves out records of another IREE version says
        so, once (a warning on the ``dcmlir.records.database`` logger naming the lines): they stay
        in the file, unused.
        """
        found = []
        other_version: list[int] = []
        for index, record in enumerate(self._all()):
            if only_current_version and record.iree_version != self.iree_version:
                other_version.append(index)
                continue
            if record.failed and not include_failures:
                continue
            if (
                (workload is None or record.workload == workload)
                and (target_key is None or record.target_key == target_key)
                and (route is None or record.route == route)
                and (candidate_key is None or record.candidate_key == candidate_key)
                and (kind is None or record.kind == kind)
            ):
                found.append(record)
        if other_version and not self._versions_reported:
            self._report_versions(other_version)
        return found

    def _report_versions(self, indices: list[int]) -> None:
        self._versions_reported = True
        records = self._all()
        versions = sorted({records[i].iree_version for i in indices})
        lines = [self._line_numbers[i] for i in indices if self._line_numbers[i]]
        shown = ", ".join(map(str, lines[:_MAX_PROBLEMS_LOGGED]))
        extra = len(lines) - _MAX_PROBLEMS_LOGGED
        more = f" and {extra} more" if extra > 0 else ""
        log.warning(
            "dcmlir: warning: %s: %d record(s) of another IREE version (%s; line%s %s%s) "
            "kept but not used: timings from another compiler say little about this one (%s)",
            self.path,
            len(indices),
            ", ".join(versions),
            "s" if len(lines) > 1 else "",
            shown,
            more,
            self.iree_version,
        )

    def _latest(
        self, workload: str, target_key: str, route: str | None, only_current_version: bool
    ) -> list[Record]:
        """The newest record per (candidate, route, kind, shape): a re-measurement supersedes."""
        return queries.latest(
            self.records(
                workload,
                target_key,
                route,
                include_failures=True,
                only_current_version=only_current_version,
            )
        )

    def lookup(
        self,
        workload: str,
        target_key: str,
        candidate_key: str,
        shape: Sequence[int] | Mapping[int, int],
        route: str,
        *,
        only_current_version: bool = True,
    ) -> Record | None:
        """What is known of this candidate on this shape, or None if nothing.

        The newest ``measure`` record of the shape; else the newest ``build``
        record of the shape or of all shapes, if it is a failure (a variant
        that did not build cannot be timed on any shape it covers, so a
        resumed run skips it too). ``shape``: the dynamic values in loop order
        (:attr:`Record.shape`) or ``{loop: value}``.
        """
        found = self.records(
            workload,
            target_key,
            route,
            candidate_key=candidate_key,
            include_failures=True,
            only_current_version=only_current_version,
        )
        return queries.lookup(found, queries.shape_key(shape))

    def measured(
        self,
        workload: str,
        target_key: str,
        candidate_key: str,
        shape: Sequence[int] | Mapping[int, int],
        route: str,
        *,
        include_failures: bool = True,
        only_current_version: bool = True,
    ) -> bool:
        """Whether a resumed run can skip this measurement; a recorded failure counts unless
        ``include_failures=False`` (to retry failures)."""
        record = self.lookup(
            workload,
            target_key,
            candidate_key,
            shape,
            route,
            only_current_version=only_current_version,
        )
        return record is not None and (include_failures or not record.failed)

    def best_per_shape(
        self,
        workload: str,
        target_key: str,
        *,
        route: str | None = None,
        only_current_version: bool = True,
    ) -> dict[tuple[int, ...], Record]:
        """``{shape: the fastest successful record}`` over every candidate (and route).

        Each (candidate, route, shape) counts with its newest record; ties keep
        the earlier one. Shapes where everything failed are absent.
        """
        return queries.best_per_shape(
            self._latest(workload, target_key, route, only_current_version)
        )

    def top_k(
        self,
        workload: str,
        target_key: str,
        k: int,
        *,
        route: str | None = None,
        min_shapes: int = 1,
        only_current_version: bool = True,
    ) -> list[CandidateScore]:
        """The ``k`` best (candidate, route) pairs by geomean slowdown over their shapes.

        A candidate's slowdown on a shape is its time there over the best
        time of any candidate there (:meth:`best_per_shape`); its score is the
        geometric mean over the shapes it was measured on, so candidates
        measured on different shape sets compare on one scale. A candidate
        that failed on any shape (or failed to build) is infinitely slow and
        left out (see :meth:`failed_candidates`), as is one measured on fewer
        than ``min_shapes`` shapes. Ties: more shapes first, then by key.
        """
        newest = self._latest(workload, target_key, route, only_current_version)
        return queries.rank(newest, k, min_shapes=min_shapes)

    def failed_candidates(
        self,
        workload: str,
        target_key: str,
        *,
        route: str | None = None,
        only_current_version: bool = True,
    ) -> dict[tuple[str, str], list[Record]]:
        """``{(candidate_key, route): its failures}`` where its newest record on some shape
        (or its build) is a failure; a later success on that shape clears it."""
        return queries.failed_candidates(
            self._latest(workload, target_key, route, only_current_version)
        )


def _rollback(fd: int, size: int) -> None:
    """Cut a partial line off again (we hold the lock, so nobody wrote after it).

    If that fails too, the fragment stays without a newline and the next
    append starts with one, so it costs one unreadable line, never a record.
    """
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
    except OSError as err:
        log.warning("dcmlir: warning: cannot remove a partial record line: %s", err)
