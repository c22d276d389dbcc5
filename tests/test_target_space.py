"""Targets and the micro-kernel space: limits, determinism, JSON, and that configs really land."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import DENSE, SCORES, TRANSPOSED

from dcmlir.build.compiler import compile_module
from dcmlir.host_cpu import KIB, MIB, parse_size
from dcmlir.ir.iree import run_compile
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.space import (
    CandidateError,
    CpuCandidate,
    CudaCandidate,
    DefaultCandidate,
    candidate_from_json,
    candidate_from_key,
    cpu_space,
    cuda_space,
    space_for,
)
from dcmlir.target import (
    CpuTarget,
    CudaTarget,
    parse_overrides,
    target_from_json,
    target_from_name,
)
from dcmlir.workload import Workload, workloads


def extract(text: str) -> list[Workload]:
    with ir.Context():
        module = parse_module(text)
        found = [result for _, result in workloads(module.operation, "t.mlir")]
    assert all(isinstance(w, Workload) for w in found)
    return found  # type: ignore[return-value]


@pytest.fixture(scope="module")
def dense() -> Workload:
    (found,) = extract(DENSE)
    return found


@pytest.fixture(scope="module")
def scores() -> Workload:
    (found,) = extract(SCORES)
    return found


# Targets whose spaces are checked against every limit: the host, other ISAs, other GPUs.
CPU_TARGETS = [  # fixed, not the host's: each differs from the others whatever the host is
    CpuTarget(vector_bits=512, vector_registers=32, l1d_bytes=48 * KIB, l2_bytes=1 * MIB),
    CpuTarget(vector_bits=256, l2_bytes=512 * KIB),
    CpuTarget(vector_bits=128, l2_bytes=1 * MIB),
    CpuTarget(vector_bits=512, vector_registers=16, l2_bytes=256 * KIB),
]
CUDA_TARGETS = [
    CudaTarget(),
    CudaTarget.known("t4"),
    CudaTarget.known("h100"),
    CudaTarget.known("a100", smem_per_block_bytes=8 * KIB, max_threads_per_block=256),
    CudaTarget.known("h200", registers_per_block=32768),
]


# --- targets -------------------------------------------------------------------------------


def _host_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_host_target_is_read_from_the_machine() -> None:
    target = CpuTarget()
    flags = _host_flags()
    expected_bits = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    assert target.vector_bits == expected_bits
    assert target.vector_registers == (32 if expected_bits == 512 else 16)
    assert target.lanes == expected_bits // 32
    assert target.threads >= 1
    index0 = Path("/sys/devices/system/cpu/cpu0/cache/index0")
    if (index0 / "type").read_text().strip() == "Data":
        assert target.l1d_bytes == parse_size((index0 / "size").read_text())
    assert 0 < target.l1d_bytes < target.l2_bytes


def test_cpu_overrides_from_text() -> None:
    overrides = parse_overrides(["vector_bits=256", "l2_bytes=1M,threads=4"])
    assert overrides == {"vector_bits": "256", "l2_bytes": "1M", "threads": "4"}
    target = CpuTarget.from_overrides(overrides)
    assert (target.vector_bits, target.vector_registers) == (256, 16)  # registers follow the ISA
    assert (target.l2_bytes, target.threads) == (MIB, 4)
    assert target.l1d_bytes == CpuTarget().l1d_bytes  # the rest stays the host's
    explicit = CpuTarget.from_overrides({"vector_bits": 256, "vector_registers": "32"})
    assert explicit.vector_registers == 32
    assert target.key() != CpuTarget().key() != explicit.key()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["vector_width=256"], "unknown CpuTarget field 'vector_width'"),
        (["vector_bits=wide"], "must be an integer"),
        (["vector_bits"], "not key=value"),
        (["vector_bits=100"], "whole number of f32 lanes"),
        (["threads=0"], "must be a positive integer"),
    ],
)
def test_bad_cpu_overrides_are_reported(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CpuTarget.from_overrides(parse_overrides(overrides))


def test_cuda_targets_from_the_table() -> None:
    assert target_from_name("cuda") == CudaTarget.known("a100") == CudaTarget()
    h100 = target_from_name("cuda", arch="sm_90")
    assert isinstance(h100, CudaTarget)
    assert (h100.gpu, h100.sm_count, h100.smem_per_block_bytes) == ("h100", 132, 227 * KIB)
    t4 = target_from_name("cuda", arch="sm_75")
    assert isinstance(t4, CudaTarget)
    assert (t4.gpu, t4.sm_count, t4.smem_per_block_bytes) == ("t4", 40, 64 * KIB)
    h200 = CudaTarget.from_overrides(
        {"gpu": "H200", "sm_count": "100", "smem_per_block_bytes": "96K"}
    )
    assert (h200.arch, h200.sm_count, h200.smem_per_block_bytes) == ("sm_90", 100, 96 * KIB)
    with pytest.raises(ValueError, match="no known GPU for arch 'sm_52'"):
        target_from_name("cuda", arch="sm_52")
    with pytest.raises(ValueError, match="unknown target 'rocm'"):
        target_from_name("rocm")
    with pytest.raises(ValueError, match="targets the host"):
        target_from_name("llvm-cpu", arch="znver4")


def test_targets_round_trip_through_json_and_have_distinct_keys() -> None:
    targets = [*CPU_TARGETS, *CUDA_TARGETS]
    for target in targets:
        text = json.dumps(target.to_json())
        assert target_from_json(json.loads(text)) == target
    keys = [target.key() for target in targets]
    assert len(set(keys)) == len(keys)
    assert CudaTarget.known("h100").key() == "cuda:sm_90:h100:132sm:smem227k:t1024:r65536"
    with pytest.raises(ValueError, match="unknown CudaTarget fields"):
        target_from_json({**CudaTarget().to_json(), "tensor_cores": 1})


def test_compile_flags_and_explicit_sm90_target() -> None:
    assert CpuTarget().compile_flags() == (
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    )
    sm80 = CudaTarget()
    assert sm80.compile_flags() == ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80")
    assert sm80.module_attributes() == "" and sm80.wrap_module("x") == "x"
    sm90 = CudaTarget.known("h100")
    assert sm90.compile_flags() == ("--iree-hal-target-device=cuda",)
    attributes = sm90.module_attributes()
    assert attributes.startswith('hal.device.targets = [#hal.device.target<"cuda", [')
    assert '#iree_gpu.target<arch = "sm_90", features = "+ptx80"' in attributes
    assert "max_workgroup_memory_bytes = 232448" in attributes
    assert sm90.wrap_module("func.func @f() { return }").startswith(
        f"module attributes {{{attributes}}} {{"
    )


# --- the spaces ----------------------------------------------------------------------------


def test_default_comes_first_and_spaces_are_deterministic() -> None:
    for target in [*CPU_TARGETS, *CUDA_TARGETS]:
        space = space_for(target)
        assert space[0] == DefaultCandidate()
        assert space == space_for(target_from_json(target.to_json()))  # a fresh, equal target
        assert len(set(space)) == len(space)  # hashable, no duplicates
        keys = [candidate.key() for candidate in space]
        assert len(set(keys)) == len(keys)


def test_space_sizes_are_bounded() -> None:
    """AVX-512 with a 1 MiB L2 (the EPYC the docs measure on) and 128-bit vectors keep 60 or
    more; AVX2 with a 512 KiB L2 loses the panels that do not fit half of it (41); none
    exceeds 150, the host's included."""
    avx512, avx2, narrow = (space_for(t) for t in CPU_TARGETS[:3])
    assert 60 <= len(avx512) <= 150 and 60 <= len(narrow) <= 150
    assert 30 <= len(avx2) < len(avx512)
    assert len(space_for(CpuTarget())) <= 150
    for target in CUDA_TARGETS[:3]:
        assert 60 <= len(space_for(target)) <= 150


