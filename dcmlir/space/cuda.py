"""The ``cuda`` micro-kernels: :class:`CudaCandidate`, the GPU space, registers and blocks per SM.

A CUDA candidate is a block tile and a thread tile for IREE's ``TileAndFuse``
pipeline; :func:`cuda_space` lists IREE's default, then every kernel of the
menu below within the target's threads, shared memory and registers
(``docs/space.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dcmlir.space.candidate import (
    ELEMENT_BYTES,
    CandidateError,
    DefaultCandidate,
    TiledCandidate,
    TileLevels,
    balanced_split,
    check_sizes,
    int_list,
    is_power_of_two,
    level_list,
    per_loop,
)
from dcmlir.space.occupancy import KernelFigures, occupancy
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import BATCH, K, M, N, Workload

__all__ = [
    "CudaCandidate",
    "cuda_space",
    "element_bytes_of",
    "gpu_limit_problems",
]

CUDA_SUBGROUP_SIZE = 32
"""The ``subgroup_size`` rendered; NVIDIA warps are 32 wide."""
CUDA_THREAD_M = (1, 2, 4, 8)
CUDA_THREAD_N = (4, 8)
"""Thread tile columns: at least 4 so each thread moves 16-byte vectors along N."""
CUDA_MAX_THREAD_ELEMENTS = 32
"""Accumulators per thread in the menu (thread_m * thread_n)."""
CUDA_WORKGROUP_AREAS = (1024, 2048, 4096)
CUDA_REDUCTION_K = (8, 16, 32)
CUDA_REGISTER_OVERHEAD = 16
"""Registers a thread needs besides its tiles: indices, addresses, loop counters."""
_TYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def element_bytes_of(workload: Workload) -> int:
    """Bytes of one input element: what a promoted tile holds in shared memory."""
    return _TYPE_BYTES.get(workload.element_types[0], ELEMENT_BYTES)


def gpu_limit_problems(
    target: CudaTarget, threads: int, registers: int, smem: int, measured: bool
) -> list[str]:
    """The target's limits for a kernel of these resources (``measured``: read by ptxas)."""
    found = []
    if threads % target.warp_size:
        found.append(f"{threads} threads is not a multiple of the warp size {target.warp_size}")
    if threads > target.max_threads_per_block:
        found.append(f"{threads} threads exceeds {target.max_threads_per_block} per block")
    if smem > target.smem_per_block_bytes:
        found.append(
            f"promoted tiles take {smem} bytes of shared memory, "
            f"more than {target.smem_per_block_bytes} per block"
        )
    about = "" if measured else "about "
    if registers > target.max_registers_per_thread:
        found.append(
            f"{about}{registers} registers per thread, more than {target.max_registers_per_thread}"
        )
    elif not found and occupancy(target, threads, registers, smem).blocks_per_sm == 0:
        found.append(
            f"{about}{registers} registers x {threads} threads do not fit the "
            f"{target.registers_per_block} registers of a block (256 per warp allocation)"
        )
    return found


