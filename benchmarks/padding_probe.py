"""Probe: does padding a dynamic extent up to a tile multiple (DietCode's padding) pay on IREE?

DietCode's micro-kernels run whole tiles: the shape is padded to the tile. In IREE the
padding of an argument is a ``tensor.pad`` before the op and a ``tensor.extract_slice``
after it, and IREE 3.13 makes each a copy dispatch of its own (``slow_memcpy``; fusing
the pad into the op, ``--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops``,
fails to build). This times, side by side in one process, interleaved per T, one thread:

- ``default``: IREE's default, dynamic; ``data-tiling``: ``--iree-opt-data-tiling``;
- ``default-pad<P>``: the inputs zero-padded to a multiple of P on every dynamic extent, the
  op at the padded shape, the result sliced back (P = 8: the default's vector tile on
  AVX2; 64: its distribution tile);
- ``kernel``: one candidate of dcmlir's space, peeled remainders (``--kernel``), and
  ``kernel-pad8``: the same kernel on inputs padded as above.

Every output is checked against numpy. Ratios are over IREE's default (above 1: faster).
The docs' tables (``docs/results/padding_probe_zen3_scores.md``, ``..._context.md``) say
the command that wrote them, e.g.

    python benchmarks/padding_probe.py --workload scores --rounds 15 --out FILE.md
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bert_workloads import CONTEXT, SCORES

from dcmlir.build.compiler import compile_module
from dcmlir.driver.loading import load_model
from dcmlir.ir.iree import load_function
from dcmlir.measure.timing import Timer, check_outputs, interleaved, random_inputs
from dcmlir.space.kinds import candidate_from_key
from dcmlir.target import CpuTarget

DATA_TILING = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
T_VALUES = (1, 5, 13, 17, 31, 33, 48, 61, 63, 64, 65, 77, 89, 100, 112, 127, 128)
RTOL = 1e-5  # of the output's largest magnitude: float32 sums of 64 products

_PAD = """  %{name}_p = tensor.pad %{name} low[0, 0, 0] high[{high}] {{
  ^bb0(%i0: index, %i1: index, %i2: index):
    tensor.yield %zero : f32
  }} : {ty} to {ty}
"""
_ROUND = "affine.apply affine_map<()[s0] -> ((s0 ceildiv {p}) * {p})>()[{v}]"


@dataclass(frozen=True)
class PaddedForm:
    """What differs between the two workloads' padded modules: operand names and types,
    where T' is read, each operand's padding and the result's padded and real extents."""

    names: tuple[str, str]
    types: tuple[str, str, str]  # the two operands', the result's
    shapes: tuple[str, str]  # the operands' shapes at T = T' = "t"
    second_extent: str  # ``tensor.dim`` operand and index of T'
    highs: tuple[str, str]
    padded: str  # the padded result's dynamic extents
    kept: str  # the real result's extents after the batch


FORMS = {
    "scores": PaddedForm(  # Q[12, T, 64] @ K^T[12, 64, T']
        ("q", "k"),
        ("tensor<12x?x64xf32>", "tensor<12x64x?xf32>", "tensor<12x?x?xf32>"),
        ("12,t,64", "12,64,t"),
        "%k, %c2 : tensor<12x64x?xf32>",
        ("0, %ht, 0", "0, 0, %hs"),
        "%tp, %sp",
        "%t, %s",
    ),
    "context": PaddedForm(  # P[12, T, T'] @ V[12, T', 64]
        ("p", "v"),
        ("tensor<12x?x?xf32>", "tensor<12x?x64xf32>", "tensor<12x?x64xf32>"),
        ("12,t,t", "12,t,64"),
        "%p, %c2 : tensor<12x?x?xf32>",
        ("0, %ht, %hs", "0, %hs, 0"),
        "%tp",
        "%t, 64",
    ),
}
PLAIN = {"scores": SCORES, "context": CONTEXT}


