"""Diagnosis: is dcmlir's data-tiling branch behind IREE's own data-tiling build because of
its flags? (issue 14, docs/benchmarks.md, "The AVX2 Zen 3")

A workload's module with an argument weight (attention) and the plan ``never_slower.py``
tuned for it are compiled four ways, then timed at a few T (every dynamic extent T),
interleaved call by call (each timed call after an untimed one of the same build), every
output checked against the float64 reference the tuner checks with:

- ``branch``: ``dcmlir.compile`` as it is (the encodings' flags);
- ``branch+ukernels``: the same with IREE's mmt4d ukernels on;
- ``branch, data-tiling flags``: the same module with ``--iree-opt-data-tiling`` instead;
- ``branch alone``: the plan cut down to its data-tiling kernel over the whole tuned
  range (one ``scf.if``, the range check, instead of the cascade), compiled as it is;
- ``no exact builds``: the plan without its shapes' own builds, compiled as it is;
- ``iree-data-tiling``: the source alone with IREE's data tiling, as a user would.

Only T where the plan runs ``datatiled`` tell anything; ``never_slower.py``'s per-workload
tables name the kernel at each T.

    .venv/bin/python benchmarks/data_tiling_branch.py \\
        --dir results/never_slower_zen3/b60 --workload attention_context --shapes 8,13,31,61,89,101
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path
from unittest import mock

from kernel_alone import alone_plan, check_builds

import dcmlir
from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import input_shapes, reference
from dcmlir.codegen.packed import DATA_TILING_FLAGS
from dcmlir.driver import compiling
from dcmlir.driver.loading import load_model
from dcmlir.driver.module_timing import timed_side_by_side
from dcmlir.ir.iree import LoadedFunction, load_function
from dcmlir.measure.timing import random_inputs
from dcmlir.space import DataTiledCandidate
from dcmlir.target import CpuTarget
from dcmlir.workload import Workload

UKERNELS = ("--iree-llvmcpu-enable-ukernels=mmt4d",)


def without_exact_builds(plan: Path, out: Path) -> Path:
    """``plan`` with no shape of its own build (written to ``out``): exact builds that cast
    the dispatch's shared accumulator slowed this branch by 8-14% (docs/design.md
    section 13)."""
    found = json.loads(plan.read_text())
    for workload in found["workloads"]:
        workload["exact"] = []
    out.write_text(json.dumps(found))
    return out


def builds(source: Path, plan: Path) -> dict[str, bytes]:
    """The six builds, by name."""
    kernel_flags = compiling._kernel_flags

    def with_ukernels(*args: object) -> tuple[str, ...]:
        return kernel_flags(*args) + UKERNELS  # type: ignore[arg-type]

    found = {"branch": dcmlir.compile(source, plan=plan, stream=io.StringIO()).vmfb}
    with mock.patch.object(compiling, "_kernel_flags", with_ukernels):
        found["branch+ukernels"] = dcmlir.compile(source, plan=plan, stream=io.StringIO()).vmfb
    with mock.patch.object(compiling, "_kernel_flags", lambda *args: DATA_TILING_FLAGS):
        found["branch, data-tiling flags"] = dcmlir.compile(
            source, plan=plan, stream=io.StringIO()
        ).vmfb
    with tempfile.TemporaryDirectory() as scratch:
        alone = alone_plan(plan, DataTiledCandidate().key(), Path(scratch) / "alone.plan.json")
        found["branch alone"] = dcmlir.compile(source, plan=alone, stream=io.StringIO()).vmfb
        inexact = without_exact_builds(plan, Path(scratch) / "inexact.plan.json")
        found["no exact builds"] = dcmlir.compile(source, plan=inexact, stream=io.StringIO()).vmfb
    found["iree-data-tiling"] = build(source.read_text(), CpuTarget(), DATA_TILING_FLAGS).vmfb
    return found


def time_at(
    functions: dict[str, LoadedFunction], workload: Workload, t: int, rounds: int
) -> dict[str, float]:
    """Median microseconds per build with every dynamic extent ``t``, outputs checked first."""
    dims = workload.shape_dims((t,) * len(workload.dynamic_dims))
    (inputs,) = random_inputs(input_shapes(workload, dims), sets=1, seed=t)
    (expected,) = reference(workload, inputs)
    check_builds(functions, inputs, expected, f" at T={t}")
    times = timed_side_by_side(functions, {t: inputs}, rounds, 0.0)  # call by call
    return {name: by_t[t] * 1e6 for name, by_t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="a never_slower.py records folder")
    parser.add_argument("--workload", default="attention_context")
    parser.add_argument("--shapes", default="8,13,31,61,89,101")
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    folder = Path(args.dir)
    source, plan = folder / f"{args.workload}.mlir", folder / f"{args.workload}.plan.json"
    for path in (source, plan):
        if not path.is_file():
            parser.error(f"{path}: not found (run never_slower.py for {args.workload} first)")
    (workload,) = load_model(source, ["1:128"], io.StringIO()).workloads
    functions = {name: load_function(v, "main") for name, v in builds(source, plan).items()}
    names = list(functions)
    print(
        "| T | "
        + " | ".join(f"{n} (us)" for n in names)
        + " | "
        + " | ".join(f"{n} / iree-data-tiling" for n in names[:-1])
        + " |"
    )
    print("|---:|" + "---:|" * (2 * len(names) - 1))
    for t in (int(s) for s in args.shapes.split(",")):
        us = time_at(functions, workload, t, args.rounds)
        ratios = [us[n] / us["iree-data-tiling"] for n in names[:-1]]
        print(
            f"| {t} | "
            + " | ".join(f"{us[n]:.1f}" for n in names)
            + " | "
            + " | ".join(f"{r:.3f}" for r in ratios)
            + " |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