@dataclass(frozen=True)
class CudaCandidate(TiledCandidate):
    """A ``cuda`` micro-kernel for IREE's ``TileAndFuse`` pipeline, in roles.

    ``workgroup_*``: the block's output tile; ``thread_*``: one thread's tile
    (so the block has ``(workgroup_m/thread_m) * (workgroup_n/thread_n)``
    threads); ``reduction_k``: the K step; ``promote``: stage both operand
    tiles in shared memory. ``stated_workgroup_size`` is a size given with
    the candidate (a record, a hand-written config): IREE builds a
    mismatching size without a word, so :meth:`validate` rejects it.
    """

    kind: ClassVar[str] = "cuda"

    workgroup_m: int
    workgroup_n: int
    thread_m: int
    thread_n: int
    reduction_k: int
    promote: bool = False
    stated_workgroup_size: tuple[int, int, int] | None = None
    element_bytes: int = field(default=ELEMENT_BYTES, compare=False)
    """Bytes of an input element (2 for f16/bf16): set by :meth:`for_workload`."""
    figures: KernelFigures | None = field(default=None, compare=False, repr=False)
    """Real resources from a build (``dcmlir inspect``); None: the estimates."""

    def __post_init__(self) -> None:
        check_sizes(self, ("workgroup_m", "workgroup_n", "thread_m", "thread_n", "reduction_k"))
        if not isinstance(self.promote, bool):
            raise CandidateError(f"promote={self.promote!r} must be a bool")
        if self.stated_workgroup_size is not None:
            stated = tuple(self.stated_workgroup_size)
            if len(stated) != 3 or not all(isinstance(v, int) and v > 0 for v in stated):
                raise CandidateError(f"workgroup size {stated!r} must be 3 positive integers")
            object.__setattr__(self, "stated_workgroup_size", stated)

    def key(self) -> str:
        """``cuda:wg32x64:t4x4:k8:p`` (``:p``: promoted; ``:ws..`` with a stated size)."""
        text = (
            f"cuda:wg{self.workgroup_m}x{self.workgroup_n}"
            f":t{self.thread_m}x{self.thread_n}:k{self.reduction_k}"
        )
        if self.promote:
            text += ":p"
        if self.stated_workgroup_size is not None:
            text += ":ws" + "x".join(map(str, self.stated_workgroup_size))
        return text

    @property
    def threads(self) -> int:
        """Threads per block the tiles imply (rounded up where a tile does not divide)."""
        return math.ceil(self.workgroup_m / self.thread_m) * math.ceil(
            self.workgroup_n / self.thread_n
        )

    def workgroup_size(self) -> tuple[int, int, int]:
        """Derived from the tiles: TileAndFuse maps the thread grid onto x."""
        return (self.threads, 1, 1)

    def for_workload(self, workload: Workload) -> CudaCandidate:
        """This candidate with the workload's element size (same key, same kernel config)."""
        return dataclasses.replace(self, element_bytes=element_bytes_of(workload))

    def with_figures(self, figures: KernelFigures | None) -> CudaCandidate:
        """This candidate with a build's real resources (same key)."""
        return dataclasses.replace(self, figures=figures)

    def smem_bytes(self) -> int:
        """Shared memory: the build's, else promotion's A tile ``wm x k`` and B tile ``k x wn``."""
        if self.figures is not None:
            return self.figures.smem_bytes
        if not self.promote:
            return 0
        tiles = self.workgroup_m * self.reduction_k + self.reduction_k * self.workgroup_n
        return tiles * self.element_bytes

    def registers_per_thread(self) -> int:
        """ptxas's count when built, else an estimate: accumulators, one K step's A and B
        slices, overhead (not a bound: ptxas exceeds it for a few candidates)."""
        if self.figures is not None:
            return self.figures.registers
        accumulators = self.thread_m * self.thread_n
        operands = self.reduction_k * (self.thread_m + self.thread_n)
        return accumulators + operands + CUDA_REGISTER_OVERHEAD

    def problems(self, target: Target | None = None) -> list[str]:
        """Every broken rule: structure always, a CUDA target's limits when given."""
        found = []
        for role, outer, inner in (
            ("m", self.workgroup_m, self.thread_m),
            ("n", self.workgroup_n, self.thread_n),
        ):
            if outer % inner:
                found.append(f"workgroup_{role}={outer} is not a multiple of thread_{role}={inner}")
        if (
            self.stated_workgroup_size is not None
            and self.stated_workgroup_size != self.workgroup_size()
        ):
            found.append(
                f"workgroup size {list(self.stated_workgroup_size)} does not match the tiles, "
                f"which need {list(self.workgroup_size())}"
            )
        if target is None:
            return found
        if not isinstance(target, CudaTarget):
            return [*found, f"a CUDA candidate cannot run on {target.backend}"]
        return found + self._limit_problems(target)

    def _limit_problems(self, target: CudaTarget) -> list[str]:
        found = []
        if target.warp_size != CUDA_SUBGROUP_SIZE:
            found.append(
                f"renders subgroup_size {CUDA_SUBGROUP_SIZE}, target warp is {target.warp_size}"
            )
        registers, measured = self.registers_per_thread(), self.figures is not None
        return found + gpu_limit_problems(
            target, self.threads, registers, self.smem_bytes(), measured
        )

    def levels(self, workload: Workload) -> TileLevels:
        return TileLevels(
            workgroup=per_loop(workload, {BATCH: 1, M: self.workgroup_m, N: self.workgroup_n}),
            vector=per_loop(workload, {BATCH: 1, M: self.thread_m, N: self.thread_n}),
            reduction=per_loop(workload, {K: self.reduction_k}),
        )

    def lowering_config(self, workload: Workload) -> str:
        """The ``#iree_gpu.lowering_config``, keys in the order IREE prints them back."""
        self.validate()
        levels = self.levels(workload)
        sizes = functools.partial(level_list, workload)

        entries = []
        if self.promote:
            entries.append("promote_operands = [0, 1]")
        entries += [
            f"reduction = {sizes(levels.reduction)}",
            f"thread = {sizes(levels.vector)}",
            f"workgroup = {sizes(levels.workgroup)}",
        ]
        return f"#iree_gpu.lowering_config<{{{', '.join(entries)}}}>"

    def compilation_info(self, workload: Workload) -> str:
        size = int_list(self.workgroup_size())
        return (
            f"#iree_codegen.compilation_info<lowering_config = {self.lowering_config(workload)}, "
            "translation_info = #iree_codegen.translation_info<pipeline = "
            f"#iree_gpu.pipeline<TileAndFuse> workgroup_size = {size} "
            f"subgroup_size = {CUDA_SUBGROUP_SIZE}>>"
        )

    def features(self, target: Target | None = None) -> dict[str, float]:
        """Shape-independent numbers for the throughput model; occupancy given a target."""
        wm, wn, k = self.workgroup_m, self.workgroup_n, self.reduction_k
        step_flops = 2 * wm * wn * k
        step_bytes = (wm * k + k * wn) * self.element_bytes
        threads = self.threads
        found = {
            "is_default": 0.0,
            "workgroup_m": float(wm),
            "workgroup_n": float(wn),
            "workgroup_elements": float(wm * wn),
            "thread_m": float(self.thread_m),
            "thread_n": float(self.thread_n),
            "thread_elements": float(self.thread_m * self.thread_n),
            "reduction_k": float(k),
            "promote": 1.0 if self.promote else 0.0,
            "threads": float(threads),
            "warps": threads / CUDA_SUBGROUP_SIZE,
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
        """Resident blocks per SM by NVIDIA's allocation rules (:mod:`dcmlir.space.occupancy`)."""
        registers, smem = self.registers_per_thread(), self.smem_bytes()
        return occupancy(target, self.threads, registers, smem).blocks_per_sm

    def to_json(self) -> dict[str, Any]:
        stated = self.stated_workgroup_size
        return {
            "kind": self.kind,
            "workgroup_m": self.workgroup_m,
            "workgroup_n": self.workgroup_n,
            "thread_m": self.thread_m,
            "thread_n": self.thread_n,
            "reduction_k": self.reduction_k,
            "promote": self.promote,
            "stated_workgroup_size": list(stated) if stated is not None else None,
        }


def cuda_space(target: CudaTarget) -> list[DefaultCandidate | CudaCandidate]:
    """IREE's default, then the CUDA menu filtered by the target's limits (docs/space.md).

    Thread tiles from :data:`CUDA_THREAD_M` x :data:`CUDA_THREAD_N`; the block
    is a grid of them about square (N side the longer) covering each area of
    :data:`CUDA_WORKGROUP_AREAS`; every K step and both promotion choices.
    """
    space: list[DefaultCandidate | CudaCandidate] = [DefaultCandidate()]
    for thread_m in CUDA_THREAD_M:
        for thread_n in CUDA_THREAD_N:
            if thread_m * thread_n > CUDA_MAX_THREAD_ELEMENTS:
                continue
            for area in CUDA_WORKGROUP_AREAS:
                threads = area // (thread_m * thread_n)
                if area % (thread_m * thread_n) or not is_power_of_two(threads):
                    continue
                grid_n, grid_m = balanced_split(threads)
                for reduction_k in CUDA_REDUCTION_K:
                    for promote in (False, True):
                        candidate = CudaCandidate(
                            thread_m * grid_m,
                            thread_n * grid_n,
                            thread_m,
                            thread_n,
                            reduction_k,
                            promote,
                        )
                        if not candidate.problems(target):
                            space.append(candidate)
    return space
