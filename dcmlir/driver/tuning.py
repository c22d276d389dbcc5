"""``dcmlir.tune``: workloads -> budget split -> search per workload -> plan.

The data flow of a tuning run, in the order the code runs it: the module's workloads
are loaded (:mod:`dcmlir.driver.loading`; identical ops in different layers tuned
once); with more than one, IREE's default is probed at a few shapes of each and one
measurement budget is split over them by their estimated share of model time; the
shape-generic search runs per workload on the roles of :mod:`dcmlir.driver.roles`
(builder, runner, records, cost model: each passed in or built from the settings);
each search becomes a :class:`~dcmlir.dispatch.plan.WorkloadPlan`, and the plan is
written with the model's workload graph beside it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

from dcmlir.build.inspect import with_cached_figures
from dcmlir.dispatch import Plan
from dcmlir.driver.loading import GLOBAL_OPT, LoadedModel, TuneError, check_writable, load_model
from dcmlir.driver.offline import PREDICTED_MARK, offline_wanted, predicted_search
from dcmlir.driver.outcome import TuneReport, WorkloadReport
from dcmlir.driver.plan_tree import workload_plan
from dcmlir.driver.retuning import retuned_in_one_layout, retuned_without_rejected
from dcmlir.driver.rival_plans import runs_explicit_kernels, without_explicit_kernels
from dcmlir.driver.roles import (
    BuilderFactory,
    CostModelFactory,
    DatabaseFactory,
    Roles,
    RunnerFactory,
)
from dcmlir.measure.host import device_threads
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase
from dcmlir.search.model_graph import (
    PROBE_FRACTIONS,
    ModelGraph,
    graph_path_for,
    probe_shapes,
    run_shapes,
)
from dcmlir.search.round_log import RoundLog
from dcmlir.search.shape_generic import SearchResult, SearchSettings, ShapeGenericSearch
from dcmlir.search.shape_range import free_grid_note
from dcmlir.shapes import Shape
from dcmlir.space import (
    Candidate,
    DefaultCandidate,
    Mmt4dCandidate,
    packing_problem,
    workload_space,
)
from dcmlir.target import CpuTarget, CudaTarget, Target, target_from_name
from dcmlir.workload import Workload

PROBES_FROM = 2 * len(PROBE_FRACTIONS)
"""Budget per workload from which IREE's default is probed for the split (half of it at
most goes to probes); below that the shares are FLOPs shares."""
SHORT_CALL = 250e-6
"""Seconds per call below which a shape's candidates are timed call by call while tuning
(:attr:`~dcmlir.measure.timing.MeasureSettings.call_by_call_below`): 50 samples of one call
per input set after an untimed one cost 400 calls, what 3 samples of the minimum time cost
at about this length, and they put identical builds within 1-2% instead of 5-16%."""
SETTLE_TOLERANCE = 0.05
"""A kernel's median more than this over its fastest sample takes its shape another round
(:func:`~dcmlir.measure.timing.unsettled`), up to :data:`SETTLE_ROUNDS` times the rounds."""
SETTLE_ROUNDS = 4


def tuning_measure(min_time: float, rounds: int) -> MeasureSettings:
    """How ``dcmlir tune`` times (and an oracle made to be compared with it)."""
    return MeasureSettings(
        min_time=min_time,
        rounds=rounds,
        warmup=min_time,
        call_by_call_below=SHORT_CALL,
        settle_tolerance=SETTLE_TOLERANCE,
        most_rounds=SETTLE_ROUNDS * rounds,
    )


def tune(
    input: str | Path,
    *,
    dims: Sequence[str] = (),
    target: str | Target = "llvm-cpu",
    arch: str | None = None,
    budget: int = 400,
    max_kernels: int = 8,
    weight_layouts: int = 2,
    db: str | Path = "records.jsonl",
    output: str | Path | None = "plan.json",
    route: str = "config",
    seed: int = 0,
    max_depth: int | None = None,
    device: str = "local-sync",
    threads: int | None = None,
    min_time: float = 0.03,
    rounds: int = 3,
    timeout: float = 60.0,
    level: str = "auto",
    stream: IO[str] | None = None,
    builder: BuilderFactory | None = None,
    runner: RunnerFactory | None = None,
    database: RecordDatabase | DatabaseFactory | None = None,
    cost_model: CostModelFactory | None = None,
    search: SearchSettings | None = None,
    predict: bool | None = None,
    placement: bool = True,
    guard: bool = True,
    search_log: str | Path | None = None,
) -> TuneReport:
    """Tune every dynamic workload of ``input`` (a kernel or a whole model), write the plan.

    ``dims``: ``LO:HI`` for every dynamic dim and/or ``argN.D=LO:HI`` per
    argument dim (ranges in the IR, ``util.assume.int``, count too);
    ``budget``: timed (candidate, shape) pairs for the whole module. With more
    than one distinct workload, IREE's default is first timed at a few probe
    shapes of each (counted in the budget), and the rest is split by each
    workload's estimated share of model time, with a floor per workload.
    Records already in ``db`` count, so a resumed run re-measures nothing.
    ``weight_layouts``: 1 keeps a constant weight in one layout (one kernel family per
    workload); 2 (the default) lets two families share a workload where each alone loses
    to an IREE build somewhere (:data:`~dcmlir.search.selection.MIX_GAIN`), at the cost
    of a second copy of that weight.
    ``level``: ``input``, ``global-optimization`` or ``auto`` (see
    :mod:`dcmlir.driver.loading`). ``device``: the IREE runtime device kernels are
    timed on; ``threads``: ``local-task``'s workers (default every core), which is also
    the ``P`` the cost model spreads tile grids over; the plan records both. The model's
    workload graph is saved beside the plan (``plan.graph.json``).

    ``guard``: time the compiled module beside IREE's default and data-tiling builds and
    keep theirs where it is slower (:mod:`dcmlir.driver.guarding`; CPU targets).
    ``placement``: time the compiled module under four placements of its code and keep
    the fastest in the plan (:mod:`dcmlir.driver.placing`; CPU targets).

    ``predict``: plan a CUDA target from the offline model (:mod:`dcmlir.driver.offline`)
    instead of timing; None: do so where no GPU is here and ptxas is installed. The plan
    then says ``"predicted": true``.

    ``search_log``: a JSON-lines file, written anew, of each search's rounds: what each
    round timed, why, and its estimates before (:mod:`dcmlir.search.round_log`); a run
    resumed from ``db`` logs every round again, timed now or not.

    ``builder``, ``runner``, ``database``, ``cost_model`` and ``search``: the roles
    (:class:`~dcmlir.driver.roles.Roles`); each one not given is the one in scope,
    else the one built from the settings above.
    """
    stream = stream if stream is not None else sys.stderr
    start = time.perf_counter()
    check_writable(output, "-o", example="plan.json")  # before the tuning, not after it
    check_writable(search_log, "--search-log", example="rounds.jsonl")
    target_object = target if not isinstance(target, str) else target_from_name(target, arch)
    target_object = target_with_threads(target_object, device, threads)
    model = load_model(input, dims, stream, level=level, target=target_object)
    found = model.workloads
    if not found:  # nothing to tune: an empty plan, so that dcmlir compile passes it through
        plan = Plan(
            target_object,
            Path(str(input)).name,
            (),
            level=model.level,
            **_timed_on(target_object, device, threads),
        )
        return TuneReport(
            plan,
            [],
            time.perf_counter() - start,
            model.skipped,
            level=model.level,
            level_reason=model.level_reason,
            graph_path=_save_plan(plan, model.graph, output, db) if output is not None else None,
        )
    if offline_wanted(target_object, predict):
        if not isinstance(target_object, CudaTarget):
            raise TuneError(f"a predicted plan is for CUDA targets, not {target_object.backend}")
        if search_log is not None:
            print(
                f"{PREDICTED_MARK} dcmlir: note: --search-log {search_log}: a predicted plan "
                "has no rounds (nothing is timed); no log written",
                file=stream,
            )
        settings = search or SearchSettings(
            max_kernels=max_kernels, seed=seed, weight_layouts=weight_layouts
        )
        reports = []
        for workload in found:
            _note_free_grid(workload, stream)
            try:
                result = predicted_search(workload, target_object, settings, stream)
            except ValueError as err:
                raise TuneError(str(err)) from None
            reports.append(
                WorkloadReport(workload, result, workload_plan(result, max_depth, route))
            )
        model.graph.estimate(lambda w: {})
        plan = Plan(
            target_object,
            Path(str(input)).name,
            tuple(r.plan for r in reports),
            level=model.level,
            predicted=True,
        )
        return TuneReport(
            plan,
            reports,
            time.perf_counter() - start,
            model.skipped,
            graph=model.graph,
            level=model.level,
            level_reason=model.level_reason,
            graph_path=_save_plan(plan, model.graph, output, db) if output is not None else None,
        )
    roles = Roles(
        builder=builder, runner=runner, database=database, cost_model=cost_model, search=search
    ).over(Roles.current())
    records = roles.open_database(db)
    db = records.path if isinstance(roles.database, RecordDatabase) else db
    runner_settings = RunnerSettings(
        tuning_measure(min_time, rounds),
        driver=device,
        timeout=timeout,
        threads=threads,
    )
    graph = model.graph

    def make_plan(done: Sequence[WorkloadReport]) -> Plan:
        return Plan(
            target_object,
            Path(str(input)).name,
            tuple(r.plan for r in done),
            level=model.level,
            **_timed_on(target_object, device, threads),
        )

    reports: list[WorkloadReport] = []
    failed: list[str] = []  # workloads no kernel could run, with why
    with ExitStack() as stack:
        log_path = None if search_log is None else Path(search_log)
        round_log = RoundLog(None if log_path is None else stack.enter_context(log_path.open("w")))
        measurers = {
            w.key: stack.enter_context(
                roles.measurer(
                    w,
                    target_object,
                    records,
                    route=route,
                    runner_settings=runner_settings,
                    stream=stream,
                )
            )
            for w in found
        }
        probes = (
            _probe_defaults(graph, measurers, stream)
            if len(found) > 1 and budget >= PROBES_FROM * len(found)
            else {}
        )
        graph.estimate(lambda w: probes.get(w.key, {}))
        probe_count = sum(len(p) for p in probes.values())
        parts = graph.split(max(budget - probe_count, len(found)))

        explicit = _explicit_kernels_offered(model, guard, stream)

        def search_of(
            workload: Workload,
            excluded: frozenset[str] = frozenset(),
            floor_only: frozenset[str] = frozenset(),
        ) -> SearchResult:
            measurer = measurers[workload.key]
            settings = roles.search_settings(parts[workload.key], max_kernels, seed, weight_layouts)
            return ShapeGenericSearch(
                workload,
                measurer,
                roles.model(workload, target_object, measurer, seed, route),
                [
                    c
                    for c in _space_of(target_object, workload)
                    if c.key() not in excluded and (explicit or not isinstance(c, Mmt4dCandidate))
                ],
                dataclasses.replace(settings, floor_only=floor_only) if floor_only else settings,
                stream=stream,
                shapes=workload.tied_shapes(),
                known=[(DefaultCandidate(), shape) for shape in probes.get(workload.key, {})],
                log=round_log,
            ).run()

        for workload in found:
            _note_free_grid(workload, stream)
            result = search_of(workload)
            failure = _nothing_ran(workload, result, records, target_object)
            if failure is not None:  # every kernel failed: the op stays with IREE's default
                failed.append(failure)
                continue
            reports.append(
                WorkloadReport(workload, result, workload_plan(result, max_depth, route))
            )
            _record_outcome(graph, workload, result, len(probes.get(workload.key, {})))
        again = (
            retuned_without_rejected(reports, search_of, make_plan, input, stream)
            if model.level == GLOBAL_OPT
            else retuned_in_one_layout(reports, search_of, stream)
        )
        for key, result in again:
            position = next(i for i, r in enumerate(reports) if r.workload.key == key)
            workload = reports[position].workload
            plan_of = workload_plan(result, max_depth, route)
            reports[position] = WorkloadReport(workload, result, plan_of)
            _record_outcome(graph, workload, result, len(probes.get(key, {})))
        if guard and reports:  # with the measurers open: the rival plan is searched for
            tuned = list(reports)

            def rival() -> list[WorkloadReport]:
                print(
                    "dcmlir: guard: searching again without the explicit mmt4d kernels, "
                    "to time that plan beside this one",
                    file=stream,
                )
                found = without_explicit_kernels(tuned, search_of, max_depth, route)
                again = [r for r, t in zip(found, tuned, strict=True) if r is not t]
                timed = sum(r.search.measured_now for r in again)
                print(
                    f"dcmlir: guard: the rival's searches timed {timed} new pairs "
                    "(beyond the budget)",
                    file=stream,
                )
                return found

            reports = roles.guarded(
                tuned,
                make_plan,
                input,
                stream,
                max_depth=max_depth,
                route=route,
                rival=rival if runs_explicit_kernels(tuned) else None,
            )
    if failed and not reports:
        raise TuneError(failed[0])
    for failure in failed:
        print(f"dcmlir: warning: {failure}; left to IREE", file=stream)
    plan = make_plan(reports)
    plan = roles.place(plan, input, stream) if placement else plan
    graph_path = _save_plan(plan, graph, output, db) if output is not None else None
    return TuneReport(
        plan,
        reports,
        time.perf_counter() - start,
        model.skipped,
        graph=graph,
        level=model.level,
        level_reason=model.level_reason,
        probes=probe_count,
        graph_path=graph_path,
    )


def _timed_on(target: Target, device: str, threads: int | None) -> dict[str, Any]:
    """What the plan says its kernels were timed on: a GPU target runs on ``cuda``
    whatever ``device`` says (threads do not apply there)."""
    if isinstance(target, CudaTarget):
        return {"device": "cuda", "threads": None}
    return {"device": device, "threads": device_threads(device, threads)}


def target_with_threads(target: Target, device: str, threads: int | None) -> Target:
    """The target as tuned: on ``local-task`` its ``threads`` are the workers kernels run
    on (records and the cost model's ``P`` follow them)."""
    if threads is None:
        return target
    if threads < 1:
        raise TuneError(f"--threads must be >= 1, not {threads}")
    if device != "local-task" or not isinstance(target, CpuTarget):
        raise TuneError("--threads applies to --device local-task on llvm-cpu only")
    return dataclasses.replace(target, threads=threads)


def _explicit_kernels_offered(model: LoadedModel, guard: bool, stream: IO[str]) -> bool:
    """Whether the explicit mmt4d kernels are in the space (docs/design.md section 12).

    At the global-optimization level only with the guard, which times the plan beside the
    same plan without them (:mod:`.rival_plans`): on the demo's encoder they made T = 9..24
    30% faster and T = 1..8 25% slower (there the model streams weights its op alone kept
    in cache, and runs without IREE's ukernels). A plan that runs them leaves the entry
    whole (their weights exist in their own layout only) and IREE's data tiling compiles
    the ops around them."""
    if model.level != GLOBAL_OPT or guard:
        return True
    if not any(packing_problem(w) is None for w in model.workloads):
        return True
    why = "the module is tuned at IREE's global-optimization level without the guard"
    print(f"dcmlir: explicit mmt4d kernels not offered: {why}", file=stream)
    return False


def _space_of(target: Target, workload: Workload) -> list[Candidate]:
    """The workload's space; on CUDA with the real figures cached for it (limits, occupancy)."""
    space = workload_space(target, workload)
    if not isinstance(target, CudaTarget):
        return space
    real = with_cached_figures(workload, target, space)
    return [c for c in real if not c.problems(target)]


def _probe_defaults(
    graph: ModelGraph, measurers: Mapping[str, Measurer], stream: IO[str]
) -> dict[str, dict[Shape, float]]:
    """IREE's default timed at a few shapes of each workload (from the records when there)."""
    found: dict[str, dict[Shape, float]] = {}
    default = DefaultCandidate()
    for key, workload in graph.workloads.items():
        shapes = probe_shapes(workload)
        print(
            f"dcmlir: probe IREE's default on {workload.kind} key={key} at "
            f"{', '.join('x'.join(map(str, s)) for s in shapes)}",
            file=stream,
        )
        report = measurers[key].measure([default], shapes)
        found[key] = {shape: report.median(default.key(), shape) for shape in shapes}
    return found


def _note_free_grid(workload: Workload, stream: IO[str]) -> None:
    """Say where two loops of one range are searched over their grid (:func:`free_grid_note`)."""
    note = free_grid_note(workload)
    if note is not None:
        print(note, file=stream)


def _nothing_ran(
    workload: Workload, search: SearchResult, records: RecordDatabase, target: Target
) -> str | None:
    """Why no kernel of ``workload`` can be planned (every measurement failed), or None."""
    if any(math.isfinite(seconds) for seconds in search.measured.values()):
        return None
    failures = records.records(
        workload.key, target.key(), include_failures=True, only_current_version=True
    )
    errors = [r.error for r in failures if r.error]
    first = errors[-1].splitlines()[0] if errors else "no measurement ran"
    return (
        f"{workload.location}: every measurement of {workload.kind} {workload.key} failed "
        f"({len(search.measured)} pairs), so there is nothing to choose from; last error: {first}"
    )


def _record_outcome(
    graph: ModelGraph, workload: Workload, search: SearchResult, probes: int
) -> None:
    """Per-call estimates after tuning: the chosen kernels' and IREE's default over the range."""
    estimate = graph.estimates[workload.key]
    estimate.measurements = search.measurements + probes
    shapes = [s for s in run_shapes(workload) if s in set(search.shapes)] or search.shapes
    default_column = next(
        (i for i, c in enumerate(search.candidates) if isinstance(c, DefaultCandidate)), None
    )
    tuned = [search.kernel_cost(shape, search.choice[shape])[0] for shape in shapes]
    if not all(math.isfinite(t) for t in tuned):
        return
    estimate.tuned_seconds = estimate.ops * sum(tuned) / len(tuned)
    if default_column is not None:
        rows = [search.shapes.index(s) for s in shapes]
        default = [float(search.estimate[row, default_column]) for row in rows]
        if all(math.isfinite(t) for t in default):
            estimate.default_search_seconds = estimate.ops * sum(default) / len(default)


def _save_plan(plan: Plan, graph: ModelGraph, output: str | Path, db: str | Path) -> Path | None:
    """Write the plan and its workload graph beside it; the graph's path.

    A plan sent to a device (``-o /dev/null``, ``/dev/stdout``) has no folder to hold a
    graph beside it: none is written (it used to create ``/dev/null.graph.json``).
    """
    real = Path(os.path.realpath(output))
    graph_path = None if real.exists() and not real.is_file() else graph_path_for(output)
    try:
        plan.save(output)
        if graph_path is not None:
            graph.save(graph_path)
    except OSError as err:
        raise TuneError(
            f"cannot write the plan {err.filename or output}: {err.strerror or err}; the "
            f"records in {db} are kept: run again (with another -o) to write it without "
            "measuring again"
        ) from None
    return graph_path
