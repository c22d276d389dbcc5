"""The micro-kernel space: candidates derived from a target's limits only, never from shapes.

Read in data-flow order: :mod:`~dcmlir.space.candidate` (what every candidate
shares, IREE's default first), :mod:`~dcmlir.space.cpu` and
:mod:`~dcmlir.space.cuda` (each target's kernels and menu),
:mod:`~dcmlir.space.packed` (the data-tiled family of projections), then
:mod:`~dcmlir.space.kinds` (every kind together: a target's space, keys, JSON).
Import from here: ``from dcmlir.space import space_for``.
"""

from dcmlir.space.candidate import (
    CandidateError,
    DefaultCandidate,
    TileLevels,
    codegen_order,
    per_loop,
)
from dcmlir.space.cpu import CPU_REFERENCE_DEPTH, CpuCandidate, cpu_space
from dcmlir.space.cuda import CudaCandidate, cuda_space
from dcmlir.space.cuda_mma import CudaMmaCandidate, cuda_mma_space, mma_problem
from dcmlir.space.exact import ExactCandidate
from dcmlir.space.kinds import (
    Candidate,
    candidate_from_json,
    candidate_from_key,
    select_candidates,
    space_for,
    workload_space,
)
from dcmlir.space.packed import (
    MMT4D_M0,
    MMT4D_ONE_TILE_M0,
    PACKED_M0,
    DataTiledCandidate,
    Mmt4dCandidate,
    OneTileMmt4dCandidate,
    PackedCandidate,
    PackedFamily,
    PackedWeightCandidate,
    data_tiling_m0,
    data_tiling_problem,
    mmt4d_space,
    packed_space,
    packing_problem,
)

__all__ = [
    "CPU_REFERENCE_DEPTH",
    "MMT4D_M0",
    "MMT4D_ONE_TILE_M0",
    "PACKED_M0",
    "Candidate",
    "CandidateError",
    "CpuCandidate",
    "CudaCandidate",
    "CudaMmaCandidate",
    "DataTiledCandidate",
    "DefaultCandidate",
    "ExactCandidate",
    "Mmt4dCandidate",
    "OneTileMmt4dCandidate",
    "PackedCandidate",
    "PackedFamily",
    "PackedWeightCandidate",
    "TileLevels",
    "candidate_from_json",
    "candidate_from_key",
    "codegen_order",
    "cpu_space",
    "cuda_mma_space",
    "cuda_space",
    "data_tiling_m0",
    "data_tiling_problem",
    "mma_problem",
    "mmt4d_space",
    "packed_space",
    "packing_problem",
    "per_loop",
    "select_candidates",
    "space_for",
    "workload_space",
]
