"""Tuning records: append-only JSON lines, one measurement per line, failures kept as data.

Tuning is slow and machines die, so what was measured must survive a crash
and be reused by the next run (TVM meta_schedule's database, for dynamic
shapes). The file is the interface between tuning runs, processes and tools:

- one :class:`Record` per line, ``"format": 1`` in each (see ``docs/records.md``);
- :meth:`RecordDatabase.append` writes a whole line with one ``os.write`` under
  an exclusive ``flock`` and ``fsync``-s it, so concurrent writers never
  interleave and a ``kill -9`` loses at most the line in flight;
- :meth:`RecordDatabase.load` skips and reports (``problems`` plus one warning
  on the ``dcmlir.records.database`` logger) every line it cannot read, never fails;
- a failed build or run is a record with ``median = inf`` and its error text
  (DESIGN.md section 4), so a resumed run does not retry it and the search can
  treat it as infinitely slow.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import stat
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from dcmlir.ir.iree import versions

__all__ = [
    "FORMAT",
    "KINDS",
    "ROUTES",
    "CandidateScore",
    "DatabaseError",
    "Record",
    "RecordDatabase",
    "current_iree_version",
]

log = logging.getLogger(__name__)

FORMAT = 1
"""The record format this module writes and reads; a line with a newer one is skipped."""

ROUTES = ("config", "td")
"""How a candidate reached IREE: a ``compilation_info`` config, or a transform-dialect library."""

KINDS = ("measure", "build")
"""A timing of one shape, or the outcome of building a variant (its failure, mostly)."""

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


class _JsonAble(Protocol):
    """A Target or a candidate: its JSON for the record, its short key for the index."""

    def to_json(self) -> Mapping[str, Any]: ...

    def key(self) -> str: ...


def current_iree_version() -> str:
    """The IREE compiler release and revision, as the build cache keys use it."""
    return versions()["iree"]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _canonical_json(value: Mapping[str, Any] | _JsonAble, what: str) -> dict[str, Any]:
    """``value`` as it reads back from JSON, so a record round-trips exactly."""
    if not isinstance(value, Mapping):
        value = value.to_json()
    try:
        decoded = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"record field '{what}' is not JSON-able: {err}") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"record field '{what}' must be a JSON object")
    return decoded


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Record:
    """One measurement (or build outcome) of one candidate on one shape of one workload.

    ``dims`` holds the dynamic loops' values ``{loop: extent}``; ``space`` the
    whole iteration space (static extents included). A build record of a
    dynamic-shape variant may have both empty: it holds for every shape.
    ``median`` is ``math.inf`` and ``times`` empty whenever ``error`` is set.
    """

    workload: str  # Workload.key
    target_key: str
    candidate_key: str
    route: str  # one of ROUTES
    dims: Mapping[int, int] = field(hash=False)
    space: tuple[int, ...]
    times: tuple[float, ...]  # seconds per sample
    median: float  # seconds; inf on failure
    error: str | None
    kind: str  # one of KINDS
    iree_version: str
    dcmlir_version: str
    timestamp: str  # UTC, ISO 8601
    target: Mapping[str, Any] = field(hash=False)  # Target.to_json()
    candidate: Mapping[str, Any] = field(hash=False)
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalise once, so equality and JSON agree
        set_(self, "dims", {int(k): int(v) for k, v in sorted(self.dims.items())})
        set_(self, "space", tuple(int(e) for e in self.space))
        set_(self, "times", tuple(float(t) for t in self.times))
        set_(self, "median", float(self.median))
        for name in ("target", "candidate", "extra"):
            set_(self, name, _canonical_json(getattr(self, name), name))
        self._validate()

    def _validate(self) -> None:
        for name in (
            "workload",
            "target_key",
            "candidate_key",
            "iree_version",
            "dcmlir_version",
            "timestamp",
        ):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"record field '{name}' must be a non-empty string")
        if self.route not in ROUTES:
            raise ValueError(f"route '{self.route}' is not one of {', '.join(ROUTES)}")
        if self.kind not in KINDS:
            raise ValueError(f"kind '{self.kind}' is not one of {', '.join(KINDS)}")
        if self.space and any(
            loop >= len(self.space) or self.space[loop] != value
            for loop, value in self.dims.items()
        ):
            raise ValueError(f"dims {self.dims} disagree with the iteration space {self.space}")
        if self.kind == "measure" and not self.space:
            raise ValueError("a measure record needs the iteration space it was measured on")
        if any(not math.isfinite(t) or t < 0 for t in self.times):
            raise ValueError("times must be finite, non-negative seconds")
        if self.error is not None:
            if self.times or self.median != math.inf:
                raise ValueError("a failed record has no times and an infinite median")
            return
        if self.kind == "build":
            if self.times or self.median != math.inf:
                raise ValueError("a build record holds no timing: no times, infinite median")
            return
        if not self.times or not math.isfinite(self.median) or self.median < 0:
            raise ValueError("a successful measure record needs times and a finite median")

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def measurement(
        cls,
        *,
        workload: str | Any,
        target: Mapping[str, Any] | _JsonAble,
        candidate: Mapping[str, Any] | _JsonAble,
        route: str,
        dims: Mapping[int, int],
        times: Sequence[float],
        target_key: str | None = None,
        candidate_key: str | None = None,
        space: Sequence[int] | None = None,
        median: float | None = None,
        extra: Mapping[str, Any] | None = None,
        iree_version: str | None = None,
        timestamp: str | None = None,
    ) -> Record:
        """A successful timing; ``median`` defaults to the median of ``times``.

        ``workload`` is a key or a :class:`~dcmlir.workload.Workload` (then
        ``space`` defaults to ``workload.concrete(dims)``); ``target`` and
        ``candidate`` are dicts, or objects with ``to_json()`` and ``key()``
        (then the keys default to ``key()``).
        """
        if not times:
            raise ValueError("a measurement needs at least one sample; record a failure instead")
        return cls._stamped(
            (workload, target, candidate, route, target_key, candidate_key),
            (extra, iree_version, timestamp),
            dims=dims,
            space=_space(workload, dims, space),
            times=tuple(times),
            median=statistics.median(times) if median is None else median,
            error=None,
            kind="measure",
        )

    @classmethod
    def failure(
        cls,
        *,
        workload: str | Any,
        target: Mapping[str, Any] | _JsonAble,
        candidate: Mapping[str, Any] | _JsonAble,
        route: str,
        error: str,
        target_key: str | None = None,
        candidate_key: str | None = None,
        kind: str = "measure",
        dims: Mapping[int, int] | None = None,
        space: Sequence[int] | None = None,
        extra: Mapping[str, Any] | None = None,
        iree_version: str | None = None,
        timestamp: str | None = None,
    ) -> Record:
        """A failed build (``kind="build"``, shape optional) or run: infinitely slow."""
        if not error:
            raise ValueError("a failure record needs its error text")
        dims = dims or {}
        return cls._stamped(
            (workload, target, candidate, route, target_key, candidate_key),
            (extra, iree_version, timestamp),
            dims=dims,
            space=_space(workload, dims, space) if dims or space else (),
            times=(),
            median=math.inf,
            error=error,
            kind=kind,
        )

    @classmethod
    def built(
        cls,
        *,
        workload: str | Any,
        target: Mapping[str, Any] | _JsonAble,
        candidate: Mapping[str, Any] | _JsonAble,
        route: str,
        target_key: str | None = None,
        candidate_key: str | None = None,
        extra: Mapping[str, Any] | None = None,
        iree_version: str | None = None,
        timestamp: str | None = None,
    ) -> Record:
        """A successful build of a dynamic-shape variant (holds for every shape, no timing)."""
        return cls._stamped(
            (workload, target, candidate, route, target_key, candidate_key),
            (extra, iree_version, timestamp),
            dims={},
            space=(),
            times=(),
            median=math.inf,
            error=None,
            kind="build",
        )

    @classmethod
    def _stamped(
        cls,
        what: tuple[Any, Any, Any, str, str | None, str | None],
        stamp: tuple[Mapping[str, Any] | None, str | None, str | None],
        **outcome: Any,
    ) -> Record:
        """The fields every factory fills alike: keys from the objects, versions, time."""
        workload, target, candidate, route, target_key, candidate_key = what
        extra, iree_version, timestamp = stamp
        return cls(
            workload=_workload_key(workload),
            target_key=_key_of(target, target_key, "target"),
            candidate_key=_key_of(candidate, candidate_key, "candidate"),
            route=route,
            iree_version=iree_version or current_iree_version(),
            dcmlir_version=versions()["dcmlir"],
            timestamp=timestamp or _now(),
            target=target,
            candidate=candidate,
            extra=extra or {},
            **outcome,
        )

    # --- views -----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The dynamic loops' values in loop order: the key of per-shape queries."""
        return tuple(self.dims.values())  # sorted by loop in __post_init__

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def ok(self) -> bool:
        """A successful timing: the only records that rank candidates."""
        return self.error is None and self.kind == "measure"

    @property
    def all_shapes(self) -> bool:
        """A shape-independent record (a dynamic-shape build): it holds for every shape."""
        return not self.dims and not self.space

    # --- JSON ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The line's object: keys first, payload dicts last; ``inf`` as ``null``."""
        return {
            "format": FORMAT,
            "kind": self.kind,
            "workload": self.workload,
            "target_key": self.target_key,
            "candidate_key": self.candidate_key,
            "route": self.route,
            "dims": {str(loop): value for loop, value in self.dims.items()},
            "space": list(self.space),
            "median": self.median if math.isfinite(self.median) else None,
            "times": list(self.times),
            "error": self.error,
            "iree_version": self.iree_version,
            "dcmlir_version": self.dcmlir_version,
            "timestamp": self.timestamp,
            "target": self.target,
            "candidate": self.candidate,
            "extra": self.extra,
        }

    def to_line(self) -> str:
        """One line of ASCII JSON, no newline inside (strings are escaped), none at the end."""
        return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, obj: object) -> Record:
        """The record of a decoded line; ValueError with the reason when it is not one."""
        if not isinstance(obj, dict):
            raise ValueError(f"not a JSON object but {type(obj).__name__}")
        version = obj.get("format")
        if not _is_int(version):
            raise ValueError("no integer 'format' field")
        if version > FORMAT:
            raise ValueError(f"format {version} is newer than this dcmlir reads ({FORMAT})")
        if version < 1:
            raise ValueError(f"unknown format {version}")
        dims = _field(obj, "dims", dict)
        if not all(k.isdigit() and _is_int(v) for k, v in dims.items()):
            raise ValueError("field 'dims' must map loop numbers to integers")
        space = _field(obj, "space", list)
        times = _field(obj, "times", list)
        if not all(_is_int(e) for e in space):
            raise ValueError("field 'space' must be a list of integers")
        if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in times):
            raise ValueError("field 'times' must be a list of numbers")
        error = obj.get("error")
        if error is not None and not isinstance(error, str):
            raise ValueError("field 'error' must be a string or null")
        return cls(
            workload=_field(obj, "workload", str),
            target_key=_field(obj, "target_key", str),
            candidate_key=_field(obj, "candidate_key", str),
            route=_field(obj, "route", str),
            dims={int(k): v for k, v in dims.items()},
            space=tuple(space),
            times=tuple(times),
            median=_decode_seconds(obj.get("median")),
            error=error,
            kind=_field(obj, "kind", str),
            iree_version=_field(obj, "iree_version", str),
            dcmlir_version=_field(obj, "dcmlir_version", str),
            timestamp=_field(obj, "timestamp", str),
            target=_field(obj, "target", dict),
            candidate=_field(obj, "candidate", dict),
            extra=obj.get("extra") or {},
        )

    @classmethod
    def from_line(cls, line: str) -> Record:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON: {err.msg}, column {err.colno}") from None
        return cls.from_json(obj)


