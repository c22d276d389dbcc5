"""``dcmlir tune`` and ``dcmlir compile``: thin command-line layers over :mod:`dcmlir.driver`."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from dcmlir.cuda_tools import INSTALL_HINT, CudaToolMissing, find_tool
from dcmlir.dispatch import Plan
from dcmlir.driver import TuneError, compile, tune
from dcmlir.driver.offline import PREDICTED_MARK
from dcmlir.ir.iree import cuda_device_available
from dcmlir.measure.host import device_threads
from dcmlir.measure.loop import TD_ON_CUDA, NoDevice
from dcmlir.records import DatabaseError
from dcmlir.search.model_graph import graph_path_for
from dcmlir.target import CudaTarget
from dcmlir.tools.common import (
    CliError,
    add_threads_option,
    checked_threads,
    distinct_paths,
    interrupted_status,
    plan_device_warning,
    seconds,
    seed,
    user_error,
)


def add_parsers(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``dcmlir tune`` and ``dcmlir compile``."""
    tune = commands.add_parser(
        "tune",
        help="tune every dynamic workload of a module and write a plan",
        description="Find the module's dynamic-shape contractions (identical ops tuned once; a "
        "whole model works: its workloads are found where IREE's codegen sees them, see "
        "--level), split the budget over them by their estimated share of model time, "
        "measure micro-kernels on their cherry-picked shapes, fit the cost model, select at most "
        "--max-kernels kernels per workload by set cover, verify by measurement until the budget "
        "is spent, and write the plan (kernels + decision tree) and the model's workload graph "
        "beside it (PLAN.graph.json). Resumes from the records file.",
    )
    tune.add_argument("input", metavar="INPUT.mlir")
    tune.add_argument("--target", default="llvm-cpu", choices=("llvm-cpu", "cuda"))
    tune.add_argument("--arch", default=None, help="CUDA arch (sm_80, sm_90)")
    tune.add_argument(
        "--dims",
        action="append",
        default=[],
        metavar="LO:HI | ARG.DIM=LO:HI | ARG.DIM=ARG.DIM",
        help="range of every dynamic dim (LO:HI) or of one argument dim (arg0.0=1:128), or two "
        "argument dims that are one value at run time (arg0.1=arg0.2: their diagonal is "
        "tuned); repeatable; ranges in the IR (util.assume.int) count too",
    )
    tune.add_argument("--budget", type=int, default=400, help="timed (candidate, shape) pairs")
    tune.add_argument(
        "--max-kernels",
        type=int,
        default=8,
        help="kernels per workload, besides IREE's default and the one-tile kernels "
        "(each chosen only for the rows it wins) (default: 8)",
    )
    tune.add_argument(
        "--weight-layouts",
        type=int,
        default=2,
        choices=(1, 2),
        help="layouts a constant weight may be kept in: 2 lets two kernel families share an "
        "op where each alone is slower than an IREE build at some shape (a second copy of "
        "that weight); 1: one family, one copy (default: %(default)s)",
    )
    tune.add_argument(
        "--max-depth",
        type=int,
        default=None,
        help="decision tree depth (default: the shallowest tree within 1%% of the selection's "
        "estimated time)",
    )
    tune.add_argument(
        "--verbose",
        action="store_true",
        help="list every dynamic op left to IREE with its reason (default: one line per op "
        f"up to {LISTED_SKIPPED}, else one summary line by op kind)",
    )
    tune.add_argument("--db", default="records.jsonl", metavar="records.jsonl")
    tune.add_argument(
        "--search-log",
        default=None,
        metavar="rounds.jsonl",
        help="write each search's rounds to this JSON-lines file: the pairs each round "
        "timed, why (first measurements, duel, floor, proofs, verification), their estimate "
        "before and time after, and the final selection (docs/cli.md); a run resumed from "
        "--db logs every round again without timing it again",
    )
    tune.add_argument("-o", "--output", default="plan.json", metavar="plan.json")
    tune.add_argument("--route", default="config", choices=("config", "td"))
    tune.add_argument("--seed", type=seed, default=0)
    tune.add_argument("--device", default="local-sync", choices=("local-sync", "local-task"))
    add_threads_option(tune)
    tune.add_argument("--min-time", type=seconds, default=0.03, metavar="S")
    tune.add_argument("--rounds", type=int, default=3)
    tune.add_argument("--timeout", type=seconds, default=60.0, metavar="S")
    tune.add_argument(
        "--level",
        default="auto",
        choices=("auto", "input", "global-optimization"),
        help="where the workloads are found and the dispatch emitted: the module as given, "
        "or after IREE's global optimization (the forms codegen sees); auto: the latter "
        "when it changes the workloads (default: %(default)s)",
    )
    tune.add_argument(
        "--predict",
        action="store_true",
        help="cuda: plan from the offline model (ptxas figures, roofline) even with a GPU "
        "here; without one this is what tune does when the cuda-tools extra is installed. "
        'The plan says "predicted": true',
    )
    tune.add_argument(
        "--no-placement",
        action="store_true",
        help="keep the compiled module's code where IREE puts it from stdin; by default the "
        "module is compiled under four placements of its code after tuning, timed side by "
        "side, and the plan keeps the fastest (docs/design.md section 8)",
    )
    tune.add_argument(
        "--no-guard",
        action="store_true",
        help="keep the search's plan as it is; by default the tuned module is timed beside "
        "IREE's default and data-tiling builds and the plan keeps theirs where it is more "
        "than 3%% slower (docs/design.md section 8)",
    )
    tune.set_defaults(run=run_tune)

    compile_ = commands.add_parser(
        "compile",
        help="emit a plan's dispatch into a module and compile it with IREE",
        description="Replace each planned op by an scf.if cascade over its tuned kernels "
        "(IREE's default outside the tuned range) and compile the module for the plan's target, "
        "at the level the plan was tuned at (global optimization: the module is lowered there "
        "first and IREE resumes from it). Function names and signatures are unchanged: a "
        "drop-in for IREE's own compilation.",
    )
    compile_.add_argument("input", metavar="INPUT.mlir")
    compile_.add_argument("--plan", required=True, metavar="plan.json")
    compile_.add_argument("--target", default=None, choices=("llvm-cpu", "cuda"))
    compile_.add_argument("-o", "--output", required=True, metavar="out.vmfb")
    compile_.add_argument("--emit-mlir", default=None, metavar="out.mlir")
    compile_.add_argument(
        "--allow-other-iree",
        action="store_true",
        help="use a plan tuned with another IREE version (refused by default: its kernels "
        "were measured with another compiler)",
    )
    compile_.set_defaults(run=run_compile)


