"""``dcmlir generate-bert`` and ``dcmlir import-torch``: whole models as dynamic-shape MLIR.

``generate-bert`` writes a BERT-style encoder (no torch needed) as linalg on tensors
with the range of the sequence length in the IR, and its weights; ``import-torch``
exports a PyTorch model (dcmlir's encoder, a ``transformers`` config, a ``.pt2``
archive or the user's ``package.module:factory``) through ``torch.export`` and IREE's
torch input conversion (needs the ``torch`` extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import time
from pathlib import Path
from typing import IO, Any

from dcmlir.ir.iree import RuntimeFailure
from dcmlir.models import (
    WEIGHT_LAYOUTS,
    WEIGHT_MODES,
    EncoderConfig,
    generate_encoder,
    save_model,
)
from dcmlir.models.factory_source import factory_header
from dcmlir.models.hf_models import (
    BERT_VOCAB,
    HF_FAMILIES,
    HF_SIZE_KEYS,
    family_header,
    hf_model,
)
from dcmlir.shapes import parse_range
from dcmlir.tools.common import CliError, positive_int, seed


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
        "--layers", type=positive_int, default=defaults.layers, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--hidden", type=positive_int, default=defaults.hidden, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--heads", type=positive_int, default=defaults.heads, help="(default: %(default)s)"
    )
    parser.add_argument(
        "--ffn",
        type=positive_int,
        default=defaults.ffn,
        help="FFN inner size (default: %(default)s)",
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

_BUILT_IN = ("encoder", "hf-bert")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _bert_config(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not LAYERS,HIDDEN,HEADS,FFN with positive integers (e.g. 2,768,12,3072)"
        )
    layers, hidden, heads, ffn = (int(p) for p in parts)
    return layers, hidden, heads, ffn


def _model_spec(text: str) -> str:
    """``encoder``, ``hf-bert`` or ``package.module:factory`` (checked, not imported, here)."""
    module, colon, factory = text.partition(":")
    if text in _BUILT_IN or (
        colon and _IDENTIFIER.match(module) and _IDENTIFIER.match(factory) and "." not in factory
    ):
        return text
    raise argparse.ArgumentTypeError(f"'{text}' is not encoder, hf-bert or package.module:factory")


def _hf_sizes(text: str) -> dict[str, int]:
    """``layers=2,hidden=64,...``: :data:`~dcmlir.models.hf_models.HF_SIZE_KEYS` to sizes."""
    sizes = {}
    for item in text.split(","):
        key, equals, value = (part.strip() for part in item.partition("="))
        if key not in HF_SIZE_KEYS or not equals:
            raise argparse.ArgumentTypeError(
                f"'{item}' is not KEY=N with KEY one of {', '.join(HF_SIZE_KEYS)}"
            )
        if not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"'{item}': {key} must be a positive integer")
        sizes[key] = int(value)
    return sizes


def add_import_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "import-torch",
        help="export a PyTorch model (built in, transformers config, .pt2 archive or your "
        "factory) to linalg MLIR with a dynamic sequence length (needs torch)",
        description="Take a PyTorch model, export it with torch.export and a dynamic sequence "
        "length (or load a torch.export archive with its own dynamic dims), decompose it, "
        "import it with IREE's FX importer and lower it with IREE's torch input conversion to "
        "linalg on tensors. The model: dcmlir's encoder (default), a transformers "
        "architecture built from a config with seeded random weights (--hf-config, no "
        "download), a .pt2 archive (--pt2) or package.module:factory (--model). "
        "Needs the torch extra: pip install 'dcmlir[torch]' (transformers for --hf-config).",
    )
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.mlir")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        type=_model_spec,
        metavar="encoder|hf-bert|MODULE:FACTORY",
        help="encoder: dcmlir's hand-written torch encoder, x[T, HIDDEN] -> [T, HIDDEN] "
        "(default); hf-bert: transformers.BertModel sized by --bert-config, input_ids[1, T] "
        "-> [1, T, HIDDEN]; package.module:factory: factory() returns (nn.Module, "
        "example_inputs[, dynamic_axes]), dynamic_axes one {axis: name} dict per input "
        "(default {0: 'seq'} each), imported from the current directory or the Python path",
    )
    source.add_argument(
        "--hf-config",
        choices=HF_FAMILIES,
        help="a transformers model from a config, seeded random weights, input_ids[1, T] "
        "-> last hidden state [1, T, HIDDEN]; sizes from --hf-sizes",
    )
    source.add_argument(
        "--pt2",
        metavar="FILE.pt2",
        help="a torch.export archive (torch.export.save): its dynamic dims and their ranges "
        "are kept (--seq narrows a single one); load only archives you trust",
    )
    parser.add_argument(
        "--bert-config",
        type=_bert_config,
        metavar="L,H,NH,F",
        help="--model encoder|hf-bert: layers, hidden size, heads, FFN size "
        "(default: 2,768,12,3072)",
    )
    parser.add_argument(
        "--hf-sizes",
        type=_hf_sizes,
        metavar="KEY=N,...",
        help="--hf-config sizes, any of " + ", ".join(HF_SIZE_KEYS) + " (kv-heads: llama "
        "only); default: 2 layers of BERT-base / GPT-2 small (a Llama as wide), ffn 4 x "
        "hidden (llama 8/3 x), e.g. layers=2,hidden=64,heads=4,ffn=128,vocab=1000",
    )
    parser.add_argument(
        "--seq",
        type=_seq_range,
        metavar="LO:HI",
        help="range of the sequence length T (default: 1:128; --pt2: the archive's ranges)",
    )
    parser.add_argument(
        "--batch",
        type=_seq_range,
        metavar="LO:HI",
        help="--hf-config: make the batch dynamic too, input_ids[B, T] with B in LO:HI (HI >= "
        "2); the dense layers' M is then B*T (default: batch 1, static)",
    )
    parser.add_argument(
        "--seed", type=seed, default=0, help="weight seed (default: 0; not for --pt2)"
    )
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


def _check_import_options(args: argparse.Namespace) -> None:
    """Options that belong to another model source are refused, not silently ignored."""
    if args.params and args.weights != "params":
        raise CliError("--params names the weights file of --weights params only")
    if args.bert_config and (
        args.hf_config or args.pt2 or (args.model or "encoder") not in _BUILT_IN
    ):
        raise CliError("--bert-config sizes --model encoder|hf-bert; --hf-config takes --hf-sizes")
    if args.hf_sizes and not args.hf_config:
        raise CliError("--hf-sizes sizes an --hf-config model")
    if args.batch and not args.hf_config:
        raise CliError("--batch makes the batch of an --hf-config model dynamic")


def run_import(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Export the torch model to MLIR (torch itself is imported only here: optional)."""
    _check_import_options(args)
    try:
        import torch

        # the torch extra: dcmlir.models.torch_import imports torch, so it loads only here
        torch_import = importlib.import_module("dcmlir.models.torch_import")
    except ImportError:
        raise CliError(
            "import-torch needs PyTorch: pip install 'dcmlir[torch]' (CPU torch is enough)"
        ) from None
    started = time.perf_counter()
    size_hint = "--hf-sizes positions=N" if args.hf_config else None
    try:
        label, description, imported = _import_model(args, torch, torch_import)
        parameters = imported.save(args.output, args.params)
    except torch_import.ExportGuardError as error:
        option = "--batch" if error.dim == "batch" else "--seq"
        raise CliError(error.explain(option, size_hint)) from None
    except torch_import.TorchImportError as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"cannot write '{error.filename}': {error.strerror}") from None
    except RuntimeFailure as error:
        raise CliError(str(error)) from None
    size = Path(args.output).stat().st_size
    form = "torch dialect" if args.torch_dialect else "linalg on tensors"
    print(f"{label}: {description}", file=out)
    print(f"wrote {args.output} ({_human(size)}, {form}, @main, weights {args.weights})", file=out)
    if parameters is not None:
        archive = Path(parameters.path)
        print(
            f"wrote {archive} ({_human(archive.stat().st_size)}, scope '{parameters.scope}')",
            file=out,
        )
    print(f"in {time.perf_counter() - started:.1f} s", file=out)
    return 0


