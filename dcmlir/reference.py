"""The float64 reference every measured variant is checked against: a contraction by BLAS.

A workload's contraction is an einsum spec (one letter per loop, as
:meth:`dcmlir.workload.Workload.einsum` writes it); :func:`contract` runs it as a
batched matmul on views of the inputs, so numpy's GEMM does the work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MatmulForm", "contract"]


@dataclass(frozen=True)
class MatmulForm:
    """How an einsum contraction maps onto ``(batch, m, k) @ (batch, k, n)``.

    ``a_axes``/``b_axes`` reorder the inputs' axes into that form; ``out_axes``
    reorders ``(batch, m, n)`` into the output's axis order.
    """

    a_axes: tuple[int, ...]
    b_axes: tuple[int, ...]
    out_axes: tuple[int, ...]

    @classmethod
    def parse(cls, spec: str) -> MatmulForm:
        """``"ac,cb->ab"`` and the like: one batch, m, n and k letter at most each."""
        inputs, _, out = spec.partition("->")
        a, _, b = inputs.partition(",")
        if not (a and b and out):
            raise ValueError(f"'{spec}' is not a two-input einsum spec")
        batch = [c for c in out if c in a and c in b]
        m = [c for c in out if c in a and c not in b]
        n = [c for c in out if c in b and c not in a]
        k = [c for c in a if c in b and c not in out]
        if len(m) != 1 or len(n) != 1 or len(k) != 1 or len(batch) > 1:
            raise ValueError(f"'{spec}' is not a (batched) matmul with one m, n and k loop")
        a_order, b_order = [*batch, m[0], k[0]], [*batch, k[0], n[0]]
        if sorted(a_order) != sorted(a) or sorted(b_order) != sorted(b):
            raise ValueError(f"'{spec}': an input has a loop the matmul form does not use")
        result = [*batch, m[0], n[0]]
        return cls(
            tuple(a.index(c) for c in a_order),
            tuple(b.index(c) for c in b_order),
            tuple(result.index(c) for c in out),
        )


def contract(spec: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.einsum(spec, a, b)`` through the BLAS matmul when the spec is a (batched) matmul.

    The float64 reference every variant is checked against: plain ``np.einsum``
    runs a scalar loop (0.33 s for 128x768 @ 768x2304, against 0.06 s), and the
    checks run on every input set of every shape measured.
    """
    try:
        form = MatmulForm.parse(spec)
    except ValueError:
        return np.einsum(spec, a, b)
    product = a.transpose(form.a_axes) @ b.transpose(form.b_axes)
    return np.ascontiguousarray(product.transpose(form.out_axes))
