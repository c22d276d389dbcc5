"""The six BERT-base workloads of the benchmarks (DietCode's evaluation set, batch 1).

Dense layers ``x[T, K] @ w[K, N]`` for the four weight shapes and the two
attention batch matmuls, T dynamic; each as a small module with one function.
"""

from __future__ import annotations

DENSE = {
    "dense_qkv": (768, 2304),
    "dense_out": (768, 768),
    "dense_ffn1": (768, 3072),
    "dense_ffn2": (3072, 768),
}


def dense_module(k: int, n: int, inputs: str = "f32") -> str:
    """``?xk @ kxn``, the operands of element type ``inputs``, the result f32."""
    return _projection(k, n, f"{k}x{n}", "linalg.matmul", inputs)


def transposed_module(k: int, n: int) -> str:
    """``?xk @ (nxk)^T``: a projection as torch's ``Linear`` writes it."""
    maps = (
        "affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, "
        "affine_map<(d0, d1, d2) -> (d0, d1)>"
    )
    return _projection(k, n, f"{n}x{k}", f"linalg.matmul indexing_maps = [{maps}]\n     ")


def _projection(k: int, n: int, weight: str, matmul: str, inputs: str = "f32") -> str:
    """``?xk`` activations times a ``weight``-shaped weight by ``matmul`` (the op's name and
    its indexing maps, where not the plain ones), both of element type ``inputs``, into f32."""
    x, w = f"tensor<?x{k}x{inputs}>", f"tensor<{weight}x{inputs}>"
    return f"""func.func @main(%x: {x}, %w: {w}) -> tensor<?x{n}xf32> {{
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : {x}
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x{n}xf32>) -> tensor<?x{n}xf32>
  %r = {matmul} ins(%x, %w : {x}, {w}) outs(%init : tensor<?x{n}xf32>) -> tensor<?x{n}xf32>
  return %r : tensor<?x{n}xf32>
}}
"""


KEY_LENGTH_FREE = "tensor.empty(%t, %s)"
"""The scores' output sized by the query length ``%t`` and the key length ``%s``, apart."""
KEY_LENGTH_TIED = "tensor.empty(%t, %t)"


def scores_module(heads: int, head_dim: int) -> str:
    """Attention scores, ``Q[heads, T, head_dim] @ K^T[heads, head_dim, T']``: T and T' are
    two dynamic dims of their own (see :func:`key_length_tied` for T' = T)."""
    h, d = heads, head_dim
    return f"""func.func @main(%q: tensor<{h}x?x{d}xf32>, %k: tensor<{h}x{d}x?xf32>) -> tensor<{h}x?x?xf32> {{
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c1 : tensor<{h}x?x{d}xf32>
  %s = tensor.dim %k, %c2 : tensor<{h}x{d}x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = {KEY_LENGTH_FREE} : tensor<{h}x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<{h}x?x?xf32>) -> tensor<{h}x?x?xf32>
  %r = linalg.batch_matmul ins(%q, %k : tensor<{h}x?x{d}xf32>, tensor<{h}x{d}x?xf32>) outs(%init : tensor<{h}x?x?xf32>) -> tensor<{h}x?x?xf32>
  return %r : tensor<{h}x?x?xf32>
}}
"""


def key_length_tied(text: str) -> str:
    """An attention-scores module of :func:`scores_module` whose key length is its query
    length, said in the IR (``tensor.empty(%t, %t)``), as in a transformer's self-attention:
    dcmlir then tunes the diagonal T' = T instead of the T x T' grid. Other modules (no
    scores output to tie) are returned as they are."""
    return text.replace(KEY_LENGTH_FREE, KEY_LENGTH_TIED)


# 12 x T x 64 x T: scores = Q[12, T, 64] @ K^T[12, 64, T]
SCORES = scores_module(12, 64)


def context_module(heads: int, head_dim: int) -> str:
    """Attention context, ``P[heads, T, T] @ V[heads, T, head_dim]``."""
    h, d = heads, head_dim
    return f"""func.func @main(%p: tensor<{h}x?x?xf32>, %v: tensor<{h}x?x{d}xf32>) -> tensor<{h}x?x{d}xf32> {{
  %c1 = arith.constant 1 : index
  %t = tensor.dim %p, %c1 : tensor<{h}x?x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<{h}x?x{d}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<{h}x?x{d}xf32>) -> tensor<{h}x?x{d}xf32>
  %r = linalg.batch_matmul ins(%p, %v : tensor<{h}x?x?xf32>, tensor<{h}x?x{d}xf32>) outs(%init : tensor<{h}x?x{d}xf32>) -> tensor<{h}x?x{d}xf32>
  return %r : tensor<{h}x?x{d}xf32>
}}
"""


# 12 x T x T x 64: context = P[12, T, T] @ V[12, T, 64]
CONTEXT = context_module(12, 64)

CONTEXT_TIE = "arg0.1=arg0.2"
"""``--dims`` item tying P's T' to its T: no value in the context module sizes both."""


def key_length_tie(text: str) -> list[str]:
    """The ``--dims`` items that tie an attention-context module of :func:`context_module`'s
    key length to its query length (its probabilities ``P[h, T, T']`` are an argument, so
    the IR cannot say T' = T); none for other modules."""
    return [CONTEXT_TIE] if text.startswith("func.func @main(%p: ") else []


def workloads() -> dict[str, str]:
    """name -> module text, in the order the benchmark reports them."""
    found = {name: dense_module(k, n) for name, (k, n) in DENSE.items()}
    found["attention_scores"] = SCORES
    found["attention_context"] = CONTEXT
    return found
