"""PyTorch models as dynamic-shape linalg: ``torch.export`` -> FX importer -> IREE input conversion.

Needs the ``dcmlir[torch]`` extra (CPU torch is enough). The steps, each for a reason:

1. ``torch.export.export`` with a ``torch.export.Dim`` per dynamic dimension, so the
   sequence length stays symbolic and its range (``min``/``max``) is recorded;
2. ``run_decompositions``: ``linear`` becomes ``permute`` + ``addmm`` (a plain matmul
   IREE folds the transpose into, not a slow broadcast ``batch_matmul``) and fused
   ``scaled_dot_product_attention`` becomes ``bmm``/softmax/``bmm`` (not an attention
   op that is ~20x slower on CPU). ``squeeze.dims``, which ``unbind`` decomposes into
   and IREE 3.13's torch frontend does not know, becomes ``select`` ops;
3. IREE's bundled FX importer, ``import_program`` (``import_frozen_program`` fails on
   non-persistent buffers such as HF BERT's ``position_ids``) with symbolic shape
   expressions, so the range reaches the IR (``torch.symbolic_int``);
4. IREE's torch input conversion (``iree-compile --compile-to=input`` with a sync-only
   ABI): linalg on tensors in ``util.func @main(tensor<...>) -> tensor<...>``, the range
   as ``util.assume.int``.

Weights are inline ``dense_resource`` blobs (the importer's default), or, with
``weights="params"``, ``util.global``s bound to ``#flow.parameter.named<"model"::NAME>``
whose values go to an IREE parameter archive (see :meth:`ImportedModel.save`).

Other ways in build on this one: a ``torch.export`` archive that keeps its own
dynamic shapes (:mod:`~dcmlir.models.torch_archive`) and a ``package.module:factory``
returning the module and its inputs (:mod:`~dcmlir.models.torch_factory`). A range
the model cannot take (a guard, e.g. a position table of 128 rows) is an
:class:`~dcmlir.models.torch_guards.ExportGuardError` naming the bound and the fix.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from dcmlir.ir.mlir import fx_importer, ir
from dcmlir.models import input_conversion
from dcmlir.models.bert import PARAMETER_SCOPE, WEIGHT_MODES, EncoderConfig, make_weights
from dcmlir.models.fx_refusals import import_failure
from dcmlir.models.input_conversion import INPUT_CONVERSION_FLAGS, ImportedModel
from dcmlir.models.torch_guards import (
    ExportGuardError,
    TorchImportError,
    explain_export_failure,
    first_line,
)

__all__ = [
    "INPUT_CONVERSION_FLAGS",
    "ExportGuardError",
    "ImportedModel",
    "TorchEncoder",
    "TorchImportError",
    "decompose_program",
    "decomposition_table",
    "export_program",
    "hf_bert_model",
    "import_decomposed",
    "import_torch",
    "lower_to_linalg",
    "torch_reference",
]

_fx = fx_importer()

# --- a hand-written encoder, the generator's architecture ----------------------------------


class _Layer(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        h = config.hidden
        self.heads = config.heads
        self.gelu = "none" if config.gelu == "erf" else "tanh"
        self.qkv = nn.Linear(h, 3 * h)
        self.out = nn.Linear(h, h)
        self.ln1 = nn.LayerNorm(h, eps=config.eps)
        self.ffn1 = nn.Linear(h, config.ffn)
        self.ffn2 = nn.Linear(config.ffn, h)
        self.ln2 = nn.LayerNorm(h, eps=config.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_len, hidden = x.shape
        heads = self.qkv(x).view(seq_len, 3, self.heads, hidden // self.heads)
        q, k, v = heads.permute(1, 2, 0, 3)  # each [heads, T, head_dim]
        context = F.scaled_dot_product_attention(q, k, v)
        context = context.permute(1, 0, 2).reshape(seq_len, hidden)
        x = self.ln1(self.out(context) + x)
        return self.ln2(self.ffn2(F.gelu(self.ffn1(x), approximate=self.gelu)) + x)


class TorchEncoder(nn.Module):
    """The encoder :mod:`dcmlir.models.bert` generates, in torch: ``[T, hidden] -> [T, hidden]``.

    ``nn.Linear`` layers (weights ``[out, in]``, as every torch model has them) and fused
    SDPA, so the import meets the forms real models produce. :meth:`load_generator_weights`
    copies a generated model's weights in, so both are checked against one reference.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(_Layer(config) for _ in range(config.layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    @classmethod
    def generated(cls, config: EncoderConfig) -> TorchEncoder:
        """The encoder ``dcmlir generate-bert`` writes for ``config``, its seeded weights in."""
        return cls(config).load_generator_weights(make_weights(config)).eval()

    @torch.no_grad()
    def load_generator_weights(self, weights: Mapping[str, np.ndarray]) -> TorchEncoder:
        """Take the generator's ``layerN.*`` arrays (dense weights ``[in, out]``: transposed)."""
        for index, layer in enumerate(self.layers):
            for module, stem in (
                (layer.qkv, "qkv"),
                (layer.out, "out"),
                (layer.ffn1, "ffn1"),
                (layer.ffn2, "ffn2"),
            ):
                module.weight.copy_(torch.from_numpy(weights[f"layer{index}.{stem}_w"].T.copy()))
                module.bias.copy_(torch.from_numpy(weights[f"layer{index}.{stem}_b"]))
            for module, stem in ((layer.ln1, "ln1"), (layer.ln2, "ln2")):
                module.weight.copy_(torch.from_numpy(weights[f"layer{index}.{stem}_g"]))
                module.bias.copy_(torch.from_numpy(weights[f"layer{index}.{stem}_b"]))
        return self


