"""The micro-kernel schedule (dcmlir.codegen.schedule) and the dcmlir-microkernel-tile pass."""

from __future__ import annotations

import io

import pytest
from helpers import DENSE, SCORES, TRANSPOSED

import dcmlir.passes.microkernel_tile as microkernel_tile
from dcmlir.codegen.schedule import (
    TARGET_ATTR,
    LoopTiling,
    MicroKernel,
    TiledOp,
    build_schedule,
    loop_tiling,
)
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.ir.pass_base import PassContext, PassFailure, PassOptionError
from dcmlir.ir.pipeline import build_pass_manager, parse_pipeline
from dcmlir.passes import get_all_passes
from dcmlir.passes.microkernel_tile import MicrokernelTilePass
from dcmlir.workload import analyse, dynamic_linalg_ops

MK = MicroKernel(b=1, m=8, n=16, k=8)

MIXED_GENERIC = """
func.func @mixed(%a: tensor<?x?xf16>, %b: tensor<?x?xf16>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,
                                        affine_map<(d0, d1, d2) -> (d2, d1)>,
                                        affine_map<(d0, d1, d2) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<?x?xf16>, tensor<?x?xf16>) outs(%c : tensor<?x?xf32>) {
  ^bb0(%x: f16, %y: f16, %acc: f32):
    %xe = arith.extf %x : f16 to f32
    %ye = arith.extf %y : f16 to f32
    %m = arith.mulf %xe, %ye : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
"""

HALF = """
func.func @half(%x: tensor<?x?xf16>, %w: tensor<?x?xf16>, %init: tensor<?x?xf16>)
    -> tensor<?x?xf16> {
  %r = linalg.matmul ins(%x, %w : tensor<?x?xf16>, tensor<?x?xf16>)
      outs(%init : tensor<?x?xf16>) -> tensor<?x?xf16>
  return %r : tensor<?x?xf16>
}
"""

# Two M loops (a matmul on a 3-D input kept un-collapsed): only the inner one gets m.
TWO_M = """
func.func @two_m(%a: tensor<?x4x64xf32>, %b: tensor<64x32xf32>, %c: tensor<?x4x32xf32>)
    -> tensor<?x4x32xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>,
                                        affine_map<(d0, d1, d2, d3) -> (d3, d2)>,
                                        affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<?x4x64xf32>, tensor<64x32xf32>) outs(%c : tensor<?x4x32xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<?x4x32xf32>
  return %0 : tensor<?x4x32xf32>
}
"""

STATIC = """
func.func @static(%x: tensor<64x768xf32>, %w: tensor<768x768xf32>, %init: tensor<64x768xf32>)
    -> tensor<64x768xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<64x768xf32>, tensor<768x768xf32>)
      outs(%init : tensor<64x768xf32>) -> tensor<64x768xf32>
  return %r : tensor<64x768xf32>
}
"""

ELEMENTWISE = """
func.func @exp(%a: tensor<?xf32>, %c: tensor<?xf32>) -> tensor<?xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%a : tensor<?xf32>) outs(%c : tensor<?xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  } -> tensor<?xf32>
  return %0 : tensor<?xf32>
}
"""


def tilings(text: str, kernel: MicroKernel = MK) -> list[LoopTiling]:
    with ir.Context():
        module = parse_module(text)
        return [loop_tiling(analyse(op), kernel) for op in dynamic_linalg_ops(module.operation)]


def run_pass(
    text: str, pass_: MicrokernelTilePass | None = None
) -> tuple[str, str, DiagnosticEngine, list[tuple[str, list[str], bool]]]:
    """Apply the pass; returns the IR, what it printed, its diagnostics and the inner ops.

    Inner ops: (op name, operand types, inside an scf.forall) for every linalg op
    but fills, so a test sees what the micro-kernel regions hold.
    """
    engine = DiagnosticEngine("input.mlir")
    out = io.StringIO()
    with ir.Context():
        module = parse_module(text)
        (pass_ or MicrokernelTilePass(sizes=(8, 16, 8))).apply(
            PassContext(engine, out), module.operation
        )
        assert module.operation.verify()
        return str(module), out.getvalue(), engine, linalg_ops(module.operation)