def test_cpu_space_has_the_skinny_kernels() -> None:
    space = space_for(CpuTarget(vector_bits=512, vector_registers=32, l2_bytes=2 * MIB))
    for key in ("cpu:wg8x128:v1x16:k8", "cpu:wg16x64:v4x16:k1", "cpu:wg32x32:v8x16:k4"):
        assert candidate_from_key(key) in space
    vector_rows = {c.vector_m for c in space if isinstance(c, CpuCandidate)}
    assert {1, 2, 4} <= vector_rows


@pytest.mark.parametrize("target", CPU_TARGETS, ids=lambda t: t.key())
def test_every_cpu_candidate_respects_every_limit(target: CpuTarget) -> None:
    lanes = target.vector_bits // 32
    space = cpu_space(target)
    assert len(space) > 1
    for candidate in space[1:]:
        assert isinstance(candidate, CpuCandidate)
        assert candidate.vector_n % lanes == 0
        accumulators = candidate.vector_m * candidate.vector_n // lanes
        assert accumulators + candidate.vector_n // lanes + 1 <= target.vector_registers
        assert candidate.vector_k in (1, 2, 4, 8, 16)
        assert candidate.workgroup_m % candidate.vector_m == 0
        assert candidate.workgroup_n % candidate.vector_n == 0
        assert (candidate.workgroup_m + candidate.workgroup_n) * 512 * 4 <= target.l2_bytes // 2
        assert candidate.problems(target) == []


