"""``dcmlir bench``'s data-tiling and onnxruntime peers, and its weight modes (not timings)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from test_bench import QUICK, SKINNY, SMALL_SCORES, check_every_baseline, workload_of

from dcmlir.bench import BASELINES, BenchError, BenchSettings, bench, load_result, markdown
from dcmlir.bench import peers as bench_peers
from dcmlir.bench.baselines import oracle_module, static_module
from dcmlir.bench.weights import (
    GLOBAL,
    WeightError,
    default_weight_mode,
    weight_array,
    with_constant_weight,
)
from dcmlir.build.compiler import build
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.ir.iree import load_function
from dcmlir.measure.host import HostFunction, WeightedHost
from dcmlir.reference import contract
from dcmlir.space import DefaultCandidate, candidate_from_key
from dcmlir.target import CpuTarget
from dcmlir.tools.cli import main

# ?x64 @ 64x48: a projection whose weight (operand 1) is static
PROJECTION = """func.func @main(%x: tensor<?x64xf32>, %w: tensor<64x48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x48xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  return %r : tensor<?x48xf32>
}
"""
# the weight first, and a module whose weight argument is transposed before use
WEIGHT_FIRST = PROJECTION.replace(
    "@main(%x: tensor<?x64xf32>, %w: tensor<64x48xf32>)",
    "@main(%w: tensor<64x48xf32>, %x: tensor<?x64xf32>)",
)
TRANSPOSED = PROJECTION.replace(
    "@main(%x: tensor<?x64xf32>, %w: tensor<64x48xf32>) -> tensor<?x48xf32> {",
    """@main(%x: tensor<?x64xf32>, %wt: tensor<48x64xf32>) -> tensor<?x48xf32> {
  %we = tensor.empty() : tensor<64x48xf32>
  %w = linalg.transpose ins(%wt : tensor<48x64xf32>) outs(%we : tensor<64x48xf32>) permutation = [1, 0]""",
)
SHAPES = [(1,), (6,)]
IREE_BUILT = ("dcmlir", "iree-default", "iree-data-tiling", "iree-static", "iree-specialized")


def plan_1_8(text: str) -> Plan:
    """T in 1..8: T <= 4 a skinny kernel, else IREE's default."""
    workload = workload_of(text)
    ranks = len(workload.dynamic_dims)
    shapes = [(t,) * ranks for t in range(1, 9)]
    planned = WorkloadPlan.build(
        workload,
        [DefaultCandidate(), candidate_from_key(SKINNY)],
        {s: 1 if s[0] <= 4 else 0 for s in shapes},
        {s: [1.0, 1.0] for s in shapes},
        ranges={d.index: (1, 8) for d in workload.dynamic_dims},
    )
    return Plan(CpuTarget(), "small.mlir", (planned,))


@pytest.fixture
def projection(tmp_path: Path) -> tuple[Path, Path]:
    source, plan = tmp_path / "projection.mlir", tmp_path / "plan.json"
    source.write_text(PROJECTION)
    plan_1_8(PROJECTION).save(plan)
    return source, plan


def settings(*baselines: str, weights: str | None = None) -> BenchSettings:
    return dataclasses.replace(QUICK, baselines=baselines or tuple(BASELINES), weights=weights)


def test_constant_weight_gives_correct_numbers_in_every_baseline(
    projection: tuple[Path, Path], tmp_path: Path
) -> None:
    """The default for a static operand 1: every IREE build, host peer and the reference
    use the one weight; each cell was checked against the float64 reference."""
    source, plan = projection
    result = bench(source, plan=plan, shapes=SHAPES, settings=settings(), db=tmp_path / "o")
    assert result.weights == "constant"
    check_every_baseline(result, SHAPES)
    assert result.cell((1,), "dcmlir").kernel == SKINNY
    assert result.cell((6,), "iree-data-tiling").kernel == "data tiling, mmt4d ukernel"
    assert "weights `constant`" in markdown(result)[0]


def test_the_check_sees_a_module_whose_weight_differs_from_the_reference(
    projection: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference uses the modules' weight: build them with another one and every IREE
    cell fails its check, while the host peers (given the true weight) pass."""
    source, plan = projection
    real = bench_peers.with_constant_weight

    def other_weight(text: str, weight: np.ndarray, weight_type: str) -> str:
        return real(text, weight + 0.5, weight_type)

    monkeypatch.setattr(bench_peers, "with_constant_weight", other_weight)
    chosen = settings("iree-default", "iree-data-tiling", "numpy", "onnxruntime")
    result = bench(source, plan=plan, shapes=[(3,)], settings=chosen, db=tmp_path / "o")
    for name in ("iree-default", "iree-data-tiling"):
        assert "exceeds" in (result.cell((3,), name).error or ""), name
    for name in ("numpy", "onnxruntime"):
        assert result.cell((3,), name).error is None, name


def test_argument_mode_keeps_both_operands_as_inputs(
    projection: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, plan = projection
    out = tmp_path / "out"
    args = [
        "bench", str(source), "--plan", str(plan), "--shapes", "2,5", "-o", str(out),
        "--baselines", "dcmlir,iree-default,iree-data-tiling,onnxruntime",
        "--weights", "argument", "--min-time", "0.002", "--rounds", "2",
    ]  # fmt: skip
    assert main(args) == 0
    assert "weights `argument` (both operands are inputs" in capsys.readouterr().out
    saved = load_result(out / "projection.json")
    assert saved.weights == "argument"
    names = ("dcmlir", "iree-default", "iree-data-tiling", "onnxruntime")
    check_every_baseline(saved, [(2,), (5,)], names)


def test_onnxruntime_on_a_batch_matmul_with_two_dynamic_dims(tmp_path: Path) -> None:
    """Operand 1 is an activation here (4x16x?): argument mode by default, and
    --weights constant is refused with the reason."""
    source, plan = tmp_path / "scores.mlir", tmp_path / "plan.json"
    source.write_text(SMALL_SCORES)
    plan_1_8(SMALL_SCORES).save(plan)
    assert default_weight_mode(workload_of(SMALL_SCORES)) == "argument"
    chosen = settings("iree-default", "onnxruntime", "numpy")
    result = bench(source, plan=plan, shapes=[(3,)], settings=chosen, db=tmp_path / "o")
    assert result.weights == "argument"
    check_every_baseline(result, [(3, 3)], chosen.baselines)
    with pytest.raises(BenchError, match=r"--weights constant: operand 1 .* has a dynamic dim"):
        bench(source, plan=plan, settings=settings(weights="constant"), db=tmp_path / "o")


def test_a_weight_that_is_no_argument_falls_back_to_argument_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The weight reaches the op through a transpose: no argument has its type, so the
    default mode says so and passes it as an argument; --weights constant is refused."""
    source, plan = tmp_path / "transposed.mlir", tmp_path / "plan.json"
    source.write_text(TRANSPOSED)
    plan_1_8(TRANSPOSED).save(plan)
    with pytest.raises(BenchError, match=r"--weights constant: no public function .* argument"):
        constant = settings("iree-default", weights="constant")
        bench(source, plan=plan, shapes=[(2,)], settings=constant, db=tmp_path / "o")
    result = bench(
        source, plan=plan, shapes=[(2,)], settings=settings("iree-default"), db=tmp_path / "o"
    )
    assert result.weights == "argument"  # (its cells fail: bench feeds the op's operand shapes)
    assert "weights as arguments: no public function" in capsys.readouterr().err


def test_a_data_tiling_build_failure_is_reported_with_its_reason(
    projection: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What IREE does when packed tiles exceed the stack limit (batch matmuls with two
    dynamic dims at the default 32 KiB), forced here with a 64-byte limit."""
    source, plan = projection
    limit = "--iree-llvmcpu-stack-allocation-limit=64"
    monkeypatch.setattr(bench_peers, "DATA_TILING_FLAGS", (*bench_peers.DATA_TILING_FLAGS, limit))
    chosen = settings("iree-default", "iree-data-tiling")
    result = bench(source, plan=plan, shapes=[(2,)], settings=chosen, db=tmp_path / "o")
    reason = result.unavailable["iree-data-tiling"]
    assert reason.startswith("IREE could not compile it: ") and "\n" not in reason
    assert "exceeded stack allocation limit of 64 bytes" in reason
    assert result.baselines == ["iree-default", "iree-data-tiling"]  # listed, not dropped
    assert result.errors() == [] and result.cell((2,), "iree-default").error is None
    assert f"`iree-data-tiling` not measured: {reason}." in markdown(result)


# --- the pieces ------------------------------------------------------------------------------


def test_constant_weight_modules_take_only_the_activation() -> None:
    """Every public function keeps its name and computes with the one weight."""
    workload = workload_of(PROJECTION)
    weight = weight_array(workload)
    assert weight.shape == (64, 48) and len(np.unique(weight)) > 1000  # seeded, not a splat
    assert np.array_equal(weight, weight_array(workload))  # the same in every baseline
    kernels = [DefaultCandidate(), candidate_from_key(SKINNY)]
    for text, functions in (
        (PROJECTION, ["main"]),
        (WEIGHT_FIRST, ["main"]),
        (static_module(workload, [(3,), (7,)]), ["s3", "s7"]),
        (oracle_module(workload, kernels), ["o0", "o1"]),
    ):
        module = with_constant_weight(text, weight, workload.operand_type(1))
        assert f"util.global private @{GLOBAL} = dense_resource<{GLOBAL}>" in module
        assert f'{GLOBAL}: "0x04000000' in module
        vmfb = build(module, CpuTarget()).vmfb
        rng = np.random.default_rng(3)
        for function in functions:
            t = int(function[1:]) if function.startswith("s") else 5
            activation = rng.random((t, 64)).astype(np.float32)
            (out,) = load_function(vmfb, function)(activation)
            expected = contract("ac,cb->ab", activation.astype(np.float64), weight)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(WeightError, match="no public function"):
        with_constant_weight(PROJECTION, weight[:32], "tensor<32x48xf32>")


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("ac,cb->ab", [(5, 7), (7, 3)]),
        ("ac,bc->ab", [(5, 7), (3, 7)]),  # transposed weight: Transpose + MatMul
        ("abd,adc->abc", [(2, 5, 7), (2, 7, 3)]),  # batch matmul
        ("abd,acd->acb", [(2, 5, 7), (2, 3, 7)]),  # transposed output
    ],
)
def test_onnxruntime_and_constant_weights_compute_the_contraction(
    spec: str, shapes: list[tuple[int, ...]]
) -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.random(s).astype(np.float32) for s in shapes]
    expected = np.einsum(spec, *inputs)
    libraries = ["numpy", "onnxruntime"] + (["torch"] if importlib.util.find_spec("torch") else [])
    for library in libraries:
        function = HostFunction(library, spec, threads=1)
        (out,) = function.to_host(function.invoke(function.prepare(inputs)))
        np.testing.assert_allclose(out, expected, rtol=1e-5, err_msg=library)
        weighted = WeightedHost(library, spec, 1, inputs[1])()
        (out,) = weighted.to_host(weighted.invoke(weighted.prepare(inputs[:1])))
        np.testing.assert_allclose(out, expected, rtol=1e-5, err_msg=f"{library}, constant")


def test_onnxruntime_runs_on_the_host_only() -> None:
    with pytest.raises(ValueError, match="onnxruntime runs on the host only"):
        HostFunction("onnxruntime", "ac,cb->ab", threads=1, gpu=True)


def test_weights_setting_is_checked() -> None:
    with pytest.raises(BenchError, match="--weights: unknown mode 'frozen'"):
        BenchSettings(weights="frozen")
