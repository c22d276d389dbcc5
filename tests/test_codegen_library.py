"""Route (a): the transform-dialect codegen library (dcmlir.codegen.library).

Every build here is a real ``iree-compile``; one module holds all the good
variants so the suite pays for one multi-variant compile, and each broken
library case is a compile that fails fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dcmlir.build.compiler import target_flags
from dcmlir.build.td import RouteError, build_td, td_flags, verify_td_build
from dcmlir.codegen.library import (
    SEQUENCE_ATTR,
    TdVariant,
    annotate_for_library,
    codegen_library,
    compilation_info,
    sequence_symbol,
)
from dcmlir.ir.iree import load_function, run_compile
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.timing import relative_error
from dcmlir.space import TileLevels
from dcmlir.workload import Workload, analyse, dynamic_linalg_ops

ROWS = (1, 5, 17, 128)


def dense(name: str, attrs: str = "") -> str:
    """``?x768 @ 768x768`` f32, written as a user (or the dispatch emitter) would."""
    return f"""
func.func @{name}(%a: tensor<?x768xf32>, %b: tensor<768x768xf32>) -> tensor<?x768xf32> {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  %r = linalg.matmul {attrs} ins(%a, %b : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}}
"""


def transposed(name: str, attrs: str = "") -> str:
    """The form IREE's global optimization gives a PyTorch linear layer: B indexed (n, k)."""
    return f"""
func.func @{name}(%a: tensor<?x768xf32>, %b: tensor<3072x768xf32>) -> tensor<?x3072xf32> {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x3072xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] {attrs} ins(%a, %b : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  return %r : tensor<?x3072xf32>
}}
"""


def batched(name: str, attrs: str = "") -> str:
    """Attention scores: ``12x?x64 @ 12x64x?``, both M and N dynamic."""
    return f"""
func.func @{name}(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>) -> tensor<12x?x?xf32> {{
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %m = tensor.dim %q, %c1 : tensor<12x?x64xf32>
  %n = tensor.dim %k, %c2 : tensor<12x64x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m, %n) : tensor<12x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %r = linalg.batch_matmul {attrs} ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}}
"""


KERNELS = {"dense": dense, "transposed": transposed, "batched": batched}


def input_shapes(kind: str, rows: int) -> list[tuple[int, ...]]:
    if kind == "dense":
        return [(rows, 768), (768, 768)]
    if kind == "transposed":
        return [(rows, 768), (3072, 768)]
    return [(12, rows, 64), (12, 64, rows + 3)]  # N differs from M on purpose


@pytest.fixture(scope="module")
def workloads() -> dict[str, Workload]:
    found: dict[str, Workload] = {}
    with ir.Context():
        for kind, kernel in KERNELS.items():
            module = parse_module(kernel("probe"))
            found[kind] = analyse(dynamic_linalg_ops(module.operation)[0])
    return found


# (variant name, kernel kind, tile levels): sizes chosen to hit both padded and exact tiles
GOOD = (
    ("d_8x128", "dense", TileLevels((8, 128, 0), (8, 16, 0), (0, 0, 8))),
    ("d_16x64", "dense", TileLevels((16, 64, 0), (4, 32, 0), (0, 0, 4))),
    ("d_1x256", "dense", TileLevels((1, 256, 0), (1, 64, 0), (0, 0, 16))),
    ("t_8x128", "transposed", TileLevels((8, 128, 0), (8, 16, 0), (0, 0, 8))),
    ("b_8x64", "batched", TileLevels((1, 8, 64, 0), (1, 8, 16, 0), (0, 0, 0, 8))),
)


def variants_of(workloads: dict[str, Workload], rows=GOOD) -> list[TdVariant]:
    return [TdVariant(name, workloads[kind], levels) for name, kind, levels in rows]


def module_of(rows=GOOD, annotate: bool = True) -> str:
    """One function per variant, named after it (so names also test the symbol prefix)."""
    return "".join(
        KERNELS[kind](name, annotate_for_library(name, levels) if annotate else "")
        for name, kind, levels in rows
    )


