"""The bad-input catalogue of docs/reliability.md: each input gets one clear line (or passes
through and says so), a non-zero exit where it is an error, and nothing half-written."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_bench import SMALL_DENSE, small_plan

from dcmlir.codegen.kernel import check_tolerance, input_shapes, reference
from dcmlir.dispatch import Plan
from dcmlir.driver import load_model
from dcmlir.driver.tuning import _nothing_ran
from dcmlir.ir.diagnostics import UNREGISTERED_DIALECT
from dcmlir.ir.iree import load_function
from dcmlir.records import Record, RecordDatabase
from dcmlir.space import DefaultCandidate
from dcmlir.target import CpuTarget
from dcmlir.tools.cli import main
from dcmlir.tools.dcmlir_opt import DcmlirOptMain

STATIC = """func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}
"""

ELEMENTWISE = """func.func @f(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<?x8xf32>) outs(%a : tensor<?x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}
"""

TINY = SMALL_DENSE.replace("64x96", "8x8").replace("?x64", "?x8").replace("?x96", "?x8")
QUICK_TUNE = ["--level", "input", "--min-time", "0.002", "--rounds", "1"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.fixture
def files(tmp_path: Path) -> SimpleNamespace:
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    plan = tmp_path / "dense-plan.json"
    small_plan(SMALL_DENSE).save(plan)
    return SimpleNamespace(
        tmp=tmp_path,
        dense=write("dense.mlir", SMALL_DENSE),
        plan=str(plan),
        empty=write("empty.mlir", "  \n"),
        static=write("static.mlir", STATIC),
        elementwise=write("elementwise.mlir", ELEMENTWISE),
        bf16=write(
            "bf16.mlir",
            SMALL_DENSE.replace("xf32>", "xbf16>")
            .replace("0.0 : f32", "0.0 : bf16")
            .replace("(%zero : f32)", "(%zero : bf16)"),
        ),
        f16=write("f16.mlir", TINY.replace("f32", "f16")),
        tiny=write("tiny.mlir", TINY),
        db=str(tmp_path / "records.jsonl"),
        out=str(tmp_path / "plan.json"),
    )


def test_an_empty_file_is_one_line_naming_it(files, capsys) -> None:
    for command in (
        ["tune", files.empty, "--dims", "1:8", "--db", files.db, "-o", files.out],
        ["compile", files.empty, "--plan", files.plan, "-o", str(files.tmp / "x.vmfb")],
        ["bench", files.empty, "--plan", files.plan],
        ["workloads", files.empty],
    ):
        code, _, err = run(capsys, *command)
        assert code == 1
        assert (
            one_line(err)
            == f"dcmlir: error: {files.empty}: the file is empty: no MLIR module in it"
        )
    assert not Path(files.out).exists()


def test_a_module_without_dynamic_ops_passes_through_and_says_so(files, capsys) -> None:
    for source in (files.static, files.elementwise):
        code, out, err = run(
            capsys, "tune", source, "--dims", "1:8", "--db", files.db, "-o", files.out, *QUICK_TUNE
        )
        assert code == 0, err
        assert out.startswith(
            f"nothing to tune in {source}: no dynamic-shape contraction dcmlir tunes"
        )
        assert Plan.load(files.out).workloads == ()
        vmfb = str(files.tmp / "out.vmfb")
        code, out, err = run(capsys, "compile", source, "--plan", files.out, "-o", vmfb)
        assert code == 0 and out.startswith(f"{vmfb}: 0 op(s) dispatched"), err
    code, out, err = run(
        capsys,
        "tune",
        files.elementwise,
        "--dims",
        "1:8",
        "--db",
        files.db,
        "-o",
        files.out,
        *QUICK_TUNE,
    )
    assert "(1 dynamic op(s) left to IREE, below)" in out
    assert (
        "linalg.generic: 'linalg.generic' is not a contraction (only contractions are tuned)" in err
    )
    # a module with no dynamic op at all, compiled with a real plan: passed through, said once
    vmfb = str(files.tmp / "static.vmfb")
    code, out, err = run(capsys, "compile", files.static, "--plan", files.plan, "-o", vmfb)
    assert code == 0
    assert one_line(err) == (
        f"dcmlir: {files.static} has no dynamic-shape linalg op: compiled as IREE compiles it,"
        " the plan is not used"
    )
    a, b, c = (np.ones(s, np.float32) for s in ((4, 8), (8, 16), (4, 16)))
    np.testing.assert_allclose(load_function(Path(vmfb).read_bytes(), "f")(a, b, c)[0], a @ b + c)


def test_bf16_is_left_to_iree_with_the_reason_and_f16_is_tuned(files, capsys) -> None:
    code, out, err = run(
        capsys, "tune", files.bf16, "--dims", "1:8", "--db", files.db, "-o", files.out, *QUICK_TUNE
    )
    assert code == 0, err
    assert "nothing to tune" in out
    assert (
        "element type bf16 is not tuned: dcmlir checks and times candidates on numpy inputs" in err
    )
    code, out, err = run(
        capsys,
        "tune",
        files.f16,
        "--dims",
        "1:8",
        "--budget",
        "3",
        "--db",
        files.db,
        "-o",
        files.out,
        *QUICK_TUNE,
    )
    assert code == 0, err
    (planned,) = Plan.load(files.out).workloads
    assert planned.kind == "matmul"
    measured = [r for r in RecordDatabase(files.db).load() if r.kind == "measure"]
    assert measured and all(r.ok for r in measured), [r.error for r in measured]
    # the tolerance f16 needs: a 768-long f16 dot product is ~7e-3 off a float64 one
    assert all(0 < r.extra["max_error"] <= 1e-2 for r in measured)


def test_f16_checks_use_the_f16_tolerance() -> None:
    from test_bench import workload_of

    assert check_tolerance(workload_of(TINY)) == 1e-4
    assert check_tolerance(workload_of(TINY.replace("f32", "f16"))) == 1e-2


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ("", "dcmlir: error: --dims: an empty range; write LO:HI (e.g. 1:128) or ARG.DIM=LO:HI"),
        ("128:1", "dcmlir: error: --dims: range '128:1' is reversed; write 1:128"),
        ("-3:5", "dcmlir: error: --dims: range '-3:5' has a negative bound; dimensions are >= 0"),
        ("a:b", "dcmlir: error: --dims: range 'a:b' is not LO:HI with integers, e.g. 1:128"),
        (
            f"1:{2**63}",
            f"dcmlir: error: --dims: range '1:{2**63}': {2**63} does not fit a 64-bit index"
            f" (at most {2**63 - 1})",
        ),
        (
            "arg5.0=1:8",
            "{dense}: error: dims: arg5.0 is not a dynamic dimension of any function argument"
            " (dynamic ones: arg0.0)",
        ),
        (
            "arg0.1=1:8",
            "{dense}: error: dims: arg0.1 is not a dynamic dimension of any function argument"
            " (dynamic ones: arg0.0)",
        ),
    ],
)
def test_bad_ranges_are_one_line(files, capsys, dims: str, message: str) -> None:
    code, _, err = run(
        capsys, "tune", files.dense, "--dims", dims, "--db", files.db, "-o", files.out
    )
    assert code == 1
    assert one_line(err) == message.format(dense=files.dense)
    assert not Path(files.db).exists() or Path(files.db).read_text() == ""


def test_a_huge_range_is_sampled_and_its_tree_dispatches_correctly(files, capsys) -> None:
    """1..1,000,000: the table holds at most 256 shapes, the tree covers the whole range."""
    code, _, err = run(
        capsys,
        "tune",
        files.tiny,
        "--dims",
        "1:1000000",
        "--budget",
        "6",
        "--db",
        files.db,
        "-o",
        files.out,
        *QUICK_TUNE,
    )
    assert code == 0, err
    (planned,) = Plan.load(files.out).workloads
    assert planned.dims[0].range == (1, 1_000_000)
    assert 0 < len(planned.shapes) <= 256
    assert {1, 1_000_000} <= {s.dims[0] for s in planned.shapes}
    for t in (1, 999_999, 1_000_000):
        assert planned.select({0: t}) is not None
    assert planned.select({0: 1_000_001}) is None  # above the range: IREE's default
    vmfb = files.tmp / "tiny.vmfb"
    code, _, err = run(capsys, "compile", files.tiny, "--plan", files.out, "-o", str(vmfb))
    assert code == 0, err
    function = load_function(vmfb.read_bytes(), "main")
    from test_bench import workload_of

    workload = workload_of(TINY)
    rng = np.random.default_rng(0)
    for t in (0, 1, 7, 1_000_000, 1_000_001):
        inputs = [rng.random(s).astype(np.float32) for s in input_shapes(workload, {0: t})]
        (expected,) = reference(workload, inputs)
        np.testing.assert_allclose(function(*inputs)[0], expected, rtol=1e-4, atol=1e-5)


def test_a_plan_from_another_iree_is_refused_unless_allowed(files, capsys) -> None:
    other = files.tmp / "other-iree.json"
    obj = json.loads(Path(files.plan).read_text())
    obj["iree_version"] = "3.12.0 (0123abcd)"
    other.write_text(json.dumps(obj))
    vmfb = str(files.tmp / "x.vmfb")
    code, _, err = run(capsys, "compile", files.dense, "--plan", str(other), "-o", vmfb)
    assert code == 1 and not Path(vmfb).exists()
    line = one_line(err)
    assert line.startswith(
        f"dcmlir: error: plan {other} was tuned with IREE 3.12.0 (0123abcd), this is IREE 3.13"
    )
    assert line.endswith("tune again (dcmlir tune), or pass --allow-other-iree to use it anyway")
    code, _, err = run(
        capsys, "compile", files.dense, "--plan", str(other), "-o", vmfb, "--allow-other-iree"
    )
    assert code == 0, err


def test_a_plan_from_another_cpu_warns_and_one_for_another_target_is_refused(files, capsys) -> None:
    other = files.tmp / "other-cpu.json"
    plan = Plan.load(files.plan)
    import dataclasses

    elsewhere = dataclasses.replace(
        plan.target, l2_bytes=plan.target.l2_bytes * 2, model="Other CPU"
    )
    dataclasses.replace(plan, target=elsewhere).save(other)
    vmfb = str(files.tmp / "x.vmfb")
    code, _, err = run(capsys, "compile", files.dense, "--plan", str(other), "-o", vmfb)
    assert code == 0
    assert one_line(err).startswith(
        f"dcmlir: warning: plan {other} was tuned on llvm-cpu (Other CPU)"
    )
    code, _, err = run(
        capsys, "compile", files.dense, "--plan", files.plan, "--target", "cuda", "-o", vmfb
    )
    assert code == 1
    assert one_line(err).startswith(
        "dcmlir: error: --target cuda but the plan was tuned for llvm-cpu"
    )


def test_a_plan_for_another_module_names_both_sides_once(files, capsys) -> None:
    code, _, err = run(
        capsys, "compile", files.tiny, "--plan", files.plan, "-o", str(files.tmp / "x.vmfb")
    )
    assert code == 1
    line = one_line(err)
    assert line.startswith(
        f"{files.tiny}: error: plan {files.plan} (for 'small.mlir') has workloads"
    )
    assert "dcmlir: error:" not in line  # a diagnostic prints as it is, without a second prefix


def test_a_plan_that_is_not_a_plan(files, capsys) -> None:
    for plan, reason in ((files.empty, "not JSON"), (str(files.tmp / "nope.json"), "cannot read")):
        code, _, err = run(
            capsys, "compile", files.dense, "--plan", plan, "-o", str(files.tmp / "x.vmfb")
        )
        assert code == 1
        assert one_line(err).startswith(f"dcmlir: error: plan {plan}: {reason}")


def test_a_workload_whose_every_measurement_failed_is_not_planned(tmp_path: Path) -> None:
    """Its op is left to IREE with this warning; with no other workload the tuning stops."""
    from test_bench import workload_of

    workload = workload_of(SMALL_DENSE)
    db = RecordDatabase(tmp_path / "r.jsonl")
    db.append(
        Record.failure(
            workload=workload,
            target=CpuTarget(),
            candidate=DefaultCandidate(),
            route="config",
            dims={0: 4},
            error="check: MismatchError: relative error 0.3 exceeds 0.0001",
        )
    )
    search = SimpleNamespace(measured={("default", (4,)): float("inf")})
    why = _nothing_ran(workload, search, db, CpuTarget())  # type: ignore[arg-type]
    assert why is not None and re.search(
        r"every measurement of matmul .* failed \(1 pairs\), so there is nothing to choose"
        r" from; last error: check: MismatchError: relative error 0.3",
        why,
    )
    search.measured[("cpu:x", (4,))] = 1e-4
    assert _nothing_ran(workload, search, db, CpuTarget()) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "soon"])
@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("tune", "--min-time"),
        ("tune", "--timeout"),
        ("measure", "--timeout"),
        ("bench", "--min-time"),
    ],
)
def test_times_in_seconds_are_finite_and_positive(files, capsys, command, option, value) -> None:
    """``--min-time inf`` was accepted: every request then ran to its 60 s time limit."""
    extra = {"tune": ["--db", files.db, "-o", files.out], "measure": ["--db", files.db]}
    extra["bench"] = ["--plan", files.plan]
    code, _, err = run(capsys, command, files.dense, *extra[command], f"{option}={value}")
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"dcmlir: error: argument {option}: '{value}' ")
    assert not Path(files.out).exists() and not Path(files.db).exists()


@pytest.mark.parametrize(
    ("args", "first", "second"),
    [
        (["tune", "{dense}", "--db", "{tmp}/rec.jsonl", "-o", "{tmp}/rec.jsonl"], "-o", "--db"),
        (
            ["tune", "{dense}", "--db", "{tmp}/t.graph.json", "-o", "{tmp}/t.json"],
            "the workload graph beside -o",
            "--db",
        ),
        (["tune", "{dense}", "--db", "{dense}"], "--db", "INPUT"),
        (
            ["tune", "{dense}", "--db", "{tmp}/rec.jsonl", "--search-log", "{tmp}/rec.jsonl"],
            "--search-log",
            "--db",
        ),
        (["measure", "{dense}", "--shapes", "1", "--db", "{dense}"], "--db", "INPUT"),
        (["compile", "{dense}", "--plan", "{plan}", "-o", "{dense}"], "-o", "INPUT"),
        (
            [
                "compile",
                "{dense}",
                "--plan",
                "{plan}",
                "-o",
                "{tmp}/x.vmfb",
                "--emit-mlir",
                "{plan}",
            ],
            "--emit-mlir",
            "--plan",
        ),
    ],
)
def test_no_command_writes_over_its_own_inputs_or_outputs(files, capsys, args, first, second):
    """Each of these used to exit 0 with the input, the records or the plan replaced."""
    before = {path: Path(path).read_bytes() for path in (files.dense, files.plan)}
    argv = [a.format(dense=files.dense, plan=files.plan, tmp=files.tmp) for a in args]
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    line = one_line(err)
    assert line.startswith(f"dcmlir: error: {first} and {second} name the same file "), line
    assert {path: Path(path).read_bytes() for path in before} == before
    assert not (files.tmp / "rec.jsonl").exists() and not (files.tmp / "t.graph.json").exists()


@pytest.mark.parametrize("value", ["-1", "4294967296", "one"])
def test_seeds_are_what_numpy_and_sklearn_take(files, capsys, value) -> None:
    """``tune --seed -1`` measured everything, then failed in scikit-learn with a traceback."""
    for args in (
        ["tune", files.dense, "--db", files.db, "-o", files.out],
        ["generate-bert", "-o", str(files.tmp / "bert.mlir")],
    ):
        code, _, err = run(capsys, *args, f"--seed={value}")
        assert code == 2
        assert one_line(err).startswith(f"dcmlir: error: argument --seed: '{value}' ")
    assert not Path(files.db).exists() and not (files.tmp / "bert.mlir").exists()


def test_a_plan_sent_to_dev_null_writes_no_graph_beside_it(files, capsys) -> None:
    """``tune -o /dev/null`` created ``/dev/null.graph.json``."""
    Path("/dev/null.graph.json").unlink(missing_ok=True)
    code, out, err = run(
        capsys, "tune", files.tiny, "--dims", "1:4", "--budget", "2", "--db", files.db,
        "-o", "/dev/null", *QUICK_TUNE,
    )  # fmt: skip
    assert code == 0, err
    assert "plan written to /dev/null" in out and "workload graph" not in out
    assert not Path("/dev/null.graph.json").exists()
    assert os.stat("/dev/null").st_mode & 0o170000 == 0o020000  # still the device


@pytest.mark.parametrize(
    ("option", "where", "reason"),
    [
        ("-o", "{tmp}", "is a directory; give a file name"),
        ("-o", "{tmp}/missing/x.vmfb", "directory {tmp}/missing does not exist"),
        ("-o", "/dev/full", "cannot write: No space left on device"),
        ("--emit-mlir", "{tmp}", "is a directory; give a file name"),
        ("--emit-mlir", "/dev/full", "cannot write: No space left on device"),
    ],
)
def test_compile_outputs_that_cannot_be_written_are_one_line(files, capsys, option, where, reason):
    """Each of these was a traceback (IsADirectoryError, FileNotFoundError, OSError)."""
    path, why = where.format(tmp=files.tmp), reason.format(tmp=files.tmp)
    outputs = {"-o": str(files.tmp / "x.vmfb"), option: path}
    args = [a for pair in outputs.items() for a in pair]
    code, _, err = run(capsys, "compile", files.dense, "--plan", files.plan, *args)
    assert code == 1
    assert one_line(err) == f"dcmlir: error: {option} {path}: {why}"


def _chain(depth: int) -> str:
    """A tree ``depth`` splits deep, as text (json.dumps itself stops near 1000 levels)."""
    split = '{"loop": 0, "threshold": %d, "left": {"kernel": 1}, "right": '
    return "".join(split % (depth - i) for i in range(depth)) + '{"kernel": 0}' + "}" * depth


@pytest.mark.parametrize(
    ("root", "reason"),
    [
        (_chain(300), "workloads[0].tree: the tree is deeper than 256 levels"),
        (_chain(3000), "nested too deeply to be a plan"),
        (
            '{"loop": 0, "threshold": 18446744073709551616, "left": {"kernel": 1},'
            ' "right": {"kernel": 0}}',
            "workloads[0].tree: tree threshold 18446744073709551616 does not fit a 64-bit index",
        ),
        (
            '{"loop": 0, "threshold": 4, "kernel": 1, "left": {"kernel": 1},'
            ' "right": {"kernel": 0}}',
            "is both a leaf (kernel) and a split (loop); a node is one",
        ),
    ],
)
def test_malformed_trees_are_one_line(files, capsys, root, reason) -> None:
    """A 3000-level tree was a RecursionError, a threshold past 2^63 a C++ bad_cast, and a
    node with both a kernel and a split was silently read as a leaf."""
    text = Path(files.plan).read_text()
    tree = json.loads(text)["workloads"][0]["tree"]["root"]
    bad = files.tmp / "bad-plan.json"
    bad.write_text(text.replace(json.dumps(tree), root, 1))
    assert bad.read_text() != text
    code, _, err = run(capsys, "compile", files.dense, "--plan", str(bad), "-o", files.out)
    assert code == 1
    line = one_line(err)
    assert line.startswith(f"dcmlir: error: plan {bad}: ") and reason in line, line


def test_a_utf16_plan_is_one_line(files, capsys) -> None:
    bad = files.tmp / "utf16-plan.json"
    bad.write_text(Path(files.plan).read_text(), encoding="utf-16")
    code, _, err = run(capsys, "compile", files.dense, "--plan", str(bad), "-o", files.out)
    assert code == 1
    assert one_line(err) == (
        f"dcmlir: error: plan {bad}: not UTF-8 text (plans are UTF-8 JSON, as dcmlir tune"
        " writes them)"
    )


THREE_DYNAMIC = """func.func @main(%a: tensor<?x?x8xf32>, %b: tensor<?x8x?xf32>, %init: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
  %r = linalg.batch_matmul ins(%a, %b : tensor<?x?x8xf32>, tensor<?x8x?xf32>) outs(%init : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  return %r : tensor<?x?x?xf32>
}
"""

_MEASURED_TUNE = """
import resource, subprocess, sys, time
start = time.monotonic()
code = subprocess.run(sys.argv[1:]).returncode
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(code, time.monotonic() - start, peak_kib)
"""


@pytest.mark.parametrize(
    ("module", "dims"),
    [("tiny", "1:1000000000"), ("three", "1:1024")],
)
def test_tuning_a_huge_range_stays_within_a_budget_of_time_and_memory(files, module, dims):
    """Memory and time grow with the budget, not the range: 1..10**9 listed every shape
    (24 GB, killed by the OOM killer) and three dims at 1..1024 raised MemoryError; a
    shape whose inputs would not fit is recorded as failed, not allocated."""
    source = files.tiny if module == "tiny" else str(files.tmp / "three.mlir")
    Path(files.tmp / "three.mlir").write_text(THREE_DYNAMIC)
    tune = [
        str(Path(sys.executable).parent / "dcmlir"), "tune", source, "--dims", dims,
        "--budget", "20", "--db", files.db, "-o", files.out, *QUICK_TUNE,
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", _MEASURED_TUNE, *tune], capture_output=True, text=True, timeout=300
    )
    code, seconds, peak_kib = result.stdout.split()[-3:]
    assert int(code) == 0, result.stderr[-2000:]
    assert float(seconds) < 120 and int(peak_kib) < 1024 * 1024, (seconds, peak_kib)
    assert Plan.load(files.out).workloads


TWO_FUNCTIONS = """func.func @first(%x: tensor<?x8xf32>, %w: tensor<8x8xf32>, %init: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x8xf32>, tensor<8x8xf32>) outs(%init : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}
func.func @second(%x: tensor<?x16xf32>, %w: tensor<16x8xf32>, %init: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x16xf32>, tensor<16x8xf32>) outs(%init : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}
"""


def test_dims_naming_an_argument_of_two_functions_says_so(files, capsys) -> None:
    """``arg0.0`` numbers every function's arguments: on a two-function module it bounded
    both silently."""
    source = files.tmp / "two.mlir"
    source.write_text(TWO_FUNCTIONS)
    warning = (
        f"{source}:5:1: warning: dims: arg0.0 is a dynamic dimension of 2 functions (@first,"
        " @second): its range bounds each of them (argN.D numbers the arguments of every"
        " function)"
    )
    code, out, err = run(capsys, "workloads", str(source), "--dims", "arg0.0=2:9")
    assert code == 0
    assert one_line(err) == warning
    assert out.count("?[2..9]") == 2, out  # both ops got the range, as the warning says
    stream = io.StringIO()
    load_model(source, ["arg0.0=2:9"], stream, level="input")  # dcmlir tune's loading
    assert one_line(stream.getvalue()) == warning
    # a dim only one function has: no warning
    code, _, err = run(capsys, "workloads", files.dense, "--dims", "arg0.0=2:9")
    assert code == 0 and err == ""


def test_workloads_takes_the_dims_tune_takes(files, capsys) -> None:
    """``dcmlir workloads --dims arg0.0=2:9`` was rejected ('not LO:HI with integers')."""
    for dims in (["arg0.0=2:9"], ["1:100", "arg0.0=2:9"]):
        code, out, err = run(capsys, "workloads", files.dense, *[f"--dims={d}" for d in dims])
        assert code == 0 and err == "", err
        assert "?[2..9]" in out, out
    code, out, _ = run(capsys, "workloads", files.dense, "--dims", "3:5")
    assert code == 0 and "?[3..5]" in out


def test_a_workload_without_a_range_names_the_option_of_the_command(files, capsys) -> None:
    """``dcmlir workloads`` and ``dcmlir measure`` told the user to 'pass range=LO:HI', an
    option of the ``dcmlir-opt`` pass that neither command has; measure needs no range."""
    code, _, err = run(capsys, "workloads", files.dense)
    assert code == 0
    assert one_line(err).endswith(
        "warning: no range for dynamic loop d0; give --dims LO:HI (or ARG.DIM=LO:HI)"
    )
    # measure takes its shapes from --shapes: the one line is the error in --shapes
    code, _, err = run(capsys, "measure", files.dense, "--shapes", "0", "--db", files.db)
    assert code == 1
    assert one_line(err) == (
        "dcmlir: error: --shapes: '0' is not a positive integer (sizes start at 1)"
    )


@pytest.mark.parametrize("command", ["tune", "workloads"])
def test_one_argument_dim_given_twice_is_an_error(files, capsys, command) -> None:
    """A repeated ``--dims arg0.0=...`` kept the last range silently."""
    extra = ["--db", files.db, "-o", files.out] if command == "tune" else []
    code, out, err = run(
        capsys, command, files.dense, "--dims", "arg0.0=1:8", "--dims", "arg0.0=1:16", *extra
    )
    assert code == 1 and out == ""
    assert one_line(err) == (
        "dcmlir: error: --dims: two ranges for arg0.0 ('arg0.0=1:8' and 'arg0.0=1:16'); give one"
    )
    assert not Path(files.db).exists() and not Path(files.out).exists()


UNREGISTERED = """func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = "mydialect.op"(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}
"""


def test_an_unregistered_dialect_is_not_told_to_use_a_flag_dcmlir_lacks(files, capsys) -> None:
    """MLIR's parser says 'please use -allow-unregistered-dialect': neither dcmlir nor
    dcmlir-opt has that flag."""
    source = files.tmp / "unregistered.mlir"
    source.write_text(UNREGISTERED)
    expected = f"{source}:2:22: error: {UNREGISTERED_DIALECT}"
    assert "allow-unregistered-dialect" not in expected
    for command in (
        ["workloads", str(source)],
        ["tune", str(source), "--dims", "1:8", "--db", files.db, "-o", files.out],
        ["compile", str(source), "--plan", files.plan, "-o", str(files.tmp / "x.vmfb")],
    ):
        code, _, err = run(capsys, *command)
        assert code == 1
        assert one_line(err) == expected
    stderr = io.StringIO()
    assert DcmlirOptMain([str(source)], stdout=io.StringIO(), stderr=stderr).run() == 1
    assert one_line(stderr.getvalue()) == expected
    assert not Path(files.out).exists()


@pytest.mark.parametrize(
    ("seq", "reason"),
    [
        ("1:1e23", "range '1:1e23' is not LO:HI with integers, e.g. 1:128"),
        (
            f"1:{10**23}",
            f"range '1:{10**23}': {10**23} does not fit a 64-bit index (at most {2**63 - 1})",
        ),
        ("0:8", "range '0:8' must start at 1 or more"),
    ],
)
def test_generate_bert_refuses_a_sequence_range_it_cannot_write(files, capsys, seq, reason):
    """``generate-bert --seq 1:1e23`` wrote a module that did not parse, and exited 0."""
    output = files.tmp / "bert.mlir"
    code, out, err = run(capsys, "generate-bert", "-o", str(output), "--seq", seq)
    assert code == 2 and out == ""
    assert one_line(err) == (
        f"dcmlir: error: argument --seq: {reason} (see 'dcmlir generate-bert --help')"
    )
    assert not output.exists() and not output.with_suffix(".irpa").exists()


LOOPED = """func.func @main(%a: tensor<?x16xf32>, %b: tensor<16x16xf32>) -> tensor<?x16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x16xf32>
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%x = %a) -> tensor<?x16xf32> {
    %e = tensor.empty(%m) : tensor<?x16xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x16xf32>) -> tensor<?x16xf32>
    %y = linalg.matmul ins(%x, %b : tensor<?x16xf32>, tensor<16x16xf32>) outs(%f : tensor<?x16xf32>) -> tensor<?x16xf32>
    scf.yield %y : tensor<?x16xf32>
  }
  return %r : tensor<?x16xf32>
}
"""


def test_a_matmul_in_a_loop_compiles_with_its_plan(files, capsys) -> None:
    """IREE's default compiled it; with a plan, compile failed with "'tensor.dim' op
    unexpected during shape cleanup": the cascade read M from the loop-carried tensor, and
    the scf.if it yields gives the loop no shape to resolve that dim through."""
    source, plan, vmfb = files.tmp / "loop.mlir", files.tmp / "loop.json", files.tmp / "l.vmfb"
    source.write_text(LOOPED)
    small_plan(LOOPED).save(plan)
    code, out, err = run(capsys, "compile", str(source), "--plan", str(plan), "-o", str(vmfb))
    assert code == 0, err
    assert "1 op(s) dispatched" in out + err
    function = load_function(vmfb.read_bytes(), "main")
    rng = np.random.default_rng(0)
    weight = (rng.random((16, 16), np.float32) - 0.5).astype(np.float32)
    for t in (1, 3, 4, 5, 16, 17):  # the skinny kernel, IREE's default, past the range
        x = rng.random((t, 16), np.float32)
        expected = x.astype(np.float64) @ weight @ weight @ weight
        np.testing.assert_allclose(function(x, weight)[0], expected, rtol=1e-4, atol=1e-5)


STABLEHLO = """func.func @main(%a: tensor<?x16xf32>, %b: tensor<16x32xf32>) -> tensor<?x32xf32> {
  %r = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<?x16xf32>, tensor<16x32xf32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}
