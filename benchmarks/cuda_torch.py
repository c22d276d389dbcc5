"""cuBLAS through torch as a measured variant of ``cuda_benchmark.py``.

A module of its own (not the script) so the Runner's worker process can unpickle
the factory of a :class:`~dcmlir.measure.variants.HostModel`: ``partial(TorchMatmul,
tf32, repeat)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class TorchMatmul:
    """``torch.matmul`` on CUDA tensors (cuBLAS), ``repeat`` launches per timed call."""

    def __init__(self, tf32: bool, repeat: int = 1) -> None:
        import torch  # optional: only this benchmark's torch columns need it

        self._torch = torch
        self.precision = "high" if tf32 else "highest"
        self.repeat = repeat

    def prepare(self, inputs: Sequence[np.ndarray]) -> Any:
        torch = self._torch
        torch.set_float32_matmul_precision(self.precision)
        a, b = (torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in inputs)
        out = torch.matmul(a, b)
        torch.cuda.synchronize()
        return a, b, out

    def invoke(self, prepared: Any) -> Any:
        a, b, out = prepared
        # process-wide: the fp32 and TF32 variants share the worker, so set per call
        self._torch.set_float32_matmul_precision(self.precision)
        for _ in range(self.repeat):
            self._torch.matmul(a, b, out=out)
        self._torch.cuda.synchronize()
        return out

    def to_host(self, result: Any) -> list[np.ndarray]:
        return [result.cpu().numpy()]
