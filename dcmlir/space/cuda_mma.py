"""The ``cuda-mma`` micro-kernels: tensor cores (``mma.sync`` m16n8k16) for f16 and bf16.

IREE 3.13's ``TileAndFuse`` pipeline takes an ``mma_kind`` in the lowering
config; at a dynamic dim it needs ``padding`` too (the tiles are padded to
whole intrinsics; without it the build stops with "op was not bufferized").
Accumulation is f32 (``NV_MMA_SYNC_F32_16x8x16_F16`` / ``..._BF16``), so the
family applies where the inputs are f16 or bf16 and the output is f32. f32
inputs keep the SIMT family: IREE 3.13 lists no TF32 intrinsic for CUDA.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dcmlir.space.candidate import (
    CandidateError,
    TiledCandidate,
    TileLevels,
    check_sizes,
    int_list,
    level_list,
    per_loop,
)
from dcmlir.space.cuda import CUDA_SUBGROUP_SIZE, gpu_limit_problems
from dcmlir.space.occupancy import KernelFigures, occupancy
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import BATCH, K, M, N, Workload

__all__ = ["MMA_KINDS", "CudaMmaCandidate", "cuda_mma_space", "mma_problem"]

INTRINSIC_M, INTRINSIC_N, INTRINSIC_K = 16, 8, 16
"""``mma.sync.aligned.m16n8k16``: the tile one warp-wide instruction computes."""
MMA_KINDS = {"f16": "NV_MMA_SYNC_F32_16x8x16_F16", "bf16": "NV_MMA_SYNC_F32_16x8x16_BF16"}
"""The intrinsic by input element type, f32 accumulate (IREE 3.13's CUDA table has both)."""
MMA_ELEMENT_BYTES = 2
MMA_WORKGROUPS = ((32, 64), (64, 64), (64, 128), (128, 128))
MMA_SUBGROUPS = ((1, 4), (2, 2), (2, 4), (4, 4))
"""Intrinsics per warp along M and N (``subgroup`` of the lowering config)."""
MMA_REDUCTION_K = (2, 4, 8)
"""Intrinsics along K per step: K tiles of 32, 64 and 128."""
MMA_MAX_WARPS = 8
MMA_REGISTER_OVERHEAD = 40


def mma_problem(workload: Workload) -> str | None:
    """Why the tensor-core family does not apply to ``workload``, or None."""
    inputs, output = workload.element_types[:2], workload.element_types[2]
    if inputs[0] != inputs[1] or inputs[0] not in MMA_KINDS:
        return f"inputs are {','.join(inputs)}: tensor cores here take f16 or bf16"
    if output != "f32":
        return f"output is {output}: the f32-accumulate intrinsics write f32"
    return None


@dataclass(frozen=True)
class CudaMmaCandidate(TiledCandidate):
    """A tensor-core micro-kernel: a block tile, each warp's tile in intrinsics, a K step.

    ``workgroup_*``: the block's output tile; ``subgroup_*``: intrinsics one
    warp computes along M and N; ``reduction_k``: intrinsics along K per step.
    Operands are always staged in shared memory (``promote_operands``).
    """

    kind: ClassVar[str] = "cuda-mma"

    workgroup_m: int
    workgroup_n: int
    subgroup_m: int
    subgroup_n: int
    reduction_k: int
    figures: KernelFigures | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_sizes(self, ("workgroup_m", "workgroup_n", "subgroup_m", "subgroup_n", "reduction_k"))

    def key(self) -> str:
        """``cuda-mma:wg64x64:s2x4:k8``."""
        return (
            f"cuda-mma:wg{self.workgroup_m}x{self.workgroup_n}"
            f":s{self.subgroup_m}x{self.subgroup_n}:k{self.reduction_k}"
        )

    @property
    def warp_tile(self) -> tuple[int, int]:
        return self.subgroup_m * INTRINSIC_M, self.subgroup_n * INTRINSIC_N

    @property
    def threads(self) -> int:
        warp_m, warp_n = self.warp_tile
        return (self.workgroup_m // warp_m) * (self.workgroup_n // warp_n) * CUDA_SUBGROUP_SIZE

    @property
    def k_tile(self) -> int:
        return self.reduction_k * INTRINSIC_K

    def workgroup_size(self) -> tuple[int, int, int]:
        return (self.threads, 1, 1)

    def with_figures(self, figures: KernelFigures | None) -> CudaMmaCandidate:
        return dataclasses.replace(self, figures=figures)

    def for_workload(self, workload: Workload) -> CudaMmaCandidate:
        return self

    def smem_bytes(self) -> int:
        """The build's, else the promoted A (``wm x K``) and B (``K x wn``) tiles in f16."""
        if self.figures is not None:
            return self.figures.smem_bytes
        return (self.workgroup_m + self.workgroup_n) * self.k_tile * MMA_ELEMENT_BYTES

    def registers_per_thread(self) -> int:
        """ptxas's count when built, else: f32 accumulators (4 per intrinsic), two K steps
        of A (4) and B (2) fragments, overhead."""
        if self.figures is not None:
            return self.figures.registers
        accumulators = 4 * self.subgroup_m * self.subgroup_n
        fragments = 2 * (4 * self.subgroup_m + 2 * self.subgroup_n)
        return accumulators + fragments + MMA_REGISTER_OVERHEAD

    def problems(self, target: Target | None = None) -> list[str]:
        found = []
        warp_m, warp_n = self.warp_tile
        for role, outer, inner in (
            ("m", self.workgroup_m, warp_m),
            ("n", self.workgroup_n, warp_n),
        ):
            if outer % inner:
                found.append(f"workgroup_{role}={outer} is not a multiple of the warp's {inner}")
        if target is None or found:
            return found
        if not isinstance(target, CudaTarget):
            return [f"a CUDA candidate cannot run on {target.backend}"]
        registers, measured = self.registers_per_thread(), self.figures is not None
        return gpu_limit_problems(target, self.threads, registers, self.smem_bytes(), measured)

    def levels(self, workload: Workload) -> TileLevels:
        warp_m, warp_n = self.warp_tile
        return TileLevels(
            workgroup=per_loop(workload, {BATCH: 1, M: self.workgroup_m, N: self.workgroup_n}),
            vector=per_loop(workload, {BATCH: 1, M: warp_m, N: warp_n}),
            reduction=per_loop(workload, {K: self.k_tile}),
        )

    def lowering_config(self, workload: Workload) -> str:
        """``mma_kind``, promotion, ``padding`` (whole tiles at dynamic dims), the tiles."""
        problem = mma_problem(workload)
        if problem is not None:
            raise CandidateError(f"{self.key()}: {problem}")
        self.validate()
        sizes = functools.partial(level_list, workload)
        kind = MMA_KINDS[workload.element_types[0]]
        padding = per_loop(
            workload, {BATCH: 1, M: self.workgroup_m, N: self.workgroup_n, K: self.k_tile}
        )
        workgroup = per_loop(workload, {BATCH: 1, M: self.workgroup_m, N: self.workgroup_n})
        subgroup = per_loop(workload, {M: self.subgroup_m, N: self.subgroup_n}, others=0)
        reduction = per_loop(workload, {K: self.reduction_k})
        entries = [
            f"mma_kind = #iree_gpu.mma_layout<{kind}>",
            f"padding = {sizes(padding)}",
            "promote_operands = [0, 1]",
            f"reduction = {sizes(reduction)}",
            f"subgroup = {sizes(subgroup)}",
            f"workgroup = {sizes(workgroup)}",
        ]
        return f"#iree_gpu.lowering_config<{{{', '.join(entries)}}}>"

    def compilation_info(self, workload: Workload) -> str:
        return (
            f"#iree_codegen.compilation_info<lowering_config = {self.lowering_config(workload)}, "
            "translation_info = #iree_codegen.translation_info<pipeline = "
            f"#iree_gpu.pipeline<TileAndFuse> workgroup_size = {int_list(self.workgroup_size())} "
            f"subgroup_size = {CUDA_SUBGROUP_SIZE}>>"
        )

    def features(self, target: Target | None = None) -> dict[str, float]:
        """Shape-independent numbers for the throughput model; occupancy given a target."""
        wm, wn, k = self.workgroup_m, self.workgroup_n, self.k_tile
        step_flops = 2 * wm * wn * k
        step_bytes = (wm + wn) * k * MMA_ELEMENT_BYTES
        found = {
            "is_default": 0.0,
            "tensor_core": 1.0,
            "workgroup_m": float(wm),
            "workgroup_n": float(wn),
            "workgroup_elements": float(wm * wn),
            "reduction_k": float(k),
            "threads": float(self.threads),
            "warps": self.threads / CUDA_SUBGROUP_SIZE,
            "smem_bytes": float(self.smem_bytes()),
            "registers_per_thread": float(self.registers_per_thread()),
            "spill_bytes": float(self.figures.spill_bytes if self.figures else 0),
            "step_flops": float(step_flops),
            "step_bytes": float(step_bytes),
            "intensity": step_flops / step_bytes,
        }
        if isinstance(target, CudaTarget):
            found["blocks_per_sm"] = float(self.blocks_per_sm(target))
            found["smem_fraction"] = self.smem_bytes() / target.smem_per_block_bytes
        return found

    def blocks_per_sm(self, target: CudaTarget) -> int:
        registers, smem = self.registers_per_thread(), self.smem_bytes()
        return occupancy(target, self.threads, registers, smem).blocks_per_sm

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "workgroup_m": self.workgroup_m,
            "workgroup_n": self.workgroup_n,
            "subgroup_m": self.subgroup_m,
            "subgroup_n": self.subgroup_n,
            "reduction_k": self.reduction_k,
        }


def cuda_mma_space(target: CudaTarget) -> list[CudaMmaCandidate]:
    """Every block tile x warp tile x K step of the menu that fits ``target`` (1-8 warps)."""
    found = []
    for workgroup_m, workgroup_n in MMA_WORKGROUPS:
        for subgroup_m, subgroup_n in MMA_SUBGROUPS:
            for reduction_k in MMA_REDUCTION_K:
                candidate = CudaMmaCandidate(
                    workgroup_m, workgroup_n, subgroup_m, subgroup_n, reduction_k
                )
                if candidate.problems() or candidate.threads > MMA_MAX_WARPS * CUDA_SUBGROUP_SIZE:
                    continue
                if not candidate.problems(target):
                    found.append(candidate)
    return found
