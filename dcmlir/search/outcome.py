"""What a search returns: the chosen kernels, each shape's choice, and the evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dcmlir.shapes import Shape
from dcmlir.space import Candidate
from dcmlir.workload import Workload

__all__ = ["SearchResult"]


@dataclass
class SearchResult:
    workload: Workload
    shapes: list[Shape]
    candidates: list[Candidate]
    kernels: list[Candidate]  # the chosen ones, at most max_kernels
    choice: dict[Shape, int]  # shape -> index into kernels
    estimate: np.ndarray  # [shape, candidate] seconds used for the selection
    predicted: np.ndarray  # [shape, candidate] the final model's predictions
    measured: dict[tuple[str, Shape], float]  # median seconds (inf: failed)
    measurements: int  # pairs counted against the budget
    measured_now: int  # pairs timed by this run (the rest came from the records)
    rounds: int
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    exact: dict[Shape, float] = field(default_factory=dict)  # shapes given their own build

    def kernel_cost(self, shape: Shape, kernel: int) -> tuple[float, bool]:
        """(seconds, measured?) of one chosen kernel on one shape."""
        candidate = self.kernels[kernel]
        key = (candidate.key(), shape)
        if key in self.measured:
            return self.measured[key], True
        column = [c.key() for c in self.candidates].index(candidate.key())
        return float(self.estimate[self.shapes.index(shape), column]), False
