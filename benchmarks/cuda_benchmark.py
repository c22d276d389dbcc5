"""GPU benchmark (issue 7): dcmlir on the six BERT-base workloads on a CUDA GPU, vs IREE and cuBLAS.

Needs a CUDA GPU, IREE 3.13 (compiler and runtime) and torch with CUDA; meant to run
in one call on a lent H100 through ``benchmarks/gpu_session.sh`` (docs/cuda.md).
For each workload (T dynamic in 1..128, the attention batch matmuls with both
T dims equal), in the order of ``benchmarks/bert_workloads.py``:

1. ``dcmlir.tune`` for ``cuda`` / ``--arch`` with a small budget (the GPU is
   fast; compiles dominate), then ``dcmlir.compile``: the dispatched module;
2. IREE's default CUDA lowering of the same module;
3. side by side in one process, interleaved per T (docs/design.md, section 4): the
   dispatched module, IREE's default, and ``torch.matmul`` (cuBLAS) in fp32 with
   TF32 off and with TF32 on. Each is timed two ways:
   - **latency**: one synchronized call (IREE's synchronous ABI waits for the
     GPU; torch calls ``torch.cuda.synchronize()``): what a caller waits;
   - **device**: R calls back to back, divided by R (IREE: the dispatch repeated
     R times in one command buffer, ``--iree-hal-benchmark-dispatch-repeat-count``;
     torch: R launches, one synchronize): the kernel with launch costs amortised.
   Every output of every variant is checked against float64 numpy (rtol 2e-3, the
   TF32 bound; each variant's worst error is recorded, fp32 ones must stay under 1e-4).

With the ``cuda-tools`` extra (``--offline``, on when ptxas is installed), each workload
also gets the offline plan (``dcmlir.tune(..., predict=True)``: ptxas figures and the
roofline model, nothing timed, docs/cuda.md), compiled and timed beside the measured one
as ``dcmlir_offline``: the section says how far the prediction lands from measuring.

Everything goes to ``--out`` after each workload (a run stopped by a time limit
keeps what it finished): ``cuda_benchmark.json`` (every number),
``benchmarks-cuda.md`` (docs/benchmarks-cuda.md with its results section
replaced), ``cuda_benchmark.png`` and ``cuda_records.jsonl`` (the tuning
records, for the occupancy calibration). Without a GPU it says so in one line
and exits 0.

    python benchmarks/cuda_benchmark.py --arch sm_90 --out $OUT [--budget 48] [--deadline 500]
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bert_workloads import workloads as bert_workloads

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks-cuda.md"
BEGIN, END = "<!-- cuda-benchmark:begin -->", "<!-- cuda-benchmark:end -->"
RTOL = 2e-3  # TF32 (10-bit mantissa products) on K up to 3072; fp32 stays far below
FP32_RTOL = 1e-4
VARIANTS = ("dcmlir", "iree_default", "torch_fp32", "torch_tf32")
OFFLINE = "dcmlir_offline"
LABELS = {
    "dcmlir": "dcmlir",
    OFFLINE: "dcmlir offline (predicted) plan",
    "iree_default": "IREE default",
    "torch_fp32": "cuBLAS fp32 (TF32 off)",
    "torch_tf32": "cuBLAS TF32",
}


def geomean(values: list[float]) -> float:
    good = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


# --- one workload ------------------------------------------------------------------------------


def build_modules(name: str, text: str, args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Tune, compile the dispatch, build the four IREE modules (latency and repeated)."""
    import dcmlir
    from dcmlir.build.compiler import DISPATCH_REPEAT_FLAG, build

    work = Path(args.work)
    source = work / f"{name}.mlir"
    source.write_text(text)
    plan_path = work / f"{name}.plan.json"
    log = io.StringIO()
    start = time.perf_counter()
    report = dcmlir.tune(
        source,
        dims=["1:128"],
        target=target,
        budget=args.budget,
        db=Path(args.out) / "cuda_records.jsonl",
        output=plan_path,
        min_time=args.tune_min_time,
        rounds=args.tune_rounds,
        level="input",
        stream=log,
    )
    tune_seconds = time.perf_counter() - start
    (item,) = report.workloads
    compiled = dcmlir.compile(source, plan=plan_path, stream=log)
    repeat = (f"{DISPATCH_REPEAT_FLAG}={args.repeat}",)
    default_text = target.wrap_module(text)
    modules = {
        "dcmlir": compiled.vmfb,
        "iree_default": build(default_text, target, source_name=f"{name}.mlir").vmfb,
        "dcmlir@R": build(compiled.mlir, target, repeat, source_name=f"{name}.mlir").vmfb,
        "iree_default@R": build(default_text, target, repeat, source_name=f"{name}.mlir").vmfb,
    }
    built = {
        "item": item,
        "modules": modules,
        "tune_seconds": tune_seconds,
        "plan": json.loads(plan_path.read_text()),
        "log": log.getvalue(),
    }
    if args.offline_plans:  # made without a GPU (--make-offline-plans), carried here
        offline_path = Path(args.offline_plans) / f"{name}.offline.plan.json"
    elif args.offline:  # the plan a user without this GPU would have cross-compiled
        offline_path = work / f"{name}.offline.plan.json"
        make_offline_plan(source, target, offline_path, log)
    if args.offline_plans or args.offline:
        offline = dcmlir.compile(source, plan=offline_path, stream=log)
        modules[OFFLINE] = offline.vmfb
        modules[f"{OFFLINE}@R"] = build(
            offline.mlir, target, repeat, source_name=f"{name}.mlir"
        ).vmfb
        built["offline_plan"] = json.loads(offline_path.read_text())
    return built


