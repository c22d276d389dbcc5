"""Peak resident memory of a model's builds: IREE's default, its data tiling, dcmlir's plan.

Issue 13 asks that the tuned module's resident weights stay within 1.1x of IREE data
tiling's: no per-branch copies of a weight, and a weight kept in one packed layout.
Each build is loaded in a fresh process with its parameter file and called at every
``--seq`` T; the process's peak resident set (``ru_maxrss``) is what the build held.
Packed weights are made at initialization (IREE hoists the pack of a constant), so they
are in it; the parameter file's pages count where they were read.

    .venv/bin/python benchmarks/model_benchmark.py --models gpt2-2l --budget 600
    .venv/bin/python benchmarks/resident_weights.py --model gpt2_2l
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(vmfb: str, parameters: str, seq: list[int]) -> None:
    """Load ``vmfb`` and call it at each T; print the peak RSS in bytes."""
    import numpy as np

    from dcmlir.bench.model_inputs import argument_types
    from dcmlir.ir.iree import ParameterFile, load_function

    function = load_function(
        Path(vmfb).read_bytes(), "main", parameters=ParameterFile(parameters, "model")
    )
    arguments = argument_types(function)
    for t in seq:
        function(*[np.zeros(a.shape(t), a.numpy_dtype) for a in arguments])
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2_2l", help="the module stem (gpt2_2l, gpt2_12l)")
    parser.add_argument(
        "--workdir", default="/tmp/dcmlir-model-benchmark", help="where model_benchmark put it"
    )
    parser.add_argument("--plan", help="default: docs/results/model_<model>_plan.json")
    parser.add_argument("--seq", default="1,4,128", help="the T each build is called at")
    parser.add_argument("--results", default=str(ROOT / "docs" / "results"))
    parser.add_argument("--child", nargs=2, metavar=("VMFB", "IRPA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    seq = [int(t) for t in args.seq.split(",")]
    if args.child:
        child(*args.child, seq)
        return 0

    import dcmlir
    from dcmlir.bench.model_peers import data_tiling_build
    from dcmlir.driver import compile_default

    source = Path(args.workdir) / f"{args.model}.mlir"
    parameters = source.with_suffix(".irpa")
    plan = Path(args.plan or ROOT / "docs" / "results" / f"model_{args.model}_plan.json")
    for needed in (source, parameters, plan):
        if not needed.exists():
            print(f"resident_weights: {needed}: no such file (run model_benchmark.py first)")
            return 1
    text = source.read_text(encoding="utf-8")
    data_tiled = data_tiling_build(text)
    if isinstance(data_tiled, str):
        print(f"resident_weights: {data_tiled}")
        return 1
    builds = {
        "IREE default": compile_default(source),
        "IREE data tiling": data_tiled,
        "dcmlir": dcmlir.compile(source, plan=plan, stream=io.StringIO()).vmfb,
    }
    peaks: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="dcmlir-rss-") as scratch:
        for name, vmfb in builds.items():
            path = Path(scratch) / f"{name.replace(' ', '_')}.vmfb"
            path.write_bytes(vmfb)
            command = [sys.executable, __file__, "--seq", args.seq, "--child", str(path)]
            done = subprocess.run(
                [*command, str(parameters)], capture_output=True, text=True, check=True
            )
            peaks[name] = int(done.stdout.split()[-1])
    base = peaks["IREE data tiling"]
    lines = [
        f"{args.model}: peak resident memory, a fresh process per build called at T = {args.seq}",
        "| build | peak RSS (MB) | over data tiling |",
        "|---|---:|---:|",
        *(f"| {n} | {b / 1e6:.1f} | {b / base:.3f} |" for n, b in peaks.items()),
    ]
    print("\n".join(lines))
    out = Path(args.results) / f"resident_weights_{args.model}.json"
    command = f"python benchmarks/resident_weights.py --model {args.model}"
    record = {"model": args.model, "seq": seq, "peak_rss_bytes": peaks, "command": command}
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
