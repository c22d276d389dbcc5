"""A BERT-style encoder written straight as linalg-on-tensors MLIR, with its numpy reference.

The no-torch source of whole models: tests, the README demo and the model benchmarks
get a real transformer (dense layers, attention batch matmuls, softmax, layernorm,
GELU FFN) whose sequence length ``T`` is dynamic, with the range of ``T`` in the IR,
without importing anything from PyTorch. Weights are seeded random numbers, so a
model is fully described by its :class:`EncoderConfig`.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dcmlir.ir.iree import ParameterFile, load_function, write_parameter_archive
from dcmlir.measure.timing import MismatchError, check_outputs

__all__ = [
    "BERT_BASE",
    "DEFAULT_RTOL",
    "PARAMETER_SCOPE",
    "WEIGHT_LAYOUTS",
    "WEIGHT_MODES",
    "EncoderConfig",
    "GeneratedModel",
    "encoder_reference",
    "generate_encoder",
    "make_weights",
    "parameters_path_for",
    "random_input",
    "save_model",
    "verify_encoder",
    "weight_shapes",
]

WEIGHT_MODES = ("inline", "params")
WEIGHT_LAYOUTS = ("in_out", "out_in")
"""Dense weights as ``[in, out]`` (``x @ w``: plain ``linalg.matmul``) or ``[out, in]``
(torch's ``nn.Linear``: ``linalg.matmul`` with a transposed-B indexing map)."""
PARAMETER_SCOPE = "model"
"""The scope of every ``#flow.parameter.named`` the generator writes."""

_GELU_FORMS = ("erf", "tanh")
_LAYER_WEIGHTS = (
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
        for name in _LAYER_WEIGHTS
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


def random_input(config: EncoderConfig, seq_len: int, seed: int = 1) -> np.ndarray:
    """A ``[T, hidden]`` float32 input of N(0, 1) values (never zeros or splats)."""
    rng = np.random.default_rng([seed, seq_len])
    return rng.standard_normal((seq_len, config.hidden), dtype=np.float32)


# --- numpy reference -----------------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # scipy comes with scikit-learn, a dependency

    return erf(x)


def _gelu(x: np.ndarray, form: str) -> np.ndarray:
    if form == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    centred = x - x.mean(axis=-1, keepdims=True)
    variance = (centred**2).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + eps) * gamma + beta


def encoder_reference(
    config: EncoderConfig, weights: Mapping[str, np.ndarray], x: np.ndarray
) -> np.ndarray:
    """The encoder in float64 numpy: the yardstick every compiled variant is checked against."""
    if x.ndim != 2 or x.shape[1] != config.hidden:
        raise ValueError(f"input shape {x.shape} is not [T, {config.hidden}]")
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    h = np.asarray(x, dtype=np.float64)
    seq_len, heads, head_dim = h.shape[0], config.heads, config.head_dim
    for layer in range(config.layers):
        p = f"layer{layer}."
        qkv = h @ w[p + "qkv_w"] + w[p + "qkv_b"]  # [T, 3H]
        q, k, v = qkv.reshape(seq_len, 3, heads, head_dim).transpose(1, 2, 0, 3)  # [NH, T, D]
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)  # [NH, T, T]
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(seq_len, config.hidden)
        attended = context @ w[p + "out_w"] + w[p + "out_b"] + h
        h = _layernorm(attended, w[p + "ln1_g"], w[p + "ln1_b"], config.eps)
        inner = _gelu(h @ w[p + "ffn1_w"] + w[p + "ffn1_b"], config.gelu)
        h = _layernorm(
            inner @ w[p + "ffn2_w"] + w[p + "ffn2_b"] + h,
            w[p + "ln2_g"],
            w[p + "ln2_b"],
            config.eps,
        )
    return h


# --- MLIR emission -------------------------------------------------------------------------


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
        return _stored(self.weights, self.weight_layout)


def _stored(weights: Mapping[str, np.ndarray], layout: str) -> dict[str, np.ndarray]:
    """The arrays as the module holds them: dense weights transposed for ``out_in``."""
    if layout == "in_out":
        return dict(weights)
    return {
        name: np.ascontiguousarray(value.T) if name.endswith("_w") else value
        for name, value in weights.items()
    }


def _f32(value: float) -> str:
    """An f32 literal MLIR parses exactly (hex of the float's bits)."""
    bits = np.array([value], dtype=np.float32).view(np.uint32)[0]
    return f"0x{int(bits):08X}"


def _symbol(name: str) -> str:
    return "w_" + name.replace(".", "_")


