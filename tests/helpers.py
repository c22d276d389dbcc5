"""IR snippets and small builders the tests share (a plain module: conftest keeps fixtures).

Tests import these with ``from helpers import DENSE``: pytest puts ``tests/`` on the
path (rootdir-relative imports), as it did for ``conftest``.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from dcmlir.cost_model import TrivialCostModel
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.records import RecordDatabase
from dcmlir.search.round_log import RoundLog
from dcmlir.search.shape_generic import SearchSettings, ShapeGenericSearch
from dcmlir.space import space_for
from dcmlir.target import CpuTarget
from dcmlir.testing import FakeMeasurer
from dcmlir.workload import Workload, workloads, write_ranges

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmarks_on_path() -> None:
    """Put ``benchmarks/`` on the import path, so a test can import a benchmark script."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))


DENSE = """
func.func @dense(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}
"""

SCORES = """
func.func @scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>, %init: tensor<12x?x?xf32>) -> tensor<12x?x?xf32> {
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}
"""

CONTEXT = """
func.func @context(%p: tensor<12x?x?xf32>, %v: tensor<12x?x64xf32>) -> tensor<12x?x64xf32> {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %p, %c1 : tensor<12x?x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<12x?x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  %r = linalg.batch_matmul ins(%p, %v : tensor<12x?x?xf32>, tensor<12x?x64xf32>) outs(%init : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  return %r : tensor<12x?x64xf32>
}
"""

TRANSPOSED = """
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs_t = affine_map<(d0, d1, d2) -> (d1, d2)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @transposed(%x: tensor<?x768xf32>, %w: tensor<3072x768xf32>, %init: tensor<?x3072xf32>) -> (tensor<?x3072xf32>, tensor<?x3072xf32>) {
  %a = linalg.matmul indexing_maps = [#lhs, #rhs_t, #out] ins(%x, %w : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  %b = linalg.generic {indexing_maps = [#lhs, #rhs_t, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %p = arith.mulf %i, %j : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<?x3072xf32>
  return %a, %b : tensor<?x3072xf32>, tensor<?x3072xf32>
}
"""


def dense_with_range(lo: int, hi: int) -> Workload:
    """The :data:`DENSE` matmul as a workload whose dynamic M ranges over ``lo..hi``."""
    return with_ranges(DENSE, {0: (lo, hi)})


def with_ranges(text: str, ranges: dict[int, tuple[int, int]]) -> Workload:
    """The one op of ``text`` as a workload, its dynamic loops' ranges ``ranges``."""
    with ir.Context():
        module = parse_module(text)
        ((op, _),) = list(workloads(module.operation))
        write_ranges(op, ranges)
        ((_, found),) = list(workloads(module.operation))
    assert isinstance(found, Workload)
    return found


def fake_dense_search(
    db: Path,
    budget: int,
    *,
    hi: int = 32,
    verify_batch: int = 16,
    machine: type[FakeMeasurer] = FakeMeasurer,
    model: type[TrivialCostModel] = TrivialCostModel,
    seed: int = 0,
    log: RoundLog | None = None,
) -> tuple[FakeMeasurer, ShapeGenericSearch]:
    """A search of :data:`DENSE` (M in 1..``hi``) over the CPU space, on a fake ``machine``
    with records in ``db`` and a ``model`` of ``seed``: the tests' synthetic search."""
    workload = dense_with_range(1, hi)
    target = CpuTarget()
    measurer = machine(workload, RecordDatabase(db, fsync=False))
    search = ShapeGenericSearch(
        workload,
        measurer,  # type: ignore[arg-type]
        model(workload, target, seed=seed),
        space_for(target),
        SearchSettings(budget=budget, max_kernels=4, verify_batch=verify_batch),
        stream=io.StringIO(),
        log=log,
    )
    return measurer, search
