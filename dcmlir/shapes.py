"""The shape vocabulary: one ``Shape`` and the range grammar every command shares.

A :data:`Shape` is the values of a workload's dynamic loops, in loop order
(``(17,)`` for a ``?x768 @ 768x768`` matmul at T=17); the workload maps it to
loops with :meth:`dcmlir.workload.Workload.shape_dims`.
"""

from __future__ import annotations

import re

__all__ = ["Shape", "parse_range"]

Shape = tuple[int, ...]
"""The dynamic loops' values, in loop order."""

# --- ranges --------------------------------------------------------------------------------

_RANGE = re.compile(r"^\s*(-?\d+)\s*:\s*(-?\d+)\s*$")


def parse_range(text: str) -> tuple[int, int]:
    """``LO:HI`` (inclusive) with 0 <= LO <= HI; a clear ValueError otherwise."""
    match = _RANGE.match(text)
    if not match:
        raise ValueError(f"range '{text}' is not LO:HI with integers, e.g. 1:128")
    lo, hi = int(match.group(1)), int(match.group(2))
    if lo < 0:
        raise ValueError(f"range '{text}' has a negative bound; dimensions are >= 0")
    if lo > hi:
        raise ValueError(f"range '{text}' is reversed; write {hi}:{lo}")
    return lo, hi