def make_offline_plan(source: Path, target: Any, output: Path, log: Any) -> None:
    """The predicted plan (ptxas figures + roofline, nothing timed; docs/cuda.md)."""
    import dcmlir

    dcmlir.tune(
        source,
        dims=["1:128"],
        target=target,
        db=output.with_suffix(".jsonl"),
        output=output,
        level="input",
        stream=log,
        predict=True,
    )


def measure_workload(workload: Any, modules: dict[str, bytes], args: argparse.Namespace) -> dict:
    """Every variant at every T, interleaved per T; medians per call (device: per op)."""
    from cuda_torch import TorchMatmul

    from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
    from dcmlir.measure.timing import MeasureSettings
    from dcmlir.measure.variants import HostModel, ModuleFunction, Variant

    scratch = Path(tempfile.mkdtemp(prefix="vmfb-", dir=args.work))
    variants: list[Variant] = []
    for key in ("dcmlir", "iree_default", "dcmlir@R", "iree_default@R", OFFLINE, f"{OFFLINE}@R"):
        if key not in modules:
            continue
        path = scratch / f"{key}.vmfb"
        path.write_bytes(modules[key])
        variants.append(ModuleFunction(key, str(path), "main"))
    for key, tf32 in (("torch_fp32", False), ("torch_tf32", True)):
        variants.append(HostModel(key, functools.partial(TorchMatmul, tf32)))
        variants.append(HostModel(f"{key}@R", functools.partial(TorchMatmul, tf32, args.repeat)))
    loops = [d.index for d in workload.dynamic_dims]
    problems = {
        t: ShapeProblem.of(workload, dict.fromkeys(loops, t))
        for t in sorted(args.side_t, reverse=True)
    }
    settings = MeasureSettings(
        min_time=args.min_time, rounds=args.rounds, input_sets=3, warmup=args.min_time, rtol=RTOL
    )
    with Runner(RunnerSettings(settings, driver="cuda", timeout=300.0)) as runner:
        results = runner.measure_shapes(variants, problems)
    shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for t in sorted(results):
        comparison = results[t]
        row: dict[str, Any] = {"t": t, "latency_us": {}, "device_us": {}, "max_error": {}}
        for key in (*VARIANTS, OFFLINE) if OFFLINE in modules else VARIANTS:
            latency, device = comparison[key], comparison[f"{key}@R"]
            row["latency_us"][key] = latency.median * 1e6
            row["device_us"][key] = device.median * 1e6 / args.repeat
            row["max_error"][key] = max(latency.max_error or 0.0, device.max_error or 0.0)
            errors = [timing.error for timing in (latency, device) if timing.error]
            if errors:
                row.setdefault("errors", {})[key] = errors[0].splitlines()[0]
            elif key != "torch_tf32" and row["max_error"][key] > FP32_RTOL:
                row.setdefault("errors", {})[key] = (
                    f"fp32 error {row['max_error'][key]:.2g} > {FP32_RTOL:g}"
                )
        row["ratio_vs_default"] = {  # per-round paired ratios, IREE default time / dcmlir time
            "latency": 1.0 / comparison.ratio("dcmlir", "iree_default"),
            "device": 1.0 / comparison.ratio("dcmlir@R", "iree_default@R"),
        }
        rows.append(row)
    return {"rows": rows}