def _import_model(args: argparse.Namespace, torch: Any, torch_import: Any) -> tuple[str, str, Any]:
    """Build or load the model the options name and import it: (label, description, model)."""
    options = {"weights": args.weights, "lower": not args.torch_dialect}
    if args.pt2:
        return _import_pt2(args, options)
    seq = args.seq or (1, 128)
    if args.hf_config:
        try:
            model = hf_model(
                args.hf_config, args.hf_sizes, seq=seq, seed=args.seed, batch=args.batch
            )
        except ValueError as error:
            raise CliError(f"--hf-config {args.hf_config}: {error}") from None
        imported = torch_import.import_torch(
            model.module,
            model.example_inputs,
            model.dynamic_dims,
            input_dims=model.input_dims,
            **options,
        )
        if model.header:  # run-model rebuilds the torch model from it
            imported = dataclasses.replace(imported, text=f"{model.header}\n{imported.text}")
        return args.hf_config, model.description, imported
    spec = args.model or "encoder"
    if spec not in _BUILT_IN:
        torch.manual_seed(args.seed)
        factories = importlib.import_module("dcmlir.models.torch_factory")  # imports torch
        made = factories.model_from_factory(spec)
        dims = {name: seq for name in made.dim_names}
        imported = torch_import.import_torch(
            made.module, made.example_inputs, dims, input_dims=made.input_dims, **options
        )
        header = factory_header(spec, made.directory, args.seed, seq, made.input_dims, made.module)
        if header:  # run-model rebuilds the factory's model from it
            imported = dataclasses.replace(imported, text=f"{header}\n{imported.text}")
        count = len(made.example_inputs)
        names = ", ".join(made.dim_names)
        return spec, f"{count} input{'s' * (count > 1)}, {names} in {seq[0]}..{seq[1]}", imported
    layers, hidden, heads, ffn = args.bert_config or (2, 768, 12, 3072)
    try:
        config = EncoderConfig(
            hidden=hidden, heads=heads, ffn=ffn, layers=layers, seq=seq, seed=args.seed
        )
    except ValueError as error:
        raise CliError(f"--bert-config: {error}") from None
    if spec == "hf-bert":
        model = torch_import.hf_bert_model(config)
        example, input_dims = [torch.zeros((1, 7), dtype=torch.int64)], [{1: "seq"}]
        sizes = {"layers": layers, "hidden": hidden, "heads": heads, "ffn": ffn}
        header = family_header("bert", {**sizes, "vocab": BERT_VOCAB}, seq, args.seed, None)
    else:  # the generator's weights: run-model checks it against the encoder's numpy model
        model = torch_import.TorchEncoder.generated(config)
        example, input_dims = [torch.randn(7, hidden)], None
        header = config.header(args.weights, "import-torch")
    imported = torch_import.import_torch(
        model.eval(), example, {"seq": config.seq}, input_dims=input_dims, **options
    )
    imported = dataclasses.replace(imported, text=f"{header}\n{imported.text}")
    return spec, config.describe(), imported


def _import_pt2(args: argparse.Namespace, options: dict[str, Any]) -> tuple[str, str, Any]:
    """A torch.export archive: its own dynamic dims, ``--seq`` narrowing a single one."""
    archive = importlib.import_module("dcmlir.models.torch_archive")  # imports torch
    program = archive.load_exported(args.pt2)
    dims: dict[str, Any] = {}
    for dim in archive.exported_dims(program):
        dims.setdefault(dim.symbol, dim)  # one line per symbol, named by its first input
    ranges = {}
    if args.seq:
        if len(dims) != 1:
            listed = ", ".join(d.describe() for d in dims.values()) or "none"
            raise CliError(
                f"--seq sets the one dynamic dim of an archive; '{args.pt2}' has {listed}"
            )
        ranges = {symbol: args.seq for symbol in dims}
    imported = archive.import_exported(program, ranges, **options)
    shown = []
    for dim in dims.values():
        lo, hi = ranges.get(dim.symbol, (dim.lo, dim.hi))
        shown.append(dataclasses.replace(dim, lo=lo, hi=hi).describe())
    return args.pt2, ", ".join(shown), imported
