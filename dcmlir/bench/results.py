"""What one ``dcmlir bench`` run measured: a cell per baseline and shape, and the geomeans.

The data between :mod:`dcmlir.bench.compare` (which fills it) and
:mod:`dcmlir.bench.outputs` and :mod:`dcmlir.bench.plots` (which write it out);
``to_json``/``from_json`` keep every number so tables and plots can be redrawn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dcmlir.bench.baselines import shape_label
from dcmlir.shapes import Shape

__all__ = ["BASELINE", "BASELINES", "BenchResult", "Cell", "geomean"]

BASELINES: dict[str, str] = {
    "dcmlir": "the dcmlir-dispatched module (the plan's scf.if cascade over tuned kernels)",
    "iree-default": "IREE's default dynamic-shape lowering of the module",
    "iree-data-tiling": "IREE with --iree-opt-data-tiling: operands packed into its tiled "
    "layout, mmt4d ukernels",
    "iree-static": "IREE compiled per static shape (default configs, one function per shape)",
    "iree-specialized": "IREE's iree_codegen.specialization_ranges multi-versioning, "
    "with the plan's ranges (IREE's own configs)",
    "oracle": "per-shape oracle: the best candidate of dcmlir's space measured at each shape",
    "bucketing": "kernels tuned at bucket sizes, inputs padded up to the bucket "
    "(TVM FlexibleShapeDispatch / Nimble)",
    "numpy": "numpy (BLAS) with the device's thread count",
    "torch": "PyTorch with the device's thread count (cuBLAS on the GPU for a CUDA plan)",
    "onnxruntime": "the contraction as an ONNX model (MatMul) in ONNX Runtime, with the "
    "device's thread count",
}
BASELINE = "iree-default"  # every speedup is over this one


@dataclass
class Cell:
    """One baseline at one shape."""

    median_us: float  # inf when it failed
    samples_us: list[float]
    speedup: float  # over IREE's default: median of per-round ratios (nan: no pair)
    max_error: float | None = None
    error: str | None = None
    kernel: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "median_us": None if not math.isfinite(self.median_us) else self.median_us,
            "samples_us": self.samples_us,
            "speedup": None if not math.isfinite(self.speedup) else self.speedup,
            "max_error": self.max_error,
            "error": self.error,
            "kernel": self.kernel,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Cell:
        median, speedup = obj.get("median_us"), obj.get("speedup")
        return cls(
            math.inf if median is None else float(median),
            [float(v) for v in obj.get("samples_us", [])],
            math.nan if speedup is None else float(speedup),
            obj.get("max_error"),
            obj.get("error"),
            obj.get("kernel", ""),
        )


@dataclass
class BenchResult:
    """Everything one bench run measured, enough to redraw every table and plot."""

    name: str
    source: str
    workload: str
    target: str
    device: str
    threads: int
    baselines: list[str]
    unavailable: dict[str, str]
    shapes: list[Shape]
    rows: dict[Shape, dict[str, Cell]]
    info: dict[str, Any] = field(default_factory=dict)  # versions, settings, oracle cost...
    weights: str = "argument"  # operand 1: a module constant, or an argument like operand 0

    def cell(self, shape: Shape, baseline: str) -> Cell | None:
        return self.rows.get(shape, {}).get(baseline)

    def measured_baselines(self) -> list[str]:
        return [b for b in self.baselines if b not in self.unavailable]

    def geomean_speedup(self, baseline: str) -> float:
        """Geomean over shapes of the speedup over IREE's default (paired per round)."""
        return geomean(
            cell.speedup
            for shape in self.shapes
            if (cell := self.cell(shape, baseline)) is not None
        )

    def geomean_ratio(self, numerator: str, denominator: str) -> float:
        """Geomean of median(numerator) / median(denominator) where both ran."""
        values = []
        for shape in self.shapes:
            top, bottom = self.cell(shape, numerator), self.cell(shape, denominator)
            if top is None or bottom is None:
                continue
            values.append(top.median_us / bottom.median_us)
        return geomean(values)

    def errors(self) -> list[str]:
        return [
            f"{shape_label(shape)} {name}: {cell.error}"
            for shape in self.shapes
            for name, cell in self.rows.get(shape, {}).items()
            if cell.error
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": 1,
            "name": self.name,
            "source": self.source,
            "workload": self.workload,
            "target": self.target,
            "device": self.device,
            "threads": self.threads,
            "weights": self.weights,
            "baselines": self.baselines,
            "unavailable": self.unavailable,
            "shapes": [list(s) for s in self.shapes],
            "rows": [
                {"shape": list(shape), "cells": {k: c.to_json() for k, c in cells.items()}}
                for shape, cells in self.rows.items()
            ],
            "geomean_speedup": {
                b: _finite_or_none(self.geomean_speedup(b)) for b in self.measured_baselines()
            },
            "info": self.info,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BenchResult:
        return cls(
            obj["name"],
            obj["source"],
            obj["workload"],
            obj["target"],
            obj["device"],
            int(obj["threads"]),
            list(obj["baselines"]),
            dict(obj["unavailable"]),
            [tuple(s) for s in obj["shapes"]],
            {
                tuple(row["shape"]): {k: Cell.from_json(v) for k, v in row["cells"].items()}
                for row in obj["rows"]
            },
            dict(obj.get("info", {})),
            str(obj.get("weights", "argument")),  # results written before weight modes
        )


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of the finite positive values (failures are inf or nan); nan if none."""
    good = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
