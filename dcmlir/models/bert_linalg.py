"""The encoder as linalg-on-tensors MLIR text, one op per line with fresh SSA names.

``linalg.matmul`` for the dense layers, ``linalg.batch_matmul`` for attention,
``linalg.softmax``, and elementwise ``linalg.generic``s around them. ``T`` is dynamic:
``util.assume.int`` promises its range to IREE and the passes, and each contraction
carries it as ``dcmlir.dim_ranges`` too, so ``dcmlir workloads`` lists it without
``--dims``. The weights are ``dense_resource`` blobs or ``util.global``s bound to
parameters (see :mod:`dcmlir.models.bert`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from dcmlir.models.bert import (
    LAYER_WEIGHTS,
    PARAMETER_SCOPE,
    WEIGHT_LAYOUTS,
    WEIGHT_MODES,
    EncoderConfig,
    GeneratedModel,
    make_weights,
    stored_weights,
    weight_shapes,
)

__all__ = ["generate_encoder"]


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
    weights = stored_weights(weights, layout)
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
        x = emitter.layer(x, {n: names[prefix + n] for n in LAYER_WEIGHTS})

    yield config.header(f"{mode}, {layout}", "generate-bert")
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

    ``values`` overrides the seeded weights (same names and shapes as
    :func:`~dcmlir.models.bert.weight_shapes`); ``weight_layout`` ``out_in`` stores dense
    weights as torch does (see :data:`~dcmlir.models.bert.WEIGHT_LAYOUTS`).
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
