"""A BERT-style encoder for dcmlir to tune: its configuration, seeded weights and files.

The no-torch source of whole models: tests, the README demo and the model benchmarks
get a real transformer (dense layers, attention batch matmuls, softmax, layernorm,
GELU FFN) whose sequence length ``T`` is dynamic, with the range of ``T`` in the IR,
without importing anything from PyTorch. Weights are seeded random numbers, so a
model is fully described by its :class:`EncoderConfig`. The data flows config ->
weights (here) -> module text (:mod:`dcmlir.models.bert_linalg`) -> files (here) ->
compiled module checked against numpy (:mod:`dcmlir.models.bert_reference`).

The function is ``@main(%x: tensor<?xHxf32>) -> tensor<?xHxf32>``: one sequence
(batch 1) of ``T`` token embeddings in, the encoder's hidden states out. There is no
embedding layer and no batch dimension (a batch of B sequences of equal length is
B calls, or one call on the B*T rows of a model without attention).

Weights reach the module one of two ways (``docs/models.md`` has the measurements):

- ``inline``: ``dense_resource`` blobs in the module text, self-contained but
  big (a 12-layer BERT-base is 340 MB of weights, 680 MB of hex text);
- ``params``: ``util.global``s bound to ``#flow.parameter.named<"model"::NAME>``,
  the values in an IREE parameter archive (``.irpa``) loaded at run time, so the
  IR stays a few tens of KB whatever the model size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dcmlir.ir.iree import ParameterFile, write_parameter_archive

__all__ = [
    "BERT_BASE",
    "LAYER_WEIGHTS",
    "PARAMETER_SCOPE",
    "WEIGHT_LAYOUTS",
    "WEIGHT_MODES",
    "EncoderConfig",
    "GeneratedModel",
    "make_weights",
    "parameters_path_for",
    "save_model",
    "stored_weights",
    "weight_shapes",
]

WEIGHT_MODES = ("inline", "params")
WEIGHT_LAYOUTS = ("in_out", "out_in")
"""Dense weights as ``[in, out]`` (``x @ w``: plain ``linalg.matmul``) or ``[out, in]``
(torch's ``nn.Linear``: ``linalg.matmul`` with a transposed-B indexing map)."""
PARAMETER_SCOPE = "model"
"""The scope of every ``#flow.parameter.named`` the generator writes."""

_GELU_FORMS = ("erf", "tanh")
LAYER_WEIGHTS = (
    "qkv_w",
    "qkv_b",
    "out_w",
    "out_b",
    "ln1_g",
    "ln1_b",
    "ffn1_w",
    "ffn1_b",
    "ffn2_w",
    "ffn2_b",
    "ln2_g",
    "ln2_b",
)
"""The weights of one layer, in the order the module uses them (names without ``layerN.``)."""


@dataclass(frozen=True)
class EncoderConfig:
    """Everything that defines a generated encoder, its weights included (via ``seed``).

    ``seq`` is the inclusive range of the sequence length ``T`` the module promises
    (``util.assume.int`` in the IR); ``gelu`` picks the exact (``erf``, BERT's and
    torch's default) or the ``tanh`` approximation.
    """

    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    layers: int = 2
    seq: tuple[int, int] = (1, 128)
    seed: int = 0
    dtype: str = "f32"
    eps: float = 1e-12
    gelu: str = "erf"

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "ffn", "layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        lo, hi = self.seq
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 1 or lo > hi:
            raise ValueError(f"seq must be LO:HI with 1 <= LO <= HI, not {lo}:{hi}")
        if self.dtype != "f32":
            raise ValueError(f"dtype '{self.dtype}' is not supported (only f32)")
        if self.gelu not in _GELU_FORMS:
            raise ValueError(f"gelu must be one of {', '.join(_GELU_FORMS)}, not '{self.gelu}'")
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, not {self.eps}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def describe(self) -> str:
        return (
            f"{self.layers}-layer encoder, hidden {self.hidden}, {self.heads} heads, "
            f"FFN {self.ffn}, T in {self.seq[0]}..{self.seq[1]}, seed {self.seed}"
        )

    def header(self, weights: str, tool: str) -> str:
        """A module's first line holding this encoder (``weights``: how it holds them; ``tool``:
        the command that wrote it): what ``run-model`` reads the config back from."""
        return f"// {self.describe()}; weights: {weights} (dcmlir {tool})"

    def parameter_count(self) -> int:
        return sum(math.prod(shape) for shape in weight_shapes(self).values())


BERT_BASE = EncoderConfig()
"""Hidden 768, 12 heads, FFN 3072 (BERT-base sizes), 2 layers, T in 1..128."""


# --- weights -------------------------------------------------------------------------------


def weight_shapes(config: EncoderConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight, in the order the module uses them.

    Dense weights are ``[in, out]`` (``x @ w``), the layout of a plain ``linalg.matmul``.
    """
    h, f = config.hidden, config.ffn
    per_layer = {
        "qkv_w": (h, 3 * h),
        "qkv_b": (3 * h,),
        "out_w": (h, h),
        "out_b": (h,),
        "ln1_g": (h,),
        "ln1_b": (h,),
        "ffn1_w": (h, f),
        "ffn1_b": (f,),
        "ffn2_w": (f, h),
        "ffn2_b": (h,),
        "ln2_g": (h,),
        "ln2_b": (h,),
    }
    return {
        f"layer{layer}.{name}": per_layer[name]
        for layer in range(config.layers)
        for name in LAYER_WEIGHTS
    }


def make_weights(config: EncoderConfig) -> dict[str, np.ndarray]:
    """Seeded float32 weights: dense ~ N(0, 1/fan_in), biases ~ N(0, 0.02^2), LN near (1, 0).

    The 1/fan_in variance keeps activations O(1) through the layers, so attention
    is far from uniform and a wrong kernel shows up as a large error.
    """
    rng = np.random.default_rng(config.seed)
    weights: dict[str, np.ndarray] = {}
    for name, shape in weight_shapes(config).items():
        kind = name.rsplit(".", 1)[1]
        if kind.endswith("_w"):
            values = rng.standard_normal(shape, dtype=np.float32) / np.float32(math.sqrt(shape[0]))
        elif kind.endswith("_g"):
            values = 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif kind.startswith("ln"):
            values = 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            values = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        weights[name] = np.ascontiguousarray(values, dtype=np.float32)
    return weights


def stored_weights(weights: Mapping[str, np.ndarray], layout: str) -> dict[str, np.ndarray]:
    """The arrays as the module holds them: dense weights transposed for ``out_in``."""
    if layout == "in_out":
        return dict(weights)
    return {
        name: np.ascontiguousarray(value.T) if name.endswith("_w") else value
        for name, value in weights.items()
    }


# --- the generated model and its files -----------------------------------------------------


@dataclass(frozen=True)
class GeneratedModel:
    """A generated module and what it needs at run time."""

    config: EncoderConfig
    text: str
    weight_mode: str
    weights: dict[str, np.ndarray] = field(repr=False)  # canonical: dense weights [in, out]
    function: str = "main"
    weight_layout: str = "in_out"

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """What the ``.irpa`` must hold (keys as the module names them); empty for inline."""
        if self.weight_mode != "params":
            return {}
        return stored_weights(self.weights, self.weight_layout)


def parameters_path_for(module_path: str | Path) -> Path:
    """Where a module's weights go by default: ``model.mlir`` -> ``model.irpa``."""
    return Path(module_path).with_suffix(".irpa")


def save_model(
    model: GeneratedModel, path: str | Path, parameters_path: str | Path | None = None
) -> ParameterFile | None:
    """Write the module text and, for ``params`` weights, its ``.irpa`` (default: beside it).

    Returns the parameter file to load the compiled module with (None for inline weights).
    """
    Path(path).write_text(model.text, encoding="utf-8")
    if model.weight_mode != "params":
        return None
    archive = Path(parameters_path) if parameters_path else parameters_path_for(path)
    write_parameter_archive(archive, model.parameters)
    return ParameterFile(str(archive), PARAMETER_SCOPE)