def summarize(result: dict) -> None:
    """Geomeans over T of the speedups (others' time / dcmlir's time), per timing mode."""
    rows = result["rows"]
    summary = {}
    for mode in ("latency", "device"):
        column = f"{mode}_us"
        summary[mode] = {
            other: geomean([r[column][other] / r[column]["dcmlir"] for r in rows])
            for other in VARIANTS[1:]
        }
    result["geomean_speedup"] = summary


def run_workload(name: str, text: str, args: argparse.Namespace, target: Any) -> dict:
    print(f"== {name}: tune + build", file=sys.stderr, flush=True)
    built = build_modules(name, text, args, target)
    item = built["item"]
    print(f"== {name}: side by side, {len(args.side_t)} T", file=sys.stderr, flush=True)
    start = time.perf_counter()
    measured = measure_workload(item.workload, built["modules"], args)
    result = {
        "name": name,
        "workload": item.workload.describe(),
        "kernels": [k.candidate_key for k in item.plan.kernels],
        "tree_depth": item.plan.tree.depth,
        "measurements": item.search.measurements,
        "tune_seconds": built["tune_seconds"],
        "measure_seconds": time.perf_counter() - start,
        "plan": built["plan"],
        **measured,
    }
    if "offline_plan" in built:
        result["offline_plan"] = built["offline_plan"]
        result["offline_kernels"] = [
            w["candidate_key"] for w in built["offline_plan"]["workloads"][0]["kernels"]
        ]
        result["offline_vs_measured"] = {  # >1: the predicted plan is slower
            mode: geomean([r[f"{mode}_us"][OFFLINE] / r[f"{mode}_us"]["dcmlir"] for r in rows])
            for mode in ("device", "latency")
            for rows in (measured["rows"],)
        }
    summarize(result)
    return result


# --- output ------------------------------------------------------------------------------------


def environment(args: argparse.Namespace, target: Any) -> dict:
    import torch

    from dcmlir.ir.iree import versions

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        **versions(),
        "python": platform.python_version(),
        "target": target.key(),
        "commit": args.commit,
        "command": " ".join(["python", "benchmarks/cuda_benchmark.py", *sys.argv[1:]]),
        "settings": {
            "budget": args.budget,
            "repeat": args.repeat,
            "min_time": args.min_time,
            "rounds": args.rounds,
            "side_t": [min(args.side_t), max(args.side_t)],
        },
    }


