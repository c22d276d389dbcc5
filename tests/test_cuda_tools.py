"""Real CUDA figures without a GPU: ptxas registers, blocks per SM, tensor cores in SASS.

The occupancy rules are checked against the CUDA occupancy calculator's figures
by hand; with the ``cuda-tools`` extra (CI installs it) every candidate of one
workload is built for sm_80 and sm_90 and the model's registers and blocks per
SM must be ptxas's, and the f16/bf16 tensor-core family must contain HMMA.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import DENSE

import dcmlir
from dcmlir import cuda_tools
from dcmlir.build.inspect import (
    FiguresCache,
    attach_figures,
    inspect_kernels,
    with_cached_figures,
)
from dcmlir.cost_model import CostModel
from dcmlir.cost_model.roofline import GPU_PEAKS, L2_OVER_DRAM, LAUNCH_SECONDS, predict_seconds
from dcmlir.cuda_tools import CudaToolMissing, find_tool, has_tensor_core_ptx, parse_ptxas_log
from dcmlir.dispatch import Plan
from dcmlir.driver import offline
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.ptx import ptx_modules
from dcmlir.space import (
    CudaCandidate,
    CudaMmaCandidate,
    DefaultCandidate,
    candidate_from_json,
    candidate_from_key,
    cuda_space,
    mma_problem,
    select_candidates,
    workload_space,
)
from dcmlir.space.occupancy import KernelFigures, occupancy
from dcmlir.target import CudaTarget
from dcmlir.tools import cmd_tune
from dcmlir.tools.cli import main
from dcmlir.workload import Workload, workloads

ARCHS = ("sm_80", "sm_90")
HAVE_TOOLS = find_tool("ptxas") is not None and find_tool("nvdisasm") is not None
needs_tools = pytest.mark.skipif(
    not HAVE_TOOLS, reason="ptxas/nvdisasm absent: pip install 'dcmlir[cuda-tools]'"
)


def dense_text(element: str, n: int = 768, out: str = "f32") -> str:
    return f"""
func.func @dense(%x: tensor<?x768x{element}>, %w: tensor<768x{n}x{element}>) -> tensor<?x{n}x{out}> {{
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x768x{element}>
  %zero = arith.constant 0.0 : {out}
  %e = tensor.empty(%t) : tensor<?x{n}x{out}>
  %init = linalg.fill ins(%zero : {out}) outs(%e : tensor<?x{n}x{out}>) -> tensor<?x{n}x{out}>
  %r = linalg.matmul ins(%x, %w : tensor<?x768x{element}>, tensor<768x{n}x{element}>) outs(%init : tensor<?x{n}x{out}>) -> tensor<?x{n}x{out}>
  return %r : tensor<?x{n}x{out}>
}}
"""


def workload_of(text: str) -> Workload:
    with ir.Context():
        module = parse_module(text)
        (found,) = [w for _, w in workloads(module.operation, "test") if isinstance(w, Workload)]
    return found


# --- the allocation rules ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "threads", "registers", "smem", "blocks", "limiter"),
    [
        ("a100", 256, 64, 0, 4, "registers"),  # 2048 regs/warp: 8 warps per sub-partition
        ("a100", 128, 255, 0, 2, "registers"),  # 8160 -> 8192 per warp: 2 warps per partition
        ("a100", 128, 33, 0, 12, "registers"),  # 1056 -> 1280 per warp (256 units)
        ("a100", 32, 16, 0, 32, "blocks"),  # the 32-blocks-per-SM cap
        ("t4", 32, 16, 0, 16, "blocks"),  # sm_75: 16 blocks per SM
        ("a100", 256, 32, 48 * 1024, 3, "smem"),  # 48 KiB + 1 KiB reserved, 164 KiB per SM
        ("h100", 256, 32, 48 * 1024, 4, "smem"),  # 228 KiB per SM
        ("a100", 1024, 32, 0, 2, "threads"),
        ("a100", 1024, 72, 0, 0, "registers"),  # 72 x 1024 > 65536: the launch fails
    ],
)
def test_blocks_per_sm_follow_the_allocation_rules(
    gpu: str, threads: int, registers: int, smem: int, blocks: int, limiter: str
) -> None:
    found = occupancy(CudaTarget.known(gpu), threads, registers, smem)
    assert (found.blocks_per_sm, found.limiter) == (blocks, limiter)
    assert found.warps_per_sm == blocks * (threads // 32)


def test_f16_tiles_take_half_the_shared_memory() -> None:
    f32, f16 = workload_of(dense_text("f32")), workload_of(dense_text("f16"))
    promoted = CudaCandidate(32, 64, 4, 4, 8, promote=True)
    assert promoted.for_workload(f32).smem_bytes() == (32 + 64) * 8 * 4
    assert promoted.for_workload(f16).smem_bytes() == (32 + 64) * 8 * 2
    assert promoted.for_workload(f16) == promoted  # same kernel, same key
    assert promoted.for_workload(f16).features()["step_bytes"] == (32 + 64) * 8 * 2


def test_figures_replace_the_estimates() -> None:
    target = CudaTarget.known("h100")
    candidate = CudaCandidate(32, 128, 2, 4, 8)
    real = candidate.with_figures(KernelFigures(registers=120, smem_bytes=0, threads=512))
    assert real == candidate and real.key() == candidate.key()
    assert real.registers_per_thread() == 120 != candidate.registers_per_thread()
    assert real.blocks_per_sm(target) == occupancy(target, 512, 120, 0).blocks_per_sm == 1
    assert real.features(target)["registers_per_thread"] == 120.0
    too_many = candidate.with_figures(KernelFigures(registers=255, smem_bytes=0, threads=512))
    assert too_many.problems(target) == [
        "255 registers x 512 threads do not fit the 65536 registers of a block "
        "(256 per warp allocation)"
    ]


def test_ptxas_log_is_read_per_kernel() -> None:
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8 bytes cumulative stack size, 2048 bytes smem, 560 bytes cmem[0]
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, 560 bytes cmem[0]
"""
    found = parse_ptxas_log(log)
    assert (found["k1"].registers, found["k1"].spill_store_bytes, found["k1"].barriers) == (
        255,
        4,
        1,
    )
    assert (found["k1"].stack_bytes, found["k1"].static_smem_bytes) == (8, 2048)
    assert (found["k2"].registers, found["k2"].static_smem_bytes, found["k2"].barriers) == (
        40,
        0,
        0,
    )


