"""Benchmarks: a tuned workload or model against every baseline a user could pick.

Read in data-flow order: :mod:`~dcmlir.bench.baselines` (the peers' module
texts), :mod:`~dcmlir.bench.weights` (operand 1 as a module constant),
:mod:`~dcmlir.bench.peers` (each baseline built and ready to time),
:mod:`~dcmlir.bench.compare` (compile every baseline, time them side by
side), :mod:`~dcmlir.bench.results` (what was measured), then
:mod:`~dcmlir.bench.outputs` and :mod:`~dcmlir.bench.plots` (tables, JSON,
plots). Import from here: ``from dcmlir.bench import bench, write_outputs``.
"""

from dcmlir.bench.compare import (
    DEFAULT_BUCKETS,
    BenchError,
    BenchSettings,
    bench,
    default_shapes,
    load_bench_workload,
)
from dcmlir.bench.outputs import load_result, markdown, write_outputs
from dcmlir.bench.plots import plot
from dcmlir.bench.results import BASELINE, BASELINES, BenchResult, Cell, geomean
from dcmlir.bench.weights import WEIGHT_MODES

__all__ = [
    "BASELINE",
    "BASELINES",
    "DEFAULT_BUCKETS",
    "WEIGHT_MODES",
    "BenchError",
    "BenchResult",
    "BenchSettings",
    "Cell",
    "bench",
    "default_shapes",
    "geomean",
    "load_bench_workload",
    "load_result",
    "markdown",
    "plot",
    "write_outputs",
]
