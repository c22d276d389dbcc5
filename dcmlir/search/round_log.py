"""The search's rounds as JSON lines: what each round timed, why, and what it believed.

A tune that picks a slow kernel somewhere leaves records of what it measured, but not of
the order it asked for them in, nor of what it estimated before each answer: whether the
budget went to first measurements, a family duel, proofs or verification, and which
estimate drew it there. ``dcmlir tune --search-log FILE`` writes one line per search,
per round and per final selection (docs/cli.md, "The search log"). A tune resumed from
its records asks the same pairs in the same order and times nothing new, so the log of a
finished tune can be had again for free.

Lines (``event``): ``search`` (workload, budget, candidates, shapes), ``round`` (why:
``records`` (pairs timed before the search), ``floor`` (IREE's default and data tiling
side by side), ``first`` (first measurements), ``duel`` (a family duel), ``proofs``,
``verification`` or ``exact`` (exact builds beside the chosen kernel); the pairs with
their estimate before and measurement after, in us, and whether the round timed them
(``new``; else measured before); the kernels selected when the round was asked),
``selection`` (each kernel's shapes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

import numpy as np

from dcmlir.search.measured_pairs import MeasuredPairs
from dcmlir.shapes import Shape
from dcmlir.space import Candidate

__all__ = ["ROUND_REASONS", "LoggedSearch", "RoundLog"]

ROUND_REASONS = ("records", "floor", "first", "duel", "proofs", "verification", "exact")
"""Why a round timed its pairs, in the order the search asks (docs/design.md section 7)."""


class LoggedSearch(Protocol):
    """What the log reads of the search (:class:`~.shape_generic.ShapeGenericSearch`)."""

    keys: list[str]
    columns: dict[str, int]
    shape_index: dict[Shape, int]
    book: MeasuredPairs

    @property
    def used(self) -> int: ...


def _us(seconds: float | None) -> float | None:
    """Microseconds to 0.01, or None for a pair not estimated or not run (JSON has no inf)."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(seconds * 1e6, 2)


@dataclass
class RoundLog:
    """Appends the search's lines to ``stream`` (flushed per line: an interrupted tune
    keeps every round it finished; None: writes nothing); ``search`` counts the searches
    logged so far (a tune searches a workload again after the guard or a layout rule)."""

    stream: IO[str] | None
    search: int = 0
    _workload: str = field(default="", init=False)
    _rounds: int = field(default=0, init=False)
    _seen: tuple[int, int] = field(default=(0, 0), init=False)  # the book's firsts, again

    def _write(self, line: Mapping[str, Any]) -> None:
        if self.stream is None:
            return
        self.stream.write(json.dumps(line) + "\n")
        self.stream.flush()

    def started(self, workload: str, budget: int, candidates: int, shapes: int) -> None:
        self.search += 1
        self._workload, self._rounds, self._seen = workload, 0, (0, 0)
        self._write(
            {"event": "search", "search": self.search, "workload": workload, "budget": budget}
            | {"candidates": candidates, "shapes": shapes}
        )

    def round(
        self,
        search: LoggedSearch,
        why: str,
        pairs: Sequence[tuple[Candidate, Shape]] | None = None,
        estimate: np.ndarray | None = None,
        kernels: Sequence[int] = (),
    ) -> None:
        """One round, just timed: ``pairs`` as asked (None: every pair the ``search``
        timed since the last round, first records and those timed again), each with its
        place in ``estimate``, the table it was asked from (None: none); ``kernels``, the
        columns selected then. Without ``pairs``, nothing timed is no round."""
        if why not in ROUND_REASONS:
            raise ValueError(f"round log: unknown reason {why!r}")
        if self.stream is None:  # no log asked for: the search pays nothing for it
            return
        book, (firsts, again) = search.book, self._seen
        self._seen = (len(book.seconds), len(book.again))
        used = search.used - (len(book) - firsts - again)  # before this round
        if pairs is None:
            asked = list(book.seconds)[firsts:]
            asked += [(r.candidate_key, r.shape) for r in book.again[again:]]
            if not asked:
                return
        else:
            asked = [(c.key(), s) for c, s in pairs]
        self._rounds += 1
        retimed = {(r.candidate_key, r.shape): r.seconds for r in book.again[again:]}
        new = set(list(book.seconds)[firsts:]) | set(retimed)  # timed by this round
        seconds = dict(book.seconds) | retimed  # first records; a pair timed again: that time
        timed = []
        for key, shape in asked:
            column = search.columns.get(key)
            guess = None
            if estimate is not None and column is not None and shape in search.shape_index:
                guess = float(estimate[search.shape_index[shape], column])
            timed.append(
                {"candidate": key, "shape": list(shape), "estimate_us": _us(guess)}
                | {"measured_us": _us(seconds.get((key, shape))), "new": (key, shape) in new}
            )
        chosen = [search.keys[k] for k in kernels]
        self._write(
            {"event": "round", "search": self.search, "workload": self._workload}
            | {"round": self._rounds, "why": why, "used": used, "kernels": chosen}
            | {"pairs": timed}
        )

    def selected(self, used: int, kernels: Sequence[str], choice: Mapping[Shape, int]) -> None:
        """The final selection: each kernel with the shapes it was chosen for."""
        shapes: dict[str, list[list[int]]] = {key: [] for key in kernels}
        for shape, position in sorted(choice.items()):
            shapes[kernels[position]].append(list(shape))
        self._write(
            {"event": "selection", "search": self.search, "workload": self._workload}
            | {"used": used, "kernels": shapes}
        )