# --- the tensor-core family ----------------------------------------------------------------


def test_the_tensor_core_family_is_offered_for_f16_and_bf16_only() -> None:
    target = CudaTarget.known("h100")
    for element in ("f16", "bf16"):
        space = workload_space(target, workload_of(dense_text(element)))
        mma = [c for c in space if isinstance(c, CudaMmaCandidate)]
        assert mma and all(c.threads in (32, 64, 128, 256) for c in mma)
        assert CudaMmaCandidate(64, 64, 2, 4, 8) in mma  # IREE's own static-shape choice
    f32 = workload_of(dense_text("f32"))
    assert mma_problem(f32) == "inputs are f32,f32: tensor cores here take f16 or bf16"
    assert not any(isinstance(c, CudaMmaCandidate) for c in workload_space(target, f32))
    assert len(workload_space(target, f32)) == len(cuda_space(target))
    f16_out = workload_of(dense_text("f16", out="f16"))
    assert mma_problem(f16_out) == "output is f16: the f32-accumulate intrinsics write f32"


def test_a_tensor_core_candidate_round_trips_and_renders_padding() -> None:
    candidate = CudaMmaCandidate(64, 64, 2, 4, 8)
    assert candidate.key() == "cuda-mma:wg64x64:s2x4:k8"
    assert candidate_from_key(candidate.key()) == candidate
    assert candidate_from_json(candidate.to_json()) == candidate
    assert candidate.workgroup_size() == (128, 1, 1)
    config = candidate.lowering_config(workload_of(dense_text("bf16")))
    assert "mma_kind = #iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_BF16>" in config
    assert "padding = [64, 64, 128]" in config
    assert "subgroup = [2, 4, 0]" in config and "reduction = [0, 0, 8]" in config


# --- built: ptxas, the cache, SASS ---------------------------------------------------------


@pytest.fixture(scope="module")
def figures_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("figures") / "cuda-figures.json"


@needs_tools
@pytest.mark.parametrize("arch", ARCHS)
def test_model_registers_and_blocks_per_sm_are_ptxas_figures(arch: str, figures_file: Path) -> None:
    """Every candidate of the f32 dense workload, built in one compile, assembled by ptxas."""
    target = CudaTarget.from_overrides({"arch": arch})
    workload = workload_of(DENSE)
    space = workload_space(target, workload)
    reports = inspect_kernels(workload, target, space, FiguresCache(figures_file))
    assert [r.error for r in reports] == [None] * len(space)
    real = attach_figures(reports)
    model = CostModel(workload, target, target.sm_count)
    differs = 0
    for report, candidate in zip(reports, real, strict=True):
        figures, use = report.figures, report.occupancy
        assert figures is not None and use is not None
        if isinstance(candidate, DefaultCandidate):
            continue
        assert figures.threads == candidate.threads
        assert candidate.registers_per_thread() == figures.registers
        assert candidate.blocks_per_sm(target) == use.blocks_per_sm >= 1
        assert model._features(candidate)["blocks_per_sm"] == use.blocks_per_sm
        assert candidate.smem_bytes() == figures.smem_bytes  # exact for f32 tiles
        assert figures.smem_bytes == report.candidate.smem_bytes()
        differs += report.candidate.registers_per_thread() != figures.registers
    assert differs > len(space) // 2  # the estimate is not what ptxas allocates
    again = inspect_kernels(workload, target, space, FiguresCache(figures_file))
    assert all(r.cached for r in again) and [r.figures for r in again] == [
        r.figures for r in reports
    ]


