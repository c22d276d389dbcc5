"""The ``llvm-cpu`` micro-kernels: :class:`CpuCandidate` and the CPU space of a target's limits.

A CPU candidate is a register-blocked micro-kernel for IREE's
``DoubleTilingExpert`` pipeline; :func:`cpu_space` lists IREE's default, then
every kernel of the menu below that fits the target's registers and L2
(``docs/space.md``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from dcmlir.space.candidate import (
    ELEMENT_BYTES,
    CandidateError,
    DefaultCandidate,
    TiledCandidate,
    TileLevels,
    balanced_split,
    check_sizes,
    is_power_of_two,
    level_list,
    per_loop,
)
from dcmlir.target import CpuTarget, Target
from dcmlir.workload import BATCH, K, M, N, Workload

__all__ = [
    "CPU_REFERENCE_DEPTH",
    "CpuCandidate",
    "cpu_space",
]

CPU_VECTOR_M = (1, 2, 4, 8, 16)
"""Rows of the vector tile; 1, 2, 4 are the skinny-M kernels dynamic M needs."""
CPU_VECTOR_N_GROUPS = (1, 2, 4)
"""Columns of the vector tile in whole f32 vector registers (lane groups)."""
CPU_VECTOR_K = (1, 2, 4, 8, 16)
"""Reduction unroll of the vector contraction."""
CPU_WORKGROUP_AREAS = (1024, 4096)
"""Output elements of one workgroup tile (4 KiB and 16 KiB of f32)."""
CPU_REFERENCE_DEPTH = 512
"""K depth the workgroup's operand panels are sized for (shapes are unknown here)."""
CPU_OPERAND_REGISTERS = 1
"""Registers for the broadcast A element, on top of the accumulators and one B row."""


