"""The explicit mmt4d tiles standalone, against IREE's data tiling, per T (issue 13).

Each projection (the four BERT-base ones by default, any of ``never_slower.py``'s with
``--workloads``), its weight a module constant (as in a model), is built as IREE's
default, IREE's data tiling (``datatiled``) and an explicit ``mmt4d:m{M0}n{N0}k1`` kernel
(``N0`` twice the target's f32 lanes, as the space has it: 32 with AVX-512, 16 with AVX2)
per ``--m0`` (rows the space does not offer too), then timed side by side in one
process, interleaved per T, one thread (``local-sync``), every output checked against
numpy in float64. No search: the question is what each tile costs at each T, in
particular at T = 9..16, where an 8-row tile runs twice and data tiling's 16-row tile
pads. Cells: the kernel's time over data tiling's (< 1: faster), the median of its
per-round ratios; data tiling's and IREE default's times in us.

    .venv/bin/python benchmarks/mmt4d_tiles.py            # docs/results/mmt4d_tiles.{json,md}

onnxruntime, numpy and torch are timed beside the tuned dispatch of the same projections
in ``benchmarks/constant_weight_bench.py`` (docs/benchmarks.md); this table compares
kernels, not peers.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bert_workloads import DENSE
from constant_weight_bench import say, weight_as_constant
from never_slower import WEIGHTED, all_workloads

from dcmlir.driver import load_workloads
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase
from dcmlir.space import DataTiledCandidate, DefaultCandidate, Mmt4dCandidate
from dcmlir.target import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "mmt4d_tiles"
SHAPES = (1, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 28, 32, 48, 64, 96, 128)
COMMAND = "python benchmarks/mmt4d_tiles.py"
BASE = DataTiledCandidate().key()


def measure(
    name: str, m0s: list[int], settings: MeasureSettings, shapes: tuple[int, ...] = SHAPES
) -> dict:
    """Every kernel at every T of ``shapes``, per-round ratios to data tiling's."""
    target = CpuTarget.from_overrides({})
    kernels = [
        DefaultCandidate(),
        DataTiledCandidate(),
        *(Mmt4dCandidate(m, 2 * target.lanes) for m in m0s),
    ]
    for kernel in kernels[2:]:
        kernel.validate(target)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / f"{name}.mlir"
        source.write_text(all_workloads()[name])
        constant = Path(scratch) / f"{name}-constant.mlir"
        constant.write_text(weight_as_constant(source))
        _, (workload,), _ = load_workloads(constant, ["1:128"], io.StringIO())
        db = RecordDatabase(Path(scratch) / "records.jsonl", fsync=False)
        runner = RunnerSettings(settings)
        with Measurer(workload, target, db, runner_settings=runner, stream=sys.stderr) as m:
            report = m.measure(kernels, [(t,) for t in shapes])
    rows = {}
    for t in shapes:
        base = report.records[(BASE, (t,))].times
        row = {"datatiled_us": statistics.median(base) * 1e6}
        for kernel in kernels:
            if kernel.key() == BASE:
                continue
            record = report.records[(kernel.key(), (t,))]
            if record.error is not None or not record.times:
                row[kernel.key()] = None
                continue
            pairs = zip(record.times, base, strict=False)
            row[kernel.key()] = statistics.median(a / b for a, b in pairs)
        row["default_us"] = row.pop(DefaultCandidate().key()) * row["datatiled_us"]
        rows[str(t)] = row
    return {"workload": name, "kernels": [k.key() for k in kernels[2:]], "rows": rows}


def markdown(results: list[dict], settings: MeasureSettings, command: str = COMMAND) -> str:
    lines = [
        f"Reproduce: `{command}`. One thread, `local-sync`, the weight a module constant;"
        f" {settings.rounds} interleaved rounds of >= {settings.min_time * 1e3:.0f} ms per"
        " kernel and T, each after an untimed call; every output checked. Cells: time over"
        " IREE data tiling's (median of per-round ratios); data tiling and IREE default in us.",
        "",
    ]
    for result in results:
        kernels = result["kernels"]
        lines += [f"### `{result['workload']}`", ""]
        head = ["T", "data tiling (us)", "IREE default (us)", *(f"`{k}`" for k in kernels)]
        lines += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
        for t, row in result["rows"].items():
            cells = [t, f"{row['datatiled_us']:.1f}", f"{row['default_us']:.1f}"]
            ratios = {k: row[k] for k in kernels if row[k] is not None}
            best = min(ratios, key=ratios.__getitem__) if ratios else None
            for k in kernels:
                text = "failed" if row[k] is None else f"{row[k]:.2f}"
                cells.append(f"**{text}**" if k == best else text)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(DENSE))
    parser.add_argument(
        "--m0", default="8,12,14", help="explicit tiles' rows (N0: twice the f32 lanes)"
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-time", type=float, default=0.03)
    parser.add_argument("--seq", default=",".join(map(str, SHAPES)), help="the T timed")
    parser.add_argument("--out", default=str(OUT), help="folder for mmt4d_tiles.{json,md}")
    args = parser.parse_args()
    settings = MeasureSettings(min_time=args.min_time, rounds=args.rounds, warm_calls=1)
    m0s = [int(m) for m in args.m0.split(",")]
    target = CpuTarget.from_overrides({})
    n0 = 2 * target.lanes  # the space's explicit tiles' columns
    too_wide = [m for m in m0s if Mmt4dCandidate(m, n0).problems(target)]
    if too_wide:  # before minutes of builds: 8 rows x 16 columns do not fit AVX2's registers
        fits = [m for m in range(1, 33) if not Mmt4dCandidate(m, n0).problems(target)]
        parser.error(
            f"--m0 {','.join(map(str, too_wide))}: more rows than this CPU's"
            f" {target.vector_registers} vector registers hold at {n0} columns"
            f" (up to {max(fits)})"
        )
    shapes = tuple(int(t) for t in args.seq.split(","))
    results = []
    for name in args.workloads.split(","):
        if name not in WEIGHTED:
            known = ", ".join(sorted(WEIGHTED))
            parser.error(f"'{name}' has no weight to pack (projections: {known})")
        say(f"{name}: default, data tiling and mmt4d M0 = {args.m0}")
        results.append(measure(name, m0s, settings, shapes))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mmt4d_tiles.json").write_text(json.dumps(results, indent=1) + "\n")
    command = " ".join([COMMAND, *sys.argv[1:]])
    text = markdown(results, settings, command)
    (out / "mmt4d_tiles.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
