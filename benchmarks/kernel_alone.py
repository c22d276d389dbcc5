"""Diagnosis: is a plan's kernel slower than IREE's data tiling by itself, or by the plan
around it? (issue 14, docs/benchmarks.md, "The constant-weight projections on the Zen 3 again")

A projection ``never_slower.py`` tuned with a constant weight is compiled three ways, then
timed at a few T, interleaved call by call (each timed call after an untimed one of the same
build), every output checked against the float64 reference with the fixed weight:

- ``plan``: ``dcmlir.compile`` of the tuned module with its plan, as the bench times it;
- ``KERNEL alone``: the plan cut down to one of its kernels over the whole range (the
  range check its only ``scf.if``), for each ``--kernels`` key;
- ``iree-data-tiling``: the tuned module with IREE's data tiling, as a user would build it.

``--evict`` writes a 64 MB buffer before each timed call, so the weight comes from memory
(as between the layers of a model) instead of a cache the previous call warmed.

    .venv/bin/python benchmarks/kernel_alone.py --dir results/never_slower_zen3/b60 \\
        --workload dense_ffn1 --kernels mmt4d:m4n16k1 --shapes 3,5,8,13,16,33
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import dcmlir
from dcmlir.bench.weights import weight_array
from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import input_shapes, reference
from dcmlir.codegen.packed import DATA_TILING_FLAGS
from dcmlir.driver.loading import load_model
from dcmlir.ir.iree import LoadedFunction, load_function
from dcmlir.measure.timing import MismatchError, check_outputs, random_inputs
from dcmlir.target import CpuTarget

EVICT_FLOATS = 16 * 1024 * 1024  # 64 MB: twice the L3 of the machines these ran on
RTOL = 1e-4  # of the output's largest magnitude, as the tuner checks


def alone_plan(plan: Path, key: str, out: Path) -> Path:
    """``plan`` with its kernel ``key`` alone over every tuned shape (written to ``out``)."""
    found = json.loads(plan.read_text())
    for workload in found["workloads"]:
        kept = [k for k in workload["kernels"] if k["candidate_key"] == key]
        if not kept:
            raise SystemExit(f"{plan}: workload {workload['key']} runs no kernel {key}")
        workload["kernels"] = [dict(kept[0], index=0)]
        workload["tree"] = {"loops": workload["tree"]["loops"], "root": {"kernel": 0}}
        workload["exact"], workload["shapes"] = [], []
    out.write_text(json.dumps(found))
    return out


def builds(tuned: Path, plan: Path, kernels: list[str]) -> dict[str, bytes]:
    """The builds, by name (the last one IREE's data tiling)."""
    found = {"plan": dcmlir.compile(tuned, plan=plan, stream=io.StringIO()).vmfb}
    with tempfile.TemporaryDirectory() as scratch:
        for key in kernels:
            alone = alone_plan(plan, key, Path(scratch) / "alone.plan.json")
            found[f"{key} alone"] = dcmlir.compile(tuned, plan=alone, stream=io.StringIO()).vmfb
    found["iree-data-tiling"] = build(tuned.read_text(), CpuTarget(), DATA_TILING_FLAGS).vmfb
    return found


def time_at(
    functions: dict[str, LoadedFunction],
    x: np.ndarray,
    expected: np.ndarray,
    rounds: int,
    evict: bool,
) -> dict[str, float]:
    """Median microseconds per build, outputs checked first."""
    check_builds(functions, [x], expected, f" at T={x.shape[0]}")
    buffer = np.zeros(EVICT_FLOATS, dtype=np.float32) if evict else None

    def between() -> None:
        if buffer is not None:
            np.add(buffer, 1.0, out=buffer)

    return call_by_call(functions, [x], rounds, between)


def check_builds(
    functions: dict[str, LoadedFunction],
    inputs: Sequence[np.ndarray],
    expected: np.ndarray,
    at: str = "",
) -> None:
    """Each build's one output against ``expected`` (:func:`check_outputs`, ``RTOL``); a
    mismatch ends the run, naming the build (and ``at``, where)."""
    for name, function in functions.items():
        try:
            check_outputs(function(*inputs), [expected], RTOL)
        except MismatchError as error:
            raise SystemExit(f"{name}{at}: {error}") from None


def call_by_call(
    functions: dict[str, LoadedFunction],
    inputs: Sequence[np.ndarray],
    rounds: int,
    between: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Median microseconds per build over ``rounds``, the builds interleaved, each timed call
    after an untimed one of the same build (and ``between`` after that).

    The inputs go to the device once and only the VM call is timed, as ``never_slower.py``
    times it: a host-to-host call (copies in, results back) adds ~11 us on the Xeon and cut
    a 2.5% gap on an 8 us call to 1%."""
    samples: dict[str, list[float]] = {name: [] for name in functions}
    prepared = {name: function.prepare(inputs) for name, function in functions.items()}
    for _ in range(rounds):
        for name, function in functions.items():
            function.invoke(prepared[name])
            between()
            start = time.perf_counter()
            function.invoke(prepared[name])
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e6 for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="a never_slower.py records folder")
    parser.add_argument("--workload", default="dense_ffn1")
    parser.add_argument("--kernels", required=True, help="comma-separated keys of the plan's")
    parser.add_argument("--shapes", default="3,5,8,13,16,33")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--evict", action="store_true", help="evict the caches before each call")
    args = parser.parse_args()
    folder = Path(args.dir)
    source, tuned = folder / f"{args.workload}.mlir", folder / f"{args.workload}-constant.mlir"
    plan = folder / f"{args.workload}.plan.json"
    for path in (source, tuned, plan):
        if not path.is_file():
            parser.error(f"{path}: not found (never_slower.py tunes projections with this)")
    (workload,) = load_model(source, ["1:128"], io.StringIO()).workloads
    weight = weight_array(workload)
    found = builds(tuned, plan, args.kernels.split(","))
    functions = {name: load_function(vmfb, "main") for name, vmfb in found.items()}
    names = list(functions)
    print("| T | " + " | ".join(f"{n} (us)" for n in names), end=" | ")
    print(" | ".join(f"{n} / iree-data-tiling" for n in names[:-1]) + " |")
    print("|---:|" + "---:|" * (2 * len(names) - 1))
    for t in (int(s) for s in args.shapes.split(",")):
        shapes = input_shapes(workload, workload.shape_dims((t,)))
        (inputs,) = random_inputs(shapes[:1], sets=1, seed=t)
        (expected,) = reference(workload, [inputs[0], weight])
        us = time_at(functions, inputs[0], expected, args.rounds, args.evict)
        ratios = [us[n] / us["iree-data-tiling"] for n in names[:-1]]
        cells = [f"{us[n]:.1f}" for n in names] + [f"{r:.3f}" for r in ratios]
        print(f"| {t} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
