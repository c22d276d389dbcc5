"""The ``dcmlir`` command: subcommands, one-line user errors, the shape grammar, the demo."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from helpers import CONTEXT, dense_with_range

from dcmlir import __version__
from dcmlir.build.compiler import build
from dcmlir.driver.loading import load_workloads
from dcmlir.search.shape_range import free_grid_note
from dcmlir.shapes import Shape, parse_shapes
from dcmlir.space import workload_space
from dcmlir.target import CpuTarget
from dcmlir.tools import cmd_demo
from dcmlir.tools.cli import main

EXAMPLE = str(resources.files("dcmlir") / "examples" / "bert_dense.mlir")
ATTENTION = str(resources.files("dcmlir") / "examples" / "bert_attention.mlir")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(err: str, expected: str) -> None:
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.strip() == expected


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith(f"dcmlir {__version__} (IREE compiler 3.13.")


def test_workloads_lists_the_dense_matmul(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "workloads", EXAMPLE)
    assert code == 0, err
    assert re.fullmatch(
        rf"{re.escape(EXAMPLE)}:10:8: linalg\.matmul: matmul \(mnk\) \?x768x768 f32,f32,f32 "
        r"key=[0-9a-f]{16}\n",
        out,
    )


def test_workloads_dims_fills_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "workloads", ATTENTION, "--dims", "1:128")
    assert code == 0
    lines = out.splitlines()
    assert "batch_matmul (bmnk) 12x?[1..128]x?[1..128]x64" in lines[0]
    assert "batch_matmul (bmnk) 12x?[1..128]x64x?[1..128]" in lines[2]
    assert "linalg.generic: not a workload, left to IREE" in lines[1]


def test_workloads_dims_keeps_ranges_the_ir_gives(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = tmp_path / "recorded.mlir"
    recorded.write_text(
        "func.func @f(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>, %i: tensor<?x768xf32>)"
        " -> tensor<?x768xf32> {\n"
        "  %y = linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 1, 64>}}"
        " ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>)"
        " outs(%i : tensor<?x768xf32>) -> tensor<?x768xf32>\n"
        "  return %y : tensor<?x768xf32>\n}\n"
    )
    assumed = tmp_path / "assumed.mlir"
    assumed.write_text(
        Path(EXAMPLE)
        .read_text()
        .replace(
            "%empty = tensor.empty(%t)",
            "%t32 = util.assume.int %t<umin = 1, umax = 32> : index\n  %empty = tensor.empty(%t32)",
        )
    )
    for path, expected in ((recorded, "?[1..64]x768x768"), (assumed, "?[1..32]x768x768")):
        code, out, err = run(capsys, "workloads", str(path), "--dims", "1:128")
        assert code == 0, err
        assert f"matmul (mnk) {expected} " in out


def test_workloads_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "workloads", EXAMPLE, "--dims", "1:128", "--json")
    assert code == 0
    report = json.loads(out)
    (workload,) = report["workloads"]
    assert workload["kind"] == "matmul" and workload["location"] == f"{EXAMPLE}:10:8"
    assert [loop["range"] for loop in workload["loops"]] == [[1, 128], None, None]


def test_dims_ties_two_argument_dims_the_ir_cannot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Attention context with its probabilities an argument: nothing in the IR says that T
    (d1) and T' (d3) are one value, so they are tuned over their grid; ``--dims
    arg0.1=arg0.2`` ties them (and a range given to one holds for both), and the search's
    shapes are their diagonal, without the free-grid note."""
    module = tmp_path / "context.mlir"
    module.write_text(CONTEXT)
    code, out, err = run(capsys, "workloads", str(module), "--dims", "1:128")
    assert code == 0 and err == "" and "at run time" not in out
    code, out, err = run(
        capsys, "workloads", str(module), "--dims", "arg0.1=1:64", "--dims", "arg0.2=arg0.1"
    )
    assert code == 0, err
    assert "12x?[1..64]x64x?[1..64] f32,f32,f32 key=" in out and "(d1=d3 at run time)" in out
    code, out, _ = run(
        capsys, "workloads", str(module), "--dims=1:128", "--dims=arg0.1=arg0.2", "--json"
    )
    (listed,) = json.loads(out)["workloads"]
    assert listed["equal_loops"] == [[1, 3]]

    _, (tied,), _ = load_workloads(module, ["1:128", "arg0.1=arg0.2"], sys.stderr)
    _, (free,), _ = load_workloads(module, ["1:128"], sys.stderr)
    shapes = tied.tied_shapes()
    assert shapes is not None and len(shapes) == 128 and all(t == u for t, u in shapes)
    assert free.tied_shapes() is None
    assert free_grid_note(tied) is None and free_grid_note(free) is not None


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (
            ["arg0.1=1:8", "arg0.2=16:32", "arg0.1=arg0.2"],
            "dcmlir: error: --dims: tied dims have ranges that do not overlap"
            " (arg0.1=1:8, arg0.2=16:32)",
        ),
        (
            ["1:128", "arg0.1=arg3.2"],
            "{module}: error: dims: arg3.2 is not a dynamic dimension of any function argument"
            " (dynamic ones: arg0.1, arg0.2, arg1.1)",
        ),
    ],
)
def test_a_bad_tie_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dims: list[str], message: str
) -> None:
    module = tmp_path / "context.mlir"
    module.write_text(CONTEXT)
    code, out, err = run(capsys, "workloads", str(module), *[f"--dims={d}" for d in dims])
    assert code == 1 and out == ""
    assert_one_line_error(err, message.format(module=module))


