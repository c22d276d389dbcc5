"""What tuning asks of the records, answered from records already read: pure functions.

:class:`~dcmlir.records.database.RecordDatabase` reads the file and filters by
workload, target, route and IREE version; these functions rank what is left,
so the questions stay apart from the file they come from. A re-measurement
supersedes the earlier record of the same (candidate, route, kind, shape).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dcmlir.records.schema import Record

__all__ = [
    "ALL_SHAPES",
    "CandidateScore",
    "best_per_shape",
    "failed_candidates",
    "latest",
    "lookup",
    "rank",
    "shape_key",
]

ALL_SHAPES: tuple[int, ...] | None = None
"""The shape key of a shape-independent record (:attr:`Record.all_shapes`)."""

_RecordKey = tuple[str, str, str, str, str, tuple[int, ...] | None]


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


def shape_key(shape: Sequence[int] | Mapping[int, int]) -> tuple[int, ...]:
    """The dynamic values in loop order (:attr:`Record.shape`), from them or ``{loop: value}``."""
    if isinstance(shape, Mapping):
        return tuple(shape[k] for k in sorted(shape))
    return tuple(shape)


def latest(records: Iterable[Record]) -> list[Record]:
    """The newest record per (candidate, route, kind, shape), failures included, in file order
    of each key's first record."""
    newest: dict[_RecordKey, Record] = {}
    for record in records:
        newest[_supersede_key(record)] = record
    return list(newest.values())


def lookup(records: Iterable[Record], shape: tuple[int, ...]) -> Record | None:
    """What ``records`` (of one candidate and route, in file order) say of ``shape``.

    The newest ``measure`` record of the shape; else the newest ``build`` record
    of the shape or of all shapes, if it is a failure (a variant that did not
    build cannot be timed on any shape it covers, so a resumed run skips it too).
    """
    measure: Record | None = None
    build: Record | None = None
    for record in records:
        if record.kind == "measure" and record.shape == shape:
            measure = record
        elif record.kind == "build" and (record.all_shapes or record.shape == shape):
            build = record
    if measure is not None:
        return measure
    return build if build is not None and build.failed else None


def best_per_shape(newest: Iterable[Record]) -> dict[tuple[int, ...], Record]:
    """``{shape: the fastest successful record}`` of :func:`latest` records; ties keep the
    earlier one, shapes where everything failed are absent."""
    best: dict[tuple[int, ...], Record] = {}
    for record in newest:
        if not record.ok:
            continue
        current = best.get(record.shape)
        if current is None or record.median < current.median:
            best[record.shape] = record
    return dict(sorted(best.items()))


def rank(newest: Sequence[Record], k: int, *, min_shapes: int = 1) -> list[CandidateScore]:
    """The ``k`` best (candidate, route) pairs of :func:`latest` records by geomean slowdown.

    A candidate's slowdown on a shape is its time there over the best time of
    any candidate there; its score is the geometric mean over the shapes it was
    measured on, so candidates measured on different shape sets compare on one
    scale. A candidate that failed anywhere (or failed to build) is infinitely
    slow and left out, as is one measured on fewer than ``min_shapes`` shapes.
    Ties: more shapes first, then by key.
    """
    best = best_per_shape(newest)
    failed = {(r.candidate_key, r.route) for r in newest if r.failed}
    times: dict[tuple[str, str], dict[tuple[int, ...], float]] = {}
    newest_ok: dict[tuple[str, str], Record] = {}
    for record in newest:
        candidate = (record.candidate_key, record.route)
        if not record.ok or candidate in failed:
            continue
        times.setdefault(candidate, {})[record.shape] = record.median
        newest_ok[candidate] = record
    scores = []
    for candidate, per_shape in times.items():
        if len(per_shape) < min_shapes:
            continue
        ratios = [_ratio(t, best[shape].median) for shape, t in per_shape.items()]
        score = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        scores.append(
            CandidateScore(*candidate, score, dict(sorted(per_shape.items())), newest_ok[candidate])
        )
    scores.sort(key=lambda s: (s.score, -s.shapes, s.candidate_key, s.route))
    return scores[:k]


def failed_candidates(newest: Iterable[Record]) -> dict[tuple[str, str], list[Record]]:
    """``{(candidate_key, route): its failures}`` among :func:`latest` records: a later
    success on a shape has cleared the failure there already."""
    failures: dict[tuple[str, str], list[Record]] = {}
    for record in newest:
        if record.failed:
            failures.setdefault((record.candidate_key, record.route), []).append(record)
    return dict(sorted(failures.items()))


def _ratio(time: float, best: float) -> float:
    """Slowdown against the best; a 0 s best (a timer too coarse) counts as equal."""
    if best <= 0:
        return 1.0
    return time / best
