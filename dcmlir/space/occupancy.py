"""Resident blocks per SM by NVIDIA's allocation rules (the CUDA occupancy calculator's).

Registers go to warps in units of 256 per warp and are split over the SM's 4
sub-partitions; an SM holds at most 32 blocks (16 on sm_75) and 64 warps (32
on sm_75); each block reserves 1 KiB of shared memory on sm_80 and later, and
shared memory is allocated in 128-byte units. Fed with the registers and
shared memory ``ptxas`` reports, this is the figure the driver's occupancy API
gives (``docs/cuda.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dcmlir.target import CudaTarget

__all__ = ["ArchRules", "KernelFigures", "Occupancy", "arch_rules", "occupancy"]

REGISTER_UNIT = 256
"""Registers are allocated per warp, rounded up to this many."""
SUB_PARTITIONS = 4
SMEM_UNIT = 128


@dataclass(frozen=True)
class ArchRules:
    """The per-SM limits of one compute capability that the target table does not hold."""

    max_blocks_per_sm: int
    registers_per_sm: int
    reserved_smem_per_block: int


_RULES = {
    75: ArchRules(16, 65536, 0),
    80: ArchRules(32, 65536, 1024),
    86: ArchRules(16, 65536, 1024),
    89: ArchRules(24, 65536, 1024),
    90: ArchRules(32, 65536, 1024),
}


def arch_rules(arch: str) -> ArchRules:
    """The rules of ``sm_NN`` (the nearest known older capability for one not listed)."""
    number = int(arch.removeprefix("sm_").rstrip("a"))
    known = [c for c in sorted(_RULES) if c <= number]
    return _RULES[known[-1] if known else min(_RULES)]


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, and what limits them (threads, registers, smem, blocks)."""

    blocks_per_sm: int
    warps_per_sm: int
    limiter: str


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(target: CudaTarget, threads: int, registers: int, smem_bytes: int) -> Occupancy:
    """Blocks per SM for a kernel of ``threads`` threads, ``registers`` each, ``smem_bytes``."""
    rules = arch_rules(target.arch)
    warps = -(-threads // target.warp_size)
    by: dict[str, int] = {"threads": (target.max_threads_per_sm // target.warp_size) // warps}
    per_warp = _round_up(max(registers, 1) * target.warp_size, REGISTER_UNIT)
    if per_warp * _round_up(warps, SUB_PARTITIONS) > target.registers_per_block:
        by["registers"] = 0  # the launch fails: more registers than one block may have
    else:
        per_partition = (rules.registers_per_sm // SUB_PARTITIONS) // per_warp
        by["registers"] = per_partition * SUB_PARTITIONS // warps
    if smem_bytes > target.smem_per_block_bytes:
        by["smem"] = 0
    else:
        block_smem = _round_up(smem_bytes + rules.reserved_smem_per_block, SMEM_UNIT)
        if block_smem:
            by["smem"] = target.smem_per_sm_bytes // block_smem
    by["blocks"] = rules.max_blocks_per_sm
    limiter = min(by, key=by.__getitem__)  # the first of the tightest, in this order
    blocks = by[limiter]
    return Occupancy(blocks, blocks * warps, limiter)


@dataclass(frozen=True)
class KernelFigures:
    """One built kernel's real resources: ``ptxas -v`` registers and spills, IREE's shared
    memory, tensor-core instructions counted in the SASS. Replaces the estimates."""

    registers: int
    smem_bytes: int
    threads: int
    spill_bytes: int = 0
    stack_bytes: int = 0
    tensor_core_instructions: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "registers": self.registers,
            "smem_bytes": self.smem_bytes,
            "threads": self.threads,
            "spill_bytes": self.spill_bytes,
            "stack_bytes": self.stack_bytes,
            "tensor_core_instructions": self.tensor_core_instructions,
        }

    @classmethod
    def from_json(cls, obj: dict[str, int]) -> KernelFigures:
        return cls(**{name: int(obj[name]) for name in cls.__dataclass_fields__})
