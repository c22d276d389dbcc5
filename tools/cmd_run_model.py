"""``dcmlir run-model``: a tuned model beside IREE's builds and its peers, checked and timed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import IO

from dcmlir.bench.model_compare import (
    PEERS,
    REFERENCES,
    ModelRunError,
    parameters_for,
    run_model,
)
from dcmlir.bench.model_inputs import Point, point_label
from dcmlir.dispatch import Plan, PlanError
from dcmlir.driver import TuneError, compile, compile_default
from dcmlir.files import write_atomic
from dcmlir.ir.iree import RuntimeFailure
from dcmlir.measure.host import device_threads
from dcmlir.measure.timing import MeasureSettings
from dcmlir.shapes import SHAPES_GRAMMAR
from dcmlir.tools.common import (
    PROG,
    CliError,
    add_threads_option,
    checked_threads,
    read_input,
    seconds,
    sizes_option,
)


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``dcmlir run-model``."""
    run = commands.add_parser(
        "run-model",
        help="check and time a tuned model against IREE's builds and its peers, per sequence "
        "length",
        description="Compile MODEL.mlir with the plan's dispatch, as IREE compiles it by default "
        "and with IREE's data tiling (all cached); export its torch model to ONNX when it is known "
        "(a generated encoder, or a model saved with a '// dcmlir-model:' header such as GPT-2), "
        "or take the .onnx file of a module dcmlir import-onnx wrote; "
        "then at each sequence length check every output against a reference (max abs error <= "
        "1e-4 of the output's scale) and time them side by side, interleaved in rounds (largest "
        "T first, as a warm-up): IREE default, IREE data tiling, dcmlir, onnxruntime, numpy (a "
        "generated encoder's float32 forward) and torch eager, every library with the device's "
        "thread count. "
        "Integer inputs are token ids in [0, vocab). A peer that cannot run is a column with its "
        "reason; a peer that fails a check is reported, and only IREE default's or dcmlir's "
        "failures make the exit status 1.",
    )
    run.add_argument("model", metavar="MODEL.mlir")
    run.add_argument("--plan", required=True, metavar="plan.json")
    run.add_argument(
        "--seq",
        default="1,7,64,128",
        metavar="T,LO:HI,...",
        help=f"sequence lengths: {SHAPES_GRAMMAR}, e.g. 1,7,64,128 or 8:128:8 "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--batch",
        default=None,
        metavar="B,LO:HI,...",
        help=f"batch sizes, for a model whose inputs have batch and T dynamic ([?, ?]): "
        f"{SHAPES_GRAMMAR}; the run covers every (batch, T) pair of --batch x --seq",
    )
    run.add_argument(
        "--reference",
        default="auto",
        choices=REFERENCES,
        help="what outputs are checked against: the generated encoder in numpy (float64) or in "
        "torch (float64; torch eager is then timed too), onnxruntime on the .onnx file of a "
        "module dcmlir import-onnx wrote, or IREE's default build; auto: onnxruntime for an "
        "ONNX-imported module, torch when installed, else numpy, for a generated encoder, else "
        "default (default: %(default)s)",
    )
    run.add_argument(
        "--device",
        default="local-sync",
        choices=("local-sync", "local-task"),
        help="IREE runtime device (default: %(default)s, one thread)",
    )
    add_threads_option(run)
    run.add_argument("--function", default="main", help="function to run (default: %(default)s)")
    run.add_argument(
        "--params", default=None, metavar="X.irpa", help="parameter archive (default: MODEL.irpa)"
    )
    run.add_argument("--vmfb", default=None, metavar="tuned.vmfb", help="take this tuned build")
    run.add_argument(
        "--default-vmfb", default=None, metavar="default.vmfb", help="take this default build"
    )
    run.add_argument(
        "--peers",
        default=",".join(_PEER_NAMES),
        metavar="P,...",
        help=f"peers timed beside IREE default and dcmlir: {', '.join(_PEER_NAMES)}, or none "
        "(default: %(default)s)",
    )
    run.add_argument("--min-time", type=seconds, default=0.05, metavar="S")
    run.add_argument("--rounds", type=int, default=5)
    run.add_argument("--json", default=None, metavar="OUT.json", help="also write the rows here")
    run.set_defaults(run=run_model_command)


