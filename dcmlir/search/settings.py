"""The search's settings: its budget and how it is shared out (docs/design.md section 7)."""

from __future__ import annotations

from dataclasses import dataclass

from dcmlir.search.exact_builds import EXACT_SHARE

__all__ = ["FIRST_MOST", "SearchSettings"]

FIRST_MOST = 0.4
"""Of what exact builds leave, at most, for ``first_least`` first measurements."""


@dataclass(frozen=True)
class SearchSettings:
    budget: int = 400  # timed (candidate, shape) pairs, records included
    max_kernels: int = 8
    top_k: int = 4
    verify_batch: int = 64  # pairs measured per verification round
    verify_per_kernel: int = 2  # a chosen kernel's own shapes per round: a refit comes first
    first_share: float = 0.25  # of the budget, at most, for the first measurements ...
    first_least: int = 24  # ... but up to this many where the search has 2x (first_room)
    contender_margin: float = 0.15  # a runner-up within 15% of the choice is verified too
    tie_margin: float = 0.02  # kernels this close on a shape are a tie (one takes the region)
    measured_margin: float = 0.05  # at the end, an unmeasured pair beside a measured one: slower
    weight_layouts: int = 2  # a constant weight's layouts in one workload's kernels (1 or 2)
    duel_share: float = 0.15  # of the budget, at most, for side-by-side family duels
    duel_calls: int = 50  # a duel's pair is timed call by call, this many samples each
    max_shapes: int = 256  # shapes in the estimated table; larger ranges are sampled
    seed: int = 0
    exact_share: float = EXACT_SHARE  # of the budget, at most, for exact builds (0: none)
    floor_only: frozenset[str] = frozenset()  # IREE builds (keys) measured as the floor, never run

    @property
    def exact_budget(self) -> int:
        """Measurements kept for exact builds: ``exact_share`` of the budget, none where
        that is less than one shape's pair."""
        kept = int(self.budget * self.exact_share)
        return kept if kept >= 2 else 0

    @property
    def search_budget(self) -> int:
        """What the search's rounds may spend: the budget less what exact builds keep."""
        return self.budget - self.exact_budget

    @property
    def first_room(self) -> int:
        """First measurements (cherry-picks), at most: ``first_share`` of the budget, but
        ``first_least`` (at most 40% of what exact builds leave) where that leaves twice as
        many. Fewer and the regressor ranks the kernels it has not seen by the few it has,
        and a seed decides which (docs/design.md section 7, step 1)."""
        share = int(self.budget * self.first_share)
        searched = self.search_budget
        if searched < 2 * self.first_least:  # too small to fit the model: prove the picks
            return share
        return max(share, min(self.first_least, int(searched * FIRST_MOST)))

    @property
    def reserve(self) -> int:
        """The last measurements, kept back for proving the choice: only kernels already
        measured are selected while they are spent (docs/design.md section 7, step 4)."""
        return min(max(2 * self.max_kernels, self.budget // 10), self.budget // 4)

    def __post_init__(self) -> None:
        if min(self.budget, self.max_kernels, self.top_k, self.verify_batch, self.duel_calls) < 1:
            raise ValueError("budget, max_kernels, top_k, verify_batch and duel_calls must be >= 1")
        if self.verify_per_kernel < 1 or not 0 < self.first_share <= 1:
            raise ValueError("verify_per_kernel must be >= 1 and first_share in (0, 1]")
        if self.first_least < 0:
            raise ValueError("first_least must be >= 0")
        if not 0 <= self.exact_share < 1:
            raise ValueError("exact_share must be in [0, 1)")
        if self.measured_margin < 0:
            raise ValueError("measured_margin must be >= 0")
        if self.weight_layouts not in (1, 2):
            raise ValueError("weight_layouts must be 1 or 2")
