"""Each baseline of ``dcmlir bench`` made ready to time: built, and a variant per shape.

:func:`prepare` turns a baseline's name into a :class:`Prepared`: the variant
the runner times at each shape (a function of a compiled module, or a host
library), or the one-line reason it cannot run here. The module texts come from
:mod:`dcmlir.bench.baselines`; :class:`Builder` compiles them, with operand 1 a
module constant in ``constant`` weight mode (:mod:`dcmlir.bench.weights`), so
every IREE-built baseline sees the weight as a model would.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from dcmlir.bench.baselines import (
    bucketing_module,
    leaf_boxes,
    oracle_module,
    shape_label,
    specialized_module,
    static_function,
    static_module,
)
from dcmlir.bench.weights import WeightError, with_constant_weight
from dcmlir.build.compiler import BuildError, build
from dcmlir.codegen.packed import DATA_TILING_FLAGS
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.driver import TuneError
from dcmlir.driver import compile as compile_plan
from dcmlir.measure.host import WeightedHost, device_threads
from dcmlir.measure.loop import MeasureReport
from dcmlir.measure.variants import HostLibrary, HostModel, ModuleFunction, Variant
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, candidate_from_key
from dcmlir.target import Target
from dcmlir.workload import Workload

__all__ = ["DATA_TILING_FLAGS", "Builder", "Context", "Prepared", "not_installed", "prepare"]

# IREE's data tiling: operands packed into its tiled layout (a constant weight once, in an
# initializer), the contraction as linalg.mmt4d lowered to the mmt4d microkernel
ONNX_FLOATS = ("f16", "f32", "f64")  # element types ONNX's MatMul computes in


@dataclass
class Prepared:
    """A baseline ready to time: the variant to run at each shape (or why it cannot run)."""

    variants: dict[Shape, Variant] = field(default_factory=dict)
    kernels: dict[Shape, str] = field(default_factory=dict)
    unavailable: str | None = None


class Builder:
    """Compiles each baseline's module once (cached) into a file the runner loads.

    ``weight``: the constant operand 1 (``constant`` mode); every module built is
    first rewritten so that its functions take only the activation.
    """

    def __init__(
        self,
        workdir: Path,
        target: Target,
        source: str,
        stream: IO[str],
        weight: np.ndarray | None = None,
        weight_type: str = "",
    ) -> None:
        self.workdir, self.target, self.source, self.stream = workdir, target, source, stream
        self.weight, self.weight_type = weight, weight_type
        self.seconds = 0.0

    def module(self, text: str) -> str:
        """``text`` as this run's weight mode builds it."""
        if self.weight is None:
            return text
        return with_constant_weight(text, self.weight, self.weight_type)

    def __call__(self, label: str, text: str, flags: Sequence[str] = ()) -> str:
        print(f"dcmlir bench: building {label}", file=self.stream)
        built = build(self.module(text), self.target, flags, source_name=f"{self.source} ({label})")
        self.seconds += built.seconds
        return self.save(label, built.vmfb)

    def save(self, label: str, vmfb: bytes) -> str:
        path = self.workdir / f"{label}.vmfb"
        path.write_bytes(vmfb)
        return str(path)


@dataclass
class Context:
    """What every baseline's preparation may need."""

    input: Path
    text: str
    workload: Workload
    planned: WorkloadPlan
    plan: Plan
    shapes: list[Shape]
    oracle: MeasureReport | None
    buckets: tuple[int, ...]
    device: str
    build: Builder
    function: str  # the module's function that holds the workload (not always ``main``)
    threads: int = 1  # what the device and every peer compute with


def prepare(baseline: str, ctx: Context) -> Prepared:
    """Build one baseline; a build failure becomes the baseline's reason, not an exception."""
    try:
        return _PREPARERS[baseline](ctx)
    except BuildError as err:
        return Prepared(unavailable=f"IREE could not compile it: {str(err).splitlines()[0]}")
    except WeightError as err:
        return Prepared(unavailable=f"no constant weight: {err}")


def _everywhere(ctx: Context, name: str, path: str, function: str | None = None) -> Prepared:
    """``function`` at every shape; by default the user's own (their module, built by IREE)."""
    called = function if function is not None else ctx.function
    return Prepared({s: ModuleFunction(name, path, called) for s in ctx.shapes})


def _prepare_dcmlir(ctx: Context) -> Prepared:
    source = ctx.input
    if ctx.build.weight is not None:  # the user's module with the constant weight, dispatched
        source = ctx.build.workdir / f"{ctx.input.stem}-constant-weight.mlir"
        source.write_text(ctx.build.module(ctx.text))
    try:
        compiled = compile_plan(source, plan=ctx.plan, stream=ctx.build.stream)
    except TuneError as err:
        return Prepared(unavailable=str(err).splitlines()[0])
    if ctx.build.weight is not None and not compiled.dispatched:
        return Prepared(unavailable="the plan's workload is not in the constant-weight module")
    prepared = _everywhere(ctx, "dcmlir", ctx.build.save("dcmlir", compiled.vmfb))
    for shape in ctx.shapes:
        chosen = ctx.planned.select(ctx.workload.shape_dims(shape))
        prepared.kernels[shape] = chosen.candidate_key if chosen else "IREE default (out of range)"
    return prepared


