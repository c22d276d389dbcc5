"""NVIDIA's ``ptxas`` and ``nvdisasm``: what a PTX kernel really costs on an arch, without a GPU.

IREE stops at PTX; the driver assembles it at load time. ``ptxas -v`` gives
the registers, spills, stack and barriers that load would give, and the
disassembled cubin (SASS) says which instructions run, tensor-core ones
included. Both come from the ``cuda-tools`` extra (``pip install
'dcmlir[cuda-tools]'``: NVIDIA's own wheels) or from ``PATH``.
Independent of :mod:`dcmlir.target`: it reads build outputs, not limits.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "INSTALL_HINT",
    "TENSOR_CORE_OPCODES",
    "CudaToolMissing",
    "PtxasFigures",
    "assemble",
    "find_tool",
    "has_tensor_core_ptx",
    "sass_opcodes",
    "tool_version",
]

INSTALL_HINT = "pip install 'dcmlir[cuda-tools]'"
TENSOR_CORE_OPCODES = ("HMMA", "HGMMA", "IMMA", "IGMMA", "BMMA", "DMMA")
"""SASS opcodes that run on tensor cores (``mma.sync`` -> HMMA, ``wgmma`` -> HGMMA)."""

_FUNCTION = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")
_SMEM = re.compile(r"(\d+) bytes smem")
_PTX_MMA = re.compile(r"^\s*(?:@!?%p\d+\s+)?(?:wg)?w?mma\.", re.M)
_SASS_SECTION = re.compile(r"^\s*\.section\s+\.text\.([\w$.]+),", re.M)
_SASS_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


class CudaToolMissing(RuntimeError):
    """``ptxas`` or ``nvdisasm`` is not installed; the message says how to install it."""


def find_tool(name: str) -> Path | None:
    """``name`` from NVIDIA's wheels in this Python's site-packages, else from ``PATH``."""
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if not nvidia.is_dir():
            continue
        for found in sorted(nvidia.glob(f"*/bin/{name}")):
            if found.is_file():
                return found
    on_path = shutil.which(name)
    return Path(on_path) if on_path else None


def _tool(name: str) -> Path:
    found = find_tool(name)
    if found is None:
        raise CudaToolMissing(f"{name} is not installed ({INSTALL_HINT})")
    return found


@functools.cache
def tool_version(name: str) -> str:
    """``release 12.9, V12.9.86``: the line of ``--version`` that names the release."""
    result = subprocess.run(
        [str(_tool(name)), "--version"], capture_output=True, text=True, check=False
    )
    for line in result.stdout.splitlines():
        if "release" in line:
            return line.split("tools, ", 1)[-1].strip()
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "unknown"


@dataclass(frozen=True)
class PtxasFigures:
    """What ``ptxas -v`` reports for one kernel: registers, spills, stack, static smem."""

    name: str
    arch: str
    registers: int
    barriers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    static_smem_bytes: int


def parse_ptxas_log(log: str) -> dict[str, PtxasFigures]:
    """Every kernel of a ``ptxas -v`` log, by name."""
    found: dict[str, PtxasFigures] = {}
    chunks = _FUNCTION.split(log)
    # [preamble, name1, arch1, body1, name2, arch2, body2, ...]
    for index in range(1, len(chunks) - 2, 3):
        name, arch, body = chunks[index], chunks[index + 1], chunks[index + 2]
        frame = _FRAME.search(body)
        used = _USED.search(body)
        if frame is None or used is None:
            raise ValueError(f"ptxas -v printed no resource line for {name}")
        smem = _SMEM.search(body)
        found[name] = PtxasFigures(
            name=name,
            arch=arch,
            registers=int(used.group(1)),
            barriers=int(used.group(2) or 0),
            stack_bytes=int(frame.group(1)),
            spill_store_bytes=int(frame.group(2)),
            spill_load_bytes=int(frame.group(3)),
            static_smem_bytes=int(smem.group(1)) if smem else 0,
        )
    return found


def assemble(ptx: str, arch: str) -> tuple[dict[str, PtxasFigures], bytes]:
    """``ptxas -arch=ARCH -v`` on one PTX text: each kernel's figures, and the cubin."""
    ptxas = _tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="dcmlir-ptxas-") as scratch:
        source, cubin = Path(scratch) / "module.ptx", Path(scratch) / "module.cubin"
        source.write_text(ptx)
        result = subprocess.run(
            [str(ptxas), f"-arch={arch}", "-v", str(source), "-o", str(cubin)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            first = (result.stderr.strip().splitlines() or ["no message"])[0]
            raise ValueError(f"ptxas -arch={arch} failed: {first}")
        return parse_ptxas_log(result.stdout + result.stderr), cubin.read_bytes()


def sass_opcodes(cubin: bytes) -> dict[str, Counter[str]]:
    """The SASS opcodes of each kernel of a cubin (``nvdisasm``), counted."""
    nvdisasm = _tool("nvdisasm")
    with tempfile.TemporaryDirectory(prefix="dcmlir-sass-") as scratch:
        path = Path(scratch) / "module.cubin"
        path.write_bytes(cubin)
        result = subprocess.run(
            [str(nvdisasm), str(path)], capture_output=True, text=True, check=False
        )
    if result.returncode != 0:
        first = (result.stderr.strip().splitlines() or ["no message"])[0]
        raise ValueError(f"nvdisasm failed: {first}")
    sections = _SASS_SECTION.split(result.stdout)
    return {
        sections[index]: Counter(_SASS_OPCODE.findall(sections[index + 1]))
        for index in range(1, len(sections) - 1, 2)
    }


def has_tensor_core_ptx(ptx: str) -> bool:
    """Whether a PTX text holds a tensor-core instruction (``mma``, ``wmma``, ``wgmma``)."""
    return _PTX_MMA.search(ptx) is not None


def tensor_core_count(opcodes: Counter[str]) -> int:
    """How many of these SASS instructions run on tensor cores."""
    return sum(n for op, n in opcodes.items() if op.startswith(TENSOR_CORE_OPCODES))
