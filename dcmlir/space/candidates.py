"""The micro-kernel space: candidates generated from a target's limits, never from shapes.

A candidate is stated in contraction roles (b, m, n, k) so one candidate serves
every workload of a kind; :meth:`levels` lays it onto one workload's loops and
:meth:`compilation_info` renders the IREE attribute that builds it. The space
of a target is a fixed, ordered list: IREE's own default lowering first (so a
dispatch never loses to it), then every micro-kernel of a bounded menu that
passes the target's limits. ``docs/space.md`` explains the menu and the bounds.

Limits are checked at 4 bytes per element (f32, the widest supported element
type), so a candidate valid for a target is valid for every workload on it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from dcmlir.target import CpuTarget, CudaTarget, Target
from dcmlir.workload import BATCH, K, M, N, Workload

__all__ = [
    "CPU_REFERENCE_DEPTH",
    "Candidate",
    "CandidateError",
    "CpuCandidate",
    "CudaCandidate",
    "DefaultCandidate",
    "TileLevels",
    "candidate_from_json",
    "candidate_from_key",
    "codegen_order",
    "cpu_space",
    "cuda_space",
    "per_loop",
    "select_candidates",
    "space_for",
]

ELEMENT_BYTES = 4
"""Bytes per element the limits are checked at: f32, the widest supported type."""


class CandidateError(ValueError):
    """A candidate that breaks its own structure or a target's limits; the message says which."""


@dataclass(frozen=True)
class TileLevels:
    """Per-loop tile sizes of one candidate on one workload (0: loop not tiled at that level).

    ``workgroup``: the tile one workgroup computes (IREE's ``distribution`` on a
    CPU, ``workgroup`` on a GPU); ``vector``: the micro-kernel tile of the
    parallel loops (``vector_common_parallel`` on a CPU, one thread's
    ``thread`` tile on a GPU); ``reduction``: the micro-kernel tile of the
    reduction loops; ``cache``: an optional level between workgroup and vector
    (``cache_parallel`` on a CPU).
    """

    workgroup: tuple[int, ...]
    vector: tuple[int, ...]
    reduction: tuple[int, ...]
    cache: tuple[int, ...] | None = None


def per_loop(workload: Workload, by_role: dict[str, int], others: int = 1) -> tuple[int, ...]:
    """Give the innermost loop of each role its size; other loops of a role get ``others``.

    A role missing from ``by_role`` gets 0 on every loop (not tiled at this
    level); a role the workload lacks (no batch loop in a matmul) is ignored.
    """
    innermost = {
        role: max(d.index for d in workload.dims_of(role))
        for role in by_role
        if workload.dims_of(role)
    }
    sizes = []
    for dim in workload.dims:
        if dim.role not in by_role:
            sizes.append(0)
        elif innermost[dim.role] == dim.index:
            sizes.append(by_role[dim.role])
        else:
            sizes.append(others if by_role[dim.role] else 0)
    return tuple(sizes)


def codegen_order(workload: Workload, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Per-loop sizes in the loop order IREE's codegen reads a config in.

    IREE moves every reduction loop of a ``linalg.generic`` innermost (its
    InterchangeGenericOps, before codegen), keeping the parallel loops in order; a
    config written in the op's own order would tile K where it expects M or N and the
    build fails. Named contractions already have K last: for them this is the identity.
    """
    order = [d.index for d in workload.dims if d.role != K]
    order += [d.index for d in workload.dims if d.role == K]
    return tuple(sizes[i] for i in order)


def _ints(sizes: tuple[int, ...]) -> str:
    return f"[{', '.join(map(str, sizes))}]"


def _check_sizes(obj: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CandidateError(
                f"{type(obj).__name__}.{name}={value!r} must be a positive integer"
            )


def _balanced_split(repeats: int) -> tuple[int, int]:
    """``repeats`` (a power of two) as ``(a, b)``, ``a * b == repeats``, ``a`` = ``b`` or ``2b``."""
    a = 1 << math.ceil(math.log2(repeats) / 2)
    return a, repeats // a


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _from_json_fields(cls: type, obj: Mapping[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(obj) - names - {"kind"})
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields in JSON: {', '.join(unknown)}")
    return cls(**{name: obj[name] for name in names if name in obj})


# --- IREE's default ------------------------------------------------------------------------


@dataclass(frozen=True)
class DefaultCandidate:
    """IREE's own lowering: no attribute, IREE picks tiles (with its ``cache_parallel`` level).

    Always the first candidate: DESIGN.md section 3, a dispatch never loses to it.
    """

    kind: ClassVar[str] = "default"

    def key(self) -> str:
        return "default"

    def levels(self, workload: Workload) -> None:
        """Unknown until IREE chooses them."""
        return None

    def lowering_config(self, workload: Workload) -> None:
        return None

    def compilation_info(self, workload: Workload) -> None:
        """No attribute: the op is left for IREE's heuristics."""
        return None

    def op_attributes(self, workload: Workload) -> str:
        return ""

    def problems(self, target: Target | None = None) -> list[str]:
        return []

    def validate(self, target: Target | None = None) -> None:
        return None

    def features(self, target: Target | None = None) -> dict[str, float]:
        return {"is_default": 1.0}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}