def test_missing_file_is_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.mlir"
    code, out, err = run(capsys, "workloads", str(missing))
    assert code == 1 and out == ""
    assert_one_line_error(err, f"dcmlir: error: cannot read '{missing}': No such file or directory")


def test_malformed_mlir_reports_file_line_col(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text(
        "func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
        "  %0 = arith.addf %a, %b : tensor<?xf32>\n"
        "  return %0 : tensor<?xf32>\n"
        "}\n"
    )
    code, out, err = run(capsys, "workloads", str(bad))
    assert code == 1 and out == ""
    assert_one_line_error(err, f"{bad}:2:23: error: use of undeclared SSA value name")


def test_bad_range_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "workloads", EXAMPLE, "--dims", "128:1")
    assert code == 1
    assert_one_line_error(err, "dcmlir: error: --dims: range '128:1' is reversed; write 1:128")
    code, _, err = run(capsys, "frobnicate")
    assert code == 2
    assert err.startswith("dcmlir: error: argument COMMAND: invalid choice: 'frobnicate'")
    assert err.count("\n") == 1
    code, _, err = run(capsys, "demo", "--shapes", "1,x")
    assert code == 1
    assert_one_line_error(
        err, "dcmlir: error: --shapes: 'x' is not N, LO:HI or LO:HI:STEP with positive integers"
    )


# --- the shape grammar (--shapes, run-model --seq) -----------------------------------------


@pytest.mark.parametrize(
    ("text", "dims", "expected"),
    [
        ("17", 1, [(17,)]),
        (" 1, 7 ,7,1", 1, [(1,), (7,)]),  # spaces allowed, duplicates dropped, order kept
        ("3:5", 1, [(3,), (4,), (5,)]),
        ("1:10:4", 1, [(1,), (5,), (9,)]),
        ("32:128:32,1", 1, [(32,), (64,), (96,), (128,), (1,)]),
        ("4:4", 1, [(4,)]),
        ("17", 2, [(17, 17)]),  # N and ranges set every dynamic dim
        ("1:2,4x64", 2, [(1, 1), (2, 2), (4, 64)]),
        ("4x64,4 x 64", 2, [(4, 64)]),
        ("2x3x4", 3, [(2, 3, 4)]),
        ("1:2,3x4", None, [(1,), (2,), (3, 4)]),  # rank not known yet: the caller widens
    ],
)
def test_shape_grammar_accepts(text: str, dims: int | None, expected: list[Shape]) -> None:
    assert parse_shapes(text, dims) == expected


