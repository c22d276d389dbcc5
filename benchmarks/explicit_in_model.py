"""Explicit mmt4d kernels inside a model: their configuration and the flags around them.

Every constant-weight projection of a GPT-2 is written as one explicit kernel
(``linalg.pack`` / ``linalg.mmt4d`` / ``linalg.unpack``, ``M0 = --m0``, ``N0 = 32``; no
cascade, no tuning) and the module is built four ways, timed side by side with IREE's
data tiling (and a second copy of it: the noise between identical builds), one thread,
interleaved per T, every output checked against torch (float64):

- ``iree-config``: the mmt4d as IREE configures it, the rest data-tiled;
- ``streamed-once``: dcmlir's configuration (one workgroup per weight block over every
  row of the range, :func:`dcmlir.codegen.mmt4d.mmt4d_compilation_info`), the rest
  data-tiled (what ``dcmlir compile`` builds for a plan of explicit kernels);
- ``encodings-only``: the same kernels, the rest compiled without data tiling (the
  flags of a plan without explicit kernels: only dcmlir's own encodings are data-tiled);
- ``data-tiling-ukernels-off``: no explicit kernel, IREE's data tiling with the
  ukernels off (what turning them off costs the other contractions);
- ``double-tiling, ukernels on`` / ``off``: dcmlir's configuration with IREE's
  ``DoubleTilingExpert`` pipeline in place of ``Mmt4dTilingExpert``, whose passes include
  no ukernel lowering (so the module could keep its ukernels for the other contractions).

Cells: each build's time over data tiling's, the median of per-round ratios.

    .venv/bin/python benchmarks/explicit_in_model.py --layers 2
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "data tiling"


def explicit_module(text: str, m0: int, m_bound: int | None) -> str:
    """``text`` with every constant-weight 2-D projection as one explicit kernel."""
    from dcmlir.codegen.mmt4d import rewrite_explicit
    from dcmlir.ir.mlir import ir, parse_module
    from dcmlir.space import packing_problem
    from dcmlir.workload import NotAWorkload, workloads

    with ir.Context():
        module = parse_module(text)
        found = [
            (op, w)
            for op, w in workloads(module.operation, "model")
            if not isinstance(w, NotAWorkload) and packing_problem(w) is None
        ]
        for op, workload in found:
            rewrite_explicit(op, workload, m0, 32, m_bound)
        print(f"{len(found)} projections written as explicit M0 = {m0} kernels", file=sys.stderr)
        return str(module)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--m0", type=int, default=8)
    parser.add_argument("--seq", default="1,4,8,13,16,17,32,64,128")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--workdir", default="/tmp/dcmlir-model-benchmark")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "explicit_in_model.json"))
    args = parser.parse_args()

    from threadpoolctl import threadpool_limits

    from dcmlir.bench.model_compare import reference_for, torch_source
    from dcmlir.bench.model_inputs import argument_types, token_problems
    from dcmlir.build.compiler import build
    from dcmlir.codegen.mmt4d import MMT4D_KERNEL_FLAGS
    from dcmlir.codegen.packed import DATA_TILING_FLAGS, ENCODED_KERNEL_FLAGS
    from dcmlir.ir.iree import ParameterFile, load_function
    from dcmlir.measure.runner import Runner, RunnerSettings
    from dcmlir.measure.timing import MeasureSettings
    from dcmlir.measure.variants import ModuleFunction
    from dcmlir.models.hf_models import gpt2
    from dcmlir.target import CpuTarget

    seq = [int(t) for t in args.seq.split(",")]
    source = Path(args.workdir) / f"gpt2_{args.layers}l.mlir"
    if not source.exists():
        source.parent.mkdir(parents=True, exist_ok=True)
        gpt2(args.layers, seq=(1, max(seq))).save(source)
    parameters = ParameterFile(str(source.with_suffix(".irpa")), "model")
    text = source.read_text(encoding="utf-8")
    off = tuple(f for f in DATA_TILING_FLAGS if "ukernels" not in f) + MMT4D_KERNEL_FLAGS
    target = CpuTarget()
    ours = explicit_module(text, args.m0, max(seq))
    double_tiling = ours.replace("Mmt4dTilingExpert", "DoubleTilingExpert")
    sources = {
        BASE: (text, DATA_TILING_FLAGS),
        f"{BASE} (copy)": (text, DATA_TILING_FLAGS),
        "iree-config": (explicit_module(text, args.m0, None), off),
        "streamed-once": (ours, off),
        "encodings-only": (ours, ENCODED_KERNEL_FLAGS + MMT4D_KERNEL_FLAGS),
        "data-tiling-ukernels-off": (text, off),
        "double-tiling, ukernels on": (double_tiling, DATA_TILING_FLAGS),
        "double-tiling, ukernels off": (double_tiling, off),
    }
    with tempfile.TemporaryDirectory(prefix="dcmlir-explicit-") as scratch:
        variants = []
        first = b""
        for name, (module, flags) in sources.items():
            path = Path(scratch) / f"{len(variants)}.vmfb"
            vmfb = build(module, target, flags, source_name=source.name).vmfb
            first = first or vmfb
            path.write_bytes(vmfb)
            variants.append(ModuleFunction(name, str(path), "main", parameters))
        base = load_function(first, "main", parameters=parameters)
        arguments = argument_types(base)
        torch = torch_source(text, None)
        reference = reference_for("auto", text, base, 1, None, torch)
        problems = token_problems(text, arguments, torch, reference.fn, seq)
        settings = MeasureSettings(
            min_time=args.min_time, rounds=args.rounds, warmup=0.2, rtol=1e-4
        )
        with threadpool_limits(limits=1), Runner(RunnerSettings(settings, timeout=900)) as runner:
            results = runner.measure_shapes(variants, problems)
    names = list(sources)[1:]
    ratios = {n: {t: results[t].ratio(n, BASE) for t in seq} for n in names}
    errors = [
        f"T={t} {n}: {timing.error.splitlines()[0]}"
        for t in seq
        for n, timing in results[t].timings.items()
        if timing.error
    ]
    worst = max((x.max_error or 0.0) for t in seq for x in results[t].timings.values())
    lines = [
        f"{args.layers}-layer GPT-2, every projection an explicit M0 = {args.m0} kernel; "
        f"time over IREE data tiling's (median of {args.rounds} per-round ratios)",
        "| build | " + " | ".join(f"T={t}" for t in seq) + " | geomean |",
        "|---|" + "---:|" * (len(seq) + 1),
    ]
    for name in names:
        row = [ratios[name][t] for t in seq]
        geomean = math.exp(statistics.mean(math.log(r) for r in row))
        lines.append(f"| {name} | " + " | ".join(f"{r:.2f}" for r in row) + f" | {geomean:.2f} |")
    base_ms = ", ".join(f"T={t} {results[t].timings[BASE].median * 1e3:.2f}" for t in seq)
    lines.append(f"{BASE} ms: {base_ms}; worst relative error {worst:.1e}")
    print("\n".join(lines + errors))
    record = {
        "layers": args.layers,
        "m0": args.m0,
        "rounds": args.rounds,
        "ratios": {n: {str(t): r for t, r in v.items()} for n, v in ratios.items()},
        "data_tiling_ms": {str(t): results[t].timings[BASE].median * 1e3 for t in seq},
        "errors": errors,
        "max_error": worst,
        "command": " ".join(["python benchmarks/explicit_in_model.py", *sys.argv[1:]]),
        "table": lines,
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
