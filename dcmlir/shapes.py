"""The shape vocabulary: one ``Shape``, and the range and shape-list grammars every command shares.

A :data:`Shape` is the values of a workload's dynamic loops, in loop order
(``(17,)`` for a ``?x768 @ 768x768`` matmul at T=17); the workload maps it to
loops with :meth:`dcmlir.workload.Workload.shape_dims`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "MAX_DIM",
    "MAX_SHAPES",
    "SHAPES_GRAMMAR",
    "Shape",
    "ceil_div",
    "coarse_to_fine",
    "parse_range",
    "parse_shapes",
    "spread",
]

MAX_DIM = 2**63 - 1
"""The largest extent an MLIR ``index`` (64-bit on every target dcmlir builds for) holds."""

Shape = tuple[int, ...]
"""The dynamic loops' values, in loop order."""


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive integers: tiles of ``b`` that cover ``a``."""
    return -(-a // b)


MAX_SHAPES = 256
"""How many shapes of a range dcmlir lists at most: beyond, it samples (memory and time
grow with the budget, not with the range: ``--dims 1:1000000000`` lists 256 values)."""


def spread(lo: int, hi: int, count: int = MAX_SHAPES) -> list[int]:
    """``lo..hi`` when it has at most ``count`` values; else about ``count`` of them: the
    small ones (up to ``lo..lo+7``, where kernels differ most) and the rest evenly spaced
    from ``lo`` to ``hi``, both ends included."""
    if hi - lo + 1 <= count:
        return list(range(lo, hi + 1))
    small = set(range(lo, lo + min(8, count // 2)))
    steps = max(count - len(small), 2)
    return sorted(small | {lo + (hi - lo) * i // (steps - 1) for i in range(steps)})


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
    if hi > MAX_DIM:
        raise ValueError(f"range '{text}': {hi} does not fit a 64-bit index (at most {MAX_DIM})")
    return lo, hi


# --- shape lists ---------------------------------------------------------------------------

SHAPES_GRAMMAR = "comma-separated N, LO:HI or LO:HI:STEP (docs/cli.md, 'Shapes')"
"""The grammar in one line, for option help texts (commands over several dims add NxM)."""

_INTEGER = re.compile(r"^-?[0-9]+$")


def _positive(token: str, item: str, dynamic_dims: int | None) -> int:
    """One value of ``item``: a positive integer, else a ValueError naming both."""
    token = token.strip()
    if not _INTEGER.match(token):
        raise ValueError(_not_an_item(item, dynamic_dims))
    value = int(token)
    if value < 1:
        where = "" if token == item else f" in '{item}'"
        raise ValueError(f"'{token}'{where} is not a positive integer (sizes start at 1)")
    return value


def _not_an_item(item: str, dynamic_dims: int | None) -> str:
    forms = "N, LO:HI or LO:HI:STEP" if dynamic_dims == 1 else "N, LO:HI, LO:HI:STEP or NxM"
    return f"'{item}' is not {forms} with positive integers"


def _values(item: str, dynamic_dims: int | None) -> list[int]:
    """``N`` -> [N]; ``LO:HI`` -> LO..HI; ``LO:HI:STEP`` -> LO, LO+STEP, ... <= HI."""
    parts = item.split(":")
    if len(parts) > 3:
        raise ValueError(_not_an_item(item, dynamic_dims))
    numbers = [_positive(part, item, dynamic_dims) for part in parts]
    if len(numbers) == 1:
        return numbers
    lo, hi, step = numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else 1
    if lo > hi:
        fix = ":".join([str(hi), str(lo), *([str(step)] if len(numbers) == 3 else [])])
        raise ValueError(f"range '{item}' is reversed; write {fix}")
    return list(range(lo, hi + 1, step))


def parse_shapes(text: str, dynamic_dims: int | None = 1) -> list[Shape]:
    """The shapes a ``--shapes`` value names, in the given order, duplicates dropped.

    Comma-separated items, each ``N``, ``LO:HI`` (every value, inclusive),
    ``LO:HI:STEP`` (``LO``, ``LO+STEP``, ... up to ``HI``) or ``NxM`` (one value per
    dynamic dim: as many values as ``dynamic_dims``); values are positive integers. ``N``
    and ranges set every dynamic dim to the value (``17`` is ``(17, 17)`` for two dims).
    ``dynamic_dims=None``: not known yet, ``N`` and ranges give one-value shapes and
    ``NxM`` its values, for the caller to widen and check. A ValueError (one line,
    naming the item) for anything else.
    """
    if dynamic_dims is not None and dynamic_dims < 1:
        raise ValueError(f"a workload with {dynamic_dims} dynamic dims has no shapes to give")
    if not text.strip():
        raise ValueError("no shapes given (write e.g. 1,7,32:128:32)")
    shapes: list[Shape] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise ValueError(f"'{text.strip()}' has an empty item (write e.g. 1,7,32:128:32)")
        if "x" in item:
            if ":" in item:
                raise ValueError(_not_an_item(item, dynamic_dims))
            values = tuple(_positive(part, item, dynamic_dims) for part in item.split("x"))
            if dynamic_dims is not None and len(values) != dynamic_dims:
                plural = "" if dynamic_dims == 1 else "s"
                raise ValueError(
                    f"'{item}' gives {len(values)} values, the workload has {dynamic_dims} "
                    f"dynamic dim{plural}"
                )
            shapes.append(values)
            continue
        shapes += [(value,) * (dynamic_dims or 1) for value in _values(item, dynamic_dims)]
    return list(dict.fromkeys(shapes))


def coarse_to_fine(shapes: Sequence[Shape]) -> list[Shape]:
    """Ends first, then midpoints of ever smaller intervals (a van der Corput order)."""
    count = len(shapes)
    if count <= 2:
        return list(shapes)
    order = [0, count - 1]
    seen = set(order)
    step = count - 1
    while len(order) < count and step > 1:
        half = step / 2
        position = half
        while position < count - 1:
            index = round(position)
            if index not in seen:
                seen.add(index)
                order.append(index)
            position += step
        step = half
    order += [i for i in range(count) if i not in seen]
    return [shapes[i] for i in order]
