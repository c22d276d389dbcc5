"""dcmlir-opt driven in-process through DcmlirOptMain(args=[...])."""

from __future__ import annotations

import io

from helpers import DENSE

from dcmlir.tools.dcmlir_opt import DcmlirOptMain, split_input


def run(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = DcmlirOptMain(args=args, stdin=io.StringIO(stdin), stdout=out, stderr=err).run()
    return code, out.getvalue(), err.getvalue()


def test_no_pipeline_round_trips_the_module(write_mlir) -> None:
    code, out, err = run([write_mlir(DENSE)])
    assert code == 0, err
    assert "linalg.matmul" in out and "func.func @dense" in out


def test_stdin_and_output_file(tmp_path) -> None:
    target = tmp_path / "out.mlir"
    code, out, err = run(["-", "-o", str(target), "-p", "canonicalize,cse"], stdin=DENSE)
    assert code == 0, err
    assert out == ""
    assert "linalg.matmul" in target.read_text()


def test_mixed_pipeline_runs_python_and_cpp_passes_in_order(write_mlir) -> None:
    pipeline = "builtin.module(canonicalize,dcmlir-annotate-ranges{range=1:64},cse)"
    code, out, err = run([write_mlir(DENSE), "-p", pipeline])
    assert code == 0, err
    assert "dcmlir.dim_ranges = {d0 = array<i64: 1, 64>}" in out


def test_list_passes_shows_every_pass_with_options() -> None:
    code, out, _ = run(["--list-passes"])
    assert code == 0
    for name in (
        "dcmlir-annotate-ranges",
        "dcmlir-emit-dispatch",
        "dcmlir-list-workloads",
        "dcmlir-microkernel-tile",
    ):
        assert f"  {name}: " in out
    assert "range=<string>" in out
    assert "sizes=<list of int>" in out


def test_version() -> None:
    code, out, _ = run(["--version"])
    assert code == 0
    assert out.startswith("dcmlir-opt ") and "IREE compiler 3.13" in out


def test_malformed_mlir_names_file_line_col(write_mlir) -> None:
    path = write_mlir(
        "func.func @f() -> i32 {\n  %x = arith.constant 1 : i32\n  return %y : i32\n}\n"
    )
    code, out, err = run([path])
    assert code == 1
    assert out == ""
    assert err.splitlines()[0] == f"{path}:3:10: error: use of undeclared SSA value name"


def test_unknown_pass_lists_the_available_ones(write_mlir) -> None:
    code, _, err = run([write_mlir(DENSE), "-p", "dcmlir-tile-everything"])
    assert code == 1
    assert err.startswith(
        "dcmlir-opt: error: unknown pass or bad pipeline element 'dcmlir-tile-everything'"
    )
    assert (
        "dcmlir-annotate-ranges, dcmlir-drop-unit-batch, dcmlir-emit-dispatch, dcmlir-list-workloads, "
        "dcmlir-microkernel-tile" in err
    )
    assert len(err.strip().splitlines()) == 1


def test_bad_option_names_option_and_form(write_mlir) -> None:
    code, _, err = run([write_mlir(DENSE), "-p", "dcmlir-microkernel-tile{sizes=8,x,8}"])
    assert code == 1
    assert "option 'sizes'" in err and "list of int" in err


def test_missing_input_file() -> None:
    code, _, err = run(["/nonexistent/x.mlir"])
    assert code == 1
    assert (
        err == "dcmlir-opt: error: cannot read '/nonexistent/x.mlir': No such file or directory\n"
    )


def test_split_input_keeps_line_numbers_and_processes_chunks_independently(write_mlir) -> None:
    text = DENSE + "\n// -----\n" + "func.func @broken() {\n  return %z : i32\n}\n"
    path = write_mlir(text)
    code, out, err = run([path, "--split-input-file"])
    assert code == 1  # the second chunk fails ...
    assert "func.func @dense" in out  # ... the first is still printed
    broken_line = text.splitlines().index("  return %z : i32") + 1
    assert f"{path}:{broken_line}:10: error: use of undeclared SSA value name" in err


def test_split_input_pads_chunks() -> None:
    chunks = split_input("a\n// -----\nb\nc\n// -----\nd\n")
    assert chunks == ["a\n", "\n\nb\nc\n", "\n\n\n\n\nd\n"]


def test_verify_diagnostics_passes_and_fails(write_mlir) -> None:
    annotated = DENSE.replace(
        "  %r = linalg.matmul",
        "  // expected-warning @below {{no range for dynamic loop d0}}\n  %r = linalg.matmul",
    )
    code, _, err = run(
        [write_mlir(annotated), "-p", "dcmlir-annotate-ranges", "--verify-diagnostics"]
    )
    assert code == 0, err
    # the same expectation with a range given is no longer produced: the driver must fail
    code, _, err = run(
        [write_mlir(annotated), "-p", "dcmlir-annotate-ranges{range=1:8}", "--verify-diagnostics"]
    )
    assert code == 1
    assert 'expected warning "no range for dynamic loop d0" was not produced' in err
    # and an unexpected diagnostic fails too
    code, _, err = run([write_mlir(DENSE), "-p", "dcmlir-annotate-ranges", "--verify-diagnostics"])
    assert code == 1
    assert "unexpected warning: no range for dynamic loop d0" in err


def test_verify_diagnostics_matches_parser_errors(write_mlir) -> None:
    text = "func.func @f() -> i32 {\n  // expected-error @below {{undeclared SSA value}}\n  return %y : i32\n}\n"
    code, _, err = run([write_mlir(text), "--verify-diagnostics"])
    assert code == 0, err


def test_module_without_dynamic_ops_is_unchanged(write_mlir) -> None:
    static = """func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}"""
    path = write_mlir(static)
    _, before, _ = run([path])
    pipeline = "dcmlir-annotate-ranges{range=1:8},dcmlir-microkernel-tile{sizes=8,16,8}"
    code, after, err = run([path, "-p", pipeline])
    assert code == 0, err
    assert after == before
    assert err == ""
