"""The roles a tuning run is wired from, passed in the way TVM's ``tune_tasks`` takes them.

Per workload, ``dcmlir.tune`` wires a builder and a runner (inside the
:class:`~dcmlir.measure.loop.Measurer`), the records database they share, a cost model
and the search's settings. Each role can be passed in; a role left ``None`` is the one
built from ``tune``'s own settings, so the product path is the default path. Tests
pass fakes (:mod:`dcmlir.testing`) instead of patching module globals; a caller that
cannot reach the ``tune`` call (the CLI run by a test harness) puts roles in scope with
``with Roles(...).in_scope():``, as TVM's ``with database:`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dcmlir.build.batch import Builder
from dcmlir.build.routes import route_named
from dcmlir.cost_model import CostModel, parallel_units_for
from dcmlir.dispatch import Plan
from dcmlir.driver.guarding import guard_plan
from dcmlir.driver.outcome import WorkloadReport
from dcmlir.driver.placing import choose_placement
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import Runner, RunnerSettings
from dcmlir.records import RecordDatabase
from dcmlir.search.shape_generic import SearchSettings
from dcmlir.target import Target
from dcmlir.workload import Workload

BuilderFactory = Callable[..., Builder]
"""Called as :class:`~dcmlir.build.batch.Builder` is: ``(target, route, *, workdir, ...)``."""
RunnerFactory = Callable[[RunnerSettings], Runner]
"""Called as :class:`~dcmlir.measure.runner.Runner` is, once per measuring process."""
DatabaseFactory = Callable[[str | Path], RecordDatabase]
"""Called with ``tune``'s ``db`` path, as :class:`~dcmlir.records.RecordDatabase` is."""
CostModelFactory = Callable[..., CostModel]
"""Called as :class:`~dcmlir.cost_model.CostModel` is: ``(workload, target, units, seed,
*, route)``."""

PlacementChooser = Callable[..., Plan]
"""Called as :func:`~dcmlir.driver.placing.choose_placement` is: ``(plan, input, *,
stream)``, the plan back with its placement (a test's keeps the plan as it is)."""

Guard = Callable[..., list[WorkloadReport]]
"""Called as :func:`~dcmlir.driver.guarding.guard_plan` is: ``(reports, make_plan, input, *,
stream, max_depth, route, rival)``, the reports back with IREE's build (or the rival
plan's kernels) kept where the tuned module loses to it (a test's keeps them as they are)."""

_IN_SCOPE: ContextVar[Roles | None] = ContextVar("dcmlir_tuning_roles", default=None)


@dataclass(frozen=True)
class Roles:
    """Role objects (or factories) for ``dcmlir.tune``; ``None``: built from its settings.

    ``database`` is a ready database or a factory of one from the ``db`` path;
    ``search`` holds the search's settings, its budget replaced by each workload's
    share (with it, ``tune``'s ``max_kernels``, ``weight_layouts`` and ``seed`` are not used
    for the search); ``placement`` chooses where the tuned module's code lands; ``guard``
    times the tuned module beside IREE's builds and keeps theirs where it loses.
    """

    builder: BuilderFactory | None = None
    runner: RunnerFactory | None = None
    database: RecordDatabase | DatabaseFactory | None = None
    cost_model: CostModelFactory | None = None
    search: SearchSettings | None = None
    placement: PlacementChooser | None = None
    guard: Guard | None = None

    @classmethod
    def current(cls) -> Roles:
        """The roles put in scope by the innermost :meth:`in_scope` (none: all defaults)."""
        return _IN_SCOPE.get() or cls()

    def over(self, other: Roles) -> Roles:
        """These roles, each one left ``None`` taken from ``other``."""
        chosen = {
            name: mine if mine is not None else getattr(other, name)
            for name, mine in ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        }
        return Roles(**chosen)

    @contextmanager
    def in_scope(self) -> Iterator[Roles]:
        """Make these roles (over the ones already in scope) ``tune``'s defaults for a while."""
        token = _IN_SCOPE.set(self.over(Roles.current()))
        try:
            yield self
        finally:
            _IN_SCOPE.reset(token)

    # -- wiring: what tune builds from its settings when a role is not passed in ---------------
    def open_database(self, path: str | Path) -> RecordDatabase:
        """The records of the run, loaded (a resumed run measures nothing recorded again)."""
        if isinstance(self.database, RecordDatabase):
            records = self.database
        else:
            records = (self.database or RecordDatabase)(path)
        records.load()
        return records

    def measurer(
        self,
        workload: Workload,
        target: Target,
        records: RecordDatabase,
        *,
        route: str,
        runner_settings: RunnerSettings,
        stream: IO[str],
    ) -> Measurer:
        """The builder, the runner and the records of one workload, tied together."""
        return Measurer(
            workload,
            target,
            records,
            route=route_named(route),
            runner_settings=runner_settings,
            stream=stream,
            runner=self.runner,
            builder=self.builder,
        )

    def model(
        self, workload: Workload, target: Target, measurer: Measurer, seed: int, route: str
    ) -> CostModel:
        """The cost model of one workload, for the parallel units its runner measures on."""
        make = self.cost_model or CostModel
        units = parallel_units_for(target, measurer.runner_settings.driver)
        return make(workload, target, units, seed, route=route)

    def search_settings(
        self, budget: int, max_kernels: int, seed: int, weight_layouts: int = 2
    ) -> SearchSettings:
        """One workload's search settings, ``budget`` being its share of the whole budget."""
        if self.search is None:
            return SearchSettings(
                budget=budget, max_kernels=max_kernels, seed=seed, weight_layouts=weight_layouts
            )
        return dataclasses.replace(self.search, budget=budget)

    def place(self, plan: Plan, input: str | Path, stream: IO[str]) -> Plan:
        """The plan with its compiled module's placement (:mod:`.placing`)."""
        return (self.placement or choose_placement)(plan, input, stream=stream)

    def guarded(
        self,
        reports: list[WorkloadReport],
        make_plan: Callable[..., Plan],
        input: str | Path,
        stream: IO[str],
        *,
        max_depth: int | None,
        route: str,
        rival: Callable[[], Sequence[WorkloadReport]] | None = None,
    ) -> list[WorkloadReport]:
        """The reports with IREE's build, or ``rival``'s kernels, kept where the tuned
        module loses to them (:mod:`.guarding`)."""
        guard = self.guard or guard_plan
        return guard(
            reports, make_plan, input, stream=stream, max_depth=max_depth, route=route, rival=rival
        )
