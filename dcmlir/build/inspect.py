"""Real resources of CUDA candidates, read from the build: no GPU, no estimates.

The candidates of a workload are compiled together (one ``iree-compile``, one
executable per kernel); ``ptxas`` assembles each kernel's PTX for the arch
(registers, spills, stack), its LLVM IR gives the shared memory IREE requests
at launch, ``.maxntid`` the block size, and the SASS (``nvdisasm``) counts
tensor-core instructions. The figures are cached per IREE version, ptxas release, arch,
workload and candidate in ``cuda-figures.json`` of the build cache directory
(``$DCMLIR_CACHE_DIR``, else ``~/.cache/dcmlir``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dcmlir.build.compiler import default_cache_dir
from dcmlir.build.routes import ConfigRoute
from dcmlir.codegen.kernel import kernel_module_text
from dcmlir.cuda_tools import (
    assemble,
    find_tool,
    has_tensor_core_ptx,
    sass_opcodes,
    tensor_core_count,
    tool_version,
)
from dcmlir.ir.iree import run_compile, versions
from dcmlir.ptx import ptx_entries, static_shared_bytes
from dcmlir.space import Candidate
from dcmlir.space.occupancy import KernelFigures, Occupancy, occupancy
from dcmlir.target import CudaTarget
from dcmlir.workload import Workload

__all__ = [
    "FIGURE_SOURCES",
    "FiguresCache",
    "KernelReport",
    "attach_figures",
    "inspect_kernels",
    "with_cached_figures",
]

FIGURES_FILE = "cuda-figures.json"
FIGURE_SOURCES = {
    "block": "PTX .maxntid",
    "registers": "ptxas -v",
    "spills": "ptxas -v",
    "smem": "the kernel's LLVM IR from IREE (addrspace 3 arrays)",
    "blocks/SM": "occupancy rules on ptxas registers + smem",
    "tensor-core": "SASS (nvdisasm): HMMA/HGMMA, where the PTX has mma",
}
"""Where each figure of :class:`KernelReport` comes from, for the printed table."""


@dataclass(frozen=True)
class KernelReport:
    """One candidate's real figures and occupancy, or why it did not build."""

    candidate: Candidate
    figures: KernelFigures | None
    occupancy: Occupancy | None
    error: str | None = None
    cached: bool = False


