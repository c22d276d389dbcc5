"""What the Runner times one shape on (:class:`ShapeProblem`) and what it found
(:class:`ShapeResult`): plain data that the bench, the tuner and the fakes share."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dcmlir.codegen.kernel import check_tolerance, input_dtypes, input_shapes
from dcmlir.layouts import weight_seed
from dcmlir.measure.timing import Inputs, Timing, random_inputs
from dcmlir.workload import Workload

__all__ = ["ShapeProblem", "ShapeResult"]


@dataclass(frozen=True)
class ShapeProblem:
    """The inputs of one shape: argument shapes, numpy dtypes, and what outputs must be.

    ``einsum``: the worker computes the expected output as this contraction in
    float64. ``reference``: the parent computes the expected outputs of each
    input set (a whole model's float64 twin, or IREE's default build) and sends
    them with the inputs. Exactly one of the two.
    """

    input_shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    einsum: str | None = None
    rtol: float | None = None  # the check's tolerance; None: the settings' (f32's)
    reference: Callable[[Inputs], Sequence[np.ndarray]] | None = None
    # (input, seed): an input that is the same array in every set (a weight, as in a
    # model: :func:`dcmlir.layouts.fixed_weight`); kernel modules may hold it as a constant
    fixed: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        shapes = tuple(tuple(int(d) for d in shape) for shape in self.input_shapes)
        object.__setattr__(self, "input_shapes", shapes)  # hashable, whatever was given
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        if (self.einsum is None) == (self.reference is None):
            raise ValueError("a ShapeProblem needs an einsum or a reference, not both")
        if len(self.dtypes) != len(self.input_shapes):
            raise ValueError("a ShapeProblem needs one dtype per input")

    @classmethod
    def of(
        cls, workload: Workload, dims: Mapping[int, int], *, fixed_weight: bool = False
    ) -> ShapeProblem:
        """The problem of one shape (``{loop: value}``) of a workload, with its tolerance;
        ``fixed_weight``: input 1 is the workload's fixed weight in every set."""
        fixed = ((1, weight_seed(workload.key)),) if fixed_weight else ()
        return cls(
            tuple(input_shapes(workload, dims)),
            tuple(np.dtype(t).name for t in input_dtypes(workload)),
            workload.einsum(),
            check_tolerance(workload),
            fixed=fixed,
        )

    @property
    def elements(self) -> int:
        """Input elements of one set: what "the largest shape" means for a warm-up."""
        return sum(math.prod(shape) for shape in self.input_shapes)

    def arrays(self, sets: int, seed: int) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
        """(input sets, expected outputs of each) as the parent computes them."""
        assert self.reference is not None
        inputs = [
            [array.astype(dtype) for array, dtype in zip(arrays, self.dtypes, strict=True)]
            for arrays in random_inputs(self.input_shapes, sets=sets, seed=seed)
        ]
        return inputs, [list(self.reference(arrays)) for arrays in inputs]


@dataclass
class ShapeResult:
    """Timings of the variants of one shape, measured side by side in one worker."""

    timings: dict[str, Timing]
    baseline: str | None = None
    baseline_before: float | None = None
    baseline_after: float | None = None
    call_by_call: bool = False  # sampled call by call: asked for, or every call was short
    # with several threads, short calls are sampled back to back too (Runner._sustained_too):
    # each variant's median so, and those whose samples so were slower and replaced their
    # call-by-call ones
    back_to_back: dict[str, float] = field(default_factory=dict)
    sustained: set[str] = field(default_factory=set)
    extra_rounds: int = 0  # rounds taken because a variant's samples had not settled

    @property
    def drift(self) -> float | None:
        """Relative change of the baseline from before to after the rounds."""
        if not self.baseline_before or self.baseline_after is None:
            return None
        return self.baseline_after / self.baseline_before - 1.0

    def __getitem__(self, name: str) -> Timing:
        return self.timings[name]

    @property
    def medians(self) -> dict[str, float]:
        return {name: t.median for name, t in self.timings.items()}

    def ratio(self, name: str, baseline: str) -> float:
        """Time of ``name`` over time of ``baseline`` (>1: slower), median of per-round ratios.

        Pairing samples of the same round cancels most of the machine's drift.
        Infinite when ``name`` failed, NaN when only the baseline did.
        """
        mine, theirs = self[name], self[baseline]
        if not mine.ok:
            return math.inf
        if not theirs.ok:
            return math.nan
        return statistics.median(a / b for a, b in zip(mine.samples, theirs.samples, strict=False))
