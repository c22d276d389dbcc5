"""What both cost models share: the records they accept, failures, ``pad * occ``, predict.

A model differs from another only in ``f_MK`` (:meth:`AdaptationModel.throughputs`);
everything shape dependent is the same arithmetic of :mod:`dcmlir.cost_model.terms`,
so it lives here once.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dcmlir.cost_model.cherry_pick import cherry_pick
from dcmlir.cost_model.terms import (
    T4_PRIOR,
    _flops,
    _grid,
    _pad_parts,
    _space,
    _Tiling,
    _tiling,
    _tiling_parts,
    outputs,
)
from dcmlir.records import Record
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DefaultCandidate
from dcmlir.target import CpuTarget, Target
from dcmlir.workload import K, Workload

__all__ = ["AdaptationModel", "default_tile_prior"]


def _record_signature(record: Record) -> tuple[Any, ...]:
    """Identifies one record, so an update with records seen before adds nothing."""
    return (
        record.candidate_key,
        record.route,
        record.kind,
        record.shape,
        record.timestamp,
        record.times,
        record.median,
        record.error,
    )


class AdaptationModel(ABC):
    """What both models share: the adaptation terms, failures, and the predict loop."""

    def __init__(
        self,
        workload: Workload,
        target: Target | None,
        parallel_units: int,
        seed: int,
        route: str | None,
    ) -> None:
        if parallel_units < 1:
            raise ValueError(f"parallel_units={parallel_units} must be >= 1")
        self.workload = workload
        self.target = target
        self.parallel_units = parallel_units
        self.seed = seed
        self.route = route
        self.curve = T4_PRIOR
        self.default_tile = default_tile_prior(target)
        self.default_reduction_tile = 0  # the default's effective tile on a dynamic K
        self.default_slowdown = 1.0  # its partial distribution tiles' cost (terms._Tiling)
        self.floor_seconds = 0.0  # every call's fixed cost (dcmlir.cost_model.call_floor)
        self.output_seconds = 0.0  # and per element of its result (fit_fixed_costs)
        self.ignored = 0  # records of another workload, target or route
        self._failed_everywhere: set[str] = set()
        self._failed_shapes: set[tuple[str, Shape]] = set()
        self._seen: set[tuple[Any, ...]] = set()
        self._accepted: list[Record] = []  # what a saved model replays
        self._tilings: dict[tuple[str, tuple[int, int, float]], _Tiling] = {}

    # -- records ----------------------------------------------------------------------------
    def _accepts(self, record: Record) -> bool:
        return (
            record.workload == self.workload.key
            and (self.target is None or record.target_key == self.target.key())
            and (self.route is None or record.route == self.route)
        )

    def _note_failure(self, record: Record) -> None:
        """A failed build holds for every shape it covers; a failed run for its shape."""
        if record.kind == "build" and record.all_shapes:
            self._failed_everywhere.add(record.candidate_key)
        else:
            self._failed_shapes.add((record.candidate_key, record.shape))

    def _clear_failure(self, record: Record) -> None:
        """A later success supersedes a failure (a rebuilt variant, a re-measurement)."""
        if record.kind == "build" and record.all_shapes:
            self._failed_everywhere.discard(record.candidate_key)
        elif record.ok:
            self._failed_shapes.discard((record.candidate_key, record.shape))
            self._failed_everywhere.discard(record.candidate_key)

    def _new_records(self, records: Iterable[Record]) -> list[Record]:
        """Records of this workload, target and route not seen before, in order; failures noted."""
        fresh = []
        for record in records:
            if not self._accepts(record):
                self.ignored += 1
                continue
            signature = _record_signature(record)
            if signature in self._seen:
                continue
            self._seen.add(signature)
            self._accepted.append(record)
            fresh.append(record)
            if record.failed:
                self._note_failure(record)
            else:
                self._clear_failure(record)
        return fresh

    def is_failed(self, candidate: Candidate, shape: Sequence[int] | None = None) -> bool:
        """Whether a recorded failure makes the candidate infinitely slow (on ``shape``)."""
        key = candidate.key()
        if key in self._failed_everywhere:
            return True
        return shape is not None and (key, tuple(shape)) in self._failed_shapes

    # -- the adaptation ---------------------------------------------------------------------
    def _tiling_of(self, candidate: Candidate) -> _Tiling:
        default = isinstance(candidate, DefaultCandidate)
        reduction = self.default_reduction_tile if default else 0
        tiles = (self.default_tile, reduction, self.default_slowdown if default else 1.0)
        cache_key = (candidate.key(), tiles)
        found = self._tilings.get(cache_key)
        if found is None:
            found = _tiling(self.workload, candidate, *tiles)
            self._tilings[cache_key] = found
        return found

    def _adaptation_in(self, tiling: _Tiling, space: Sequence[int]) -> float:
        real, computed = _tiling_parts(space, tiling)
        padding = real / computed if computed else 1.0
        if tiling.workgroup is None:
            return padding
        return padding * self.curve(
            _grid(self.workload, space, tiling.workgroup), self.parallel_units
        )

    def adaptation(self, candidate: Candidate, shape: Sequence[int]) -> float:
        """``pad * occ`` of one candidate on one shape, with this model's curve and tile."""
        return self._adaptation_in(self._tiling_of(candidate), _space(self.workload, shape))

    def reduction_padding(self, candidate: Candidate, shape: Sequence[int]) -> float:
        """Real over computed elements of one candidate's pad tiles on its reduction loops
        alone (<= 1): the part of IREE's default's padding that data tiling, whose f32 tiles
        do not pad K, does not share."""
        tiling = self._tiling_of(candidate)
        loops = zip(self.workload.dims, tiling.pad, strict=True)
        tiles = [tile if dim.role == K else 0 for dim, tile in loops]
        real, computed = _pad_parts(_space(self.workload, shape), tiles)
        return real / computed if computed else 1.0

    def partial_cost(self, candidate: Candidate, shape: Sequence[int]) -> float:
        """What IREE's default's partial distribution tiles add to its work at ``shape``
        (its computed elements with :attr:`default_slowdown` over those without, >= 1); 1 for
        any other candidate, and where the model has no slowdown."""
        tiling = self._tiling_of(candidate)
        if tiling.partial is None:
            return 1.0
        space = _space(self.workload, shape)
        _, plain = _pad_parts(space, tiling.pad)
        _, slowed = _tiling_parts(space, tiling)
        return slowed / plain if plain else 1.0

    def cherry_pick(self, candidate: Candidate, shapes_in_range: Sequence[Sequence[int]]) -> Shape:
        """:func:`cherry_pick` with this model's ``P``, curve and default tile."""
        return cherry_pick(
            self.workload,
            candidate,
            shapes_in_range,
            self.parallel_units,
            self.curve,
            default_tile=self.default_tile,
        )

    def throughput(self, candidate: Candidate) -> float:
        """``f_MK`` in FLOP/s."""
        return self.throughputs([candidate])[0]

    @abstractmethod
    def throughputs(self, candidates: Sequence[Candidate]) -> list[float]:
        """``f_MK`` (FLOP/s) of each candidate: what distinguishes the models."""

    def fixed_seconds(self, shapes: Sequence[Sequence[int]]) -> np.ndarray:
        """[row] what a call costs at each shape whatever its kernel's work: the call floor
        and the result's own cost (:mod:`dcmlir.cost_model.call_floor`), never padded."""
        spaces = [_space(self.workload, shape) for shape in shapes]
        return np.array([self._fixed(outputs(self.workload, s)) for s in spaces], dtype=float)

    def _fixed(self, results: int) -> float:
        """The fixed costs of a call whose result has ``results`` elements."""
        return self.floor_seconds + self.output_seconds * results

    def predict(
        self, candidates: Sequence[Candidate], shapes: Sequence[Sequence[int]]
    ) -> np.ndarray:
        """Seconds, shape ``(len(shapes), len(candidates))``; inf where a build or run failed.

        ``shapes``: the dynamic loops' values in loop order (:attr:`Record.shape`).
        """
        table = np.empty((len(shapes), len(candidates)), dtype=float)
        rates = self.throughputs(candidates)
        shapes = [tuple(int(v) for v in s) for s in shapes]
        spaces = [_space(self.workload, s) for s in shapes]
        flops = [_flops(space) for space in spaces]
        results = [outputs(self.workload, space) for space in spaces]
        for column, (candidate, rate) in enumerate(zip(candidates, rates, strict=True)):
            tiling = self._tiling_of(candidate)
            everywhere = candidate.key() in self._failed_everywhere
            for row, (shape, space) in enumerate(zip(shapes, spaces, strict=True)):
                if everywhere or (candidate.key(), shape) in self._failed_shapes:
                    table[row, column] = math.inf
                elif flops[row] == 0:
                    table[row, column] = 0.0
                else:
                    busy = flops[row] / (rate * self._adaptation_in(tiling, space))
                    table[row, column] = self._fixed(results[row]) + busy
        return table


def default_tile_prior(target: Target | None) -> int:
    """IREE 3.13's default for an f32 matmul on llvm-cpu tiles M by 8 (checked on AVX-512:
    ``vector_common_parallel = [8, 16, 0]``, masked, no peeling); elsewhere unknown: untiled."""
    return 8 if isinstance(target, CpuTarget) else 1
