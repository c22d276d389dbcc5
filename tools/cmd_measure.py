"""``dcmlir measure``: build and time the micro-kernel space of a module's workloads.

Every result goes to the records file first (so an interrupted run resumes),
then into a candidate x shape table on stdout.
"""

from __future__ import annotations

import argparse
import math
from typing import IO

from dcmlir.build.routes import route_named
from dcmlir.driver import TuneError, target_with_threads
from dcmlir.measure.loop import TD_ON_CUDA, Measurer, MeasureReport
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import DatabaseError, RecordDatabase
from dcmlir.shapes import SHAPES_GRAMMAR
from dcmlir.space import DefaultCandidate, select_candidates, space_for, workload_space
from dcmlir.target import CudaTarget, Target, parse_overrides, target_from_name
from dcmlir.tools.common import (
    CliError,
    add_threads_option,
    checked_threads,
    distinct_paths,
    list_workloads,
    read_input,
    seconds,
    shapes_option,
)
from dcmlir.workload import Workload


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "measure",
        help="build and time the micro-kernel candidates of each workload at given shapes",
        description="Generate micro-kernel candidates from the target's limits, build them with "
        "IREE (many per compile, cached), time each on each shape against IREE's default in one "
        "process, append every result to the records file and print a candidate x shape table.",
    )
    parser.add_argument("input", metavar="INPUT.mlir", help="MLIR file with dynamic-shape ops")
    parser.add_argument("--target", default="llvm-cpu", choices=("llvm-cpu", "cuda"))
    parser.add_argument(
        "--arch", default="sm_80", help="CUDA arch, e.g. sm_80 or sm_90 (cuda only)"
    )
    parser.add_argument(
        "--target-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a target limit, e.g. vector_bits=256 or l2_bytes=1M (repeatable)",
    )
    parser.add_argument(
        "--shapes",
        required=True,
        metavar="S,S,...",
        help=f"values of the dynamic dims: {SHAPES_GRAMMAR}, each setting every dynamic dim "
        "(17: all 17), or NxM setting them one by one (17x33)",
    )
    parser.add_argument(
        "--candidates",
        type=int,
        default=0,
        metavar="N",
        help="measure N candidates spread evenly over the space (IREE's default always "
        "included); 0: all (default)",
    )
    parser.add_argument("--route", default="config", choices=("config", "td"))
    parser.add_argument("--db", required=True, metavar="records.jsonl", help="records file")
    parser.add_argument("--device", default="local-sync", choices=("local-sync", "local-task"))
    add_threads_option(parser)
    parser.add_argument("--min-time", type=seconds, default=0.05, metavar="S")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=seconds, default=60.0, metavar="S", help="per request")
    parser.add_argument("--top", type=int, default=0, metavar="N", help="print only the N best")
    parser.set_defaults(run=run)
    return parser


def make_target(args: argparse.Namespace) -> Target:
    """The target of --target, --arch and --target-option."""
    overrides = parse_overrides(args.target_option)
    arch = args.arch if args.target == "cuda" else None
    return target_from_name(args.target, arch=arch, overrides=overrides)


def format_table(report: MeasureReport, top: int = 0) -> list[str]:
    """Rows: candidates by geomean speedup over IREE's default; columns: shapes (us)."""
    default = DefaultCandidate().key()
    shapes = report.shapes

    def speedups(key: str) -> list[float]:
        return [report.median(default, s) / report.median(key, s) for s in shapes]

    def geomean(values: list[float]) -> float:
        if not values or any(not math.isfinite(v) or v <= 0 for v in values):
            return 0.0
        return math.exp(sum(math.log(v) for v in values) / len(values))

    keys = [c.key() for c in report.candidates]
    keys.sort(key=lambda k: -geomean(speedups(k)))
    if top > 0:
        keys = keys[:top] + ([default] if default not in keys[:top] else [])
    labels = ["x".join(map(str, s)) for s in shapes]
    header = ["candidate", *[f"{label} (us)" for label in labels], "geomean vs default"]
    rows = [header]
    best = {s: report.best(s)[0] for s in shapes}
    for key in keys:
        cells = [key]
        for shape in shapes:
            median = report.median(key, shape)
            mark = "*" if best[shape] == key and math.isfinite(median) else ""
            cells.append("failed" if not math.isfinite(median) else f"{median * 1e6:.1f}{mark}")
        gm = geomean(speedups(key))
        cells.append(f"{gm:.2f}x" if gm else "-")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Measure every distinct workload's candidates at --shapes; a table each."""
    shapes_option("--shapes", args.shapes, None)  # a malformed item fails before any work
    if args.rounds < 1:  # --min-time and --timeout are > 0 by their type (common.seconds)
        raise CliError("--rounds must be >= 1")
    distinct_paths({"INPUT": args.input, "--db": args.db})
    checked_threads(args.device, args.threads)
    try:
        target = make_target(args)
    except ValueError as error:
        raise CliError(f"--target: {error}") from None
    try:  # records follow the threads, as tune's do
        target = target_with_threads(target, args.device, args.threads)
    except TuneError as error:
        raise CliError(str(error)) from None
    if isinstance(target, CudaTarget) and args.route == "td":
        raise CliError(TD_ON_CUDA)
    source, text = read_input(args.input)
    listing = list_workloads(text, source, (), err, ranges_needed=False)
    unique: dict[str, Workload] = {}
    for workload in listing.found:
        unique.setdefault(workload.key, workload)
    if not unique:
        print(f"{source}: no dynamic-shape contraction to measure", file=err)
        return 0
    try:
        db = RecordDatabase(args.db)
        db.load()
    except DatabaseError as error:
        raise CliError(str(error)) from None
    settings = RunnerSettings(
        MeasureSettings(min_time=args.min_time, rounds=args.rounds, warmup=args.min_time),
        driver=args.device,
        timeout=args.timeout,
        threads=args.threads,
    )
    route = route_named(args.route)
    candidates = select_candidates(space_for(target), args.candidates)
    print(f"target: {target.describe()}", file=out)
    for workload in unique.values():
        if isinstance(target, CudaTarget):  # f16/bf16 sizes, the tensor-core family
            candidates = select_candidates(workload_space(target, workload), args.candidates)
        shapes = shapes_option("--shapes", args.shapes, len(workload.dynamic_dims))
        print(f"\nworkload {workload.describe()} at {workload.location}", file=out)
        print(f"{len(candidates)} candidates, route {route.name}, records {args.db}", file=out)
        try:
            with Measurer(
                workload,
                target,
                db,
                route=route,
                runner_settings=settings,
                stream=err,
                compile_only=True,  # CUDA without a GPU: build, record, say so
            ) as measurer:
                report = measurer.measure(candidates, shapes)
        except DatabaseError as error:
            raise CliError(str(error)) from None
        if report.skipped_no_device:
            built = len(candidates) - len(report.build_failures)
            print(
                f"built {built} of {len(candidates)} variants; no GPU here to time them", file=out
            )
            continue
        print(
            f"measured {report.measured} pairs now, {len(report.records) - report.measured} "
            "from the records; * best at that shape",
            file=out,
        )
        for line in format_table(report, args.top):
            print(line, file=out)
        for key, error in sorted(report.build_failures.items()):
            print(f"build failed: {key}: {error.splitlines()[0]}", file=err)
    return 0
