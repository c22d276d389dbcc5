"""Fuzzed correctness of the passes and of the compiled dispatch (hypothesis).

Random contraction modules (form, loop order, layouts, dynamic loops, extents,
element types, ranges, fused consumers) go through ``dcmlir-microkernel-tile``
and, with random plans, ``dcmlir-emit-dispatch``; a few are compiled by IREE
and run against numpy. The strategies and the properties live in ``tests/fuzz_strategies.py``
(``benchmarks/fuzz.py`` runs them for longer). CI runs a fixed, derandomized
set of examples, so a failure here reproduces with the same command; the
number of cases each property ran is printed at the end of the module.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fuzz_strategies as fs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dcmlir.ir.mlir import ir, parse_module
from dcmlir.space import candidate_from_key

# Examples per property in CI. The IR properties take tens of milliseconds a case;
# a compiled case takes one to a few seconds (iree-compile on a loaded 2-core machine).
WORKLOAD_EXAMPLES = 100
TILE_EXAMPLES = 120
EMIT_EXAMPLES = 60
COMPILED_EXAMPLES = 6
KERNEL_MODULE_EXAMPLES = 4

CI = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", autouse=True)
def report_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print how many cases each property ran (also with output captured)."""
    before = fs.COUNTS.copy()
    yield
    ran = fs.COUNTS - before
    line = "fuzz cases run: " + ", ".join(f"{name} {ran[name]}" for name in sorted(ran))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"\n{line}")


def _ran(name: str, property_test: object) -> int:
    before = fs.COUNTS[name]
    property_test()  # type: ignore[operator]
    return fs.COUNTS[name] - before


# --- properties ----------------------------------------------------------------------------------


@settings(CI, max_examples=WORKLOAD_EXAMPLES)
@given(fs.contractions(consumers=True), st.integers(0, 2**16))
def _workload_property(case: fs.Contraction, seed: int) -> None:
    fs.check_workload(case, seed)


def test_workload_analysis_follows_the_module() -> None:
    assert _ran("workload", _workload_property) >= WORKLOAD_EXAMPLES


@settings(CI, max_examples=TILE_EXAMPLES)
@given(fs.contractions(copies=True), fs.tile_sizes)
def _tile_property(case: fs.Contraction, sizes: tuple[int, ...]) -> None:
    fs.check_microkernel_tile(case, sizes)


def test_microkernel_tile_output_verifies_and_tiles_are_static() -> None:
    assert _ran("microkernel_tile", _tile_property) >= TILE_EXAMPLES


@settings(CI, max_examples=EMIT_EXAMPLES)
@given(fs.contractions(consumers=True), fs.plan_specs())
def _emit_property(case: fs.Contraction, spec: fs.PlanSpec) -> None:
    fs.check_emit_dispatch(case, spec)


def test_emitted_cascade_selects_what_the_tree_selects() -> None:
    before = fs.COUNTS["emit_dispatch.shapes"]
    assert _ran("emit_dispatch", _emit_property) >= EMIT_EXAMPLES
    assert fs.COUNTS["emit_dispatch.shapes"] - before >= 10 * EMIT_EXAMPLES


F16_BATCH = fs.Contraction(
    form="batch_matmul_transpose_b",
    op_name="linalg.batch_matmul",
    loops="bmnk",
    layouts=("bmk", "bnk", "bmn"),
    extents={"b": 3, "m": 5, "n": 24, "k": 40},
    dynamic=frozenset({"b", "m"}),
    types=("f16", "f16", "f16"),
    ranges={"b": (1, 4), "m": (2, 20)},
    explicit_maps=True,
    consumers=("bias", "transpose", "relu"),
)
MIXED_K_FROM_ZERO = fs.Contraction(
    form="generic",
    op_name="linalg.generic",
    loops="nmk",
    layouts=("km", "nk", "nm"),
    extents={"m": 17, "n": 9, "k": 1},
    dynamic=frozenset({"k", "n"}),
    types=("f16", "f16", "f32"),
    ranges={"k": (0, 33), "n": (0, 12)},
    explicit_maps=True,
    annotate=True,
)


def _spec(*keys: str, seed: int = 1, pattern: str = "regions") -> fs.PlanSpec:
    return fs.PlanSpec(tuple(candidate_from_key(k) for k in keys), pattern, seed, None)


@settings(CI, max_examples=COMPILED_EXAMPLES)
@given(fs.compiled_contractions(), fs.compiled_plans())
@example(F16_BATCH, _spec("default", "cpu:wg16x64:v4x16:k8", "cpu:wg32x128:v8x32:k2"))
@example(MIXED_K_FROM_ZERO, _spec("cpu:wg8x128:v1x16:k8", "cpu:wg32x32:v8x16:k4", seed=7))
def _compiled_property(case: fs.Contraction, spec: fs.PlanSpec) -> None:
    fs.check_compiled(case, spec)


