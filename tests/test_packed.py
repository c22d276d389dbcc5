"""The packed (data-tiled) family: candidates, the weight layout, the tile-grid model,
selection by family, and a real tune + compile of a constant-weight projection."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dcmlir
from dcmlir.cost_model.row_tiles import fit_tile_grid, tile_grid_estimate, two_points
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.driver.loading import GLOBAL_OPT, lower_to_global_optimization
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.iree import load_function
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.ir.pass_base import PassContext
from dcmlir.layouts import fixed_weight, weight_seed
from dcmlir.passes.emit_dispatch import emit_dispatch
from dcmlir.search.selection import kernel_families, select_kernels
from dcmlir.search.shape_generic import SearchSettings
from dcmlir.space import (
    PACKED_M0,
    DataTiledCandidate,
    DefaultCandidate,
    PackedCandidate,
    candidate_from_json,
    candidate_from_key,
    packing_problem,
    workload_space,
)
from dcmlir.target import CpuTarget
from dcmlir.workload import Workload, workloads

RNG = np.random.default_rng(3)
WEIGHT = (RNG.standard_normal((48, 64)) * 0.1).astype(np.float32)  # N x K: x @ W^T


def constant_projection(layout: str = "nk") -> str:
    """``?x64 -> ?x48`` with a constant weight (``N x K`` or ``K x N``) and a bias consumer."""
    weight = WEIGHT if layout == "nk" else np.ascontiguousarray(WEIGHT.T)
    shape = "x".join(map(str, weight.shape))
    rhs = "(d1, d2)" if layout == "nk" else "(d2, d1)"
    return f"""
