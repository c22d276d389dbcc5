"""``dcmlir import-onnx``: an ONNX model as dynamic-shape linalg, a range for each dynamic axis.

IREE's ONNX importer and its torch input conversion, as ``import-torch`` uses the
latter (needs the ``onnx`` package, in the ``bench`` extra). The module's first
line records the ``.onnx`` file, so ``run-model`` checks and times onnxruntime on it.
"""

from __future__ import annotations

import argparse
import importlib
import re
import time
from pathlib import Path
from typing import IO

from dcmlir.ir.iree import RuntimeFailure
from dcmlir.models import WEIGHT_MODES
from dcmlir.shapes import parse_range
from dcmlir.tools.cmd_models import _human as human_size
from dcmlir.tools.common import CliError, distinct_paths

_DIM = re.compile(r"^([^=,]+)=([^=,]+)$")


def _dims(text: str) -> dict[str, tuple[int, int]]:
    """``NAME=LO:HI`` or ``NAME=N`` (static), comma-separated."""
    found = {}
    for item in (part.strip() for part in text.split(",")):
        match = _DIM.match(item)
        if match is None:
            raise argparse.ArgumentTypeError(
                f"'{item}' is not NAME=LO:HI or NAME=N (e.g. seq=1:128 or batch=1)"
            )
        name, value = match.group(1).strip(), match.group(2).strip()
        try:
            lo, hi = parse_range(value if ":" in value else f"{value}:{value}")
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{name}: {err}") from None
        if lo < 1:
            raise argparse.ArgumentTypeError(f"{name}: sizes start at 1, not {lo}")
        found[name] = (lo, hi)
    return found


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``dcmlir import-onnx``."""
    parser = commands.add_parser(
        "import-onnx",
        help="import an ONNX model to linalg MLIR with a range for each dynamic axis (needs onnx)",
        description="Import MODEL.onnx with IREE's ONNX importer (iree-import-onnx) and lower "
        "it with IREE's torch input conversion to linalg on tensors, as import-torch does. "
        "Each dynamic axis of the graph's inputs (a dim_param such as 'seq' or 'batch', or an "
        "unnamed one, named INPUT.AXIS) gets the range --dims gives it (default 1:128) as a "
        "util.assume.int that dcmlir tune reads; NAME=N makes the axis static. The module's "
        "first line records the .onnx file (path and SHA-256): run-model checks outputs "
        "against onnxruntime running it and times onnxruntime on it. "
        "Needs the onnx package: pip install 'dcmlir[bench]'.",
    )
    parser.add_argument("model", metavar="MODEL.onnx")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.mlir")
    parser.add_argument(
        "--dims",
        type=_dims,
        action="append",
        default=[],
        metavar="NAME=LO:HI|NAME=N,...",
        help="range (inclusive) of a dynamic axis by name, or its one size; repeatable "
        "(default: 1:128 for every dynamic axis)",
    )
    parser.add_argument(
        "--weights",
        default="params",
        choices=WEIGHT_MODES,
        help="params: util.globals + an .irpa beside the module (default; initializers of "
        "100 elements or more); inline: dense_resource blobs in the module",
    )
    parser.add_argument("--params", metavar="WEIGHTS.irpa", help="where the archive goes")
    parser.add_argument(
        "--torch-dialect",
        action="store_true",
        help="write the importer's torch-dialect IR (onnx.* ops), not the lowered linalg",
    )
    parser.set_defaults(run=run_import_onnx)


def run_import_onnx(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Import the model and write it (onnx itself is imported only here: optional)."""
    if args.params and args.weights != "params":
        raise CliError("--params names the weights file of --weights params only")
    archive = args.params or Path(args.output).with_suffix(".irpa")
    weights = archive if args.weights == "params" else None
    distinct_paths({"MODEL.onnx": args.model, "-o": args.output, "--params": weights})
    try:
        # the bench extra: dcmlir.models.onnx_import imports onnx, so it loads only here
        onnx_import = importlib.import_module("dcmlir.models.onnx_import")
    except ImportError:
        raise CliError("import-onnx needs the onnx package: pip install 'dcmlir[bench]'") from None
    ranges: dict[str, tuple[int, int]] = {}
    for given in args.dims:
        ranges.update(given)
    started = time.perf_counter()
    try:
        imported, chosen = onnx_import.import_onnx(
            args.model, ranges, weights=args.weights, lower=not args.torch_dialect
        )
        parameters = imported.save(args.output, args.params)
    except onnx_import.UnknownAxisError as error:
        raise CliError(f"--dims: {error}") from None
    except onnx_import.OnnxImportError as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"cannot write '{error.filename}': {error.strerror}") from None
    except RuntimeFailure as error:
        raise CliError(str(error)) from None
    shown = [
        f"{name}={lo}" if lo == hi else f"{name} in {lo}..{hi}" for name, (lo, hi) in chosen.items()
    ]
    form = "torch dialect" if args.torch_dialect else "linalg on tensors"
    size = human_size(Path(args.output).stat().st_size)
    print(f"{args.model}: {', '.join(shown) or 'no dynamic axes'}", file=out)
    print(f"wrote {args.output} ({size}, {form}, @main, weights {args.weights})", file=out)
    if parameters is not None:
        archive = Path(parameters.path)
        print(
            f"wrote {archive} ({human_size(archive.stat().st_size)}, scope '{parameters.scope}')",
            file=out,
        )
    print(f"in {time.perf_counter() - started:.1f} s", file=out)
    return 0
