"""IREE's default's partial distribution tiles: when the cost model fits what they cost
(docs/cost_model.md, "The default's partial distribution tiles")."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_SLOWDOWNS", "SLOWDOWN_GAIN", "SLOWDOWN_SHAPES", "shows_slowdown"]

DEFAULT_SLOWDOWNS = (1.0, 3.0, 4.0, 6.0)
"""What an element of the default's partial distribution tiles may cost, relative to one of
a whole tile (:data:`~dcmlir.cost_model.terms.DEFAULT_DISTRIBUTION`): none, or the 3.5-5x
of an AVX2 Zen 3. Not 2: on the AVX-512 EPYC's records (its 31 T) a slowdown of 2 fitted
the noise of 2 of 12 workloads better than none (0.71 and 0.99 of its spread); 3 and
more fit none of them."""
SLOWDOWN_SHAPES = 4
"""The default's shapes a slowdown other than 1 needs: with the range's two ends alone any
slowdown fits them, and it took the place of what makes small shapes slow."""
SLOWDOWN_GAIN = 0.75
"""A slowdown other than 1 is fitted where the spread of the default's ``log f`` with it is
at most this much of what the best tiles without one leave. On the EPYC's records (31 T)
the best slowdown of 3 or more leaves 1.3x to 48x more than none; on the Zen 3's grid
oracle 0.39-0.64 of it, and 0.54 in a budget-60 tune there (the spread is mostly the
records' noise and the small shapes, the same with or without it). Free, the fit moved the
EPYC's replay at budget 60 on 11 of 15 workloads by up to 0.05 of the oracle either way,
with slowdowns taken early in a search from a few shapes."""


def shows_slowdown(spreads: Mapping[tuple[int, int, float], float], shapes: int) -> bool:
    """Whether the default's records show its partial tiles' slowdown: enough shapes, and
    the spread with it at most :data:`SLOWDOWN_GAIN` of the best without it."""
    if shapes < SLOWDOWN_SHAPES:
        return False
    plain = min(spread for tiles, spread in spreads.items() if tiles[2] == 1.0)
    slowed = min(spread for tiles, spread in spreads.items() if tiles[2] != 1.0)
    return slowed <= SLOWDOWN_GAIN * plain
