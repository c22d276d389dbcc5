"""The Builder: compile many variants of one workload per ``iree-compile`` call.

Variants are grouped into chunks in a fixed order, one function per variant in
one kernel module, so compile start-up is paid once per chunk and a repeated
run produces byte-identical modules (cache hits, nothing compiled). A chunk
that fails is split in halves until each failing variant stands alone; that
variant becomes a failed build with IREE's error, never an abort.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dcmlir.build.code_layout import code_flags
from dcmlir.build.compiler import (
    BuildError,
    Compiler,
    HasCompileFlags,
    build,
    default_cache,
    scratch_directory,
)
from dcmlir.build.routes import ConfigRoute, Route, flag_group
from dcmlir.codegen.kernel import kernel_module_text
from dcmlir.ir.iree import run_compile
from dcmlir.space import Candidate
from dcmlir.workload import Workload

DEFAULT_CHUNK = 48
COMPILE_FLOOR_S = 60.0
COMPILE_PER_VARIANT_S = 10.0
"""The time limit of one compile: this floor plus this much per variant in the chunk
(~0.25 s per variant is usual on 2 cores), capped by ``Builder(timeout=...)``. Scaled so
that a variant that hangs iree-compile costs a few minutes of bisection, not an hour."""


@dataclass(frozen=True)
class BuiltVariant:
    """The outcome of building one candidate: a function in a module file, or an error."""

    candidate: Candidate
    function: str
    vmfb_path: str | None
    error: str | None
    seconds: float  # this variant's share of its chunk's compile time (0 when cached)
    cached: bool

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class BuildStats:
    compiles: int = 0
    cached: int = 0
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)


class Builder:
    """Compiles candidates of a workload for a target through one route."""

    def __init__(
        self,
        target: str | HasCompileFlags,
        route: Route | None = None,
        *,
        workdir: Path | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        timeout: float | None = 600.0,
        module_attributes: str = "",
        compiler: Compiler = run_compile,
        extra_flags: Sequence[str] = (),
    ) -> None:
        self.target = target
        self.extra_flags = tuple(extra_flags)  # after the route's own, e.g. a dispatch repeat
        self.compiler = compiler  # runs iree-compile (a seam: a test holds or fails it)
        self.route = route if route is not None else ConfigRoute()
        self._tempdir = None if workdir is not None else scratch_directory("build")
        self.workdir = workdir if workdir is not None else Path(self._tempdir.name)  # type: ignore[union-attr]
        self.chunk_size = max(1, chunk_size)
        self.timeout = timeout  # seconds per compile at most (see COMPILE_FLOOR_S)
        self.module_attributes = module_attributes
        self.stats = BuildStats()

    def time_limit(self, variants: int) -> float | None:
        """Seconds one compile of ``variants`` variants may take before it counts as a hang."""
        if self.timeout is None:
            return None
        return min(self.timeout, COMPILE_FLOOR_S + COMPILE_PER_VARIANT_S * variants)

    def close(self) -> None:
        """Remove the module files (when the builder made its own working directory)."""
        if self._tempdir is not None:
            self._tempdir.cleanup()

    def __enter__(self) -> Builder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def build(
        self,
        workload: Workload,
        candidates: Sequence[Candidate],
        progress: Callable[[int, int], None] | None = None,
    ) -> list[BuiltVariant]:
        """Build every candidate; the result is in candidate order, failures included."""
        named = [(f"v{index}", candidate) for index, candidate in enumerate(candidates)]
        results: dict[str, BuiltVariant] = {}
        chunks = [
            group[start : start + self.chunk_size]
            for group in _flag_groups(named)
            for start in range(0, len(group), self.chunk_size)
        ]
        for chunk in chunks:
            for built in self._build_chunk(workload, chunk):
                results[built.function] = built
            if progress is not None:
                progress(len(results), len(named))
        return [results[name] for name, _ in named]

    def _build_chunk(
        self, workload: Workload, chunk: Sequence[tuple[str, Candidate]]
    ) -> list[BuiltVariant]:
        try:
            return self._compile(workload, chunk)
        except BuildError as err:
            if len(chunk) == 1:
                ((name, candidate),) = chunk
                self.stats.failed.append(candidate.key())
                return [BuiltVariant(candidate, name, None, f"build: {err}", 0.0, False)]
        half = len(chunk) // 2
        return self._build_chunk(workload, chunk[:half]) + self._build_chunk(workload, chunk[half:])

    def _compile(
        self, workload: Workload, chunk: Sequence[tuple[str, Candidate]]
    ) -> list[BuiltVariant]:
        try:
            variants = [self.route.variant(workload, candidate, name) for name, candidate in chunk]
            request = self.route.request(workload, chunk, self.workdir)
        except ValueError as err:  # a candidate this route cannot express: a failed build
            raise BuildError(f"{self.route.name} route: {err}") from None
        attributes = ", ".join(a for a in (self.module_attributes, request.module_attributes) if a)
        try:
            text = kernel_module_text(workload, variants, attributes)
        except ValueError as err:  # an attribute that does not parse: a failed build
            raise BuildError(str(err)) from None
        start = time.perf_counter()
        result = build(
            text,
            self.target,
            (*request.flags, *code_flags(self.target), *self.extra_flags),
            source_name=f"{workload.key}.mlir",
            timeout=self.time_limit(len(chunk)),
            uncached_flags=request.uncached_flags,
            compiler=self.compiler,
        )
        elapsed = time.perf_counter() - start
        problems = {} if result.cached else self.route.verify(result, chunk, self.workdir)
        if problems:
            default_cache().remove(result.key)
        path = self.workdir / f"{result.key}.vmfb"
        path.write_bytes(result.vmfb)
        self.stats.compiles += 0 if result.cached else 1
        self.stats.cached += 1 if result.cached else 0
        self.stats.seconds += 0.0 if result.cached else elapsed
        share = 0.0 if result.cached else elapsed / len(chunk)
        built = []
        for name, candidate in chunk:
            error = problems.get(name)
            if error is not None:
                self.stats.failed.append(candidate.key())
            built.append(
                BuiltVariant(
                    candidate,
                    name,
                    str(path) if error is None else None,
                    f"build: {error}" if error else None,
                    share,
                    result.cached,
                )
            )
        return built


def _flag_groups(
    named: Sequence[tuple[str, Candidate]],
) -> list[list[tuple[str, Candidate]]]:
    """``named`` split by :func:`~dcmlir.build.routes.flag_group`, each in its order."""
    groups: dict[int, list[tuple[str, Candidate]]] = {}
    for item in named:
        groups.setdefault(flag_group(item[1]), []).append(item)
    return [groups[key] for key in sorted(groups)]
