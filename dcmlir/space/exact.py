"""IREE's default built for one shape: :class:`ExactCandidate`, valid at that shape only.

At the smallest shapes a call is a handful of tiles, and what decides it is what a
micro-kernel cannot have: no remainder loops and no dynamic bounds. IREE's default on
the op with its extents static does (attention context at T = 5: IREE's static build
takes ``[1, 5, 64]`` workgroup tiles, ``[1, 5, 32]`` vector tiles and the whole depth of 5,
one tile of each). On the EPYC the static build ran 2.6x faster than IREE's default on
the dynamic op at that shape (one thread), while dcmlir's kernels, sized by the hardware
and not by a shape, were 1.03-1.20x at T <= 8 on two threads where the static builds were
1.36-1.46x (docs/design.md section 13). So the search may buy a shape its own build, at
the price of a compile and a branch: the dispatch runs it when every dynamic extent
equals ``shape`` (:mod:`dcmlir.search.exact_builds` decides where).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dcmlir.space.candidate import IreeTiles
from dcmlir.target import Target

__all__ = ["ExactCandidate"]


@dataclass(frozen=True)
class ExactCandidate(IreeTiles):
    """IREE's default on the op with its dynamic loops fixed to ``shape`` (the values of the
    dynamic loops, in loop order) by ``tensor.cast``: IREE compiles a static dispatch."""

    shape: tuple[int, ...]
    kind: ClassVar[str] = "exact"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))

    def key(self) -> str:
        return "exact:" + "x".join(map(str, self.shape))

    def problems(self, target: Target | None = None) -> list[str]:
        if not self.shape:
            return ["an exact build needs the value of at least one dynamic loop"]
        bad = [v for v in self.shape if isinstance(v, bool) or not isinstance(v, int) or v < 1]
        return [f"shape values must be positive integers, got {list(self.shape)}"] if bad else []

    def validate(self, target: Target | None = None) -> None:
        found = self.problems(target)
        if found:
            raise ValueError(f"exact build {self.shape!r}: {'; '.join(found)}")

    def serves(self, shape: tuple[int, ...]) -> bool:
        """Whether the build runs ``shape``: only its own."""
        return tuple(shape) == self.shape

    def features(self, target: Target | None = None) -> dict[str, float]:
        return {"is_default": 1.0, "is_exact": 1.0}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "shape": list(self.shape)}
