"""The packed (data-tiled) micro-kernels: :class:`PackedCandidate` and the packed family.

IREE's data tiling (``--iree-opt-data-tiling``) packs a projection's operands into
tiles and runs ``linalg.mmt4d`` on them (its hand-written ukernels on a CPU); for a
dynamic M it always packs with its widest M tile, which leaves most of the time on
the table at small M. Here the inner tile ``M0 x N0 x K0`` is the micro-kernel, and
the search picks ``M0`` per shape: a narrow one at small T, a wide one at large T.
The weights are packed once with ``N0 x K0`` (shared by every packed kernel of a
workload, hoisted out of the call because the weight is a constant), the
activations are packed per call with ``M0 x K0`` (padded to a multiple of ``M0``).
docs/design.md section 12 tells the whole story.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dcmlir.shapes import ceil_div
from dcmlir.space.candidate import IreeTiles, TileLevels, check_sizes, per_loop
from dcmlir.target import CpuTarget, Target
from dcmlir.workload import BATCH, K, M, N, Workload

__all__ = [
    "MMT4D_M0",
    "MMT4D_ONE_TILE_M0",
    "PACKED_LAYOUTS",
    "PACKED_M0",
    "DataTiledCandidate",
    "Mmt4dCandidate",
    "OneTileMmt4dCandidate",
    "PackedCandidate",
    "PackedFamily",
    "PackedWeightCandidate",
    "data_tiling_m0",
    "data_tiling_problem",
    "mmt4d_space",
    "packed_space",
    "packing_problem",
]

PACKED_M0 = (1, 2, 4, 8, 16)
"""Rows of the packed activation tile: the mmt4d ukernels' M0 for f32 on x86 and Arm."""

PACKED_K0 = 1
"""Depth of a packed tile: 1 for f32 (the ukernels' f32 tiles are outer products)."""

PACKED_LAYOUTS = ("mk,kn->mn", "mk,nk->mn")
"""The projections the family packs: ``x @ W`` and ``x @ W^T`` (torch's ``Linear``)."""


def packing_problem(workload: Workload) -> str | None:
    """Why ``workload`` cannot run packed kernels, or None when it can.

    The family is for projections: one dynamic M loop, static N and K, f32, and a
    weight operand that is a constant of the program (else packing it would run on
    every call, which is not what was measured).
    """
    if workload.layout not in PACKED_LAYOUTS:
        return f"layout {workload.layout} is not a projection ({' or '.join(PACKED_LAYOUTS)})"
    if set(workload.element_types) != {"f32"}:
        return f"element types {','.join(workload.element_types)}: only f32 is packed"
    if [d.role for d in workload.dynamic_dims] != [M]:
        return "only M may be dynamic"
    if 1 not in workload.constant_operands:
        return "the weight operand is not a constant (it would be packed on every call)"
    return None


@dataclass(frozen=True)
class _PackedTile:
    """What both packed families share: an ``M0 x N0 x K0`` tile, not a config on the op
    (the packed form is a different program), measured and modelled by its tile."""

    kind: ClassVar[str]

    m0: int
    n0: int
    k0: int = PACKED_K0

    def __post_init__(self) -> None:
        check_sizes(self, ("m0", "n0", "k0"))

    def problems(self, target: Target | None = None) -> list[str]:
        raise NotImplementedError

    def validate(self, target: Target | None = None) -> None:
        found = self.problems(target)
        if found:
            raise ValueError(f"{self.key()}: {'; '.join(found)}")

    def key(self) -> str:
        """``packed:m4n16k1``, ``mmt4d:m8n32k1``."""
        return f"{self.kind}:m{self.m0}n{self.n0}k{self.k0}"

    def levels(self, workload: Workload) -> TileLevels:
        """The packed tile as tile levels: what the pad term divides by (M0 rows, N0 columns)."""
        tile = per_loop(workload, {BATCH: 1, M: self.m0, N: self.n0})
        return TileLevels(workgroup=tile, vector=tile, reduction=per_loop(workload, {K: self.k0}))

    def compilation_info(self, workload: Workload) -> None:
        """No attribute on the op: the packed form is a different program, not a config."""
        return None

    def op_attributes(self, workload: Workload) -> str:
        return ""

    def features(self, target: Target | None = None) -> dict[str, float]:
        return {
            "is_default": 0.0,
            "is_packed": 1.0,
            "vector_m": float(self.m0),
            "vector_n": float(self.n0),
            "vector_k": float(self.k0),
            "vector_elements": float(self.m0 * self.n0),
        }

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "m0": self.m0, "n0": self.n0, "k0": self.k0}