# --- CPU -----------------------------------------------------------------------------------

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
class CpuCandidate:
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
        _check_sizes(self, ("workgroup_m", "workgroup_n", "vector_m", "vector_n", "vector_k"))
        if (self.cache_m is None) != (self.cache_n is None):
            raise CandidateError("cache_m and cache_n go together: give both or neither")
        if self.cache_m is not None:
            _check_sizes(self, ("cache_m", "cache_n"))

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

    def validate(self, target: Target | None = None) -> None:
        """Raise :class:`CandidateError` listing every broken rule."""
        found = self.problems(target)
        if found:
            raise CandidateError(f"{self.key()}: {'; '.join(found)}")

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

        def sizes(level: tuple[int, ...]) -> str:
            return _ints(codegen_order(workload, level))

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

    def op_attributes(self, workload: Workload) -> str:
        return f"{{compilation_info = {self.compilation_info(workload)}}}"

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
                if area % (vector_m * vector_n) or not _is_power_of_two(
                    area // (vector_m * vector_n)
                ):
                    continue
                repeats_m, repeats_n = _balanced_split(area // (vector_m * vector_n))
                for vector_k in CPU_VECTOR_K:
                    candidate = CpuCandidate(
                        vector_m * repeats_m, vector_n * repeats_n, vector_m, vector_n, vector_k
                    )
                    if not candidate.problems(target):
                        space.append(candidate)
    return space


# --- CUDA ----------------------------------------------------------------------------------

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


@dataclass(frozen=True)
class CudaCandidate:
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

    def __post_init__(self) -> None:
        _check_sizes(self, ("workgroup_m", "workgroup_n", "thread_m", "thread_n", "reduction_k"))
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

    def smem_bytes(self) -> int:
        """Shared memory with promotion: an A tile ``wm x k`` and a B tile ``k x wn``."""
        if not self.promote:
            return 0
        tiles = self.workgroup_m * self.reduction_k + self.reduction_k * self.workgroup_n
        return tiles * ELEMENT_BYTES

    def registers_per_thread(self) -> int:
        """Upper estimate: accumulators, the thread's A and B slices of one K step, overhead."""
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
        threads = self.threads
        if target.warp_size != CUDA_SUBGROUP_SIZE:
            found.append(
                f"renders subgroup_size {CUDA_SUBGROUP_SIZE}, target warp is {target.warp_size}"
            )
        if threads % target.warp_size:
            found.append(f"{threads} threads is not a multiple of the warp size {target.warp_size}")
        if threads > target.max_threads_per_block:
            found.append(f"{threads} threads exceeds {target.max_threads_per_block} per block")
        if self.smem_bytes() > target.smem_per_block_bytes:
            found.append(
                f"promoted tiles take {self.smem_bytes()} bytes of shared memory, "
                f"more than {target.smem_per_block_bytes} per block"
            )
        registers = self.registers_per_thread()
        if registers > target.max_registers_per_thread:
            found.append(
                f"about {registers} registers per thread, "
                f"more than {target.max_registers_per_thread}"
            )
        if registers * threads > target.registers_per_block:
            found.append(
                f"about {registers * threads} registers per block, "
                f"more than {target.registers_per_block}"
            )
        return found

    def validate(self, target: Target | None = None) -> None:
        """Raise :class:`CandidateError` listing every broken rule."""
        found = self.problems(target)
        if found:
            raise CandidateError(f"{self.key()}: {'; '.join(found)}")

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

        def sizes(level: tuple[int, ...]) -> str:
            return _ints(codegen_order(workload, level))

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
        size = _ints(self.workgroup_size())
        return (
            f"#iree_codegen.compilation_info<lowering_config = {self.lowering_config(workload)}, "
            "translation_info = #iree_codegen.translation_info<pipeline = "
            f"#iree_gpu.pipeline<TileAndFuse> workgroup_size = {size} "
            f"subgroup_size = {CUDA_SUBGROUP_SIZE}>>"
        )

    def op_attributes(self, workload: Workload) -> str:
        return f"{{compilation_info = {self.compilation_info(workload)}}}"

    def features(self, target: Target | None = None) -> dict[str, float]:
        """Shape-independent numbers for the throughput model; occupancy given a target."""
        wm, wn, k = self.workgroup_m, self.workgroup_n, self.reduction_k
        step_flops = 2 * wm * wn * k
        step_bytes = (wm * k + k * wn) * ELEMENT_BYTES
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
            "step_flops": float(step_flops),
            "step_bytes": float(step_bytes),
            "intensity": step_flops / step_bytes,
        }
        if isinstance(target, CudaTarget):
            found["blocks_per_sm"] = float(self.blocks_per_sm(target))
            found["smem_fraction"] = self.smem_bytes() / target.smem_per_block_bytes
        return found

    def blocks_per_sm(self, target: CudaTarget) -> int:
        """Resident blocks per SM by threads, shared memory and registers (the tightest)."""
        by_threads = target.max_threads_per_sm // self.threads
        by_registers = target.registers_per_block // (self.registers_per_thread() * self.threads)
        smem = self.smem_bytes()
        by_smem = target.smem_per_sm_bytes // smem if smem else by_threads
        return max(0, min(by_threads, by_registers, by_smem))

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
                if area % (thread_m * thread_n) or not _is_power_of_two(threads):
                    continue
                grid_n, grid_m = _balanced_split(threads)
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