util.global private @w = dense_resource<weight> : tensor<{shape}xf32>
func.func @main(%x: tensor<?x64xf32>) -> tensor<?x48xf32> {{
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %w = util.global.load @w : tensor<{shape}xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
      affine_map<(d0, d1, d2) -> {rhs}>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%x, %w : tensor<?x64xf32>, tensor<{shape}xf32>) outs(%init : tensor<?x48xf32>)
      -> tensor<?x48xf32>
  return %r : tensor<?x48xf32>
}}
{{-#
  dialect_resources: {{ builtin: {{ weight: "0x04000000{weight.tobytes().hex()}" }} }}
#-}}
"""


def workload_of(text: str) -> Workload:
    with ir.Context():
        module = parse_module(text)
        ((_, found),) = list(workloads(module.operation))
    assert isinstance(found, Workload)
    return found


def assert_projects(function: Any, rows: Sequence[int]) -> None:
    """``function(x)`` is ``x @ WEIGHT^T`` (float64 within 1e-4 of the scale) at each M."""
    for m in rows:
        x = RNG.standard_normal((m, 64)).astype(np.float32)
        (out,) = function(x)
        expected = x.astype(np.float64) @ WEIGHT.T.astype(np.float64)
        assert out.shape == (m, 48)
        if m:
            assert np.max(np.abs(out - expected)) <= 1e-4 * np.max(np.abs(expected))


ARGUMENT_WEIGHT = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<64x48xf32>, %i: tensor<?x48xf32>) -> tensor<?x48xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x48xf32>) outs(%i : tensor<?x48xf32>) -> tensor<?x48xf32>
  return %r : tensor<?x48xf32>
}
"""


# --- candidates and the space ------------------------------------------------------------


def test_packed_candidate_round_trips_and_checks_the_target_lanes() -> None:
    candidate = PackedCandidate(4, 16)
    assert candidate.key() == "packed:m4n16k1"
    assert candidate_from_key("packed:m4n16k1") == candidate
    assert candidate_from_json(candidate.to_json()) == candidate
    assert PackedCandidate(4, 16).problems(CpuTarget(vector_bits=512)) == []
    assert "8 f32 lanes" in PackedCandidate(4, 16).problems(CpuTarget(vector_bits=256))[0]
    with pytest.raises(ValueError, match="m0=0 must be a positive integer"):
        PackedCandidate(0, 16)


def test_only_projections_with_a_constant_weight_get_the_packed_family() -> None:
    target = CpuTarget(vector_bits=512)
    constant = workload_of(constant_projection())
    assert constant.constant_operands == (1,)
    packed = [c for c in workload_space(target, constant) if isinstance(c, PackedCandidate)]
    assert [c.m0 for c in packed] == [1, 2, 4, 8, 16] and {c.n0 for c in packed} == {16}
    argument = workload_of(ARGUMENT_WEIGHT)
    assert "not a constant" in (packing_problem(argument) or "")
    assert not any(isinstance(c, PackedCandidate) for c in workload_space(target, argument))


def test_fixed_weight_is_the_same_array_everywhere_and_never_a_splat() -> None:
    one = fixed_weight((64, 48), "float32", weight_seed("0123abcd" + "0" * 8))
    two = fixed_weight((64, 48), "float32", weight_seed("0123abcd" + "f" * 8))
    assert np.array_equal(one, two) and one.dtype == np.float32
    assert len(np.unique(one)) > 100 and np.abs(one).max() <= 1.0


# --- the tile-grid model --------------------------------------------------------------------


def test_tile_grid_line_is_flat_within_a_tile_and_steps_per_tile() -> None:
    line = fit_tile_grid(8, [(8, 110.0), (128, 1400.0)])
    assert line is not None
    assert line.predict(1) == line.predict(8) == pytest.approx(110.0)
    assert line.predict(9) == pytest.approx(110.0 + 86.0)
    assert fit_tile_grid(8, [(3, 1.0), (8, 1.0)]) is None  # one tile count: no line
    # a measured tile count answers for every M with that count; the rest follow the line
    found = tile_grid_estimate(4, [(4, 100.0), (128, 3200.0), (6, 140.0)], [1, 5, 7, 9])
    assert found is not None
    assert found[0] == pytest.approx(100.0) and found[1] == found[2] == pytest.approx(140.0)
    assert two_points(16, 1, 128) == [16, 128]
    assert two_points(16, 1, 10) == [10]
    assert two_points(1, 1, 128) == [1, 128]


def test_selection_keeps_one_family_and_merges_near_ties() -> None:
    candidates = [DefaultCandidate(), *(PackedCandidate(m0, 16) for m0 in (1, 4, 16))]
    shapes = [(t,) for t in range(1, 33)]
    # default: 10 us per row; packed: 20 us + one (5 + M0) us step per M0-row tile
    table = np.array(
        [
            [10.0 * t] + [20.0 + math.ceil(t / m0) * (5.0 + m0) for m0 in (1, 4, 16)]
            for (t,) in shapes
        ]
    )
    assert kernel_families(candidates) == [[0], [1, 2, 3]]
    # faster overall, but slower than the default at T = 1, 2: the default's family wins
    used, _ = select_kernels(table, shapes, candidates, SearchSettings())
    assert used == [0]
    table[:, 0] *= 3  # a default 30 us per row: the packed family is never slower
    used, choice = select_kernels(table, shapes, candidates, SearchSettings())
    assert set(used) <= {1, 2, 3}  # the packed family is faster overall: no default mixed in
    picked = {shape: candidates[used[k]].key() for shape, k in choice.items()}
    assert picked[(1,)] == "packed:m1n16k1"
    assert picked[(6,)] == "packed:m4n16k1"
    assert picked[(32,)] == "packed:m16n16k1"
    # two kernels 1% apart, the better one alternating with M: one takes every shape
    pair = [PackedCandidate(4, 16), PackedCandidate(8, 16)]
    wobble = np.array([[100.0, 101.0] if t % 2 else [101.0, 100.0] for (t,) in shapes])
    used, choice = select_kernels(wobble, shapes, pair, SearchSettings())
    assert len(set(choice.values())) == 1


def test_two_families_together_only_where_each_alone_loses_to_an_iree_build() -> None:
    """`dense_out` on two threads: the packed family lost to IREE's default at small T, the
    codegen family to data tiling at large T. Together (a second layout of the weight) they
    lose nowhere; with one layout allowed, or where one family alone never loses, one family
    is kept."""
    candidates = [
        DefaultCandidate(),
        candidate_from_key("cpu:wg8x128:v4x64:k1"),
        PackedCandidate(4, 16),
        DataTiledCandidate(),
    ]
    shapes = [(t,) for t in range(1, 33)]
    table = np.array(
        [[10.0 + t, 5.0 + 1.2 * t, 15.0 if t <= 4 else np.inf, 25.0 + 0.4 * t] for (t,) in shapes]
    )
    assert kernel_families(candidates) == [[0, 1], [2, 3]]

    def picks(settings: SearchSettings) -> dict[int, str]:
        used, choice = select_kernels(table, shapes, candidates, settings)
        return {shape[0]: candidates[used[k]].key() for shape, k in choice.items()}

    mixed = picks(SearchSettings())
    assert all(mixed[t] == "cpu:wg8x128:v4x64:k1" for t in range(1, 25))  # faster to T = 25
    assert all(mixed[t] == "datatiled" for t in range(27, 33))  # and data tiling after it
    one = picks(SearchSettings(weight_layouts=1))
    assert set(one.values()) <= {"default", "cpu:wg8x128:v4x64:k1"}  # loses least alone
    table[:, 1] = 4.0 + 0.3 * table[:, 3] / 0.4  # the codegen family alone never loses now
    assert set(picks(SearchSettings()).values()) <= {"default", "cpu:wg8x128:v4x64:k1"}
    with pytest.raises(ValueError, match="weight_layouts must be 1 or 2"):
        SearchSettings(weight_layouts=3)


# --- emission ------------------------------------------------------------------------------


def test_packed_plan_on_an_argument_weight_warns_that_it_packs_per_call() -> None:
    workload = workload_of(ARGUMENT_WEIGHT)
    shapes = [(m,) for m in range(1, 9)]
    kernels = [PackedCandidate(4, 16)]
    plan = Plan(
        CpuTarget(vector_bits=512),
        "arg.mlir",
        (
            WorkloadPlan.build(
                workload,
                kernels,
                dict.fromkeys(shapes, 0),
                {s: [1e-6] for s in shapes},
                ranges={0: (1, 8)},
            ),
        ),
    )
    with ir.Context():
        module = parse_module(ARGUMENT_WEIGHT)
        engine = DiagnosticEngine("arg.mlir")
        assert emit_dispatch(PassContext(engine, io.StringIO()), module.operation, plan) == 1
        text = str(module)
    assert any(
        d.severity == "warning" and "pack it on every call" in d.message for d in engine.diagnostics
    )
    assert "iree_encoding.set_encoding" in text and "unset_encoding" in text


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_constant_projection_tunes_to_packed_kernels_and_compiles_right(
    tmp_path: Path, layout: str
) -> None:
    source = tmp_path / "proj.mlir"
    source.write_text(constant_projection(layout))
    report = dcmlir.tune(
        source,
        dims=["1:24"],
        budget=30,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=io.StringIO(),
        min_time=0.002,
        rounds=2,
    )
    (item,) = report.workloads
    measured = {key for key, _ in item.search.measured}
    lanes = CpuTarget().lanes  # N0: the host's f32 lanes (16 with AVX-512, 8 with AVX2)
    assert {f"packed:m{m0}n{lanes}k1" for m0 in PACKED_M0} <= measured  # all checked, timed
    assert any(key.startswith("mmt4d:") for key in measured)  # a func.func: no entry split
    result = dcmlir.compile(
        source,
        plan=tmp_path / "plan.json",
        output=tmp_path / "p.vmfb",
        emit_mlir=tmp_path / "d.mlir",
    )
    assert result.dispatched == 1
    function = load_function((tmp_path / "p.vmfb").read_bytes(), "main")
    assert_projects(function, (0, 1, 3, 8, 17, 24, 25, 40))  # 0, 25, 40: out of the range


def test_split_entry_runs_data_tiling_above_the_narrow_kernels_and_stays_right(
    tmp_path: Path,
) -> None:
    """A util.func entry whose plan runs packed:m4 for M <= 4 (then m16, data tiling's own
    tile) is split: M <= 4 calls the dispatched copy, M > 4 the untouched one, compiled
    with IREE's data tiling; both answer right, in and out of the plan's range."""
    text = constant_projection("nk").replace("func.func @main", "util.func public @main")
    text = text.replace("  return %r", "  util.return %r")
    source = tmp_path / "proj.mlir"
    source.write_text(text)
    workload = workload_of(text)
    shapes = [(m,) for m in range(1, 17)]
    costs = {s: [1e-6, 2e-6] if s[0] <= 4 else [2e-6, 1e-6] for s in shapes}
    packed = [candidate_from_key("packed:m4n16k1"), candidate_from_key("packed:m16n16k1")]
    choices = {s: 0 if s[0] <= 4 else 1 for s in shapes}
    planned = WorkloadPlan.build(workload, packed, choices, costs, ranges={0: (1, 16)})
    Plan(CpuTarget(), "proj.mlir", (planned,)).save(tmp_path / "plan.json")
    stream = io.StringIO()
    result = dcmlir.compile(
        source, plan=tmp_path / "plan.json", emit_mlir=tmp_path / "d.mlir", stream=stream
    )
    assert result.split is not None
    assert "dcmlir: entry split: @main: arg0.0 <= 4 runs dcmlir's kernels" in stream.getvalue()
    assert (result.split.function, str(result.split.arg_dim), result.split.ranges) == (
        "main",
        "arg0.0",
        ((1, 4),),
    )
    emitted = (tmp_path / "d.mlir").read_text()
    iree_copy = emitted[emitted.index("@main$iree") :]
    iree_copy = iree_copy[: iree_copy.index("util.return")]
    assert "iree_encoding" not in iree_copy  # left as it was, for IREE to data-tile
    assert 'dcmlir.kernel = "packed:m4n16k1"' in emitted
    function = load_function(result.vmfb, "main")
    assert_projects(function, (0, 1, 4, 5, 16, 17, 40))


def test_split_entry_at_the_global_optimization_level(tmp_path: Path) -> None:
    """A plan tuned where IREE's codegen sees the ops: the lowered entry takes
    ``!hal.buffer_view`` arguments and is split all the same (data tiling is set in IREE's
    dispatch creation, after global optimization); the dcmlir copy carries IREE's hint that
    keeps it from data-tiling the plan's other ops, and where the plan is IREE's default the
    entry calls the function as it was, kept from data tiling too. Right in and out of the
    range."""
    text = constant_projection("nk").replace("func.func @main", "util.func public @main")
    source = tmp_path / "proj.mlir"
    source.write_text(text.replace("  return %r", "  util.return %r"))
    lowered = lower_to_global_optimization(source.read_text(), CpuTarget())
    workload = workload_of(lowered)
    shapes = [(m,) for m in range(1, 17)]
    costs = {s: [1e-6, 2e-6, 3e-6] if s[0] <= 4 else [3e-6, 2e-6, 1e-6] for s in shapes}
    kernels = [candidate_from_key(k) for k in ("packed:m4n16k1", "default", "datatiled")]
    choices = {s: 0 if s[0] <= 2 else 1 if s[0] <= 4 else 2 for s in shapes}
    planned = WorkloadPlan.build(workload, kernels, choices, costs, ranges={0: (1, 16)})
    plan = Plan(CpuTarget(), "proj.mlir", (planned,), level=GLOBAL_OPT)
    plan.save(tmp_path / "plan.json")
    stream = io.StringIO()
    result = dcmlir.compile(
        source, plan=tmp_path / "plan.json", emit_mlir=tmp_path / "d.mlir", stream=stream
    )
    # M <= 2: the cascade; 3..4, where the plan is IREE's default: the function as it was,
    # kept from data tiling; above: IREE's data tiling of it
    assert result.split is not None, stream.getvalue()
    assert (result.split.ranges, result.split.default) == (((1, 2),), ((3, 4),))
    assert "--iree-opt-data-tiling" in result.flags
    emitted = (tmp_path / "d.mlir").read_text()
    assert "hal.buffer_view.dim" in emitted[emitted.index("util.func public @main") :]
    for copy, hinted in (("dcmlir", True), ("default", True), ("iree", False)):
        first = emitted[emitted.index(f"@main${copy}(") :].splitlines()[0]
        assert ("iree.opt.data_tiling" in first) == hinted, first
    assert 'dcmlir.kernel = "packed:m4n16k1"' in emitted
    assert_projects(load_function(result.vmfb, "main"), (0, 1, 3, 4, 5, 16, 17, 40))


def test_the_split_is_where_data_tilings_own_tile_takes_over() -> None:
    from dcmlir.passes.split_entry import dcmlir_ranges

    workload = workload_of(constant_projection("nk"))
    shapes = [(m,) for m in range(1, 33)]
    wide = [candidate_from_key("packed:m16n16k1"), candidate_from_key("datatiled")]
    choices = {s: 0 if s[0] <= 16 else 1 for s in shapes}
    costs = {s: [1e-6, 1e-6] for s in shapes}
    costs3 = {s: [1e-6, 1e-6, 1e-6] for s in shapes}
    planned = WorkloadPlan.build(workload, wide, choices, costs, ranges={0: (1, 32)})
    assert dcmlir_ranges(Plan(CpuTarget(), "p.mlir", (planned,))) == ()  # all data tiling's
    assert dcmlir_ranges(Plan(CpuTarget(), "p.mlir", ())) is None  # nothing packed
    narrow = [candidate_from_key("packed:m2n16k1"), candidate_from_key("datatiled")]
    choices = {s: 0 if s[0] <= 2 else 1 for s in shapes}
    planned = WorkloadPlan.build(workload, narrow, choices, costs, ranges={0: (1, 32)})
    assert dcmlir_ranges(Plan(CpuTarget(), "p.mlir", (planned,))) == ((1, 2),)
    # IREE's default where the guard left it, data tiling elsewhere: the entry runs the
    # cascades at those M only (the rest is IREE's data-tiled build)
    patchy = [candidate_from_key("default"), candidate_from_key("datatiled")]
    choices = {s: 0 if s[0] in (3, 5, 6, 20) else 1 for s in shapes}
    planned = WorkloadPlan.build(workload, patchy, choices, costs, ranges={0: (1, 32)})
    found = dcmlir_ranges(Plan(CpuTarget(), "p.mlir", (planned,)))
    assert found == ((3, 3), (5, 6), (20, 20))
    # AVX2 (8 lanes): data tiling's tile is 8 rows, so a 16-row packed kernel is not it
    avx2 = [candidate_from_key(k) for k in ("packed:m8n8k1", "packed:m16n8k1", "datatiled")]
    choices = {s: 0 if s[0] <= 8 else 1 if s[0] <= 16 else 2 for s in shapes}
    planned = WorkloadPlan.build(workload, avx2, choices, costs3, ranges={0: (1, 32)})
    # (its 8-row kernel is data tiling's own: M <= 8 goes to IREE's build as well)
    assert dcmlir_ranges(Plan(CpuTarget(), "p.mlir", (planned,))) == ((9, 16),)
    # two weight layouts: a kernel reading it as it is below T = 9, data tiling above
    mixed = [candidate_from_key("cpu:wg8x128:v4x64:k1"), candidate_from_key("datatiled")]
    choices = {s: 0 if s[0] <= 9 else 1 for s in shapes}
    planned = WorkloadPlan.build(workload, mixed, choices, costs, ranges={0: (1, 32)})
    assert dcmlir_ranges(Plan(CpuTarget(), "p.mlir", (planned,))) == ((1, 9),)
    # and tune's report says what the second layout costs
    from dcmlir.driver.outcome import _layout_lines

    (line,) = _layout_lines(workload, planned)
    assert "kept in 2 layouts (12 KiB more)" in line and "--weight-layouts 1" in line
    one = WorkloadPlan.build(workload, wide, choices, costs, ranges={0: (1, 32)})
    assert _layout_lines(workload, one) == []


def test_a_private_functions_argument_is_constant_when_every_call_passes_one() -> None:
    """``dcmlir bench --weights constant`` (and a model's layer functions) pass the weight
    to a private function: a constant when every call passes one, as IREE inlines it."""
    from dcmlir.bench.weights import with_constant_weight

    wrapped = with_constant_weight(ARGUMENT_WEIGHT, WEIGHT.T.copy(), "tensor<64x48xf32>")
    assert workload_of(wrapped).constant_operands == (1,)
    caller = """
  func.func @other(%x: tensor<?x64xf32>, %w: tensor<64x48xf32>, %i: tensor<?x48xf32>) -> tensor<?x48xf32> {
    %r = call @main__weighted(%x, %w, %i) : (tensor<?x64xf32>, tensor<64x48xf32>, tensor<?x48xf32>) -> tensor<?x48xf32>
    return %r : tensor<?x48xf32>
  }
}
"""
    body, trailer = wrapped.split("{-#", 1)
    mixed = body.rstrip().removesuffix("}") + caller + "{-#" + trailer
    assert workload_of(mixed).constant_operands == ()  # one call passes an argument
    assert workload_of(ARGUMENT_WEIGHT).constant_operands == ()  # public: anyone may call it
