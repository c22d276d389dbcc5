"""The host CPU as /proc and sysfs describe it: the defaults of :class:`~dcmlir.target.CpuTarget`.

Kept apart from :mod:`dcmlir.target` because reading the machine is I/O with
fallbacks (containers, other OSes) while a target is a pure, frozen record;
explicit fields and ``--target-option`` overrides replace what is read here.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "KIB",
    "MIB",
    "HostCpu",
    "host_cpu",
    "parse_size",
    "vector_bits_of",
    "vector_registers_of",
]

KIB = 1024
MIB = 1024 * KIB

# Sizes as sysfs writes them (``48K``); users write target overrides the same way.
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": 1024 * MIB}


def parse_size(text: str) -> int:
    """``48K``, ``2M``, ``2048KiB`` or a plain byte count, as sysfs and users write sizes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a size; write bytes or e.g. 48K, 2M")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


@dataclass(frozen=True)
class HostCpu:
    """What was read from this machine; the defaults of :class:`~dcmlir.target.CpuTarget`."""

    model: str
    vector_bits: int
    threads: int
    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int


# Used when /proc or /sys cannot be read (containers, other OSes): a common x86 server core.
_FALLBACK_CACHES = {1: 32 * KIB, 2: 1 * MIB, 3: 8 * MIB}


def _cpuinfo() -> tuple[str, set[str]]:
    """The model name and feature flags of the first CPU in /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or platform.machine(), set()
    model = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model or platform.machine(), flags


def vector_bits_of(flags: set[str]) -> int:
    """The widest f32 vector the ISA has: AVX-512 512, AVX2 256, else 128 (SSE, NEON)."""
    if "avx512f" in flags:
        return 512
    if "avx2" in flags:
        return 256
    return 128


def vector_registers_of(vector_bits: int, machine: str | None = None) -> int:
    """Architectural vector registers: 32 on AVX-512 and on AArch64, 16 on SSE/AVX2."""
    machine = machine if machine is not None else platform.machine()
    if vector_bits >= 512 or machine.lower() in ("aarch64", "arm64"):
        return 32
    return 16


def _cache_sizes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[int, int]:
    """``{level: bytes}`` of the data/unified caches of cpu0, fallbacks where unreadable."""
    sizes = dict(_FALLBACK_CACHES)
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            sizes[level] = size
    return sizes


def _threads() -> int:
    """CPUs this process may run on (affinity, e.g. under taskset or a cgroup)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.cache
def host_cpu() -> HostCpu:
    """Read the host once per process: /proc/cpuinfo, sysfs caches, the affinity mask."""
    model, flags = _cpuinfo()
    caches = _cache_sizes()
    return HostCpu(
        model=model,
        vector_bits=vector_bits_of(flags),
        threads=_threads(),
        l1d_bytes=caches[1],
        l2_bytes=caches[2],
        l3_bytes=caches[3],
    )
