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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dcmlir.build.code_layout import TRIED, code_flags, text_offset
from dcmlir.build.compiler import BuildError
from dcmlir.dispatch import Plan
from dcmlir.driver.compiling import compile
from dcmlir.driver.loading import TuneError, read_source
from dcmlir.driver.module_timing import (
    loaded_functions,
    module_entry,
    module_parameters,
    random_inputs,
    timed_side_by_side,
)
from dcmlir.ir.iree import RuntimeFailure
from dcmlir.target import CpuTarget

__all__ = [
    "PlacementSettings",
    "choose_placement",
    "placement_points",
    "timed_range",
    "untimed_reason",
]

CALL_SECONDS = 0.05
"""A diagonal shape is timed beside IREE's builds only where the search measured it or
predicts a call within this: the guard times about a hundred T for a few rounds."""

OFFSETS = 64
"""Placements are told apart by their ``.text`` offset modulo this: the fetch windows a
loop's alignment matters against are 32 and 64 bytes."""


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
    within :func:`timed_range`. First the median of the diagonal shapes
    each kernel is chosen for (the kernels chosen most first), then the range's ends, then
    each kernel's quartiles (a placement's toll is largest on short calls: 1.19-1.23x at
    T = 9..31 of `unseen_context_h80`'s data tiling, 1.09x at 65); at most ``most``. Empty
    where the dims share no value."""
    found = timed_range(plan)
    if found is None:
        return []
    lo, hi = found
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


def timed_range(plan: Plan) -> tuple[int, int] | None:
    """The run-time values every dynamic dim of ``plan`` shares, up to the largest diagonal
    shape of the search whose call was measured or is predicted within
    :data:`CALL_SECONDS` (1..10**9 has inputs no memory holds); None where there is none.
    Not only the shapes measured: at budget 16 on 1..24 the search may time nothing above
    T = 7, and 8..24 would run unchecked."""
    ranges = [d.range for w in plan.workloads for d in w.dims]
    if not ranges:
        return None
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    callable_at = [
        s.dims[0]
        for w in plan.workloads
        for s in w.shapes
        if len(set(s.dims)) == 1 and (_finite(s.measured) or s.predicted <= CALL_SECONDS)
    ]
    hi = min(hi, max(callable_at, default=lo - 1))
    return None if lo > hi else (lo, hi)


def _finite(seconds: float | None) -> bool:
    return seconds is not None and math.isfinite(seconds)


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
    aligned = code_flags(plan.target)
    if aligned:
        print(
            "dcmlir: placement: not timed: the module's innermost loops are aligned to"
            f" {plan.target.loop_alignment} bytes ({' '.join(aligned)}),"
            " so no file name moves them",
            file=stream,
        )
        return plan
    points = placement_points(plan, settings.points)
    why = untimed_reason(plan, input, points)
    if why is not None:
        print(f"dcmlir: placement: not chosen: {why}", file=stream)
        return plan
    try:
        _, text = read_source(input)
        parameters = module_parameters(input, text)
        builds = _distinct_placements(plan, input)
        entry, driver = module_entry(text), plan.device or "local-sync"
        functions = loaded_functions(builds, entry, driver, parameters)
        inputs = random_inputs(next(iter(functions.values())), points)
        times = timed_side_by_side(functions, inputs, settings.rounds, settings.batch_seconds)
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


def untimed_reason(plan: Plan, input: str | Path, points: Sequence[int]) -> str | None:
    """Why ``plan``'s module cannot be timed after tuning at ``points`` (the placement's and
    the guard's steps), None where it can."""
    if str(input) == "-":
        return "the module was read from stdin (compile it again to time it)"
    if plan.predicted:
        return "the plan was predicted, not timed"
    if not points:
        return "its dynamic dims share no value to time it at"
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


def _scores(times: Mapping[int, Mapping[int, float]]) -> dict[int, float]:
    """Placement -> its worst time over the point's fastest: a placement that costs one
    kernel 1.2x is 1.2 however many points the others hold (a geomean over 16 points put
    it at 1.01-1.02, inside the noise, and chose it once in two runs)."""
    points = next(iter(times.values())).keys()
    fastest = {t: min(times[p][t] for p in times) for t in points}
    return {p: max(times[p][t] / fastest[t] for t in points) for p in times}
