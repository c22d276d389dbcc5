"""How far an estimate is from evidence: octaves of shapes, and the doubt they carry.

A kernel measured at T = 63 says little about T = 3: records showed one chosen for
T = 3..48 on that one measurement, 2-4x slower than the best there. The search
(:mod:`dcmlir.search.shape_generic`) selects on the pessimistic side of its estimates
(``estimate * doubt``) and proves each chosen kernel in every octave it keeps
(:meth:`dcmlir.search.remainders.RemainderClasses.unproven`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from dcmlir.shapes import Shape

__all__ = ["DOUBT_NEAR", "DOUBT_PER_OCTAVE", "DOUBT_UNMEASURED", "doubt_table", "octave"]

DOUBT_NEAR = 1.1
"""Unmeasured, but measured in the same octave of every dynamic dim."""
DOUBT_PER_OCTAVE = 1.25
"""And per octave further from its nearest measurement (at most 4 octaves)."""
DOUBT_UNMEASURED = DOUBT_NEAR * DOUBT_PER_OCTAVE**4
"""Never measured anywhere."""


def octave(shape: Shape) -> tuple[int, ...]:
    """Per dynamic dim, k with 2**(k-1) < extent <= 2**k: 1 | 2 | 3-4 | 5-8 | ... | 65-128."""
    return tuple((int(v) - 1).bit_length() for v in shape)


def doubt_table(
    shapes: Sequence[Shape],
    columns: int,
    measured_rows: Mapping[int, Sequence[int]],
    exempt: Iterable[int] = (),
) -> np.ndarray:
    """[shape, column] factor >= 1: how much slower than its estimate a kernel may be.

    1 where it was measured (and for ``exempt`` columns everywhere); elsewhere it grows
    with the octaves (the largest over the dynamic dims) to the column's nearest
    measurement: :data:`DOUBT_NEAR` times :data:`DOUBT_PER_OCTAVE` per octave;
    :data:`DOUBT_UNMEASURED` for a column never measured.
    """
    octaves = np.asarray([octave(s) for s in shapes], dtype=float).reshape(len(shapes), -1)
    doubt = np.full((len(shapes), columns), DOUBT_UNMEASURED)
    for column, rows in measured_rows.items():
        if not rows:
            continue
        rows = list(rows)
        distance = np.abs(octaves[:, None, :] - octaves[None, rows, :]).max(axis=2).min(axis=1)
        doubt[:, column] = DOUBT_NEAR * DOUBT_PER_OCTAVE ** np.minimum(distance, 4)
        doubt[rows, column] = 1.0
    for column in exempt:
        doubt[:, column] = 1.0
    return doubt
