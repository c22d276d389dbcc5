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

from dcmlir.ir.iree import LoadedFunction
from dcmlir.measure.runner import ShapeProblem
from dcmlir.measure.timing import Inputs, random_inputs
from dcmlir.models.onnx_source import onnx_source_from_text

if TYPE_CHECKING:
    from dcmlir.models.hf_models import TorchSource

__all__ = [
    "ArgumentType",
    "ModelRunError",
    "Point",
    "TokenProblem",
    "argument_types",
    "check_points",
    "embedding_rows",
    "example_inputs",
    "is_integer",
    "point_label",
    "token_bound",
    "token_problems",
]

Point = int | tuple[int, ...]
"""``T`` for every dynamic dim, or one value per dynamic dim of an input (``(B, T)``)."""

_FLOAT_TABLE = re.compile(r"tensor\.extract %[\w.#$-]+\[[^\]]*\] : tensor<(\d+)x\d+x(?:bf|f)\d+>")
_INTEGER = re.compile(r"^[iu]i?\d+$")


def is_integer(dtype: str) -> bool:
    """An MLIR element type (``i64``, ``si32``, ``ui8``) whose values are integers."""
    return bool(_INTEGER.match(dtype.lstrip("s")))


def numpy_dtype(dtype: str) -> str:
    """The numpy dtype run-model feeds an MLIR element type: token ids int64, else float32."""
    return "int64" if is_integer(dtype) else "float32"


def embedding_rows(text: str) -> int | None:
    """Rows of the smallest float table the module gathers rows from (an embedding), else None.

    Token ids below it index every table the module looks ids up in (the position
    table too): the safe bound when the vocabulary is unknown.
    """
    rows = [int(r) for r in _FLOAT_TABLE.findall(text)]
    return min(rows) if rows else None


def token_bound(text: str, source: TorchSource | None) -> int:
    """Token ids are drawn from [0, bound): the source's vocabulary (a torch model's, or the
    table an ONNX-imported model's input indexes), an embedding's rows, or 2."""
    if source is not None and source.vocab:
        return source.vocab
    onnx = onnx_source_from_text(text)
    if onnx is not None and onnx.vocab:
        return onnx.vocab
    return embedding_rows(text) or 2


@dataclass(frozen=True)
class TokenProblem(ShapeProblem):
    """A model's inputs at one ``T``: floats as every problem has them, integer inputs token ids.

    ``bounds[i]``: input ``i`` is int64 ids in [0, bounds[i]); None: as
    :func:`~dcmlir.measure.timing.random_inputs` makes it.
    """

    bounds: tuple[int | None, ...] = ()

    def arrays(self, sets: int, seed: int) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
        assert self.reference is not None
        rng = np.random.default_rng(seed + 1)
        inputs = []
        for arrays in random_inputs(self.input_shapes, sets=sets, seed=seed):
            made = []
            for index, (array, dtype) in enumerate(zip(arrays, self.dtypes, strict=True)):
                bound = self.bounds[index] if index < len(self.bounds) else None
                if bound is None:
                    made.append(array.astype(dtype))
                else:
                    made.append(rng.integers(0, bound, size=array.shape).astype(dtype))
            inputs.append(made)
        return inputs, [list(self.reference(arrays)) for arrays in inputs]


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
        return numpy_dtype(self.dtype)


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
        if argument.dtype != "f32" and not is_integer(argument.dtype):
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
        np.zeros(a.shape(t), np.int64) if is_integer(a.dtype) else np.ones(a.shape(t), np.float32)
        for a in arguments
    ]


def token_problems(
    text: str,
    arguments: Sequence[ArgumentType],
    source: TorchSource | None,
    reference: Callable[[Inputs], list[np.ndarray]],
    points: Sequence[Point],
) -> dict[Point, TokenProblem]:
    """The model's problem at each point: the arguments' shapes there, every output checked
    by ``reference``, integer inputs token ids below the model's vocabulary
    (:func:`~dcmlir.bench.token_bound`)."""
    vocab = token_bound(text, source)
    bounds = tuple(vocab if is_integer(a.dtype) else None for a in arguments)
    return {
        point: TokenProblem(
            tuple(a.shape(point) for a in arguments),
            tuple(a.numpy_dtype for a in arguments),
            reference=reference,
            bounds=bounds,
        )
        for point in points
    }
