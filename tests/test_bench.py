"""``dcmlir bench``: every baseline builds, runs and matches the reference (not timings)."""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from dcmlir.bench import BASELINES, BenchError, BenchSettings, bench, load_result
from dcmlir.bench.baselines import (
    bucketing_module,
    leaf_boxes,
    specialization_attribute,
    static_module,
)
from dcmlir.bench.compare import _cell
from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import input_shapes, reference
from dcmlir.dispatch import Plan, PlannedDim, WorkloadPlan
from dcmlir.dispatch.tree import Leaf, Split
from dcmlir.ir.iree import load_function
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.host import HostFunction, device_threads
from dcmlir.measure.timing import Timing
from dcmlir.reference import MatmulForm, contract
from dcmlir.space import DefaultCandidate, candidate_from_key
from dcmlir.target import CpuTarget, CudaTarget
from dcmlir.tools.cli import main
from dcmlir.workload import DimSource, Workload, workloads

SMALL_DENSE = """func.func @main(%x: tensor<?x64xf32>, %w: tensor<64x96xf32>) -> tensor<?x96xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x96xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x96xf32>) -> tensor<?x96xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x96xf32>) outs(%init : tensor<?x96xf32>) -> tensor<?x96xf32>
  return %r : tensor<?x96xf32>
}
"""

# 4 x T x 16 x T: attention scores, both T dynamic (from two arguments)
SMALL_SCORES = """func.func @main(%q: tensor<4x?x16xf32>, %k: tensor<4x16x?xf32>) -> tensor<4x?x?xf32> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c1 : tensor<4x?x16xf32>
  %s = tensor.dim %k, %c2 : tensor<4x16x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t, %s) : tensor<4x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<4x?x?xf32>) -> tensor<4x?x?xf32>
  %r = linalg.batch_matmul ins(%q, %k : tensor<4x?x16xf32>, tensor<4x16x?xf32>) outs(%init : tensor<4x?x?xf32>) -> tensor<4x?x?xf32>
  return %r : tensor<4x?x?xf32>
}
"""

QUICK = BenchSettings(
    min_time=0.002,
    rounds=2,
    buckets=(8, 16),
    oracle_min_time=0.002,
    oracle_rounds=1,
    oracle_candidates=3,
    timeout=60.0,
)
SKINNY = "cpu:wg8x32:v1x16:k4"


def workload_of(text: str) -> Workload:
    with ir.Context():
        module = parse_module(text)
        (found,) = [w for _, w in workloads(module.operation) if isinstance(w, Workload)]
    return found


def small_plan(text: str, target: CpuTarget | CudaTarget | None = None) -> Plan:
    """T in 1..16: T <= 4 a skinny kernel, else IREE's default."""
    workload = workload_of(text)
    ranks = len(workload.dynamic_dims)
    shapes = [(t,) * ranks for t in range(1, 17)]
    choices = {s: 1 if s[0] <= 4 else 0 for s in shapes}
    planned = WorkloadPlan.build(
        workload,
        [DefaultCandidate(), candidate_from_key(SKINNY)],
        choices,
        {s: [1.0, 1.0] for s in shapes},
        ranges={d.index: (1, 16) for d in workload.dynamic_dims},
    )
    return Plan(target or CpuTarget(), "small.mlir", (planned,))


@pytest.fixture
def dense(tmp_path: Path) -> tuple[Path, Path]:
    source, plan = tmp_path / "dense.mlir", tmp_path / "plan.json"
    source.write_text(SMALL_DENSE)
    small_plan(SMALL_DENSE).save(plan)
    return source, plan


def check_every_baseline(
    result, shapes: list[tuple[int, ...]], names: Sequence[str] = BASELINES
) -> None:
    """Each baseline ran at each shape and matched the float64 reference (the runner checks)."""
    assert result.shapes == shapes
    assert result.errors() == []
    torch_present = importlib.util.find_spec("torch") is not None
    for name in names:
        if name == "torch" and not torch_present:
            assert "not installed" in result.unavailable["torch"]
            continue
        assert name not in result.unavailable, result.unavailable
        for shape in shapes:
            cell = result.cell(shape, name)
            assert cell is not None and cell.error is None, (name, shape)
            assert cell.max_error is not None and cell.max_error <= 1e-4, (name, shape)
            assert cell.samples_us and all(v > 0 for v in cell.samples_us)


def test_every_baseline_matches_the_reference_on_a_dense_workload(
    dense: tuple[Path, Path], tmp_path: Path
) -> None:
    source, plan = dense
    shapes = [(1,), (5,), (20,)]  # 20: above the plan's range and above every bucket
    result = bench(source, plan=plan, shapes=shapes, settings=QUICK, db=tmp_path / "o.jsonl")
    check_every_baseline(result, shapes)
    kernels = {s: result.cell(s, "dcmlir").kernel for s in shapes}
    assert kernels == {(1,): SKINNY, (5,): "default", (20,): "IREE default (out of range)"}
    assert result.cell((5,), "bucketing").kernel.startswith("pad to 8: ")
    assert result.cell((20,), "bucketing").kernel == "IREE default (above buckets)"
    assert result.info["oracle"]["pairs"] == 3 * 5  # 3 candidates x (3 shapes + 2 buckets)