@needs_tools
@pytest.mark.parametrize("element", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_core_candidates_build_with_hmma(arch: str, element: str, tmp_path: Path) -> None:
    target = CudaTarget.from_overrides({"arch": arch})
    workload = workload_of(dense_text(element, n=3072))
    simt = CudaCandidate(32, 64, 4, 4, 8, promote=True).for_workload(workload)
    candidates = [CudaMmaCandidate(64, 64, 2, 4, 8), CudaMmaCandidate(32, 64, 1, 4, 2), simt]
    reports = inspect_kernels(workload, target, candidates, FiguresCache(tmp_path / "f.json"))
    tensor_core = [r.figures.tensor_core_instructions for r in reports if r.figures]
    assert len(tensor_core) == 3, [r.error for r in reports]
    # m16n8k16 per warp: 2x4 intrinsics x 8 K steps = 64; 1x4 x 2 = 8
    assert tensor_core == [64, 8, 0]
    assert reports[2].figures.smem_bytes == simt.smem_bytes() == (32 + 64) * 8 * 2


@needs_tools
def test_inspect_prints_real_figures_with_their_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(dense_text("f16"))
    argv = ["inspect", str(source), "--arch", "sm_90", "--candidates", "3"]
    assert main([*argv, "--figures", str(tmp_path / "f.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("target: cuda h100 (sm_90)")
    assert lines[1].startswith("sources: block: PTX .maxntid; registers: ptxas -v (release 12.")
    header = next(i for i, line in enumerate(lines) if line.startswith("candidate"))
    assert lines[header].split() == [
        "candidate", "block", "regs", "est", "spill", "B", "smem", "B", "blocks/SM",
        "warps/SM", "limiter", "tensor-core",
    ]  # fmt: skip
    rows = [line.split() for line in lines[header + 2 :]]
    assert rows[0][0] == "default" and len(rows) == 3
    assert all(row[8] in ("threads", "registers", "smem", "blocks") for row in rows)


def test_inspect_without_the_tools_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda_tools, "find_tool", lambda name: None)
    cuda_tools.tool_version.cache_clear()
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    assert main(["inspect", str(source), "--arch", "sm_90"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "dcmlir: error: ptxas is not installed (pip install 'dcmlir[cuda-tools]')"
    ]
    cuda_tools.tool_version.cache_clear()
    with pytest.raises(CudaToolMissing):
        cuda_tools.assemble("", "sm_90")


# --- the offline plan ----------------------------------------------------------------------

EXAMPLES = Path(dcmlir.__file__).parent / "examples"


def test_the_roofline_prices_waves_occupancy_and_tensor_cores() -> None:
    h100 = CudaTarget.known("h100")
    workload = workload_of(dense_text("f16", n=3072))
    figures = KernelFigures(registers=64, smem_bytes=0, threads=128)
    simt = CudaCandidate(32, 64, 4, 4, 8).for_workload(workload).with_figures(figures)
    mma = CudaMmaCandidate(64, 64, 2, 4, 8).with_figures(
        KernelFigures(registers=128, smem_bytes=34304, threads=128, tensor_core_instructions=64)
    )
    big = (8192,)
    assert (
        predict_seconds(workload, mma, big, h100) < predict_seconds(workload, simt, big, h100) / 4
    )
    # at T=1 no kernel beats reading the 4.5 MiB weight once; the 64-row tile pads T to
    # 64 and 48 blocks of 4 warps leave the SMs half-fed (8 warps hide latency)
    weight = 768 * 3072 * 2 / GPU_PEAKS["h100"].dram_bytes_per_s
    padded = 2 * 64 * 3072 * 768 / (GPU_PEAKS["h100"].tensor_flops / 132 * 0.5) / 48
    assert padded > weight
    assert predict_seconds(workload, mma, (1,), h100) == pytest.approx(padded + LAUNCH_SECONDS)
    assert predict_seconds(workload, DefaultCandidate(), big, h100) == math.inf
    # one block past a full wave costs a second wave
    per_wave = simt.blocks_per_sm(h100) * h100.sm_count  # 8 x 132 blocks: 22 rows of 48
    assert per_wave == 22 * 48
    full, over = (22 * 32,), (23 * 32,)  # the 23rd row of blocks: a second, thin wave
    assert predict_seconds(workload, simt, over, h100) == pytest.approx(
        1.5 * predict_seconds(workload, simt, full, h100) - 0.5 * LAUNCH_SECONDS
    )
    # small tiles re-read the operands: at T=8192 the 32x64 tensor-core tile loads
    # 8192/32 x 3072/64 blocks x (32 + 64) x 768 halves through L2, the 128x128 one a third
    small = CudaMmaCandidate(32, 64, 1, 4, 2).with_figures(KernelFigures(40, 6656, 128))
    large = CudaMmaCandidate(128, 128, 4, 4, 2).with_figures(KernelFigures(128, 17664, 256))
    l2 = 256 * 48 * 96 * 768 * 2 / (L2_OVER_DRAM * GPU_PEAKS["h100"].dram_bytes_per_s)
    assert predict_seconds(workload, small, big, h100) == pytest.approx(l2 + LAUNCH_SECONDS)
    assert predict_seconds(workload, large, big, h100) < 0.5 * (l2 + LAUNCH_SECONDS)
    spilling = simt.with_figures(KernelFigures(64, 0, 128, spill_bytes=8))
    assert predict_seconds(workload, spilling, big, h100) > 1.9 * predict_seconds(
        workload, simt, big, h100
    )


@needs_tools
def test_a_predicted_plan_for_bert_f16_dense_compiles_for_sm_90_with_tensor_cores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice of each space (12 candidates, both families) keeps this to seconds;
    docs/cuda.md shows the whole-space run."""
    monkeypatch.setattr(
        offline, "workload_space", lambda t, w: select_candidates(workload_space(t, w), 12)
    )
    plan_path, out = tmp_path / "plan.json", tmp_path / "out.vmfb"
    source = str(EXAMPLES / "bert_dense_f16.mlir")
    argv = ["tune", source, "--dims", "1:512", "--target", "cuda", "--arch", "sm_90", "--predict"]
    log = tmp_path / "rounds.jsonl"  # nothing is timed: no rounds, said so
    argv += ["--search-log", str(log)]
    assert main([*argv, "-o", str(plan_path), "--db", str(tmp_path / "r.jsonl")]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines and all(line.startswith("[predicted: true] ") for line in lines)
    assert "0 measurements: the offline model over" in lines[0]
    assert all(line.startswith("[predicted: true] ") for line in captured.err.splitlines())
    assert "a predicted plan has no rounds (nothing is timed); no log written" in captured.err
    assert not log.exists()
    assert json.loads(plan_path.read_text())["predicted"] is True
    plan = Plan.load(plan_path)
    assert plan.predicted and len(plan.workloads) == 3
    for workload in plan.workloads:
        largest = max(workload.shapes, key=lambda s: s.dims)
        assert largest.dims == (512,) and largest.measured is None
        assert workload.kernels[largest.kernel].candidate_key.startswith("cuda-mma:")
    code = main(["compile", source, "--plan", str(plan_path), "--target", "cuda", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("[predicted: true] ")
    modules = ptx_modules(out.read_bytes())
    assert modules and all(".target sm_90" in text for text in modules)
    assert any(has_tensor_core_ptx(text) for text in modules)


def test_tune_for_cuda_without_a_gpu_or_the_tools_says_how_to_get_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cmd_tune, "find_tool", lambda name: None)
    monkeypatch.setattr(cmd_tune, "cuda_device_available", lambda: False)
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    argv = ["tune", str(source), "--dims", "1:128", "--target", "cuda", "--arch", "sm_90"]
    assert main([*argv, "-o", str(tmp_path / "p.json"), "--db", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "dcmlir: no CUDA GPU present: timing sm_90 kernels needs one (compile-only: dcmlir "
        "measure --target cuda builds candidates, dcmlir compile builds a CUDA plan); no plan "
        "written (an offline, predicted plan needs pip install 'dcmlir[cuda-tools]')"
    ]
    assert not (tmp_path / "p.json").exists()


@needs_tools
def test_the_tuner_space_reads_cached_figures(tmp_path: Path) -> None:
    """What inspect (or an offline plan) cached replaces the estimates in a later search."""
    target = CudaTarget.known("h100")
    workload = workload_of(DENSE)
    space = workload_space(target, workload)
    cache = FiguresCache(tmp_path / "f.json")
    real = KernelFigures(registers=200, smem_bytes=0, threads=space[1].threads)
    cache.put({FiguresCache.key(target, workload, space[1]): real})
    found = with_cached_figures(workload, target, space, FiguresCache(tmp_path / "f.json"))
    assert found == space
    assert found[1].figures == real and found[1].registers_per_thread() == 200
    assert all(c.figures is None for c in found[2:])
