"""``dcmlir demo``: tune a model, compile it, time it against IREE's default, outputs checked.

One path serves both examples: the generated 2-layer BERT encoder (the README's
demo) and, ``--example dense``, the shipped BERT-base dense layer. Each is a module
on disk; it is tuned (``dcmlir tune``), compiled with the plan and as IREE compiles
it by default, and run side by side per ``T`` (``dcmlir run-model``'s loop).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from dcmlir.bench.model_compare import ModelRunError, Reference, run_model
from dcmlir.bench.model_peers import contraction_peers
from dcmlir.driver import TuneError, compile, compile_default, tune
from dcmlir.ir.iree import ParameterFile
from dcmlir.measure.timing import MeasureSettings
from dcmlir.models import BERT_BASE, EncoderConfig, generate_encoder, save_model
from dcmlir.shapes import SHAPES_GRAMMAR
from dcmlir.tools.common import PROG, CliError, example_path, seconds, sizes_option

EXAMPLES = ("bert", "dense")
DEMO_BUDGET = 240
"""Tuning measurements of either demo when --budget is not given (a few minutes on 2 cores)."""
DEMO_SHAPES = "1,2,4,8,9,16,17,32,48,64,100,128"
DENSE_MODULE = "bert_dense.mlir"
DENSE_RANGE = (1, 128)
DENSE_HIDDEN = 768


@dataclass(frozen=True)
class DemoModel:
    """A demo's module on disk and how to say what is tuned, timed and checked."""

    name: str  # file stem of the compiled module in --workdir
    path: Path
    title: str  # the report's first line
    seq: tuple[int, int]  # the range of T tuned
    function: str = "main"
    dims: tuple[str, ...] = ()  # ranges for tune when the IR does not give them
    parameters: ParameterFile | None = None
    config: EncoderConfig | None = None  # a generated encoder's: its numpy model checks it
    formula: Reference | None = None  # a single op's float64 formula, else the config's model
    timed: str = "the model"  # what one timed call computes
    checked: str = "the {} encoder"  # what outputs are checked against ({}: the reference)

    @property
    def reference(self) -> str | Reference:
        """run_model's reference: the op's formula or the encoder's numpy model, in float64."""
        if self.formula is not None:
            return self.formula
        return "numpy" if self.config is not None else "default"


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    demo = commands.add_parser(
        "demo",
        help="tune and compile a generated BERT encoder, time it against IREE's default",
        description="Generate a BERT-base encoder (hidden 768, 12 heads, FFN 3072, T dynamic in "
        "1..128, seeded weights), tune its workloads as one model, compile it, and time the whole "
        "model against IREE's default compilation side by side at each T, every output checked "
        "against the encoder's numpy reference. --example dense: the shipped dense layer "
        "(T x 768 @ 768 x 768) instead, checked against x @ w in float64.",
    )
    demo.add_argument(
        "--example",
        default="bert",
        choices=EXAMPLES,
        help="what to tune: the generated encoder or the dense layer (default: %(default)s)",
    )
    demo.add_argument(
        "--layers", type=int, default=2, help="encoder layers (bert; default: %(default)s)"
    )
    demo.add_argument(
        "--shapes",
        default=DEMO_SHAPES,
        metavar="T,LO:HI,...",
        help=f"values of T: {SHAPES_GRAMMAR} (default: %(default)s)",
    )
    demo.add_argument(
        "--budget",
        type=int,
        default=DEMO_BUDGET,
        help="tuning measurements (default: %(default)s)",
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
        type=seconds,
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
    demo.set_defaults(run=run)
    return demo


def generated_encoder(layers: int, workdir: Path) -> DemoModel:
    """The README's model: a BERT-base encoder with ``layers`` layers, written to ``workdir``."""
    config = dataclasses.replace(BERT_BASE, layers=layers)
    path = workdir / "bert.mlir"
    parameters = save_model(generate_encoder(config, "params"), path)
    return DemoModel(
        name="bert",
        path=path,
        title=f"{config.describe()} (generated, f32), in {path}",
        seq=config.seq,
        parameters=parameters,
        config=config,
        timed=f"the whole {config.layers}-layer model",
    )


def dense_layer() -> DemoModel:
    """The shipped BERT-base dense layer, ``x[T,768] @ w[768,768]``, T tuned in 1..128."""
    lo, hi = DENSE_RANGE
    return DemoModel(
        name="dense",
        path=Path(str(example_path(DENSE_MODULE))),
        title=f"BERT-base dense layer {DENSE_MODULE} (@dense), f32",
        seq=DENSE_RANGE,
        function="dense",
        dims=(f"{lo}:{hi}",),
        timed=f"x[T,{DENSE_HIDDEN}] @ w[{DENSE_HIDDEN},{DENSE_HIDDEN}]",
        checked="{}",
        formula=Reference("numpy (float64)", dense_reference, peers=contraction_peers("mk,kn->mn")),
    )


def dense_reference(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """x @ w in float64: the yardstick both builds are checked against."""
    x, w = inputs
    return [np.asarray(x, dtype=np.float64) @ np.asarray(w, dtype=np.float64)]


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """The README's main job: tune the example, compile it, time it against IREE's default."""
    shapes = sizes_option("--shapes", args.shapes)
    if args.rounds < 1 or args.budget < 1 or args.layers < 1:
        raise CliError("--rounds, --budget and --layers must be at least 1")
    workdir = Path(args.workdir)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CliError(f"--workdir: cannot create '{workdir}': {error.strerror}") from None
    model = dense_layer() if args.example == "dense" else generated_encoder(args.layers, workdir)
    return run_demo(model, args, shapes, workdir, out, err)


def run_demo(
    model: DemoModel,
    args: argparse.Namespace,
    shapes: list[int],
    workdir: Path,
    out: IO[str],
    err: IO[str],
) -> int:
    """Tune ``model``, compile it both ways, check and time both at every ``T`` of ``shapes``."""
    print(f"dcmlir demo: {model.title}", file=out)
    lo, hi = model.seq
    print(
        f"{PROG}: tuning the workloads of {model.path.name} for T in {lo}:{hi} "
        f"(budget {args.budget}; records, plan and modules in {workdir}/, a second run resumes)",
        file=err,
    )
    plan = workdir / "plan.json"
    try:
        report = tune(
            model.path,
            dims=model.dims,
            budget=args.budget,
            db=workdir / "records.jsonl",
            output=plan,
            device=args.device,
            stream=err,
        )
        print(f"{PROG}: compiling {model.path.name} with the plan and as IREE does", file=err)
        tuned = compile(model.path, plan=plan, output=workdir / f"{model.name}.vmfb")
        default = compile_default(model.path)
    except TuneError as error:
        raise CliError(str(error)) from None
    for line in report.model_lines():
        print(f"  {line}", file=out)
    for line in report.lines():
        if not line.startswith("  kernel "):  # the plan has them; one line per workload here
            print(f"  {line}", file=out)
    settings = MeasureSettings(min_time=args.min_time, rounds=args.rounds, warmup=2 * args.min_time)
    try:
        result = run_model(
            model.path.read_text(encoding="utf-8"),
            tuned.vmfb,
            default,
            shapes,
            function=model.function,
            parameters=model.parameters,
            reference=model.reference,
            device=args.device,
            settings=settings,
            progress=lambda t: print(f"{PROG}: measuring T={t}", file=err),
            config=model.config,
        )
    except ModelRunError as error:
        raise CliError(str(error)) from None
    threads = f"{result.threads} thread{'s' if result.threads > 1 else ''}"
    print(
        f"\n{model.timed} per call on {args.device} ({threads}); medians of {settings.rounds} "
        f"interleaved rounds, each sample >= {settings.min_time:g} s over {settings.input_sets} "
        f"random inputs; every output checked against {model.checked.format(result.reference)} "
        f"(rel err <= {settings.rtol:g}). speedup: IREE default time / dcmlir time, per round.",
        file=out,
    )
    print(file=out)
    for line in result.table():
        print(line, file=out)
    for failure in result.failures:
        print(f"{PROG}: error: {failure}", file=err)
    return 1 if result.failures else 0
