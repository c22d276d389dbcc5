"""The tuning plan: what the tuner decided, per workload, in one versioned JSON file.

A plan is the hand-off between tuning (slow, measured) and dispatch emission
(fast, repeatable): for each workload of one module it lists the kernels the
selection kept, the decision tree that picks one from the dynamic dim
values, and, for every training shape, the chosen kernel with its predicted
and measured time, so a later reader can see why. ``dcmlir-emit-dispatch``
reads it; ``docs/plan.md`` documents the format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcmlir.dispatch.tree import DecisionTree, TreeReport, decode_float, encode_float, fit_tree
from dcmlir.ir.iree import versions
from dcmlir.records.database import ROUTES
from dcmlir.shapes import Shape
from dcmlir.space.candidates import Candidate, candidate_from_json
from dcmlir.target import Target, target_from_json
from dcmlir.workload import DimSource, Workload

__all__ = [
    "LEVELS",
    "PLAN_FORMAT",
    "ROUTES",
    "Plan",
    "PlanError",
    "PlannedDim",
    "PlannedKernel",
    "PlannedShape",
    "WorkloadPlan",
]

PLAN_FORMAT = 1
"""The format this dcmlir writes and reads; bumped on any incompatible change."""

"""Lowering routes a planned kernel may name (see :mod:`dcmlir.build.routes`)."""

LEVELS = ("input", "global-optimization")
"""Where in IREE's pipeline the plan's workloads were found and its dispatch is emitted:
the module as given (``input``), or the module after ``iree-compile
--compile-to=global-optimization`` (the forms codegen sees: folded transposes, fused
epilogues), compiled on with ``--compile-from=global-optimization``."""

"""Values of a workload's dynamic loops, in loop order."""