def _workload_key(workload: str | Any) -> str:
    return workload if isinstance(workload, str) else workload.key


def _key_of(obj: Mapping[str, Any] | _JsonAble, given: str | None, what: str) -> str:
    if given is not None:
        return given
    if isinstance(obj, Mapping):
        raise ValueError(f"give {what}_key, or a {what} object with a key() method")
    return obj.key()


def _space(
    workload: str | Any, dims: Mapping[int, int], space: Sequence[int] | None
) -> tuple[int, ...]:
    if space is not None:
        return tuple(space)
    if isinstance(workload, str):
        raise ValueError("give the iteration space, or a Workload to compute it from dims")
    return tuple(workload.concrete(dict(dims)))


def _field(obj: dict[str, Any], name: str, kind: type) -> Any:
    if name not in obj:
        raise ValueError(f"missing field '{name}'")
    value = obj[name]
    if not isinstance(value, kind):
        raise ValueError(f"field '{name}' must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _decode_seconds(value: object) -> float:
    """``null`` and ``"inf"`` are the infinite time of a failure."""
    if value is None or value == "inf":
        return math.inf
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"field 'median' must be a number, null or \"inf\", not {value!r}")


@dataclass(frozen=True)
class CandidateScore:
    """A candidate's rank in :meth:`RecordDatabase.top_k`.

    ``score``: geometric mean, over the shapes it was measured on, of its time
    divided by the best time any candidate reached on that shape (1.0: best
    everywhere it ran). ``times``: its median per shape.
    """

    candidate_key: str
    route: str
    score: float
    times: Mapping[tuple[int, ...], float] = field(hash=False)
    record: Record  # its newest successful record, for the candidate's JSON

    @property
    def shapes(self) -> int:
        return len(self.times)