def _prepare_default(ctx: Context) -> Prepared:
    return _everywhere(ctx, "iree-default", ctx.build("iree-default", ctx.text))


def _prepare_data_tiling(ctx: Context) -> Prepared:
    path = ctx.build("iree-data-tiling", ctx.text, DATA_TILING_FLAGS)
    prepared = _everywhere(ctx, "iree-data-tiling", path)
    prepared.kernels = {s: "data tiling, mmt4d ukernel" for s in ctx.shapes}
    return prepared


def _prepare_static(ctx: Context) -> Prepared:
    path = ctx.build("iree-static", static_module(ctx.workload, ctx.shapes))
    return Prepared(
        {s: ModuleFunction("iree-static", path, static_function(s)) for s in ctx.shapes},
        {s: f"static {shape_label(s)}" for s in ctx.shapes},
    )


def _prepare_specialized(ctx: Context) -> Prepared:
    boxes = [box for box, _ in leaf_boxes(ctx.planned.tree, ctx.planned.dims)]
    module = specialized_module(ctx.text, ctx.workload.key, boxes)
    prepared = _everywhere(ctx, "iree-specialized", ctx.build("iree-specialized", module))
    prepared.kernels = {s: f"{len(boxes)} ranges" for s in ctx.shapes}
    return prepared


def _prepare_oracle(ctx: Context) -> Prepared:
    assert ctx.oracle is not None
    best = {s: ctx.oracle.best(s) for s in ctx.shapes}
    usable = {s: key for s, (key, seconds) in best.items() if math.isfinite(seconds)}
    if not usable:
        return Prepared(unavailable="no candidate of the space ran at any shape")
    picks = sorted(set(usable.values()))
    module = oracle_module(ctx.workload, [candidate_from_key(k) for k in picks])
    path = ctx.build("oracle", module)
    return Prepared(
        {s: ModuleFunction("oracle", path, f"o{picks.index(k)}") for s, k in usable.items()},
        dict(usable),
    )


def _prepare_bucketing(ctx: Context) -> Prepared:
    assert ctx.oracle is not None
    ranks = len(ctx.workload.dynamic_dims)
    tuned: dict[int, Candidate] = {}
    for size in ctx.buckets:
        key, seconds = ctx.oracle.best((size,) * ranks)
        if math.isfinite(seconds):
            tuned[size] = candidate_from_key(key)
    if not tuned:
        return Prepared(unavailable="no candidate ran at any bucket size")
    module = bucketing_module(ctx.workload, tuned)  # a module of dcmlir's: its @main
    prepared = _everywhere(ctx, "bucketing", ctx.build("bucketing", module), "main")
    for shape in ctx.shapes:
        size = next((b for b in sorted(tuned) if max(shape) <= b), None)
        prepared.kernels[shape] = (
            f"pad to {size}: {tuned[size].key()}" if size else "IREE default (above buckets)"
        )
    return prepared


_EXTRAS = {"numpy": "numpy", "torch": "torch", "onnxruntime": "bench"}


def not_installed(library: str) -> str | None:
    """Why a peer library (numpy, torch, onnxruntime) cannot run here, or None: it is installed."""
    if importlib.util.find_spec(library) is not None:
        return None
    return f"{library} is not installed (pip install 'dcmlir[{_EXTRAS[library]}]')"


def _host_preparer(library: str) -> Callable[[Context], Prepared]:
    def prepare_host(ctx: Context) -> Prepared:
        if library != "torch" and ctx.device == "cuda":
            return Prepared(unavailable=f"{library} runs on the host; the plan is for a GPU")
        missing = not_installed(library)
        if missing is not None:
            return Prepared(unavailable=missing)
        types = set(ctx.workload.element_types)
        if library == "onnxruntime" and (len(types) != 1 or not types <= set(ONNX_FLOATS)):
            return Prepared(
                unavailable="ONNX MatMul computes in one float type; the workload is "
                + ",".join(ctx.workload.element_types)
            )
        spec = ctx.workload.einsum()
        variant: Variant = HostLibrary(library, library, spec)
        if ctx.build.weight is not None:  # the same constant weight as the IREE modules
            threads = ctx.threads or device_threads(ctx.device)  # cuda: the host threads
            gpu = ctx.device == "cuda"
            variant = HostModel(
                library, WeightedHost(library, spec, threads, ctx.build.weight, gpu)
            )
        return Prepared({s: variant for s in ctx.shapes}, {s: library for s in ctx.shapes})

    return prepare_host


_PREPARERS: dict[str, Callable[[Context], Prepared]] = {
    "dcmlir": _prepare_dcmlir,
    "iree-default": _prepare_default,
    "iree-data-tiling": _prepare_data_tiling,
    "iree-static": _prepare_static,
    "iree-specialized": _prepare_specialized,
    "oracle": _prepare_oracle,
    "bucketing": _prepare_bucketing,
    "numpy": _host_preparer("numpy"),
    "torch": _host_preparer("torch"),
    "onnxruntime": _host_preparer("onnxruntime"),
}
