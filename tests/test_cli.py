"""The ``dcmlir`` command: subcommands, one-line user errors, the demo table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from dcmlir import __version__
from dcmlir.space.candidates import space_for
from dcmlir.target import CpuTarget
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
        err, "dcmlir: error: --shapes: 'x' is not a positive integer (write e.g. 1,7,32,128)"
    )


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
    code, out, err = run(capsys, *demo_args(tmp_path, "--shapes", "1,4,200", "--rounds", "2"))
    assert code == 0, err
    assert "matmul key=5aebb14787f9885e range d0=1:128" in out
    exhaustive = len(space_for(CpuTarget())) * 128  # the space depends on the host's caches
    assert f"12 measurements (12 new) vs {exhaustive} exhaustive" in out
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "dense.vmfb").is_file()
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("T |"))
    columns = [c.strip() for c in lines[header].split("|")]
    assert columns == [
        "T",
        "IREE default (us)",
        "dcmlir (us)",
        "speedup",
        "numpy (us)",
        "dcmlir kernel",
    ]
    rows = [[c.strip() for c in line.split("|")] for line in lines[header + 2 : header + 5]]
    assert [row[0] for row in rows] == ["1", "4", "200"]
    for row in rows:
        assert float(row[1]) > 0 and float(row[2]) > 0 and float(row[4]) > 0
        assert row[3].endswith("x") and float(row[3][:-1]) > 0
    assert rows[0][5].startswith(("cpu:", "default"))
    assert rows[2][5] == "IREE default (outside range)"  # 200 > 128: the fallback
    assert lines[header + 5].startswith("geomean speedup of dcmlir over IREE default: ")
    assert "measuring T=1" in err and "measuring" not in out  # progress goes to stderr
    # a second run resumes from the records: nothing new is measured
    code, out, _ = run(capsys, *demo_args(tmp_path, "--shapes", "2", "--rounds", "1"))
    assert code == 0 and "12 measurements (0 new)" in out


def test_demo_reports_wrong_results_instead_of_timing_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import dcmlir.tools.cli as cli

    monkeypatch.setattr(cli, "_dense_reference", lambda inputs: [inputs[0] @ inputs[1] + 1.0])
    code, out, err = run(capsys, *demo_args(tmp_path, "--shapes", "2", "--rounds", "1"))
    assert code == 1
    row = [c.strip() for c in out.splitlines()[-1].split("|")]
    assert row[:5] == ["2", "failed", "failed", "-", "failed"]
    assert "dcmlir: error: T=2: IREE default: check: relative error" in err
    assert "dcmlir: error: T=2: dcmlir: check: relative error" in err
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
