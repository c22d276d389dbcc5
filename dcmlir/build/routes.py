"""Lowering routes: how a micro-kernel candidate reaches IREE's codegen.

``config`` attaches the candidate's tile sizes as an IREE ``compilation_info``
on the op, and IREE's own pipeline lowers it. ``td`` hands IREE a
transform-dialect codegen library built in Python (see
:mod:`dcmlir.codegen.library`). Both build every candidate kind; the faster
on the benchmark in docs/benchmarks.md is the default.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dcmlir.build.compiler import Build, default_cache_dir
from dcmlir.build.td import td_flags, verify_td_build
from dcmlir.codegen.kernel import EncodedForm, KernelVariant, Mmt4dForm
from dcmlir.codegen.library import codegen_library, compilation_info
from dcmlir.codegen.mmt4d import MMT4D_KERNEL_FLAGS
from dcmlir.codegen.packed import ENCODED_KERNEL_FLAGS
from dcmlir.space import (
    Candidate,
    ExactCandidate,
    Mmt4dCandidate,
    PackedCandidate,
    PackedFamily,
    PackedWeightCandidate,
    packing_problem,
)
from dcmlir.workload import Workload


@dataclass(frozen=True)
class BuildRequest:
    """Everything route-specific about compiling one chunk of variants.

    ``flags`` are part of the build's cache key; ``uncached_flags`` (dump
    directories) are not.
    """

    flags: tuple[str, ...] = ()
    module_attributes: str = ""
    uncached_flags: tuple[str, ...] = ()


class Route(Protocol):
    """A lowering route: how a candidate becomes IR (and flags) IREE builds it from."""

    name: str

    def variant(self, workload: Workload, candidate: Candidate, function: str) -> KernelVariant:
        """The kernel function of one candidate: its name and attributes."""
        ...

    def request(
        self,
        workload: Workload,
        chunk: Sequence[tuple[str, Candidate]],
        workdir: Path,
    ) -> BuildRequest:
        """Extra flags/module attributes for one chunk (e.g. a transform library file)."""
        ...

    def verify(
        self, build: Build, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> dict[str, str]:
        """Variants (by function name) not really built as asked, with the reason.

        A build with any problem is removed from the cache, so the cache only
        ever holds builds that passed (and a cache hit needs no check).
        """
        ...


class ConfigRoute:
    """Tile sizes as ``compilation_info``; IREE's default candidate carries nothing."""

    name = "config"

    def variant(self, workload: Workload, candidate: Candidate, function: str) -> KernelVariant:
        if isinstance(candidate, PackedWeightCandidate):
            return packed_variant(candidate, function, packing_problem(workload) is None)
        if isinstance(candidate, ExactCandidate):
            return KernelVariant(function, exact=candidate.shape)
        attribute = candidate.compilation_info(workload)  # type: ignore[attr-defined]
        if attribute is None:
            return KernelVariant(function)
        return KernelVariant(function, {"compilation_info": attribute})

    def request(
        self, workload: Workload, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> BuildRequest:
        return BuildRequest(flags=encoded_flags(chunk))

    def verify(
        self, build: Build, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> dict[str, str]:
        return {}


class TransformLibraryRoute:
    """Each candidate lowered by its own transform-dialect sequence, all in one library.

    The op names its sequence through ``codegen_spec`` (see
    :mod:`dcmlir.codegen.library`); the library of a chunk lives in the build
    cache under its content hash, so the flags, and so the cache key, are the
    same on every run. IREE's default candidate carries nothing.
    """

    name = "td"

    def __init__(self) -> None:
        self._dumps: dict[tuple[str, ...], Path] = {}

    def variant(self, workload: Workload, candidate: Candidate, function: str) -> KernelVariant:
        if isinstance(candidate, PackedWeightCandidate):
            return packed_variant(candidate, function, packing_problem(workload) is None)
        if isinstance(candidate, ExactCandidate):
            return KernelVariant(function, exact=candidate.shape)
        levels = candidate.levels(workload)  # type: ignore[attr-defined]
        if levels is None:
            return KernelVariant(function)
        return KernelVariant(function, {"compilation_info": compilation_info(function, levels)})

    def request(
        self, workload: Workload, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> BuildRequest:
        tiled = [
            (name, workload, candidate.levels(workload))  # type: ignore[attr-defined]
            for name, candidate in chunk
            if not isinstance(candidate, PackedCandidate | Mmt4dCandidate)
            and candidate.levels(workload) is not None  # type: ignore[attr-defined]
        ]
        if not tiled:
            return BuildRequest()
        text = codegen_library(tiled)
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        library = default_cache_dir() / "td" / f"{digest}.mlir"
        library.parent.mkdir(parents=True, exist_ok=True)
        if not library.exists():
            library.write_text(text, encoding="utf-8")
        dumps = Path(tempfile.mkdtemp(prefix="td-dumps-", dir=workdir))
        self._dumps[tuple(name for name, _ in chunk)] = dumps
        flags = td_flags(library, dumps)
        keyed = tuple(f for f in flags if not f.startswith(_DUMP_FLAGS))
        return BuildRequest(
            flags=keyed + encoded_flags(chunk),
            uncached_flags=tuple(f for f in flags if f not in keyed),
        )

    def verify(
        self, build: Build, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> dict[str, str]:
        dumps = self._dumps.pop(tuple(name for name, _ in chunk), None)
        names = [
            name
            for name, candidate in chunk
            if not _is_default(candidate) and not isinstance(candidate, PackedWeightCandidate)
        ]
        if dumps is None or not names:
            return {}
        problems = verify_td_build(build.log, dumps, names)
        shutil.rmtree(dumps, ignore_errors=True)
        found: dict[str, str] = {}
        for problem in problems:
            named = [n for n in names if problem.startswith(f"@{n}:")]
            for name in named or names:  # a problem naming no variant fails them all
                found.setdefault(name, f"td route: {problem}")
        return found


_DUMP_FLAGS = (
    "--iree-hal-dump-executable-configurations-to=",
    "--mlir-print-ir-after=",
    "--mlir-print-ir-tree-dir=",
)


def packed_variant(
    candidate: PackedWeightCandidate,
    function: str,
    constant_weight: bool,
) -> KernelVariant:
    """A packed, data-tiled or explicit mmt4d kernel is its own program (the op on
    data-tiling encodings, or pack / mmt4d / unpack) on every route; a workload whose
    weight is a constant keeps it in the module."""
    if isinstance(candidate, Mmt4dCandidate):
        return KernelVariant(function, mmt4d=Mmt4dForm(candidate.m0, candidate.n0, constant_weight))
    m0 = candidate.m0 if isinstance(candidate, PackedCandidate) else None
    return KernelVariant(function, encoded=EncodedForm(m0, constant_weight))


def encoded_flags(chunk: Sequence[tuple[str, Candidate]]) -> tuple[str, ...]:
    """The flags IREE needs for a chunk with data-tiled or explicit mmt4d kernels (none for
    the others). The two never share a chunk (:func:`flag_group`): the mmt4d kernels turn
    IREE's ukernels off, which the encoded kernels are measured with."""
    flags: tuple[str, ...] = ()
    if any(isinstance(candidate, PackedFamily) for _, candidate in chunk):
        flags += ENCODED_KERNEL_FLAGS
    if any(isinstance(candidate, Mmt4dCandidate) for _, candidate in chunk):
        flags += MMT4D_KERNEL_FLAGS
    return flags


def flag_group(candidate: Candidate) -> int:
    """Candidates of different groups compile in different chunks: 0 for IREE's encodings
    (built with its ukernels), 1 for the rest (the mmt4d kernels build without them)."""
    return 0 if isinstance(candidate, PackedFamily) else 1


def _is_default(candidate: Candidate) -> bool:
    """IREE's own lowering, on the dynamic op or at one exact shape: no sequence of ours."""
    return candidate.key() == "default" or isinstance(candidate, ExactCandidate)


def route_named(name: str) -> ConfigRoute | TransformLibraryRoute:
    """The route for ``--route NAME``."""
    if name == "config":
        return ConfigRoute()
    if name == "td":
        return TransformLibraryRoute()
    raise ValueError(f"unknown route '{name}' (known: config, td)")
