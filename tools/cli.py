"""The ``dcmlir`` command: one entry point, one subcommand per job.

User errors (a missing file, bad IR, a malformed option) end as one
``dcmlir: error: ...`` line (IR errors as ``file:line:col: error: ...``) and a
non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import IO, NoReturn

import numpy as np
from threadpoolctl import threadpool_limits

from dcmlir.build.compiler import BuildError, build, default_cache
from dcmlir.dispatch.plan import WorkloadPlan
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.inputs import InputError, read_module_source
from dcmlir.ir.iree import RuntimeFailure, load_function, versions
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext, PassFailure
from dcmlir.measure.timing import (
    Comparison,
    Inputs,
    IreeVariant,
    MeasureSettings,
    PythonVariant,
    measure_shapes,
)
from dcmlir.passes.annotate_ranges import AnnotateRangesPass
from dcmlir.passes.list_workloads import build_report
from dcmlir.shapes import parse_range
from dcmlir.workload import (
    Workload,
    workloads,
)

PROG = "dcmlir"
DEMO_EXAMPLE = "bert_dense.mlir"
DEMO_FUNCTION = "dense"
DEMO_RANGE = "1:128"
DEMO_HIDDEN = 768
DEMO_BUDGETS = {"bert": 240, "dense": 240}
"""Tuning measurements of each demo when --budget is not given (a few minutes on 2 cores)."""


class CliError(Exception):
    """A user error: printed as one ``dcmlir: error:`` line, exit status 1."""


class DiagnosticsError(CliError):
    """IR diagnostics, already ``file:line:col: error: ...``: printed as they are."""


class UsageError(CliError):
    """A command line argparse rejects: exit status 2, as argparse's own errors."""


_DIAGNOSTIC = re.compile(r"^[^\s:][^:]*(?::\d+:\d+)?: error: ")


def user_error(message: str) -> CliError:
    """The error to raise for ``message``: a diagnostic (``file:line:col: error: ...``)
    prints as it is, anything else behind ``dcmlir: error:``; never both prefixes."""
    return DiagnosticsError(message) if _DIAGNOSTIC.match(message) else CliError(message)


VALUE_OPTIONS = ("--dims", "--shapes", "--seq")
"""Options whose value may start with '-' (a negative bound the checks then name)."""


def _join_dash_values(argv: Sequence[str]) -> list[str]:
    """``--dims -3:5`` -> ``--dims=-3:5``: argparse would take ``-3:5`` for an option."""
    joined: list[str] = []
    index = 0
    while index < len(argv):
        item = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else ""
        if item in VALUE_OPTIONS and following[:1] == "-" and following[1:2].isdigit():
            joined.append(f"{item}={following}")
            index += 2
            continue
        joined.append(item)
        index += 1
    return joined


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so ``main`` returns."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# --- shared pieces -------------------------------------------------------------------------


def example_path(name: str) -> Traversable:
    """A shipped example module (package data of ``dcmlir``)."""
    return resources.files("dcmlir") / "examples" / name


def read_input(path: str) -> tuple[str, str]:
    """(name for diagnostics, text) of a file, or of stdin for ``-``."""
    try:
        return read_module_source(path, sys.stdin)
    except InputError as err:
        raise CliError(str(err)) from None


@dataclass
class WorkloadListing:
    """The dynamic ops of a module: workloads, the ones left to IREE, one line each in IR order."""

    source: str
    found: list[Workload] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def fill_ranges(module: ir.Operation, dims: str, ctx: PassContext) -> None:
    """Record the ranges the IR gives; ``dims`` (LO:HI, or "") for every loop without one."""
    with suppress(PassFailure):  # the pass emitted its error diagnostic
        AnnotateRangesPass(range=dims).apply(ctx, module)