def _tensor(*dims: int | None) -> str:
    shape = "x".join("?" if d is None else str(d) for d in dims)
    return f"tensor<{shape}xf32>"


_IDENTITY2 = "affine_map<(d0, d1) -> (d0, d1)>"
_ROW2 = "affine_map<(d0, d1) -> (d0)>"
_COL2 = "affine_map<(d0, d1) -> (d1)>"
_IDENTITY3 = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
_MM_A = "affine_map<(d0, d1, d2) -> (d0, d2)>"
_MM_B_T = "affine_map<(d0, d1, d2) -> (d1, d2)>"
_MM_C = "affine_map<(d0, d1, d2) -> (d0, d1)>"
_PAR2 = '["parallel", "parallel"]'
_RED2 = '["parallel", "reduction"]'
_PAR3 = '["parallel", "parallel", "parallel"]'


class _Emitter:
    """Writes the body of ``@main`` as text, one op per line, with fresh SSA names."""

    def __init__(self, config: EncoderConfig, layout: str = "in_out") -> None:
        self.config = config
        self.layout = layout
        self.lines: list[str] = []
        self.counter = 0
        lo, hi = config.seq
        # Contractions carry the range as dcmlir.dim_ranges too, so `dcmlir workloads`
        # lists it without --dims; util.assume.int below is what IREE and the passes read.
        self.t_range = f"array<i64: {lo}, {hi}>"

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"%{stem}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def empty(self, *dims: int | None) -> str:
        name = self.fresh("e")
        dynamic = ", ".join("%t" for d in dims if d is None)
        self.emit(f"{name} = tensor.empty({dynamic}) : {_tensor(*dims)}")
        return name

    def zeros(self, *dims: int | None) -> str:
        empty = self.empty(*dims)
        name = self.fresh("z")
        ty = _tensor(*dims)
        self.emit(f"{name} = linalg.fill ins(%zero : f32) outs({empty} : {ty}) -> {ty}")
        return name

    def matmul(self, x: str, w: str, k: int, n: int) -> str:
        acc = self.zeros(None, n)
        name = self.fresh("mm")
        maps, w_type = "", _tensor(k, n)
        if self.layout == "out_in":  # w is [n, k]: B indexed (d1, d2), as torch's Linear gives
            maps = f"indexing_maps = [{_MM_A}, {_MM_B_T}, {_MM_C}] "
            w_type = _tensor(n, k)
        self.emit(
            f"{name} = linalg.matmul {maps}{{dcmlir.dim_ranges = {{d0 = {self.t_range}}}}} "
            f"ins({x}, {w} : {_tensor(None, k)}, {w_type}) "
            f"outs({acc} : {_tensor(None, n)}) -> {_tensor(None, n)}"
        )
        return name

    def batch_matmul(self, a: str, b: str, a_dims: tuple, b_dims: tuple, out_dims: tuple) -> str:
        acc = self.zeros(*out_dims)
        name = self.fresh("bmm")
        ranges = ", ".join(
            f"d{loop} = {self.t_range}"
            for loop, extent in enumerate((*out_dims, a_dims[2]))
            if extent is None
        )
        self.emit(
            f"{name} = linalg.batch_matmul {{dcmlir.dim_ranges = {{{ranges}}}}} "
            f"ins({a}, {b} : {_tensor(*a_dims)}, {_tensor(*b_dims)}) "
            f"outs({acc} : {_tensor(*out_dims)}) -> {_tensor(*out_dims)}"
        )
        return name

    def generic(
        self,
        inputs: Sequence[tuple[str, str, str]],  # (value, type, indexing map)
        out_dims: tuple,
        out_map: str,
        iterators: str,
        body: Sequence[str],
        init: str | None = None,
    ) -> str:
        """A one-result ``linalg.generic``; ``body`` uses %a0.. (inputs) and %acc (output)."""
        out = init if init is not None else self.empty(*out_dims)
        name = self.fresh("g")
        ty = _tensor(*out_dims)
        maps = ", ".join([m for _, _, m in inputs] + [out_map])
        ins = ", ".join(v for v, _, _ in inputs)
        types = ", ".join(t for _, t, _ in inputs)
        args = ", ".join([f"%a{i}: f32" for i in range(len(inputs))] + ["%acc: f32"])
        self.emit(
            f"{name} = linalg.generic {{indexing_maps = [{maps}], iterator_types = {iterators}}} "
            f"ins({ins} : {types}) outs({out} : {ty}) {{"
        )
        self.lines.append(f"  ^bb0({args}):")
        for line in body:
            self.emit("  " + line)
        self.emit(f"}} -> {ty}")
        return name

    # --- layers ---------------------------------------------------------------------------

    def dense(self, x: str, w: str, b: str, k: int, n: int, residual: str | None = None) -> str:
        """``x @ w + b`` (+ ``residual``): the matmul, then one elementwise generic IREE fuses."""
        product = self.matmul(x, w, k, n)
        inputs = [(product, _tensor(None, n), _IDENTITY2), (b, _tensor(n), _COL2)]
        body = ["%r0 = arith.addf %a0, %a1 : f32"]
        if residual is not None:
            inputs.append((residual, _tensor(None, n), _IDENTITY2))
            body.append("%r1 = arith.addf %r0, %a2 : f32")
        body.append(f"linalg.yield %r{len(body) - 1} : f32")
        return self.generic(inputs, (None, n), _IDENTITY2, _PAR2, body)

    def gelu(self, x: str, n: int) -> str:
        ty = _tensor(None, n)
        if self.config.gelu == "erf":
            body = [
                "%r0 = arith.mulf %a0, %c_rsqrt2 : f32",
                "%r1 = math.erf %r0 : f32",
                "%r2 = arith.addf %r1, %one : f32",
                "%r3 = arith.mulf %a0, %half : f32",
                "%r4 = arith.mulf %r3, %r2 : f32",
                "linalg.yield %r4 : f32",
            ]
        else:
            body = [
                "%r0 = arith.mulf %a0, %a0 : f32",
                "%r1 = arith.mulf %r0, %a0 : f32",
                "%r2 = arith.mulf %r1, %c_gelu_cubic : f32",
                "%r3 = arith.addf %a0, %r2 : f32",
                "%r4 = arith.mulf %r3, %c_sqrt2pi : f32",
                "%r5 = math.tanh %r4 : f32",
                "%r6 = arith.addf %r5, %one : f32",
                "%r7 = arith.mulf %a0, %half : f32",
                "%r8 = arith.mulf %r7, %r6 : f32",
                "linalg.yield %r8 : f32",
            ]
        return self.generic([(x, ty, _IDENTITY2)], (None, n), _IDENTITY2, _PAR2, body)

    def layernorm(self, x: str, gamma: str, beta: str) -> str:
        """Mean, centre, variance, normalise: two row reductions and two elementwise generics."""
        h = self.config.hidden
        ty, row, vec = _tensor(None, h), _tensor(None), _tensor(h)
        total = self.generic(
            [(x, ty, _IDENTITY2)],
            (None,),
            _ROW2,
            _RED2,
            ["%r0 = arith.addf %a0, %acc : f32", "linalg.yield %r0 : f32"],
            init=self.zeros(None),
        )
        centred = self.generic(
            [(x, ty, _IDENTITY2), (total, row, _ROW2)],
            (None, h),
            _IDENTITY2,
            _PAR2,
            [
                "%r0 = arith.divf %a1, %c_hidden : f32",
                "%r1 = arith.subf %a0, %r0 : f32",
                "linalg.yield %r1 : f32",
            ],
        )
        squares = self.generic(
            [(centred, ty, _IDENTITY2)],
            (None,),
            _ROW2,
            _RED2,
            [
                "%r0 = arith.mulf %a0, %a0 : f32",
                "%r1 = arith.addf %r0, %acc : f32",
                "linalg.yield %r1 : f32",
            ],
            init=self.zeros(None),
        )
        return self.generic(
            [
                (centred, ty, _IDENTITY2),
                (squares, row, _ROW2),
                (gamma, vec, _COL2),
                (beta, vec, _COL2),
            ],
            (None, h),
            _IDENTITY2,
            _PAR2,
            [
                "%r0 = arith.divf %a1, %c_hidden : f32",
                "%r1 = arith.addf %r0, %c_eps : f32",
                "%r2 = math.rsqrt %r1 : f32",
                "%r3 = arith.mulf %a0, %r2 : f32",
                "%r4 = arith.mulf %r3, %a2 : f32",
                "%r5 = arith.addf %r4, %a3 : f32",
                "linalg.yield %r5 : f32",
            ],
        )

    def attention(self, qkv: str) -> str:
        """Heads out of ``[T, 3H]``, softmax(q k^T / sqrt(D)) v, heads back into ``[T, H]``."""
        c = self.config
        h, nh, d = c.hidden, c.heads, c.head_dim
        split = self.fresh("split")
        self.emit(
            f"{split} = tensor.expand_shape {qkv} [[0], [1, 2, 3]] output_shape [%t, 3, {nh}, {d}]"
            f" : {_tensor(None, 3 * h)} into {_tensor(None, 3, nh, d)}"
        )
        heads_init = self.empty(3, nh, None, d)
        heads = self.fresh("heads")
        self.emit(
            f"{heads} = linalg.transpose ins({split} : {_tensor(None, 3, nh, d)}) "
            f"outs({heads_init} : {_tensor(3, nh, None, d)}) permutation = [1, 2, 0, 3]"
        )
        q, k, v = (self.fresh(n) for n in ("q", "k", "v"))
        for index, name in enumerate((q, k, v)):
            self.emit(
                f"{name} = tensor.extract_slice {heads}[{index}, 0, 0, 0] [1, {nh}, %t, {d}] "
                f"[1, 1, 1, 1] : {_tensor(3, nh, None, d)} to {_tensor(nh, None, d)}"
            )
        kt_init = self.empty(nh, d, None)
        kt = self.fresh("kt")
        self.emit(
            f"{kt} = linalg.transpose ins({k} : {_tensor(nh, None, d)}) "
            f"outs({kt_init} : {_tensor(nh, d, None)}) permutation = [0, 2, 1]"
        )
        scores = self.batch_matmul(q, kt, (nh, None, d), (nh, d, None), (nh, None, None))
        scores_ty = _tensor(nh, None, None)
        scaled = self.generic(
            [(scores, scores_ty, _IDENTITY3)],
            (nh, None, None),
            _IDENTITY3,
            _PAR3,
            ["%r0 = arith.mulf %a0, %c_scale : f32", "linalg.yield %r0 : f32"],
        )
        probs_init = self.empty(nh, None, None)
        probs = self.fresh("probs")
        self.emit(
            f"{probs} = linalg.softmax dimension(2) ins({scaled} : {scores_ty}) "
            f"outs({probs_init} : {scores_ty}) -> {scores_ty}"
        )
        context = self.batch_matmul(probs, v, (nh, None, None), (nh, None, d), (nh, None, d))
        merged_init = self.empty(None, nh, d)
        merged = self.fresh("merged")
        self.emit(
            f"{merged} = linalg.transpose ins({context} : {_tensor(nh, None, d)}) "
            f"outs({merged_init} : {_tensor(None, nh, d)}) permutation = [1, 0, 2]"
        )
        flat = self.fresh("ctx")
        self.emit(
            f"{flat} = tensor.collapse_shape {merged} [[0], [1, 2]] "
            f": {_tensor(None, nh, d)} into {_tensor(None, h)}"
        )
        return flat

    def layer(self, x: str, w: Mapping[str, str]) -> str:
        c = self.config
        h, f = c.hidden, c.ffn
        qkv = self.dense(x, w["qkv_w"], w["qkv_b"], h, 3 * h)
        context = self.attention(qkv)
        attended = self.dense(context, w["out_w"], w["out_b"], h, h, residual=x)
        normed = self.layernorm(attended, w["ln1_g"], w["ln1_b"])
        inner = self.gelu(self.dense(normed, w["ffn1_w"], w["ffn1_b"], h, f), f)
        out = self.dense(inner, w["ffn2_w"], w["ffn2_b"], f, h, residual=normed)
        return self.layernorm(out, w["ln2_g"], w["ln2_b"])


