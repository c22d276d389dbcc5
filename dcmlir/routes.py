"""Lowering routes: how a micro-kernel candidate reaches IREE's codegen.

``config`` attaches the candidate's tile sizes as an IREE ``compilation_info``
on the op, and IREE's own pipeline lowers it. ``td`` hands IREE a
transform-dialect codegen library built in Python (see
:mod:`dcmlir.codegen_library`). Both build every candidate kind; the faster
on the benchmark in docs/benchmarks.md is the default.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dcmlir.builder import BuildRequest, Candidate
from dcmlir.kernel import KernelVariant
from dcmlir.workload import Workload


class ConfigRoute:
    """Tile sizes as ``compilation_info``; IREE's default candidate carries nothing."""

    name = "config"

    def variant(self, workload: Workload, candidate: Candidate, function: str) -> KernelVariant:
        attribute = candidate.compilation_info(workload)  # type: ignore[attr-defined]
        if attribute is None:
            return KernelVariant(function)
        return KernelVariant(function, {"compilation_info": attribute})

    def request(
        self, workload: Workload, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> BuildRequest:
        return BuildRequest()

    def verify(
        self, log: str, chunk: Sequence[tuple[str, Candidate]], workdir: Path
    ) -> dict[str, str]:
        return {}


def route_named(name: str) -> ConfigRoute:
    """The route for ``--route NAME``."""
    if name == "config":
        return ConfigRoute()
    if name == "td":
        from dcmlir.codegen_library import TransformLibraryRoute

        return TransformLibraryRoute()
    raise ValueError(f"unknown route '{name}' (known: config, td)")
