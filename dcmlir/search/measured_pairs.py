"""What a search has measured: each pair's first record, and the pairs timed again.

The search keeps the first record of a (candidate, shape) pair and answers a resumed run
from the same records in the same order, so it makes the same decisions down to the last
bit. A pair timed *again*, side by side with another kernel where one of the two had a
record already (the family duel's, :mod:`dcmlir.search.side_by_side`), is held beside it
and counts against the budget as any measurement.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

import numpy as np

from dcmlir.measure.loop import MeasureReport
from dcmlir.records import Record
from dcmlir.search.floor_builds import steady
from dcmlir.search.side_by_side import Pairs
from dcmlir.shapes import Shape
from dcmlir.space import Candidate

__all__ = ["MeasuredPairs", "MeasurerLike", "wrong_results"]


def wrong_results(record: Record) -> bool:
    """Whether a record says its kernel computed wrong numbers (the runner's output check)."""
    return record.failure_kind == "check"


class MeasurerLike(Protocol):
    def measure_pairs(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        *,
        calls: int | None = None,
        again: bool = False,
    ) -> MeasureReport: ...


class MeasuredPairs:
    """The search's measurements: ``seconds`` and ``records`` by (candidate key, shape);
    ``keys`` and ``shape_index`` name the search's columns and rows."""

    def __init__(
        self, measurer: MeasurerLike, keys: Sequence[str], shape_index: Mapping[Shape, int]
    ) -> None:
        self.measurer = measurer
        self.keys = keys
        self.shape_index = shape_index
        self.shapes = {row: shape for shape, row in shape_index.items()}
        self.seconds: dict[tuple[str, Shape], float] = {}
        self.records: dict[tuple[str, Shape], Record] = {}
        self.again: list[Record] = []
        self.measured_now = 0  # pairs timed by this run (the rest came from the records)

    def __len__(self) -> int:
        return len(self.seconds) + len(self.again)

    def measure(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        calls: int | None = None,
        again: Collection[Shape] = (),
    ) -> bool:
        """Time ``pairs`` (call by call, ``calls`` each, when given; those at shapes in
        ``again`` again, side by side); whether a first record came."""
        retimed = [(c, s) for c, s in pairs if s in again]
        if retimed:
            report = self.measurer.measure_pairs(retimed, calls=calls, again=True)
            self.measured_now += report.measured
            self.again += [report.records[c.key(), s] for c, s in retimed]
        fresh = [(c, s) for c, s in pairs if (c.key(), s) not in self.seconds and s not in again]
        if not fresh:
            return False
        report = self.measurer.measure_pairs(fresh, calls=calls)
        self.measured_now += report.measured
        # In the order asked, not the order the measurer found them (records first, then
        # timed largest shape first): a resumed run then feeds the model and the estimate
        # the same sequence as an uninterrupted one, down to the last bit of every float.
        asked = {(c.key(), s): None for c, s in fresh}
        for pair in [*asked, *(p for p in report.records if p not in asked)]:
            record = report.records.get(pair)
            if record is None:
                continue
            self.records[pair] = record
            self.seconds[pair] = record.seconds
        return True

    def pairs(self) -> Pairs:
        """The pairs timed side by side, first records and again."""
        return Pairs(self.records, self.again)

    def measured_rows(self, column: int) -> set[int]:
        """The rows where the column has a finite first record."""
        key = self.keys[column]
        return {
            self.shape_index[shape]
            for (k, shape), seconds in self.seconds.items()
            if k == key and shape in self.shape_index and math.isfinite(seconds)
        }

    def never_measured(self) -> list[int]:
        """The columns with a finite first record at no row (one pass over the records)."""
        seen = {
            key
            for (key, shape), seconds in self.seconds.items()
            if shape in self.shape_index and math.isfinite(seconds)
        }
        return [column for column, key in enumerate(self.keys) if key not in seen]

    def finite(self, column: int, row: int) -> float | None:
        """The column's first record at the row, where it is finite."""
        found = self.seconds.get((self.keys[column], self.shapes[row]))
        return found if found is not None and math.isfinite(found) else None

    def steady(self, column: int, row: int) -> float | None:
        """:func:`~dcmlir.search.floor_builds.steady` of the column's first record at the row."""
        record = self.records.get((self.keys[column], self.shapes[row]))
        return steady(record) if record is not None and record.ok else self.finite(column, row)

    def mask(self) -> np.ndarray:
        """[row, column]: whether the pair has a first record."""
        found = np.zeros((len(self.shape_index), len(self.keys)), dtype=bool)
        columns = {key: column for column, key in enumerate(self.keys)}
        for key, shape in self.seconds:
            if key in columns and shape in self.shape_index:
                found[self.shape_index[shape], columns[key]] = True
        return found

    def together_rows(self, column: int, build: int) -> set[int]:
        """The rows where the two columns' first records come from one call of the measurer."""
        logs = Pairs(self.records).first_logs(self.keys[column], self.keys[build])
        return {self.shape_index[shape] for shape, _ in logs}

    def again_logs(self, column: int, build: int) -> list[tuple[int, float]]:
        """(row, log ratio) of the pairs of the two columns timed again."""
        logs = self.pairs().again_logs(self.keys[column], self.keys[build])
        return [(self.shape_index[shape], value) for shape, value in logs]