@pytest.fixture(scope="module")
def good_build(workloads, tmp_path_factory):
    keep = tmp_path_factory.mktemp("td-good")
    build = build_td(module_of(), variants_of(workloads), use_cache=False, keep_dir=keep)
    return build, keep


# --- the library text ----------------------------------------------------------------------


def test_library_has_every_step_with_the_variant_sizes(workloads) -> None:
    text = codegen_library(variants_of(workloads))
    dense_seq = text.split(f"@{sequence_symbol('d_8x128')}(")[1].split("transform.yield")[0]
    expected_in_order = [
        "tile_using_forall",
        "tile_sizes [8, 128, 0](mapping = [#gpu.block<y>, #gpu.block<x>])",
        "resolve_ranked_shaped_type_result_dims",
        "transform.iree.populate_workgroup_count_region_using_num_threads_slice",
        "fuse_into_containing_op",
        "tile_using_for",
        "tile_sizes [8, 16, 8]",
        "transform.structured.pad",
        "pad_to_multiple_of [8, 16, 8]",
        "vectorize_children_and_apply_patterns",
        "<vectorize_padding>",
        "transform.iree.eliminate_empty_tensors",
        "transform.iree.bufferize",
        "transform.iree.forall_to_workgroup",
        "transform.apply_patterns.vector.lower_contraction",
        '"translation_info"',
        f'"{SEQUENCE_ATTR}"',
    ]
    position = 0
    for piece in expected_in_order:
        found = dense_seq.find(piece, position)
        assert found >= 0, f"'{piece}' missing or out of order in:\n{dense_seq}"
        position = found
    assert "#iree_codegen.no_pipeline" in text
    assert "transform.named_sequence @__kernel_config" in text
    # The batch matmul tiles b, m and n across workgroups: a third workgroup dimension.
    batch_seq = text.split(f"@{sequence_symbol('b_8x64')}(")[1]
    assert "tile_sizes [1, 8, 64, 0](mapping = [#gpu.block<z>, #gpu.block<y>, #gpu.block<x>])" in (
        batch_seq
    )
    assert "tile_sizes [1, 8, 16, 8]" in batch_seq