class FiguresCache:
    """Real figures by (IREE, ptxas, arch, workload, candidate), in one JSON file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_cache_dir() / FIGURES_FILE
        self._entries: dict[str, dict[str, int]] | None = None

    def _load(self) -> dict[str, dict[str, int]]:
        if self._entries is None:
            try:
                self._entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._entries = {}  # absent or damaged: rebuilt from the builds
        return self._entries

    @staticmethod
    def key(target: CudaTarget, workload: Workload, candidate: Candidate) -> str:
        iree = versions()["iree"]
        return (
            f"{iree}|ptxas {tool_version('ptxas')}|{target.arch}|{workload.key}|{candidate.key()}"
        )

    def get(self, key: str) -> KernelFigures | None:
        found = self._load().get(key)
        return KernelFigures.from_json(found) if found is not None else None

    def put(self, entries: dict[str, KernelFigures]) -> None:
        """Add entries and write the file whole (atomically: a rename)."""
        if not entries:
            return
        data = self._load()
        data.update({key: figures.to_json() for key, figures in entries.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(data, indent=0, sort_keys=True))
        scratch.replace(self.path)


def _compile_figures(
    workload: Workload, target: CudaTarget, named: Sequence[tuple[str, Candidate]]
) -> dict[str, KernelFigures | str]:
    """Build ``named`` in one compile; each name's figures, or its error (halves on failure).

    One executable per kernel (``--iree-hal-link-executables=false``): its own PTX
    and its own LLVM IR, whose ``addrspace(3)`` arrays are its shared memory.
    """
    route = ConfigRoute()
    variants = [route.variant(workload, candidate, name) for name, candidate in named]
    text = kernel_module_text(workload, variants, target.module_attributes())
    with tempfile.TemporaryDirectory(prefix="dcmlir-inspect-") as scratch:
        dumps = Path(scratch)
        flags = (
            *target.compile_flags(),
            "--iree-hal-link-executables=false",
            f"--iree-hal-dump-executable-intermediates-to={dumps}",
            f"--iree-hal-dump-executable-binaries-to={dumps}",
        )
        result = run_compile(text, flags)
        if result.returncode != 0:
            if len(named) == 1:
                lines = [line for line in result.log.splitlines() if "error" in line]
                return {named[0][0]: (lines or ["iree-compile failed"])[0].strip()}
            half = len(named) // 2
            return {
                **_compile_figures(workload, target, named[:half]),
                **_compile_figures(workload, target, named[half:]),
            }
        return {name: _kernel_figures(dumps, name, target.arch) for name, _ in named}


def _kernel_figures(dumps: Path, name: str, arch: str) -> KernelFigures | str:
    """One kernel's figures from its dumped PTX and LLVM IR.

    The SASS is read (``nvdisasm``, ~0.5 s a kernel) only where the PTX holds a
    tensor-core instruction: ptxas never makes one out of scalar FMAs.
    """
    ptx_files = sorted(dumps.glob(f"module_{name}_dispatch_*.ptx"))
    if len(ptx_files) != 1:
        return f"the build has {len(ptx_files)} kernels, not one"
    ptx = ptx_files[0].read_text()
    (entry,) = ptx_entries(ptx)
    try:
        reported, cubin = assemble(ptx, arch)
    except ValueError as err:
        return str(err)
    figures = reported.get(entry.name)
    if figures is None:
        return f"ptxas reported nothing for {entry.name}"
    tensor_core = 0
    if has_tensor_core_ptx(ptx):
        tensor_core = tensor_core_count(sass_opcodes(cubin).get(entry.name, Counter()))
    linked = sorted(dumps.glob(f"module_{name}_dispatch_*.linked.ll"))
    size = entry.maxntid or (0, 0, 0)
    return KernelFigures(
        registers=figures.registers,
        smem_bytes=figures.static_smem_bytes
        + (static_shared_bytes(linked[0].read_text()) if linked else 0),
        threads=size[0] * size[1] * size[2],
        spill_bytes=figures.spill_store_bytes + figures.spill_load_bytes,
        stack_bytes=figures.stack_bytes,
        tensor_core_instructions=tensor_core,
    )


def inspect_kernels(
    workload: Workload,
    target: CudaTarget,
    candidates: Sequence[Candidate],
    cache: FiguresCache | None = None,
) -> list[KernelReport]:
    """Every candidate's real figures and blocks per SM, in candidate order; builds what
    the cache lacks in one compile."""
    cache = cache if cache is not None else FiguresCache()
    keys = [FiguresCache.key(target, workload, c) for c in candidates]
    known = {key: cache.get(key) for key in keys}
    pairs = enumerate(zip(candidates, keys, strict=True))
    missing = [(f"v{i}", c) for i, (c, k) in pairs if known[k] is None]
    built = _compile_figures(workload, target, missing) if missing else {}
    cache.put({keys[int(name[1:])]: f for name, f in built.items() if isinstance(f, KernelFigures)})
    reports = []
    for index, (candidate, key) in enumerate(zip(candidates, keys, strict=True)):
        figures = known[key] if known[key] is not None else built.get(f"v{index}")
        if isinstance(figures, str) or figures is None:
            reports.append(KernelReport(candidate, None, None, figures or "not built"))
            continue
        use = occupancy(target, figures.threads, figures.registers, figures.smem_bytes)
        reports.append(KernelReport(candidate, figures, use, None, known[key] is not None))
    return reports


def attach_figures(reports: Sequence[KernelReport]) -> list[Candidate]:
    """The candidates carrying their real figures (``with_figures``), where they have any."""
    found = []
    for report in reports:
        candidate = report.candidate
        if report.figures is not None and hasattr(candidate, "with_figures"):
            candidate = candidate.with_figures(report.figures)
        found.append(candidate)
    return found


def with_cached_figures(
    workload: Workload,
    target: CudaTarget,
    candidates: Sequence[Candidate],
    cache: FiguresCache | None = None,
) -> list[Candidate]:
    """The candidates with the real figures the cache holds (``dcmlir inspect`` or an
    offline plan filled it), the rest as they are; builds nothing. Without ptxas (the
    cache key names its release) nothing is attached."""
    if find_tool("ptxas") is None:
        return list(candidates)
    cache = cache if cache is not None else FiguresCache()
    found = []
    for candidate in candidates:
        figures = cache.get(FiguresCache.key(target, workload, candidate))
        if figures is not None and hasattr(candidate, "with_figures"):
            candidate = candidate.with_figures(figures)
        found.append(candidate)
    return found