def render(workload: str, pad: int, attributes: str) -> str:
    """The workload's module with ``attributes`` on its op; its inputs padded to a multiple
    of ``pad`` on every dynamic extent and the result sliced back, when ``pad`` is above 1."""
    if pad <= 1:
        return _with_attributes(PLAIN[workload], attributes)
    form = FORMS[workload]
    (a, b), (ta, tb, out) = form.names, form.types
    pads = "".join(
        _PAD.format(name=name, high=high, ty=ty)
        for name, high, ty in zip(form.names, form.highs, (ta, tb), strict=True)
    )
    return f"""func.func @main(%{a}: {ta}, %{b}: {tb}) -> {out} {{
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %{a}, %c1 : {ta}
  %s = tensor.dim {form.second_extent}
  %tp = {_ROUND.format(p=pad, v="%t")}
  %sp = {_ROUND.format(p=pad, v="%s")}
  %ht = arith.subi %tp, %t : index
  %hs = arith.subi %sp, %s : index
{pads}  %e = tensor.empty({form.padded}) : {out}
  %init = linalg.fill ins(%zero : f32) outs(%e : {out}) -> {out}
  %r = linalg.batch_matmul ins(%{a}_p, %{b}_p : {ta}, {tb})
         outs(%init : {out}) {attributes} -> {out}
  %o = tensor.extract_slice %r[0, 0, 0] [12, {form.kept}] [1, 1, 1] : {out} to {out}
  return %o : {out}
}}
"""


def _with_attributes(text: str, attributes: str) -> str:
    """The op of ``text`` with ``attributes`` (a ``{...}`` dictionary) before its result type."""
    if not attributes:
        return text
    head, tail = text.split("outs(%init : ", 1)
    operand, rest = tail.split(") -> ", 1)
    return f"{head}outs(%init : {operand}) {attributes} -> {rest}"


def inputs(workload: str, t: int) -> list[np.ndarray]:
    """One input set of the workload at T = T' = ``t``."""
    shapes = [[t if d == "t" else int(d) for d in s.split(",")] for s in FORMS[workload].shapes]
    return random_inputs(shapes, sets=1, seed=t)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("scores", "context"), default="scores")
    parser.add_argument("--kernel", default="cpu:wg64x64:v8x8:k4", help="a candidate key")
    parser.add_argument("--t", default=",".join(map(str, T_VALUES)))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per sample")
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "input.mlir"
        source.write_text(render(args.workload, 1, ""))
        model = load_model(str(source), ["1:128"], io.StringIO())
    kernel = candidate_from_key(args.kernel).op_attributes(model.workloads[0])
    texts = {
        "default": (render(args.workload, 1, ""), ()),
        "data-tiling": (render(args.workload, 1, ""), DATA_TILING),
        "default-pad8": (render(args.workload, 8, ""), ()),
        "default-pad64": (render(args.workload, 64, ""), ()),
        "kernel": (render(args.workload, 1, kernel), ()),
        "kernel-pad8": (render(args.workload, 8, kernel), ()),
    }
    functions = {
        name: load_function(compile_module(text, "llvm-cpu", flags), "main")
        for name, (text, flags) in texts.items()
    }
    names = list(functions)
    timer = Timer(min_time=args.min_time)
    lines = [
        f"`{args.workload}` (12 heads of 64), T x T; kernel `{args.kernel}`; us per call "
        f"(median of {args.rounds} interleaved rounds), in brackets IREE's default's time over "
        f"it. Host: {CpuTarget().describe()}.",
        "",
        "| T | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    print("\n".join(lines), flush=True)
    for t in (int(v) for v in args.t.split(",")):
        arrays = inputs(args.workload, t)
        expected = [arrays[0] @ arrays[1]]
        prepared = {}
        for name, function in functions.items():
            try:
                check_outputs(function(*arrays), expected, RTOL)
            except ValueError as error:
                raise SystemExit(f"error: {name} at T = {t}: {error}") from None
            prepared[name] = function.prepare(arrays)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for name in interleaved(names, args.rounds, lambda _: True):
            samples[name].append(timer.sample(functions[name].invoke, [prepared[name]])[0])
        median = {name: statistics.median(v) * 1e6 for name, v in samples.items()}
        cells = [f"{median[n]:.1f} ({median['default'] / median[n]:.2f}x)" for n in names]
        line = f"| {t} | " + " | ".join(cells) + " |"
        lines.append(line)
        print(line, flush=True)
    if args.out:
        command = " ".join(["python", "benchmarks/padding_probe.py", *sys.argv[1:]])
        args.out.write_text("\n".join([f"Reproduce: `{command}`", "", *lines]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