@dataclass(frozen=True)
class PackedCandidate(_PackedTile):
    """``linalg.pack`` the activations ``M0 x K0``, ``linalg.mmt4d`` on weights packed
    ``N0 x K0`` once, ``linalg.unpack``: the mmt4d's configuration is IREE's own (its
    ukernel where the target has one)."""

    kind: ClassVar[str] = "packed"

    def problems(self, target: Target | None = None) -> list[str]:
        if target is None:
            return []
        if not isinstance(target, CpuTarget):
            return [f"packed kernels are built for llvm-cpu only, not {target.backend}"]
        if self.n0 != target.lanes:
            return [f"n0={self.n0} is not the target's {target.lanes} f32 lanes"]
        return []


def packed_space(target: CpuTarget) -> list[PackedCandidate]:
    """One packed kernel per M0 of :data:`PACKED_M0`, N0 the target's f32 lanes."""
    return [PackedCandidate(m0, target.lanes) for m0 in PACKED_M0]


MMT4D_M0 = (1, 2, 4, 8, 12, 14)
"""Rows of an explicit mmt4d tile, where the target's registers hold its accumulators,
its weight vectors and the broadcast (:func:`mmt4d_space`). 12 and 14 fill what 8 leaves:
at T = 9..14 one 12- or 14-row tile runs where 8 runs two and data tiling's 16-row tile
pads; 0.66-0.88 of data tiling's time there (benchmarks/mmt4d_tiles.py, design.md §12)."""


@dataclass(frozen=True)
class Mmt4dCandidate(_PackedTile):
    """``linalg.pack`` / ``linalg.mmt4d`` / ``linalg.unpack`` written with this tile
    (:mod:`dcmlir.codegen.mmt4d`): ``N0`` twice the f32 lanes, a tile no ukernel has, so
    IREE's codegen lowers it. Unlike :class:`PackedCandidate` it serves every M (its
    time steps every ``M0`` rows); the weight is packed once, ``N0 x 1``."""

    kind: ClassVar[str] = "mmt4d"

    def problems(self, target: Target | None = None) -> list[str]:
        if target is None:
            return []
        if not isinstance(target, CpuTarget):
            return [f"mmt4d kernels are built for llvm-cpu only, not {target.backend}"]
        found = []
        if self.n0 % target.lanes:
            found.append(f"n0={self.n0} is not a multiple of the target's {target.lanes} lanes")
        weight_vectors = ceil_div(self.n0, target.lanes)
        accumulators = self.m0 * weight_vectors
        needed = accumulators + weight_vectors + 1  # + one step's weight, + the broadcast
        if needed > target.vector_registers:
            found.append(
                f"{accumulators} accumulator registers: with {weight_vectors} weight vectors "
                f"and the broadcast, more than the target's {target.vector_registers}"
            )
        return found


MMT4D_ONE_TILE_M0 = (3, 5, 6, 7, 9, 10, 11, 13)
"""Rows of the explicit tiles searched as one tile only (:class:`OneTileMmt4dCandidate`),
so that every M up to 14 has a tile of exactly its rows: a tile's time is the rows it
computes from the first on (one 2/3/4/5/8-row tile at T = 1: 0.17/0.21/0.26/0.32/0.49 of
data tiling's time on a Zen 4), so at T = 5..7 one tile of T rows takes two thirds of the
2-row tiles' or the 8-row tile's time, and at T = 9..11 the 12-row tile pads what
onnxruntime (rows as they come) does not. Searched as tiles of every M they cost the 12-
and 14-row tiles the measurements that held T = 13..32 in a 12-layer Llama (design.md
section 12). Past one tile, each is searched where its tiles pad least (two 9-row tiles
at T = 17, 18: :meth:`dcmlir.search.packed_rows.PackedRows.serves`)."""


