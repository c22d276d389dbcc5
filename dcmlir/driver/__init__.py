"""The Python API: load a module's workloads, tune them, compile with the plan.

In data-flow order: :mod:`~dcmlir.driver.loading` (a module's workloads, at the
input or IREE's global-optimization level), :mod:`~dcmlir.driver.roles` (the
builder, runner, records, cost model and search settings a run is wired from),
:mod:`~dcmlir.driver.tuning` (budget split, search per workload, plan) with
:mod:`~dcmlir.driver.outcome` (what it hands back), and
:mod:`~dcmlir.driver.compiling` (plan -> dispatch -> IREE). ``dcmlir.tune`` and
``dcmlir.compile`` resolve here. Import from here: the split into modules is not
part of the interface.
"""

from dcmlir.driver.compiling import CompileResult, compile, compile_default
from dcmlir.driver.loading import (
    GLOBAL_OPT,
    LEVEL_CHOICES,
    LoadedModel,
    TuneError,
    load_model,
    load_workloads,
    lower_to_global_optimization,
)
from dcmlir.driver.outcome import TuneReport, WorkloadReport
from dcmlir.driver.plan_tree import TREE_TOLERANCE, workload_plan
from dcmlir.driver.roles import (
    BuilderFactory,
    CostModelFactory,
    DatabaseFactory,
    Roles,
    RunnerFactory,
)
from dcmlir.driver.tuning import PROBES_FROM, target_with_threads, tune

__all__ = [
    "GLOBAL_OPT",
    "LEVEL_CHOICES",
    "PROBES_FROM",
    "TREE_TOLERANCE",
    "BuilderFactory",
    "CompileResult",
    "CostModelFactory",
    "DatabaseFactory",
    "LoadedModel",
    "Roles",
    "RunnerFactory",
    "TuneError",
    "TuneReport",
    "WorkloadReport",
    "compile",
    "compile_default",
    "load_model",
    "load_workloads",
    "lower_to_global_optimization",
    "target_with_threads",
    "tune",
    "workload_plan",
]
