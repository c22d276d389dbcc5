"""Vendor-library peers: a workload's contraction computed by numpy (BLAS) or PyTorch.

They have the interface of :class:`dcmlir.iree.LoadedFunction` (``prepare``,
``invoke``, ``to_host``) so the runner's worker times them exactly like a
compiled function: inputs prepared once, only the library call in the timed
path. The contraction is an einsum spec (one letter per loop, as
:meth:`dcmlir.workload.Workload.einsum` writes it), run as a batched matmul on
views of the inputs (no copies), so the library's GEMM does the work. Both get
the thread count of the IREE device they are compared with (one for
``local-sync``, every core for ``local-task``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

HOST_LIBRARIES = ("numpy", "torch")


def device_threads(driver: str) -> int:
    """Threads an IREE runtime device computes with: one for ``local-sync``, else every core
    (``cuda``: the host threads that feed the GPU)."""
    if driver == "local-sync":
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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


class HostFunction:
    """One library's contraction with :class:`~dcmlir.iree.LoadedFunction`'s interface.

    ``gpu``: torch's tensors live on the CUDA device (cuBLAS) and a call waits for
    the device, as an IREE call on the ``cuda`` driver does.
    """

    def __init__(self, library: str, spec: str, threads: int, *, gpu: bool = False) -> None:
        if library not in HOST_LIBRARIES:
            known = ", ".join(HOST_LIBRARIES)
            raise ValueError(f"unknown host library '{library}' (known: {known})")
        self.library = library
        self.form = MatmulForm.parse(spec)
        self.name = spec
        self._torch: Any = None
        if gpu and library != "torch":
            raise ValueError(f"{library} runs on the host only")
        self.device = "cuda" if gpu else "cpu"
        if library == "torch":
            import torch  # optional: only a torch baseline needs it

            torch.set_num_threads(threads)
            self._torch = torch
        else:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=threads)  # stays in force in this (worker) process

    def prepare(self, inputs: Sequence[np.ndarray]) -> tuple[Any, Any]:
        a, b = (np.array(array, copy=True) for array in inputs)  # the library's own copies
        a, b = a.transpose(self.form.a_axes), b.transpose(self.form.b_axes)
        if self._torch is not None:
            torch = self._torch
            return torch.from_numpy(a).to(self.device), torch.from_numpy(b).to(self.device)
        return a, b

    def invoke(self, prepared: tuple[Any, Any]) -> Any:
        a, b = prepared
        result = a @ b
        if self.device == "cuda":
            self._torch.cuda.synchronize()
        return result

    def to_host(self, result: Any) -> list[np.ndarray]:
        array = result.cpu().numpy() if self._torch is not None else result
        return [np.ascontiguousarray(array.transpose(self.form.out_axes))]


def load_host_functions(
    library: str, specs: Sequence[str], driver: str
) -> tuple[dict[str, HostFunction], dict[str, str]]:
    """Like :func:`dcmlir.iree.load_functions`: (functions by spec, errors by spec)."""
    found: dict[str, HostFunction] = {}
    errors: dict[str, str] = {}
    for spec in specs:
        try:
            found[spec] = HostFunction(library, spec, device_threads(driver), gpu=driver == "cuda")
        except (ImportError, ValueError) as err:
            errors[spec] = f"{library}: {err}"
    return found, errors
