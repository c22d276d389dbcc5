"""IREE's two builds as the floor with an argument weight: where they trade places, bisected;
data tiling estimated from the default through their measured ratio."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from test_database import make
from test_mmt4d import FAMILY, ROWS, _argument_weight
from test_packed import constant_projection, workload_of

from dcmlir.search.floor_builds import RESOLUTION, SAME, WASTE_PARTS, FloorBuilds, steady
from dcmlir.search.shape_generic import SearchSettings, ShapeGenericSearch

DEFAULT, TILED = 0, 1


def _bisect(
    shapes: list[tuple[int, ...]], ratio: Callable[[tuple[int, ...]], float], start: list[int]
) -> list[int]:
    """Measure both builds where :meth:`FloorBuilds.boundary_row` asks until it asks nothing: the
    rows asked, in order. ``ratio(shape)``: data tiling's time over the default's."""
    seconds: dict[tuple[int, int], float] = {}

    def measure(row: int) -> None:
        seconds[DEFAULT, row] = 1e-5
        seconds[TILED, row] = 1e-5 * ratio(shapes[row])

    for row in start:
        measure(row)
    asked: list[int] = []
    floor = FloorBuilds(shapes, DEFAULT, TILED)
    while (row := floor.boundary_row(lambda c, r: seconds.get((c, r)), 20)) is not None:
        assert row not in asked and len(asked) < 20
        asked.append(row)
        measure(row)
    return asked


@pytest.mark.parametrize("crossing", [5, 20, 90])
def test_two_pairs_that_disagree_are_bisected_to_the_crossing(crossing: int) -> None:
    """Pairs at T = 1 (data tiling slower) and 128 (faster) only: the estimate would
    place the crossing anywhere between; bisection in log T settles it to within
    :data:`RESOLUTION`, in about log2(log 128 / log 1.5) steps."""
    shapes = [(t,) for t in range(1, 129)]
    ratio = lambda s: 1.6 if s[0] < crossing else 0.6  # noqa: E731
    asked = _bisect(shapes, ratio, [0, 127])
    assert 3 <= len(asked) <= 5
    measured = sorted([1, 128, *(shapes[r][0] for r in asked)])
    below = max(t for t in measured if t < crossing)
    above = min(t for t in measured if t >= crossing)
    assert above / below <= RESOLUTION


def test_pairs_the_floor_did_not_ask_for_do_not_spend_its_share() -> None:
    """Both builds measured at eight rows by the kernels' proofs (data tiling slower at
    each, up to T = 40): the floor still bisects between them and the range's end, where
    it is faster, with its own pairs (at budget 60 on attention context's grid, 7 of 9
    pairs were the proofs', and the floor stopped before the crossing)."""
    shapes = [(t,) for t in range(1, 129)]
    seconds: dict[tuple[int, int], float] = {}
    for t in (1, 2, 3, 5, 8, 13, 21, 34, 40, 128):  # the ends and the proofs' pairs
        seconds[DEFAULT, t - 1] = 1e-5
        seconds[TILED, t - 1] = 1e-5 * (1.6 if t < 90 else 0.6)
    floor = FloorBuilds(shapes, DEFAULT, TILED)
    row = floor.boundary_row(lambda c, r: seconds.get((c, r)), max_pairs=4)
    assert row is not None and 40 < shapes[row][0] < 128
    seconds[DEFAULT, row], seconds[TILED, row] = 1e-5, 1e-5 * (1.6 if row < 89 else 0.6)
    row = floor.boundary_row(lambda c, r: seconds.get((c, r)), max_pairs=4)
    assert row is not None  # the second of its own: with the two ends, its share of four
    seconds[DEFAULT, row], seconds[TILED, row] = 1e-5, 1e-5 * (1.6 if row < 89 else 0.6)
    assert floor.boundary_row(lambda c, r: seconds.get((c, r)), max_pairs=4) is None


def test_the_ranges_ends_come_first() -> None:
    """Pairs at T = 9 (data tiling faster by one sample) and 128 only: T = 1 is measured
    next, and the stretch below 9 where data tiling is slower is found from there."""
    shapes = [(t,) for t in range(1, 129)]
    asked = _bisect(shapes, lambda s: 1.7 if s[0] < 9 else 0.85, [8, 127])
    assert asked[:2] == [0, 126]  # T = 1, and 127: the largest cutting the default's tiles
    assert all(shapes[r][0] < 9 for r in asked[2:])
    assert max(shapes[r][0] for r in asked[2:]) * RESOLUTION >= 9


def test_the_floors_ends_include_the_largest_shape_cutting_the_defaults_tiles() -> None:
    """IREE's default distributes M and N in 64 x 64 tiles; on an AVX2 Zen 3 it takes
    368 us at 128 x 128 of attention scores and 1234 at 127 x 127. The largest shape whose
    every extent cuts that tile is an end, where there is one besides the other two."""
    values = [1, 2, 5, 64, 100, 127, 128]
    shapes = [(t, u) for t in values for u in values]
    ends = [shapes[r] for r in FloorBuilds(shapes, DEFAULT, TILED).ends()]
    assert ends == [(1, 1), (128, 128), (127, 127)]
    only = [(t,) for t in (64, 128)]  # none cuts it
    assert FloorBuilds(only, DEFAULT, TILED).ends() == [0, 1]


def test_ties_and_agreeing_pairs_ask_nothing() -> None:
    """Within 3% is noise, not a side; pairs on one side have no boundary between them."""
    shapes = [(t,) for t in range(1, 129)]
    assert _bisect(shapes, lambda s: 1.02 if s[0] < 64 else 0.6, [0, 126, 127]) == []
    assert _bisect(shapes, lambda s: 0.9 if s[0] < 64 else 0.6, [0, 126, 127]) == []


def test_a_pair_between_speaks_for_the_stretch_beside_it() -> None:
    """Pairs at T = 1, 8 (slower) and 128 (faster): only 8..128 is bisected, never 1..128."""
    shapes = [(t,) for t in range(1, 129)]
    asked = _bisect(shapes, lambda s: 1.6 if s[0] < 20 else 0.6, [0, 7, 127])
    assert all(shapes[r][0] > 8 for r in asked)


def test_a_grid_of_two_dynamic_extents_is_bisected_along_the_line_between_pairs() -> None:
    """Attention context on its T x T' grid, the pairs of the budget-60 tune that ran the
    default at T = 17..37 (8 x 8, 44 x 128, 128 x 128): data tiling is measured between
    8 x 8 and 44 x 128 until the nearest pairs on each side are 1.5x apart, once the
    range's smallest shape is measured too."""
    values = [1, 2, 3, 4, 5, 6, 8, 11, 13, 17, 23, 32, 44, 64, 90, 128]
    shapes = [(t, u) for t in values for u in values]
    ratio = lambda s: 1.64 if math.sqrt(s[0] * s[1]) < 11 else 0.6  # noqa: E731
    ends = ((90, 90), (128, 128))  # the largest cutting the default's 64 x 64 tiles is one
    start = [shapes.index(s) for s in ((8, 8), (44, 128), *ends)]
    asked = [shapes[r] for r in _bisect(shapes, ratio, start)]
    assert asked[0] == (1, 1) and len(asked) <= 5  # the smallest end first
    assert all(8 < t <= 90 and 8 < u <= 128 for t, u in asked[1:])
    assert all(math.sqrt(t * u) < 11 * RESOLUTION**2 for t, u in asked[1:])


def test_data_tiling_is_estimated_through_its_ratio_to_the_default() -> None:
    """Two pairs show data tiling 0.81x and 0.82x the default (attention scores, T = 29 and
    105); estimated on its own it was 4% slower at T = 61 between them and the plan ran
    the default there. Through the ratio it stays 0.81-0.82x the default's estimate;
    measured rows keep their measurement; pairs beyond a nearer one on the other side of
    the crossing do not pull it back; a tie leaves the row to the default; no pair, or
    a build that never ran, is left alone."""
    shapes = [(t,) for t in range(1, 129)]
    floor = FloorBuilds(shapes, DEFAULT, TILED)
    seconds = {(DEFAULT, 28): 40e-6, (TILED, 28): 32.4e-6, (DEFAULT, 104): 400e-6}
    seconds[TILED, 104] = 328e-6
    seconds[TILED, 7] = 20e-6  # data tiling alone at T = 8: no pair
    table = np.zeros((128, 2))
    table[:, DEFAULT] = [1e-6 * t * t / 20 for t in range(1, 129)]
    table[:, TILED] = table[:, DEFAULT] * 1.05
    table[7, TILED] = 20e-6
    before = table.copy()
    floor.estimate(table, lambda c, r: seconds.get((c, r)))
    ratio = table[:, TILED] / table[:, DEFAULT]
    assert 0.80 < ratio[60] < 0.83 and table[7, TILED] == 20e-6
    assert np.array_equal(table[:, DEFAULT], before[:, DEFAULT])
    far = {9: 1.42, 17: 1.34, 24: 1.27, 34: 0.77, 128: 0.93}  # attention scores, budget 60
    held = {(c, t - 1): 1e-5 * (r if c == TILED else 1) for t, r in far.items() for c in (0, 1)}
    beyond = before.copy()
    floor.estimate(beyond, lambda c, r: held.get((c, r)))
    faster = beyond[:, TILED] < beyond[:, DEFAULT]
    assert faster[34:127].all() and not faster[:24].any()  # measured rows: left alone
    tie = before.copy()  # one pair, a tie: the default keeps every row
    floor.estimate(tie, lambda c, r: {(0, 16): 5e-5, (1, 16): 4.9e-5}.get((c, r)))
    assert (tie[:, TILED] > tie[:, DEFAULT])[np.arange(128) != 16].all()
    alone = before.copy()
    floor.estimate(alone, lambda c, r: 20e-6 if (c, r) == (TILED, 7) else None)
    assert np.array_equal(alone, before)
    never_ran = before.copy()
    never_ran[:, TILED] = math.inf
    floor.estimate(never_ran, lambda c, r: seconds.get((c, r)))
    assert np.isinf(never_ran[:, TILED]).all()


def test_the_defaults_steps_are_not_carried_into_data_tilings_estimate() -> None:
    """IREE's default pads a loop data tiling does not pad (attention context's K,
    never_slower.py budget 60): flat across each of its tiles, data tiling grows across
    them. Pairs at T = 8 and 15 say data tiling 1.0x and 1.12x; through the plain ratio it
    is slower at T = 9 too, where it is 0.74x. With the default's waste (its time over its
    time unpadded), taken whole, it is faster at 9 and still slower at 15, and the
    measured pairs keep their own ratio."""
    shapes = [(t,) for t in range(1, 33)]
    floor_seconds, rate = 3.5e-6, 0.4e-6  # the call floor; seconds per row of work

    def default(t: int) -> float:
        return floor_seconds + rate * -(-t // 8) * 8

    def tiled(t: int) -> float:
        return 1.67e-6 + 0.63e-6 * t  # 1.0x the default at 8, 0.74x at 9, 1.12x at 15

    pairs = (7, 14, 31)  # rows of T = 8, 15, 32
    seconds = {(c, r): (default, tiled)[c](r + 1) for r in pairs for c in (DEFAULT, TILED)}
    table = np.zeros((32, 2))
    table[:, DEFAULT] = [default(t) for t in range(1, 33)]
    table[:, TILED] = table[:, DEFAULT]
    plain = table.copy()
    FloorBuilds(shapes, DEFAULT, TILED).estimate(plain, lambda c, r: seconds.get((c, r)))
    assert plain[8, TILED] > plain[8, DEFAULT]  # T = 9: the default's step carried over
    unpadded = np.array([floor_seconds + rate * t for t in range(1, 33)])
    waste = table[:, DEFAULT] / unpadded
    stepped = table.copy()
    FloorBuilds(shapes, DEFAULT, TILED).estimate(stepped, lambda c, r: seconds.get((c, r)), waste)
    assert stepped[8, TILED] < stepped[8, DEFAULT]
    # the nearest pair's (T = 8, no waste) 1.0 net of the default's waste at T = 9
    ratio = stepped[8, TILED] / stepped[8, DEFAULT]
    assert ratio == pytest.approx(1 / waste[8], rel=0.01)
    assert ratio == pytest.approx(tiled(9) / default(9), rel=0.05)
    assert stepped[13, TILED] > stepped[13, DEFAULT]  # T = 14: the default again
    assert stepped[14, TILED] / stepped[14, DEFAULT] == pytest.approx(tiled(15) / default(15))


def test_steps_both_builds_share_are_not_taken_out_of_the_ratio() -> None:
    """The cost model steps IREE's default every 8 T on M and N, IREE's default steps every
    16 there, and so does data tiling (8 heads of size 128, never_slower.py budget 60).
    Pairs at T = 33 and 57 say data tiling 0.85x and 0.91x; through the default's whole
    waste they are 1.02x once its padding is out, and T = 63 (the model's default barely
    padded there) comes out a tie that the default keeps, where data tiling was 0.76x.
    The waste the search takes out is on the reduction loops only (:data:`WASTE_PARTS`:
    none here), and the plain ratio gives T = 63 to data tiling."""
    shapes = [(t,) for t in range(1, 129)]
    model_default = np.array([3.0 + -(-t // 8) * 8 for t in range(1, 129)])
    waste = model_default / np.array([3.0 + t for t in range(1, 129)])
    default = np.array([1e-6 * (3.0 + -(-t // 16) * 16) for t in range(1, 129)])
    pairs = {0: 1.5, 32: 0.85, 56: 0.91, 127: 0.69}  # rows of T = 1, 33, 57, 128
    seconds = {(TILED, r): default[r] * ratio for r, ratio in pairs.items()}
    seconds |= {(DEFAULT, r): default[r] for r in range(128)}  # beside the kernels

    def run(waste: np.ndarray | None) -> np.ndarray:
        table = np.stack([default, default], axis=1)
        FloorBuilds(shapes, DEFAULT, TILED).estimate(table, lambda c, r: seconds.get((c, r)), waste)
        return table[:, TILED] / table[:, DEFAULT]

    assert WASTE_PARTS == "reduction"
    assert run(waste)[62] > 1 / (1 + SAME)  # the M and N waste: the default keeps T = 63
    assert run(None)[62] < 1 / (1 + SAME)  # without it: data tiling
    assert run(None)[[32, 56]] == pytest.approx([0.85, 0.91])  # the pairs keep their own


def test_a_pair_outvoted_by_its_neighbours_is_noise() -> None:
    """The pairs of a budget-240 tune of attention scores on its T x T' grid: 18 x 18 said
    data tiling 0.83x the default among four pairs within 2x that said 1.09-1.45x (the
    bench: 0.96-1.08x at T = 17 and 19); the plan ran data tiling at T = 19, 1.18x slower
    than the default. Left out, the default keeps 18 x 18 and 19 x 19 and no crossing is
    bisected there; with one neighbour agreeing, the pair stands."""
    values = [1, 4, 10, 16, 18, 19, 24, 27, 59, 128]
    shapes = [(t, u) for t in values for u in values]
    pairs = {(1, 1): 1.70, (16, 16): 1.45, (18, 18): 0.83, (19, 24): 1.24, (19, 10): 1.20}
    pairs |= {(27, 27): 1.09, (59, 59): 0.71, (128, 128): 0.84}

    def run(held: dict[tuple[int, int], float]) -> tuple[np.ndarray, int | None]:
        seconds = {
            (c, shapes.index(s)): 1e-5 * (r if c else 1) for s, r in held.items() for c in (0, 1)
        }
        floor = FloorBuilds(shapes, DEFAULT, TILED)
        table = np.full((len(shapes), 2), 1e-5)
        for (column, row), value in seconds.items():  # as the search: measured first
            table[row, column] = value
        floor.estimate(table, lambda c, r: seconds.get((c, r)))
        return table, floor.boundary_row(lambda c, r: seconds.get((c, r)), 20)

    table, asked = run(pairs)
    for shape in ((18, 18), (19, 19)):
        row = shapes.index(shape)
        assert table[row, TILED] > table[row, DEFAULT]
    assert asked is None or shapes[asked] not in {(16, 16), (18, 19), (19, 18), (19, 19)}
    table, _ = run(pairs | {(19, 19): 0.9})  # a neighbour agrees: both stand
    assert table[shapes.index((18, 18)), TILED] < table[shapes.index((18, 18)), DEFAULT]


def test_a_pairs_ratio_is_taken_from_the_steady_calls() -> None:
    """IREE's default at 15 x 15 of attention scores, call by call: 11.6 us at best, 16.5
    at the median (a run of slow calls); data tiling 14.1 and 15.1. The medians said data
    tiling 0.92x the default (the bench: 1.27x) and the plan ran it at T = 8..15, up to
    1.7x slower; the lower quartiles say 1.2x. Records timed in samples of many calls
    keep their median."""
    default = [11.6e-6] * 20 + [16.5e-6] * 10 + [20e-6] * 20
    tiled = [14.1e-6] * 14 + [15.1e-6] * 28 + [30e-6] * 8
    by_call = {"sampling": "call-by-call"}
    low_default = steady(make("default", times=tuple(default), **by_call))
    low_tiled = steady(make("datatiled", times=tuple(tiled), **by_call))
    assert 1.15 < low_tiled / low_default < 1.3
    assert float(np.median(tiled)) / float(np.median(default)) < 0.95
    assert steady(make("default", times=tuple(default))) == float(np.median(default))


@pytest.mark.parametrize("constant", [True, False])
def test_the_search_measures_the_boundary_after_the_floor_and_before_the_kernels(
    constant: bool,
) -> None:
    """With an argument weight, once data tiling's estimated region is proven, both builds
    are measured between the pairs that disagree before any kernel's proof; with a
    constant weight data tiling is the floor by itself and there is no boundary; a
    spent share of the budget asks nothing either."""
    text = constant_projection("nk") if constant else _argument_weight(constant_projection("nk"))
    workload = workload_of(text)
    search = ShapeGenericSearch(workload, None, None, FAMILY, shapes=ROWS)  # type: ignore[arg-type]
    assert (search.floor is None) == constant
    tiled, m8 = 2, 4
    for t, ratio in ((1, 1.6), (32, 0.6)):
        search.measured[("default", (t,))] = 1e-5
        search.measured[("datatiled", (t,))] = 1e-5 * ratio
    search.measured[(FAMILY[m8].key(), (32,))] = 1e-6
    table = np.full((len(ROWS), len(FAMILY)), 1e-5)
    table[:, tiled] = [1.6e-5 if t < 8 else 0.6e-5 for t in range(1, 33)]
    table[:, m8] = 1e-6
    choice = {shape: 0 for shape in ROWS}
    wants = {(c.key(), s) for c, s in search._unproven(table, [m8], choice)}
    if constant:  # the kernel's own proofs, data tiling beside each where it has no record
        kernel = {s for key, s in wants if key == FAMILY[m8].key()}
        beside = {("datatiled", s) for s in kernel if ("datatiled", s) not in search.measured}
        assert kernel and beside and wants == {(FAMILY[m8].key(), s) for s in kernel} | beside
        return
    assert wants == {("default", (6,)), ("datatiled", (6,))}  # sqrt(1 x 32) = 5.7
    search.settings = SearchSettings(budget=20)  # 2 pairs of 20 measurements: a fifth
    later = search._unproven(table, [m8], choice)
    assert all(c.key() == FAMILY[m8].key() for c, _ in later), later


def test_the_floors_ends_are_timed_call_by_call_before_anything_else(tmp_path) -> None:
    """A search with an argument weight starts with both builds at the range's smallest
    and largest shapes, call by call (``duel_calls``), before the first measurements,
    which would otherwise time them in samples of the minimum time among many kernels."""
    import io

    from dcmlir.cost_model import TrivialCostModel
    from dcmlir.records import RecordDatabase
    from dcmlir.target import CpuTarget
    from dcmlir.testing import FakeMeasurer

    workload = workload_of(_argument_weight(constant_projection("nk")))
    calls: list[tuple[list[tuple[str, tuple[int, ...]]], int | None]] = []

    class Watched(FakeMeasurer):
        def measure_pairs(self, pairs, calls_=None, **kwargs):  # type: ignore[no-untyped-def]
            asked = kwargs.get("calls", calls_)
            calls.append(([(c.key(), s) for c, s in pairs], asked))
            return super().measure_pairs(pairs, asked)

    settings = SearchSettings(budget=24, max_kernels=2)
    ShapeGenericSearch(
        workload,
        Watched(workload, RecordDatabase(tmp_path / "r.jsonl", fsync=False)),  # type: ignore[arg-type]
        TrivialCostModel(workload, CpuTarget(), seed=0),
        FAMILY,
        settings,
        stream=io.StringIO(),
        shapes=ROWS,
    ).run()
    first, asked = calls[0]
    ends = [ROWS[0], ROWS[-1]]
    assert first == [(k, s) for s in ends for k in ("default", "datatiled")]
    assert asked == settings.duel_calls
    assert all(pair not in first for pair in calls[1][0])  # the first measurements skip them