def plot(results: list[dict], out: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return None
    columns = 3
    rows_n = math.ceil(len(results) / columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(15, 3.6 * rows_n), squeeze=False)
    for axis, result in zip(axes.flat, results, strict=False):
        t = [r["t"] for r in result["rows"]]
        for key in VARIANTS:
            axis.plot(t, [r["device_us"][key] for r in result["rows"]], label=LABELS[key], lw=1)
        axis.set_title(f"{result['name']} (device time per op)")
        axis.set_xlabel("T")
        axis.set_ylabel("us")
    for axis in list(axes.flat)[len(results) :]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    name = "cuda_benchmark.png"
    fig.savefig(out / name, dpi=80)
    plt.close(fig)
    return name


def markdown(results: list[dict], env: dict, plot_name: str | None, missing: list[str]) -> str:
    s = env["settings"]
    lines = [
        BEGIN,
        "## Measured",
        "",
        f"{env['gpu']} ({env['sm_count']} SMs), target `{env['target']}`, IREE {env['iree']},"
        f" torch {env['torch']} (CUDA {env['cuda']}), Python {env['python']}, dcmlir commit"
        f" {env['commit']}. T = {s['side_t'][0]}..{s['side_t'][1]}, f32; tuning budget"
        f" {s['budget']} measurements per workload. Side by side in one process, interleaved"
        f" per T, {s['rounds']} rounds of >= {s['min_time']:g} s per variant over 3 random input"
        " sets; every output checked against float64 numpy. **device**: R ="
        f" {s['repeat']} back-to-back calls per timed call, divided by R (IREE: the dispatch"
        " repeated in one command buffer; torch: R launches, one synchronize); **latency**: one"
        " synchronized call. Speedup: the other's time / dcmlir's time, geomean over T.",
        "",
        "Command (inside `benchmarks/gpu_session.sh run`):",
        "",
        "```",
        env["command"],
        "```",
        "",
        "| workload | kernels | measurements | tuning | vs IREE default (device) | vs IREE"
        " default (latency) | vs cuBLAS fp32 (device) | vs cuBLAS TF32 (device) | vs cuBLAS"
        " fp32 (latency) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        g = r["geomean_speedup"]
        lines.append(
            f"| `{r['name']}` | {len(r['kernels'])} | {r['measurements']} |"
            f" {r['tune_seconds']:.0f} s | **{g['device']['iree_default']:.2f}x** |"
            f" {g['latency']['iree_default']:.2f}x | **{g['device']['torch_fp32']:.2f}x** |"
            f" {g['device']['torch_tf32']:.2f}x | {g['latency']['torch_fp32']:.2f}x |"
        )
    if results:
        overall = {
            (mode, other): geomean([r["geomean_speedup"][mode][other] for r in results])
            for mode in ("device", "latency")
            for other in VARIANTS[1:]
        }
        lines.append(
            f"| **all {len(results)}** | | | | **{overall['device', 'iree_default']:.2f}x** |"
            f" {overall['latency', 'iree_default']:.2f}x |"
            f" **{overall['device', 'torch_fp32']:.2f}x** |"
            f" {overall['device', 'torch_tf32']:.2f}x | {overall['latency', 'torch_fp32']:.2f}x |"
        )
    if missing:
        lines += ["", f"Not reached before the time limit: {', '.join(missing)}."]
    errors = [
        f"{r['name']} T={row['t']}: {key}: {msg}"
        for r in results
        for row in r["rows"]
        for key, msg in row.get("errors", {}).items()
    ]
    if errors:
        lines += ["", f"Errors ({len(errors)}):", ""] + [f"- {e}" for e in errors[:20]]
    lines += [
        "",
        "Device time per op (us) at a few T (full rows in `results/cuda_benchmark.json`):",
        "",
        "| workload | T | dcmlir | IREE default | cuBLAS fp32 | cuBLAS TF32 | dcmlir kernel |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        for row in r["rows"]:
            if row["t"] not in (1, 16, 64, 100, 128):
                continue
            d = row["device_us"]
            kernel = _kernel_at(r, row["t"])
            lines.append(
                f"| `{r['name']}` | {row['t']} | {d['dcmlir']:.2f} | {d['iree_default']:.2f} |"
                f" {d['torch_fp32']:.2f} | {d['torch_tf32']:.2f} | `{kernel}` |"
            )
    offline = [r for r in results if "offline_vs_measured" in r]
    if offline:
        lines += [
            "",
            "Offline (predicted) plan, built without timing (ptxas figures + roofline model,"
            " docs/cuda.md), against the measured plan: its time / the measured plan's time,"
            " geomean over T (1.00: the prediction chose as well as measuring).",
            "",
            "| workload | offline kernels | measured kernels | device | latency |",
            "|---|---|---|---:|---:|",
        ]
        for r in offline:
            ratio = r["offline_vs_measured"]
            lines.append(
                f"| `{r['name']}` | {', '.join(f'`{k}`' for k in r['offline_kernels'])} |"
                f" {', '.join(f'`{k}`' for k in r['kernels'])} | {ratio['device']:.2f}x |"
                f" {ratio['latency']:.2f}x |"
            )
    if plot_name:
        lines += ["", f"![{plot_name}](results/{plot_name})"]
    lines.append(END)
    return "\n".join(lines)


def _kernel_at(result: dict, t: int) -> str:
    from dcmlir.dispatch import Plan

    plan = Plan.from_json(result["plan"])
    (workload,) = plan.workloads
    chosen = workload.select({d.loop: t for d in workload.dims})
    return chosen.candidate_key if chosen is not None else "IREE default (fallback)"


def write_outputs(results: list[dict], env: dict, out: Path, missing: list[str]) -> None:
    """Everything, after every workload: a run cut short keeps what it finished."""
    (out / "cuda_benchmark.json").write_text(
        json.dumps({"environment": env, "results": results}, indent=1) + "\n"
    )
    plot_name = plot(results, out)
    section = markdown(results, env, plot_name, missing)
    text = DOC.read_text() if DOC.exists() else "# CUDA benchmarks\n"
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    (out / "benchmarks-cuda.md").write_text(text)
    print(section)


# --- main --------------------------------------------------------------------------------------


def parse_range(text: str) -> list[int]:
    lo, _, hi = text.partition(":")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--workloads", default=",".join(bert_workloads()))
    parser.add_argument("--budget", type=int, default=48, help="tuning measurements per workload")
    parser.add_argument("--tune-min-time", type=float, default=0.005, metavar="S")
    parser.add_argument("--tune-rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.004, metavar="S")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=32, help="R of the device timing")
    parser.add_argument("--side-t", default="1:128", type=parse_range, metavar="LO:HI")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results"))
    parser.add_argument("--work", default=None, help="scratch folder (default: OUT/../work)")
    parser.add_argument("--commit", default=os.environ.get("DCMLIR_COMMIT", "unknown"))
    parser.add_argument(
        "--deadline", type=float, default=0, metavar="S", help="start no workload after S seconds"
    )
    parser.add_argument(
        "--offline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also build, compile and time the offline (predicted) plan (default: when the "
        "cuda-tools extra is installed)",
    )
    parser.add_argument(
        "--offline-plans",
        metavar="DIR",
        help="time the offline plans NAME.offline.plan.json of DIR (made without a GPU)",
    )
    parser.add_argument(
        "--make-offline-plans",
        metavar="DIR",
        help="write the offline plan of each workload to DIR and stop (no GPU needed; "
        "needs the cuda-tools extra)",
    )
    args = parser.parse_args(argv)
    from dcmlir.cuda_tools import find_tool
    from dcmlir.ir.iree import cuda_device_available
    from dcmlir.target import CudaTarget

    if args.make_offline_plans:
        folder = Path(args.make_offline_plans)
        folder.mkdir(parents=True, exist_ok=True)
        target = CudaTarget.from_overrides({"arch": args.arch})
        for name in args.workloads.split(","):
            source = folder / f"{name}.mlir"
            source.write_text(bert_workloads()[name])
            make_offline_plan(source, target, folder / f"{name}.offline.plan.json", sys.stderr)
        return 0
    if args.offline is None:
        args.offline = find_tool("ptxas") is not None and find_tool("nvdisasm") is not None

    if not cuda_device_available():
        print(
            "cuda_benchmark: no CUDA GPU present: nothing measured (run it on a lent GPU, "
            "see docs/cuda.md)",
            file=sys.stderr,
        )
        return 0
    target = CudaTarget.from_overrides({"arch": args.arch})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or str(out.parent / "cuda-work")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    env = environment(args, target)
    print(json.dumps(env), file=sys.stderr, flush=True)
    texts = bert_workloads()
    names = args.workloads.split(",")
    start = time.perf_counter()
    results: list[dict] = []
    for index, name in enumerate(names):
        if args.deadline and time.perf_counter() - start > args.deadline:
            write_outputs(results, env, out, names[index:])
            print(f"deadline: {', '.join(names[index:])} not run", file=sys.stderr)
            return 0
        results.append(run_workload(name, texts[name], args, target))
        write_outputs(results, env, out, names[index + 1 :])
    return 0


if __name__ == "__main__":
    sys.exit(main())