def _constants(config: EncoderConfig) -> list[str]:
    values = {
        "zero": 0.0,
        "one": 1.0,
        "half": 0.5,
        "c_hidden": float(config.hidden),
        "c_eps": config.eps,
        "c_scale": 1 / math.sqrt(config.head_dim),
        "c_rsqrt2": 1 / math.sqrt(2),
        "c_sqrt2pi": math.sqrt(2 / math.pi),
        "c_gelu_cubic": 0.044715,
    }
    return [f"%{name} = arith.constant {_f32(v)} : f32" for name, v in values.items()]


def _resource_blob(array: np.ndarray) -> str:
    """A ``dense_resource`` blob: 4-byte alignment header, then the raw little-endian bytes."""
    return "0x04000000" + np.ascontiguousarray(array, dtype="<f4").tobytes().hex().upper()


def _lines(
    config: EncoderConfig, weights: Mapping[str, np.ndarray], mode: str, layout: str
) -> Iterator[str]:
    weights = _stored(weights, layout)
    shapes = {name: tuple(array.shape) for name, array in weights.items()}
    lo, hi = config.seq
    h = config.hidden
    emitter = _Emitter(config, layout)
    names: dict[str, str] = {}
    for name, shape in shapes.items():
        value = f"%{_symbol(name)}"
        names[name] = value
        if mode == "params":
            emitter.emit(f"{value} = util.global.load @{_symbol(name)} : {_tensor(*shape)}")
        else:
            emitter.emit(
                f"{value} = arith.constant dense_resource<{_symbol(name)}> : {_tensor(*shape)}"
            )
    x = "%x"
    for layer in range(config.layers):
        prefix = f"layer{layer}."
        x = emitter.layer(x, {n: names[prefix + n] for n in _LAYER_WEIGHTS})

    yield f"// {config.describe()}; weights: {mode}, {layout} (dcmlir generate-bert)"
    yield "module {"
    if mode == "params":
        for name, shape in shapes.items():
            yield (
                f"  util.global private @{_symbol(name)} = "
                f'#flow.parameter.named<"{PARAMETER_SCOPE}"::"{name}"> : {_tensor(*shape)}'
            )
    yield f"  func.func @main(%x: {_tensor(None, h)}) -> {_tensor(None, h)} {{"
    yield "    %c0 = arith.constant 0 : index"
    yield f"    %t_in = tensor.dim %x, %c0 : {_tensor(None, h)}"
    yield f"    %t = util.assume.int %t_in<umin = {lo}, umax = {hi}> : index"
    for line in _constants(config):
        yield "    " + line
    for line in emitter.lines:
        yield "  " + line
    yield f"    return {x} : {_tensor(None, h)}"
    yield "  }"
    yield "}"
    if mode == "inline":
        yield ""
        yield "{-#"
        yield "  dialect_resources: {"
        yield "    builtin: {"
        items = list(shapes)
        for index, name in enumerate(items):
            comma = "," if index + 1 < len(items) else ""
            yield f'      {_symbol(name)}: "{_resource_blob(weights[name])}"{comma}'
        yield "    }"
        yield "  }"
        yield "#-}"