def list_workloads(text: str, source: str, dims: str | None, stderr: IO[str]) -> WorkloadListing:
    """Parse a module and describe its dynamic ops; ``dims`` (LO:HI) fills unknown ranges.

    Diagnostics go to ``stderr``; an error among them becomes :class:`CliError`.
    """
    if dims is not None:
        try:
            parse_range(dims)
        except ValueError as err:
            raise CliError(f"--dims: {err}") from None
    engine = DiagnosticEngine(source)
    listing = WorkloadListing(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is not None:  # ranges the IR assumes (util.assume.int) count without --dims
            fill_ranges(module.operation, dims or "", PassContext(engine, stderr))
        if module is not None and not engine.has_errors:
            for op, result in workloads(module.operation, source):
                if isinstance(result, Workload):
                    listing.found.append(result)
                    listing.lines.append(f"{result.location}: {op.name}: {result.describe()}")
                    continue
                where = str(engine.locate(op))
                listing.skipped.append({"op": op.name, "location": where, "reason": str(result)})
                listing.lines.append(f"{where}: {op.name}: not a workload, left to IREE: {result}")
    errors = [d for d in engine.diagnostics if d.severity == "error"]
    for diag in engine.diagnostics:
        if diag.severity != "error":
            print(diag.format(), file=stderr)
    if errors:
        # The first error is the one line; the others follow it as they would from mlir-opt.
        raise DiagnosticsError("\n".join(d.format() for d in errors))
    return listing


# --- workloads -----------------------------------------------------------------------------


def cmd_workloads(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    source, text = read_input(args.input)
    listing = list_workloads(text, source, args.dims, err)
    if args.json:
        report = build_report(listing.source, listing.found, listing.skipped)
        out.write(json.dumps(report, indent=2) + "\n")
        return 0
    for line in listing.lines:
        print(line, file=out)
    if not listing.found and not listing.skipped:
        print(f"{source}: no dynamic-shape linalg ops", file=err)
    return 0


# --- demo ----------------------------------------------------------------------------------


def parse_shapes(text: str) -> list[int]:
    """``1,7,32,128`` -> [1, 7, 32, 128]; each a positive integer, duplicates dropped."""
    shapes: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not (item.isascii() and item.isdigit()) or int(item) < 1:
            raise CliError(f"--shapes: '{item}' is not a positive integer (write e.g. 1,7,32,128)")
        if int(item) not in shapes:
            shapes.append(int(item))
    return shapes


def _dense_reference(inputs: Inputs) -> list[np.ndarray]:
    """x @ w in float64: the yardstick both the IREE build and numpy's fp32 are checked against."""
    x, w = inputs
    return [np.asarray(x, dtype=np.float64) @ np.asarray(w, dtype=np.float64)]


def _us(seconds: float) -> str:
    return "failed" if not math.isfinite(seconds) else f"{seconds * 1e6:.1f}"


def format_demo_table(results: dict[int, Comparison], plan: WorkloadPlan) -> list[str]:
    """T | IREE default | dcmlir | speedup | numpy | kernel, then the geomean speedup."""
    header = ("T", "IREE default (us)", "dcmlir (us)", "speedup", "numpy (us)", "dcmlir kernel")
    rows = [header]
    speedups = []
    for shape, comparison in results.items():
        ratio = comparison.ratio("IREE default", "dcmlir")
        if math.isfinite(ratio) and ratio > 0:
            speedups.append(ratio)
        chosen = plan.select({plan.dims[0].loop: shape})
        rows.append(
            (
                str(shape),
                _us(comparison["IREE default"].median),
                _us(comparison["dcmlir"].median),
                f"{ratio:.2f}x" if math.isfinite(ratio) else "-",
                _us(comparison["numpy"].median),
                chosen.candidate_key if chosen is not None else "IREE default (outside range)",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        " | ".join(
            cell.ljust(width) if index == len(header) - 1 else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    if speedups:
        geomean = math.exp(sum(math.log(r) for r in speedups) / len(speedups))
        lines.append(f"geomean speedup of dcmlir over IREE default: {geomean:.2f}x")
    return lines


def cmd_demo(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """The README's main job: tune a generated BERT encoder (or, ``--example dense``, the
    shipped dense layer), compile it, time it against IREE's default, outputs checked."""
    shapes = parse_shapes(args.shapes)
    if args.min_time <= 0:
        raise CliError("--min-time must be a positive number of seconds")
    budget = args.budget if args.budget is not None else DEMO_BUDGETS[args.example]
    if args.rounds < 1 or budget < 1 or args.layers < 1:
        raise CliError("--rounds, --budget and --layers must be at least 1")
    workdir = Path(args.workdir)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CliError(f"--workdir: cannot create '{workdir}': {error.strerror}") from None
    if args.example == "dense":
        return _demo_dense(args, shapes, budget, workdir, out, err)
    return _demo_bert(args, shapes, budget, workdir, out, err)


def _demo_bert(
    args: argparse.Namespace,
    shapes: list[int],
    budget: int,
    workdir: Path,
    out: IO[str],
    err: IO[str],
) -> int:
    """Generate the encoder, tune it as a model, compile it, run it against IREE's default."""
    import dataclasses

    from dcmlir.bench.model import ModelRunError, run_model
    from dcmlir.driver.tuner import TuneError, compile, compile_default, tune
    from dcmlir.models.bert import BERT_BASE, generate_encoder, save_model

    config = dataclasses.replace(BERT_BASE, layers=args.layers)
    model_path = workdir / "bert.mlir"
    model = generate_encoder(config, "params")
    parameters = save_model(model, model_path)
    print(f"dcmlir demo: {config.describe()} (generated, f32), in {model_path}", file=out)
    print(
        f"{PROG}: tuning the model's workloads for T in {config.seq[0]}:{config.seq[1]} "
        f"(budget {budget}; records, plan and modules in {workdir}/, a second run resumes)",
        file=err,
    )
    try:
        report = tune(
            model_path,
            budget=budget,
            db=workdir / "records.jsonl",
            output=workdir / "plan.json",
            device=args.device,
            stream=err,
        )
        print(f"{PROG}: compiling the model with the plan and with IREE's default", file=err)
        compiled = compile(model_path, plan=workdir / "plan.json", output=workdir / "bert.vmfb")
        default = compile_default(model_path)
    except TuneError as error:
        raise CliError(str(error)) from None
    for line in report.model_lines():
        print(f"  {line}", file=out)
    for line in report.lines():
        if not line.startswith("  kernel "):  # the plan has them; one line per workload here
            print(f"  {line}", file=out)
    settings = MeasureSettings(min_time=args.min_time, rounds=args.rounds, warmup=2 * args.min_time)
    try:
        run = run_model(
            model.text,
            compiled.vmfb,
            default,
            shapes,
            parameters=parameters,
            reference="numpy",
            device=args.device,
            settings=settings,
            progress=lambda t: print(f"{PROG}: measuring T={t}", file=err),
            config=config,
        )
    except ModelRunError as error:
        raise CliError(str(error)) from None
    print(
        f"\nthe whole {config.layers}-layer model per call on {args.device} "
        f"({run.threads} thread{'s' if run.threads > 1 else ''}); medians of {settings.rounds} "
        f"interleaved rounds, each sample >= {settings.min_time:g} s over {settings.input_sets} "
        f"random inputs; every output checked against the {run.reference} encoder (rel err <= "
        f"{settings.rtol:g}). speedup: IREE default time / dcmlir time, per round.",
        file=out,
    )
    print(file=out)
    for line in run.table():
        print(line, file=out)
    for failure in run.failures:
        print(f"{PROG}: error: {failure}", file=err)
    return 1 if run.failures else 0


def _demo_dense(
    args: argparse.Namespace,
    shapes: list[int],
    budget: int,
    workdir: Path,
    out: IO[str],
    err: IO[str],
) -> int:
    """The single dense layer: tune, compile, time against IREE's default and numpy."""
    from dcmlir.driver.tuner import TuneError, compile, tune

    example = str(example_path(DEMO_EXAMPLE))
    text = Path(example).read_text(encoding="utf-8")
    print(f"dcmlir demo: BERT-base dense layer {DEMO_EXAMPLE} (@{DEMO_FUNCTION}), f32", file=out)
    print(
        f"{PROG}: tuning T in {DEMO_RANGE} (budget {budget}; records, plan and "
        f"module in {workdir}/, a second run resumes)",
        file=err,
    )
    try:
        report = tune(
            example,
            dims=[DEMO_RANGE],
            budget=budget,
            db=workdir / "records.jsonl",
            output=workdir / "plan.json",
            device=args.device,
            stream=err,
        )
        compiled = compile(example, plan=workdir / "plan.json", output=workdir / "dense.vmfb")
    except TuneError as error:
        raise CliError(str(error)) from None
    for line in report.lines():
        print(f"  {line}", file=out)
    default = build(text, "llvm-cpu", source_name=DEMO_EXAMPLE)
    plan = report.workloads[0].plan
    variants = [
        IreeVariant("IREE default", load_function(default.vmfb, DEMO_FUNCTION, args.device)),
        IreeVariant("dcmlir", load_function(compiled.vmfb, DEMO_FUNCTION, args.device)),
        PythonVariant("numpy", np.matmul),
    ]
    settings = MeasureSettings(min_time=args.min_time, rounds=args.rounds, warmup=2 * args.min_time)

    def progress(shape: int) -> None:
        print(f"{PROG}: measuring T={shape}", file=err)

    with threadpool_limits(limits=1):
        results = measure_shapes(
            variants,
            shapes,
            lambda t: [(t, DEMO_HIDDEN), (DEMO_HIDDEN, DEMO_HIDDEN)],
            settings=settings,
            reference=_dense_reference,
            progress=progress,
        )
    threads = "1 thread" if args.device == "local-sync" else "IREE's task pool"
    print(
        f"\nx[T,{DEMO_HIDDEN}] @ w[{DEMO_HIDDEN},{DEMO_HIDDEN}] on {args.device} ({threads}); "
        f"medians of {settings.rounds} interleaved rounds, each sample >= {settings.min_time:g} s "
        f"over {settings.input_sets} random input sets; every output checked against numpy "
        f"(rel err <= {settings.rtol:g}). speedup: IREE default time / dcmlir time, per round.",
        file=out,
    )
    print(file=out)
    for line in format_demo_table(results, plan):
        print(line, file=out)
    failures = [
        f"T={shape}: {timing.name}: {timing.error.splitlines()[0]}"
        for shape, comparison in results.items()
        for timing in comparison.timings
        if timing.error is not None
    ]
    for failure in failures:
        print(f"{PROG}: error: {failure}", file=err)
    return 1 if failures else 0


# --- cache ---------------------------------------------------------------------------------


def _human_bytes(size: int) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def cmd_cache(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """The cache and, in $TMPDIR, scratch directories of runs killed before cleaning up."""
    import tempfile

    from dcmlir.build.compiler import directory_bytes, remove_stale_scratch, stale_scratch

    cache = default_cache()
    if args.clear:
        removed = cache.clear()
        print(f"removed {removed} cached module(s) from {cache.builds_dir}", file=out)
        count, freed = remove_stale_scratch()
        if count:
            print(
                f"removed {count} temporary dir(s) of killed runs ({_human_bytes(freed)}) "
                f"from {tempfile.gettempdir()}",
                file=out,
            )
        return 0
    entries = cache.entries()
    size = cache.size_bytes()
    print(f"{cache.directory}", file=out)
    print(f"{len(entries)} cached module(s), {_human_bytes(size)}", file=out)
    stale = stale_scratch()
    if stale:
        left = _human_bytes(sum(directory_bytes(path) for path in stale))
        print(
            f"{len(stale)} temporary dir(s) of killed runs in {tempfile.gettempdir()}, {left}"
            " (dcmlir cache --clear removes them)",
            file=out,
        )
    return 0


# --- main ----------------------------------------------------------------------------------


def version_text() -> str:
    stamp = versions()
    return f"{PROG} {stamp['dcmlir']} (IREE compiler {stamp['iree']})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="DietCode-style tuning of dynamic-shape MLIR linalg programs on IREE.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    listing = commands.add_parser(
        "workloads",
        help="list the dynamic-shape linalg ops of a module and what dcmlir would tune",
        description="List each dynamic-shape linalg op: its kind, iteration space, "
        "ranges, element types and structural key.",
    )
    listing.add_argument("input", metavar="INPUT.mlir", help="MLIR file ('-' for stdin)")
    listing.add_argument(
        "--dims",
        metavar="LO:HI",
        help="range (inclusive) for every dynamic dim whose range the IR does not give "
        "(util.assume.int bounds and recorded dcmlir.dim_ranges win)",
    )
    listing.add_argument("--json", action="store_true", help="print a JSON report instead")
    listing.set_defaults(run=cmd_workloads)

    demo = commands.add_parser(
        "demo",
        help="tune and compile a generated BERT encoder, time it against IREE's default",
        description="Generate a BERT-base encoder (hidden 768, 12 heads, FFN 3072, T dynamic in "
        "1..128, seeded weights), tune its workloads as one model, compile it, and time the whole "
        "model against IREE's default compilation side by side at each T, every output checked "
        "against the encoder's numpy reference. --example dense: the shipped dense layer "
        "(T x 768 @ 768 x 768) instead, also timed against numpy.",
    )
    demo.add_argument(
        "--example",
        default="bert",
        choices=("bert", "dense"),
        help="what to tune: the generated encoder or the dense layer (default: %(default)s)",
    )
    demo.add_argument(
        "--layers", type=int, default=2, help="encoder layers (bert; default: %(default)s)"
    )
    demo.add_argument(
        "--shapes",
        default="1,2,4,8,9,16,17,32,48,64,100,128",
        metavar="T,T,...",
        help="values of T (default: %(default)s)",
    )
    demo.add_argument(
        "--budget",
        type=int,
        default=None,
        help="tuning measurements (default: 240)",
    )
    demo.add_argument(
        "--workdir", default="dcmlir-demo", help="records, plan and module (default: %(default)s)"
    )
    demo.add_argument(
        "--device",
        default="local-sync",
        choices=("local-sync", "local-task"),
        help="IREE runtime device (default: %(default)s, one thread)",
    )
    demo.add_argument(
        "--min-time",
        type=float,
        default=0.05,
        metavar="S",
        help="seconds per timing sample (default: %(default)s)",
    )
    demo.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved samples per variant (default: %(default)s)",
    )
    demo.set_defaults(run=cmd_demo)

    from dcmlir.tools import cmd_bench, cmd_measure, cmd_models, cmd_run_model, cmd_tune

    cmd_measure.add_parser(commands)
    cmd_models.add_parsers(commands)
    cmd_tune.add_parsers(commands)
    cmd_run_model.add_parser(commands)
    cmd_bench.add_parser(commands)

    cache = commands.add_parser(
        "cache",
        help="show or clear the build cache",
        description="Show where compiled modules are cached ($DCMLIR_CACHE_DIR, else "
        "~/.cache/dcmlir) and how many there are.",
    )
    cache.add_argument("--clear", action="store_true", help="delete every cached module")
    cache.set_defaults(run=cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(_join_dash_values(sys.argv[1:] if argv is None else argv))
        if args.version:
            print(version_text(), file=out)
            return 0
        if args.command is None:
            parser.print_help(err)
            return 2
        return int(args.run(args, out, err))
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=err)
        return 2
    except DiagnosticsError as error:
        print(error, file=err)
        return 1
    except CliError as error:
        print(f"{PROG}: error: {error}", file=err)
        return 1
    except BuildError as error:
        print(f"{PROG}: error: IREE could not compile the module:\n{error}", file=err)
        return 1
    except RuntimeFailure as error:
        print(f"{PROG}: error: {error}", file=err)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=err)
        return 130


if __name__ == "__main__":
    # `python -m dcmlir.tools.cli`: run the imported module's main, so that the CliError the
    # command modules import from dcmlir.tools.cli is the class main catches (this copy,
    # __main__, has its own), else their errors would end in a traceback.
    from dcmlir.tools.cli import main as _main

    sys.exit(_main())