@dataclass(frozen=True)
class OneTileMmt4dCandidate(Mmt4dCandidate):
    """An explicit mmt4d tile the search gives the M up to its ``M0``, where it is one tile
    of flat time, and past it only the M where its tiles pad at least 5% less than every
    tile of every M: one measurement estimates it (k tiles: k times that), and it never
    competes where its rows tie theirs (the program is :class:`Mmt4dCandidate`'s and is
    right at every M)."""

    kind: ClassVar[str] = "mmt4d-one"


def mmt4d_space(target: CpuTarget) -> list[Mmt4dCandidate]:
    """One explicit kernel per M0 of :data:`MMT4D_M0` with ``N0`` twice the f32 lanes, where
    a step's registers fit (AVX-512: up to 14 x 32; AVX2: 4 x 16), then the one-tile kernels
    of :data:`MMT4D_ONE_TILE_M0` that fit. 16 x 32 needs all 32 registers for its
    accumulators: IREE 3.13 gave it wrong results once, and with dcmlir's configuration it
    ran 1.0-1.26x data tiling's time."""
    n0 = 2 * target.lanes
    found = [Mmt4dCandidate(m0, n0) for m0 in MMT4D_M0]
    found += [OneTileMmt4dCandidate(m0, n0) for m0 in MMT4D_ONE_TILE_M0]
    return [c for c in found if not c.problems(target)]


def data_tiling_m0(lanes: int) -> int:
    """The M tile IREE's data tiling packs f32 activations with on a CPU of ``lanes`` f32
    lanes: 16 rows with 512-bit vectors, 8 with narrower ones (its ukernels' f32 tiles:
    16 x 16 on AVX-512, 8 x 8 on AVX2 and Arm). An AVX2 Zen 3 steps at T = 8 -> 9 and
    16 -> 17 (docs/design.md section 12)."""
    return 16 if lanes >= 16 else 8


def data_tiling_problem(workload: Workload) -> str | None:
    """Why IREE's data tiling is not a candidate of ``workload``, or None when it is.

    Any f32 contraction: where both inputs change per call (attention's batch matmuls)
    packing them is part of every call; a constant weight is packed once, outside it,
    and this kernel is then the widest of the packed family.
    """
    if set(workload.element_types) != {"f32"}:
        return f"element types {','.join(workload.element_types)}: only f32 is data-tiled"
    return None


@dataclass(frozen=True)
class DataTiledCandidate(IreeTiles):
    """IREE's own data tiling of this one op (``--iree-opt-data-tiling``'s encodings, its
    tile for a large M), chosen per shape like any kernel: operands packed in the
    dispatch, ``mmt4d`` (batch ``mmt4d``) ukernels, unpacked."""

    kind: ClassVar[str] = "datatiled"

    def key(self) -> str:
        return "datatiled"

    def problems(self, target: Target | None = None) -> list[str]:
        if target is None or isinstance(target, CpuTarget):
            return []
        return [f"data-tiled kernels are built for llvm-cpu only, not {target.backend}"]

    def validate(self, target: Target | None = None) -> None:
        found = self.problems(target)
        if found:
            raise ValueError(f"{self.key()}: {'; '.join(found)}")

    def features(self, target: Target | None = None) -> dict[str, float]:
        return {"is_default": 0.0, "is_data_tiled": 1.0}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}


PackedFamily = PackedCandidate | DataTiledCandidate
"""The packed family (docs/design.md section 12): kernels in data tiling's weight layout,
IREE's own build of the op among them."""

PackedWeightCandidate = PackedCandidate | DataTiledCandidate | Mmt4dCandidate
"""Every kernel that packs its weight: the packed family and the explicit mmt4d family."""