@pytest.mark.parametrize(
    ("text", "dims", "message"),
    [
        ("x", 1, "'x' is not N, LO:HI or LO:HI:STEP with positive integers"),
        ("1,abc", 2, "'abc' is not N, LO:HI, LO:HI:STEP or NxM with positive integers"),
        ("1.5", 1, "'1.5' is not N, LO:HI or LO:HI:STEP with positive integers"),
        ("1:2:3:4", 1, "'1:2:3:4' is not N, LO:HI or LO:HI:STEP with positive integers"),
        ("1:4x8", 2, "'1:4x8' is not N, LO:HI, LO:HI:STEP or NxM with positive integers"),
        ("4x", 2, "'4x' is not N, LO:HI, LO:HI:STEP or NxM with positive integers"),
        ("0", 1, "'0' is not a positive integer (sizes start at 1)"),
        ("-3:5", 1, "'-3' in '-3:5' is not a positive integer (sizes start at 1)"),
        ("1:8:0", 1, "'0' in '1:8:0' is not a positive integer (sizes start at 1)"),
        ("4:1", 1, "range '4:1' is reversed; write 1:4"),
        ("8:1:2", 1, "range '8:1:2' is reversed; write 1:8:2"),
        ("3x4", 1, "'3x4' gives 2 values, the workload has 1 dynamic dim"),
        ("4x5x6", 2, "'4x5x6' gives 3 values, the workload has 2 dynamic dims"),
        ("1,,2", 1, "'1,,2' has an empty item (write e.g. 1,7,32:128:32)"),
        ("1,", 1, "'1,' has an empty item (write e.g. 1,7,32:128:32)"),
        (" ", 1, "no shapes given (write e.g. 1,7,32:128:32)"),
    ],
)
def test_shape_grammar_rejects_with_one_line_naming_the_item(
    text: str, dims: int | None, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        parse_shapes(text, dims)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["demo", "--shapes", "8:1"], "--shapes: range '8:1' is reversed; write 1:8"),
        (["run-model", "m.mlir", "--plan", "p.json", "--seq", "1:4:0"], "--seq: '0' in"),
        (["run-model", "m.mlir", "--plan", "p.json", "--seq", "2x3"], "--seq: '2x3' gives 2"),
        (["measure", "m.mlir", "--db", "r.jsonl", "--shapes", "1,,2"], "--shapes: '1,,2' has"),
        (["bench", "m.mlir", "--plan", "p.json", "--shapes", "-2"], "--shapes: '-2' is not a"),
    ],
)
def test_every_command_uses_the_shape_grammar(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    """Checked before any file is read: the one grammar, a one-line error naming the option."""
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"dcmlir: error: {expected}"), err


def demo_args(workdir: Path, *extra: str) -> list[str]:
    """A tiny tuning budget: the demo's plumbing, not its quality, is under test here."""
    return [
        "demo",
        "--example",
        "dense",
        "--budget",
        "12",
        "--workdir",
        str(workdir),
        "--min-time",
        "0.003",
        *extra,
    ]


