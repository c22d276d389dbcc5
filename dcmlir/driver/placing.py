"""The tuned module's placement: where its code lands, chosen by timing it (issue 14).

The same functions run up to 1.14x apart depending on where IREE's linker puts them
(:mod:`dcmlir.build.code_layout`). The search times each kernel in a build of its own, so
a branch of the dispatched module may run slower than the kernel it measured, and than
IREE's own build of the same code: on the Zen 5 EPYC the data-tiling branch of
`unseen_context_h80`'s budget-60 plan ran 1.19-1.23x IREE's data-tiling build at T =
9..31 under one of four placements and 1.00-1.04x under the other three. So after tuning,
the module is compiled under each placement whose code lands at another offset (four
within 64 bytes), the placements are timed side by side, call by call and interleaved, at
a few shapes per kernel the plan runs (and the range's ends), and the plan keeps the
fastest: the smallest worst ratio over the shapes to each shape's fastest placement.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from dcmlir.build.code_layout import TRIED, text_offset
from dcmlir.build.compiler import BuildError
from dcmlir.dispatch import Plan
from dcmlir.driver.compiling import compile
from dcmlir.driver.loading import TuneError, read_source
from dcmlir.ir.iree import (
    LoadedFunction,
    ParameterFile,
    RuntimeFailure,
    load_function,
    parameter_scopes,
)
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.target import CpuTarget
from dcmlir.workload import entry_function

__all__ = ["PlacementSettings", "choose_placement", "placement_points"]

OFFSETS = 64
"""Placements are told apart by their ``.text`` offset modulo this: the fetch windows a
loop's alignment matters against are 32 and 64 bytes."""

_TENSOR = re.compile(r"tensor<([^>]*)>")


@dataclass(frozen=True)
class PlacementSettings:
    """How the placements are timed."""

    points: int = 24
    """Shapes timed at most (up to three per kernel the plan runs, and the range's ends)."""
    rounds: int = 20
    """Interleaved rounds: each times every placement once per shape."""
    batch_seconds: float = 0.002
    """A round's calls of one placement last about this long (at least one call)."""