# --- the space, keys and JSON --------------------------------------------------------------

Candidate = DefaultCandidate | CpuCandidate | CudaCandidate


def space_for(target: Target) -> list[Candidate]:
    """The ordered candidate list of a target; the same list on every call."""
    if isinstance(target, CpuTarget):
        return list(cpu_space(target))
    if isinstance(target, CudaTarget):
        return list(cuda_space(target))
    raise TypeError(f"no micro-kernel space for {type(target).__name__}")


def candidate_from_json(obj: Mapping[str, Any]) -> Candidate:
    """The inverse of ``to_json`` for every kind of candidate."""
    kind = obj.get("kind")
    if kind == DefaultCandidate.kind:
        return DefaultCandidate()
    if kind == CpuCandidate.kind:
        return _from_json_fields(CpuCandidate, obj)
    if kind == CudaCandidate.kind:
        values = dict(obj)
        if values.get("stated_workgroup_size") is not None:
            values["stated_workgroup_size"] = tuple(values["stated_workgroup_size"])
        return _from_json_fields(CudaCandidate, values)
    raise ValueError(f"unknown candidate kind {kind!r} in JSON")


_CPU_KEY = re.compile(r"^cpu:wg(\d+)x(\d+)(?::c(\d+)x(\d+))?:v(\d+)x(\d+):k(\d+)$")
_CUDA_KEY = re.compile(r"^cuda:wg(\d+)x(\d+):t(\d+)x(\d+):k(\d+)(:p)?(?::ws(\d+)x(\d+)x(\d+))?$")


def candidate_from_key(key: str) -> Candidate:
    """The inverse of ``key()``: lets a user name a candidate on a command line."""
    if key == "default":
        return DefaultCandidate()
    found = _CPU_KEY.match(key)
    if found:
        wm, wn, cm, cn, vm, vn, vk = found.groups()
        cache = (int(cm), int(cn)) if cm is not None else (None, None)
        return CpuCandidate(int(wm), int(wn), int(vm), int(vn), int(vk), *cache)
    found = _CUDA_KEY.match(key)
    if found:
        wm, wn, tm, tn, k, promote, *size = found.groups()
        stated = tuple(int(v) for v in size) if size[0] is not None else None
        return CudaCandidate(
            int(wm), int(wn), int(tm), int(tn), int(k), promote is not None, stated
        )
    raise ValueError(
        f"'{key}' is not a candidate key (e.g. default, cpu:wg8x128:v1x16:k8, "
        "cuda:wg32x64:t4x4:k8:p)"
    )


def select_candidates(space: Sequence[Candidate], count: int) -> list[Candidate]:
    """``count`` candidates spread evenly over the space, IREE's default first."""
    if count <= 0 or count >= len(space):
        return list(space)
    default = [c for c in space if isinstance(c, DefaultCandidate)]
    rest = [c for c in space if not isinstance(c, DefaultCandidate)]
    wanted = max(count - len(default), 0)
    step = len(rest) / wanted if wanted else 0
    return default + [rest[int(i * step)] for i in range(wanted)]