@pytest.mark.parametrize("target", CUDA_TARGETS, ids=lambda t: t.key())
def test_every_cuda_candidate_respects_every_limit(target: CudaTarget, dense: Workload) -> None:
    space = cuda_space(target)
    assert len(space) > 1
    for candidate in space[1:]:
        assert isinstance(candidate, CudaCandidate)
        assert candidate.workgroup_m % candidate.thread_m == 0
        assert candidate.workgroup_n % candidate.thread_n == 0
        threads = (candidate.workgroup_m // candidate.thread_m) * (
            candidate.workgroup_n // candidate.thread_n
        )
        assert threads % 32 == 0 and threads <= target.max_threads_per_block <= 1024
        assert candidate.workgroup_size() == (threads, 1, 1)
        assert f"workgroup_size = [{threads}, 1, 1] subgroup_size = 32" in (
            candidate.compilation_info(dense)
        )
        smem = (candidate.workgroup_m + candidate.workgroup_n) * candidate.reduction_k * 4
        assert not candidate.promote or smem <= target.smem_per_block_bytes
        registers = candidate.registers_per_thread()
        assert registers <= 255 and registers * threads <= target.registers_per_block
        assert candidate.problems(target) == []


def test_limits_shrink_the_space() -> None:
    small = CudaTarget.known("a100", smem_per_block_bytes=8 * KIB, max_threads_per_block=256)
    full = cuda_space(CudaTarget())
    shrunk = cuda_space(small)
    assert set(shrunk) < set(full)
    dropped = [c for c in full if c not in shrunk and isinstance(c, CudaCandidate)]
    assert any(c.threads > 256 for c in dropped)
    assert any(c.promote and c.smem_bytes() > 8 * KIB and c.threads <= 256 for c in dropped)
    avx2 = cpu_space(CpuTarget(vector_bits=256))
    assert all(c.vector_n in (8, 16, 32) for c in avx2 if isinstance(c, CpuCandidate))


def test_candidates_fit_every_workload(dense: Workload, scores: Workload) -> None:
    """Candidates come from the target alone: each lays out on any contraction's loops."""
    transposed, _ = extract(TRANSPOSED)
    for target in (CpuTarget(), CudaTarget()):
        for candidate in space_for(target)[1:]:
            for workload in (dense, scores, transposed):
                levels = candidate.levels(workload)
                for dim in workload.dims:
                    at = dim.index
                    if dim.role == "k":
                        assert levels.workgroup[at] == levels.vector[at] == 0
                        assert levels.reduction[at] > 0
                    else:
                        assert levels.reduction[at] == 0
                        if dim.role == "b":
                            assert levels.workgroup[at] == levels.vector[at] == 1
                assert candidate.compilation_info(workload).startswith(
                    "#iree_codegen.compilation_info<"
                )


# --- rendering -----------------------------------------------------------------------------


