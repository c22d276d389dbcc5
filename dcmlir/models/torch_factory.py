"""``package.module:factory``: the user's own torch model for ``dcmlir import-torch --model``.

The convention: ``factory()`` (no arguments) returns ``(module, example_inputs)`` or
``(module, example_inputs, dynamic_axes)``: an ``nn.Module``; a tensor or a tuple/list
of tensors; one ``{axis: name}`` dict per input (``{}`` for a static input), by
default ``{0: "seq"}`` for every input. The module is imported with the current
directory first on ``sys.path``; every mistake is a one-line :class:`TorchImportError`.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dcmlir.models.torch_guards import TorchImportError

__all__ = ["FactoryModel", "model_from_factory"]


@dataclass
class FactoryModel:
    """What a ``package.module:factory`` gave: the module, its example inputs, the dim names.

    The convention: ``factory()`` returns ``(module, example_inputs)`` or ``(module,
    example_inputs, dynamic_axes)``; ``example_inputs`` is a tensor or a tuple/list of
    tensors; ``dynamic_axes`` has one ``{axis: name}`` dict per input (``{}`` for a static
    one), by default ``{0: "seq"}`` for every input. Every name takes the same range.
    """

    module: nn.Module
    example_inputs: list[torch.Tensor]
    input_dims: list[dict[int, str]]
    directory: str = ""  # where ``package`` was found: what a rebuild puts first on the path

    @property
    def dim_names(self) -> list[str]:
        return sorted({name for dims in self.input_dims for name in dims.values()})


def model_from_factory(spec: str, directory: str | None = None) -> FactoryModel:
    """Import ``package.module`` (``directory``, by default the current one, first on the
    path), call ``factory()`` and check what it returns; every mistake is a one-line error."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise TorchImportError(f"'{spec}' is not package.module:factory")
    directory = directory or os.getcwd()
    sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise TorchImportError(
                f"{spec}: no module '{err.name}' (on the Python path or in {_where(directory)})"
            ) from None
        raise TorchImportError(f"{spec}: importing '{module_name}' failed: {err}") from err
    except Exception as err:  # the user's module: anything at import time
        raise TorchImportError(
            f"{spec}: importing '{module_name}' failed: {type(err).__name__}: {err}"
        ) from err
    finally:
        sys.path.remove(directory)
    factory = getattr(module, attribute, None)
    if factory is None:
        raise TorchImportError(f"{spec}: module '{module_name}' has no attribute '{attribute}'")
    if not callable(factory):
        raise TorchImportError(f"{spec}: '{attribute}' is a {type(factory).__name__}, not callable")
    try:
        made = factory()
    except Exception as err:  # the user's factory: anything
        raise TorchImportError(f"{spec}: the factory raised {type(err).__name__}: {err}") from err
    found = _check_factory_result(spec, made)
    found.directory = _package_root(module, module_name) or directory
    return found


def _package_root(module: Any, module_name: str) -> str | None:
    """The directory ``module_name`` is imported from (its top package's parent)."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    depth = module_name.count(".") + 1 + (path.name == "__init__.py")
    return str(path.parents[depth - 1])


def _where(directory: str) -> str:
    return "the current directory" if directory == os.getcwd() else f"'{directory}'"


_CONVENTION = "(nn.Module, example_inputs[, dynamic_axes])"


def _check_factory_result(spec: str, made: Any) -> FactoryModel:
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        what = f"a tuple of {len(made)}" if isinstance(made, tuple) else type(made).__name__
        raise TorchImportError(f"{spec}: the factory must return {_CONVENTION}, not {what}")
    module, inputs = made[0], made[1]
    if not isinstance(module, nn.Module):
        raise TorchImportError(
            f"{spec}: the factory's first item must be an nn.Module, not {type(module).__name__}"
        )
    inputs = [inputs] if isinstance(inputs, torch.Tensor) else inputs
    if not isinstance(inputs, (tuple, list)) or not inputs:
        raise TorchImportError(
            f"{spec}: example_inputs must be a tensor or a non-empty tuple of tensors"
        )
    bad = [i for i, t in enumerate(inputs) if not isinstance(t, torch.Tensor)]
    if bad:
        kind = type(inputs[bad[0]]).__name__
        raise TorchImportError(f"{spec}: example input {bad[0]} is a {kind}, not a tensor")
    axes = made[2] if len(made) == 3 else [{0: "seq"} for _ in inputs]
    if (
        not isinstance(axes, (tuple, list))
        or len(axes) != len(inputs)
        or not all(
            isinstance(d, dict)
            and all(isinstance(k, int) and isinstance(v, str) for k, v in d.items())
            for d in axes
        )
    ):
        raise TorchImportError(
            f"{spec}: dynamic_axes must be a list of one {{axis: name}} dict per input "
            f"({len(inputs)} inputs)"
        )
    if not any(axes):
        raise TorchImportError(f"{spec}: dynamic_axes names no dynamic dim")
    for index, (tensor, dims) in enumerate(zip(inputs, axes, strict=True)):
        out_of_rank = [axis for axis in dims if not 0 <= axis < tensor.dim()]
        if out_of_rank:
            raise TorchImportError(
                f"{spec}: dynamic_axes[{index}] names axis {out_of_rank[0]} of a "
                f"rank-{tensor.dim()} input"
            )
    return FactoryModel(module, list(inputs), [dict(d) for d in axes])
