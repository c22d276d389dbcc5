"""``dcmlir bench``: a tuned workload against every baseline, side by side, with plots."""

from __future__ import annotations

import argparse
from typing import IO

from dcmlir.bench import (
    BASELINES,
    DEFAULT_BUCKETS,
    WEIGHT_MODES,
    BenchError,
    BenchSettings,
    bench,
    markdown,
    write_outputs,
)
from dcmlir.measure.loop import NoDevice
from dcmlir.records import DatabaseError
from dcmlir.shapes import SHAPES_GRAMMAR
from dcmlir.tools.common import CliError, add_threads_option, seconds, shapes_option, user_error

BASELINE_HELP = "; ".join(f"{name}: {text}" for name, text in BASELINES.items())


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "bench",
        help="time a tuned workload against every baseline (IREE default, data tiling, "
        "per-shape, oracle, bucketing, IREE specialization, numpy, torch, onnxruntime) and plot it",
        description="Compile one workload (a module whose function is one dynamic "
        "contraction) for every baseline and time them side by side in one process, "
        "interleaved per shape, every output checked. Writes NAME.json (every number), "
        "NAME.md (the table) and NAME.png (latency and speedup against shape) to -o.",
    )
    parser.add_argument("input", metavar="INPUT.mlir", help="the workload's module")
    parser.add_argument("--plan", required=True, help="the plan dcmlir tune wrote for it")
    parser.add_argument(
        "--dims",
        action="append",
        default=[],
        metavar="LO:HI",
        help="ranges as for dcmlir tune (default: the plan's range)",
    )
    parser.add_argument(
        "--shapes",
        metavar="T,LO:HI,...",
        help=f"values of the dynamic dims: {SHAPES_GRAMMAR}, each setting every dynamic dim, "
        "or NxM setting them one by one (default: 1..8, powers of two and their next value, "
        "the range's top)",
    )
    parser.add_argument(
        "--baselines",
        default="all",
        help=f"comma-separated, or 'all' (default). {BASELINE_HELP}",
    )
    parser.add_argument("-o", "--output", default="results", help="output folder (%(default)s)")
    parser.add_argument("--name", help="file name stem of the outputs (default: INPUT's)")
    parser.add_argument(
        "--db",
        default="bench-records.jsonl",
        help="oracle records: every candidate at every shape; a second run resumes "
        "(use one file per --device)",
    )
    parser.add_argument("--device", default="local-sync", choices=("local-sync", "local-task"))
    add_threads_option(parser)
    parser.add_argument(
        "--weights",
        choices=WEIGHT_MODES,
        help="operand 1 as a module constant (one fixed random array, only the activation an "
        "input: a model's projection) or as an argument (default: constant where operand 1 "
        "has no dynamic dim, else argument)",
    )
    parser.add_argument("--min-time", type=seconds, default=0.05, metavar="S")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--warm-calls",
        type=int,
        default=0,
        metavar="N",
        help="untimed calls of a baseline right before each of its samples (default 0); with "
        "a tiny --min-time the baselines alternate call by call, each timed call on the "
        "caches its own build left",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="time every shape in N fresh measuring processes, one after another, and keep "
        "each cell's median over them (default 1; on two threads a run's ratios move "
        "together, by up to 0.5x here)",
    )
    parser.add_argument(
        "--buckets",
        default=",".join(map(str, DEFAULT_BUCKETS)),
        help="bucket sizes of the bucketing baseline (%(default)s)",
    )
    parser.add_argument("--oracle-min-time", type=seconds, default=0.01, metavar="S")
    parser.add_argument("--oracle-rounds", type=int, default=2)
    parser.add_argument(
        "--oracle-candidates",
        type=int,
        default=0,
        metavar="N",
        help="oracle and bucketing over N candidates spread over the space (default 0: all)",
    )
    parser.add_argument("--timeout", type=seconds, default=60.0, metavar="S", help="per request")
    parser.set_defaults(run=run)
    return parser


def _integers(option: str, text: str) -> list[int]:
    """``8,16`` -> [8, 16]: non-negative integers, else one line naming the option."""
    values = []
    for item in text.split(","):
        item = item.strip()
        if not (item.isascii() and item.isdigit()):
            raise CliError(f"{option}: '{item}' is not a non-negative integer")
        values.append(int(item))
    return values


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Bench the workload, print the markdown table, write NAME.json/.md/.png."""
    baselines = (
        tuple(BASELINES)
        if args.baselines == "all"
        else tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    )
    try:
        settings = BenchSettings(
            baselines=baselines,
            device=args.device,
            threads=args.threads,
            min_time=args.min_time,
            rounds=args.rounds,
            warm_calls=args.warm_calls,
            processes=args.processes,
            buckets=tuple(_integers("--buckets", args.buckets)),
            oracle_min_time=args.oracle_min_time,
            oracle_rounds=args.oracle_rounds,
            oracle_candidates=args.oracle_candidates,
            timeout=args.timeout,
            weights=args.weights,
        )
        # the workload's rank is known inside bench(): N and ranges are widened there
        shapes = shapes_option("--shapes", args.shapes, None) if args.shapes else None
        result = bench(
            args.input,
            plan=args.plan,
            dims=args.dims,
            shapes=shapes,
            settings=settings,
            db=args.db,
            name=args.name,
            stream=err,
        )
    except NoDevice as error:
        print(f"dcmlir: {error}", file=err)
        return 0
    except (BenchError, DatabaseError) as error:
        raise user_error(str(error)) from None
    except ValueError as error:  # a shape of the wrong rank, named by the measurer
        raise CliError(f"--shapes: {error}") from None
    files = write_outputs(result, args.output)
    for line in markdown(result):
        print(line, file=out)
    print(f"\nwrote {', '.join(str(p) for p in files.values())}", file=err)
    return 1 if result.errors() else 0
