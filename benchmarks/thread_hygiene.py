"""Benchmark: does IREE's default on ``local-task`` time the same with the peers present? (issue 15)

With more than one thread, OpenBLAS's, torch's and onnxruntime's idle workers spin
for a while after a call and take the cores IREE is being timed on. The Runner
therefore gives each thread pool a measuring process of its own and takes a sample
only once the others are quiet. This script times IREE's default build of a BERT
FFN layer (``?x768 @ 768x3072``, weight an argument) on ``local-task`` with every
core, three ways, interleaved round by round:

- ``alone``: IREE's default is the only variant;
- ``own processes``: numpy, torch and onnxruntime beside it, each in its own process
  (what ``dcmlir bench`` and ``tune`` now do with more than one thread);
- ``one process``: the same peers in IREE's process (how it was measured before).

It prints per T the median of IREE's default in each setting, the ratios to
``alone`` (medians of per-round ratios), and the most CPU (in cores) the other
processes took during one of its samples. A second table is the runtime's floor: a
one-dispatch module (16 floats squared) per call on ``local-sync`` and on
``local-task`` with 1 and every thread, workers sleeping (IREE's default) or
spinning 100 us (``--task_worker_spin_us``), each setting in a fresh process. Both
tables go to docs/benchmarks.md between the ``thread-hygiene`` markers.

    .venv/bin/python benchmarks/thread_hygiene.py
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bert_workloads import dense_module
from constant_weight_bench import replace_section

from dcmlir.build.compiler import build
from dcmlir.codegen.kernel import KernelVariant, kernel_module_text
from dcmlir.host_cpu import host_cpu
from dcmlir.ir.iree import versions
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.host import device_threads
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem
from dcmlir.measure.supervised import wait_quiet
from dcmlir.measure.timing import MeasureSettings
from dcmlir.measure.variants import HostLibrary, ModuleFunction, Variant
from dcmlir.workload import Workload, workloads

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- thread-hygiene:begin -->", "<!-- thread-hygiene:end -->"
COMMAND = "python benchmarks/thread_hygiene.py"
PEERS = ("numpy", "torch", "onnxruntime")
SETTINGS = {"alone": False, "own processes": True, "one process": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", default="1,8,32,128", help="the T to time")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of the three settings")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args()
    shapes = [int(t) for t in args.seq.split(",")]
    with ir.Context():
        ((_, workload),) = list(workloads(parse_module(dense_module(768, 3072)).operation))
    assert isinstance(workload, Workload)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "default.vmfb"
        path.write_bytes(build(kernel_module_text(workload, [KernelVariant("f")]), "llvm-cpu").vmfb)
        iree = ModuleFunction("iree-default", str(path), "f")
        peers: list[Variant] = [HostLibrary(p, p, workload.einsum()) for p in PEERS]
        measure = MeasureSettings(min_time=0.05, rounds=3, warmup=0.05)
        runners = {
            name: Runner(RunnerSettings(measure, driver="local-task", isolate=isolate))
            for name, isolate in SETTINGS.items()
        }
        rows = []
        try:
            for t in shapes:
                rows.append(time_shape(runners, iree, peers, workload, t, args.rounds))
                print_row(rows[-1])
        finally:
            for runner in runners.values():
                runner.close()
    table = [*markdown(rows), "", *floor_table()]
    print("\n".join(table))
    if not args.no_docs:
        replace_section(DOC, BEGIN, END, "\n".join([BEGIN, *table, END]))
    return 0


Row = dict[str, Any]


def time_shape(
    runners: dict[str, Runner],
    iree: Variant,
    peers: list[Variant],
    workload: Workload,
    t: int,
    rounds: int,
) -> Row:
    """Rounds of the three settings; IREE's default's medians, ratios and interference."""
    problem = ShapeProblem.of(workload, {0: t})
    times: dict[str, list[float]] = {name: [] for name in runners}
    interference = {name: 0.0 for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            everyone = [pid for other in runners.values() for pid in other.processes().values()]
            wait_quiet(everyone)  # the other settings' processes are quiet, too
            variants = [iree] if name == "alone" else [iree, *peers]
            result = runner.measure_shape(variants, problem)
            timing = result["iree-default"]
            if not timing.ok:
                raise SystemExit(f"thread_hygiene: IREE's default failed at T={t}: {timing.error}")
            times[name].append(timing.median)
            interference[name] = max(interference[name], timing.interference)
    base = times["alone"]
    return {
        "t": t,
        "ms": {name: statistics.median(v) * 1e3 for name, v in times.items()},
        "ratio": {
            name: statistics.median(a / b for a, b in zip(v, base, strict=True))
            for name, v in times.items()
        },
        "interference": interference,
    }


def print_row(row: Row) -> None:
    cells = ", ".join(f"{n} {row['ms'][n]:.3f} ms ({row['ratio'][n]:.2f})" for n in row["ms"])
    print(f"T={row['t']}: {cells}", file=sys.stderr)


def markdown(rows: list[Row]) -> list[str]:
    cpu = host_cpu()
    threads = device_threads("local-task")
    compiler = versions()["iree"]
    lines = [
        f"`?x768 @ 768x3072` (BERT's FFN1, weight an argument), IREE's default build on"
        f" `local-task` with {threads} threads, {cpu.model}, IREE {compiler}. Each setting"
        " keeps its own measuring processes; the settings take turns round by round, and"
        " before each turn every process of every setting is quiet. ms: medians over the"
        " rounds; ratio: median of per-round ratios to `alone`; interference: the most"
        " CPU (in cores) other processes took during one of IREE's samples (only the"
        " isolated setting watches it).",
        "",
        f"Command: `{COMMAND}`",
        "",
        "| T | alone (ms) | own processes (ms) | ratio | interference | one process (ms) | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ms, ratio = row["ms"], row["ratio"]
        lines.append(
            f"| {row['t']} | {ms['alone']:.3f} | {ms['own processes']:.3f}"
            f" | {ratio['own processes']:.2f} | {row['interference']['own processes']:.2f}"
            f" | {ms['one process']:.3f} | {ratio['one process']:.2f} |"
        )
    return lines


TINY = """func.func @f(%a: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]} ins(%a : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.mulf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<16xf32>
  return %r : tensor<16xf32>
}
"""
FLOOR_CALL = """
import sys, time, numpy as np
import iree.runtime as rt
driver, flags = sys.argv[2], sys.argv[3:]
if flags:
    rt.flags.parse_flags(*flags)
