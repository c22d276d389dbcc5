"""Where the tuned module's code lands: placements, their builds, and the one tune keeps."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import DENSE

import dcmlir
from dcmlir.build.code_layout import LONGEST, TRIED, code_flags, placement_name, text_offset
from dcmlir.build.compiler import build
from dcmlir.dispatch import Plan, PlanError
from dcmlir.driver.placing import choose_placement, placement_points, timed_range
from dcmlir.driver.roles import Roles
from dcmlir.ir.iree import load_function
from dcmlir.target import CpuTarget

FAST = {"min_time": 0.002, "rounds": 2}


def test_each_placement_is_a_longer_name() -> None:
    assert [len(placement_name(p)) - len(placement_name(0)) for p in TRIED] == list(TRIED)
    assert len(set(TRIED)) == len(TRIED) and max(TRIED) <= LONGEST
    with pytest.raises(ValueError, match=r"placement 64 is not in 0\.\.63"):
        placement_name(LONGEST + 1)


def test_placements_move_the_code_by_sixteen_bytes() -> None:
    builds, offsets = [], set()
    for placement in TRIED:  # as the tune tries them, until four offsets
        built = build(DENSE, "llvm-cpu", placement=placement)
        offset = text_offset(built.vmfb)
        assert offset is not None and offset % 16 == 0
        if offset % 64 not in offsets:
            offsets.add(offset % 64)
            builds.append(built)
    assert offsets == {0, 16, 32, 48}
    assert len({b.key for b in builds}) == 4  # the cache keeps them apart
    stdin = build(DENSE, "llvm-cpu")
    assert stdin.key not in {b.key for b in builds}
    # the same code wherever it lands: one output at every placement
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 768), dtype=np.float32)
    w = rng.standard_normal((768, 768), dtype=np.float32)
    outputs = [load_function(b.vmfb, "dense")(x, w)[0] for b in (stdin, *builds)]
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


def test_a_failed_placement_build_names_the_source_not_the_placement() -> None:
    from dcmlir.build.compiler import BuildError

    with pytest.raises(BuildError) as err:
        build("func.func @f( {", "llvm-cpu", placement=1, source_name="mine.mlir")
    assert "mine.mlir:" in str(err.value) and placement_name(1) not in str(err.value)


def test_text_offset_of_bytes_without_an_executable_is_none() -> None:
    assert text_offset(b"not a module") is None
    assert text_offset(b"\x7fELF\x02\x01" + b"\0" * 10) is None  # cut short


def _tuned(
    tmp_path: Path, stream: io.StringIO | None = None, target: CpuTarget | None = None
) -> tuple[Path, Plan]:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    report = dcmlir.tune(
        source,
        target=target or CpuTarget(),
        dims=["1:8"],
        budget=12,
        db=tmp_path / "r.jsonl",
        output=tmp_path / "plan.json",
        stream=stream or io.StringIO(),
        **FAST,
    )
    return source, report.plan


def test_the_suite_keeps_the_search_plan_and_the_plan_file_round_trips(tmp_path: Path) -> None:
    source, plan = _tuned(tmp_path)
    assert plan.placement is None  # conftest: no placement timed in the suite
    placed = dataclasses.replace(plan, placement=3)
    path = tmp_path / "placed.json"
    placed.save(path)
    assert json.loads(path.read_text())["placement"] == 3
    assert Plan.load(path).placement == 3
    obj = placed.to_json()
    obj["placement"] = 99
    with pytest.raises(PlanError, match=r"placement=99 must be in 0\.\.63"):
        Plan.from_json(obj, "bad.json")
    # dcmlir compile builds the plan's placement: the bytes of that placement's build, with
    # the flags the dispatch needs (a plan with a data-tiling branch or packed kernels does
    # not build without them: the tune's picks differ between machines)
    compiled = dcmlir.compile(source, plan=placed)
    again = build(compiled.mlir, "llvm-cpu", compiled.flags, placement=3, use_cache=False)
    assert text_offset(compiled.vmfb) == text_offset(again.vmfb)
    assert again.vmfb == compiled.vmfb


def test_points_take_each_kernels_median_first(tmp_path: Path) -> None:
    _, plan = _tuned(tmp_path)
    points = placement_points(plan, 24)
    found = timed_range(plan)  # the whole range: every shape of it measured or quick
    assert found == (1, 8)
    lo, hi = found
    assert points == sorted(points) and {lo, hi} <= set(points)
    assert all(lo <= t <= hi for t in points)
    (workload,) = plan.workloads
    for kernel in {s.kernel for s in workload.shapes}:
        values = sorted(
            s.dims[0] for s in workload.shapes if s.kernel == kernel and s.dims[0] <= hi
        )
        assert not values or values[len(values) // 2] in points
    assert len(placement_points(plan, 2)) <= 2
    # a shape neither measured nor predicted quick to call is not timed (1..10**9)
    slow = tuple(
        dataclasses.replace(s, predicted=1.0, measured=None) if s.dims[0] > 5 else s
        for s in workload.shapes
    )
    slow_plan = dataclasses.replace(plan, workloads=(dataclasses.replace(workload, shapes=slow),))
    assert timed_range(slow_plan) == (1, 5)


def test_tune_times_the_placements_and_keeps_the_fastest(tmp_path: Path) -> None:
    stream = io.StringIO()
    with Roles(placement=choose_placement).in_scope():  # loops where LLVM puts them
        _, plan = _tuned(tmp_path, stream, CpuTarget(loop_alignment=0))
    assert plan.placement is not None
    assert Plan.load(tmp_path / "plan.json").placement == plan.placement
    line = next(x for x in stream.getvalue().splitlines() if "dcmlir: placement" in x)
    # as many placements as offsets the tried names reach (how often the name is in the
    # object varies with the kernels the search chose): two to four
    found = re.search(r"placement (\d+), the fastest of ([234]) timed at T = ", line)
    assert found is not None and int(found[1]) == plan.placement, line
    assert f"{plan.placement}: " in line.split("fastest:")[1]


@pytest.mark.skipif(not code_flags("llvm-cpu"), reason="loops are aligned on x86-64 only")
def test_aligned_loops_land_at_one_offset_under_every_name(tmp_path: Path) -> None:
    """With the innermost loops 64-byte aligned (the default target, on x86-64) ``.text``
    is too: no name moves the code, and the tune times no placement."""
    flags = code_flags(CpuTarget())
    assert flags == ("--x86-experimental-pref-innermost-loop-alignment=6",)
    assert code_flags(CpuTarget(loop_alignment=0)) == ()
    assert code_flags(CpuTarget(loop_alignment=32)) == (
        "--x86-experimental-pref-innermost-loop-alignment=5",
    )
    for placement in (0, 16, 32, 48):  # the code moves by 64 bytes if at all
        offset = text_offset(build(DENSE, "llvm-cpu", flags, placement=placement).vmfb)
        assert offset is not None and offset % 64 == 0
    stream = io.StringIO()
    with Roles(placement=choose_placement).in_scope():
        _, plan = _tuned(tmp_path, stream)
    assert plan.placement is None
    assert (
        "dcmlir: placement: not timed: the module's innermost loops are aligned to 64 bytes"
        in stream.getvalue()
    )
    # the dispatched module is built with them, and says so
    compiled = dcmlir.compile(tmp_path / "dense.mlir", plan=plan)
    assert compiled.flags[-1:] == flags


def test_a_loop_alignment_is_a_power_of_two() -> None:
    for bad in (8, 48, 8192):
        with pytest.raises(ValueError, match=f"loop_alignment={bad} is not 0 or a power of two"):
            CpuTarget(loop_alignment=bad)
    target = CpuTarget(loop_alignment=128)
    assert CpuTarget.from_json(target.to_json()) == target
    older = {k: v for k, v in target.to_json().items() if k != "loop_alignment"}
    assert CpuTarget.from_json(older).loop_alignment == 64  # plans before the field


def test_no_placement_for_a_module_read_from_stdin(tmp_path: Path) -> None:
    _, plan = _tuned(tmp_path, target=CpuTarget(loop_alignment=0))
    stream = io.StringIO()
    assert choose_placement(plan, "-", stream=stream) is plan
    assert "placement: not chosen: the module was read from stdin" in stream.getvalue()


def test_no_placement_for_parameters_without_their_archive(tmp_path: Path) -> None:
    _, plan = _tuned(tmp_path, target=CpuTarget(loop_alignment=0))
    source = tmp_path / "model.mlir"
    source.write_text(
        'util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<4xf32>\n' + DENSE
    )
    stream = io.StringIO()
    assert choose_placement(plan, source, stream=stream) is plan
    assert "not chosen: its weights are parameters, and no one model.irpa" in stream.getvalue()


def test_cli_no_placement_keeps_stdin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dcmlir.tools.cli import main

    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    args = ["tune", str(source), "--dims", "1:8", "--budget", "12", "--min-time", "0.002"]
    args += ["--rounds", "2", "--db", str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "p.json")]
    with Roles(placement=choose_placement).in_scope():  # the real step, which the flag skips
        assert main([*args, "--no-placement"]) == 0
    assert "placement" not in capsys.readouterr().err
    assert Plan.load(tmp_path / "p.json").placement is None
