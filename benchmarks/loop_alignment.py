"""Benchmark: a tuned plan's module with LLVM's loop alignment against its four placements
(docs/design.md section 8, "Aligned loops instead of placements").

For each workload of a ``never_slower.py`` records folder, the plan's dispatched module is
compiled under the first placement of each ``.text`` offset modulo 64 with LLVM's default
loop alignment (``CpuTarget.loop_alignment=0``: the module as dcmlir built it before), and
with every innermost loop at 64 bytes (the default since) under placements 0 and 16 (they
land at one offset modulo 64); beside them IREE's default and data-tiling builds as a user
gets them. All are timed side by side in one process, call by call and interleaved
(:func:`dcmlir.driver.module_timing.timed_side_by_side`), every output first checked
against IREE's default. The table gives each build's time over the faster IREE build.

Reproduce: ``python benchmarks/loop_alignment.py --dir results/never_slower_xeon-guard/b240
--workloads fresh_scores_h96,unseen_context_h80 --shapes 5,7,9,13,65,100,127`` (writes
``docs/results/loop_alignment.json`` and prints the table).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path

import dcmlir
from dcmlir.build.code_layout import TRIED, text_offset
from dcmlir.build.compiler import BuildError, build
from dcmlir.codegen.packed import DATA_TILING_FLAGS
from dcmlir.dispatch import Plan
from dcmlir.driver.module_timing import (
    loaded_functions,
    module_entry,
    outputs_agree,
    random_inputs,
    timed_side_by_side,
)
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "loop_alignment.json"
IREE = ("iree-default", "iree-data-tiling")


def builds(source: Path, plan: Plan) -> dict[str, bytes]:
    """Build name -> module: the plan unaligned under each offset, aligned, IREE's two."""
    text = source.read_text()
    found: dict[str, bytes] = {}
    offsets: set[int] = set()
    unaligned = dataclasses.replace(plan.target, loop_alignment=0)
    for placement in TRIED:
        variant = dataclasses.replace(plan, target=unaligned, placement=placement)
        vmfb = dcmlir.compile(source, plan=variant, stream=io.StringIO()).vmfb
        offset = (text_offset(vmfb) or 0) % 64
        if offset not in offsets:
            offsets.add(offset)
            found[f"unaligned @{offset}"] = vmfb
        if len(offsets) == 4:
            break
    aligned = dataclasses.replace(plan.target, loop_alignment=64)
    for placement in (0, 16):
        variant = dataclasses.replace(plan, target=aligned, placement=placement)
        vmfb = dcmlir.compile(source, plan=variant, stream=io.StringIO()).vmfb
        found[f"aligned p{placement} @{(text_offset(vmfb) or 0) % 64}"] = vmfb
    return {**found, **iree_builds(text)}


def iree_builds(text: str) -> dict[str, bytes]:
    """IREE's default and data-tiling builds of ``text``, as a user gets them."""
    found = {"iree-default": build(text, CpuTarget()).vmfb}
    with contextlib.suppress(BuildError):  # IREE's data tiling does not compile every module
        found["iree-data-tiling"] = build(text, CpuTarget(), DATA_TILING_FLAGS).vmfb
    return found


def measure(
    folder: Path,
    name: str,
    shapes: list[int],
    rounds: int,
    make: Callable[[Path, Plan], dict[str, bytes]] = builds,
) -> tuple[dict[str, dict[int, float]], dict[int, float]]:
    """(build name -> T -> time over the faster IREE build at that T, T -> that build's
    seconds), the builds ``make`` gives for the workload's source and plan (IREE's two
    among them), timed side by side and their outputs checked."""
    source = folder / f"{name}-constant.mlir"
    if not source.is_file():  # attention: its weights are arguments
        source = folder / f"{name}.mlir"
    plan = Plan.load(folder / f"{name}.plan.json")
    text = source.read_text()
    functions = loaded_functions(make(source, plan), module_entry(text), "local-sync", None)
    inputs = random_inputs(functions["iree-default"], shapes)
    for t, arrays in inputs.items():
        wrong = outputs_agree(functions, arrays, "iree-default")
        if wrong:
            raise SystemExit(f"{name} at T={t}: {', '.join(map(str, wrong))} differ")
    times = timed_side_by_side(functions, inputs, rounds, 0.002)
    best = {t: min(times[k][t] for k in IREE if k in times) for t in shapes}
    return {key: {t: times[key][t] / best[t] for t in shapes} for key in times}, best


def arguments(doc: str, shapes: str) -> tuple[Path, list[str], list[int], int]:
    """(records folder, workloads, T, rounds) from the command line of a script that times
    the plans of a ``never_slower.py`` records folder; an error where a plan is missing."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--dir", required=True, help="a never_slower.py records folder")
    parser.add_argument("--workloads", required=True, help="comma-separated")
    parser.add_argument("--shapes", default=shapes)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    folder, names = Path(args.dir), args.workloads.split(",")
    for name in names:
        if not (folder / f"{name}.plan.json").is_file():
            parser.error(f"{folder / name}.plan.json: not found (run never_slower.py first)")
    return folder, names, [int(s) for s in args.shapes.split(",")], args.rounds


def main() -> int:
    folder, names, shapes, rounds = arguments(__doc__, "5,7,9,13,65,100,127")
    found = {}
    for name in names:
        ratios, _ = measure(folder, name, shapes, rounds)
        found[name] = {key: {str(t): r for t, r in by_t.items()} for key, by_t in ratios.items()}
        keys = [k for k in ratios if k not in IREE]
        print(f"\n{name} ({folder}): time over the faster IREE build")
        print("| T | " + " | ".join(keys) + " |")
        print("|---:|" + "---:|" * len(keys))
        for t in shapes:
            print(f"| {t} | " + " | ".join(f"{ratios[k][t]:.3f}" for k in keys) + " |")
    OUT.write_text(json.dumps({"dir": str(folder), "shapes": shapes, **found}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