config = rt.Config(driver)
context = rt.SystemContext(config=config)
context.add_vm_module(rt.VmModule.copy_buffer(config.vm_instance, open(sys.argv[1], "rb").read()))
f = context.modules.module["f"]
a = rt.asdevicearray(config.device, np.ones(16, np.float32))
for _ in range(50):
    f(a)
rounds = []
for _ in range(7):
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.2:
        f(a)
        calls += 1
    rounds.append((time.perf_counter() - start) / calls)
print(sorted(rounds)[3])
"""


def floor_table() -> list[str]:
    """Seconds per call of a one-dispatch module per runtime setting, each in a fresh
    process (the flags are read once per process)."""
    threads = device_threads("local-task")
    settings = {
        "local-sync": ("local-sync",),
        "local-task, 1 thread": ("local-task", "--task_topology_max_group_count=1"),
        f"local-task, {threads} threads": (
            "local-task",
            f"--task_topology_max_group_count={threads}",
        ),
        f"local-task, {threads} threads, workers spin 100 us": (
            "local-task",
            f"--task_topology_max_group_count={threads}",
            "--task_worker_spin_us=100",
        ),
    }
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "tiny.vmfb"
        path.write_bytes(build(TINY, "llvm-cpu").vmfb)
        found = {}
        for name, argv in settings.items():
            run = subprocess.run(
                [sys.executable, "-c", FLOOR_CALL, str(path), *argv],
                capture_output=True,
                text=True,
                check=True,
            )
            found[name] = float(run.stdout.strip())
    lines = [
        "The runtime's floor: a module of one dispatch (16 floats squared), microseconds per"
        " call, median of 7 rounds of 0.2 s, each setting in a fresh process.",
        "",
        "| runtime | us per call |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {seconds * 1e6:.1f} |" for name, seconds in found.items()]
    return lines


if __name__ == "__main__":
    sys.exit(main())
