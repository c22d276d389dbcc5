"""The packed weight layout, in numpy: what the measuring worker hands a packed kernel.

A packed kernel (:mod:`dcmlir.space.packed`) reads its weight as
``[ceil(N/N0), ceil(K/K0), N0, K0]``, zero padded: what ``linalg.pack`` makes of
a ``K x N`` weight (``outer_dims_perm = [1, 0]``, ``inner_dims_pos = [1, 0]``) or
of an ``N x K`` one (``inner_dims_pos = [0, 1]``). In a model the weight is a
constant and IREE packs it once, before the first call; the worker packs it once
per input set, outside the timed calls, so a measurement times what a model pays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["WEIGHT_LAYOUTS", "PackedWeight"]

WEIGHT_LAYOUTS = ("kn", "nk")
"""How a projection holds its weight: ``K x N`` (``x @ W``) or ``N x K`` (``x @ W^T``)."""


@dataclass(frozen=True)
class PackedWeight:
    """A weight of layout ``layout`` packed into ``n0 x k0`` tiles."""

    layout: str
    n0: int
    k0: int

    def __post_init__(self) -> None:
        if self.layout not in WEIGHT_LAYOUTS:
            raise ValueError(f"weight layout {self.layout!r} is not one of {WEIGHT_LAYOUTS}")
        if self.n0 < 1 or self.k0 < 1:
            raise ValueError(f"tile {self.n0}x{self.k0} must be positive")

    def outer(self, k: int, n: int) -> tuple[int, int]:
        """``(ceil(N/N0), ceil(K/K0))``: the packed weight's outer dims."""
        return -(-n // self.n0), -(-k // self.k0)

    def shape(self, k: int, n: int) -> tuple[int, int, int, int]:
        return (*self.outer(k, n), self.n0, self.k0)

    def pack(self, weight: np.ndarray) -> np.ndarray:
        """The packed copy of ``weight`` (contiguous, zero padded), as ``linalg.pack`` makes it."""
        by_n = weight.T if self.layout == "kn" else weight
        n, k = by_n.shape
        outer_n, outer_k = self.outer(k, n)
        padded = np.zeros((outer_n * self.n0, outer_k * self.k0), dtype=weight.dtype)
        padded[:n, :k] = by_n
        tiles = padded.reshape(outer_n, self.n0, outer_k, self.k0).transpose(0, 2, 1, 3)
        return np.ascontiguousarray(tiles)
