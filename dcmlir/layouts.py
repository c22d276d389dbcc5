"""The weight a module holds as a constant, the same array in every process.

A model's weight is a constant: IREE packs it once (data tiling, the packed
family of :mod:`dcmlir.space.packed`), outside the call. To time a packed kernel
as a model runs it, its kernel module holds the weight as a ``util.global`` and
the measuring worker feeds every input set that same array as the weight input,
so the output check still holds. :func:`fixed_weight` is that array: a function of
a shape and a seed only, computed the same way where the module is written and in
the worker.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["fixed_weight", "resource_trailer", "weight_seed"]


def weight_seed(key: str) -> int:
    """The seed of a workload's fixed weight: from its structural key (stable everywhere)."""
    return int(key[:8], 16)


def fixed_weight(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Values in [-1, 1), never a splat: what every input set's weight is."""
    rng = np.random.default_rng(seed)
    return (rng.random(shape) * 2.0 - 1.0).astype(dtype)


def resource_trailer(name: str, array: np.ndarray) -> str:
    """The ``{-# dialect_resources #-}`` trailer holding ``array`` as the blob ``name``
    (what a ``dense_resource<name>`` constant of a module reads): the alignment as a
    little-endian u32, then the raw data, as MLIR writes it."""
    data = np.ascontiguousarray(array)
    alignment = max(4, data.dtype.itemsize)
    blob = "0x" + struct.pack("<I", alignment).hex().upper() + data.tobytes().hex().upper()
    return f'{{-# dialect_resources: {{ builtin: {{ {name}: "{blob}" }} }} #-}}'