def hf_bert_model(
    config: EncoderConfig, *, vocab: int | None = None, positions: int | None = None
) -> nn.Module:
    """A randomly initialised ``transformers.BertModel`` of ``config``'s sizes (no download).

    Wrapped to take ``input_ids [1, T]`` (int64) and return ``last_hidden_state [1, T, H]``;
    needs the ``transformers`` package. Seeded with ``config.seed``. ``vocab``: BERT's
    30522 by default; ``positions``: rows of the position table (default: 512, or the
    top of ``config.seq`` if larger). Fewer rows than ``T`` can reach make torch.export
    refuse the range (BERT slices a ``position_ids`` buffer: a guard).
    """
    try:
        import transformers  # type: ignore[import-untyped]
    except ImportError:
        raise TorchImportError(
            "hf-bert needs the 'transformers' package (pip install transformers)"
        ) from None
    torch.manual_seed(config.seed)
    bert_config = transformers.BertConfig(
        hidden_size=config.hidden,
        num_attention_heads=config.heads,
        intermediate_size=config.ffn,
        num_hidden_layers=config.layers,
        vocab_size=vocab or transformers.BertConfig().vocab_size,
        max_position_embeddings=positions or max(512, config.seq[1]),
        layer_norm_eps=config.eps,
        hidden_act="gelu" if config.gelu == "erf" else "gelu_new",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return _LastHiddenState(transformers.BertModel(bert_config, add_pooling_layer=False)).eval()


class _LastHiddenState(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).last_hidden_state


# --- export --------------------------------------------------------------------------------


def _squeeze_dims(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """``aten.squeeze.dims`` as ``select`` on each static size-1 dim (IREE 3.13 lacks it)."""
    rank = x.dim()
    for dim in sorted((d % rank for d in dims), reverse=True):
        size = x.shape[dim]
        if isinstance(size, int) and size == 1:
            x = torch.ops.aten.select.int(x, dim, 0)
    return x


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """torch's default (core ATen) decompositions plus the one IREE 3.13's frontend needs."""
    table = torch.export.default_decompositions()
    table[torch.ops.aten.squeeze.dims] = _squeeze_dims
    return table


_UNWANTED_AFTER_DECOMPOSITION = {
    "aten.linear.default": "linear (would import as a broadcast batch_matmul)",
    "aten.scaled_dot_product_attention.default": "fused attention (slow on CPU)",
    "aten._scaled_dot_product_flash_attention_for_cpu.default": "fused attention (slow on CPU)",
    "aten._scaled_dot_product_efficient_attention.default": "fused attention (slow on CPU)",
}


def export_program(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_dims: Mapping[str, tuple[int, int]],
    input_dims: Sequence[Mapping[int, str]] | None = None,
) -> torch.export.ExportedProgram:
    """``torch.export`` with one ``Dim(name, min, max)`` per entry of ``dynamic_dims``, decomposed.

    ``input_dims[i]`` maps dims of input ``i`` to names of ``dynamic_dims``; by default
    (one dynamic dim) dim 0 of every input carries it.
    """
    if not dynamic_dims:
        raise TorchImportError("dynamic_dims is empty: name at least one dynamic dimension")
    dims = {}
    for name, (lo, hi) in dynamic_dims.items():
        if not 1 <= lo <= hi:
            raise TorchImportError(f"dynamic dim '{name}': range {lo}:{hi} is not 1 <= LO <= HI")
        # torch.export treats sizes 0 and 1 specially and refuses min=1 only for some graphs;
        # the range it records is what reaches the IR.
        dims[name] = torch.export.Dim(name, min=lo, max=hi)
    if input_dims is None:
        if len(dims) != 1:
            raise TorchImportError(
                "several dynamic dims: say which input dims carry them (input_dims)"
            )
        (only,) = dims
        input_dims = [{0: only} for _ in example_inputs]
    if len(input_dims) != len(example_inputs):
        raise TorchImportError(
            f"input_dims has {len(input_dims)} entries for {len(example_inputs)} inputs"
        )
    shapes = []
    for index, mapping in enumerate(input_dims):
        unknown = [name for name in mapping.values() if name not in dims]
        if unknown:
            raise TorchImportError(
                f"input {index}: dynamic dim '{unknown[0]}' is not in dynamic_dims"
            )
        shapes.append({dim: dims[name] for dim, name in mapping.items()})
    model = model.eval()
    try:
        with warnings.catch_warnings():
            # torch 2.13's own pytree code trips its LeafSpec deprecation: not the user's business
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            program = torch.export.export(
                model, tuple(example_inputs), dynamic_shapes=tuple(shapes)
            )
    except Exception as err:  # torch raises many types here; all mean "cannot export"
        raise explain_export_failure(err, model, dynamic_dims) from err
    return decompose_program(program)


def decompose_program(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """:func:`decomposition_table` applied, and refused if a form IREE handles badly is left."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            program = program.run_decompositions(decomposition_table())
    except Exception as err:  # as for export: any type
        raise TorchImportError(
            f"decomposing the exported program failed: {first_line(err)}"
        ) from err
    left = sorted(
        reason
        for node in program.graph.nodes
        if node.op == "call_function"
        for target, reason in _UNWANTED_AFTER_DECOMPOSITION.items()
        if str(node.target) == target
    )
    if left:
        raise TorchImportError(f"decomposition left {left[0]} in the graph")
    return program


# --- import --------------------------------------------------------------------------------


class _ParameterHooks(_fx.FxImporterHooks):  # type: ignore[misc]
    """Parameters and buffers become ``util.global``s read from a parameter archive."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.arrays: dict[str, np.ndarray] = {}
        self.module_op: ir.Operation | None = None

    def prepare_module(self, module_op: ir.Operation) -> None:
        self.module_op = module_op

    def resolve_input(self, gni: Any, value: Any, info: Any) -> ir.Value | None:
        if info.mutable_producer_node_name is not None or not isinstance(value, torch.Tensor):
            return None  # mutable state stays the importer's business
        key = str(info.input_spec.target)
        array = value.detach().cpu().contiguous().numpy()
        element = {np.dtype("float32"): "f32", np.dtype("int64"): "i64"}.get(array.dtype)
        if element is None:
            return None  # an exotic dtype: leave it inline
        symbol = "p_" + re.sub(r"[^A-Za-z0-9_]", "_", key)
        shape = "x".join(str(d) for d in array.shape)
        tensor_type = ir.Type.parse(f"tensor<{shape}{'x' if shape else ''}{element}>")
        assert self.module_op is not None
        with ir.InsertionPoint.at_block_begin(self.module_op.regions[0].blocks[0]):
            ir.Operation.create(
                "util.global",
                attributes={
                    "sym_name": ir.StringAttr.get(symbol),
                    "sym_visibility": ir.StringAttr.get("private"),
                    "type": ir.TypeAttr.get(tensor_type),
                    "initial_value": ir.Attribute.parse(
                        f'#flow.parameter.named<"{self.scope}"::"{key}"> : {tensor_type}'
                    ),
                },
                loc=ir.Location.unknown(),
            )
        loaded = ir.Operation.create(
            "util.global.load",
            results=[tensor_type],
            attributes={"global": ir.FlatSymbolRefAttr.get(symbol)},
        ).result
        self.arrays[key] = array
        return ir.Operation.create(
            "torch_c.from_builtin_tensor", results=[info.ir_type], operands=[loaded]
        ).result


def lower_to_linalg(torch_text: str, timeout: float | None = None) -> str:
    """Run IREE's torch input conversion on torch-dialect IR: linalg on tensors."""
    try:
        return input_conversion.lower_to_linalg(torch_text, timeout)
    except input_conversion.ConversionError as err:
        raise TorchImportError(str(err)) from None


def import_torch(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_dims: Mapping[str, tuple[int, int]] | None = None,
    *,
    input_dims: Sequence[Mapping[int, str]] | None = None,
    weights: str = "inline",
    lower: bool = True,
    func_name: str = "main",
) -> ImportedModel:
    """Export, decompose, import and (``lower=True``) lower ``model`` to linalg on tensors.

    ``dynamic_dims`` names each dynamic dimension and its inclusive range, e.g.
    ``{"seq": (1, 128)}`` (the default); ``input_dims`` says which input dims carry
    them (default: dim 0 of every input). ``weights``: ``inline`` (``dense_resource``)
    or ``params`` (``util.global`` + a parameter archive). ``lower=False`` keeps the
    torch dialect (what ``iree-compile`` also accepts as input).
    """
    check_weights(weights)
    program = export_program(model, example_inputs, dynamic_dims or {"seq": (1, 128)}, input_dims)
    return import_decomposed(program, weights, lower, func_name)


def check_weights(weights: str) -> None:
    if weights not in WEIGHT_MODES:
        raise TorchImportError(f"weights must be one of {', '.join(WEIGHT_MODES)}, not '{weights}'")


def import_decomposed(
    program: torch.export.ExportedProgram, weights: str, lower: bool, func_name: str
) -> ImportedModel:
    """The FX importer on a decomposed program, then (``lower``) IREE's input conversion."""
    hooks = _ParameterHooks(PARAMETER_SCOPE) if weights == "params" else None
    with ir.Context() as context:
        importer = _fx.FxImporter(context=context, hooks=hooks)
        try:
            importer.import_program(
                program, func_name=func_name, import_symbolic_shape_expressions=True
            )
        except Exception as err:  # the importer raises bare NotImplementedError/TypeError/...
            raise TorchImportError(import_failure(err)) from err
        text = str(importer.module)
    if lower:
        text = lower_to_linalg(text)
    return ImportedModel(text, weights, dict(hooks.arrays) if hooks else {}, func_name)


def torch_reference(model: nn.Module, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The model's output for numpy inputs, computed in float64 (a copy of the model)."""
    wide = copy.deepcopy(model).to(torch.float64).eval()
    tensors = [
        torch.from_numpy(np.ascontiguousarray(a)).to(
            torch.float64 if np.issubdtype(a.dtype, np.floating) else torch.int64
        )
        for a in inputs
    ]
    with torch.no_grad():
        out = wide(*tensors)
    return out.detach().numpy()
