"""``dcmlir generate-bert`` and ``dcmlir import-torch``: whole models as dynamic-shape MLIR.

``generate-bert`` writes a BERT-style encoder (no torch needed) as linalg on tensors
with the range of the sequence length in the IR, and its weights; ``import-torch``
exports a randomly initialised PyTorch encoder through ``torch.export`` and IREE's
torch input conversion (needs the ``torch`` extra).
"""

from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path
from typing import IO

from dcmlir.ir.iree import RuntimeFailure
from dcmlir.models import (
    WEIGHT_LAYOUTS,
    WEIGHT_MODES,
    EncoderConfig,
    generate_encoder,
    save_model,
)
from dcmlir.shapes import parse_range
from dcmlir.tools.common import CliError, seed


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


def _seq_range(text: str) -> tuple[int, int]:
    try:
        lo, hi = parse_range(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if lo < 1:
        raise argparse.ArgumentTypeError(f"range '{text}' must start at 1 or more")
    return lo, hi


def _add_encoder_options(parser: argparse.ArgumentParser) -> None:
    defaults = EncoderConfig()
    parser.add_argument(
        "--layers", type=_positive, default=defaults.layers, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--hidden", type=_positive, default=defaults.hidden, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--heads", type=_positive, default=defaults.heads, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--ffn", type=_positive, default=defaults.ffn, help="FFN inner size (default: %(default)s)"
    )
    parser.add_argument(
        "--seq",
        type=_seq_range,
        default=defaults.seq,
        metavar="LO:HI",
        help="range of the sequence length T the module promises (default: 1:128)",
    )
    parser.add_argument(
        "--seed", type=seed, default=defaults.seed, help="weight seed (default: %(default)s)"
    )


def add_parsers(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    generate = commands.add_parser(
        "generate-bert",
        help="write a BERT-style encoder (dynamic sequence length) as linalg MLIR",
        description="Write a BERT-style encoder (QKV dense, attention batch matmuls, softmax, "
        "layernorm, GELU FFN; no embeddings, batch 1) as linalg on tensors with a dynamic "
        "sequence length T, the range of T in the IR, and seeded random weights. "
        "@main(%%x: tensor<?xHIDDENxf32>) -> tensor<?xHIDDENxf32>.",
    )
    generate.add_argument("-o", "--output", required=True, metavar="MODEL.mlir")
    _add_encoder_options(generate)
    generate.add_argument(
        "--gelu", default="erf", choices=("erf", "tanh"), help="GELU form (default: erf, exact)"
    )
    generate.add_argument(
        "--weights",
        default="params",
        choices=WEIGHT_MODES,
        help="params: util.globals read from an IREE parameter archive (.irpa) at run time, "
        "small IR (default); inline: dense_resource blobs inside the module",
    )
    generate.add_argument(
        "--weight-layout",
        default="in_out",
        choices=WEIGHT_LAYOUTS,
        help="dense weights [in, out] (plain linalg.matmul, default) or [out, in] (torch's "
        "nn.Linear layout: linalg.matmul with a transposed-B indexing map)",
    )
    generate.add_argument(
        "--params",
        metavar="WEIGHTS.irpa",
        help="where the parameter archive goes (default: MODEL.irpa beside the module)",
    )
    generate.set_defaults(run=run_generate)
    add_import_parser(commands)


def run_generate(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Write the encoder and its weights."""
    if args.params and args.weights != "params":
        raise CliError("--params names the weights file of --weights params only")
    try:
        config = EncoderConfig(
            hidden=args.hidden,
            heads=args.heads,
            ffn=args.ffn,
            layers=args.layers,
            seq=args.seq,
            seed=args.seed,
            gelu=args.gelu,
        )
    except ValueError as error:
        raise CliError(str(error)) from None
    started = time.perf_counter()
    model = generate_encoder(config, weights=args.weights, weight_layout=args.weight_layout)
    try:
        parameters = save_model(model, args.output, args.params)
    except OSError as error:
        raise CliError(f"cannot write '{error.filename}': {error.strerror}") from None
    except RuntimeFailure as error:
        raise CliError(str(error)) from None
    seconds = time.perf_counter() - started
    size = Path(args.output).stat().st_size
    print(f"{config.describe()}: {config.parameter_count():,} weights", file=out)
    print(f"wrote {args.output} ({_human(size)}, @main, weights {args.weights})", file=out)
    if parameters is not None:
        archive = Path(parameters.path)
        print(
            f"wrote {archive} ({_human(archive.stat().st_size)}, scope '{parameters.scope}'; "
            f"run with --parameters={parameters.scope}={archive})",
            file=out,
        )
    print(f"in {seconds:.1f} s", file=out)
    return 0


def _human(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return f"{size} B"


# --- import-torch --------------------------------------------------------------------------


def _bert_config(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not LAYERS,HIDDEN,HEADS,FFN with positive integers (e.g. 2,768,12,3072)"
        )
    layers, hidden, heads, ffn = (int(p) for p in parts)
    return layers, hidden, heads, ffn


def add_import_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "import-torch",
        help="export a randomly initialised PyTorch BERT encoder to linalg MLIR (needs torch)",
        description="Build a randomly initialised (seeded) PyTorch encoder, export it with "
        "torch.export and a dynamic sequence length, decompose it, import it with IREE's FX "
        "importer and lower it with IREE's torch input conversion to linalg on tensors. "
        "Needs the torch extra: pip install 'dcmlir[torch]' (hf-bert also needs transformers).",
    )
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.mlir")
    parser.add_argument(
        "--model",
        default="encoder",
        choices=("encoder", "hf-bert"),
        help="encoder: dcmlir's hand-written torch encoder, x[T, HIDDEN] -> [T, HIDDEN] "
        "(default); hf-bert: transformers.BertModel, input_ids[1, T] -> [1, T, HIDDEN]",
    )
    parser.add_argument(
        "--bert-config",
        type=_bert_config,
        default=(2, 768, 12, 3072),
        metavar="L,H,NH,F",
        help="layers, hidden size, heads, FFN size (default: 2,768,12,3072)",
    )
    parser.add_argument(
        "--seq",
        type=_seq_range,
        default=(1, 128),
        metavar="LO:HI",
        help="range of the sequence length T (default: 1:128)",
    )
    parser.add_argument("--seed", type=seed, default=0, help="weight seed (default: 0)")
    parser.add_argument(
        "--weights",
        default="params",
        choices=WEIGHT_MODES,
        help="params: util.globals + an .irpa beside the module (default); inline: "
        "dense_resource blobs in the module",
    )
    parser.add_argument("--params", metavar="WEIGHTS.irpa", help="where the archive goes")
    parser.add_argument(
        "--torch-dialect",
        action="store_true",
        help="write the FX importer's torch-dialect IR, not the lowered linalg",
    )
    parser.set_defaults(run=run_import)


def run_import(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Export the torch encoder to MLIR (torch itself is imported only here: optional)."""
    if args.params and args.weights != "params":
        raise CliError("--params names the weights file of --weights params only")
    layers, hidden, heads, ffn = args.bert_config
    try:
        config = EncoderConfig(
            hidden=hidden, heads=heads, ffn=ffn, layers=layers, seq=args.seq, seed=args.seed
        )
    except ValueError as error:
        raise CliError(f"--bert-config: {error}") from None
    try:
        import torch

        # the torch extra: dcmlir.models.torch_import imports torch, so it loads only here
        torch_import = importlib.import_module("dcmlir.models.torch_import")
    except ImportError:
        raise CliError(
            "import-torch needs PyTorch: pip install 'dcmlir[torch]' (CPU torch is enough)"
        ) from None
    started = time.perf_counter()
    try:
        if args.model == "hf-bert":
            model = torch_import.hf_bert_model(config)
            example, input_dims = [torch.zeros((1, 7), dtype=torch.int64)], [{1: "seq"}]
        else:
            torch.manual_seed(config.seed)
            model = torch_import.TorchEncoder(config).eval()
            example, input_dims = [torch.randn(7, hidden)], None
        imported = torch_import.import_torch(
            model,
            example,
            {"seq": config.seq},
            input_dims=input_dims,
            weights=args.weights,
            lower=not args.torch_dialect,
        )
        parameters = imported.save(args.output, args.params)
    except torch_import.TorchImportError as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"cannot write '{error.filename}': {error.strerror}") from None
    except RuntimeFailure as error:
        raise CliError(str(error)) from None
    size = Path(args.output).stat().st_size
    form = "torch dialect" if args.torch_dialect else "linalg on tensors"
    print(f"{args.model}: {config.describe()}", file=out)
    print(f"wrote {args.output} ({_human(size)}, {form}, @main, weights {args.weights})", file=out)
    if parameters is not None:
        archive = Path(parameters.path)
        print(
            f"wrote {archive} ({_human(archive.stat().st_size)}, scope '{parameters.scope}')",
            file=out,
        )
    print(f"in {time.perf_counter() - started:.1f} s", file=out)
    return 0