def test_annotation_names_the_sequence_and_parses() -> None:
    levels = TileLevels((8, 128, 0), (8, 16, 0), (0, 0, 8))
    text = annotate_for_library("v0", levels)
    assert text.startswith("{compilation_info = ") and text.endswith("}")
    assert "pipeline = #iree_codegen.transform_dialect_codegen" in text
    assert f"codegen_spec = @{sequence_symbol('v0')}" in text
    with ir.Context():
        attr = ir.Attribute.parse(compilation_info("v0", levels))
        assert "tile_sizes = [[8, 128, 0], [8, 16, 0], [0, 0, 8]]" in str(attr)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (TileLevels((8, 128), (8, 16, 0), (0, 0, 8)), "do not match the 3 loops"),
        (TileLevels((0, 0, 0), (8, 16, 0), (0, 0, 8)), "no loop is tiled at workgroup level"),
        (TileLevels((8, 128, 0), (8, 0, 0), (0, 0, 8)), "every loop needs a micro-kernel size"),
        (TileLevels((8, 128, 0), (8, 16, 0), (0, 0, 0)), "every loop needs a micro-kernel size"),
        (TileLevels((8, -1, 0), (8, 16, 0), (0, 0, 8)), "must be >= 0"),
    ],
)
def test_invalid_levels_are_rejected(workloads, levels: TileLevels, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TdVariant("v", workloads["dense"], levels)


def test_names_must_be_symbols_and_distinct(workloads) -> None:
    levels = GOOD[0][2]
    with pytest.raises(ValueError, match="not a plain symbol"):
        TdVariant("has space", workloads["dense"], levels)
    with pytest.raises(ValueError, match="distinct: v"):
        codegen_library([("v", workloads["dense"], levels), ("v", workloads["dense"], levels)])


# --- builds --------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind"), [(name, kind) for name, kind, _ in GOOD])
def test_multi_variant_build_matches_numpy(good_build, workloads, name: str, kind: str) -> None:
    build, _ = good_build
    function = load_function(build.vmfb, name)
    rng = np.random.default_rng(7)
    for rows in ROWS:
        inputs = [rng.standard_normal(s, dtype=np.float32) for s in input_shapes(kind, rows)]
        expected = np.einsum(workloads[kind].einsum(), *[x.astype(np.float64) for x in inputs])
        (actual,) = function(*inputs)
        assert relative_error(actual, expected) <= 1e-4, f"{name} at {rows} rows"


def test_guard_passes_a_good_build_and_names_each_builder(good_build) -> None:
    build, keep = good_build
    assert verify_td_build(build.log, keep / "dumps", [name for name, _, _ in GOOD]) == []
    lowered = "".join(p.read_text() for p in (keep / "dumps" / "lowered").rglob("*.mlir"))
    for name, _, _ in GOOD:
        assert f'{SEQUENCE_ATTR} = "{name}"' in lowered


def test_second_build_is_a_cache_hit(workloads) -> None:
    rows = GOOD[:1]
    first = build_td(module_of(rows), variants_of(workloads, rows))

    def no_compiling(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a cached build must not run iree-compile")

    second = build_td(module_of(rows), variants_of(workloads, rows), compiler=no_compiling)
    assert second.cached and second.vmfb == first.vmfb


# --- the guard on broken libraries -----------------------------------------------------------

ONE = GOOD[:1]


def test_guard_fires_when_the_library_lacks_the_sequence(workloads) -> None:
    renamed = [TdVariant("other", workloads["dense"], ONE[0][2])]
    with pytest.raises(RouteError, match="d_8x128"):
        build_td(
            module_of(ONE),
            variants_of(workloads, ONE),
            use_cache=False,
            library_text=codegen_library(renamed),
        )


def test_guard_fires_on_a_malformed_library(workloads) -> None:
    text = codegen_library(variants_of(workloads, ONE))
    broken = text.replace("transform.iree.bufferize", "transform.iree.bufferise", 1)
    with pytest.raises(RouteError, match="error"):
        build_td(module_of(ONE), variants_of(workloads, ONE), use_cache=False, library_text=broken)


def test_guard_fires_when_a_sequence_fails_to_apply(workloads) -> None:
    text = codegen_library(variants_of(workloads, ONE))
    header = f"transform.named_sequence @{sequence_symbol('d_8x128')}(%arg0: !transform.any_op {{transform.readonly}}) {{\n"
    assert header in text
    no_such_parent = (
        '    %bad = "transform.get_parent_op"(%arg0) <{nth_parent = 1 : i64, op_name = "scf.while"}>'
        " : (!transform.any_op) -> !transform.any_op\n"
    )
    failing = text.replace(header, header + no_such_parent)
    with pytest.raises(RouteError, match="d_8x128"):
        build_td(module_of(ONE), variants_of(workloads, ONE), use_cache=False, library_text=failing)


def test_guard_fires_on_a_missing_library_file(tmp_path: Path) -> None:
    flags = [*target_flags("llvm-cpu"), *td_flags(tmp_path / "missing.mlir", tmp_path / "dumps")]
    result = run_compile(module_of(ONE), flags)
    problems = verify_td_build(result.log, tmp_path / "dumps", ["d_8x128"])
    assert any("error" in p and "missing.mlir" in p for p in problems), problems
    assert any("d_8x128" in p for p in problems), problems


def test_guard_fires_on_a_silent_default_pipeline_build(workloads, tmp_path: Path) -> None:
    """The op lost its annotation: iree-compile exits 0 with IREE's default pipeline."""
    library = tmp_path / "library.mlir"
    library.write_text(codegen_library(variants_of(workloads, ONE)))
    flags = [*target_flags("llvm-cpu"), *td_flags(library, tmp_path / "dumps")]
    result = run_compile(module_of(ONE, annotate=False), flags)
    assert result.returncode == 0 and result.output  # nothing in the exit code tells
    problems = verify_td_build(result.log, tmp_path / "dumps", ["d_8x128"])
    assert problems == ["@d_8x128: no dispatch was built by this sequence"]
