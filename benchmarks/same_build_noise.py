"""How far apart two identical IREE builds time on this machine, next to dcmlir's split module.

Above the entry split's threshold (``dcmlir-split-entry``) the dispatched model runs an
untouched copy of the function compiled with IREE's data tiling: the same code as IREE's
data-tiling build. This script times three modules side by side in one process,
interleaved per T (``run_model``): dcmlir's compiled module (column ``dcmlir``), one IREE
data-tiling build (column ``IREE default``: here a *second data-tiling build*, not the
default) and another, built the same way (column ``IREE data tiling``). The two
data-tiling columns are the same code: their ratio is the noise a comparison of
identical builds shows here (each module loaded on its own: allocations, placement).

    .venv/bin/python benchmarks/model_benchmark.py --models gpt2-2l --budget 200 --workdir /tmp/mb
    .venv/bin/python benchmarks/same_build_noise.py --workdir /tmp/mb --seq 24,31,32,33,48
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import dcmlir
from dcmlir.bench.model_compare import run_model
from dcmlir.bench.peers import DATA_TILING_FLAGS
from dcmlir.build.compiler import build
from dcmlir.ir.iree import ParameterFile
from dcmlir.measure.timing import MeasureSettings
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2_2l", help="the module stem in --workdir")
    parser.add_argument("--workdir", default="/tmp/mb", help="where model_benchmark put it")
    parser.add_argument("--seq", default="24,31,32,33,48", help="T values")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    source = Path(args.workdir) / f"{args.model}.mlir"
    plan = ROOT / "docs" / "results" / f"model_{args.model}_plan.json"
    text = source.read_text()
    tuned = dcmlir.compile(source, plan=plan).vmfb
    second = build(text, CpuTarget(), DATA_TILING_FLAGS, source_name=str(source)).vmfb
    run = run_model(
        text,
        tuned,
        second,
        [int(t) for t in args.seq.split(",")],
        parameters=ParameterFile(str(source.with_suffix(".irpa")), "model"),
        reference="default",
        peers=("IREE data tiling",),
        settings=MeasureSettings(min_time=0.2, rounds=args.rounds, warmup=0.4, rtol=1e-4),
    )
    for line in run.table():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
