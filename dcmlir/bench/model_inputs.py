"""What ``dcmlir run-model`` feeds a compiled model: its argument types and the run points.

A *point* is where a model runs: the sequence length ``T`` (an int: every dynamic dim
of every input takes it), or one value per dynamic dim of each input, in order (a
tuple: ``(batch, T)`` for ``input_ids [?, ?]`` when batch and sequence length are
both dynamic). Kept apart from :mod:`dcmlir.bench.model_compare`, which runs them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dcmlir.bench import model_peers
from dcmlir.ir.iree import LoadedFunction
from dcmlir.measure.timing import Inputs

if TYPE_CHECKING:
    from dcmlir.models.hf_models import TorchSource

__all__ = [
    "ArgumentType",
    "ModelRunError",
    "Point",
    "argument_types",
    "check_points",
    "example_inputs",
    "point_label",
    "token_problems",
]

Point = int | tuple[int, ...]
"""``T`` for every dynamic dim, or one value per dynamic dim of an input (``(B, T)``)."""

_TENSOR = re.compile(r"tensor<([^>]*)>")


class ModelRunError(ValueError):
    """A model that cannot be run as asked; the message names the file or option."""


@dataclass(frozen=True)
class ArgumentType:
    """One tensor argument of the compiled function: dims (None where dynamic) and dtype."""

    dims: tuple[int | None, ...]
    dtype: str

    @property
    def dynamic(self) -> int:
        return sum(d is None for d in self.dims)

    def shape(self, point: Point) -> tuple[int, ...]:
        """The argument's shape at ``point`` (a tuple fills the dynamic dims in order)."""
        values = iter([point] * self.dynamic if isinstance(point, int) else point)
        return tuple(next(values) if d is None else d for d in self.dims)

    @property
    def numpy_dtype(self) -> str:
        """What run-model feeds: int64 token ids for an integer tensor, else float32."""
        return model_peers.numpy_dtype(self.dtype)


def argument_types(function: LoadedFunction) -> list[ArgumentType]:
    """The inputs of a compiled function, from its ABI declaration (``tensor<?x768xf32>``)."""
    declaration = function.function.reflection.get("iree.abi.declaration", "")
    inputs = declaration.split("->", 1)[0]
    found = []
    for spec in _TENSOR.findall(inputs):
        *dims, dtype = spec.split("x")
        found.append(ArgumentType(tuple(None if d == "?" else int(d) for d in dims), dtype))
    if not found:
        raise ModelRunError(f"function '{function.name}' has no tensor inputs ({declaration})")
    for argument in found:
        if argument.dtype != "f32" and not model_peers.is_integer(argument.dtype):
            raise ModelRunError(
                f"function '{function.name}': input {argument.dtype} tensors are not supported "
                "(run-model feeds random f32 inputs and int64 token ids)"
            )
    return found


def check_points(arguments: Sequence[ArgumentType], points: Sequence[Point]) -> None:
    """Every tuple point gives each input one value per dynamic dim; an int point needs
    inputs with one dynamic dim each (two dynamic dims are two values: batch and ``T``)."""
    for point in points:
        for index, argument in enumerate(arguments):
            given = 1 if isinstance(point, int) else len(point)
            if isinstance(point, int) and argument.dynamic <= 1:
                continue
            if given != argument.dynamic:
                dims = "x".join("?" if d is None else str(d) for d in argument.dims)
                raise ModelRunError(
                    f"input {index} ({dims}) has {argument.dynamic} dynamic dims; "
                    f"{point_label(point)} gives {given} "
                    + ("(give the batch too: --batch)" if isinstance(point, int) else "value(s)")
                )


def point_label(point: Point) -> str:
    """``T=7`` or ``BxT=2x7``, as tables and errors name a point."""
    if isinstance(point, int):
        return f"T={point}"
    return f"BxT={'x'.join(map(str, point))}" if len(point) == 2 else f"dims={point}"


def example_inputs(arguments: Sequence[ArgumentType], seq: tuple[int, int]) -> list[np.ndarray]:
    """Inputs to export with: T = 7 within the range (torch.export specialises 0 and 1)."""
    t = min(max(7, seq[0]), seq[1])
    return [
        np.zeros(a.shape(t), np.int64)
        if model_peers.is_integer(a.dtype)
        else np.ones(a.shape(t), np.float32)
        for a in arguments
    ]


def token_problems(
    text: str,
    arguments: Sequence[ArgumentType],
    source: TorchSource | None,
    reference: Callable[[Inputs], list[np.ndarray]],
    points: Sequence[Point],
) -> dict[Point, model_peers.TokenProblem]:
    """The model's problem at each point: the arguments' shapes there, every output checked
    by ``reference``, integer inputs token ids below the model's vocabulary
    (:func:`~dcmlir.bench.model_peers.token_bound`)."""
    vocab = model_peers.token_bound(text, source)
    bounds = tuple(vocab if model_peers.is_integer(a.dtype) else None for a in arguments)
    return {
        point: model_peers.TokenProblem(
            tuple(a.shape(point) for a in arguments),
            tuple(a.numpy_dtype for a in arguments),
            reference=reference,
            bounds=bounds,
        )
        for point in points
    }
