"""One workload's part of a plan: its dynamic dims, kept kernels, decision tree and shapes.

:meth:`WorkloadPlan.build` is where a search's selection becomes a dispatcher: it
fits the tree (:func:`~dcmlir.dispatch.tree.fit_tree`) over the training shapes and
records, for each, the chosen kernel with its predicted and measured time.
:meth:`WorkloadPlan.select` is the tree as the emitted dispatch evaluates it, in
Python. The file around these is :mod:`dcmlir.dispatch.plan`.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcmlir.dispatch.json_fields import get_field, int_pair
from dcmlir.dispatch.tree import DecisionTree, TreeReport, decode_float, encode_float, fit_tree
from dcmlir.records import ROUTES
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, ExactCandidate, candidate_from_json
from dcmlir.workload import DimSource, Workload

__all__ = ["ExactShape", "PlannedDim", "PlannedKernel", "PlannedShape", "WorkloadPlan"]

# --- pieces ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedDim:
    """A dynamic loop: where its extent lives at run time and the range the plan covers."""

    loop: int
    role: str
    source: DimSource
    range: tuple[int, int]  # inclusive

    def __post_init__(self) -> None:
        lo, hi = self.range
        if not 0 <= lo <= hi:
            raise ValueError(f"loop d{self.loop}: range [{lo}, {hi}] is not 0 <= lo <= hi")

    def contains(self, value: int) -> bool:
        return self.range[0] <= value <= self.range[1]

    def describe(self) -> str:
        return f"d{self.loop}={self.range[0]}:{self.range[1]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "loop": self.loop,
            "role": self.role,
            "source": {"operand": self.source.operand, "dim": self.source.dim},
            "range": list(self.range),
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> PlannedDim:
        source = get_field(obj, "source", dict, where)
        lo, hi = int_pair(get_field(obj, "range", list, where), f"{where}.range")
        return cls(
            loop=get_field(obj, "loop", int, where),
            role=get_field(obj, "role", str, where),
            source=DimSource(
                get_field(source, "operand", int, f"{where}.source"),
                get_field(source, "dim", int, f"{where}.source"),
            ),
            range=(lo, hi),
        )


@dataclass(frozen=True)
class PlannedKernel:
    """One kernel a workload's dispatch may run: index ``index`` in the plan's list."""

    index: int
    candidate: Candidate
    route: str = "config"

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise ValueError(
                f"kernel {self.index}: unknown route '{self.route}' (known: {', '.join(ROUTES)})"
            )

    @property
    def candidate_key(self) -> str:
        return self.candidate.key()

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "candidate_key": self.candidate_key,
            "route": self.route,
            "candidate": self.candidate.to_json(),
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> PlannedKernel:
        key = get_field(obj, "candidate_key", str, where)
        try:
            candidate = candidate_from_json(get_field(obj, "candidate", dict, where))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}.candidate: {err}") from None
        if candidate.key() != key:
            raise ValueError(
                f"{where}: candidate_key '{key}' does not match its candidate ('{candidate.key()}')"
            )
        return cls(
            get_field(obj, "index", int, where), candidate, get_field(obj, "route", str, where)
        )


@dataclass(frozen=True)
class PlannedShape:
    """One training shape: the chosen kernel and its time in seconds (measured: None if not)."""

    dims: Shape
    kernel: int
    predicted: float
    measured: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "dims": list(self.dims),
            "kernel": self.kernel,
            "predicted": encode_float(self.predicted),
            "measured": encode_float(self.measured),
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> PlannedShape:
        dims = get_field(obj, "dims", list, where)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in dims):
            raise ValueError(f"{where}.dims must be a list of integers, got {dims!r}")
        predicted = decode_float(get_field(obj, "predicted", object, where), f"{where}.predicted")
        if predicted is None:
            raise ValueError(f"{where}.predicted must be a number, got null")
        return cls(
            tuple(dims),
            get_field(obj, "kernel", int, where),
            predicted,
            decode_float(get_field(obj, "measured", object, where), f"{where}.measured"),
        )


@dataclass(frozen=True)
class ExactShape:
    """A shape the dispatch runs on its own build (:class:`~dcmlir.space.ExactCandidate`),
    before the tree: ``kernel`` is that build's index in the plan's kernels."""

    dims: Shape
    kernel: int

    def to_json(self) -> dict[str, Any]:
        return {"dims": list(self.dims), "kernel": self.kernel}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> ExactShape:
        dims = get_field(obj, "dims", list, where)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in dims):
            raise ValueError(f"{where}.dims must be a list of integers, got {dims!r}")
        return cls(tuple(dims), get_field(obj, "kernel", int, where))


# --- one workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadPlan:
    """Kernels and dispatcher of one workload (every op with structural key ``key``)."""

    key: str
    kind: str
    op_name: str
    dims: tuple[PlannedDim, ...]
    kernels: tuple[PlannedKernel, ...]
    tree: DecisionTree
    report: TreeReport
    shapes: tuple[PlannedShape, ...] = field(default=(), repr=False)
    exact: tuple[ExactShape, ...] = ()  # shapes with their own build, checked before the tree

    def __post_init__(self) -> None:
        if not self.dims:
            raise ValueError(f"workload {self.key}: no dynamic dims, nothing to dispatch on")
        if not self.kernels:
            raise ValueError(f"workload {self.key}: no kernels")
        for position, kernel in enumerate(self.kernels):
            if kernel.index != position:
                raise ValueError(
                    f"workload {self.key}: kernel at position {position} has index {kernel.index}"
                )
        loops = tuple(d.loop for d in self.dims)
        if self.tree.loops != loops:
            raise ValueError(
                f"workload {self.key}: the tree is over loops {list(self.tree.loops)}, "
                f"the dims are loops {list(loops)}"
            )
        for leaf in self.tree.leaves():
            self._check_kernel(leaf.kernel, "a tree leaf")
        for shape in self.shapes:
            self._check_kernel(shape.kernel, f"shape {list(shape.dims)}")
            if len(shape.dims) != len(self.dims):
                raise ValueError(
                    f"workload {self.key}: shape {list(shape.dims)} has {len(shape.dims)} "
                    f"values for {len(self.dims)} dynamic dims"
                )
        for found in self.exact:
            self._check_exact(found)

    def _check_exact(self, found: ExactShape) -> None:
        where = f"workload {self.key}: exact shape {list(found.dims)}"
        self._check_kernel(found.kernel, f"exact shape {list(found.dims)}")
        candidate = self.kernels[found.kernel].candidate
        if not isinstance(candidate, ExactCandidate) or candidate.shape != found.dims:
            raise ValueError(
                f"{where} names kernel {found.kernel} ({candidate.key()}), "
                f"not its own build (exact:{'x'.join(map(str, found.dims))})"
            )
        if len(found.dims) != len(self.dims) or not self.in_range(
            dict(zip((d.loop for d in self.dims), found.dims, strict=False))
        ):
            raise ValueError(f"{where} is not a shape of the range {self.describe_range()}")

    def runs(self, kind: type | types.UnionType) -> bool:
        """Whether any of the plan's kernels is a candidate of ``kind`` (a class or a union)."""
        return any(isinstance(kernel.candidate, kind) for kernel in self.kernels)

    def _check_kernel(self, index: int, what: str) -> None:
        if not 0 <= index < len(self.kernels):
            raise ValueError(
                f"workload {self.key}: {what} names kernel {index}, "
                f"the plan has {len(self.kernels)} (0..{len(self.kernels) - 1})"
            )

    @classmethod
    def build(
        cls,
        workload: Workload,
        kernels: Sequence[Candidate],
        choices: Mapping[Shape, int],
        predicted: Mapping[Shape, Sequence[float]],
        measured: Mapping[Shape, float | None] | None = None,
        max_depth: int | None = None,
        *,
        routes: str | Sequence[str] = "config",
        ranges: Mapping[int, tuple[int, int]] | None = None,
        exact: Mapping[Shape, float] | None = None,
    ) -> WorkloadPlan:
        """Fit the dispatcher of ``workload`` and record the selection behind it.

        ``kernels``: the selected candidates (their position is the kernel
        index); ``choices``: shape -> kernel index for every training shape
        (a shape is the dynamic loop values in loop order); ``predicted``:
        shape -> predicted seconds of every kernel (a cost table row: the
        chosen kernel's entry is stored, the row prices the tree's mistakes);
        ``measured``: shape -> measured seconds of the chosen kernel, where
        measured. ``ranges`` ({loop: (lo, hi)}) overrides the workload's. ``exact``:
        shape -> measured seconds of the shapes given their own build (appended to the
        kernels, run before the tree; the tree is fitted without them).
        """
        dims = _planned_dims(workload, ranges)
        shapes = sorted(choices)
        for shape in shapes:
            _check_shape(shape, dims)
            if shape not in predicted:
                raise ValueError(f"predicted has no cost row for shape {list(shape)}")
            if len(predicted[shape]) != len(kernels):
                raise ValueError(
                    f"predicted row of shape {list(shape)} has {len(predicted[shape])} "
                    f"costs for {len(kernels)} kernels"
                )
        route_list = [routes] * len(kernels) if isinstance(routes, str) else list(routes)
        if len(route_list) != len(kernels):
            raise ValueError(f"{len(route_list)} routes for {len(kernels)} kernels")
        tree, report = fit_tree(
            shapes,
            [choices[s] for s in shapes],
            costs=[predicted[s] for s in shapes],
            max_depth=max_depth,
            loops=[d.loop for d in dims],
        )
        times = dict(measured or {})
        builds = sorted(exact or {})
        first = len(kernels)
        kernels = [*kernels, *(ExactCandidate(shape) for shape in builds)]
        route_list += ["config"] * len(builds)
        costs = {shape: float(seconds) for shape, seconds in (exact or {}).items()}
        return cls(
            key=workload.key,
            kind=workload.kind,
            op_name=workload.op_name,
            dims=dims,
            kernels=tuple(
                PlannedKernel(index, candidate, route)
                for index, (candidate, route) in enumerate(zip(kernels, route_list, strict=True))
            ),
            tree=tree,
            report=report,
            shapes=tuple(
                PlannedShape(shape, first + builds.index(shape), costs[shape], costs[shape])
                if shape in costs
                else PlannedShape(
                    shape,
                    choices[shape],
                    float(predicted[shape][choices[shape]]),
                    _optional_float(times.get(shape)),
                )
                for shape in shapes
            ),
            exact=tuple(ExactShape(shape, first + i) for i, shape in enumerate(builds)),
        )

    def in_range(self, dims: Mapping[int, int]) -> bool:
        """Whether a shape (``{loop: value}``) lies in the tuned range (else: fallback)."""
        return all(d.contains(dims[d.loop]) for d in self.dims)

    def select(self, dims: Mapping[int, int]) -> PlannedKernel | None:
        """The kernel the dispatch runs for a shape; None outside the range (IREE's default)."""
        if not self.in_range(dims):
            return None
        values = tuple(dims[d.loop] for d in self.dims)
        for found in self.exact:
            if found.dims == values:
                return self.kernels[found.kernel]
        return self.kernels[self.tree.select(dims)]

    def describe_range(self) -> str:
        return ", ".join(d.describe() for d in self.dims)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "op": self.op_name,
            "dims": [d.to_json() for d in self.dims],
            "kernels": [k.to_json() for k in self.kernels],
            "tree": self.tree.to_json(),
            "tree_report": self.report.to_json(),
            "shapes": [s.to_json() for s in self.shapes],
            "exact": [e.to_json() for e in self.exact],
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> WorkloadPlan:
        dims = get_field(obj, "dims", list, where)
        kernels = get_field(obj, "kernels", list, where)
        shapes = get_field(obj, "shapes", list, where)
        exact = obj.get("exact", []) if isinstance(obj, dict) else []  # older plans have none
        if not isinstance(exact, list):
            raise ValueError(f"{where}.exact must be a list, got {type(exact).__name__}")
        tree = get_field(obj, "tree", dict, where)
        report = get_field(obj, "tree_report", dict, where)
        try:
            decoded_tree = DecisionTree.from_json(tree)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}.tree: {err}") from None
        try:
            decoded_report = TreeReport.from_json(report)
        except KeyError as err:
            raise ValueError(f"{where}.tree_report: missing field {err}") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}.tree_report: {err}") from None
        return cls(
            key=get_field(obj, "key", str, where),
            kind=get_field(obj, "kind", str, where),
            op_name=get_field(obj, "op", str, where),
            dims=tuple(PlannedDim.from_json(d, f"{where}.dims[{i}]") for i, d in enumerate(dims)),
            kernels=tuple(
                PlannedKernel.from_json(k, f"{where}.kernels[{i}]") for i, k in enumerate(kernels)
            ),
            tree=decoded_tree,
            report=decoded_report,
            shapes=tuple(
                PlannedShape.from_json(s, f"{where}.shapes[{i}]") for i, s in enumerate(shapes)
            ),
            exact=tuple(
                ExactShape.from_json(e, f"{where}.exact[{i}]") for i, e in enumerate(exact)
            ),
        )


def _planned_dims(
    workload: Workload, ranges: Mapping[int, tuple[int, int]] | None
) -> tuple[PlannedDim, ...]:
    dims = []
    for dim in workload.dynamic_dims:
        found = (ranges or {}).get(dim.index, dim.range)
        if found is None:
            raise ValueError(
                f"workload {workload.key}: loop d{dim.index} has no range; run "
                "dcmlir-annotate-ranges first or pass ranges={loop: (lo, hi)}"
            )
        dims.append(PlannedDim(dim.index, dim.role, dim.source, (int(found[0]), int(found[1]))))
    if not dims:
        raise ValueError(f"workload {workload.key} has no dynamic dims")
    return tuple(dims)


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _check_shape(shape: Shape, dims: Sequence[PlannedDim]) -> None:
    if len(shape) != len(dims):
        raise ValueError(f"shape {list(shape)} has {len(shape)} values for {len(dims)} dims")
    for value, dim in zip(shape, dims, strict=True):
        if not dim.contains(value):
            raise ValueError(f"shape {list(shape)}: d{dim.loop}={value} is outside {dim.range}")
