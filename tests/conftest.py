"""Shared IR snippets for the pytest suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep the user's ~/.cache out of the tests; one cache for the session saves compiles."""
    directory = tmp_path_factory.mktemp("dcmlir-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DCMLIR_CACHE_DIR", str(directory))
        yield directory


@pytest.fixture
def write_mlir(tmp_path):
    """Write IR text to a file and return its path."""

    def write(text: str, name: str = "input.mlir") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test collected is a broken suite, not a pass: fail loudly instead of exit 5."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        print(
            "\nerror: no tests were collected; the suite is broken (check paths and -k/-m filters)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