def test_demo_tunes_compiles_and_prints_a_verified_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The dense layer through the demo's one path: the table of the README's demo."""
    code, out, err = run(capsys, *demo_args(tmp_path, "--shapes", "1,4,200", "--rounds", "2"))
    assert code == 0, err
    assert out.startswith("dcmlir demo: BERT-base dense layer bert_dense.mlir (@dense), f32\n")
    assert "matmul key=5aebb14787f9885e range d0=1:128" in out
    # the space depends on the host's caches (and the workload: IREE's data tiling)
    exhaustive = len(workload_space(CpuTarget(), dense_with_range(1, 128))) * 128
    assert f"12 measurements (12 new) vs {exhaustive} exhaustive" in out
    assert "  kernel " not in out  # one line per workload; the plan has the kernels
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "dense.vmfb").is_file()
    assert "x[T,768] @ w[768,768] per call on local-sync (1 thread)" in out
    assert "every output checked against numpy (float64) (rel err <= 0.0001)" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("T |"))
    columns = [c.strip() for c in lines[header].split("|")]
    assert columns == [
        "T",
        "IREE default (ms)",
        "dcmlir (ms)",
        "speedup",
        "IREE data tiling (ms)",
        "onnxruntime (ms)",
        "numpy (ms)",
        "torch eager (ms)",
        "dcmlir/best IREE",
        "max rel err",
    ]
    rows = [[c.strip() for c in line.split("|")] for line in lines[header + 2 : header + 5]]
    assert [row[0] for row in rows] == ["1", "4", "200"]  # 200 > 128: IREE's default runs
    for row in rows:
        assert float(row[1]) > 0 and float(row[2]) > 0
        assert row[3].endswith("x") and float(row[3][:-1]) > 0
        assert all(float(cell) > 0 for cell in row[4:9])  # every peer timed, x @ w each
        assert 0 <= float(row[9]) <= 1e-4
    assert lines[header + 5].startswith("geomean speedup of dcmlir over IREE default: ")
    assert "measuring T=1" in err and "measuring" not in out  # progress goes to stderr
    # a second run resumes from the records: nothing new is measured
    code, out, _ = run(capsys, *demo_args(tmp_path, "--shapes", "2", "--rounds", "1"))
    assert code == 0 and "12 measurements (0 new)" in out


def test_demo_reports_wrong_results_instead_of_timing_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tuned build that computes x @ w + 1: its row fails, the error is printed, exit 1."""
    text = Path(EXAMPLE).read_text().replace("arith.constant 0.0 : f32", "arith.constant 1.0 : f32")
    wrong = build(text, "llvm-cpu").vmfb
    compile_with_plan = cmd_demo.compile

    def wrong_compile(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(compile_with_plan(*args, **kwargs), vmfb=wrong)

    monkeypatch.setattr(cmd_demo, "compile", wrong_compile)
    code, out, err = run(capsys, *demo_args(tmp_path, "--shapes", "2", "--rounds", "1"))
    assert code == 1
    (line,) = [line for line in out.splitlines() if line.lstrip().startswith("2 |")]
    row = [c.strip() for c in line.split("|")]
    assert row[0] == "2" and float(row[1]) > 0 and row[2:4] == ["failed", "-"]
    (failure,) = [line for line in err.splitlines() if line.startswith("dcmlir: error:")]
    assert failure.startswith("dcmlir: error: T=2: dcmlir: check: ") and "relative error" in failure
    assert "IREE default: check" not in err
    assert "Traceback" not in err


def test_cache_shows_and_clears(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "own-cache"  # counts below need a cache no other test fills
    monkeypatch.setenv("DCMLIR_CACHE_DIR", str(cache_dir))
    from dcmlir.build.compiler import build

    build(Path(EXAMPLE).read_text(), "llvm-cpu")
    code, out, _ = run(capsys, "cache")
    assert code == 0
    assert out.splitlines()[0] == str(cache_dir)
    assert out.splitlines()[1].startswith("1 cached module(s)")
    code, out, _ = run(capsys, "cache", "--clear")
    assert code == 0 and out.startswith("removed 1 cached module(s)")
    assert run(capsys, "cache")[1].splitlines()[1].startswith("0 cached module(s)")


def test_installed_command_errors_without_traceback(tmp_path: Path) -> None:
    process = subprocess.run(
        [sys.executable, "-m", "dcmlir.tools.cli", "workloads", str(tmp_path / "missing.mlir")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert process.returncode == 1
    assert process.stdout == ""
    assert process.stderr.startswith("dcmlir: error: cannot read")
    assert "Traceback" not in process.stderr


def test_tune_summarises_many_ops_left_to_iree_by_kind() -> None:
    """A 2-layer GPT-2 printed 131 'left to IREE' lines before the useful summary."""
    from dcmlir.tools.cmd_tune import LISTED_SKIPPED, skipped_lines

    generic = "m.mlir:3:8: linalg.generic: 'linalg.generic' is not a contraction"
    softmax = "m.mlir:9:8: linalg.softmax: 'linalg.softmax' is not a contraction"
    many = [generic] * 120 + [softmax] * 11
    assert skipped_lines(many, verbose=False) == [
        "left to IREE: 131 dynamic ops dcmlir does not tune (120 linalg.generic, "
        "11 linalg.softmax); --verbose lists each with its reason"
    ]
    assert skipped_lines(many, verbose=True) == [f"left to IREE: {line}" for line in many]
    few = [generic] * LISTED_SKIPPED  # a few keep their reasons without --verbose
    assert skipped_lines(few, verbose=False) == [f"left to IREE: {line}" for line in few]


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["--model", "mymodels"], 2, "argument --model: 'mymodels' is not encoder, hf-bert or "
         "package.module:factory"),
        (["--model", "mymodels:make:x"], 2, "argument --model: 'mymodels:make:x' is not "
         "encoder, hf-bert or package.module:factory"),
        (["--hf-config", "t5"], 2, "argument --hf-config: invalid choice: 't5' (choose from "
         "'bert', 'gpt2', 'llama')"),
        (["--hf-config", "gpt2", "--pt2", "m.pt2"], 2, "argument --pt2: not allowed with "
         "argument --hf-config"),
        (["--hf-config", "gpt2", "--hf-sizes", "layers=2,depth=3"], 2, "argument --hf-sizes: "
         "'depth=3' is not KEY=N with KEY one of layers, hidden, heads, ffn, vocab, positions, "
         "kv-heads"),
        (["--hf-config", "gpt2", "--hf-sizes", "layers=0"], 2, "argument --hf-sizes: "
         "'layers=0': layers must be a positive integer"),
        (["--hf-sizes", "layers=2"], 1, "--hf-sizes sizes an --hf-config model"),
        (["--pt2", "m.pt2", "--bert-config", "1,32,2,64"], 1, "--bert-config sizes --model "
         "encoder|hf-bert; --hf-config takes --hf-sizes"),
    ],
)  # fmt: skip
def test_import_torch_source_options_are_checked_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], code: int, expected: str
) -> None:
    """Which model and how big: refused as one line, before torch is even imported."""
    output = tmp_path / "m.mlir"
    got, out, err = run(capsys, "import-torch", "-o", str(output), *args)
    assert got == code and not out and not output.exists()
    usage = " (see 'dcmlir import-torch --help')" if code == 2 else ""
    assert_one_line_error(err, f"dcmlir: error: {expected}{usage}")