def test_every_baseline_matches_the_reference_on_attention_with_two_dynamic_dims(
    tmp_path: Path,
) -> None:
    source, plan = tmp_path / "scores.mlir", tmp_path / "plan.json"
    source.write_text(SMALL_SCORES)
    small_plan(SMALL_SCORES).save(plan)
    shapes = [(3, 3), (9, 9)]
    result = bench(source, plan=plan, shapes=[(3,), (9,)], settings=QUICK, db=tmp_path / "o.jsonl")
    check_every_baseline(result, shapes)


def test_cli_writes_table_json_and_resumes_the_oracle(
    dense: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, plan = dense
    out = tmp_path / "out"
    args = [
        "bench", str(source), "--plan", str(plan), "--shapes", "1,3:4", "-o", str(out),
        "--baselines", "dcmlir,iree-default,numpy", "--min-time", "0.002", "--rounds", "2",
        "--db", str(tmp_path / "o.jsonl"), "--processes", "2",
    ]  # fmt: skip
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "| shape | dcmlir | iree-default | numpy | dcmlir kernel |" in table
    assert "| **geomean speedup** |" in table
    saved = load_result(out / "dense.json")
    assert saved.shapes == [(1,), (3,), (4,)]
    assert set(saved.measured_baselines()) == {"dcmlir", "iree-default", "numpy"}
    assert (out / "dense.md").read_text().startswith("`dense`: matmul (mnk)")
    raw = json.loads((out / "dense.json").read_text())
    assert raw["geomean_speedup"]["iree-default"] == pytest.approx(1.0)
    assert raw["info"]["settings"]["processes"] == 2
    assert all(len(saved.cell(s, "dcmlir").samples_us) == 2 * 2 for s in saved.shapes)


def test_a_module_whose_function_is_not_main(tmp_path: Path) -> None:
    """The shipped examples name their function (``@dense``): bench called ``main`` and
    wrote a table of "nanx" (exit 1). The user's function is found in the module."""
    text = SMALL_DENSE.replace("func.func @main(", "func.func @projection(")
    source, plan = tmp_path / "projection.mlir", tmp_path / "plan.json"
    source.write_text(text)
    small_plan(text).save(plan)
    baselines = ("dcmlir", "iree-default", "iree-specialized", "bucketing")
    settings = BenchSettings(**{**QUICK.__dict__, "baselines": baselines})
    result = bench(source, plan=plan, shapes=[(2,), (5,)], settings=settings, db=tmp_path / "o")
    check_every_baseline(result, [(2,), (5,)], baselines)
    assert set(result.measured_baselines()) == set(baselines)


def test_oracle_resumes_from_its_records(dense: tuple[Path, Path], tmp_path: Path) -> None:
    source, plan = dense
    settings = BenchSettings(**{**QUICK.__dict__, "baselines": ("iree-default", "oracle")})
    db = tmp_path / "o.jsonl"
    first = bench(source, plan=plan, shapes=[(2,)], settings=settings, db=db)
    again = bench(source, plan=plan, shapes=[(2,)], settings=settings, db=db)
    assert first.info["oracle"]["measured_now"] == 3 * 3
    assert again.info["oracle"]["measured_now"] == 0


def test_bench_errors_are_one_line(
    dense: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, plan = dense
    code = main(["bench", str(source), "--plan", str(plan), "--baselines", "dcmlir,frob"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("dcmlir: error: --baselines: unknown baseline 'frob' (known: dcmlir,")
    code = main(["bench", str(source), "--plan", str(plan), "--shapes", "4:1"])
    assert code == 1
    assert (
        capsys.readouterr().err == "dcmlir: error: --shapes: range '4:1' is reversed; write 1:4\n"
    )
    code = main(["bench", str(source), "--plan", str(plan), "--shapes", "3x4"])
    assert code == 1
    assert "--shapes: shape (3, 4) gives 2 values for 1 dynamic dims" in capsys.readouterr().err
    two = tmp_path / "two.mlir"
    two.write_text(SMALL_DENSE + SMALL_SCORES.replace("@main", "@scores"))
    code = main(["bench", str(two), "--plan", str(plan)])
    assert code == 1
    assert "dcmlir bench measures one workload, the module has 2 distinct" in (
        capsys.readouterr().err
    )


def test_a_cuda_plan_without_a_gpu_says_so_and_exits_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dcmlir.ir.iree import cuda_device_available

    if cuda_device_available():
        pytest.skip("a CUDA GPU is present: the no-GPU path does not apply")
    source, plan = tmp_path / "dense.mlir", tmp_path / "plan.json"
    source.write_text(SMALL_DENSE)
    small_plan(SMALL_DENSE, CudaTarget()).save(plan)
    assert main(["bench", str(source), "--plan", str(plan)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("dcmlir: no CUDA GPU present: timing sm_80 kernels needs one")
    assert err.count("\n") == 1


def test_settings_are_checked() -> None:
    with pytest.raises(BenchError, match="'iree-default' is the reference of every ratio"):
        BenchSettings(baselines=("dcmlir",))
    with pytest.raises(BenchError, match="--buckets"):
        BenchSettings(buckets=())
    with pytest.raises(BenchError, match="--warm-calls must be >= 0"):
        BenchSettings(warm_calls=-1)
    with pytest.raises(BenchError, match="--processes must be >= 1"):
        BenchSettings(processes=0)


def test_a_cell_is_the_median_over_its_processes() -> None:
    """Each process's speedup is its own per-round median; the cell takes the median of
    those, so one process whose threads ran slow moves no cell."""
    runs = [([2.0, 2.0], [4.0, 4.0]), ([3.0, 3.0], [3.0, 3.0]), ([1.0, 1.0], [1.5, 1.5])]
    timings = [Timing("dcmlir", own) for own, _ in runs]
    references = [Timing("iree-default", ref) for _, ref in runs]
    cell = _cell(timings, references, "k")
    assert cell.speedup == pytest.approx(1.5)  # the processes' 2.0, 1.0, 1.5
    assert cell.median_us == pytest.approx(2e6)
    assert len(cell.samples_us) == 6
    failed = _cell([*timings[:2], Timing("dcmlir", error="crashed")], references, "k")
    assert failed.error == "crashed" and math.isnan(failed.speedup)


# --- the pieces ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("ac,cb->ab", [(5, 7), (7, 3)]),
        ("ac,bc->ab", [(5, 7), (3, 7)]),  # transposed weight
        ("abd,adc->abc", [(2, 5, 7), (2, 7, 3)]),  # batch matmul
        ("adb,adc->abc", [(2, 7, 5), (2, 7, 3)]),  # transposed lhs
    ],
)
def test_host_functions_compute_the_contraction(spec: str, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.random(s).astype(np.float32) for s in shapes]
    libraries = ["numpy", "torch"] if importlib.util.find_spec("torch") else ["numpy"]
    for library in libraries:
        function = HostFunction(library, spec, threads=1)
        (out,) = function.to_host(function.invoke(function.prepare(inputs)))
        np.testing.assert_allclose(out, np.einsum(spec, *inputs), rtol=1e-5)
    wide = [x.astype(np.float64) for x in inputs]  # the reference every variant is checked with
    np.testing.assert_allclose(contract(spec, *wide), np.einsum(spec, *wide), rtol=1e-12)


def test_numpy_does_not_pretend_to_run_on_a_gpu() -> None:
    with pytest.raises(ValueError, match="numpy runs on the host only"):
        HostFunction("numpy", "ac,cb->ab", threads=1, gpu=True)


def test_matmul_form_rejects_what_is_not_a_matmul() -> None:
    with pytest.raises(ValueError, match="not a \\(batched\\) matmul"):
        MatmulForm.parse("ab,ab->ab")
    with pytest.raises(ValueError, match="not a two-input einsum"):
        MatmulForm.parse("ab->ab")


def test_device_threads() -> None:
    assert device_threads("local-sync") == 1
    assert device_threads("local-task") >= 1


def test_leaf_boxes_and_the_specialization_attribute() -> None:
    tree_root = Split(0, 4, Leaf(1), Split(0, 10, Leaf(0), Leaf(1)))
    dims = (PlannedDim(0, "m", DimSource(0, 0), (1, 16)),)

    class Tree:
        root = tree_root

    boxes = leaf_boxes(Tree(), dims)  # type: ignore[arg-type]
    assert boxes == [(((1, 4),), 1), (((5, 10),), 0), (((11, 16),), 1)]
    workload = workload_of(SMALL_DENSE)
    assert specialization_attribute(workload, [b for b, _ in boxes]) == (
        "#util<int.assumption.multi_array["
        "[<umin = 1, umax = 4>, <umin = 96, umax = 96>, <umin = 64, umax = 64>], "
        "[<umin = 5, umax = 10>, <umin = 96, umax = 96>, <umin = 64, umax = 64>], "
        "[<umin = 11, umax = 16>, <umin = 96, umax = 96>, <umin = 64, umax = 64>]]>"
    )


def test_bucketing_and_static_modules_compute_the_workload() -> None:
    """Checked here directly, at shapes on, between and beyond the buckets, T = 0 included."""
    workload = workload_of(SMALL_DENSE)
    module = bucketing_module(workload, {4: candidate_from_key(SKINNY), 8: DefaultCandidate()})
    assert module.count("tensor.pad") == 2 and module.count("{compilation_info = ") == 1
    bucketed = load_function(build(module, CpuTarget()).vmfb, "main")
    static = build(static_module(workload, [(3,), (9,)]), CpuTarget()).vmfb
    rng = np.random.default_rng(1)
    for t in (0, 1, 3, 4, 5, 8, 9, 30):
        inputs = [rng.random(s).astype(np.float32) for s in input_shapes(workload, {0: t})]
        (expected,) = reference(workload, inputs)
        np.testing.assert_allclose(bucketed(*inputs)[0], expected, rtol=1e-4, atol=1e-5)
        if t in (3, 9):
            (out,) = load_function(static, f"s{t}")(*inputs)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