def test_cpu_rendering_is_exact(dense: Workload, scores: Workload) -> None:
    candidate = CpuCandidate(32, 32, 8, 16, 4)
    assert candidate.compilation_info(dense) == (
        "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
        "distribution = [32, 32, 0], vector_common_parallel = [8, 16, 0], "
        "vector_reduction = [0, 0, 4]>, translation_info = #iree_codegen.translation_info<"
        "pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, {enable_loop_peeling}>>"
    )
    assert candidate.lowering_config(scores) == (
        "#iree_cpu.lowering_config<distribution = [1, 32, 32, 0], "
        "vector_common_parallel = [1, 8, 16, 0], vector_reduction = [0, 0, 0, 4]>"
    )
    cached = CpuCandidate(64, 64, 8, 16, 8, cache_m=32, cache_n=32)
    assert cached.lowering_config(dense).startswith(
        "#iree_cpu.lowering_config<cache_parallel = [32, 32, 0], distribution = [64, 64, 0]"
    )
    assert DefaultCandidate().compilation_info(dense) is None
    assert DefaultCandidate().op_attributes(dense) == ""


def test_cuda_rendering_is_exact(dense: Workload, scores: Workload) -> None:
    candidate = CudaCandidate(32, 64, 4, 4, 8, promote=True)
    assert candidate.key() == "cuda:wg32x64:t4x4:k8:p"
    assert candidate.compilation_info(dense) == (
        "#iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{"
        "promote_operands = [0, 1], reduction = [0, 0, 8], thread = [4, 4, 0], "
        "workgroup = [32, 64, 0]}>, translation_info = #iree_codegen.translation_info<"
        "pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [128, 1, 1] "
        "subgroup_size = 32>>"
    )
    plain = CudaCandidate(32, 64, 4, 4, 8)
    assert plain.lowering_config(scores) == (
        "#iree_gpu.lowering_config<{reduction = [0, 0, 0, 8], thread = [1, 4, 4, 0], "
        "workgroup = [1, 32, 64, 0]}>"
    )


def test_mismatched_cuda_workgroup_size_is_rejected(dense: Workload) -> None:
    stated = CudaCandidate(32, 64, 4, 4, 8, stated_workgroup_size=(64, 1, 1))
    with pytest.raises(CandidateError, match=r"\[64, 1, 1\] does not match .* \[128, 1, 1\]"):
        stated.validate()
    with pytest.raises(CandidateError):
        stated.compilation_info(dense)  # never rendered, so never silently built
    CudaCandidate(32, 64, 4, 4, 8, stated_workgroup_size=(128, 1, 1)).validate(CudaTarget())
    uneven = CudaCandidate(32, 64, 3, 4, 8)
    with pytest.raises(CandidateError, match="workgroup_m=32 is not a multiple of thread_m=3"):
        uneven.validate()
    too_many = CudaCandidate(128, 256, 1, 4, 8)  # 8192 threads
    assert any("exceeds 1024" in p for p in too_many.problems(CudaTarget()))
    odd_warp = CudaCandidate(8, 16, 2, 4, 8)  # 16 threads
    assert any("multiple of the warp size" in p for p in odd_warp.problems(CudaTarget()))
    with pytest.raises(CandidateError, match="cannot run on llvm-cpu"):
        CudaCandidate(32, 64, 4, 4, 8).validate(CpuTarget())


def test_cpu_limits_are_enforced() -> None:
    target = CpuTarget(vector_bits=512, vector_registers=32, l2_bytes=2 * MIB)
    assert CpuCandidate(8, 128, 1, 16, 8).problems(target) == []
    assert any(
        "multiple of 16 f32 lanes" in p for p in CpuCandidate(8, 24, 1, 8, 8).problems(target)
    )
    assert any("vector registers" in p for p in CpuCandidate(64, 64, 16, 32, 1).problems(target))
    assert any("vector_k=3" in p for p in CpuCandidate(8, 128, 1, 16, 3).problems(target))
    assert any("half of L2" in p for p in CpuCandidate(16, 1024, 1, 16, 1).problems(target))
    with pytest.raises(CandidateError, match="workgroup_n=40 is not a multiple"):
        CpuCandidate(8, 40, 1, 16, 1).validate()
    with pytest.raises(CandidateError, match="give both or neither"):
        CpuCandidate(8, 128, 1, 16, 1, cache_m=8)