def placement_points(plan: Plan, most: int) -> list[int]:
    """Run-time values to time the placements at: every dynamic dim at one value ``T``
    within the range all of the plan's dims share, and no larger than the largest diagonal
    shape the search timed a kernel at. First the median of the diagonal shapes
    each kernel is chosen for (the kernels chosen most first), then the range's ends, then
    each kernel's quartiles (a placement's toll is largest on short calls: 1.19-1.23x at
    T = 9..31 of `unseen_context_h80`'s data tiling, 1.09x at 65); at most ``most``. Empty
    where the dims share no value."""
    ranges = [d.range for w in plan.workloads for d in w.dims]
    if not ranges:
        return []
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    ran = [  # no larger than a shape the search ran: 1..10**9 has inputs no memory holds
        s.dims[0]
        for w in plan.workloads
        for s in w.shapes
        if len(set(s.dims)) == 1 and s.measured is not None and math.isfinite(s.measured)
    ]
    hi = min(hi, max(ran, default=lo - 1))
    if lo > hi:
        return []
    chosen: list[list[int]] = []
    for workload in plan.workloads:
        by_kernel: dict[int, list[int]] = {}
        for shape in workload.shapes:
            if len(set(shape.dims)) == 1 and lo <= shape.dims[0] <= hi:
                by_kernel.setdefault(shape.kernel, []).append(shape.dims[0])
        chosen += [sorted(values) for values in by_kernel.values()]
    chosen.sort(key=len, reverse=True)
    medians = [values[len(values) // 2] for values in chosen]
    quartiles = [values[(len(values) * q) // 4] for values in chosen for q in (1, 3)]
    return sorted(list(dict.fromkeys([*medians, lo, hi, *quartiles]))[:most])


def choose_placement(
    plan: Plan,
    input: str | Path,
    *,
    stream: IO[str],
    settings: PlacementSettings | None = None,
) -> Plan:
    """``plan`` with the fastest placement of its compiled module; ``plan`` as it is where
    there is nothing to place (a GPU target, no workload, a module read from stdin, or
    inputs this cannot make), with one line saying why."""
    settings = settings or PlacementSettings()
    if not isinstance(plan.target, CpuTarget) or not plan.workloads:
        return plan
    why = _not_placeable(plan, input)
    points = placement_points(plan, settings.points)
    if why is None and not points:
        why = "its dynamic dims share no value to time it at"
    if why is not None:
        print(f"dcmlir: placement: not chosen: {why}", file=stream)
        return plan
    try:
        _, text = read_source(input)
        parameters = _parameters(input, text)
        builds = _distinct_placements(plan, input)
        functions = _loaded(builds, _entry(text), plan.device or "local-sync", parameters)
        inputs = _inputs(next(iter(functions.values())), points)
        times = _timed(functions, inputs, settings)
    except (TuneError, BuildError, RuntimeFailure, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"dcmlir: placement: not chosen: {first}", file=stream)
        return plan
    scores = _scores(times)
    best = min(scores, key=lambda p: (scores[p], p))
    listed = ", ".join(f"{p}: {scores[p]:.3f}" for p in sorted(scores))
    print(
        f"dcmlir: placement {best}, the fastest of {len(scores)} timed at T = "
        f"{', '.join(map(str, points))} (worst time over each T's fastest: {listed})",
        file=stream,
    )
    return dataclasses.replace(plan, placement=best)


def _not_placeable(plan: Plan, input: str | Path) -> str | None:
    if str(input) == "-":
        return "the module was read from stdin (compile it again to time it)"
    if plan.predicted:
        return "the plan was predicted, not timed"
    return None


def _distinct_placements(plan: Plan, input: str | Path) -> dict[int, bytes]:
    """Placement -> the module compiled under it, the first placement (of :data:`TRIED`)
    of each offset of its code modulo :data:`OFFSETS`."""
    found: dict[int, bytes] = {}
    offsets: set[int] = set()
    for placement in TRIED:
        compiled = compile(
            input, plan=dataclasses.replace(plan, placement=placement), stream=io.StringIO()
        )
        offset = text_offset(compiled.vmfb)
        if offset is None:
            raise ValueError("the module has no CPU executable to place")
        if offset % OFFSETS in offsets:
            continue
        offsets.add(offset % OFFSETS)
        found[placement] = compiled.vmfb
        if len(offsets) == OFFSETS // 16:
            break
    return found


def _entry(text: str) -> str:
    with ir.Context():
        return entry_function(parse_module(text).operation)


def _parameters(input: str | Path, text: str) -> ParameterFile | None:
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


def _loaded(
    builds: Mapping[int, bytes], entry: str, driver: str, parameters: ParameterFile | None
) -> dict[int, LoadedFunction]:
    return {
        p: load_function(vmfb, entry, driver, parameters=parameters) for p, vmfb in builds.items()
    }


def _inputs(function: LoadedFunction, points: Sequence[int]) -> dict[int, list[np.ndarray]]:
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


def _timed(
    functions: Mapping[int, LoadedFunction],
    inputs: Mapping[int, list[np.ndarray]],
    settings: PlacementSettings,
) -> dict[int, dict[int, float]]:
    """Placement -> point -> seconds a call (median over the rounds); each round times
    every placement's calls after one untimed call, the placements interleaved."""
    found: dict[int, dict[int, float]] = {p: {} for p in functions}
    for point, arrays in inputs.items():
        args = {p: f.prepare(arrays) for p, f in functions.items()}
        first = next(iter(functions))
        start = time.perf_counter()
        functions[first].invoke(args[first])
        once = max(time.perf_counter() - start, 1e-7)
        calls = max(1, int(settings.batch_seconds / once))
        samples: dict[int, list[float]] = {p: [] for p in functions}
        for _ in range(settings.rounds):
            for placement, function in functions.items():
                function.invoke(args[placement])
                start = time.perf_counter()
                for _ in range(calls):
                    function.invoke(args[placement])
                samples[placement].append((time.perf_counter() - start) / calls)
        for placement, values in samples.items():
            found[placement][point] = statistics.median(values)
    return found


def _scores(times: Mapping[int, Mapping[int, float]]) -> dict[int, float]:
    """Placement -> its worst time over the point's fastest: a placement that costs one
    kernel 1.2x is 1.2 however many points the others hold (a geomean over 16 points put
    it at 1.01-1.02, inside the noise, and chose it once in two runs)."""
    points = next(iter(times.values())).keys()
    fastest = {t: min(times[p][t] for p in times) for t in points}
    return {p: max(times[p][t] / fastest[t] for t in points) for p in times}
