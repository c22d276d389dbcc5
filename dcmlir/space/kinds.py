"""Every kind of candidate together: the ``Candidate`` union, a target's space, keys and JSON.

The one place that knows all kinds, so records, plans and command lines can
name a candidate without knowing which target it is for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from dcmlir.space.candidate import DefaultCandidate
from dcmlir.space.cpu import CpuCandidate, cpu_space
from dcmlir.space.cuda import CudaCandidate, cuda_space
from dcmlir.space.cuda_mma import CudaMmaCandidate, cuda_mma_space, mma_problem
from dcmlir.space.exact import ExactCandidate
from dcmlir.space.packed import (
    DataTiledCandidate,
    Mmt4dCandidate,
    OneTileMmt4dCandidate,
    PackedCandidate,
    data_tiling_problem,
    mmt4d_space,
    packed_space,
    packing_problem,
)
from dcmlir.target import CpuTarget, CudaTarget, Target
from dcmlir.workload import Workload

__all__ = [
    "Candidate",
    "candidate_from_json",
    "candidate_from_key",
    "select_candidates",
    "space_for",
    "workload_space",
]

Candidate = (
    DefaultCandidate
    | CpuCandidate
    | CudaCandidate
    | CudaMmaCandidate
    | PackedCandidate
    | Mmt4dCandidate
    | DataTiledCandidate
    | ExactCandidate
)


def space_for(target: Target) -> list[Candidate]:
    """The ordered candidate list of a target; the same list on every call."""
    if isinstance(target, CpuTarget):
        return list(cpu_space(target))
    if isinstance(target, CudaTarget):
        return list(cuda_space(target))
    raise TypeError(f"no micro-kernel space for {type(target).__name__}")


def workload_space(target: Target, workload: Workload) -> list[Candidate]:
    """The candidates for one workload: the target's space, then the packed family where
    the workload is a projection with a constant weight (:func:`packing_problem`; IREE's
    own data tiling is its widest member) and the explicit mmt4d family beside it, else
    IREE's data tiling where it applies (:func:`data_tiling_problem`)."""
    space = space_for(target)
    if isinstance(target, CudaTarget):
        return cuda_workload_space(target, workload)
    if not isinstance(target, CpuTarget):
        return space
    if packing_problem(workload) is None:
        space += [*packed_space(target), DataTiledCandidate(), *mmt4d_space(target)]
    elif data_tiling_problem(workload) is None:
        space.append(DataTiledCandidate())
    return space


def cuda_workload_space(target: CudaTarget, workload: Workload) -> list[Candidate]:
    """The CUDA space at the workload's element size (f16/bf16 tiles take half the shared
    memory), then the tensor-core family where :func:`mma_problem` allows it."""
    space: list[Candidate] = [DefaultCandidate()]
    for candidate in cuda_space(target)[1:]:
        if isinstance(candidate, CudaCandidate):
            space.append(candidate.for_workload(workload))
    if mma_problem(workload) is None:
        space += cuda_mma_space(target)
    return space


def _from_json_fields(cls: type, obj: Mapping[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(obj) - names - {"kind"})
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields in JSON: {', '.join(unknown)}")
    return cls(**{name: obj[name] for name in names if name in obj})


def candidate_from_json(obj: Mapping[str, Any]) -> Candidate:
    """The inverse of ``to_json`` for every kind of candidate."""
    kind = obj.get("kind")
    if kind == DefaultCandidate.kind:
        return DefaultCandidate()
    if kind == CpuCandidate.kind:
        return _from_json_fields(CpuCandidate, obj)
    if kind == DataTiledCandidate.kind:
        return DataTiledCandidate()
    if kind == PackedCandidate.kind:
        return _from_json_fields(PackedCandidate, obj)
    if kind == Mmt4dCandidate.kind:
        return _from_json_fields(Mmt4dCandidate, obj)
    if kind == OneTileMmt4dCandidate.kind:
        return _from_json_fields(OneTileMmt4dCandidate, obj)
    if kind == CudaCandidate.kind:
        values = dict(obj)
        if values.get("stated_workgroup_size") is not None:
            values["stated_workgroup_size"] = tuple(values["stated_workgroup_size"])
        return _from_json_fields(CudaCandidate, values)
    if kind == CudaMmaCandidate.kind:
        return _from_json_fields(CudaMmaCandidate, obj)
    if kind == ExactCandidate.kind:
        return _exact_from_json(obj)
    raise ValueError(f"unknown candidate kind {kind!r} in JSON")


def _exact_from_json(obj: Mapping[str, Any]) -> ExactCandidate:
    shape = obj.get("shape")
    if not isinstance(shape, list) or not all(type(v) is int for v in shape):
        raise ValueError(f"exact candidate: 'shape' must be a list of integers, got {shape!r}")
    candidate = _from_json_fields(ExactCandidate, {**obj, "shape": tuple(shape)})
    candidate.validate()
    return candidate


_EXACT_KEY = re.compile(r"^exact:(\d+(?:x\d+)*)$")
_CPU_KEY = re.compile(r"^cpu:wg(\d+)x(\d+)(?::c(\d+)x(\d+))?:v(\d+)x(\d+):k(\d+)$")
_PACKED_KEY = re.compile(r"^packed:m(\d+)n(\d+)k(\d+)$")
_MMT4D_KEY = re.compile(r"^mmt4d(-one)?:m(\d+)n(\d+)k(\d+)$")
_CUDA_MMA_KEY = re.compile(r"^cuda-mma:wg(\d+)x(\d+):s(\d+)x(\d+):k(\d+)$")
_CUDA_KEY = re.compile(r"^cuda:wg(\d+)x(\d+):t(\d+)x(\d+):k(\d+)(:p)?(?::ws(\d+)x(\d+)x(\d+))?$")


def candidate_from_key(key: str) -> Candidate:
    """The inverse of ``key()``: lets a user name a candidate on a command line."""
    if key == "default":
        return DefaultCandidate()
    if key == "datatiled":
        return DataTiledCandidate()
    found = _EXACT_KEY.match(key)
    if found:
        return ExactCandidate(tuple(int(v) for v in found.group(1).split("x")))
    found = _CPU_KEY.match(key)
    if found:
        wm, wn, cm, cn, vm, vn, vk = found.groups()
        cache = (int(cm), int(cn)) if cm is not None else (None, None)
        return CpuCandidate(int(wm), int(wn), int(vm), int(vn), int(vk), *cache)
    found = _PACKED_KEY.match(key)
    if found:
        return PackedCandidate(*(int(v) for v in found.groups()))
    found = _MMT4D_KEY.match(key)
    if found:
        one_tile, *sizes = found.groups()
        kind = Mmt4dCandidate if one_tile is None else OneTileMmt4dCandidate
        return kind(*(int(v) for v in sizes))
    found = _CUDA_MMA_KEY.match(key)
    if found:
        return CudaMmaCandidate(*(int(v) for v in found.groups()))
    found = _CUDA_KEY.match(key)
    if found:
        wm, wn, tm, tn, k, promote, *size = found.groups()
        stated = tuple(int(v) for v in size) if size[0] is not None else None
        return CudaCandidate(
            int(wm), int(wn), int(tm), int(tn), int(k), promote is not None, stated
        )
    raise ValueError(
        f"'{key}' is not a candidate key (e.g. default, cpu:wg8x128:v1x16:k8, "
        "cuda:wg32x64:t4x4:k8:p, cuda-mma:wg64x64:s2x4:k8, packed:m4n16k1, mmt4d:m8n32k1, "
        "mmt4d-one:m5n32k1)"
    )


def select_candidates(space: Sequence[Candidate], count: int) -> list[Candidate]:
    """``count`` candidates spread evenly over the space, IREE's default first."""
    if count <= 0 or count >= len(space):
        return list(space)
    default = [c for c in space if isinstance(c, DefaultCandidate)]
    rest = [c for c in space if not isinstance(c, DefaultCandidate)]
    wanted = max(count - len(default), 0)
    step = len(rest) / wanted if wanted else 0
    return default + [rest[int(i * step)] for i in range(wanted)]
