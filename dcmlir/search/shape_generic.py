"""Shape-generic search (DietCode; docs/design.md, section 7) under a measurement budget.

1. Measure candidates once each, on their cherry-picked shape (a spread subset when
   they are more than a quarter of the budget), and fit the cost model.
2. Estimate the whole (shape x candidate) table: a measurement where there is one, else
   the model's prediction corrected by how wrong it was for that candidate at its
   nearest measured shapes (with an argument weight, data tiling's: the default's times
   their measured ratio, :mod:`.floor_builds`).
3. Cover all shapes' top-k with at most ``max_kernels`` kernels (greedy set cover).
4. Verify the picks that beat a measurement at their shape on their estimate alone,
   then a few spread shapes of each chosen kernel and close contenders, refit, and
   select again; stop when the budget is spent or nothing is left worth measuring.
5. Prove: every round, and with a reserve at the end (where only measured kernels are
   selected), first the floor (with an argument weight, data tiling beside IREE's
   default where it is estimated faster, then both where they trade places; with a
   constant weight data tiling is the floor by itself), then each chosen kernel: a
   measurement near every shape it is chosen for, in its remainder class
   (:mod:`.remainders`), and an IREE build beside it (:mod:`.baseline_evidence`), in
   the order of :mod:`.proof_order`; a kernel still unproven when the budget is spent
   is ruled out there and the rest selected again.

A failed build or run is infinitely slow where it failed (everywhere if it never ran or ever
gave wrong numbers). ``budget`` counts timed pairs, records included: resumed, it decides
(and logs, :mod:`.round_log`) as an uninterrupted search does.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Collection, Sequence
from functools import partial
from typing import IO, Protocol

import numpy as np

from dcmlir.cost_model import cherry_pick as default_cherry_pick
from dcmlir.progress import Progress
from dcmlir.records import Record
from dcmlir.search.baseline_evidence import (
    against_builds,
    baseline_wants,
    contested_rows,
    contested_side_by_side,
    side_by_side_wants,
    unvouched,
)
from dcmlir.search.chase import ChaseLimit
from dcmlir.search.exact_builds import exact_builds
from dcmlir.search.family_duel import FamilyDuel
from dcmlir.search.first_measurements import first_measurements
from dcmlir.search.floor_builds import (
    FLOOR_SHARE,
    PARTIAL_TRUST,
    WASTE_PARTS,
    FloorBuilds,
    default_waste,
    partial_waste,
)
from dcmlir.search.measured_pairs import MeasuredPairs, MeasurerLike, wrong_results
from dcmlir.search.outcome import SearchResult
from dcmlir.search.packed_rows import PackedRows
from dcmlir.search.proof_order import beside_floor_by_gain, one_kernel_per_unseen_family
from dcmlir.search.proven_selection import fallback_groups, proven_selection
from dcmlir.search.remainders import RemainderClasses
from dcmlir.search.round_log import RoundLog
from dcmlir.search.selection import finite_geomean, measured_favoured, select_kernels
from dcmlir.search.settings import SearchSettings
from dcmlir.search.shape_effects import interpolate, log_ratios, shape_effects
from dcmlir.search.shape_range import shapes_in_range
from dcmlir.search.verification import reduction_siblings, verification_wanted
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate, packing_problem
from dcmlir.workload import Workload


class CostModelLike(Protocol):
    def update(self, records: Sequence[Record]) -> None: ...

    def predict(self, candidates: Sequence[Candidate], shapes: Sequence[Shape]) -> np.ndarray: ...


class ShapeGenericSearch:
    """Runs the search for one workload with one measurer and one cost model."""

    def __init__(
        self,
        workload: Workload,
        measurer: MeasurerLike,
        model: CostModelLike,
        candidates: Sequence[Candidate],
        settings: SearchSettings | None = None,
        *,
        cherry_pick: object = None,
        stream: IO[str] | None = None,
        shapes: Sequence[Shape] | None = None,
        known: Sequence[tuple[Candidate, Shape]] = (),
        log: RoundLog | None = None,
    ) -> None:
        """``shapes``: the shapes to tune for, when not every combination of the dynamic
        dims' ranges can occur (attention's T x T in a model: only the diagonal);
        ``known``: pairs timed before the search and paid for there (IREE's default probed
        for a model's budget split), evidence from the start, not counted in the budget;
        ``log``: where each round's pairs, why and estimates go (:mod:`.round_log`)."""
        self.log = log if log is not None else RoundLog(None)
        self.workload = workload
        self.model = model
        self.candidates = list(candidates)
        self.keys = [c.key() for c in self.candidates]
        self.columns = {key: column for column, key in enumerate(self.keys)}
        self.rows = PackedRows(workload, self.candidates)  # the packed family's estimates
        self.settings = settings = settings or SearchSettings()
        self.stream = stream if stream is not None else sys.stderr
        given = sorted({tuple(shape) for shape in shapes or ()})
        self.shapes = given or shapes_in_range(workload, settings.max_shapes, settings.seed)
        self.shape_index = {s: i for i, s in enumerate(self.shapes)}
        self.tile_steps = self.rows.tile_steps(self.shapes)  # pairs with data tiling, per tile
        self.remainders = RemainderClasses(workload, self.candidates, self.shapes)
        self.siblings = reduction_siblings(workload, self.candidates)
        self.default = next(  # IREE's default: the floor every chosen kernel must beat
            (i for i, c in enumerate(self.candidates) if isinstance(c, DefaultCandidate)), None
        )
        # IREE's data tiling where offered: the floor's other build, evidence beside it too
        tiled = [i for i, c in enumerate(self.candidates) if isinstance(c, DataTiledCandidate)]
        self.data_tiled = tiled[0] if tiled else None
        # with a constant weight: see _needing_pairs; else which is faster where is asked
        self.tiling_is_floor = bool(tiled) and packing_problem(workload) is None
        self.iree_builds = [c for c in (self.default, self.data_tiled) if c is not None]
        self.floor = None
        self._waste: tuple[int, np.ndarray] | None = None
        if self.default is not None and self.data_tiled is not None and not self.tiling_is_floor:
            self.floor = FloorBuilds(self.shapes, self.default, self.data_tiled)
        self.book = MeasuredPairs(measurer, self.keys, self.shape_index)
        self.known = [(c, s) for c, s in known if c.key() in self.keys and s in self.shape_index]
        self.free = 0  # of the book's pairs, the known ones
        self.measured, self.records = self.book.seconds, self.book.records
        self._seconds, self._measured_rows = self.book.finite, self.book.measured_rows
        self.again: set[Shape] = set()  # of the proofs' pairs, the shapes timed again
        self.chase = ChaseLimit.for_budget(self.settings.budget, self.settings.contender_margin)
        self._cherry_pick = cherry_pick if cherry_pick is not None else default_cherry_pick
        self.duel = FamilyDuel(self.candidates, self.settings.budget, self.settings.duel_share)

    # -- measuring ---------------------------------------------------------------------------
    @property
    def used(self) -> int:
        return len(self.book) - self.free

    def _measure(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        calls: int | None = None,
        again: Collection[Shape] = (),
        why: str = "first",
        estimate: np.ndarray | None = None,
        kernels: Sequence[int] = (),
    ) -> None:
        """Time ``pairs`` (:meth:`MeasuredPairs.measure`), refit, and log the round."""
        if self.book.measure(pairs, calls, again):
            self.model.update([r for r in self.records.values() if r.ok])
        self.log.round(self, why, pairs, estimate, kernels)

    # -- estimating --------------------------------------------------------------------------
    def estimate(self) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, prediction) tables [shape, candidate] in seconds: a measured pair is its
        measurement; elsewhere the prediction corrected by the measurements' log ratios, by
        shape (what every candidate near it showed: a memory floor the model does not know),
        then by candidate (beyond that, over the extents' logs: :func:`.interpolate`)."""
        predicted = np.asarray(self.model.predict(self.candidates, self.shapes), dtype=float)
        observed, never_ran = log_ratios(self.measured, self.columns, self.shape_index, predicted)
        by_shape = interpolate(self.shapes, shape_effects(observed))
        residual: dict[int, list[tuple[int, float]]] = {}
        for row, column, value in observed:
            residual.setdefault(column, []).append((row, value - math.log(by_shape[row])))
        estimate = predicted * by_shape[:, None]
        penalties = self.remainders.penalties(residual)
        by_candidate = partial(interpolate, self.shapes, log_extents=True)
        for column, points in residual.items():
            estimate[:, column] *= self.remainders.correction(
                column, points, penalties, by_candidate
            )
        estimate[:, sorted(never_ran)] = math.inf  # a build or run failure
        self.rows.estimate(estimate, self.shapes, self.keys, self.measured, self.book.pairs())
        for (key, shape), seconds in self.measured.items():
            if key not in self.columns or shape not in self.shape_index:
                continue
            column = self.columns[key]
            if math.isfinite(seconds) and self.rows.tile(self.candidates[column]) is not None:
                continue  # a tile-grid kernel: the mean of its tile count, not one sample
            estimate[self.shape_index[shape], column] = seconds
        if self.floor is not None:
            default = self.candidates[self.default]
            own = predicted[:, self.default]  # the default's predicted times
            waste = default_waste(self.model, default, self.shapes, own, part=WASTE_PARTS)
            self.floor.estimate(estimate, self.book.steady, waste, self._partial_waste(own))
        for (key, _), record in self.records.items():
            if key in self.columns and wrong_results(record):
                estimate[:, self.columns[key]] = math.inf  # miscompiled once: trusted nowhere
        self.chase.apply(estimate, self.book.never_measured())
        return estimate, predicted

    # -- selecting ---------------------------------------------------------------------------
    def select(self, estimate: np.ndarray) -> tuple[list[int], dict[Shape, int]]:
        """The kernels (columns) and each shape's pick: see :mod:`dcmlir.search.selection`."""
        return select_kernels(estimate, self.shapes, self.candidates, self.settings)

    # -- verifying ---------------------------------------------------------------------------
    def verification_pairs(
        self,
        estimate: np.ndarray,
        predicted: np.ndarray,
        kernels: list[int],
        choice: dict[Shape, int],
        limit: int,
        hidden: bool = True,
    ) -> list[tuple[Candidate, Shape]]:
        """Unmeasured pairs worth a measurement, most useful first, at most ``limit``
        (:func:`.verification.verification_wanted`; ``hidden``: with the contenders the
        estimate hides, which the reserve leaves alone: a kernel they bring in needs proofs
        after them)."""
        picks = [kernels[choice[shape]] for shape in self.shapes]
        measured = self.book.mask()
        per_kernel, margin = self.settings.verify_per_kernel, self.settings.contender_margin
        args = (self.shapes, picks, measured, per_kernel, margin, hidden, self.siblings)
        wanted = verification_wanted(estimate, predicted, *args, self.remainders.masks)
        found = [p for p in dict.fromkeys(wanted) if not measured[p[1], p[0]]][:limit]
        return [(self.candidates[column], self.shapes[row]) for column, row in found]

    def _proven_selection(self, estimate: np.ndarray) -> tuple[list[int], dict[Shape, int]]:
        """The selection once the budget is spent, with no kernel in it on estimates alone
        (:mod:`.proven_selection`; with data tiling the floor, each family proven beside it)."""
        floor = self._floor_build()
        groups = None if floor is None else fallback_groups(self.candidates, self.settings, floor)
        args = (self.select, self._ruled_out, self._seconds, groups, floor)
        return proven_selection(estimate, self.shapes, self.candidates, self.settings, *args)

    def _ruled_out(self, kernels: list[int], choice: dict[Shape, int]) -> dict[int, list[int]]:
        """Each kernel's rows none of its measurements covers, no side-by-side pair with an
        IREE build covers, or where the pairs covering them show it slower
        (:mod:`.baseline_evidence`), unless a kernel holding it is no faster or it won clearly."""
        regions = self._regions(kernels, choice)
        out = self.remainders.unproven_rows(regions, self._measured_rows)
        rivals = [c for c in range(len(self.keys)) if c not in self.iree_builds]
        floor = self._floor_build()  # data tiling: a clear win needs no pair (PackedRows)
        for lost in self._against_iree_builds(regions) if self.default is not None else ():
            for column, rows in unvouched(lost, self._seconds, rivals, self._holds).items():
                won = self.rows.clear_wins(column, rows, floor, self.shapes, self._seconds)
                out.setdefault(column, []).extend(r for r in rows if r not in won)
        return out

    def _holds(self, column: int, row: int) -> bool:
        """Whether ``column``'s own measurements and pairs keep ``row`` from IREE's builds."""
        if row not in self._measured_rows(column):
            return False
        return not any(found.get(column) for found in self._against_iree_builds({column: [row]}))

    def _against_iree_builds(
        self, regions: dict[int, list[int]]
    ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Each kernel's rows no pair with an IREE build covers, and its rows where pairs
        show it slower (:func:`.baseline_evidence.against_builds`; the builds:
        :meth:`_builds`). Data tiling itself has evidence beside the default only, and
        needs none with a constant weight (:meth:`_needing_pairs`)."""
        assert self.default is not None
        builds = self._builds()
        near, distance, rows = self.remainders.near, self.remainders.distance, self._measured_rows
        margin = self.settings.tie_margin
        regions = self._needing_pairs(regions)
        regime, again = self.rows.regimes(self.shapes, self.book.pairs()), self.book.again_logs
        args = (near, distance, regions, rows, self._seconds, margin, regime, again)
        carried = {self.default: self._partial_waste() ** PARTIAL_TRUST}
        floor, together = self._floor_build(), self.book.together_rows
        return against_builds(
            builds, *args, carried, tile_steps=self.tile_steps, floor=floor, together=together
        )

    def _builds(self) -> list[tuple[int, np.ndarray]]:
        """IREE's builds a kernel needs pairs with, each with the classes it shares with it:
        the default, and data tiling (the kernel's own classes); data tiling alone where it
        is the floor (at small T of `dense_ffn1`, 2-5x faster than the default)."""
        assert self.default is not None
        tiled = [] if self.data_tiled is None else [(self.data_tiled, self.remainders.masks)]
        if self._floor_build() is not None:
            return tiled
        joint = self.remainders.with_default(getattr(self.model, "default_tile", 1))
        return [(self.default, joint), *tiled]  # the classes shared with the default

    def _partial_waste(self, predicted: np.ndarray | None = None) -> np.ndarray:
        """:func:`.floor_builds.partial_waste` as the model has it now, once per measurement
        (``predicted``: the default's column of the model's prediction, where it is at hand)."""
        if self._waste is None or self._waste[0] != len(self.measured):
            default = self.candidates[self.default]
            found = partial_waste(self.model, default, self.shapes, predicted)
            self._waste = (len(self.measured), found)
        return self._waste[1]

    def _needing_pairs(self, regions: dict[int, list[int]]) -> dict[int, list[int]]:
        """``regions`` less data tiling's where the weight is a constant: never slower than
        the default there (40 T x 6 workloads), its own measurements make it the floor; the
        pair cost a 16-measurement workload of the README's BERT every kernel."""
        floor = self.data_tiled if self.tiling_is_floor else None
        return {column: rows for column, rows in regions.items() if column != floor}

    def _regions(self, kernels: list[int], choice: dict[Shape, int]) -> dict[int, list[int]]:
        """Each chosen kernel's column (IREE's default aside) -> the rows it is chosen for."""
        return {
            column: [self.shape_index[shape] for shape, k in choice.items() if k == position]
            for position, column in enumerate(kernels)
            if not isinstance(self.candidates[column], DefaultCandidate)
        }

    def _unproven(
        self, estimate: np.ndarray, kernels: list[int], choice: dict[Shape, int]
    ) -> list[tuple[Candidate, Shape]]:
        """What the floor lacks (:meth:`_floor_wants`), then what the chosen kernels lack
        where they are chosen (:meth:`_wants`), one kernel first of a family never measured."""
        if found := self._floor_wants(estimate):
            return found
        wanted = self._wants(self._regions(kernels, choice), estimate)
        args = (self.settings.floor_only, self.book.never_measured(), self.iree_builds)
        return one_kernel_per_unseen_family(wanted, self.candidates, *args)

    def _floor_wants(self, estimate: np.ndarray) -> list[tuple[Candidate, Shape]]:
        """With an argument weight (:class:`.FloorBuilds`): data tiling's measurements and
        the default's beside them where it is estimated faster, then both builds at the
        range's ends and where they trade places, within :data:`.FLOOR_SHARE` of the
        budget, before the kernels' proofs (design.md section 7, step 6)."""
        if self.floor is None:
            return []
        wanted = self._wants(self.floor.region(estimate))
        most = int(FLOOR_SHARE * self.settings.budget / 2)
        row = None if wanted else self.floor.boundary_row(self.book.steady, max_pairs=most)
        wanted += [] if row is None else self._floor_pairs([row])
        return [p for p in wanted if (p[0].key(), p[1]) not in self.measured]

    def _floor_pairs(self, rows: Sequence[int]) -> list[tuple[Candidate, Shape]]:
        """IREE's default and its data tiling at each of ``rows``."""
        assert self.floor is not None
        builds = (self.floor.default, self.floor.tiled)
        return [(self.candidates[c], self.shapes[row]) for row in rows for c in builds]

    def _wants(
        self, regions: dict[int, list[int]], estimate: np.ndarray | None = None
    ) -> list[tuple[Candidate, Shape]]:
        """The unmeasured pairs that would prove each kernel of ``regions`` on its rows: its
        own measurements covering them (:meth:`RemainderClasses.unproven`, at rows where
        the first of :meth:`_builds` was measured when that costs nothing), then that build
        beside them, then IREE's builds where pairs farther away show it slower; with data
        tiling the floor, :meth:`_beside_floor`."""
        builds = [] if self.default is None else self._builds()
        rows, floor, self.again = self._measured_rows, self._floor_build(), set()
        # a row where the first build's pair costs nothing; with data tiling the floor, one
        # it lacks, so that the two are timed at once there (_beside_floor)
        prefer = rows(builds[0][0]) if builds else set()
        prefer = prefer if floor is None else set(range(len(self.shapes))) - prefer
        wanted = self.remainders.unproven(regions, rows, prefer)
        if floor is not None:
            return self._beside_floor(regions, wanted, floor, estimate)
        if not wanted and builds:
            (build, joint), needing = builds[0], self._needing_pairs(regions)
            near = self.remainders.near
            wanted = baseline_wants(joint, near, needing, rows, build, self.tile_steps)
        if not wanted and builds:  # a pair at the row itself decides
            beaten = self._against_iree_builds(regions)[1]
            wanted = contested_rows(beaten, rows, [build for build, _ in builds])
        return self._unmeasured(wanted)

    def _beside_floor(
        self,
        regions: dict[int, list[int]],
        wanted: list[tuple[int, int]],
        floor: int,
        estimate: np.ndarray | None,
    ) -> list[tuple[Candidate, Shape]]:
        """With data tiling the floor, its pairs timed side by side only (its records of two
        calls are no evidence, :func:`.baseline_evidence.against_builds`): beside the
        kernels' own measurements ``wanted`` (:func:`.beside_floor_by_gain`), then both
        together where no pair covers a row (:func:`.side_by_side_wants`), else at a row
        pairs farther away lose; both again (:attr:`again`) where either has a record."""
        rows, book = self._measured_rows, self.book
        if wanted:
            return self._unmeasured(beside_floor_by_gain(wanted, floor, estimate))
        near, needing = self.remainders.near, self._needing_pairs(regions)
        args = (rows, floor, book.together_rows, book.again_logs)
        found = side_by_side_wants(self.remainders.masks, near, needing, *args, self.tile_steps)
        found = found or contested_side_by_side(self._against_iree_builds(regions)[1], *args)
        pairs = [(self.candidates[c], self.shapes[r]) for k, r in found for c in (k, floor)]
        self.again = {s for c, s in pairs if (c.key(), s) in self.measured}
        return list(dict.fromkeys(pairs))

    def _unmeasured(self, wanted: Sequence[tuple[int, int]]) -> list[tuple[Candidate, Shape]]:
        pairs = [(self.candidates[column], self.shapes[row]) for column, row in wanted]
        return [p for p in dict.fromkeys(pairs) if (p[0].key(), p[1]) not in self.measured]

    def _floor_build(self) -> int | None:
        """Data tiling where it is the floor by itself: a constant weight, and no record of
        it failing (else: the default)."""
        tiled = DataTiledCandidate().key()
        failed = any(not math.isfinite(s) for (k, _), s in self.measured.items() if k == tiled)
        return self.data_tiled if self.tiling_is_floor and not failed else None

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> SearchResult:
        start = time.perf_counter()
        settings = self.settings
        budget = settings.search_budget  # the rest: exact builds
        first = self.first_pairs()
        print(
            f"dcmlir: search {self.workload.kind} key={self.workload.key}: "
            f"{len(self.candidates)} candidates, {len(self.shapes)} shapes, "
            f"budget {settings.budget} measurements",
            file=self.stream,
        )
        self.log.started(self.workload.key, settings.budget, len(self.keys), len(self.shapes))
        if self.known:  # from the records: no timing, and the default's pairs from the start
            self._measure(self.known, why="records")
            self.free = len(self.book)
        if self.floor is not None:  # its ends call by call first (design.md section 7, 6)
            self._measure(self._floor_pairs(self.floor.ends()), settings.duel_calls, why="floor")
        self._measure(first)
        rounds = 0
        history: list[dict[str, float]] = []
        progress = Progress(settings.budget, "search", self.stream)
        while True:
            progress.set(self.used)
            estimate, predicted = self.estimate()
            if budget - self.used <= self.settings.reserve:  # prove, discover no more
                estimate[:, self.book.never_measured()] = math.inf
            kernels, choice = self.select(estimate)
            chosen = [estimate[self.shape_index[s], kernels[k]] for s, k in choice.items()]
            history.append(
                {"round": rounds, "measurements": self.used, "kernels": len(kernels)}
                | {"estimated_geomean_us": finite_geomean(chosen) * 1e6}
            )
            remaining = budget - self.used
            if remaining <= 0:
                break
            # the last measurements go in small rounds, each proving what it changed first
            spread = remaining - self.settings.reserve
            limit = min(spread, settings.verify_batch) if spread > 0 else settings.max_kernels
            seconds, tile, again = self._seconds, self.rows.tile, self.book.again_logs
            duel = self.duel.pairs(estimate, self.shapes, settings, seconds, tile, remaining, again)
            floor = self._floor_wants(estimate)  # side by side, call by call, as a duel
            proofs = [] if duel or floor else self._unproven(estimate, kernels, choice)
            pairs = (
                duel
                or floor
                or proofs
                or self.verification_pairs(
                    estimate, predicted, kernels, choice, min(limit, remaining), spread > 0
                )
            )
            if not pairs:
                break
            why = "duel" if duel else "floor" if floor else "proofs" if proofs else "verification"
            calls = settings.duel_calls if duel or floor else None
            again = self.duel.again if duel else (self.again if not floor else set())
            args = (estimate, self.columns, self.shape_index, set(self.book.never_measured()))
            firsts = self.chase.firsts(pairs[:remaining], *args)
            self._measure(pairs[:remaining], calls, again, why, estimate, kernels)
            self.chase.count(firsts, self.measured)
            rounds += 1
        estimate, predicted = self.estimate()
        grid = [c for c, candidate in enumerate(self.candidates) if self.rows.tile(candidate)]
        judged = measured_favoured(estimate, self.book.mask(), settings.measured_margin, grid)
        kernels, choice = self._proven_selection(judged)
        chosen = [self.candidates[c] for c in kernels]
        left = settings.budget - self.used if settings.exact_budget else 0  # for exact builds
        args = (self.book, lambda s: chosen[choice[s]], chosen, settings.duel_calls, left)
        exact = exact_builds(self.workload, self.shapes, *args)
        self.log.round(self, "exact")  # the pairs exact_builds timed, if any
        progress.set(progress.total)
        self.log.selected(self.used, [c.key() for c in chosen], choice)
        return SearchResult(
            workload=self.workload,
            shapes=self.shapes,
            candidates=self.candidates,
            kernels=chosen,
            choice=choice,
            estimate=estimate,
            predicted=predicted,
            measured=dict(self.measured),
            measurements=self.used,
            measured_now=self.book.measured_now,
            rounds=rounds,
            seconds=time.perf_counter() - start,
            history=history,
            exact=exact,
        )

    def first_pairs(self) -> list[tuple[Candidate, Shape]]:
        """What is measured first (:mod:`.first_measurements`)."""
        budget, most = self.settings.budget, self.settings.first_room
        return first_measurements(
            self.candidates, self.shapes, self.rows, self._picked, budget, most
        )

    def _picked(self, candidate: Candidate) -> Shape:
        return tuple(self._cherry_pick(self.workload, candidate, self.shapes))
