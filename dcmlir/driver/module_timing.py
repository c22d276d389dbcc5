"""Whole compiled modules timed side by side in this process: the placement's builds
(:mod:`.placing`) and the guard's (:mod:`.guarding`).

Each round calls every module once untimed and then for about ``batch_seconds``, the
modules interleaved, so that a slow stretch of the machine falls on all of them alike
(docs/design.md section 4); a module's time at a point is the median over the rounds.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from dcmlir.ir.iree import LoadedFunction, ParameterFile, load_function, parameter_scopes
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.workload import entry_function

__all__ = [
    "loaded_functions",
    "module_entry",
    "module_parameters",
    "outputs_agree",
    "random_inputs",
    "timed_side_by_side",
]

Key = TypeVar("Key", bound=Hashable)

_TENSOR = re.compile(r"tensor<([^>]*)>")


def module_entry(text: str) -> str:
    """The function a module's callers call (:func:`dcmlir.workload.entry_function`)."""
    with ir.Context():
        return entry_function(parse_module(text).operation)


def module_parameters(input: str | Path, text: str) -> ParameterFile | None:
    """The archive a module with ``#flow.parameter.named`` weights reads: ``MODEL.irpa``
    beside it, as ``dcmlir run-model`` finds it (a ValueError, before any compile, where
    it is not there or the module names several scopes)."""
    scopes = parameter_scopes(text)
    if not scopes:
        return None
    path = Path(input).with_suffix(".irpa")
    if len(scopes) > 1 or not path.is_file():
        raise ValueError(f"its weights are parameters, and no one {path.name} holds them")
    return ParameterFile(str(path), scopes.pop())


def loaded_functions(
    builds: Mapping[Key, bytes], entry: str, driver: str, parameters: ParameterFile | None
) -> dict[Key, LoadedFunction]:
    """Each build's ``entry``, loaded on ``driver``."""
    return {
        key: load_function(vmfb, entry, driver, parameters=parameters)
        for key, vmfb in builds.items()
    }


def random_inputs(function: LoadedFunction, points: Sequence[int]) -> dict[int, list[np.ndarray]]:
    """Random f32 inputs (integer ones zero: valid token ids) with every dynamic dim ``T``."""
    declaration = function.function.reflection.get("iree.abi.declaration", "")
    specs = [spec.split("x") for spec in _TENSOR.findall(declaration.split("->", 1)[0])]
    if not specs:
        raise ValueError(f"function '{function.name}' has no tensor inputs")
    rng = np.random.default_rng(0)
    found = {}
    for point in points:
        arrays = []
        for *dims, dtype in specs:
            shape = tuple(point if d == "?" else int(d) for d in dims)
            if dtype == "f32":
                arrays.append(rng.standard_normal(shape, dtype=np.float32))
            elif re.fullmatch(r"[su]?i(8|16|32|64)", dtype):
                arrays.append(np.zeros(shape, np.dtype(f"int{dtype.split('i')[-1]}")))
            else:
                raise ValueError(f"input {dtype} tensors are not timed here")
        found[point] = arrays
    return found


def outputs_agree(
    functions: Mapping[Key, LoadedFunction], arrays: list[np.ndarray], reference: Key
) -> list[Key]:
    """The builds whose outputs on ``arrays`` differ from ``reference``'s (f32 sums in
    another order: within 1e-3 of the reference's largest magnitude)."""
    expected = functions[reference](*arrays)
    wrong = []
    for key, function in functions.items():
        found = function(*arrays)
        for mine, theirs in zip(found, expected, strict=True):
            scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
            if mine.shape != theirs.shape or not np.allclose(
                mine, theirs, rtol=1e-3, atol=1e-3 * max(scale, 1.0)
            ):
                wrong.append(key)
                break
    return wrong


FEWEST_ROUNDS = 4
"""The least rounds :func:`timed_side_by_side` cuts to under ``point_seconds``."""


def timed_side_by_side(
    functions: Mapping[Key, LoadedFunction],
    inputs: Mapping[int, list[np.ndarray]],
    rounds: int,
    batch_seconds: float,
    progress: Callable[[int], None] | None = None,
    point_seconds: float | None = None,
) -> dict[Key, dict[int, float]]:
    """Build -> point -> seconds a call (median over ``rounds``); each round times every
    build's calls after one untimed call, the builds interleaved. ``progress``: called
    with each point once it is timed. ``point_seconds``: fewer rounds (down to
    :data:`FEWEST_ROUNDS`) where ``rounds`` of one build would take longer at a point:
    a whole model's 100-ms calls vary by a few percent, not the tens a 10-us call does."""
    found: dict[Key, dict[int, float]] = {key: {} for key in functions}
    for point, arrays in inputs.items():
        args = {key: f.prepare(arrays) for key, f in functions.items()}
        first = next(iter(functions))
        start = time.perf_counter()
        functions[first].invoke(args[first])
        once = max(time.perf_counter() - start, 1e-7)
        calls = max(1, int(batch_seconds / once))
        here = rounds
        if point_seconds is not None:  # each round: one untimed call and ``calls`` timed
            here = max(
                min(rounds, FEWEST_ROUNDS), min(rounds, int(point_seconds / (once * (calls + 1))))
            )
        samples: dict[Key, list[float]] = {key: [] for key in functions}
        for _ in range(here):
            for key, function in functions.items():
                function.invoke(args[key])
                start = time.perf_counter()
                for _ in range(calls):
                    function.invoke(args[key])
                samples[key].append((time.perf_counter() - start) / calls)
        for key, values in samples.items():
            found[key][point] = statistics.median(values)
        if progress is not None:
            progress(point)
    return found