def test_candidate_json_and_keys_round_trip() -> None:
    every = [c for t in (*CPU_TARGETS, *CUDA_TARGETS) for c in space_for(t)]
    every.append(CudaCandidate(32, 64, 4, 4, 8, True, (128, 1, 1)))
    every.append(CpuCandidate(64, 64, 8, 16, 8, 32, 32))
    for candidate in every:
        assert candidate_from_json(json.loads(json.dumps(candidate.to_json()))) == candidate
        assert candidate_from_key(candidate.key()) == candidate
    assert CpuCandidate(64, 64, 8, 16, 8, 32, 32).key() == "cpu:wg64x64:c32x32:v8x16:k8"
    with pytest.raises(ValueError, match="not a candidate key"):
        candidate_from_key("cpu:wg8x128:v1x16")
    with pytest.raises(ValueError, match="unknown candidate kind"):
        candidate_from_json({"kind": "rocm"})


def test_features() -> None:
    target = CpuTarget(vector_bits=512, vector_registers=32)
    features = CpuCandidate(32, 32, 8, 16, 4).features(target)
    assert features["vector_flops"] == 2 * 8 * 16 * 4
    assert features["vector_bytes"] == (8 * 4 + 4 * 16) * 4
    assert features["vector_intensity"] == pytest.approx(1024 / 384)
    assert features["accumulator_registers"] == 8 and features["registers"] == 10
    assert "registers" not in CpuCandidate(32, 32, 8, 16, 4).features()
    cuda = CudaCandidate(32, 64, 4, 4, 8, promote=True).features(CudaTarget())
    assert cuda["threads"] == 128 and cuda["warps"] == 4
    assert cuda["smem_bytes"] == (32 * 8 + 8 * 64) * 4
    assert cuda["blocks_per_sm"] >= 1
    assert DefaultCandidate().features() == {"is_default": 1.0}
    for candidate in space_for(CudaTarget())[1:]:
        assert all(isinstance(v, float) for v in candidate.features(CudaTarget()).values())


# --- the configs land in real builds -------------------------------------------------------

_MATMUL = """
func.func @{name}(%a: tensor<?x768xf32>, %b: tensor<768x768xf32>) -> tensor<?x768xf32> {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  %r = linalg.matmul {attrs} ins(%a, %b : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}}
"""

_BATCH_MATMUL = """
func.func @{name}(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>) -> tensor<12x?x?xf32> {{
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %m = tensor.dim %q, %c1 : tensor<12x?x64xf32>
  %n = tensor.dim %k, %c2 : tensor<12x64x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m, %n) : tensor<12x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %r = linalg.batch_matmul {attrs} ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}}
"""


def _compile_with_dumps(text: str, flags: tuple[str, ...], directory: Path) -> str:
    """Compile, dumping executable sources and binaries; returns the log (stderr)."""
    result = run_compile(
        text,
        (
            *flags,
            "--iree-hal-link-executables=false",  # one binary per dispatch, named after it
            f"--iree-hal-dump-executable-sources-to={directory}",
            f"--iree-hal-dump-executable-binaries-to={directory}",
        ),
    )
    assert result.returncode == 0, result.log
    assert result.output
    return result.log


def _vectorized(log: str) -> dict[str, str]:
    """Each function's IR after IREE's vectorization, by dispatch function name."""
    found = {}
    for section in log.split("// -----// IR Dump After ")[1:]:
        name = re.search(r"func\.func @(\w+)", section)
        if name:
            found[name.group(1)] = section
    return found


CPU_CHECKS = [  # (workload fixture, candidate, vector types IREE must produce)
    ("dense", CpuCandidate(8, 128, 1, 16, 8), ["vector<1x16xf32>", "vector<8x16xf32>"]),
    ("dense", CpuCandidate(16, 64, 4, 16, 1), ["vector<4x16xf32>", "vector<4x1xf32>"]),
    ("dense", CpuCandidate(32, 32, 8, 16, 4), ["vector<8x16xf32>", "vector<8x4xf32>"]),
    ("dense", CpuCandidate(64, 64, 8, 16, 8, 32, 32), ["vector<8x16xf32>", "vector<8x8xf32>"]),
    ("scores", CpuCandidate(16, 64, 4, 16, 1), ["vector<1x4x16xf32>", "vector<1x4x1xf32>"]),
    ("scores", CpuCandidate(32, 128, 2, 32, 8), ["vector<1x2x32xf32>", "vector<1x2x8xf32>"]),
]


