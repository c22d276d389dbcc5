"""Two decoders dcmlir has no built-in for, as a user brings them: ``package.module:factory``.

Held-out checks of the factory path (``dcmlir import-torch --model``), the tuner and
``run-model``'s peers on architectures no dcmlir code was written or tuned for:

- ``qwen2``: ``transformers.Qwen2ForCausalLM``, 2 layers at Qwen2-0.5B's widths (hidden
  896, 14 heads of 64 with 2 K/V heads, SwiGLU FFN 4864, biased Q/K/V), vocabulary cut
  to 8000, tied LM head: logits ``[1, T, 8000]``;
- ``gpt_neox``: ``transformers.GPTNeoXForCausalLM``, 2 layers, hidden 512, 8 heads,
  FFN 2048, rotary on a quarter of each head, parallel attention and MLP, vocabulary
  8000: logits ``[1, T, 8000]``.

Seeded by the command (``--seed``), random weights, token ids ``input_ids [1, T]``. The
whole comparison (import, tune, every peer)::

    python benchmarks/model_benchmark.py --models factory_models:qwen2,factory_models:gpt_neox \
        --budget 200 --results docs/results/factory_decoders --no-docs

or by hand, in ``benchmarks/`` (the factory's module is found in the current directory)::

    dcmlir import-torch --model factory_models:qwen2 --seq 1:128 -o /tmp/q/qwen2.mlir

The same model as an ONNX file (run-model's own export, ``T`` dynamic in 1..128), for
``dcmlir import-onnx``::

    python benchmarks/factory_models.py qwen2 --onnx /tmp/q/qwen2.onnx
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np
import torch
import transformers  # type: ignore[import-untyped]

from dcmlir.bench.model_peers import export_onnx
from dcmlir.models.hf_models import TorchSource

VOCAB = 8000


class TokenLogits(torch.nn.Module):
    """``input_ids [1, T]`` -> logits ``[1, T, V]`` (no KV cache)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=input_ids, use_cache=False).logits


def _made(model: torch.nn.Module) -> tuple[torch.nn.Module, tuple[torch.Tensor], list[dict]]:
    ids = torch.zeros((1, 9), dtype=torch.int64)
    return TokenLogits(model.eval()).eval(), (ids,), [{1: "seq"}]


_SHARED = {  # both: 2 layers, the same vocabulary, SDPA attention
    "num_hidden_layers": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 2048,
    "attn_implementation": "sdpa",
}


def qwen2() -> tuple[torch.nn.Module, tuple[torch.Tensor], list[dict]]:
    widths = {"hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2}
    config = transformers.Qwen2Config(
        **widths, intermediate_size=4864, tie_word_embeddings=True, **_SHARED
    )
    return _made(transformers.Qwen2ForCausalLM(config))


def gpt_neox() -> tuple[torch.nn.Module, tuple[torch.Tensor], list[dict]]:
    widths = {"hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048}
    config = transformers.GPTNeoXConfig(
        **widths, rotary_pct=0.25, use_parallel_residual=True, **_SHARED
    )
    return _made(transformers.GPTNeoXForCausalLM(config))


def seeded(name: str, seed: int) -> torch.nn.Module:
    """The factory's module after ``torch.manual_seed(seed)``: the weights import-torch
    --model --seed imports."""
    torch.manual_seed(seed)
    return globals()[name]()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description="export a factory's model to ONNX")
    parser.add_argument("model", choices=("qwen2", "gpt_neox"))
    parser.add_argument("--onnx", required=True, help="the .onnx file to write")
    parser.add_argument("--seed", type=int, default=0, help="as import-torch --seed")
    args = parser.parse_args()
    build = functools.partial(seeded, args.model, args.seed)
    source = TorchSource(args.model, build, seq_axes=(1,), seq=(1, 128), vocab=VOCAB)
    note = export_onnx(source, [np.zeros((1, 9), dtype=np.int64)], Path(args.onnx))
    print(f"wrote {args.onnx}" + (f" ({note})" if note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
