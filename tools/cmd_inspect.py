"""``dcmlir inspect``: what each CUDA candidate really costs on an arch, read from the build.

No GPU and no estimates: registers and spills from ``ptxas``, shared memory from
IREE's LLVM IR, tensor-core instructions from the SASS, blocks per SM from
NVIDIA's allocation rules on those figures (``docs/cuda.md``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import IO

from dcmlir.build.inspect import FIGURE_SOURCES, FiguresCache, KernelReport, inspect_kernels
from dcmlir.cuda_tools import CudaToolMissing, tool_version
from dcmlir.space import select_candidates, workload_space
from dcmlir.target import CudaTarget, parse_overrides, target_from_name
from dcmlir.tools.common import CliError, list_workloads, read_input
from dcmlir.workload import Workload

HEADER = (
    "candidate",
    "block",
    "regs",
    "est",
    "spill B",
    "smem B",
    "blocks/SM",
    "warps/SM",
    "limiter",
    "tensor-core",
)


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "inspect",
        help="build CUDA candidates and print their real registers, shared memory, occupancy",
        description="Build every CUDA candidate of each workload (no GPU needed), assemble "
        "each kernel with ptxas for the arch and print its block size, registers (and the "
        "space's estimate), spills, shared memory, blocks and warps per SM with the limiter, "
        "and its tensor-core instruction count, each figure's source named. Needs "
        "pip install 'dcmlir[cuda-tools]'.",
    )
    parser.add_argument("input", metavar="INPUT.mlir", help="MLIR file with dynamic-shape ops")
    parser.add_argument("--target", default="cuda", choices=("cuda",))
    parser.add_argument("--arch", default="sm_80", help="CUDA arch, e.g. sm_80 or sm_90")
    parser.add_argument(
        "--target-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a target limit, e.g. sm_count=114 (repeatable)",
    )
    parser.add_argument(
        "--candidates",
        type=int,
        default=0,
        metavar="N",
        help="inspect N candidates spread evenly over the space; 0: all (default)",
    )
    parser.add_argument(
        "--figures",
        metavar="FILE.json",
        help="the real-figures cache (default: cuda-figures.json in the build cache directory)",
    )
    parser.set_defaults(run=run)
    return parser


def report_lines(target: CudaTarget, reports: list[KernelReport]) -> list[str]:
    """One aligned row per kernel (a build failure says so in its row)."""
    rows = [list(HEADER)]
    for report in reports:
        candidate, figures, use = report.candidate, report.figures, report.occupancy
        if figures is None or use is None:
            rows.append([candidate.key(), f"failed: {report.error}"])
            continue
        estimate = getattr(candidate, "registers_per_thread", None)
        rows.append(
            [
                candidate.key(),
                str(figures.threads),
                str(figures.registers),
                str(estimate()) if estimate is not None else "-",
                str(figures.spill_bytes),
                str(figures.smem_bytes),
                str(use.blocks_per_sm),
                f"{use.warps_per_sm}/{target.max_threads_per_sm // target.warp_size}",
                use.limiter,
                str(figures.tensor_core_instructions),
            ]
        )
    widths = [max(len(r[i]) for r in rows if len(r) == len(HEADER)) for i in range(len(HEADER))]
    lines = []
    for row in rows:
        if len(row) != len(HEADER):
            lines.append("  ".join([row[0].ljust(widths[0]), *row[1:]]))
            continue
        cells = [
            c.ljust(w) if i in (0, 8) else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def sources_line() -> str:
    """Where each column comes from, with the tools' releases."""
    ptxas, nvdisasm = tool_version("ptxas"), tool_version("nvdisasm")
    named = {
        **FIGURE_SOURCES,
        "registers": f"ptxas -v ({ptxas})",
        "spills": f"ptxas -v ({ptxas})",
        "tensor-core": f"SASS HMMA/HGMMA (nvdisasm {nvdisasm})",
        "est": "the space's register estimate",
    }
    return "sources: " + "; ".join(f"{name}: {source}" for name, source in named.items())


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Inspect every distinct workload's CUDA candidates: one table each."""
    try:
        target = target_from_name(
            "cuda", arch=args.arch, overrides=parse_overrides(args.target_option)
        )
    except ValueError as error:
        raise CliError(f"--target: {error}") from None
    assert isinstance(target, CudaTarget)
    source, text = read_input(args.input)
    listing = list_workloads(text, source, (), err, ranges_needed=False)
    unique: dict[str, Workload] = {}
    for workload in listing.found:
        unique.setdefault(workload.key, workload)
    if not unique:
        print(f"{source}: no dynamic-shape contraction to inspect", file=err)
        return 0
    cache = FiguresCache(Path(args.figures) if args.figures else None)
    try:
        print(f"target: {target.describe()}", file=out)
        print(sources_line(), file=out)
        for workload in unique.values():
            candidates = select_candidates(workload_space(target, workload), args.candidates)
            print(f"\nworkload {workload.describe()} at {workload.location}", file=out)
            reports = inspect_kernels(workload, target, candidates, cache)
            for line in report_lines(target, reports):
                print(line, file=out)
    except CudaToolMissing as error:
        raise CliError(str(error)) from None
    return 0