def test_compiled_dispatch_matches_numpy() -> None:
    """Shapes 0, 1, the range ends, one past and beyond, random ones: IREE's output = numpy."""
    before = fs.COUNTS["compiled.shapes"]
    assert _ran("compiled", _compiled_property) >= COMPILED_EXAMPLES
    assert fs.COUNTS["compiled.shapes"] - before >= 5 * COMPILED_EXAMPLES


@settings(CI, max_examples=KERNEL_MODULE_EXAMPLES)
@given(fs.compiled_contractions(), fs.compiled_plans())
def _kernel_module_property(case: fs.Contraction, spec: fs.PlanSpec) -> None:
    fs.check_kernel_module(case, spec)


def test_tuning_kernel_modules_match_numpy() -> None:
    """The module the tuner builds and times computes the op, for every variant."""
    before = fs.COUNTS["kernel_module.calls"]
    assert _ran("kernel_module", _kernel_module_property) >= KERNEL_MODULE_EXAMPLES
    assert fs.COUNTS["kernel_module.calls"] - before >= 4 * KERNEL_MODULE_EXAMPLES


# --- regressions: what the fuzzer found ------------------------------------------------------------

K_ONLY = fs.Contraction(
    form="matmul",
    op_name="linalg.matmul",
    loops="mnk",
    layouts=("mk", "kn", "mn"),
    extents={"m": 3, "n": 16, "k": 1},
    dynamic=frozenset({"k"}),
    types=("f32", "f32", "f32"),
    ranges={"k": (1, 64)},
)


def test_tile_where_the_parallel_loops_fit_in_one_tile() -> None:
    """Found by the fuzzer: only K dynamic, M and N static and no larger than the tile.

    The one-step scf.forall is folded by canonicalization; the pass used to fail with
    "micro-kernel op is not inside an scf.forall region". The op is tiled all the same.
    """
    fs.check_microkernel_tile(K_ONLY, (8, 16, 8))
    with ir.Context():
        module = K_ONLY.module()
        fs.run_tile(module, (8, 16, 8))
        text = str(module)
    assert "scf.forall" not in text and "scf.for " in text
    assert "tensor<8x8xf32>, tensor<8x16xf32>) outs(%" in text


# The module the fuzzer found; the pass read the location of an op the script had replaced.
REPLACED_OP_CRASH = """
func.func @fuzz(%a: tensor<1x26x?xf32>, %b: tensor<40x26x1xf32>) -> tensor<1x40x?xf32> {
  %i2 = arith.constant 2 : index
  %n2 = tensor.dim %a, %i2 : tensor<1x26x?xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%n2) : tensor<1x40x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1x40x?xf32>) -> tensor<1x40x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d3, d1, d0)>, affine_map<(d0, d1, d2, d3) -> (d2, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d3, d2, d0)>], iterator_types = ["parallel", "reduction", "parallel", "parallel"]} ins(%a, %b : tensor<1x26x?xf32>, tensor<40x26x1xf32>) outs(%init : tensor<1x40x?xf32>) {
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
  } -> tensor<1x40x?xf32>
  return %r : tensor<1x40x?xf32>
}
"""


def test_tile_never_reads_an_op_the_script_replaced(tmp_path: Path) -> None:
    """Found by the fuzzer: dcmlir-opt died with a segmentation fault on this module.

    After the transform script ran, the pass read the location of the original op
    (its Python handle dangles once the script replaces it). Run in a subprocess,
    so a crash fails this test instead of the whole suite.
    """
    source = tmp_path / "crash.mlir"
    source.write_text(REPLACED_OP_CRASH)
    opt = Path(sys.executable).parent / "dcmlir-opt"
    result = subprocess.run(
        [str(opt), str(source), "-p", "dcmlir-microkernel-tile{sizes=1,47,1}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert "remark: micro-kernel 1x1x47x1 (m,k,n,b)" in result.stderr
    with ir.Context():
        assert parse_module(result.stdout).operation.verify()


K_FIRST = fs.Contraction(
    form="generic",
    op_name="linalg.generic",
    loops="kmn",
    layouts=("mk", "kn", "mn"),
    extents={"m": 16, "n": 16, "k": 16},
    dynamic=frozenset({"m"}),
    types=("f32", "f32", "f32"),
    ranges={"m": (1, 16)},
    explicit_maps=True,
)


def test_generic_with_k_before_a_parallel_loop_builds() -> None:
    """Found by the fuzzer: ``linalg.generic`` with K not last failed to build with any config.

    IREE's InterchangeGenericOps moves reduction loops innermost before codegen reads the
    ``compilation_info``, whose per-loop sizes were written for the original order:
    "expected only parallel dims to be set in the distribution tiling level". Fixed by
    writing the sizes in codegen's order (``dcmlir.space.codegen_order``).
    """
    fs.check_compiled(K_FIRST, _spec("cpu:wg8x128:v1x16:k8"))
