"""A tuning record: one measurement or build outcome, its JSON line, and what makes it valid.

A record is the unit every role hands on: the measuring loop makes them, the
database appends and loads them, the cost model and the search read them. The
line format is documented in ``docs/records.md``; :meth:`Record.from_json` reads
every line written since format 1, filling in what older lines lack.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from dcmlir.ir.iree import versions
from dcmlir.records.failures import FAILURES, failure_of

__all__ = ["FORMAT", "KINDS", "ROUTES", "Record", "current_iree_version"]

FORMAT = 1
"""The record format this module writes and reads; a line with a newer one is skipped."""

ROUTES = ("config", "td")
"""How a candidate reached IREE: a ``compilation_info`` config, or a transform-dialect library."""

KINDS = ("measure", "build")
"""A timing of one shape, or the outcome of building a variant (its failure, mostly)."""


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
    ``median`` is ``math.inf`` and ``times`` empty whenever ``error`` is set, and
    ``failure_kind`` says which kind of failure it is (one of
    :data:`~dcmlir.records.failures.FAILURES`; inferred from ``error`` when not given).
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
    failure_kind: str | None = None  # one of FAILURES when error is set, else None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalise once, so equality and JSON agree
        set_(self, "dims", {int(k): int(v) for k, v in sorted(self.dims.items())})
        set_(self, "space", tuple(int(e) for e in self.space))
        set_(self, "times", tuple(float(t) for t in self.times))
        set_(self, "median", float(self.median))
        for name in ("target", "candidate", "extra"):
            set_(self, name, _canonical_json(getattr(self, name), name))
        if self.failure_kind is None and isinstance(self.error, str):
            set_(self, "failure_kind", failure_of(self.error, self.kind))  # an older line, a test
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
        if self.error is None and self.failure_kind is not None:
            raise ValueError(f"failure kind '{self.failure_kind}' without error text")
        if self.error is not None:
            if self.failure_kind not in FAILURES:
                raise ValueError(
                    f"failure kind '{self.failure_kind}' is not one of {', '.join(FAILURES)}"
                )
            if self.times or self.median != math.inf:
                raise ValueError("a failed record has no times and an infinite median")
            return
        if self.kind == "build":
            if self.times or self.median != math.inf:
                raise ValueError("a build record holds no timing: no times, infinite median")
            return
        if not self.times or not math.isfinite(self.median) or self.median <= 0:
            raise ValueError("a successful measure record needs times and a finite median > 0")
        if not all(math.isfinite(t) and t > 0 for t in self.times):
            raise ValueError("a measured time must be a finite number of seconds > 0")

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
            failure_kind=None,
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
        failure_kind: str | None = None,
        dims: Mapping[int, int] | None = None,
        space: Sequence[int] | None = None,
        extra: Mapping[str, Any] | None = None,
        iree_version: str | None = None,
        timestamp: str | None = None,
    ) -> Record:
        """A failed build (``kind="build"``, shape optional) or run: infinitely slow.

        ``failure_kind``: which failure, from :func:`~dcmlir.records.failures.failure_of`
        of ``error`` when not given.
        """
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
            failure_kind=failure_kind,
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
            failure_kind=None,
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
    def seconds(self) -> float:
        """What a search reads of it: the median of a successful timing, else inf (a
        failure, or a record of a build)."""
        return self.median if self.ok else math.inf

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
            "failure_kind": self.failure_kind,
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
        failure_kind = obj.get("failure_kind")  # absent from older lines: inferred from error
        if failure_kind is not None and not isinstance(failure_kind, str):
            raise ValueError("field 'failure_kind' must be a string or null")
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
            failure_kind=failure_kind,
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