"""

TOSA = """func.func @main(%a: tensor<1x?x16xf32>, %b: tensor<1x16x32xf32>) -> tensor<1x?x32xf32> {
  %za = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %zb = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %r = tosa.matmul %a, %b, %za, %zb : (tensor<1x?x16xf32>, tensor<1x16x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x?x32xf32>
  return %r : tensor<1x?x32xf32>
}
"""


@pytest.mark.parametrize(
    ("text", "lead"), [(STABLEHLO, ()), (TOSA, (1,))], ids=["stablehlo", "tosa"]
)
def test_a_dialect_tuned_at_global_optimization_compiles_with_its_plan(
    files, capsys, text, lead
) -> None:
    """``compile`` looked for a linalg op in the raw StableHLO/TOSA input, said "the plan is
    not used" and threw the tuning away; it now looks after lowering, as tune does."""
    source, vmfb = files.tmp / "in.mlir", files.tmp / "in.vmfb"
    source.write_text(text)
    quick = ["--min-time", "0.002", "--rounds", "1", "--budget", "4"]
    code, _, err = run(
        capsys, "tune", str(source), "--dims", "1:8", "--db", files.db, "-o", files.out, *quick
    )
    assert code == 0, err
    assert Plan.load(files.out).workloads
    code, out, err = run(capsys, "compile", str(source), "--plan", files.out, "-o", str(vmfb))
    assert code == 0, err
    assert "plan is not used" not in out + err
    assert "1 op(s) dispatched" in out + err
    function = load_function(vmfb.read_bytes(), "main")
    rng = np.random.default_rng(1)
    b = rng.random((*lead, 16, 32), np.float32)
    for t in (1, 5, 8, 9):
        a = rng.random((*lead, t, 16), np.float32)
        np.testing.assert_allclose(function(a, b)[0], a @ b, rtol=1e-5)