@dataclass(frozen=True)
class CpuCandidate(TiledCandidate):
    """An ``llvm-cpu`` micro-kernel for IREE's ``DoubleTilingExpert`` pipeline, in roles.

    ``workgroup_*``: the tile of one workgroup (``distribution``);
    ``vector_*``: the register-blocked micro-kernel (``vector_common_parallel``
    and ``vector_reduction``); ``cache_*``: an optional ``cache_parallel``
    level in between. Batch loops are tiled by 1, K is never distributed.
    """

    kind: ClassVar[str] = "cpu"

    workgroup_m: int
    workgroup_n: int
    vector_m: int
    vector_n: int
    vector_k: int
    cache_m: int | None = None
    cache_n: int | None = None

    def __post_init__(self) -> None:
        check_sizes(self, ("workgroup_m", "workgroup_n", "vector_m", "vector_n", "vector_k"))
        if (self.cache_m is None) != (self.cache_n is None):
            raise CandidateError("cache_m and cache_n go together: give both or neither")
        if self.cache_m is not None:
            check_sizes(self, ("cache_m", "cache_n"))

    @property
    def has_cache_level(self) -> bool:
        return self.cache_m is not None

    def key(self) -> str:
        """``cpu:wg8x128:v1x16:k8`` (``:c32x64`` before ``:v`` with a cache level)."""
        cache = f":c{self.cache_m}x{self.cache_n}" if self.has_cache_level else ""
        return (
            f"cpu:wg{self.workgroup_m}x{self.workgroup_n}{cache}"
            f":v{self.vector_m}x{self.vector_n}:k{self.vector_k}"
        )

    def problems(self, target: Target | None = None) -> list[str]:
        """Every broken rule: structure always, a CPU target's limits when given."""
        found = []
        inner_m, inner_n = self.vector_m, self.vector_n
        if self.cache_m is not None and self.cache_n is not None:
            for role, cache, vector in (
                ("m", self.cache_m, self.vector_m),
                ("n", self.cache_n, self.vector_n),
            ):
                if cache % vector:
                    found.append(
                        f"cache_{role}={cache} is not a multiple of vector_{role}={vector}"
                    )
            inner_m, inner_n = self.cache_m, self.cache_n
        for role, outer, inner in (
            ("m", self.workgroup_m, inner_m),
            ("n", self.workgroup_n, inner_n),
        ):
            if outer % inner:
                found.append(
                    f"workgroup_{role}={outer} is not a multiple of the inner tile {inner}"
                )
        if target is None:
            return found
        if not isinstance(target, CpuTarget):
            return [*found, f"a CPU candidate cannot run on {target.backend}"]
        found += self._limit_problems(target)
        return found

    def _limit_problems(self, target: CpuTarget) -> list[str]:
        found = []
        lanes = target.lanes
        if self.vector_n % lanes:
            found.append(f"vector_n={self.vector_n} is not a multiple of {lanes} f32 lanes")
        used = self.registers(target)
        if used > target.vector_registers:
            found.append(
                f"needs {used} vector registers (accumulators + one B row + "
                f"{CPU_OPERAND_REGISTERS}), the target has {target.vector_registers}"
            )
        if self.vector_k not in CPU_VECTOR_K:
            found.append(f"vector_k={self.vector_k} is not one of {CPU_VECTOR_K}")
        panels = (self.workgroup_m + self.workgroup_n) * CPU_REFERENCE_DEPTH * ELEMENT_BYTES
        if panels > target.l2_bytes // 2:
            found.append(
                f"workgroup panels at K={CPU_REFERENCE_DEPTH} take {panels} bytes, more than "
                f"half of L2 ({target.l2_bytes // 2})"
            )
        return found

    def accumulator_registers(self, target: CpuTarget) -> int:
        return math.ceil(self.vector_m * self.vector_n / target.lanes)

    def registers(self, target: CpuTarget) -> int:
        """Vector registers the micro-kernel keeps live: accumulators, one B row, one A broadcast.

        The contraction is consumed one k at a time (outer products), so only
        one row of B and one broadcast element of A are live besides the
        accumulators, as in a BLAS micro-kernel.
        """
        b_row = math.ceil(self.vector_n / target.lanes)
        return self.accumulator_registers(target) + b_row + CPU_OPERAND_REGISTERS

    def levels(self, workload: Workload) -> TileLevels:
        cache = None
        if self.cache_m is not None and self.cache_n is not None:
            cache = per_loop(workload, {BATCH: 1, M: self.cache_m, N: self.cache_n})
        return TileLevels(
            workgroup=per_loop(workload, {BATCH: 1, M: self.workgroup_m, N: self.workgroup_n}),
            vector=per_loop(workload, {BATCH: 1, M: self.vector_m, N: self.vector_n}),
            reduction=per_loop(workload, {K: self.vector_k}),
            cache=cache,
        )

    def lowering_config(self, workload: Workload) -> str:
        """The ``#iree_cpu.lowering_config``, keys in the order IREE prints them back.

        Printed order (alphabetical) lets a build check find this exact text in
        IREE's dumped executable sources.
        """
        self.validate()
        levels = self.levels(workload)
        sizes = functools.partial(level_list, workload)

        parts = []
        if levels.cache is not None:
            parts.append(f"cache_parallel = {sizes(levels.cache)}")
        parts += [
            f"distribution = {sizes(levels.workgroup)}",
            f"vector_common_parallel = {sizes(levels.vector)}",
            f"vector_reduction = {sizes(levels.reduction)}",
        ]
        return f"#iree_cpu.lowering_config<{', '.join(parts)}>"

    def compilation_info(self, workload: Workload) -> str:
        """The op's ``compilation_info``; without ``enable_loop_peeling`` IREE masks every step."""
        return (
            f"#iree_codegen.compilation_info<lowering_config = {self.lowering_config(workload)}, "
            "translation_info = #iree_codegen.translation_info<pipeline = "
            "#iree_cpu.pipeline<DoubleTilingExpert>, {enable_loop_peeling}>>"
        )

    def features(self, target: Target | None = None) -> dict[str, float]:
        """Shape-independent numbers for the throughput model; register use given a target."""
        wm, wn = self.workgroup_m, self.workgroup_n
        vm, vn, vk = self.vector_m, self.vector_n, self.vector_k
        vector_flops = 2 * vm * vn * vk
        vector_bytes = (vm * vk + vk * vn) * ELEMENT_BYTES
        workgroup_bytes = (wm + wn) * ELEMENT_BYTES  # operand bytes per step of K
        found = {
            "is_default": 0.0,
            "workgroup_m": float(wm),
            "workgroup_n": float(wn),
            "workgroup_elements": float(wm * wn),
            "vector_m": float(vm),
            "vector_n": float(vn),
            "vector_k": float(vk),
            "vector_elements": float(vm * vn),
            "repeats_m": wm / vm,
            "repeats_n": wn / vn,
            "cache_level": 1.0 if self.has_cache_level else 0.0,
            "vector_flops": float(vector_flops),
            "vector_bytes": float(vector_bytes),
            "vector_intensity": vector_flops / vector_bytes,
            "workgroup_flops_per_k": float(2 * wm * wn),
            "workgroup_bytes_per_k": float(workgroup_bytes),
            "workgroup_intensity": 2 * wm * wn / workgroup_bytes,
        }
        if isinstance(target, CpuTarget):
            found["lanes"] = float(target.lanes)
            found["accumulator_registers"] = float(self.accumulator_registers(target))
            found["registers"] = float(self.registers(target))
            found["register_fraction"] = self.registers(target) / target.vector_registers
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "workgroup_m": self.workgroup_m,
            "workgroup_n": self.workgroup_n,
            "vector_m": self.vector_m,
            "vector_n": self.vector_n,
            "vector_k": self.vector_k,
            "cache_m": self.cache_m,
            "cache_n": self.cache_n,
        }


def cpu_space(target: CpuTarget) -> list[DefaultCandidate | CpuCandidate]:
    """IREE's default, then the CPU menu filtered by the target's limits (docs/space.md).

    Vector tiles: ``vector_m`` in :data:`CPU_VECTOR_M`, ``vector_n`` a whole
    number of registers (:data:`CPU_VECTOR_N_GROUPS`), within the register
    budget. Workgroup tiles: the vector tile repeated about equally along M
    and N up to each area of :data:`CPU_WORKGROUP_AREAS`, within half of L2.
    """
    space: list[DefaultCandidate | CpuCandidate] = [DefaultCandidate()]
    for groups in CPU_VECTOR_N_GROUPS:
        vector_n = groups * target.lanes
        for vector_m in CPU_VECTOR_M:
            for area in CPU_WORKGROUP_AREAS:
                if area % (vector_m * vector_n) or not is_power_of_two(
                    area // (vector_m * vector_n)
                ):
                    continue
                repeats_m, repeats_n = balanced_split(area // (vector_m * vector_n))
                for vector_k in CPU_VECTOR_K:
                    candidate = CpuCandidate(
                        vector_m * repeats_m, vector_n * repeats_n, vector_m, vector_n, vector_k
                    )
                    if not candidate.problems(target):
                        space.append(candidate)
    return space
