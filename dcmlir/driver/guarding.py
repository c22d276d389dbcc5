"""The guard: the tuned module timed beside IREE's own builds, and IREE's build kept where
it is faster (issue 14's "never slower").

The search decides on kernels timed one by one, and where its budget ran out, on
estimates; the module a user runs is another build. On the Zen 5 EPYC a budget-60 tune of
`unseen_context_h80` ran IREE's default at T = 5..23, where IREE's data tiling was
1.3-2.4x faster: its pairs off the diagonal had ruled data tiling out there
(never_slower.py). So once the plan is made, the module it compiles to and IREE's own
builds of the same input, its default and its data tiling (``--iree-opt-data-tiling``,
where that compiles), are timed side by side, call by call and interleaved, at every T
up to 16, steps of 10% beyond, and the edges and middle of each stretch of the diagonal
one kernel runs (:func:`guard_points`). Where the tuned module is more than
:data:`MARGIN` slower than the faster IREE build, in two sessions, or computes other
numbers, the shapes of the kernel it ran there, in that point's cell (every dynamic
extent nearer to it than to the next point, in log extents), go to that build (where the
plan already runs that build there, in its own dispatch, to the plan's next kernels:
:func:`.guard_patches.next_kernels`; so too where it is behind a build within the margin
in both sessions, kept only where the module then beats the build), and the plan is made
again. The tuned module, patched, is timed once more beside both builds, and the table
printed.

A rival plan of dcmlir's own can stand beside IREE's builds (``rival``): the workloads
searched again without the explicit mmt4d kernels (:mod:`.rival_plans`). Those kernels are
timed as modules of one op, whose weight stays in cache; in a model whose weights do not
fit, IREE's ukernel (which prefetches) on data tiling's layout can be faster, and only
the whole module shows it (docs/design.md section 12). Where the rival is faster by the
margin by geomean over the points, its plan replaces the tuned one whole; else where it
is faster by the margin, twice, its kernels take that cell, as an IREE build would (and
are undone where the patched module is no faster: the rival's kernels run there in the
tuned module's cascades, with IREE's ukernels off where any explicit kernel is left, so
they may not bring its speed; design.md section 12).

Nothing here is counted in the search's budget (as the placement is not); it costs three
or four compiles and a few seconds of timing, and with a rival its searches (one line
gives the pairs they timed) and one more compile.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from dcmlir.build.compiler import BuildError
from dcmlir.codegen.packed import DATA_TILING_FLAGS
from dcmlir.dispatch import Plan
from dcmlir.driver.compiling import compile, compile_default
from dcmlir.driver.guard_patches import next_kernels, patched, ran_build, swapped
from dcmlir.driver.loading import TuneError, read_source
from dcmlir.driver.module_timing import (
    loaded_functions,
    module_entry,
    module_parameters,
    outputs_agree,
    random_inputs,
    timed_side_by_side,
)
from dcmlir.driver.outcome import WorkloadReport
from dcmlir.driver.placing import timed_range, untimed_reason
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.ir.iree import RuntimeFailure
from dcmlir.progress import Progress
from dcmlir.search.selection import finite_geomean
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate
from dcmlir.target import CpuTarget

__all__ = ["MARGIN", "RIVAL", "GuardSettings", "cells", "guard_plan", "patched", "swapped"]

MARGIN = 0.03
"""The tuned module keeps a point within this of the faster IREE build (issue 14's 0.97x)."""

TUNED, DEFAULT, TILED = "dcmlir", "iree-default", "iree-data-tiling"
RIVAL = "dcmlir-without-mmt4d"
"""The rival plan's name in the guard's lines (:func:`guard_plan`'s ``rival``)."""
BUILDS: dict[str, Candidate] = {DEFAULT: DefaultCandidate(), TILED: DataTiledCandidate()}

MakePlan = Callable[[Sequence[WorkloadReport]], Plan]
Item = TypeVar("Item")


@dataclass(frozen=True)
class GuardSettings:
    """How the builds are timed."""

    points: int = 96
    rounds: int = 12
    batch_seconds: float = 0.002
    point_seconds: float = 1.0  # one build's rounds at one point, at most (4 rounds at least)
    margin: float = MARGIN


def guard_points(plan: Plan, most: int) -> list[int]:
    """Run-time values to time at (every dynamic dim at one ``T``, within the bounds of
    :func:`.placing.timed_range`): every ``T`` up to 16 and steps of 10% beyond, then the
    first, middle and last ``T`` of each stretch of the diagonal one kernel runs; at most
    ``most``. A loss hides at a stretch's edge or between two points far apart: with
    the placement's 22 points, `unseen_context_h80`'s IREE default at T = 5..17 (data
    tiling 1.3-1.9x faster) had no point, and kept the default. The stretches are the
    tree's, at every ``T``: from the search's shapes only, `novel_scores_h32`'s T = 127 (a
    kernel 1.44x the default, between 121 and 128) was not timed."""
    bounds = timed_range(plan)
    if bounds is None:
        return []
    lo, hi = bounds
    stretches: list[int] = []
    for workload in plan.workloads:
        exact = {e.dims[0]: e.kernel for e in workload.exact if len(set(e.dims)) == 1}
        width = len(workload.dims)
        diagonal = [  # what the dispatch runs at every T: its exact builds, then the tree
            (t, exact[t] if t in exact else workload.tree.select((t,) * width))
            for t in range(lo, hi + 1)
        ]
        start = 0
        for i in range(1, len(diagonal) + 1):
            if i < len(diagonal) and diagonal[i][1] == diagonal[start][1]:
                continue
            run = [t for t, _ in diagonal[start:i]]
            stretches += [run[0], run[len(run) // 2], run[-1]]
            start = i
    grid, value = [], float(lo)
    while value <= hi:
        grid.append(round(value))
        value = value + 1 if value < 16 else value * 1.1
    ordered = list(dict.fromkeys([lo, hi, *grid, *stretches]))
    return sorted(ordered[:most])


def cells(points: Sequence[int], lo: int, hi: int) -> dict[int, tuple[int, int]]:
    """Each point -> the inclusive range of extents nearer to it than to its neighbours in
    log extents (``lo``..``hi`` at the ends)."""
    ordered = sorted(set(points))
    found = {}
    for i, point in enumerate(ordered):
        low = lo if i == 0 else math.floor(math.sqrt(ordered[i - 1] * point)) + 1
        high = hi if i == len(ordered) - 1 else math.floor(math.sqrt(point * ordered[i + 1]))
        found[point] = (low, high)
    return found


def guard_plan(
    reports: Sequence[WorkloadReport],
    make_plan: MakePlan,
    input: str | Path,
    *,
    stream: IO[str],
    max_depth: int | None,
    route: str,
    settings: GuardSettings | None = None,
    rival: Callable[[], Sequence[WorkloadReport]] | None = None,
) -> list[WorkloadReport]:
    """``reports`` with IREE's build kept where the tuned module loses to it (module doc);
    as they are where nothing can be timed (a GPU target, a module read from stdin, a
    predicted plan, inputs this cannot make), with one line saying why. ``rival``: makes
    another plan's reports, one per report in the same order (called only where the guard
    runs), timed beside them and taking the cells where it is faster (module doc)."""
    settings = settings or GuardSettings()
    plan = make_plan(reports)
    if not isinstance(plan.target, CpuTarget) or not plan.workloads:
        return list(reports)
    points = guard_points(plan, settings.points)
    why = untimed_reason(plan, input, points)
    if why is not None:
        print(f"dcmlir: guard: not run: {why}", file=stream)
        return list(reports)
    try:
        _, text = read_source(input)
        timing = _Timing(input, text, plan, points, settings)
        print(
            f"dcmlir: guard: compiling the tuned module and IREE's builds of "
            f"{Path(str(input)).name}, to time them side by side at {len(points)} T",
            file=stream,
        )
        builds: dict[str, Plan | tuple[str, ...]] = {TUNED: plan, DEFAULT: ()}
        if timing.compiles(DATA_TILING_FLAGS, stream):
            builds[TILED] = DATA_TILING_FLAGS
        rivals = _rival_reports(rival, stream)
        rival_plan = make_plan(rivals) if rivals else None
        if rival_plan is not None and timing.compiles(rival_plan, stream):
            builds[RIVAL] = rival_plan
        times, wrong = timing.run(builds, stream=stream)
        whole = _rival_over_tuned(times, wrong)
        if whole is not None and whole < 1.0 - settings.margin:  # the rival's module, whole
            print(
                f"dcmlir: guard: {RIVAL} took {whole:.2f} of the tuned module's time by geomean "
                f"over {len(points)} T: its plan replaces the tuned one",
                file=stream,
            )
            reports = rivals
            builds, times = _rival_as_tuned(builds), _rival_as_tuned(times)
            wrong = {p: [n for n in names if n in BUILDS] for p, names in wrong.items()}
        losses = _losses(times, wrong, settings.margin)
        behind = {  # where a plan runs an IREE build's branch: its next kernels are tried
            t: won
            for t, won in _behind(times, wrong).items()
            if any(ran_build(report, t) is not None for report in reports)
        }
        if behind or losses:  # the same in a second session, or it is noise
            timed_again = sorted(set(losses) | set(behind))
            again, wrong_again = timing.run(builds, timed_again, stream=stream)
            confirmed = _losses(again, wrong_again, settings.margin)
            losses = {t: won for t, won in confirmed.items() if t in losses}
            confirmed = _behind(again, wrong_again)
            behind = {t: confirmed[t] for t in behind if t in confirmed and t not in losses}
        # the next kernels' estimate below the build's by the margin at least: the tree keeps it
        tried = losses | {t: (n, max(r, 1.0 + settings.margin)) for t, (n, r) in behind.items()}
        ranges = [d.range for r in reports for d in r.plan.dims]
        within = cells(points, max(r[0] for r in ranges), min(r[1] for r in ranges))

        nexts: set[int] = set()  # points where the plan's next kernels took the build's place

        def kept_at(points: Iterable[int]) -> list[WorkloadReport]:
            found = list(reports)
            nexts.clear()
            for point in sorted(points):
                name, ratio = tried[point]
                build = BUILDS.get(name)  # the rival: whichever IREE build the plan ran
                for i, report in enumerate(found):
                    search = None
                    if name == RIVAL:
                        search = swapped(report, rivals[i], within[point], point, ratio)
                    elif point in losses:
                        search = patched(report, within[point], point, BUILDS[name], ratio)
                    args = (report, within[point], point, build, ratio)
                    if search is None and (search := next_kernels(*args)) is not None:
                        nexts.add(point)
                    if search is not None:
                        plan_of = workload_plan(search, max_depth, route)
                        found[i] = WorkloadReport(report.workload, search, plan_of)
            return found

        after: dict[str, dict[int, float]] = {}
        found = kept_at(tried)
        tried = {t: won for t, won in tried.items() if t in losses or t in nexts}
        if tried:  # timed again: a patch that made its point no faster (or wrong) is undone
            builds[TUNED] = make_plan(found)
            after, wrong_after = timing.run(builds, sorted(tried), stream=stream)
            # a point only behind (within the margin) keeps its next kernels where the module
            # then beats the build: noise between them must not leave it slower than it was
            helped = [
                t
                for t in tried
                if TUNED not in wrong_after[t]
                and _ratio(after, t) < min(_ratio(times, t), math.inf if t in losses else 1.0)
            ]
            found = kept_at(helped) if len(helped) < len(tried) else found
            losses = {t: tried[t] for t in helped} | {
                t: ("none", tried[t][1]) for t in tried if t not in helped
            }
    except (TuneError, BuildError, RuntimeFailure, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"dcmlir: guard: not run: {first}", file=stream)
        return list(reports)
    _print_table(times, after, losses, stream, nexts)
    return found


def _rival_reports(
    rival: Callable[[], Sequence[WorkloadReport]] | None, stream: IO[str]
) -> list[WorkloadReport]:
    """The rival plan's reports; none where there is no rival or it cannot be made (the
    guard goes on beside IREE's builds)."""
    if rival is None:
        return []
    try:
        return list(rival())
    except (TuneError, BuildError, RuntimeFailure, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"dcmlir: guard: no {RIVAL} plan: {first}", file=stream)
        return []


def _rival_over_tuned(
    times: Mapping[str, Mapping[int, float]], wrong: Mapping[int, list[str]]
) -> float | None:
    """The rival's time over the tuned module's, geomean over the points; None without a
    rival or where its outputs differ from IREE's default anywhere. Per cell its kernels
    cannot always bring its speed: they run in the tuned module's cascades, and a module
    running any explicit kernel is compiled with IREE's ukernels off
    (:data:`~dcmlir.codegen.mmt4d.MMT4D_KERNEL_FLAGS`; to data tiling's own tile 10% on
    the Xeon, nothing on the Zen 4)."""
    if RIVAL not in times or any(RIVAL in names for names in wrong.values()):
        return None
    return finite_geomean([times[RIVAL][p] / times[TUNED][p] for p in times[TUNED]])


def _rival_as_tuned(by_build: Mapping[str, Item]) -> dict[str, Item]:
    """``by_build`` with the rival under the tuned module's name, beside IREE's builds
    only (the rival's plan in place of the tuned one, or its ratios in the table)."""
    return {TUNED: by_build[RIVAL]} | {n: v for n, v in by_build.items() if n in BUILDS}


def _ratio(times: Mapping[str, Mapping[int, float]], point: int) -> float:
    """The tuned module's time at ``point`` over the faster IREE build's."""
    return times[TUNED][point] / min(t[point] for n, t in times.items() if n in BUILDS)


def _losses(
    times: Mapping[str, Mapping[int, float]], wrong: Mapping[int, list[str]], margin: float
) -> dict[int, tuple[str, float]]:
    """Point -> (the IREE build that beats the tuned module there, tuned time over its): by
    more than ``margin``, or wherever the tuned module's outputs differ from the default's."""
    found = {}
    for point, tuned in times[TUNED].items():
        rivals = {n: t[point] for n, t in times.items() if n != TUNED and n not in wrong[point]}
        if not rivals:
            continue
        name = min(rivals, key=lambda n: rivals[n])
        ratio = tuned / rivals[name]
        if TUNED in wrong[point]:
            found[point] = (DEFAULT, max(ratio, 1.0 + margin))
        elif ratio > 1.0 + margin:
            found[point] = (name, ratio)
    return found


def _behind(
    times: Mapping[str, Mapping[int, float]], wrong: Mapping[int, list[str]]
) -> dict[int, tuple[str, float]]:
    """:func:`_losses` against IREE's builds alone, by any margin: where the plan runs the
    faster build's branch there, its next kernels are tried (:func:`.next_kernels`)."""
    return _losses({n: t for n, t in times.items() if n == TUNED or n in BUILDS}, wrong, 0.0)


class _Timing:
    """The builds of one module, compiled and timed at the guard's points."""

    def __init__(
        self, input: str | Path, text: str, plan: Plan, points: list[int], s: GuardSettings
    ) -> None:
        self.input, self.points, self.settings = input, points, s
        self.parameters = module_parameters(input, text)
        self.entry, self.driver = module_entry(text), plan.device or "local-sync"
        self.target = plan.target
        self.compiled: list[tuple[Plan | tuple[str, ...], bytes]] = []

    def _built(self, plan: Plan | tuple[str, ...]) -> bytes:
        """``plan``'s module, compiled once: the second timing of the same builds and the
        timing after a patch compile only what changed."""
        for done, vmfb in self.compiled:
            if done is plan or (isinstance(plan, tuple) and done == plan):
                return vmfb
        if isinstance(plan, Plan):
            vmfb = compile(self.input, plan=plan, stream=io.StringIO()).vmfb
        else:
            vmfb = compile_default(self.input, self.target, flags=plan)
        self.compiled.append((plan, vmfb))
        return vmfb

    def compiles(self, build: Plan | tuple[str, ...], stream: IO[str]) -> bool:
        """Whether IREE builds the input with ``build`` (data tiling does not compile some
        modules: then it is no build a user could pick; nor is a rival plan that fails)."""
        try:
            self._built(build)
        except (TuneError, BuildError) as err:
            lines = str(err).splitlines()
            first = next((line for line in lines[1:] if "error" in line), lines[0] if lines else "")
            name = Path(str(self.input)).name
            what = f"the plan as {RIVAL}" if isinstance(build, Plan) else "IREE's data tiling"
            print(
                f"dcmlir: guard: {what} does not compile {name}, not timed beside it"
                f" ({first.strip()})",
                file=stream,
            )
            return False
        return True

    def run(
        self,
        plans: Mapping[str, Plan | tuple[str, ...]],
        points: Sequence[int] | None = None,
        *,
        stream: IO[str],
    ) -> tuple[dict[str, dict[int, float]], dict[int, list[str]]]:
        """(build -> point -> seconds, point -> the builds whose outputs differ from the
        default's); a build given by flags is IREE's own build of the input with them
        (:func:`compile_default`), a plan is compiled as ``dcmlir compile`` does. A
        progress bar on ``stream``: a whole model's 96 points take minutes."""
        vmfbs = {name: self._built(plan) for name, plan in plans.items()}
        functions = loaded_functions(vmfbs, self.entry, self.driver, self.parameters)
        inputs = random_inputs(functions[TUNED], points or self.points)
        wrong = {p: outputs_agree(functions, arrays, DEFAULT) for p, arrays in inputs.items()}
        settings = self.settings
        bar = Progress(len(inputs), f"guard: {', '.join(plans)}", stream)
        times = timed_side_by_side(
            functions,
            inputs,
            settings.rounds,
            settings.batch_seconds,
            lambda _: bar.advance(),
            settings.point_seconds,
        )
        return times, wrong


def _print_table(
    before: Mapping[str, Mapping[int, float]],
    after: Mapping[str, Mapping[int, float]],
    losses: Mapping[int, tuple[str, float]],
    stream: IO[str],
    nexts: Collection[int] = (),
) -> None:
    """The builds kept, and one ratio per point: the tuned module over the faster IREE
    build, before and (where it lost) after its patch (``nexts``: points where the plan's
    next kernels took the place of the build it already ran,
    :func:`.guard_patches.next_kernels`)."""
    instead = " (where the plan ran an IREE build's branch: its next kernels)"
    kept = ", ".join(
        f"T={t} to {n}" + (instead if t in nexts else "")
        for t, (n, _) in sorted(losses.items())
        if n != "none"
    )
    undone = [str(t) for t, (n, _) in sorted(losses.items()) if n == "none"]
    print(
        f"dcmlir: guard: timed beside {', '.join(n for n in before if n != TUNED)} at "
        f"{len(before[TUNED])} T; "
        + (f"kept {kept}" if kept else "no other build kept")
        + (f"; undone (no faster after): T={', '.join(undone)}" if undone else ""),
        file=stream,
    )
    cells_ = " ".join(
        f"{t}:{_ratio(before, t):.2f}" + (f"->{_ratio(after, t):.2f}" if t in losses else "")
        for t in sorted(before[TUNED])
    )
    print(f"dcmlir: guard: tuned over the faster IREE build, T:ratio: {cells_}", file=stream)
    if RIVAL not in before:
        return
    rival = _rival_as_tuned(before)
    cells_ = " ".join(f"{t}:{_ratio(rival, t):.2f}" for t in sorted(before[RIVAL]))
    print(f"dcmlir: guard: {RIVAL} over the faster IREE build, T:ratio: {cells_}", file=stream)
