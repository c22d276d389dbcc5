"""The packed forms of one op's dispatch branches, and the weight they share.

A dispatch (``dcmlir-emit-dispatch``) may run kernels that read the weight packed: the
encoded ones (IREE's data-tiling encodings, :mod:`dcmlir.codegen.packed`) and the
explicit mmt4d ones (:mod:`dcmlir.codegen.mmt4d`). When the weight is a constant it is
packed once, before the cascade, in each layout the branches read (IREE hoists it out of
the call); every branch then builds its own form on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dcmlir.codegen.mmt4d import explicit_mmt4d, pack_weight
from dcmlir.codegen.packed import Dims, encode_weight, encoded_contraction
from dcmlir.ir.mlir import ir
from dcmlir.space import Mmt4dCandidate
from dcmlir.workload import Workload

__all__ = ["PackedBranch", "PackedForms"]


@dataclass(frozen=True)
class PackedBranch:
    """The builder of one branch's packed contraction (it returns the op whose result is
    the contraction's); ``region``: the group goes in one ``flow.dispatch.region`` (the
    encodings), else IREE forms the dispatches (explicit pack, mmt4d, unpack + consumers)."""

    build: Callable[[], ir.Operation]
    region: bool = True


@dataclass(frozen=True)
class PackedForms:
    """Kernel index -> M's iteration size of the encoded kernels (None: ``?``), kernel
    index -> the explicit kernels, and the weights packed before the cascade."""

    op: ir.Operation
    workload: Workload
    dims: Dims
    encoded: Mapping[int, int | None]
    explicit: Mapping[int, Mmt4dCandidate]
    weight: ir.Value | None = None  # encoded once, for the encoded kernels
    packed_weights: Mapping[int, ir.Value] = field(default_factory=dict)  # N0 -> weight
    m_bound: int | None = None  # the top of M's tuned range (the explicit kernels' config)

    @staticmethod
    def of(
        op: ir.Operation,
        workload: Workload,
        dims: Dims,
        encoded: Mapping[int, int | None],
        explicit: Mapping[int, Mmt4dCandidate],
        packs_weight: bool,
        m_bound: int | None = None,
    ) -> PackedForms:
        """The forms, writing the weight's packs at the insertion point when ``packs_weight``
        (a constant weight; else each branch packs it, on every call)."""
        if not packs_weight:
            return PackedForms(op, workload, dims, encoded, explicit, m_bound=m_bound)
        weight = encode_weight(op, workload, dims) if encoded else None
        widths = sorted({candidate.n0 for candidate in explicit.values()})
        packed = {n0: pack_weight(op, workload, n0) for n0 in widths}
        return PackedForms(op, workload, dims, encoded, explicit, weight, packed, m_bound)

    def branch(self, kernel: int, *, any_size: bool = False) -> PackedBranch | None:
        """Kernel ``kernel``'s packed form, or None when it is not packed; ``any_size``: an
        encoded kernel gets M's iteration size ``?`` (valid for every M), not its bound."""
        if kernel in self.explicit:
            return self._explicit(self.explicit[kernel])
        if kernel not in self.encoded:
            return None
        size = None if any_size else self.encoded[kernel]
        op, workload, dims, weight = self.op, self.workload, self.dims, self.weight
        return PackedBranch(lambda: encoded_contraction(op, workload, dims, size, weight))

    def _explicit(self, candidate: Mmt4dCandidate) -> PackedBranch:
        op, workload, dims = self.op, self.workload, self.dims

        def build() -> ir.Operation:
            weight = self.packed_weights.get(candidate.n0)
            if weight is None:
                weight = pack_weight(op, workload, candidate.n0)
            return explicit_mmt4d(
                op, workload, dims, candidate.m0, candidate.n0, weight, self.m_bound
            )

        return PackedBranch(build, region=False)
