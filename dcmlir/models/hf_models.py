"""Hugging Face models from a config with seeded random weights (no download), ready to import.

:func:`hf_model` builds any of :data:`HF_FAMILIES` (``bert``, ``gpt2``, ``llama``) from
sizes named as ``dcmlir import-torch --hf-sizes`` names them (:data:`HF_SIZE_KEYS`).

:func:`gpt2` builds ``transformers.GPT2Model`` (or ``GPT2LMHeadModel``) of the given
sizes, wrapped to take token ids ``input_ids [1, T]`` (int64) and return one tensor,
with example inputs and the dynamic sequence axis for
:func:`dcmlir.models.torch_import.import_torch`. A :class:`Gpt2Config` is all it
takes to rebuild the same model (same seed, same weights) anywhere, so the saved
module's first line names it (:func:`model_header`, :func:`family_header`): run-model reads
it back (:func:`source_from_text`) to check against it in float64, time it and export it to
ONNX. Importing this module needs no torch; building a model does (``dcmlir[torch]``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcmlir.ir.iree import ParameterFile
from dcmlir.models.bert import EncoderConfig
from dcmlir.models.factory_source import FACTORY_KIND, factory_fields

if TYPE_CHECKING:  # torch is optional: only building a model needs it
    import torch
    from torch import nn

    from dcmlir.models.torch_import import ImportedModel

__all__ = [
    "BERT_VOCAB",
    "DECODER_BATCH_SEQ_MAX",
    "GPT2_VOCAB",
    "HF_DEFAULT_SIZES",
    "HF_FAMILIES",
    "HF_SIZE_KEYS",
    "BuiltModel",
    "Gpt2Config",
    "HfModel",
    "TorchSource",
    "check_batch",
    "family_header",
    "family_module",
    "gpt2",
    "gpt2_module",
    "gpt2_source",
    "hf_model",
    "llama_module",
    "model_header",
    "source_from_text",
    "token_inputs",
]

GPT2_VOCAB, BERT_VOCAB = 50257, 30522
"""GPT-2's BPE vocabulary and BERT's WordPiece one (``transformers``' defaults)."""

_HEADER = re.compile(r"^// dcmlir-model: (\w+) (\{.*\})$")


@dataclass(frozen=True)
class Gpt2Config:
    """The sizes and seed of a GPT-2: ``transformers.GPT2Config`` plus the range of ``T``.

    ``n_positions`` rows of the position embedding bound ``T``: torch.export does not
    guard the lookup, so a range past it would read outside the table; it is refused.
    """

    layers: int
    hidden: int = 768
    heads: int = 12
    n_positions: int = 1024
    vocab: int = GPT2_VOCAB
    seq: tuple[int, int] = (1, 128)
    seed: int = 0
    lm_head: bool = False  # True: GPT2LMHeadModel's logits [1, T, V]; else the last hidden state
    ffn: int | None = None  # the MLP's inner size (n_inner); None: 4 * hidden
    batch: tuple[int, int] | None = None  # the batch's range when dynamic; None: batch 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq", tuple(int(v) for v in self.seq))
        if self.batch is not None:
            object.__setattr__(self, "batch", check_batch(self.batch))
        lo, hi = self.seq
        if min(self.layers, self.hidden, self.heads, self.vocab, self.ffn or 1) < 1:
            raise ValueError("layers, hidden, heads, ffn and vocab must be >= 1")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if not 1 <= lo <= hi:
            raise ValueError(f"T range {lo}..{hi} is not 1 <= LO <= HI")
        if hi > self.n_positions:
            raise ValueError(
                f"T up to {hi} needs n_positions >= {hi}: the position embedding has "
                f"{self.n_positions} rows (torch.export does not guard the lookup)"
            )

    def describe(self) -> str:
        head = ", LM head" if self.lm_head else ""
        ffn = f", FFN {self.ffn}" if self.ffn else ""
        return (
            f"{self.layers}-layer GPT-2, hidden {self.hidden}, {self.heads} heads{ffn}, "
            f"vocab {self.vocab}, n_positions {self.n_positions}{head}, "
            f"{_batch_words(self.batch)}T in {self.seq[0]}..{self.seq[1]}, seed {self.seed}"
        )

    def to_json(self) -> dict[str, Any]:
        fields = {**dataclasses.asdict(self), "seq": list(self.seq)}
        for optional in ("ffn", "batch"):  # headers written before they existed read the same
            if fields[optional] is None:
                del fields[optional]
        if self.batch is not None:
            fields["batch"] = list(self.batch)
        return fields


def check_batch(batch: tuple[int, int]) -> tuple[int, int]:
    """A dynamic batch's range: 1 <= LO <= HI and HI >= 2 (a batch of 1 only is static)."""
    lo, hi = (int(v) for v in batch)
    if not 1 <= lo <= hi:
        raise ValueError(f"batch range {lo}..{hi} is not 1 <= LO <= HI")
    if hi < 2:
        raise ValueError(f"batch range {lo}..{hi} holds one size: leave the batch static")
    return lo, hi


def _batch_words(batch: tuple[int, int] | None) -> str:
    return f"batch in {batch[0]}..{batch[1]}, " if batch else ""


def token_inputs(
    seq: tuple[int, int], batch: tuple[int, int] | None
) -> tuple[list[torch.Tensor], dict[str, tuple[int, int]], list[dict[int, str]]]:
    """Example ``input_ids``, dynamic dims and their axes: ``[1, T]``, or ``[B, T]`` with a
    batch range (examples of 3 and 7, not 0 or 1, which torch.export specialises, and
    apart, so no guard ties them)."""
    import torch

    example = min(max(7, seq[0]), seq[1])
    if batch is None:
        return [torch.zeros((1, example), dtype=torch.int64)], {"seq": seq}, [{1: "seq"}]
    rows = min(max(3, batch[0]), batch[1])
    ids = torch.zeros((rows, example), dtype=torch.int64)
    return [ids], {"batch": batch, "seq": seq}, [{0: "batch", 1: "seq"}]


def _wrap(model: nn.Module, lm_head: bool) -> nn.Module:
    """``model`` taking token ids and returning one tensor (a class made here: torch is
    optional; the factory pickles, not the module)."""
    from torch import nn

    class TokenModel(nn.Module):
        """``input_ids [1, T]`` -> last hidden state ``[1, T, H]`` (or logits ``[1, T, V]``)."""

        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.model = inner

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            out = self.model(input_ids=input_ids, use_cache=False)
            return out.logits if lm_head else out.last_hidden_state

    return TokenModel(model).eval()


def gpt2_module(config: Gpt2Config) -> nn.Module:
    """The float32 torch module of ``config``: seeded, eval mode, no dropout, no KV cache."""
    try:
        import torch
        import transformers  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError(
            "GPT-2 needs torch and transformers (pip install 'dcmlir[torch]')"
        ) from None
    torch.manual_seed(config.seed)
    hf_config = transformers.GPT2Config(
        n_layer=config.layers,
        n_embd=config.hidden,
        n_head=config.heads,
        n_positions=config.n_positions,
        vocab_size=config.vocab,
        n_inner=config.ffn,
        # with a dynamic batch, torch 2.13's decomposition of CPU SDPA leaves strides a later
        # view refuses ("Cannot view a tensor with shape [B, T, H]"): plain matmul attention
        **({"attn_implementation": "eager"} if config.batch else {}),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    cls = transformers.GPT2LMHeadModel if config.lm_head else transformers.GPT2Model
    return _wrap(cls(hf_config), config.lm_head)


@dataclass(frozen=True)
class TorchSource:
    """A torch model anyone can rebuild: what the reference, torch eager and ONNX start from.

    ``build`` must pickle (a module-level function or a ``functools.partial`` of one)
    so the measuring worker rebuilds the model itself. ``seq_axes[i]``: the axis of
    input ``i`` that is ``T``, whose range is ``seq``; ``vocab``: integer inputs are
    token ids in [0, vocab); ``family`` (``gpt2``, ``bert``, ``llama``, ``encoder``): numpy's.
    """

    name: str
    build: Callable[[], nn.Module]
    seq_axes: tuple[int, ...]
    seq: tuple[int, int]
    vocab: int | None = None
    family: str = ""


@dataclass
class BuiltModel:
    """A torch module with its example inputs and dynamic axis, as ``import_torch`` takes them."""

    module: nn.Module
    example_inputs: list[torch.Tensor]
    dynamic_dims: dict[str, tuple[int, int]]
    input_dims: list[dict[int, str]]
    config: Gpt2Config
    source: TorchSource = field(repr=False)

    def import_model(self, weights: str = "params") -> ImportedModel:
        """Export, decompose, import and lower to linalg (:func:`~.torch_import.import_torch`)."""
        from dcmlir.models.torch_import import import_torch  # needs torch

        return import_torch(
            self.module,
            self.example_inputs,
            self.dynamic_dims,
            input_dims=self.input_dims,
            weights=weights,
        )

    def save(self, path: str | Path, weights: str = "params") -> ParameterFile | None:
        """Import and write ``path`` (first line: :func:`model_header`) and its ``.irpa``."""
        imported = self.import_model(weights)
        parameters = imported.save(path)
        text = Path(path).read_text(encoding="utf-8")
        Path(path).write_text(model_header(self.config) + "\n" + text, encoding="utf-8")
        return parameters


def gpt2(
    layers: int,
    hidden: int = 768,
    heads: int = 12,
    n_positions: int = 1024,
    seed: int = 0,
    *,
    vocab: int = GPT2_VOCAB,
    seq: tuple[int, int] = (1, 128),
    lm_head: bool = False,
    ffn: int | None = None,
    batch: tuple[int, int] | None = None,
) -> BuiltModel:
    """GPT-2 with seeded random weights: ``input_ids [1, T]`` (int64), ``T`` dynamic in ``seq``
    (``[B, T]`` with ``B`` dynamic in ``batch`` too)."""
    config = Gpt2Config(layers, hidden, heads, n_positions, vocab, seq, seed, lm_head, ffn, batch)
    # after the config's checks: a bad size is a ValueError even without torch
    inputs, dims, axes = token_inputs(config.seq, config.batch)
    return BuiltModel(gpt2_module(config), inputs, dims, axes, config, gpt2_source(config))


# --- any family from a config: what import-torch --hf-config builds ----------------------

HF_FAMILIES = ("bert", "gpt2", "llama")
"""The ``transformers`` architectures :func:`hf_model` builds: an encoder and two decoders
(GPT-2: learned positions, GELU MLP; Llama: RoPE, SwiGLU MLP, RMSNorm, grouped KV heads)."""

HF_SIZE_KEYS = ("layers", "hidden", "heads", "ffn", "vocab", "positions", "kv-heads")
"""The sizes ``--hf-sizes`` takes; ``kv-heads`` is Llama's only."""

HF_DEFAULT_SIZES: dict[str, dict[str, int]] = {
    "bert": {"layers": 2, "hidden": 768, "heads": 12, "vocab": BERT_VOCAB},
    "gpt2": {"layers": 2, "hidden": 768, "heads": 12, "vocab": GPT2_VOCAB},
    "llama": {"layers": 2, "hidden": 768, "heads": 12, "vocab": 32000},
}
"""Each family's base sizes with 2 layers (BERT-base, GPT-2 small, a Llama as wide).
Derived when not given: ``ffn`` 4 x hidden (BERT, GPT-2) or 8/3 x hidden rounded up to
a multiple of 8 (Llama's SwiGLU: 2048 at 768); ``positions`` BERT 512 (or T's top if
larger), GPT-2 1024, Llama 2048; ``kv-heads`` = ``heads``."""


def _default_ffn(family: str, hidden: int) -> int:
    return -(-8 * hidden // 24) * 8 if family == "llama" else 4 * hidden


@dataclass
class HfModel:
    """A ``transformers`` model ready for ``import_torch``, and the line that describes it.

    ``header``: the saved module's first line where ``dcmlir run-model`` can rebuild
    the model from it (GPT-2's :func:`model_header`), else None.
    """

    family: str
    module: nn.Module
    example_inputs: list[torch.Tensor]
    dynamic_dims: dict[str, tuple[int, int]]
    input_dims: list[dict[int, str]]
    description: str
    header: str | None = None


def hf_model(
    family: str,
    sizes: Mapping[str, int] | None = None,
    *,
    seq: tuple[int, int] = (1, 128),
    seed: int = 0,
    batch: tuple[int, int] | None = None,
) -> HfModel:
    """``family``'s model with seeded random weights: ``input_ids [1, T]`` (int64), ``T``
    dynamic in ``seq``; with ``batch``, ``input_ids [B, T]``, ``B`` dynamic in it too.
    ``sizes`` overrides :data:`HF_DEFAULT_SIZES` by :data:`HF_SIZE_KEYS`.

    Bad sizes are a ValueError; a position table smaller than ``T``'s top is refused for
    GPT-2 (torch.export would not notice) and left to torch.export's guard for BERT.
    """
    if family not in HF_FAMILIES:
        raise ValueError(f"unknown family '{family}' (one of {', '.join(HF_FAMILIES)})")
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(HF_SIZE_KEYS))
    if unknown:
        raise ValueError(f"unknown size '{unknown[0]}' (one of {', '.join(HF_SIZE_KEYS)})")
    if "kv-heads" in sizes and family != "llama":
        raise ValueError(f"kv-heads is a Llama size; {family} has one K/V head per head")
    if any(value < 1 for value in sizes.values()):
        raise ValueError("every size must be >= 1")
    size = {**HF_DEFAULT_SIZES[family], **sizes}
    size.setdefault("ffn", _default_ffn(family, size["hidden"]))
    batch = check_batch(batch) if batch is not None else None
    if batch is not None and family != "bert" and seq[1] > DECODER_BATCH_SEQ_MAX:
        raise ValueError(
            f"with a dynamic batch, IREE 3.13 computes {family}'s causal attention wrongly past "
            f"T = {DECODER_BATCH_SEQ_MAX} (IREE's default build too): keep T in "
            f"1..{DECODER_BATCH_SEQ_MAX} or the batch static"
        )
    if family == "gpt2":
        built = gpt2(
            size["layers"],
            size["hidden"],
            size["heads"],
            size.get("positions", 1024),
            seed,
            vocab=size["vocab"],
            seq=seq,
            ffn=size["ffn"] if size["ffn"] != 4 * size["hidden"] else None,
            batch=batch,
        )
        return HfModel(
            family,
            built.module,
            built.example_inputs,
            built.dynamic_dims,
            built.input_dims,
            built.config.describe(),
            model_header(built.config),
        )
    header = family_header(family, size, seq, seed, batch)
    if family == "bert":
        module, positions = _bert(size, seq, seed)
        name, heads = "BERT", f"{size['heads']} heads"
    else:
        module, positions = llama_module(size, seed), size.get("positions", 2048)
        kv_heads = size.get("kv-heads", size["heads"])
        name, heads = "Llama", f"{size['heads']} heads ({kv_heads} KV)"
    description = (
        f"{size['layers']}-layer {name}, hidden {size['hidden']}, {heads}, FFN {size['ffn']}, "
        f"vocab {size['vocab']}, positions {positions}, {_batch_words(batch)}"
        f"T in {seq[0]}..{seq[1]}, seed {seed}"
    )
    return HfModel(family, module, *token_inputs(seq, batch), description, header)


DECODER_BATCH_SEQ_MAX = 64
"""The top of ``T`` a decoder (GPT-2, Llama) with a dynamic batch is imported for: past it,
IREE 3.13's builds (its default one too) disagree with torch from query row 64 on (1-layer
GPT-2: 7e-3 at T = 65, 5e-2 at 128; Llama 7e-3 and 1.4e-2), while the causal mask alone
and every T with a static batch match. BERT, with no causal mask, matches at every T."""


def family_header(
    family: str,
    size: Mapping[str, int],
    seq: tuple[int, int],
    seed: int,
    batch: tuple[int, int] | None,
) -> str:
    """A BERT or Llama module's first line: sizes, ranges, seed, for :func:`source_from_text`."""
    fields: dict[str, Any] = {"sizes": dict(size), "seq": list(seq), "seed": seed}
    if batch is not None:
        fields["batch"] = list(batch)
    return f"// dcmlir-model: {family} {json.dumps(fields, sort_keys=True)}"


def family_module(family: str, size: Mapping[str, int], seq: tuple[int, int], seed: int) -> Any:
    """The BERT or Llama of :func:`hf_model` (what its header rebuilds; picklable)."""
    return _bert(size, seq, seed)[0] if family == "bert" else llama_module(size, seed)


def _bert(size: Mapping[str, int], seq: tuple[int, int], seed: int) -> tuple[nn.Module, int]:
    """BERT through :func:`~.torch_import.hf_bert_model` (one place builds it)."""
    from dcmlir.models.torch_import import hf_bert_model  # needs torch

    config = EncoderConfig(
        hidden=size["hidden"],
        heads=size["heads"],
        ffn=size["ffn"],
        layers=size["layers"],
        seq=seq,
        seed=seed,
    )
    positions = size.get("positions", max(512, seq[1]))
    return hf_bert_model(config, vocab=size["vocab"], positions=positions), positions


def llama_module(size: Mapping[str, int], seed: int = 0) -> nn.Module:
    """``transformers.LlamaModel`` of :data:`HF_SIZE_KEYS` sizes, seeded, taking token ids
    (RoPE has no table to bound ``T``: ``positions`` sets ``max_position_embeddings`` only)."""
    try:
        import torch
        import transformers
    except ImportError:
        raise ImportError(
            "Llama needs torch and transformers (pip install 'dcmlir[torch]')"
        ) from None
    heads, kv_heads = size["heads"], size.get("kv-heads", size["heads"])
    if size["hidden"] % heads:
        raise ValueError(f"hidden {size['hidden']} is not a multiple of heads {heads}")
    if heads % kv_heads:
        raise ValueError(f"heads {heads} is not a multiple of kv-heads {kv_heads}")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        hidden_size=size["hidden"],
        intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"],
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=size["vocab"],
        max_position_embeddings=size.get("positions", 2048),
        attention_dropout=0.0,
        use_cache=False,
    )
    return _wrap(transformers.LlamaModel(config), lm_head=False)


def gpt2_source(config: Gpt2Config) -> TorchSource:
    """The :class:`TorchSource` of ``config``'s GPT-2 (token ids, ``T`` on axis 1)."""
    build = functools.partial(gpt2_module, config)
    return TorchSource(config.describe(), build, (1,), config.seq, config.vocab, "gpt2")


def model_header(config: Gpt2Config) -> str:
    """The module's first line: ``// dcmlir-model: gpt2 {...}``, the config as JSON."""
    return f"// dcmlir-model: gpt2 {json.dumps(config.to_json(), sort_keys=True)}"


def source_from_text(text: str) -> TorchSource | None:
    """The torch model the module's header names (:meth:`BuiltModel.save`'s, a factory's),
    else None; a header naming an unknown model or bad sizes is a ValueError."""
    match = _HEADER.match(text.split("\n", 1)[0])
    if match is None:
        return None
    kind, fields = match.groups()
    if kind in ("bert", "llama"):
        return _family_source(kind, fields)
    if kind == "onnx":  # an ONNX file, not a torch model (dcmlir.models.onnx_source)
        return None
    if kind == FACTORY_KIND:  # the user's package.module:factory
        return TorchSource(*factory_fields(fields))
    if kind != "gpt2":
        raise ValueError(f"the module's header names an unknown model '{kind}'")
    try:
        config = Gpt2Config(**json.loads(fields))
    except (TypeError, ValueError) as err:
        raise ValueError(f"the module's gpt2 header is not a valid config: {err}") from None
    return gpt2_source(config)


def _family_source(family: str, fields: str) -> TorchSource:
    try:
        found = json.loads(fields)
        size, seq, seed = found["sizes"], tuple(found["seq"]), int(found["seed"])
        batch = found.get("batch")
        lo, hi = seq
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"the module's {family} header is not a valid config: {err}") from None
    words = _batch_words(tuple(batch) if batch else None)
    kind = "BERT" if family == "bert" else "Llama"
    name = f"{size['layers']}-layer {kind}, hidden {size['hidden']}, {words}T in {lo}..{hi}"
    build = functools.partial(family_module, family, size, (lo, hi), seed)
    return TorchSource(name, build, (1,), (lo, hi), size.get("vocab"), family)