def test_cpu_configs_land_in_the_build(dense: Workload, scores: Workload, tmp_path: Path) -> None:
    """IREE accepts misspelled configs silently, so check what it really compiled. The
    checks are kernels of the AVX-512 space (``CPU_TARGETS[0]``: on an AVX2 host, dcmlir's
    own filters rule some out, by registers or L2), built for the host: the tiles are
    vectorized as given whatever the vector width, which is what is checked."""
    assert not any(c.problems(CPU_TARGETS[0]) for _, c, _ in CPU_CHECKS)
    target = CpuTarget()
    by_name = {"dense": (dense, _MATMUL), "scores": (scores, _BATCH_MATMUL)}
    body = []
    for index, (which, candidate, _) in enumerate(CPU_CHECKS):
        workload, template = by_name[which]
        body.append(template.format(name=f"mk{index}", attrs=candidate.op_attributes(workload)))
    flags = (*target.compile_flags(), "--mlir-print-ir-after=iree-codegen-generic-vectorization")
    log = _compile_with_dumps(target.wrap_module("".join(body)), flags, tmp_path)
    vectorized = _vectorized(log)
    for index, (which, candidate, vector_types) in enumerate(CPU_CHECKS):
        workload, _ = by_name[which]
        source = (tmp_path / f"module_mk{index}_dispatch_0.mlir").read_text()
        assert candidate.lowering_config(workload) in source
        assert "#iree_cpu.pipeline<DoubleTilingExpert>, {enable_loop_peeling}" in source
        (ir_text,) = [text for name, text in vectorized.items() if name.startswith(f"mk{index}_")]
        for vector_type in vector_types:  # the tile sizes were used, not just carried
            assert vector_type in ir_text, (candidate.key(), vector_type)


def test_cpu_candidates_build_through_the_cache(dense: Workload) -> None:
    body = "".join(
        _MATMUL.format(name=f"v{i}", attrs=c.op_attributes(dense))
        for i, c in enumerate(space_for(CpuTarget())[:3])
    )
    assert len(compile_module(body, "llvm-cpu")) > 0


def _ptx_by_dispatch(directory: Path) -> dict[str, str]:
    return {
        path.name.split("_dispatch_")[0].removeprefix("module_"): path.read_text()
        for path in directory.glob("*.ptx")
    }


@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_cuda_candidates_compile_to_different_ptx(
    gpu: str, dense: Workload, tmp_path: Path
) -> None:
    """No GPU needed: sm_80 through the flags, sm_90 through the module's explicit target."""
    target = CudaTarget.known(gpu)
    candidates = [
        CudaCandidate(32, 64, 4, 4, 8, promote=True),
        CudaCandidate(16, 128, 2, 8, 16),
    ]
    body = "".join(
        _MATMUL.format(name=f"mk{i}", attrs=c.op_attributes(dense))
        for i, c in enumerate(candidates)
    )
    _compile_with_dumps(target.wrap_module(body), target.compile_flags(), tmp_path)
    ptx = _ptx_by_dispatch(tmp_path)
    assert sorted(ptx) == ["mk0", "mk1"]
    for index, candidate in enumerate(candidates):
        text = ptx[f"mk{index}"]
        assert f".target {target.arch}" in text
        assert ".maxntid {}, {}, {}".format(*candidate.workgroup_size()) in text
        assert (".shared" in text) == candidate.promote
        source = (tmp_path / f"module_mk{index}_dispatch_0.mlir").read_text()
        assert candidate.lowering_config(dense) in source
    body_of = [re.sub(r"^.*?\.entry", "", ptx[f"mk{i}"], flags=re.S) for i in range(2)]
    assert body_of[0] != body_of[1]
