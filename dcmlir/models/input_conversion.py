"""Torch-dialect IR to linalg on tensors, and the imported module with its weights.

What every frontend shares once its importer has written torch-dialect IR (the FX
importer for torch models, IREE's ONNX importer for ``.onnx`` files): IREE's torch
input conversion (:func:`lower_to_linalg`) and the module with the weights its
parameter archive holds (:class:`ImportedModel`). Needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dcmlir.ir.iree import ParameterFile, run_compile, write_parameter_archive
from dcmlir.ir.mlir import ir, passmanager
from dcmlir.models.bert import PARAMETER_SCOPE

__all__ = ["INPUT_CONVERSION_FLAGS", "ConversionError", "ImportedModel", "lower_to_linalg"]


class ConversionError(RuntimeError):
    """IREE's input conversion refused the module; the message is its first error."""


@dataclass(frozen=True)
class ImportedModel:
    """An imported module: its text and, for ``params`` weights, the arrays its .irpa holds."""

    text: str
    weight_mode: str
    parameters: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    function: str = "main"

    def save(
        self, path: str | Path, parameters_path: str | Path | None = None
    ) -> ParameterFile | None:
        """Write the module and, for ``params`` weights, the archive (default: beside it)."""
        Path(path).write_text(self.text, encoding="utf-8")
        if self.weight_mode != "params":
            return None
        archive = Path(parameters_path) if parameters_path else Path(path).with_suffix(".irpa")
        write_parameter_archive(archive, self.parameters)
        return ParameterFile(str(archive), PARAMETER_SCOPE)


INPUT_CONVERSION_FLAGS = ("--compile-to=input", "--iree-torch-emit-async-entry-points=false")
"""IREE's torch input conversion only, with a sync ABI (``sync func @main``) that
:func:`dcmlir.ir.iree.load_function` can call; the async default has coarse fences."""


def lower_to_linalg(torch_text: str, timeout: float | None = None) -> str:
    """Run IREE's torch input conversion on torch-dialect IR: linalg on tensors."""
    result = run_compile(torch_text, INPUT_CONVERSION_FLAGS, timeout=timeout)
    if result.returncode != 0:
        errors = [line for line in result.log.splitlines() if "error:" in line]
        raise ConversionError(
            "IREE's torch input conversion failed: " + (errors[0] if errors else result.log[:500])
        )
    return _canonicalize(result.output.decode("utf-8"))


def _canonicalize(text: str) -> str:
    """``canonicalize,cse``: ``tensor.dim`` of the input folds to the ``util.assume.int``
    value, so the range traces from the contractions' operands (and duplicate dims go)."""
    with ir.Context():
        module = ir.Module.parse(text)
        passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)
        return str(module)