def _checked(args: argparse.Namespace) -> None:
    """Reject option values tuning cannot use, before any work."""
    if args.budget < 1 or args.max_kernels < 1:
        raise CliError("--budget and --max-kernels must be >= 1")
    if args.max_depth is not None and args.max_depth < 1:
        raise CliError("--max-depth must be >= 1")
    if args.rounds < 1:  # --min-time and --timeout are > 0 by their type (common.seconds)
        raise CliError("--rounds must be >= 1")
    if args.target != "cuda" and args.arch is not None:
        raise CliError("--arch applies to --target cuda only")
    if args.target == "cuda" and args.route == "td":
        raise CliError(TD_ON_CUDA)
    checked_threads(args.device, args.threads)
    distinct_paths(
        {
            "INPUT": args.input,
            "--db": args.db,
            "-o": args.output,
            "the workload graph beside -o": graph_path_for(args.output),
            "--search-log": args.search_log,
        }
    )


def run_tune(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Tune the module, write the plan, print the report."""
    _checked(args)
    if args.predict and args.target != "cuda":
        raise CliError("--predict plans a CUDA target (--target cuda)")
    predict = True if args.predict else None
    if args.target == "cuda" and not args.predict and not cuda_device_available():
        try:
            arch = CudaTarget.from_overrides({"arch": args.arch} if args.arch else {}).arch
        except ValueError as error:
            raise CliError(f"--arch: {error}") from None
        if find_tool("ptxas") is None or find_tool("nvdisasm") is None:
            print(
                f"dcmlir: {NoDevice.for_arch(arch)}; no plan written (an offline, predicted "
                f"plan needs {INSTALL_HINT})",
                file=err,
            )
            return 0
        predict = True
    try:
        report = tune(
            args.input,
            dims=args.dims,
            target=args.target,
            arch=args.arch,
            budget=args.budget,
            max_kernels=args.max_kernels,
            weight_layouts=args.weight_layouts,
            db=args.db,
            output=args.output,
            route=args.route,
            seed=args.seed,
            max_depth=args.max_depth,
            device=args.device,
            threads=args.threads,
            min_time=args.min_time,
            rounds=args.rounds,
            timeout=args.timeout,
            level=args.level,
            stream=err,
            predict=predict,
            placement=not args.no_placement,
            guard=not args.no_guard,
            search_log=args.search_log,
        )
    except CudaToolMissing as error:
        raise CliError(str(error)) from None
    except NoDevice as error:  # CUDA without a GPU: one line, exit 0, no plan (docs/cuda.md)
        print(f"dcmlir: {error}; no plan written", file=err)
        return 0
    except (TuneError, DatabaseError) as error:
        raise user_error(str(error)) from None
    except (
        KeyboardInterrupt
    ) as stop:  # Ctrl-C, SIGTERM: every record is a whole line, so nothing is lost
        print(
            f"dcmlir: interrupted; the records in {args.db} are kept: run the same command "
            "again to resume (nothing recorded is measured again)",
            file=err,
        )
        return interrupted_status(stop)
    if not report.plan.workloads:
        left = (
            f" ({len(report.skipped)} dynamic op(s) left to IREE, below)" if report.skipped else ""
        )
        print(
            f"nothing to tune in {args.input}: no dynamic-shape contraction dcmlir tunes{left};"
            f" the plan in {args.output} is empty, and dcmlir compile with it compiles the module"
            " as IREE does",
            file=out,
        )
    mark = f"{PREDICTED_MARK} " if report.plan.predicted else ""
    for line in report.lines():
        print(f"{mark}{line}", file=out)
    for line in skipped_lines(report.skipped, args.verbose):
        print(line, file=err)
    for line in report.model_lines():
        print(f"{mark}{line}", file=out)
    graph = f"; workload graph in {report.graph_path}" if report.graph_path else ""
    print(f"{mark}plan written to {args.output} ({report.seconds:.0f} s){graph}", file=out)
    return 0


def run_compile(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Compile the module with the plan's dispatch."""
    distinct_paths(
        {"INPUT": args.input, "--plan": args.plan, "-o": args.output, "--emit-mlir": args.emit_mlir}
    )
    try:
        result = compile(
            args.input,
            plan=args.plan,
            target=args.target,
            output=args.output,
            emit_mlir=args.emit_mlir,
            allow_other_iree=args.allow_other_iree,
            stream=err,
        )
    except TuneError as error:
        raise user_error(str(error)) from None
    size = Path(args.output).stat().st_size
    plan = Plan.load(args.plan)
    predicted = plan.predicted
    warning = plan_device_warning(plan.device, plan.threads, device_threads("local-task"))
    if warning is not None:
        print(warning, file=err)
    print(
        (f"{PREDICTED_MARK} " if predicted else "")
        + f"{args.output}: {result.dispatched} op(s) dispatched, {size} bytes"
        + (f"; MLIR in {args.emit_mlir}" if args.emit_mlir else "")
        + (f" (it builds with {' '.join(result.flags)})" if args.emit_mlir and result.flags else "")
        + ("; kernels chosen by the offline model, not timed" if predicted else ""),
        file=out,
    )
    return 0


LISTED_SKIPPED = 3
"""Up to this many ops left to IREE are listed one per line without --verbose."""

_OP_NAME = re.compile(r": ([a-z_][a-z0-9_]*\.[a-z0-9_.]+): ")


def skipped_lines(skipped: Sequence[str], verbose: bool) -> list[str]:
    """What ``tune`` says of the dynamic ops it leaves to IREE: each one with its reason
    (``--verbose``, or a few), else one line counting them by op kind (a 2-layer GPT-2
    leaves 131 elementwise, softmax and norm ops: 131 lines before the summary)."""
    if verbose or len(skipped) <= LISTED_SKIPPED:
        return [f"left to IREE: {line}" for line in skipped]
    kinds = Counter(
        match.group(1) if (match := _OP_NAME.search(line)) else "other" for line in skipped
    )
    counts = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    return [
        f"left to IREE: {len(skipped)} dynamic ops dcmlir does not tune ({counts}); "
        "--verbose lists each with its reason"
    ]
