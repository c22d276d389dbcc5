"""Compilation targets: the hardware limits the micro-kernel space is derived from.

A target says two things: how to ask ``iree-compile`` for it (flags, and for
CUDA archs IREE 3.13 does not know, an explicit executable target in the
module) and which limits a micro-kernel must respect on it (vector width and
registers on a CPU; warp size, threads, shared memory and registers per block
on a GPU). Targets are frozen and JSON round-trip, because every tuning record
stores the target it was measured on; :meth:`key` is the short form records
and caches index by. What the host CPU is comes from :mod:`dcmlir.host_cpu`;
reading the PTX a CUDA build holds is :mod:`dcmlir.ptx`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dcmlir.host_cpu import KIB, MIB, host_cpu, parse_size, vector_registers_of

__all__ = [
    "CPU_BACKEND",
    "CUDA_BACKEND",
    "KNOWN_GPUS",
    "CpuTarget",
    "CudaTarget",
    "Target",
    "parse_overrides",
    "target_from_json",
    "target_from_name",
]

CPU_BACKEND = "llvm-cpu"
CUDA_BACKEND = "cuda"

# --- value parsing -------------------------------------------------------------------------


def parse_overrides(texts: Iterable[str]) -> dict[str, str]:
    """``["vector_bits=256", "l2_bytes=1M,threads=4"]`` -> ``{key: value}`` (values as text).

    Values stay text here; :meth:`CpuTarget.from_overrides` and
    :meth:`CudaTarget.from_overrides` convert them by the field's type.
    """
    found: dict[str, str] = {}
    for text in texts:
        for item in text.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(
                    f"override '{item.strip()}' is not key=value, e.g. vector_bits=256"
                )
            found[key.strip()] = value.strip()
    return found


def _convert(cls: type, name: str, value: object) -> object:
    """One override value converted to the type of field ``name`` of ``cls``."""
    kinds = {f.name: f.type for f in dataclasses.fields(cls)}
    if name not in kinds:
        known = ", ".join(sorted(kinds))
        raise ValueError(f"unknown {cls.__name__} field '{name}' (known: {known})")
    if kinds[name] == "str":
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name}={value!r} must be an integer")
    if isinstance(value, int):
        return value
    try:
        return parse_size(value) if name.endswith("_bytes") else int(value, 0)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be an integer") from None


def _check_positive(obj: object, names: Iterable[str]) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(obj).__name__}.{name}={value!r} must be a positive integer")


def _from_json(cls: type, obj: Mapping[str, Any], backend: str) -> Any:
    if obj.get("backend") != backend:
        raise ValueError(f"not a {backend} target: backend={obj.get('backend')!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(obj) - names - {"backend"})
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields in JSON: {', '.join(unknown)}")
    # a field with a plain default may be absent: it was added later (loop_alignment)
    missing = sorted(
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in obj and f.default is dataclasses.MISSING
    )
    if missing:
        raise ValueError(f"{cls.__name__} JSON lacks fields: {', '.join(missing)}")
    return cls(**{name: obj[name] for name in names if name in obj})


def _kib(size: int) -> str:
    """``48k``, ``2m``: short sizes for keys."""
    if size % MIB == 0:
        return f"{size // MIB}m"
    if size % KIB == 0:
        return f"{size // KIB}k"
    return f"{size}b"


# --- CPU -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuTarget:
    """``llvm-cpu`` for ``--iree-llvmcpu-target-cpu=host``; fields default to the host's.

    ``vector_registers=0`` means "the ISA's count for ``vector_bits``", so
    overriding only ``vector_bits=256`` also gives AVX2's 16 registers. The
    overrides change the limits the space is derived from, not the code IREE
    generates: ``target_cpu`` stays ``host``. ``loop_alignment`` alone is about the code:
    where dcmlir's own builds start their innermost loops.
    """

    backend: ClassVar[str] = CPU_BACKEND

    vector_bits: int = field(default_factory=lambda: host_cpu().vector_bits)
    vector_registers: int = 0
    threads: int = field(default_factory=lambda: host_cpu().threads)
    l1d_bytes: int = field(default_factory=lambda: host_cpu().l1d_bytes)
    l2_bytes: int = field(default_factory=lambda: host_cpu().l2_bytes)
    l3_bytes: int = field(default_factory=lambda: host_cpu().l3_bytes)
    model: str = field(default_factory=lambda: host_cpu().model)
    target_cpu: str = "host"
    loop_alignment: int = 64
    """Bytes every innermost loop of dcmlir's own builds starts at, on x86-64
    (:func:`dcmlir.build.code_layout.code_flags`); 0: LLVM's default (16)."""

    def __post_init__(self) -> None:
        if self.vector_registers == 0:
            object.__setattr__(self, "vector_registers", vector_registers_of(self.vector_bits))
        _check_positive(
            self,
            ("vector_bits", "vector_registers", "threads", "l1d_bytes", "l2_bytes", "l3_bytes"),
        )
        alignment = self.loop_alignment
        if alignment and (alignment < 16 or alignment > 4096 or alignment & (alignment - 1)):
            raise ValueError(
                f"loop_alignment={alignment} is not 0 or a power of two in 16..4096 bytes"
            )
        if self.vector_bits % 32:
            raise ValueError(f"vector_bits={self.vector_bits} is not a whole number of f32 lanes")
        if self.target_cpu != "host":
            # The limits describe the host; another -target-cpu would contradict them.
            raise ValueError(f"target_cpu={self.target_cpu!r}: only 'host' is supported")

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, object]) -> CpuTarget:
        """The host target with some fields replaced; values may be text (``l2_bytes=1M``)."""
        return cls(**{name: _convert(cls, name, value) for name, value in overrides.items()})

    @property
    def lanes(self) -> int:
        """f32 elements per vector register."""
        return self.vector_bits // 32

    @property
    def parallel_units(self) -> int:
        """What the tile grid is spread over (``P`` of the occupancy term): threads."""
        return self.threads

    def compile_flags(self) -> tuple[str, ...]:
        return (
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.target_cpu}",
        )

    def module_attributes(self) -> str:
        """Nothing: the flags select the target."""
        return ""

    def wrap_module(self, body: str) -> str:
        return body

    def key(self) -> str:
        """e.g. ``llvm-cpu:v512r32:t2:48k-2m-260m:4f0c1a`` (last part: hash of the model)."""
        model = hashlib.sha256(self.model.encode()).hexdigest()[:6]
        caches = "-".join(_kib(s) for s in (self.l1d_bytes, self.l2_bytes, self.l3_bytes))
        return (
            f"{self.backend}:v{self.vector_bits}r{self.vector_registers}:t{self.threads}"
            f":{caches}:{model}"
        )

    def describe(self) -> str:
        return (
            f"{self.backend} ({self.model}): {self.vector_bits}-bit vectors "
            f"({self.lanes} f32 lanes), {self.vector_registers} vector registers, "
            f"{self.threads} threads, L1d {_kib(self.l1d_bytes)} L2 {_kib(self.l2_bytes)} "
            f"L3 {_kib(self.l3_bytes)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CpuTarget:
        return _from_json(cls, obj, CPU_BACKEND)


# --- CUDA ----------------------------------------------------------------------------------

# Architectures in IREE 3.13's CUDA target table (checked: sm_90 and sm_100 are missing).
IREE_KNOWN_CUDA_ARCHS = frozenset(
    {"sm_60", "sm_61", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89"}
)


@dataclass(frozen=True)
class GpuSpec:
    """One row of the known-GPU table (CUDA programming guide, IREE's KnownTargets.cpp)."""

    arch: str
    sm_count: int
    smem_per_block_bytes: int  # opt-in maximum for one block
    smem_per_sm_bytes: int
    max_threads_per_sm: int


KNOWN_GPUS: dict[str, GpuSpec] = {
    "t4": GpuSpec("sm_75", 40, 64 * KIB, 64 * KIB, 1024),
    "a100": GpuSpec("sm_80", 108, 163 * KIB, 164 * KIB, 2048),
    "h100": GpuSpec("sm_90", 132, 227 * KIB, 228 * KIB, 2048),
    "h200": GpuSpec("sm_90", 132, 227 * KIB, 228 * KIB, 2048),
}
"""By name; the first GPU of an arch is that arch's default (sm_90 -> H100)."""


def _gpu_for_arch(arch: str) -> str:
    for name, spec in KNOWN_GPUS.items():
        if spec.arch == arch:
            return name
    archs = ", ".join(sorted({s.arch for s in KNOWN_GPUS.values()}))
    raise ValueError(f"no known GPU for arch '{arch}' (known: {archs}); give gpu= and its limits")


# The explicit sm_90 executable target (IREE 3.13 has no sm_90 row); checked to build PTX.
_SM90_MMA = (
    "<NV_MMA_SYNC_F32_16x8x16_F16>, <NV_MMA_SYNC_F16_16x8x16_F16>, "
    "<NV_MMA_SYNC_F32_16x8x16_BF16>, <NV_WMMA_F32_16x16x16_F16>, <NV_WMMA_F16_16x16x16_F16>"
)


@dataclass(frozen=True)
class CudaTarget:
    """``cuda`` for one NVIDIA GPU; the defaults are an A100 (sm_80).

    Build one with :meth:`known` (``t4``, ``a100``, ``h100``, ``h200``), or
    :func:`target_from_name` with an arch. Compiling needs no GPU.
    """

    backend: ClassVar[str] = CUDA_BACKEND

    arch: str = "sm_80"
    gpu: str = "a100"
    sm_count: int = 108
    warp_size: int = 32
    max_threads_per_block: int = 1024
    smem_per_block_bytes: int = 163 * KIB
    registers_per_block: int = 65536
    max_registers_per_thread: int = 255
    max_threads_per_sm: int = 2048
    smem_per_sm_bytes: int = 164 * KIB
    ptx_features: str = "+ptx80"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"sm_\d+a?", self.arch):
            raise ValueError(f"arch={self.arch!r} is not a CUDA arch like sm_80")
        _check_positive(
            self,
            (
                "sm_count",
                "warp_size",
                "max_threads_per_block",
                "smem_per_block_bytes",
                "registers_per_block",
                "max_registers_per_thread",
                "max_threads_per_sm",
                "smem_per_sm_bytes",
            ),
        )
        if self.max_threads_per_block % self.warp_size:
            raise ValueError("max_threads_per_block must be a multiple of warp_size")

    @classmethod
    def known(cls, gpu: str, **overrides: Any) -> CudaTarget:
        """A GPU of the table by name, some fields replaced."""
        name = gpu.lower()
        if name not in KNOWN_GPUS:
            raise ValueError(f"unknown GPU '{gpu}' (known: {', '.join(KNOWN_GPUS)})")
        spec = KNOWN_GPUS[name]
        return cls(gpu=name, **{**dataclasses.asdict(spec), **overrides})

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, object]) -> CudaTarget:
        """From ``gpu=`` (a table row) or ``arch=`` (its default GPU), then the other fields."""
        values = {name: _convert(cls, name, value) for name, value in overrides.items()}
        gpu = values.pop("gpu", None)
        if gpu is None:
            gpu = _gpu_for_arch(str(values.get("arch", cls.arch)))
        return cls.known(str(gpu), **values)

    @property
    def parallel_units(self) -> int:
        """What the tile grid is spread over (``P`` of the occupancy term): SMs."""
        return self.sm_count

    @property
    def needs_explicit_target(self) -> bool:
        """True where IREE's table lacks the arch: the module must name its target."""
        return self.arch not in IREE_KNOWN_CUDA_ARCHS

    def executable_target(self) -> str:
        """The ``#hal.executable.target`` for this GPU (the form sm_90 needs in 3.13)."""
        wgp = (
            "compute = fp64|fp32|fp16|int64|int32|int16|int8, "
            "storage = b64|b32|b16|b8, subgroup = shuffle|arithmetic, dot = dp4xi8toi32, "
            f"mma = [{_SM90_MMA}], subgroup_size_choices = [{self.warp_size}], "
            f"max_workgroup_sizes = [{self.max_threads_per_block}, "
            f"{self.max_threads_per_block}, {self.max_threads_per_block}], "
            f"max_thread_count_per_workgroup = {self.max_threads_per_block}, "
            f"max_workgroup_memory_bytes = {self.smem_per_block_bytes}, "
            "max_workgroup_counts = [2147483647, 65535, 65535]"
        )
        info = (
            f'#iree_gpu.target<arch = "{self.arch}", features = "{self.ptx_features}", '
            f"wgp = <{wgp}>, chip = <wgp_count = {self.sm_count}>>"
        )
        target = f'"cuda", "cuda-nvptx-fb", {{iree_codegen.target_info = {info}}}'
        return f"#hal.executable.target<{target}>"

    def compile_flags(self) -> tuple[str, ...]:
        if self.needs_explicit_target:
            # The module's hal.device.targets (module_attributes) selects the arch.
            return ("--iree-hal-target-device=cuda",)
        return ("--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch}")

    def module_attributes(self) -> str:
        """``hal.device.targets = [...]`` for a ``module attributes {...}`` header, or "".

        An explicit target wins over ``--iree-cuda-target`` (checked), so it is
        only emitted where the flag cannot name the arch.
        """
        if not self.needs_explicit_target:
            return ""
        device = f'#hal.device.target<"cuda", [{self.executable_target()}]> : !hal.device'
        return f"hal.device.targets = [{device}]"

    def wrap_module(self, body: str) -> str:
        """Put top-level ops (``func.func ...``) in a module carrying :meth:`module_attributes`."""
        attributes = self.module_attributes()
        if not attributes:
            return body
        if re.match(r"\s*module\b", body):
            raise ValueError("wrap_module takes the module's body, not a module")
        return f"module attributes {{{attributes}}} {{\n{body}\n}}\n"

    def key(self) -> str:
        """e.g. ``cuda:sm_80:a100:108sm:smem163k`` (limits that shape the space included)."""
        return (
            f"{self.backend}:{self.arch}:{self.gpu}:{self.sm_count}sm"
            f":smem{_kib(self.smem_per_block_bytes)}:t{self.max_threads_per_block}"
            f":r{self.registers_per_block}"
        )

    def describe(self) -> str:
        return (
            f"{self.backend} {self.gpu} ({self.arch}): {self.sm_count} SMs, warp "
            f"{self.warp_size}, <= {self.max_threads_per_block} threads and "
            f"{_kib(self.smem_per_block_bytes)} shared memory per block, "
            f"{self.registers_per_block} registers per block"
        )

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CudaTarget:
        return _from_json(cls, obj, CUDA_BACKEND)


Target = CpuTarget | CudaTarget


def target_from_name(
    name: str, arch: str | None = None, overrides: Mapping[str, object] | None = None
) -> Target:
    """``llvm-cpu`` (the host) or ``cuda`` (``arch`` picks the GPU, default sm_80)."""
    values = dict(overrides or {})
    if name == CPU_BACKEND:
        if arch not in (None, "host"):
            raise ValueError(f"llvm-cpu targets the host; arch={arch!r} is not supported")
        return CpuTarget.from_overrides(values)
    if name == CUDA_BACKEND:
        if arch is not None:
            values["arch"] = arch
        return CudaTarget.from_overrides(values)
    raise ValueError(f"unknown target '{name}' (known: {CPU_BACKEND}, {CUDA_BACKEND})")


def target_from_json(obj: Mapping[str, Any]) -> Target:
    """The inverse of ``to_json`` for either backend."""
    backend = obj.get("backend")
    if backend == CPU_BACKEND:
        return CpuTarget.from_json(obj)
    if backend == CUDA_BACKEND:
        return CudaTarget.from_json(obj)
    raise ValueError(f"unknown target backend {backend!r} in JSON")
