"""The yardstick of a generated encoder: its inputs, the float64 numpy encoder, the check.

Every compiled variant of a generated model is checked against
:func:`encoder_reference` on seeded random inputs, so a wrong kernel shows up as a
large error (the seeded weights keep activations O(1), see
:func:`~dcmlir.models.bert.make_weights`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
from scipy.special import erf  # scipy comes with scikit-learn, a dependency

from dcmlir.ir.iree import ParameterFile, load_function
from dcmlir.measure.timing import MismatchError, check_outputs
from dcmlir.models.bert import EncoderConfig, GeneratedModel

__all__ = [
    "DEFAULT_RTOL",
    "encoder_reference",
    "gelu",
    "layer_norm",
    "random_input",
    "softmax",
    "verify_encoder",
]

DEFAULT_RTOL = 1e-4
"""fp32 against the float64 reference: max abs error relative to the output's scale."""


def random_input(config: EncoderConfig, seq_len: int, seed: int = 1) -> np.ndarray:
    """A ``[T, hidden]`` float32 input of N(0, 1) values (never zeros or splats)."""
    rng = np.random.default_rng([seed, seq_len])
    return rng.standard_normal((seq_len, config.hidden), dtype=np.float32)


def gelu(x: np.ndarray, form: str) -> np.ndarray:
    """GELU, ``erf`` or its ``tanh`` approximation (GPT-2's), in ``x``'s precision."""
    if form == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm over the last axis."""
    centred = x - x.mean(axis=-1, keepdims=True)
    variance = (centred**2).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + eps) * gamma + beta


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; ``scores`` is shifted by its max in place."""
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def encoder_reference(
    config: EncoderConfig,
    weights: Mapping[str, np.ndarray],
    x: np.ndarray,
    dtype: type[np.floating] = np.float64,
) -> np.ndarray:
    """The encoder in numpy: in float64 the yardstick every compiled variant is checked
    against; in float32 the numpy peer a model is timed beside (weights already of
    ``dtype`` are used as they are)."""
    if x.ndim != 2 or x.shape[1] != config.hidden:
        raise ValueError(f"input shape {x.shape} is not [T, {config.hidden}]")
    w = {name: np.asarray(value, dtype=dtype) for name, value in weights.items()}
    h = np.asarray(x, dtype=dtype)
    seq_len, heads, head_dim = h.shape[0], config.heads, config.head_dim
    for layer in range(config.layers):
        p = f"layer{layer}."
        qkv = h @ w[p + "qkv_w"] + w[p + "qkv_b"]  # [T, 3H]
        q, k, v = qkv.reshape(seq_len, 3, heads, head_dim).transpose(1, 2, 0, 3)  # [NH, T, D]
        probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(head_dim))  # [NH, T, T]
        context = (probs @ v).transpose(1, 0, 2).reshape(seq_len, config.hidden)
        attended = context @ w[p + "out_w"] + w[p + "out_b"] + h
        h = layer_norm(attended, w[p + "ln1_g"], w[p + "ln1_b"], config.eps)
        inner = gelu(h @ w[p + "ffn1_w"] + w[p + "ffn1_b"], config.gelu)
        h = layer_norm(
            inner @ w[p + "ffn2_w"] + w[p + "ffn2_b"] + h,
            w[p + "ln2_g"],
            w[p + "ln2_b"],
            config.eps,
        )
    return h


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