def linalg_ops(module: ir.Operation) -> list[tuple[str, list[str], bool]]:
    found: list[tuple[str, list[str], bool]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        name = op.name
        if name.startswith("linalg.") and name not in ("linalg.fill", "linalg.yield"):
            found.append((name, [str(v.type) for v in op.operands], in_forall(op)))
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def in_forall(op: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None:
        if parent.operation.name == "scf.forall":
            return True
        parent = parent.operation.parent
    return False


# --- micro-kernels and their mapping onto loops ----------------------------------------------


def test_micro_kernel_from_three_or_four_sizes() -> None:
    assert MicroKernel.from_sizes((8, 16, 4)) == MicroKernel(1, 8, 16, 4)
    assert MicroKernel.from_sizes([2, 8, 16, 4]) == MicroKernel(2, 8, 16, 4)
    assert MicroKernel(1, 8, 16, 4).describe() == "8x16x4 (m,n,k)"
    assert MicroKernel(2, 8, 16, 4).describe() == "2x8x16x4 (b,m,n,k)"


@pytest.mark.parametrize("sizes", [(8, 16), (1, 2, 3, 4, 5), (0, 16, 8), (8, -1, 8), (1, 8, 16, 0)])
def test_micro_kernel_rejects_bad_sizes(sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        MicroKernel.from_sizes(sizes)


def test_matmul_tiles_m_n_k() -> None:
    (tiling,) = tilings(DENSE)
    assert tiling == LoopTiling((8, 16, 8), ("m", "n", "k"))
    assert tiling.parallel_sizes == (8, 16, 0)
    assert tiling.reduction_sizes == (0, 0, 8)
    assert tiling.describe() == "8x16x8 (m,n,k)"


def test_batch_matmul_tiles_batch_by_one_or_by_b() -> None:
    (tiling,) = tilings(SCORES)
    assert tiling == LoopTiling((1, 8, 16, 8), ("b", "m", "n", "k"))
    assert tiling.parallel_sizes == (1, 8, 16, 0)
    (tiling,) = tilings(SCORES, MicroKernel(4, 8, 16, 8))
    assert tiling.sizes == (4, 8, 16, 8)


def test_transposed_forms_map_by_role_not_position() -> None:
    # Named matmul with indexing maps and the generic: loops are (m, n, k) either way.
    assert tilings(TRANSPOSED) == [LoopTiling((8, 16, 8), ("m", "n", "k"))] * 2
    assert tilings(MIXED_GENERIC) == [LoopTiling((8, 16, 8), ("m", "n", "k"))]


def test_only_the_innermost_loop_of_a_role_gets_its_size() -> None:
    (tiling,) = tilings(TWO_M, MicroKernel(1, 8, 16, 4))
    assert tiling == LoopTiling((1, 8, 16, 4), ("m", "m", "n", "k"))
    assert tiling.parallel_sizes == (1, 8, 16, 0)
    assert tiling.reduction_sizes == (0, 0, 0, 4)


# --- the transform script --------------------------------------------------------------------


def schedule_text(targets: list[TiledOp]) -> str:
    with ir.Context(), ir.Location.unknown():
        schedule = build_schedule(targets)
        assert schedule.operation.verify()
        return str(schedule)


def test_schedule_tiles_forall_then_for_then_pads() -> None:
    text = schedule_text(
        [TiledOp(0, LoopTiling((1, 8, 16, 8), ("b", "m", "n", "k")), ("f16",) * 2 + ("f32",))]
    )
    assert "module attributes {transform.with_named_sequence}" in text
    assert (
        "transform.named_sequence @__transform_main(%arg0: !transform.any_op {transform.readonly})"
        in text
    )
    assert f"transform.structured.match attributes {{{TARGET_ATTR} = 0 : i64}}" in text
    lines = text.splitlines()
    order = [
        next(i for i, line in enumerate(lines) if needle in line)
        for needle in (
            "tile_using_forall %0 tile_sizes [1, 8, 16, 0]",
            "tile_using_for %tiled_op tile_sizes [0, 0, 0, 8]",
            "transform.structured.pad %tiled_linalg_op pad_to_multiple_of [1, 8, 16, 8]",
            "transform.apply_patterns.canonicalization",
            "transform.apply_cse",
        )
    ]
    assert order == sorted(order)
    assert (
        "padding_values = [0.000000e+00 : f16, 0.000000e+00 : f16, 0.000000e+00 : f32], "
        'padding_dimensions = [0, 1, 2, 3], copy_back_op = "none">'
    ) in text


def test_schedule_matches_each_target_and_cleans_up_once() -> None:
    tiling = LoopTiling((8, 16, 8), ("m", "n", "k"))
    text = schedule_text(
        [TiledOp(0, tiling, ("f32",) * 3), TiledOp(1, tiling, ("bf16",) * 2 + ("f32",))]
    )
    assert f"{{{TARGET_ATTR} = 0 : i64}}" in text and f"{{{TARGET_ATTR} = 1 : i64}}" in text
    assert text.count("tile_using_forall") == 2
    assert "0.000000e+00 : bf16" in text
    assert text.count("transform.merge_handles deduplicate") == 1
    assert text.count("transform.apply_cse") == 1


def test_empty_schedule_only_yields() -> None:
    text = schedule_text([])
    assert "tile_using" not in text and "transform.yield" in text


# --- the pass --------------------------------------------------------------------------------


FORMS = {
    "matmul": (DENSE, ["tensor<8x8xf32>", "tensor<8x16xf32>", "tensor<8x16xf32>"]),
    "batch_matmul": (SCORES, ["tensor<1x8x8xf32>", "tensor<1x8x16xf32>", "tensor<1x8x16xf32>"]),
    "transposed": (TRANSPOSED, ["tensor<8x8xf32>", "tensor<16x8xf32>", "tensor<8x16xf32>"]),
    "mixed_generic": (MIXED_GENERIC, ["tensor<8x8xf16>", "tensor<8x16xf16>", "tensor<8x16xf32>"]),
    "f16_all_dynamic": (HALF, ["tensor<8x8xf16>", "tensor<8x16xf16>", "tensor<8x16xf16>"]),
    "two_m": (TWO_M, ["tensor<1x8x8xf32>", "tensor<8x16xf32>", "tensor<1x8x16xf32>"]),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_becomes_static_micro_kernels_in_forall(form: str) -> None:
    text, _, engine, inner = run_pass(FORMS[form][0])
    expected_types = FORMS[form][1]
    assert inner, "no linalg op left"
    for name, types, inside in inner:
        assert inside, f"{name} is outside the micro-kernel loop"
        assert types == expected_types
    assert "scf.for " in text  # K is walked inside each micro-kernel region
    assert TARGET_ATTR not in text
    assert [d.severity for d in engine.diagnostics] == ["remark"] * len(inner)
    assert all(d.message.startswith("micro-kernel ") for d in engine.diagnostics)


def test_tiles_every_contraction_of_a_function() -> None:
    _, _, _, inner = run_pass(TRANSPOSED)
    assert [name for name, _, _ in inner] == ["linalg.matmul", "linalg.generic"]


def test_four_sizes_tile_the_batch() -> None:
    _, _, engine, inner = run_pass(SCORES, MicrokernelTilePass(sizes=(4, 8, 16, 8)))
    assert inner == [
        (
            "linalg.batch_matmul",
            ["tensor<4x8x8xf32>", "tensor<4x8x16xf32>", "tensor<4x8x16xf32>"],
            True,
        )
    ]
    assert engine.diagnostics[0].message == "micro-kernel 4x8x16x8 (b,m,n,k)"


def test_static_module_comes_out_unchanged() -> None:
    with ir.Context():
        before = str(parse_module(STATIC))
    text, printed, engine, _ = run_pass(STATIC)
    assert text == before
    assert printed == ""
    assert engine.diagnostics == []


def test_non_contraction_is_left_untouched_with_a_remark() -> None:
    with ir.Context():
        before = str(parse_module(ELEMENTWISE))
    text, _, engine, _ = run_pass(ELEMENTWISE)
    assert text == before
    (remark,) = engine.diagnostics
    assert remark.severity == "remark"
    assert remark.message.startswith("left untouched: ")
    assert remark.loc.line == 3


def test_print_schedule_prints_and_leaves_the_module_unchanged() -> None:
    with ir.Context():
        before = str(parse_module(SCORES))
    text, printed, _, inner = run_pass(
        SCORES, MicrokernelTilePass(sizes=(8, 16, 8), print_schedule=True)
    )
    assert text == before
    assert inner == [
        (
            "linalg.batch_matmul",
            ["tensor<12x?x64xf32>", "tensor<12x64x?xf32>", "tensor<12x?x?xf32>"],
            False,
        )
    ]
    assert "transform.named_sequence @__transform_main" in printed
    assert "tile_using_forall %0 tile_sizes [1, 8, 16, 0]" in printed
    assert "pad_to_multiple_of [1, 8, 16, 8]" in printed


def test_reserved_tag_in_the_input_fails() -> None:
    tagged = DENSE.replace("linalg.matmul ins", f"linalg.matmul {{{TARGET_ATTR} = 5 : i64}} ins")
    with pytest.raises(PassFailure):
        run_pass(tagged)


def test_interpreter_failure_becomes_a_located_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # One tile size too many: tile_using_forall rejects it in the interpreter.
    def bad_tiling(workload: object, kernel: MicroKernel) -> LoopTiling:
        return LoopTiling((8, 16, 8, 8), ("m", "n", "k", "k"))

    monkeypatch.setattr(microkernel_tile, "loop_tiling", bad_tiling)
    engine = DiagnosticEngine("input.mlir")
    with ir.Context():
        module = parse_module(DENSE)
        with pytest.raises(PassFailure):
            MicrokernelTilePass().apply(PassContext(engine, io.StringIO()), module.operation)
        assert TARGET_ATTR not in str(module)
    (error,) = [d for d in engine.diagnostics if d.severity == "error"]
    assert error.message.startswith("micro-kernel schedule failed: too many tiles provided")
    assert error.loc.line == 8  # the matmul in DENSE


def test_runs_inside_a_pass_manager_pipeline() -> None:
    engine = DiagnosticEngine("input.mlir")
    with ir.Context():
        module = parse_module(DENSE)
        elements = parse_pipeline(
            "dcmlir-microkernel-tile{sizes=4,32,16},canonicalize", get_all_passes()
        )
        build_pass_manager(elements, PassContext(engine, io.StringIO())).run(module.operation)
        inner = linalg_ops(module.operation)
    assert inner == [
        ("linalg.matmul", ["tensor<4x16xf32>", "tensor<16x32xf32>", "tensor<4x32xf32>"], True)
    ]


# --- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [(8, 16), (), (1, 2, 3, 4, 5), (0, 16, 8), (2, 8, 16, -8)])
def test_invalid_sizes_raise_value_error(sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="option 'sizes' needs 3 values"):
        MicrokernelTilePass(sizes=sizes)


def test_invalid_option_text_raises_option_error() -> None:
    with pytest.raises(PassOptionError, match="pass 'dcmlir-microkernel-tile': option 'sizes'"):
        MicrokernelTilePass.from_options({"sizes": "0,16"})
    with pytest.raises(PassOptionError, match="expected list of int"):
        MicrokernelTilePass.from_options({"sizes": "8,x,8"})


def test_options_round_trip() -> None:
    pass_ = MicrokernelTilePass.from_options({"sizes": "8,16,8", "print-schedule": "true"})
    assert pass_ == MicrokernelTilePass(sizes=(8, 16, 8), print_schedule=True)
    spec = pass_.spec()
    assert spec == "dcmlir-microkernel-tile{print-schedule=true}"  # 8,16,8 is the default
    (parsed,) = parse_pipeline(spec, get_all_passes())
    assert parsed == pass_
    four = MicrokernelTilePass(sizes=(2, 4, 32, 16))
    (parsed,) = parse_pipeline(four.spec(), get_all_passes())
    assert parsed == four
    assert four.spec() == "dcmlir-microkernel-tile{sizes=2,4,32,16}"
