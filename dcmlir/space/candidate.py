"""What every candidate shares: IREE's default, the tile levels, the checks and helpers.

A candidate is stated in contraction roles (b, m, n, k) so one candidate serves
every workload of a kind; ``levels`` lays it onto one workload's loops and
``compilation_info`` renders the IREE attribute that builds it. The kinds of
candidates (:mod:`dcmlir.space.cpu`, :mod:`dcmlir.space.cuda`) build on this
module; :mod:`dcmlir.space.kinds` joins them. ``docs/space.md`` explains the
menus and the bounds.

Limits are checked at 4 bytes per element (f32, the widest supported element
type), so a candidate valid for a target is valid for every workload on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from dcmlir.target import Target
from dcmlir.workload import K, Workload

__all__ = [
    "ELEMENT_BYTES",
    "CandidateError",
    "DefaultCandidate",
    "IreeTiles",
    "TileLevels",
    "TiledCandidate",
    "balanced_split",
    "check_sizes",
    "codegen_order",
    "int_list",
    "is_power_of_two",
    "level_list",
    "per_loop",
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


def int_list(sizes: tuple[int, ...]) -> str:
    """Sizes as an MLIR integer list, the way IREE prints them back."""
    return f"[{', '.join(map(str, sizes))}]"


def level_list(workload: Workload, level: tuple[int, ...]) -> str:
    """One tile level as IREE prints it in a lowering config: codegen loop order, MLIR list."""
    return int_list(codegen_order(workload, level))


def check_sizes(obj: object, names: tuple[str, ...]) -> None:
    """Raise :class:`CandidateError` unless every named field is a positive integer."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CandidateError(
                f"{type(obj).__name__}.{name}={value!r} must be a positive integer"
            )


def balanced_split(repeats: int) -> tuple[int, int]:
    """``repeats`` (a power of two) as ``(a, b)``, ``a * b == repeats``, ``a`` = ``b`` or ``2b``."""
    a = 1 << math.ceil(math.log2(repeats) / 2)
    return a, repeats // a


def is_power_of_two(value: int) -> bool:
    """Menus only repeat a tile a power-of-two number of times."""
    return value > 0 and value & (value - 1) == 0


class TiledCandidate:
    """What the tiled kinds share: :meth:`validate` from ``problems``, the op's attributes."""

    def key(self) -> str:
        """The candidate's stable name; each kind defines it."""
        raise NotImplementedError

    def problems(self, target: Target | None = None) -> list[str]:
        """Every broken rule; each kind defines it."""
        raise NotImplementedError

    def compilation_info(self, workload: Workload) -> str:
        """The op's ``compilation_info``; each kind defines it."""
        raise NotImplementedError

    def validate(self, target: Target | None = None) -> None:
        """Raise :class:`CandidateError` listing every broken rule."""
        found = self.problems(target)
        if found:
            raise CandidateError(f"{self.key()}: {'; '.join(found)}")

    def op_attributes(self, workload: Workload) -> str:
        """The op's attribute dict carrying :meth:`compilation_info`."""
        return f"{{compilation_info = {self.compilation_info(workload)}}}"


# --- IREE's default ------------------------------------------------------------------------


class IreeTiles:
    """What the kinds whose tiles IREE chooses share (its default, its data tiling, its
    default on one static shape): no levels known here, no attribute on the op."""

    def levels(self, workload: Workload) -> None:
        """Unknown until IREE chooses them."""
        return None

    def compilation_info(self, workload: Workload) -> None:
        """No attribute: the op is left for IREE's heuristics."""
        return None

    def op_attributes(self, workload: Workload) -> str:
        return ""


@dataclass(frozen=True)
class DefaultCandidate(IreeTiles):
    """IREE's own lowering: no attribute, IREE picks tiles (with its ``cache_parallel`` level).

    Always the first candidate (docs/design.md section 2): a dispatch never loses to it.
    """

    kind: ClassVar[str] = "default"

    def key(self) -> str:
        return "default"

    def lowering_config(self, workload: Workload) -> None:
        return None

    def problems(self, target: Target | None = None) -> list[str]:
        return []

    def validate(self, target: Target | None = None) -> None:
        return None

    def features(self, target: Target | None = None) -> dict[str, float]:
        return {"is_default": 1.0}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}