class PlanError(ValueError):
    """A plan that cannot be read or does not hold together; the message names the file."""


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
        source = _get(obj, "source", dict, where)
        lo, hi = _pair(_get(obj, "range", list, where), f"{where}.range")
        return cls(
            loop=_get(obj, "loop", int, where),
            role=_get(obj, "role", str, where),
            source=DimSource(
                _get(source, "operand", int, f"{where}.source"),
                _get(source, "dim", int, f"{where}.source"),
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
        key = _get(obj, "candidate_key", str, where)
        try:
            candidate = candidate_from_json(_get(obj, "candidate", dict, where))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}.candidate: {err}") from None
        if candidate.key() != key:
            raise ValueError(
                f"{where}: candidate_key '{key}' does not match its candidate ('{candidate.key()}')"
            )
        return cls(_get(obj, "index", int, where), candidate, _get(obj, "route", str, where))


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
        dims = _get(obj, "dims", list, where)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in dims):
            raise ValueError(f"{where}.dims must be a list of integers, got {dims!r}")
        predicted = decode_float(_get(obj, "predicted", object, where), f"{where}.predicted")
        if predicted is None:
            raise ValueError(f"{where}.predicted must be a number, got null")
        return cls(
            tuple(dims),
            _get(obj, "kernel", int, where),
            predicted,
            decode_float(_get(obj, "measured", object, where), f"{where}.measured"),
        )


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
    ) -> WorkloadPlan:
        """Fit the dispatcher of ``workload`` and record the selection behind it.

        ``kernels``: the selected candidates (their position is the kernel
        index); ``choices``: shape -> kernel index for every training shape
        (a shape is the dynamic loop values in loop order); ``predicted``:
        shape -> predicted seconds of every kernel (a cost table row: the
        chosen kernel's entry is stored, the row prices the tree's mistakes);
        ``measured``: shape -> measured seconds of the chosen kernel, where
        measured. ``ranges`` ({loop: (lo, hi)}) overrides the workload's.
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
                PlannedShape(
                    shape,
                    choices[shape],
                    float(predicted[shape][choices[shape]]),
                    _optional_float(times.get(shape)),
                )
                for shape in shapes
            ),
        )

    def in_range(self, dims: Mapping[int, int]) -> bool:
        """Whether a shape (``{loop: value}``) lies in the tuned range (else: fallback)."""
        return all(d.contains(dims[d.loop]) for d in self.dims)

    def select(self, dims: Mapping[int, int]) -> PlannedKernel | None:
        """The kernel the dispatch runs for a shape; None outside the range (IREE's default)."""
        if not self.in_range(dims):
            return None
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
        }

    @classmethod
    def from_json(cls, obj: Any, where: str) -> WorkloadPlan:
        dims = _get(obj, "dims", list, where)
        kernels = _get(obj, "kernels", list, where)
        shapes = _get(obj, "shapes", list, where)
        tree = _get(obj, "tree", dict, where)
        report = _get(obj, "tree_report", dict, where)
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
            key=_get(obj, "key", str, where),
            kind=_get(obj, "kind", str, where),
            op_name=_get(obj, "op", str, where),
            dims=tuple(PlannedDim.from_json(d, f"{where}.dims[{i}]") for i, d in enumerate(dims)),
            kernels=tuple(
                PlannedKernel.from_json(k, f"{where}.kernels[{i}]") for i, k in enumerate(kernels)
            ),
            tree=decoded_tree,
            report=decoded_report,
            shapes=tuple(
                PlannedShape.from_json(s, f"{where}.shapes[{i}]") for i, s in enumerate(shapes)
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


# --- the file --------------------------------------------------------------------------------


def _iree_version() -> str:
    return versions()["iree"]


def _dcmlir_version() -> str:
    return versions()["dcmlir"]


@dataclass(frozen=True)
class Plan:
    """Every workload plan of one module for one target."""

    target: Target
    source: str
    workloads: tuple[WorkloadPlan, ...]
    iree_version: str = field(default_factory=_iree_version)
    dcmlir_version: str = field(default_factory=_dcmlir_version)
    level: str = "input"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"level '{self.level}' is not one of {', '.join(LEVELS)}")
        keys = [w.key for w in self.workloads]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"workload keys appear more than once: {', '.join(duplicates)}")

    @property
    def target_key(self) -> str:
        return self.target.key()

    def keys(self) -> list[str]:
        return [w.key for w in self.workloads]

    def for_workload(self, key: str) -> WorkloadPlan | None:
        """The plan of the workload with structural key ``key``; None if it has none."""
        return next((w for w in self.workloads if w.key == key), None)

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "source": self.source,
            "target_key": self.target_key,
            "target": self.target.to_json(),
            "iree_version": self.iree_version,
            "dcmlir_version": self.dcmlir_version,
            "level": self.level,
            "workloads": [w.to_json() for w in self.workloads],
        }

    @classmethod
    def from_json(cls, obj: Any, origin: str = "<json>") -> Plan:
        """Decode a plan; any problem is a :class:`PlanError` naming ``origin`` (the file)."""
        try:
            return cls._decode(obj)
        except PlanError:
            raise
        except (TypeError, ValueError) as err:
            raise PlanError(f"plan {origin}: {err}") from None

    @classmethod
    def _decode(cls, obj: Any) -> Plan:
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        version = obj.get("format")
        if version != PLAN_FORMAT:
            raise ValueError(
                f"format {version!r} is not supported (this dcmlir reads format {PLAN_FORMAT})"
            )
        try:
            target = target_from_json(_get(obj, "target", dict, "plan"))
        except (TypeError, ValueError) as err:
            raise ValueError(f"target: {err}") from None
        stated = _get(obj, "target_key", str, "plan")
        if stated != target.key():
            raise ValueError(f"target_key '{stated}' does not match its target ('{target.key()}')")
        workloads = _get(obj, "workloads", list, "plan")
        return cls(
            target=target,
            source=_get(obj, "source", str, "plan"),
            workloads=tuple(
                WorkloadPlan.from_json(w, f"workloads[{i}]") for i, w in enumerate(workloads)
            ),
            iree_version=_get(obj, "iree_version", str, "plan"),
            dcmlir_version=_get(obj, "dcmlir_version", str, "plan"),
            level=_get(obj, "level", str, "plan") if "level" in obj else "input",
        )

    def dumps(self) -> str:
        """Indented JSON whose small objects (a shape, a kernel) stay on one line."""
        return _pretty(self.to_json()) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file; missing, not JSON, wrong format, bad fields: one PlanError."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise PlanError(f"plan {path}: cannot read: {err.strerror or err}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise PlanError(f"plan {path}: not JSON: {err}") from None
        return cls.from_json(obj, str(path))


# --- JSON helpers ----------------------------------------------------------------------------


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


def _get(obj: Any, name: str, kind: type, where: str) -> Any:
    """``obj[name]`` of JSON type ``kind`` (``object``: anything), or a ValueError naming it."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be an object, got {type(obj).__name__}")
    if name not in obj:
        raise ValueError(f"{where}: missing field '{name}'")
    value = obj[name]
    wrong = (kind is int and isinstance(value, bool)) or not isinstance(value, kind)
    if wrong:
        raise ValueError(
            f"{where}.{name} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {value!r}"
        )
    return value


def _pair(value: list[Any], where: str) -> tuple[int, int]:
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{where} must be [lo, hi] with integers, got {value!r}")
    return int(value[0]), int(value[1])


_LINE = 96


def _pretty(value: Any, indent: int = 0, prefix: int = 0) -> str:
    """JSON with nesting shown, but any value that fits on its line kept on one line.

    ``prefix``: characters already on the line before the value (a key).
    """
    flat = json.dumps(value, allow_nan=False)
    if indent + prefix + len(flat) <= _LINE or not isinstance(value, dict | list) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, list):
        items = [pad + _pretty(item, indent + 2) for item in value]
    else:
        items = []
        for key, item in value.items():
            label = f"{json.dumps(key)}: "
            items.append(pad + label + _pretty(item, indent + 2, len(label)))
    opening, closing = ("[", "]") if isinstance(value, list) else ("{", "}")
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing
