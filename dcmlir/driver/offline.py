"""A CUDA plan without a GPU: real resources from the build, times from the roofline model.

Every candidate is built and assembled by ``ptxas`` (:mod:`dcmlir.build.inspect`,
cached), each (shape, kernel) time is predicted by
:func:`dcmlir.cost_model.roofline.predict_seconds`, and the kernels are selected
as the measured search selects them. Nothing is timed: the plan says
``"predicted": true``.
"""

from __future__ import annotations

import math
import time
from typing import IO

import numpy as np

from dcmlir.build.inspect import FiguresCache, attach_figures, inspect_kernels
from dcmlir.cost_model.roofline import predict_seconds
from dcmlir.cuda_tools import find_tool
from dcmlir.ir.iree import cuda_device_available
from dcmlir.search.selection import select_kernels
from dcmlir.search.shape_generic import SearchResult, SearchSettings, shapes_in_range
from dcmlir.space import CudaCandidate, CudaMmaCandidate, workload_space
from dcmlir.target import CudaTarget, Target
from dcmlir.workload import Workload

__all__ = ["PREDICTED_MARK", "offline_wanted", "predicted_search"]

PREDICTED_MARK = "[predicted: true]"
"""What every line the CLI prints about a predicted plan starts with."""


def offline_wanted(target: Target, predict: bool | None) -> bool:
    """``predict`` if given; else True for CUDA with no GPU here and ptxas installed."""
    if predict is not None:
        return predict
    return (
        isinstance(target, CudaTarget)
        and find_tool("ptxas") is not None
        and find_tool("nvdisasm") is not None
        and not cuda_device_available()
    )


def predicted_search(
    workload: Workload,
    target: CudaTarget,
    settings: SearchSettings,
    stream: IO[str],
    cache: FiguresCache | None = None,
) -> SearchResult:
    """The (shape x candidate) table from the model, and the kernels selected from it."""
    start = time.perf_counter()
    space = [
        c
        for c in workload_space(target, workload)
        if isinstance(c, CudaCandidate | CudaMmaCandidate)
    ]
    print(
        f"{PREDICTED_MARK} {workload.kind} key={workload.key}: building {len(space)} candidates "
        f"for ptxas ({target.arch})",
        file=stream,
    )
    reports = inspect_kernels(workload, target, space, cache)
    candidates = [
        c for c, r in zip(attach_figures(reports), reports, strict=True) if r.figures is not None
    ]
    candidates = [c for c in candidates if not c.problems(target)]  # real figures, real limits
    if not candidates:
        raise ValueError(f"no CUDA candidate of {workload.key} builds for {target.arch}")
    shapes = workload.tied_shapes() or shapes_in_range(workload, settings.max_shapes, settings.seed)
    estimate = np.array(
        [[predict_seconds(workload, c, shape, target) for c in candidates] for shape in shapes]
    )
    estimate[~np.isfinite(estimate)] = math.inf
    used, choice = select_kernels(estimate, shapes, candidates, settings)
    return SearchResult(
        workload=workload,
        shapes=list(shapes),
        candidates=candidates,
        kernels=[candidates[i] for i in used],
        choice=choice,
        estimate=estimate,
        predicted=estimate,
        measured={},
        measurements=0,
        measured_now=0,
        rounds=0,
        seconds=time.perf_counter() - start,
    )