def generate_encoder(
    config: EncoderConfig,
    weights: str = "params",
    values: Mapping[str, np.ndarray] | None = None,
    weight_layout: str = "in_out",
) -> GeneratedModel:
    """The encoder's module text; ``weights`` is ``params`` (small IR + .irpa) or ``inline``.

    ``values`` overrides the seeded weights (same names and shapes as :func:`weight_shapes`);
    ``weight_layout`` ``out_in`` stores dense weights as torch does (see :data:`WEIGHT_LAYOUTS`).
    """
    if weights not in WEIGHT_MODES:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_MODES)}, not '{weights}'")
    if weight_layout not in WEIGHT_LAYOUTS:
        raise ValueError(
            f"weight_layout must be one of {', '.join(WEIGHT_LAYOUTS)}, not '{weight_layout}'"
        )
    arrays = dict(values) if values is not None else make_weights(config)
    for name, shape in weight_shapes(config).items():
        if name not in arrays or tuple(arrays[name].shape) != shape:
            raise ValueError(f"weight '{name}' is missing or not of shape {shape}")
    text = "\n".join(_lines(config, arrays, weights, weight_layout)) + "\n"
    return GeneratedModel(config, text, weights, arrays, weight_layout=weight_layout)


# --- files and checks ----------------------------------------------------------------------


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


