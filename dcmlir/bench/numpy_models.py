"""The numpy peer of a whole model: its forward pass in float32 numpy, where dcmlir knows one.

A user without IREE would reach for numpy (BLAS ``sgemm`` for every matmul) as readily
as for torch, so model tables carry it beside IREE's builds. Two architectures have a
numpy form here: the generated encoder (:class:`NumpyEncoder`, the formula of its
float64 reference on float32 weights) and GPT-2 (:class:`NumpyGpt2`, Hugging Face's
``GPT2Model`` written out over the torch model's own weights). Each is built in the
measuring worker with the IREE device's thread count and checked like every column;
the timed call is the forward pass only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dcmlir.measure.variants import HostModel
from dcmlir.models import EncoderConfig, encoder_reference, make_weights
from dcmlir.models.bert_reference import gelu, layer_norm, softmax
from dcmlir.models.hf_models import TorchSource

__all__ = ["NUMPY", "NumpyEncoder", "NumpyGpt2", "numpy_variant"]

NUMPY = "numpy"


class NumpyEncoder:
    """A generated encoder's forward pass in float32 numpy."""

    def __init__(self, config: EncoderConfig, threads: int) -> None:
        threadpool_limits(limits=threads)  # stays in force in this (worker) process
        self.config = config
        self.weights = {k: np.asarray(w, np.float32) for k, w in make_weights(config).items()}

    def prepare(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array(a, dtype=np.float32, copy=True) for a in inputs]

    def invoke(self, arrays: list[np.ndarray]) -> np.ndarray:
        return encoder_reference(self.config, self.weights, arrays[0], np.float32)

    def to_host(self, result: np.ndarray) -> list[np.ndarray]:
        return [result]


class NumpyGpt2:
    """GPT-2 (``input_ids [B, T]`` -> last hidden state, or logits with the LM head) in float32
    numpy, on the weights of the torch model ``build`` makes (its ``Conv1D`` weights are
    already ``[in, out]``); causal attention, tanh GELU, the final layer norm."""

    def __init__(self, build: Callable[[], Any], threads: int) -> None:
        threadpool_limits(limits=threads)  # stays in force in this (worker) process
        inner = build().model  # hf_models' token wrapper around the Hugging Face model
        self.lm_head = hasattr(inner, "lm_head")
        body = inner.transformer if self.lm_head else inner
        config = body.config
        if config.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"numpy GPT-2: activation {config.activation_function} not written")
        self.layers, self.heads, self.eps = config.n_layer, config.n_head, config.layer_norm_epsilon
        self.w = {k: v.detach().float().numpy().copy() for k, v in body.state_dict().items()}
        self.unembed = self.w["wte.weight"].T.copy() if self.lm_head else None  # tied weights

    def prepare(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array(inputs[0], dtype=np.int64, copy=True)]

    def invoke(self, arrays: list[np.ndarray]) -> np.ndarray:
        w, ids = self.w, arrays[0]
        batch, seq = ids.shape
        h = w["wte.weight"][ids] + w["wpe.weight"][:seq]
        hidden = h.shape[-1]
        head_dim = hidden // self.heads
        causal = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)
        scale = np.float32(1 / math.sqrt(head_dim))
        for layer in range(self.layers):
            p = f"h.{layer}."
            a = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
            qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = qkv.reshape(batch, seq, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
            probs = softmax((q @ k.swapaxes(-1, -2)) * scale + causal)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
            h = h + context @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            m = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
            inner = gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], "tanh")
            h = h + inner @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        h = layer_norm(h, w["ln_f.weight"], w["ln_f.bias"], self.eps)
        return h if self.unembed is None else h @ self.unembed

    def to_host(self, result: np.ndarray) -> list[np.ndarray]:
        return [result]


def numpy_variant(
    config: EncoderConfig | None, source: TorchSource | None, threads: int
) -> HostModel | str:
    """The numpy peer of a generated encoder (``config``) or a GPT-2 (``source``), else one
    line saying why there is none."""
    if config is not None:
        return HostModel(NUMPY, functools.partial(NumpyEncoder, config, threads))
    if source is not None and source.family == "gpt2":
        return HostModel(NUMPY, functools.partial(NumpyGpt2, source.build, threads))
    what = source.name if source is not None else "this module"
    return f"no numpy model of {what} (there is one for a generated encoder and for GPT-2)"