ALL_SHAPES: tuple[int, ...] | None = None
"""The shape key of a shape-independent record (:attr:`Record.all_shapes`)."""

_RecordKey = tuple[str, str, str, str, str, tuple[int, ...] | None]


def _supersede_key(record: Record) -> _RecordKey:
    """What a newer record replaces: same candidate, route, kind and shape."""
    shape = ALL_SHAPES if record.all_shapes else record.shape
    return (
        record.workload,
        record.target_key,
        record.candidate_key,
        record.route,
        record.kind,
        shape,
    )


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
                written = os.write(fd, data)
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
        latest: dict[_RecordKey, Record] = {}
        for record in self.records(
            workload,
            target_key,
            route,
            include_failures=True,
            only_current_version=only_current_version,
        ):
            latest[_supersede_key(record)] = record
        return list(latest.values())

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
        wanted = (
            tuple(shape[k] for k in sorted(shape)) if isinstance(shape, Mapping) else tuple(shape)
        )
        measure: Record | None = None
        build: Record | None = None
        for record in self.records(
            workload,
            target_key,
            route,
            candidate_key=candidate_key,
            include_failures=True,
            only_current_version=only_current_version,
        ):
            if record.kind == "measure" and record.shape == wanted:
                measure = record
            elif record.kind == "build" and (record.all_shapes or record.shape == wanted):
                build = record
        if measure is not None:
            return measure
        return build if build is not None and build.failed else None

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
        best: dict[tuple[int, ...], Record] = {}
        for record in self._latest(workload, target_key, route, only_current_version):
            if not record.ok:
                continue
            current = best.get(record.shape)
            if current is None or record.median < current.median:
                best[record.shape] = record
        return dict(sorted(best.items()))

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
        latest = self._latest(workload, target_key, route, only_current_version)
        best = self.best_per_shape(
            workload, target_key, route=route, only_current_version=only_current_version
        )
        failed = {(r.candidate_key, r.route) for r in latest if r.failed}
        times: dict[tuple[str, str], dict[tuple[int, ...], float]] = {}
        newest: dict[tuple[str, str], Record] = {}
        for record in latest:
            candidate = (record.candidate_key, record.route)
            if not record.ok or candidate in failed:
                continue
            times.setdefault(candidate, {})[record.shape] = record.median
            newest[candidate] = record
        scores = []
        for candidate, per_shape in times.items():
            if len(per_shape) < min_shapes:
                continue
            ratios = [_ratio(t, best[shape].median) for shape, t in per_shape.items()]
            score = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            scores.append(
                CandidateScore(
                    *candidate, score, dict(sorted(per_shape.items())), newest[candidate]
                )
            )
        scores.sort(key=lambda s: (s.score, -s.shapes, s.candidate_key, s.route))
        return scores[:k]

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
        failures: dict[tuple[str, str], list[Record]] = {}
        for record in self._latest(workload, target_key, route, only_current_version):
            if record.failed:
                failures.setdefault((record.candidate_key, record.route), []).append(record)
        return dict(sorted(failures.items()))


def _ratio(time: float, best: float) -> float:
    """Slowdown against the best; a 0 s best (a timer too coarse) counts as equal."""
    if best <= 0:
        return 1.0
    return time / best


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
