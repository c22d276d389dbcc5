"""IREE's default measured beside every chosen kernel's evidence: the never-slower rule.

A kernel keeps a shape only where measurements say it beats IREE's default there.
Classes are the remainder classes a kernel and the default share: the kernel's own
(:mod:`dcmlir.search.remainders`) and the default's, from its effective tile in the cost
model (:meth:`RemainderClasses.with_default`). In each class of a kernel's region, the
kernel is measured once, then the default at one of those shapes. The kernel is ruled
out of every shape where all such side-by-side pairs of its class show it slower.
Without this rule, a kernel measured at 157 us at T = 21 of attention scores kept 30 T
against the default's *estimate*; the default was never measured there and takes 39 us.
The kernel ran up to 5.7x slower than the default (benchmarks/never_slower.py, budget
240).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["baseline_wants", "beaten_rows"]

Regions = Mapping[int, Sequence[int]]
"""Each chosen kernel's column -> the shape rows it is chosen for."""


def _covering(masks: np.ndarray, column: int, rows: Sequence[int], mask: int) -> list[int]:
    """The rows whose class has at least ``mask``'s remainders (evidence for ``mask``)."""
    return [row for row in rows if int(masks[row, column]) & mask == mask]


def baseline_wants(
    masks: np.ndarray,
    regions: Regions,
    measured_rows: Callable[[int], set[int]],
    default: int,
) -> list[tuple[int, int, int, int]]:
    """``(column to measure, row, kernel column, class)``: what a side-by-side pair lacks.

    ``masks``: the classes a kernel shares with the default
    (:meth:`RemainderClasses.with_default`). For each class of a kernel's region, the
    kernel must have been measured in it (or with more remainders), and the default at
    one of those rows. A kernel never measured in the class is asked for first, at the
    class's middle row in its region; then the default, at the middle one of the
    kernel's rows.
    """
    have = measured_rows(default)
    wants: list[tuple[int, int, int, int]] = []
    for column, region in regions.items():
        measured = sorted(measured_rows(column))
        for mask in sorted({int(masks[row, column]) for row in region}):
            evidence = _covering(masks, column, measured, mask)
            if not evidence:
                rows = [row for row in sorted(region) if int(masks[row, column]) == mask]
                wants.append((column, rows[len(rows) // 2], column, mask))
            elif not have.intersection(evidence):
                wants.append((default, evidence[len(evidence) // 2], column, mask))
    return wants


def beaten_rows(
    masks: np.ndarray,
    regions: Regions,
    seconds: Callable[[int, int], float | None],
    default: int,
    margin: float,
) -> dict[int, list[int]]:
    """Each kernel's rows where every side-by-side pair of its class shows it slower.

    A pair is a row where both the kernel and the default were measured. It covers the
    rows whose class has at most its remainders. The kernel is slower there when its time
    exceeds the default's by more than ``margin``.
    """
    found: dict[int, list[int]] = {}
    for column, region in regions.items():
        pairs = [
            (row, kernel, baseline)
            for row in range(masks.shape[0])
            if (kernel := seconds(column, row)) is not None
            and (baseline := seconds(default, row)) is not None
        ]
        if not pairs:
            continue
        beaten = []
        for row in region:
            mask = int(masks[row, column])
            covering = [(k, b) for r, k, b in pairs if int(masks[r, column]) & mask == mask]
            if covering and all(k > b * (1 + margin) for k, b in covering):
                beaten.append(row)
        if beaten:
            found[column] = beaten
    return found
