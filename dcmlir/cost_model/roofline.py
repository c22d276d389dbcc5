"""The offline CUDA model: a roofline per kernel, scaled by occupancy and waves; no timing.

For a GPU that is not here (``dcmlir tune --target cuda`` without one), each
kernel's time on a shape is predicted from what is known without running it:

- compute: the padded FLOPs (tiles rounded up, as the kernel computes them) at the
  arch's published peak (tensor-core peak for ``cuda-mma`` kernels, FP32 for the
  SIMT ones, whose f16 inputs are widened to f32), spread over the SMs wave by
  wave: a wave holds ``blocks_per_sm`` blocks per SM (from ``ptxas`` registers
  and IREE's shared memory, :mod:`dcmlir.space.occupancy`), the last one fewer,
  and an SM with fewer than :data:`HIDING_WARPS` resident warps runs at that
  fraction of its peak;
- memory: each operand read and the result written once, at the published DRAM
  bandwidth; and the operand tiles every block loads (``grid x (wm + wn) x K``
  elements: small tiles re-read the operands many times) at the L2 bandwidth,
  taken as :data:`L2_OVER_DRAM` times the DRAM one;
- time = max(compute, memory) + :data:`LAUNCH_SECONDS`; a kernel that spills
  runs at half rate.

Its limits (``docs/cuda.md``): no cache, bank-conflict or instruction-mix
model, so SIMT kernels are ranked only by padding, waves and occupancy; peaks
are the data-sheet figures, which ``mma.sync`` on sm_90 does not reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dcmlir.cost_model.terms import _grid, _pad_parts, _space, pad_tiles
from dcmlir.space import Candidate, CudaCandidate, CudaMmaCandidate
from dcmlir.space.occupancy import occupancy
from dcmlir.target import CudaTarget
from dcmlir.workload import Workload

__all__ = [
    "GPU_PEAKS",
    "HIDING_WARPS",
    "L2_OVER_DRAM",
    "LAUNCH_SECONDS",
    "GpuPeaks",
    "predict_seconds",
]


@dataclass(frozen=True)
class GpuPeaks:
    """Published peaks: FP32 (non-tensor) and dense FP16/BF16 tensor FLOP/s, DRAM bytes/s."""

    fp32_flops: float
    tensor_flops: float
    dram_bytes_per_s: float


GPU_PEAKS = {
    "t4": GpuPeaks(8.1e12, 65e12, 320e9),
    "a100": GpuPeaks(19.5e12, 312e12, 2039e9),  # A100 SXM4 80 GB
    "h100": GpuPeaks(67e12, 989e12, 3350e9),  # H100 SXM5
    "h200": GpuPeaks(67e12, 989e12, 4800e9),
}
"""By GPU name (:data:`dcmlir.target.KNOWN_GPUS`); NVIDIA's data sheets, dense figures."""
HIDING_WARPS = {"simt": 16, "mma": 8}
"""Resident warps per SM from which an SM is taken to run at its peak (latency hidden)."""
L2_OVER_DRAM = 3.0
"""L2 bandwidth over DRAM bandwidth (not on the data sheets; the A100 whitepaper's
5120 bytes/clock at 1.41 GHz is 7.2 TB/s, 3.5x its DRAM): an assumption of the model."""
LAUNCH_SECONDS = 3e-6
"""A kernel launch and its tail, the same for every kernel."""
_TYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def _bytes_moved(workload: Workload, space: tuple[int, ...]) -> int:
    """Each operand once at its element size: the DRAM traffic a perfect cache would leave."""
    total = 0
    for operand in range(3):
        extents = [space[loop] for loop in workload.operand_loops[operand]]
        total += math.prod(extents) * _TYPE_BYTES.get(workload.element_types[operand], 4)
    return total


def predict_seconds(
    workload: Workload, candidate: Candidate, shape: tuple[int, ...], target: CudaTarget
) -> float:
    """The model's time of ``candidate`` on ``shape`` (inf where it cannot launch).

    ``candidate`` carries its real figures (``with_figures``) where they were read;
    IREE's default has no tile to model: it is not priced (inf).
    """
    if not isinstance(candidate, CudaCandidate | CudaMmaCandidate):
        return math.inf
    peaks = GPU_PEAKS.get(target.gpu)
    if peaks is None:
        raise ValueError(
            f"no published peaks for GPU '{target.gpu}' (known: {', '.join(GPU_PEAKS)})"
        )
    space = _space(workload, shape)
    tiles = pad_tiles(workload, candidate)
    assert tiles is not None
    _, computed = _pad_parts(space, tiles)
    grid = _grid(workload, space, candidate.levels(workload).workgroup)
    use = occupancy(
        target, candidate.threads, candidate.registers_per_thread(), candidate.smem_bytes()
    )
    if use.blocks_per_sm == 0 or grid == 0:
        return math.inf
    tensor = isinstance(candidate, CudaMmaCandidate)
    peak_per_sm = (peaks.tensor_flops if tensor else peaks.fp32_flops) / target.sm_count
    hiding = HIDING_WARPS["mma" if tensor else "simt"]
    warps = candidate.threads // target.warp_size
    block_flops = 2 * computed / grid

    def wave_seconds(blocks: int) -> float:
        """The busiest SM of a wave with ``blocks`` blocks on it."""
        rate = peak_per_sm * min(1.0, blocks * warps / hiding)
        return blocks * block_flops / rate

    per_wave = use.blocks_per_sm * target.sm_count
    full, rest = divmod(grid, per_wave)
    compute = full * wave_seconds(use.blocks_per_sm)
    if rest:
        compute += wave_seconds(-(-rest // target.sm_count))
    figures = candidate.figures
    if figures is not None and figures.spill_bytes:
        compute *= 2.0
    dram = _bytes_moved(workload, space) / peaks.dram_bytes_per_s
    loaded = grid * _tile_bytes_per_block(workload, candidate, computed // grid)
    l2 = loaded / (L2_OVER_DRAM * peaks.dram_bytes_per_s)
    return max(compute, dram, l2) + LAUNCH_SECONDS


def _tile_bytes_per_block(
    workload: Workload, candidate: CudaCandidate | CudaMmaCandidate, block_points: int
) -> int:
    """Operand bytes one block loads: its A and B panels over the whole (padded) K."""
    tile = candidate.workgroup_m * candidate.workgroup_n
    depth = block_points // tile  # padded K (times the batch tile of 1)
    element = _TYPE_BYTES.get(workload.element_types[0], 4)
    return (candidate.workgroup_m + candidate.workgroup_n) * depth * element
