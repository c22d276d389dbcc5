"""Vendor-library peers: a workload's contraction computed by numpy (BLAS) or PyTorch.

They have the interface of :class:`dcmlir.ir.iree.LoadedFunction` (``prepare``,
``invoke``, ``to_host``) so the runner's worker times them
(:class:`~dcmlir.measure.variants.HostLibrary`) exactly like a compiled
function: inputs prepared once, only the library call in the timed path. The
contraction is an einsum spec (one letter per loop, as
:meth:`dcmlir.workload.Workload.einsum` writes it), run as a batched matmul on
views of the inputs (no copies), so the library's GEMM does the work. Both get
the thread count of the IREE device they are compared with (one for
``local-sync``, every core for ``local-task``). :class:`HostCall` wraps any
other Python function of host arrays the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dcmlir.reference import MatmulForm

HOST_LIBRARIES = ("numpy", "torch")


def device_threads(driver: str) -> int:
    """Threads an IREE runtime device computes with: one for ``local-sync``, else every core
    (``cuda``: the host threads that feed the GPU)."""
    if driver == "local-sync":
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


class HostFunction:
    """One library's contraction with :class:`~dcmlir.ir.iree.LoadedFunction`'s interface.

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


class HostCall:
    """Any picklable Python function of host arrays, as a callee (timed as a
    :class:`~dcmlir.measure.variants.HostModel`: ``partial(HostCall, np.matmul)``).

    Each input set is copied once when prepared; the timed call is ``fn(*arrays)``.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def prepare(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array(array, copy=True) for array in inputs]

    def invoke(self, prepared: list[np.ndarray]) -> Any:
        return self.fn(*prepared)

    def to_host(self, result: Any) -> list[np.ndarray]:
        if isinstance(result, np.ndarray):
            return [result]
        return [np.asarray(r) for r in result]