DEFAULT_RTOL = 1e-4
"""fp32 against the float64 reference: max abs error relative to the output's scale."""


def verify_encoder(
    vmfb: bytes,
    model: GeneratedModel,
    seq_lens: Iterable[int],
    *,
    parameters: ParameterFile | None = None,
    driver: str = "local-sync",
    rtol: float = DEFAULT_RTOL,
) -> dict[int, float]:
    """Run a compiled encoder at each ``T`` and check it against :func:`encoder_reference`.

    Returns ``{T: relative error}``; raises :class:`~dcmlir.measure.timing.MismatchError`
    naming the first ``T`` whose error exceeds ``rtol``. ``parameters`` is required
    for a module built from ``params`` weights (see :func:`save_model`).
    """
    if model.weight_mode == "params" and parameters is None:
        raise ValueError("a module with params weights needs its .irpa (parameters=...)")
    function = load_function(vmfb, model.function, driver, parameters=parameters)
    errors: dict[int, float] = {}
    for seq_len in seq_lens:
        x = random_input(model.config, seq_len)
        expected = encoder_reference(model.config, model.weights, x)
        try:
            errors[seq_len] = check_outputs(function(x), [expected], rtol)
        except MismatchError as err:
            raise MismatchError(f"T={seq_len}: {err}") from None
    return errors