_PEER_NAMES = dict(zip(("data-tiling", "onnxruntime", "numpy", "torch"), PEERS, strict=True))


def _peers(text: str) -> tuple[str, ...]:
    """--peers: names of :data:`_PEER_NAMES`, or ``none``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return ()
    unknown = [n for n in names if n not in _PEER_NAMES]
    if unknown:
        known = ", ".join([*_PEER_NAMES, "none"])
        raise CliError(f"--peers: '{unknown[0]}' is not one of {known}")
    return tuple(_PEER_NAMES[n] for n in names)


def _read_vmfb(path: str, option: str) -> bytes:
    """A build given on the command line; a missing file is one line naming the option."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise CliError(f"{option}: cannot read '{path}': {err.strerror}") from None


def run_model_command(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Build (or take) both builds, check and time them at every --seq (x --batch), print
    the table."""
    seq_lens = sizes_option("--seq", args.seq)
    points: list[Point] = list(seq_lens)
    if args.batch is not None:
        points = [(b, t) for b in sizes_option("--batch", args.batch) for t in seq_lens]
    peers = _peers(args.peers)
    if args.rounds < 1:  # --min-time is a finite number > 0 by its type (common.seconds)
        raise CliError("--rounds must be >= 1")
    checked_threads(args.device, args.threads)
    source, text = read_input(args.model)
    try:
        parameters = parameters_for(args.model, text, args.params)
        print(f"{PROG}: building {source} with the plan and with IREE's default", file=err)
        tuned = (
            _read_vmfb(args.vmfb, "--vmfb")
            if args.vmfb
            else compile(args.model, plan=args.plan, stream=err).vmfb
        )
        plan = _read_plan(args.plan)
        target = plan.target  # the default build is for the same target
        mismatch = plan.device_mismatch(args.device, device_threads(args.device, args.threads))
        if mismatch is not None:
            print(f"{PROG}: warning: {mismatch}", file=err)
        default = (
            _read_vmfb(args.default_vmfb, "--default-vmfb")
            if args.default_vmfb
            else compile_default(args.model, target)
        )
        settings = MeasureSettings(
            min_time=args.min_time, rounds=args.rounds, warmup=2 * args.min_time
        )
        run = run_model(
            text,
            tuned,
            default,
            points,
            function=args.function,
            parameters=parameters,
            reference=args.reference,
            device=args.device,
            threads=args.threads,
            settings=settings,
            progress=lambda point: print(f"{PROG}: {point_label(point)}", file=err),
            peers=peers,
            target=target,
            log=lambda line: print(f"{PROG}: {line}", file=err),
        )
    except (TuneError, ModelRunError, RuntimeFailure) as error:
        raise CliError(str(error)) from None
    print(
        f"{source} on {args.device} ({run.threads} thread{'s' if run.threads > 1 else ''}); "
        f"every output checked against {run.reference} (max abs error <= "
        f"{settings.rtol:g} x output scale); medians of {settings.rounds} interleaved rounds, "
        f"each sample >= {settings.min_time:g} s over {settings.input_sets} random inputs; "
        "speedup: IREE default time / dcmlir time, per round; dcmlir/best IREE: dcmlir's time "
        "over the faster of IREE default and IREE data tiling",
        file=out,
    )
    for line in run.table():
        print(line, file=out)
    if args.json:
        write_atomic(args.json, json.dumps(run.to_json(), indent=1) + "\n")
    for failure in run.peer_failures:
        print(f"{PROG}: warning: {failure}", file=err)
    for failure in run.failures:
        print(f"{PROG}: error: {failure}", file=err)
    return 1 if run.failures else 0


def _read_plan(plan: str) -> Plan:
    """The plan (its target, the device it was timed on); a bad file is one CLI error."""
    try:
        return Plan.load(plan)
    except PlanError as err:
        raise CliError(str(err)) from None
