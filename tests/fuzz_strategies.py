"""Random contraction modules, micro-kernels and plans, and the properties they must keep.

Shared by ``tests/test_fuzz.py`` (a short, reproducible run in CI) and
``benchmarks/fuzz.py`` (the long run). A :class:`Contraction` is generated
from its own description (op form, loop order, operand layouts, which loops
are dynamic, extents, element types) and the checks compare dcmlir's output
with that description, never with dcmlir's own reading of the module: the
expected tile types, the cascade's choice (walked in the emitted IR, against
the plan's tree) and the numbers (an einsum over the description's layouts).

Each ``check_*`` function is one property; it counts its cases in
:data:`COUNTS` so both runners can say how many ran.
"""

from __future__ import annotations

import io
import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dispatch_interpreter import walk_cascade
from hypothesis import strategies as st

from dcmlir.build.compiler import BuildCache, build
from dcmlir.build.routes import ConfigRoute
from dcmlir.codegen.kernel import input_shapes, kernel_module_text, reference
from dcmlir.codegen.schedule import TARGET_ATTR
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.iree import load_function, load_functions
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.ir.pass_base import PassContext
from dcmlir.passes.emit_dispatch import COMPILATION_INFO, FALLBACK, KERNEL_ATTR, emit_dispatch
from dcmlir.passes.microkernel_tile import MicrokernelTilePass
from dcmlir.space import (
    Candidate,
    CpuCandidate,
    DefaultCandidate,
    candidate_from_key,
    cpu_space,
)
from dcmlir.target import CpuTarget
from dcmlir.workload import NotAWorkload, Workload, workloads, write_ranges

COUNTS: Counter[str] = Counter()
"""Cases run per property (and per sub-check, e.g. shapes walked), in this process."""

FUNCTION = "fuzz"
ROLES = "bmnk"

# The lit tests' machine: plans are made for it (emit-dispatch does not look at the target).
PLAN_TARGET = CpuTarget(
    vector_bits=512,
    vector_registers=32,
    threads=1,
    l1d_bytes=48 * 1024,
    l2_bytes=2 * 1024 * 1024,
    l3_bytes=32 * 1024 * 1024,
    model="dcmlir fuzz machine",
)

# --- the contraction ---------------------------------------------------------------------------

NAMED_FORMS: dict[str, tuple[str, str, tuple[str, str, str]]] = {
    # form -> (op, loop roles in loop order, operand layouts a, b, out)
    "matmul": ("linalg.matmul", "mnk", ("mk", "kn", "mn")),
    "matmul_transpose_b": ("linalg.matmul", "mnk", ("mk", "nk", "mn")),
    "batch_matmul": ("linalg.batch_matmul", "bmnk", ("bmk", "bkn", "bmn")),
    "batch_matmul_transpose_b": ("linalg.batch_matmul", "bmnk", ("bmk", "bnk", "bmn")),
}
DEFAULT_LAYOUTS = {
    "linalg.matmul": ("mk", "kn", "mn"),
    "linalg.batch_matmul": ("bmk", "bkn", "bmn"),
}
FORMS = (*NAMED_FORMS, "generic")

ELEMENT_TYPES: tuple[tuple[str, str, str], ...] = (
    ("f32", "f32", "f32"),
    ("f16", "f16", "f16"),
    ("f16", "f16", "f32"),
    ("bf16", "bf16", "f32"),
    ("bf16", "bf16", "bf16"),
)
NUMPY = {"f32": np.float32, "f16": np.float16}
COMPILED_TYPES = (("f32", "f32", "f32"), ("f16", "f16", "f16"), ("f16", "f16", "f32"))
"""What the compiled property runs: types numpy holds (IREE's llvm-cpu builds all three)."""


@dataclass(frozen=True)
class Contraction:
    """One contraction op in a function ``@fuzz(%a, %b) -> %c`` that zero-fills its output.

    ``loops``: the role of each loop d0, d1, ... in order; ``layouts``: the roles
    of each operand's dims (a, b, out); ``extents``: every role's static extent
    (a dynamic role's is unused); ``loose``: (operand, role) pairs of a static
    role that the operand's type still writes ``?``; ``ranges``: every dynamic
    role's (lo, hi); ``annotate``: the ranges are written on the op
    (``dcmlir.dim_ranges``) rather than given to the plan; ``consumers``: the
    elementwise chain after the op that IREE fuses into its dispatch
    (:data:`CONSUMERS`), which ``dcmlir-emit-dispatch`` moves into every branch;
    ``copies``: how many identical ops (one workload) the function computes, each
    with its own consumers, returning every result; ``preset``: the key of a
    candidate whose ``compilation_info`` the ops carry already (the dispatch must
    drop it in the fallback and replace it in the kernels).
    """

    form: str
    op_name: str
    loops: str
    layouts: tuple[str, str, str]
    extents: dict[str, int]
    dynamic: frozenset[str]
    types: tuple[str, str, str]
    ranges: dict[str, tuple[int, int]]
    loose: frozenset[tuple[int, str]] = frozenset()
    explicit_maps: bool = False
    annotate: bool = False
    consumers: tuple[str, ...] = ()
    copies: int = 1
    preset: str | None = None

    # -- what it is ------------------------------------------------------------------------
    def loop(self, role: str) -> int:
        return self.loops.index(role)

    @property
    def dynamic_loops(self) -> tuple[int, ...]:
        """The dynamic loops, ascending (the order of a plan's shapes)."""
        return tuple(sorted(self.loop(role) for role in self.dynamic))

    def role_ranges(self) -> dict[int, tuple[int, int]]:
        return {self.loop(role): self.ranges[role] for role in self.dynamic}

    def values(self, dims: dict[int, int]) -> dict[str, int]:
        """Every role's extent for one value of the dynamic loops ``{loop: extent}``."""
        return {
            role: dims[self.loop(role)] if role in self.dynamic else self.extents[role]
            for role in self.loops
        }

    def shapes(self, dims: dict[int, int]) -> list[tuple[int, ...]]:
        """The shapes of a, b and the output for one value of the dynamic loops."""
        values = self.values(dims)
        return [tuple(values[role] for role in layout) for layout in self.layouts]

    def einsum(self) -> str:
        a, b, out = self.layouts
        return f"{a},{b}->{out}"

    def result_layout(self) -> str:
        """The roles of the function result's dims (a transposing consumer swaps the last two)."""
        layout = self.layouts[2]
        for consumer in self.consumers:
            if consumer == "transpose":
                layout = layout[:-2] + layout[-1] + layout[-2]
        return layout

    def bias_role(self) -> str | None:
        """The role the bias runs along (the last dim where the bias is added), if any."""
        layout = self.layouts[2]
        for consumer in self.consumers:
            if consumer == "bias":
                return layout[-1]
            if consumer == "transpose":
                layout = layout[:-2] + layout[-1] + layout[-2]
        return None

    def arg_shapes(self, dims: dict[int, int]) -> list[tuple[int, ...]]:
        """The function's argument shapes: a, b (and the bias)."""
        shapes = self.shapes(dims)[:2]
        role = self.bias_role()
        if role is not None:
            shapes.append((self.values(dims)[role],))
        return shapes

    def magnitudes(self, scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """What the result's roundings scale with: ``sum |a b|`` through the consumers, a
        bias adding its magnitude (each consumer rounds once more at most: relu is exact,
        a scale by 0.5 and a transpose do not grow an error)."""
        for consumer in self.consumers:
            if consumer == "bias":
                scale = scale + np.abs(bias)
            elif consumer == "transpose":
                scale = np.swapaxes(scale, -1, -2)
        return scale

    def apply_consumers(self, value: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """The consumers in numpy (float64), in order."""
        for consumer in self.consumers:
            if consumer == "bias":
                value = value + bias
            elif consumer == "relu":
                value = np.maximum(value, 0.0)
            elif consumer == "scale":
                value = value * 0.5
            else:
                value = np.swapaxes(value, -1, -2)
        return value

    def describe(self) -> str:
        dyn = ",".join(f"{r}={self.ranges[r][0]}:{self.ranges[r][1]}" for r in sorted(self.dynamic))
        static = ",".join(f"{r}={self.extents[r]}" for r in self.loops if r not in self.dynamic)
        return (
            f"{self.form} loops={self.loops} layouts={','.join(self.layouts)} "
            f"types={','.join(self.types)} dynamic[{dyn}] static[{static}]"
            + (f" consumers={','.join(self.consumers)}" if self.consumers else "")
            + (f" copies={self.copies}" if self.copies > 1 else "")
            + (f" preset={self.preset}" if self.preset else "")
        )

    # -- the module ------------------------------------------------------------------------
    def tensor_type(self, operand: int) -> str:
        dims = []
        for role in self.layouts[operand]:
            dynamic = role in self.dynamic or (operand, role) in self.loose
            dims.append("?" if dynamic else str(self.extents[role]))
        return f"tensor<{'x'.join(dims)}x{self.types[operand]}>"

    def maps(self) -> list[str]:
        loops = ", ".join(f"d{i}" for i in range(len(self.loops)))
        return [
            f"affine_map<({loops}) -> ({', '.join(f'd{self.loop(r)}' for r in layout)})>"
            for layout in self.layouts
        ]

    def op_text(self) -> str:
        ta, tb, tc = (self.tensor_type(i) for i in range(3))
        operands = f"ins(%a, %b : {ta}, {tb}) outs(%init : {tc})"
        maps = ", ".join(self.maps())
        if self.op_name != "linalg.generic":
            if self.explicit_maps or self.layouts != DEFAULT_LAYOUTS[self.op_name]:
                return f"{self.op_name} indexing_maps = [{maps}] {operands} -> {tc}"
            return f"{self.op_name} {operands} -> {tc}"
        iterators = ", ".join('"reduction"' if r == "k" else '"parallel"' for r in self.loops)
        lhs, rhs, out = self.types
        body = [f"^bb0(%x: {lhs}, %y: {rhs}, %acc: {out}):"]
        x, y = "%x", "%y"
        if lhs != out:
            body.append(f"  %xe = arith.extf %x : {lhs} to {out}")
            x = "%xe"
        if rhs != out:
            body.append(f"  %ye = arith.extf %y : {rhs} to {out}")
            y = "%ye"
        body += [
            f"  %p = arith.mulf {x}, {y} : {out}",
            f"  %s = arith.addf %acc, %p : {out}",
            f"  linalg.yield %s : {out}",
        ]
        region = "\n    ".join(body)
        return (
            f"linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iterators}]}} "
            f"{operands} {{\n    {region}\n  }} -> {tc}"
        )

    def layout_type(self, layout: str) -> str:
        dims = ["?" if role in self.dynamic else str(self.extents[role]) for role in layout]
        return f"tensor<{'x'.join(dims)}x{self.types[2]}>"

    def text(self) -> str:
        """The module: the output is sized from the inputs' dims and zero-filled."""
        ta, tb, tc = (self.tensor_type(i) for i in range(3))
        out = self.types[2]
        args = [f"%a: {ta}", f"%b: {tb}"]
        role = self.bias_role()
        if role is not None:
            args.append(f"%bias: {self.layout_type(role)}")
        result_type = self.layout_type(self.result_layout())
        results = ", ".join([result_type] * self.copies)
        lines = [f"func.func @{FUNCTION}({', '.join(args)}) -> ({results}) {{"]
        size_of: dict[str, str] = {}
        for role in self.layouts[2]:
            if role not in self.dynamic:
                continue
            operand = 0 if role in self.layouts[0] else 1
            name = "%a" if operand == 0 else "%b"
            index = self.layouts[operand].index(role)
            lines.append(f"  %i{role} = arith.constant {index} : index")
            lines.append(f"  %n{role} = tensor.dim {name}, %i{role} : {(ta, tb)[operand]}")
            size_of[role] = f"%n{role}"

        def empty(layout: str) -> str:
            sizes = ", ".join(size_of[r] for r in layout if r in self.dynamic)
            return f"tensor.empty({sizes}) : {self.layout_type(layout)}"

        lines += [
            f"  %zero = arith.constant 0.0 : {out}",
            f"  %empty = {empty(self.layouts[2])}",
            f"  %init = linalg.fill ins(%zero : {out}) outs(%empty : {tc}) -> {tc}",
        ]
        returned = []
        for copy in range(self.copies):
            value, layout = f"%r{copy}", self.layouts[2]
            lines.append(f"  {value} = {self.op_text()}")
            for position, consumer in enumerate(self.consumers):
                name = f"%c{copy}_{position}"
                chain = self._consumer(consumer, name, value, layout, empty)
                lines += [f"  {line}" for line in chain]
                if consumer == "transpose":
                    layout = layout[:-2] + layout[-1] + layout[-2]
                value = name
            returned.append(value)
        lines += [f"  return {', '.join(returned)} : {results}", "}"]
        return "\n".join(lines) + "\n"

    def _consumer(
        self, kind: str, name: str, value: str, layout: str, empty: Callable[[str], str]
    ) -> list[str]:
        """One all-parallel generic reading ``value`` (of ``layout``) as its first input."""
        rank, out = len(layout), self.types[2]
        loops = ", ".join(f"d{i}" for i in range(rank))
        identity = f"affine_map<({loops}) -> ({loops})>"
        iterators = ", ".join(['"parallel"'] * rank)
        produced = layout[:-2] + layout[-1] + layout[-2] if kind == "transpose" else layout
        if kind == "transpose":
            swapped = [f"d{i}" for i in range(rank)]
            swapped[-2], swapped[-1] = swapped[-1], swapped[-2]
            maps = [f"affine_map<({loops}) -> ({', '.join(swapped)})>", identity]
            ins = f"ins({value} : {self.layout_type(layout)})"
            body = [f"^bb0(%x: {out}, %o: {out}):", f"  linalg.yield %x : {out}"]
        elif kind == "bias":
            maps = [identity, f"affine_map<({loops}) -> (d{rank - 1})>", identity]
            bias_type = self.layout_type(layout[-1])
            ins = f"ins({value}, %bias : {self.layout_type(layout)}, {bias_type})"
            body = [
                f"^bb0(%x: {out}, %y: {out}, %o: {out}):",
                f"  %s = arith.addf %x, %y : {out}",
                f"  linalg.yield %s : {out}",
            ]
        else:
            maps = [identity, identity]
            ins = f"ins({value} : {self.layout_type(layout)})"
            constant, op = ("0.0", "arith.maximumf") if kind == "relu" else ("0.5", "arith.mulf")
            body = [
                f"^bb0(%x: {out}, %o: {out}):",
                f"  %k = arith.constant {constant} : {out}",
                f"  %s = {op} %x, %k : {out}",
                f"  linalg.yield %s : {out}",
            ]
        produced_type = self.layout_type(produced)
        region = "\n    ".join(body)
        return [
            f"{name}_init = {empty(produced)}",
            f"{name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
            f"iterator_types = [{iterators}]}} {ins} outs({name}_init : {produced_type}) "
            f"{{\n    {region}\n  }} -> {produced_type}",
        ]

    def module(self) -> ir.Module:
        """The parsed module (in the active context): ranges and a preset config written on
        the ops if asked."""
        module = parse_module(self.text())
        for op, found in workloads(module.operation):
            if isinstance(found, NotAWorkload):
                continue
            if self.annotate:
                write_ranges(op, self.role_ranges())
            if self.preset:
                info = candidate_from_key(self.preset).compilation_info(found)
                if info is not None:
                    op.attributes[COMPILATION_INFO] = ir.Attribute.parse(info)
        return module


def contraction_op(module: ir.Module) -> ir.Operation:
    """The contraction: the first linalg op (its consumers come after it)."""
    return linalg_ops(module.operation)[0]


def linalg_ops(module: ir.Operation) -> list[ir.Operation]:
    """Every linalg op but fills (and their region terminators), in IR order."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("linalg.") and op.name not in ("linalg.fill", "linalg.yield"):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


# --- strategies ----------------------------------------------------------------------------------

extent_values = st.one_of(st.integers(1, 64), st.sampled_from([1, 2, 3, 7, 8, 16, 31, 32, 64]))


@st.composite
def ranges_of(draw: st.DrawFn, hi_max: int) -> tuple[int, int]:
    """``(lo, hi)`` with ``0 <= lo <= hi <= hi_max``; 0 and 1 as ``lo`` often."""
    lo = draw(st.one_of(st.sampled_from([0, 1, 1, 2]), st.integers(0, hi_max)))
    hi = draw(st.integers(lo, max(lo, hi_max)))
    return lo, hi


@st.composite
def contractions(
    draw: st.DrawFn,
    forms: Sequence[str] = FORMS,
    types: Sequence[tuple[str, str, str]] = ELEMENT_TYPES,
    range_max: int = 96,
    extent: st.SearchStrategy[int] = extent_values,
    reduction_last: bool = False,
    consumers: bool = False,
    copies: bool | None = None,
) -> Contraction:
    """A random contraction: form, layouts, dynamic loops (at least one), extents, ranges.

    ``reduction_last``: a ``linalg.generic`` keeps K as its last loop: IREE interchanges
    every generic to that order before it reads a ``compilation_info`` written for the
    original one (``test_fuzz.py::test_generic_with_k_before_a_parallel_loop_builds``).
    ``consumers``: draw a chain of fused consumers (a bias once at most), and a config the
    op carries already (what the dispatch properties exercise); ``copies``: draw copies
    of the op (default: with the consumers).
    """
    form = draw(st.sampled_from(list(forms)))
    if form in NAMED_FORMS:
        op_name, loops, layouts = NAMED_FORMS[form]
        explicit = draw(st.booleans())
    else:
        op_name, explicit = "linalg.generic", True
        roles = "bmnk" if draw(st.booleans()) else "mnk"
        if reduction_last:
            loops = "".join(draw(st.permutations(roles.replace("k", "")))) + "k"
        else:
            loops = "".join(draw(st.permutations(roles)))
        batch = "b" if "b" in roles else ""
        layouts = (
            "".join(draw(st.permutations(batch + "mk"))),
            "".join(draw(st.permutations(batch + "kn"))),
            "".join(draw(st.permutations(batch + "mn"))),
        )
    dynamic = frozenset(draw(st.sets(st.sampled_from(list(loops)), min_size=1)))
    extents = {role: draw(extent) for role in loops}
    ranges = {role: draw(ranges_of(range_max)) for role in sorted(dynamic)}
    # A static role may read '?' in an input, never in every operand that has it (that would
    # make the loop dynamic): a role of the output stays static there, K in one of the inputs.
    k_side = draw(st.integers(0, 1))
    loose_choices = [
        (operand, role)
        for operand in (0, 1)
        for role in layouts[operand]
        if role not in dynamic and (role in layouts[2] or operand == k_side)
    ]
    loose = (
        frozenset(draw(st.sets(st.sampled_from(loose_choices)))) if loose_choices else frozenset()
    )
    return Contraction(
        form=form,
        op_name=op_name,
        loops=loops,
        layouts=layouts,
        extents=extents,
        dynamic=dynamic,
        types=draw(st.sampled_from(list(types))),
        ranges=ranges,
        loose=loose if draw(st.integers(0, 3)) == 0 else frozenset(),
        explicit_maps=explicit,
        annotate=draw(st.booleans()),
        consumers=draw(consumer_chains) if consumers else (),
        copies=draw(st.sampled_from([1, 1, 1, 2, 3]))
        if (consumers if copies is None else copies)
        else 1,
        preset=draw(st.one_of(st.none(), st.sampled_from(PRESETS))) if consumers else None,
    )


PRESETS = ("default", "cpu:wg16x64:v4x16:k8", "cpu:wg8x128:c8x32:v1x16:k4")
"""Configs an op may carry before the dispatch (a user's, or an earlier tool's)."""


CONSUMERS = ("bias", "relu", "scale", "transpose")
consumer_chains = st.lists(st.sampled_from(CONSUMERS), max_size=3).map(
    lambda chain: tuple(c for i, c in enumerate(chain) if c != "bias" or "bias" not in chain[:i])
)


tile_sizes = st.one_of(
    st.lists(st.integers(1, 64), min_size=3, max_size=4),
    st.lists(st.sampled_from([1, 2, 4, 8, 16, 32]), min_size=3, max_size=4),
).map(tuple)


@st.composite
def cpu_candidates(draw: st.DrawFn) -> CpuCandidate:
    """Any structurally valid CPU candidate (a target's limits are not the passes' business)."""
    vector_m = draw(st.integers(1, 16))
    vector_n = draw(st.integers(1, 64))
    repeats_m, repeats_n = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    cache: tuple[int | None, int | None] = (None, None)
    if draw(st.booleans()):
        cache_m = vector_m * draw(st.sampled_from([d for d in range(1, 9) if repeats_m % d == 0]))
        cache_n = vector_n * draw(st.sampled_from([d for d in range(1, 9) if repeats_n % d == 0]))
        cache = (cache_m, cache_n)
    return CpuCandidate(
        vector_m * repeats_m,
        vector_n * repeats_n,
        vector_m,
        vector_n,
        draw(st.integers(1, 16)),
        *cache,
    )


def _unique(candidates: list[Candidate]) -> list[Candidate]:
    return list({c.key(): c for c in candidates}.values())


@dataclass(frozen=True)
class PlanSpec:
    """How to make a plan for a contraction: kernels, a selection pattern, a depth cap."""

    kernels: tuple[Candidate, ...]
    pattern: str  # noise | regions | single | volume
    seed: int
    max_depth: int | None
    sample: int = 256  # training shapes drawn when the range holds more

    def describe(self) -> str:
        keys = " ".join(k.key() for k in self.kernels)
        return f"kernels=[{keys}] pattern={self.pattern} seed={self.seed} depth={self.max_depth}"


@st.composite
def plan_specs(
    draw: st.DrawFn, pool: st.SearchStrategy[Candidate] | None = None, max_kernels: int = 6
) -> PlanSpec:
    pool = pool if pool is not None else st.one_of(st.just(DefaultCandidate()), cpu_candidates())
    kernels = _unique(draw(st.lists(pool, min_size=1, max_size=max_kernels)))
    return PlanSpec(
        kernels=tuple(kernels),
        pattern=draw(st.sampled_from(["noise", "regions", "single", "volume"])),
        seed=draw(st.integers(0, 2**32 - 1)),
        max_depth=draw(st.one_of(st.none(), st.integers(0, 4))),
    )


def host_space_candidates() -> st.SearchStrategy[Candidate]:
    """Candidates of this machine's space: what the tuner would put in a plan."""
    return st.sampled_from(cpu_space(CpuTarget()))


def compiled_contractions(range_max: int = 48) -> st.SearchStrategy[Contraction]:
    """What the compiled property builds: types numpy holds, extents and ranges kept small
    (a case runs several shapes), fused consumers after the op."""
    return contractions(
        types=COMPILED_TYPES,
        range_max=range_max,
        extent=st.integers(1, range_max),
        consumers=True,
    )


def compiled_plans(max_kernels: int = 4) -> st.SearchStrategy[PlanSpec]:
    """Plans of up to ``max_kernels`` candidates of this machine's space (IREE's default
    among them or not)."""
    return plan_specs(pool=host_space_candidates(), max_kernels=max_kernels)


# --- making a plan -------------------------------------------------------------------------------


def training_shapes(
    ranges: Sequence[tuple[int, int]], rng: random.Random, sample: int
) -> list[tuple[int, ...]]:
    """Every shape of the range, or ``sample`` of them (the corners always) when it is large."""
    total = math.prod(hi - lo + 1 for lo, hi in ranges)
    if total <= sample:
        return list(itertools.product(*(range(lo, hi + 1) for lo, hi in ranges)))
    shapes = set(itertools.product(*ranges))  # the corners
    while len(shapes) < sample:
        shapes.add(tuple(rng.randint(lo, hi) for lo, hi in ranges))
    return sorted(shapes)


def _choices(
    shapes: list[tuple[int, ...]], n_kernels: int, pattern: str, rng: random.Random
) -> list[int]:
    if pattern == "single":
        kernel = rng.randrange(n_kernels)
        return [kernel] * len(shapes)
    if pattern == "noise":
        return [rng.randrange(n_kernels) for _ in shapes]
    if pattern == "volume":
        cuts = sorted(rng.sample(range(0, 4096), 3))
        labels = [rng.randrange(n_kernels) for _ in range(len(cuts) + 1)]
        return [labels[sum(math.prod(s) > c for c in cuts)] for s in shapes]
    width = len(shapes[0])
    highest = [max(s[i] for s in shapes) + 1 for i in range(width)]
    cuts = [
        sorted(rng.sample(range(0, highest[i] + 1), min(3, highest[i] + 1))) for i in range(width)
    ]
    regions: dict[tuple[int, ...], int] = {}
    return [
        regions.setdefault(
            tuple(sum(v > c for c in cuts[i]) for i, v in enumerate(s)), rng.randrange(n_kernels)
        )
        for s in shapes
    ]


def make_plan(workload: Workload, case: Contraction, spec: PlanSpec) -> WorkloadPlan:
    """The plan :func:`WorkloadPlan.build` fits for a random selection over ``case``'s range."""
    rng = random.Random(spec.seed)
    loops = [d.index for d in workload.dynamic_dims]
    ranges = case.role_ranges()
    shapes = training_shapes([ranges[loop] for loop in loops], rng, spec.sample)
    choices = _choices(shapes, len(spec.kernels), spec.pattern, rng)
    costs = {s: [rng.uniform(1e-6, 1e-3) for _ in spec.kernels] for s in shapes}
    return WorkloadPlan.build(
        workload,
        list(spec.kernels),
        dict(zip(shapes, choices, strict=True)),
        costs,
        max_depth=spec.max_depth,
        ranges=None if case.annotate else ranges,
    )


# --- property 0: the workload is what the module says ------------------------------------------


def analysed_all(module: ir.Module) -> list[tuple[ir.Operation, Workload]]:
    """Every workload of a case's module (its consumers are dynamic ops, not workloads)."""
    found = list(workloads(module.operation, "fuzz.mlir"))
    tuned = [(op, w) for op, w in found if not isinstance(w, NotAWorkload)]
    reasons = [str(w) for _, w in found if isinstance(w, NotAWorkload)]
    assert tuned, f"no workload; not workloads: {reasons}"
    return tuned


def analysed(module: ir.Module) -> tuple[ir.Operation, Workload]:
    """The workload of a case's module: its copies are one workload (one key)."""
    tuned = analysed_all(module)
    keys = {w.key for _, w in tuned}
    assert len(keys) == 1, f"identical ops with different keys: {sorted(keys)}"
    return tuned[0]


def check_workload(case: Contraction, seed: int = 0) -> None:
    """Roles, extents, dynamic loops, ranges and the numpy reference follow the description."""
    COUNTS["workload"] += 1
    with ir.Context():
        module = case.module()
        assert len(analysed_all(module)) == case.copies
        _, workload = analysed(module)
    assert [d.role for d in workload.dims] == list(case.loops)
    for dim in workload.dims:
        role = case.loops[dim.index]
        if role in case.dynamic:
            assert dim.extent is None, (role, dim)
            assert dim.range == (case.ranges[role] if case.annotate else None), dim
            layout = case.layouts[dim.source.operand]
            assert layout[dim.source.dim] == role, dim.source
        else:
            assert dim.extent == case.extents[role], (role, dim)
    assert workload.element_types == case.types
    rng = np.random.default_rng(seed)
    dims = {loop: rng.integers(0, 5) for loop in case.dynamic_loops}
    a_shape, b_shape, out_shape = case.shapes(dims)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    (got,) = reference(workload, [a, b])
    want = np.einsum(case.einsum(), a, b)
    assert got.shape == out_shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --- property 1: dcmlir-microkernel-tile ---------------------------------------------------------


def run_tile(module: ir.Module, sizes: Sequence[int]) -> DiagnosticEngine:
    engine = DiagnosticEngine("fuzz.mlir")
    MicrokernelTilePass(sizes=tuple(sizes)).apply(
        PassContext(engine, io.StringIO()), module.operation
    )
    return engine


def check_microkernel_tile(case: Contraction, sizes: Sequence[int]) -> None:
    """The pass succeeds, its output verifies and round-trips, each tile is static.

    Every micro-kernel op sits in an ``scf.forall`` (unless every parallel loop
    fits in one tile) and its operands have the micro-kernel's static shape:
    each operand dim is the size of its role (b is 1 with three sizes),
    whatever the extents (padded up) and layouts.
    """
    COUNTS["microkernel_tile"] += 1
    size_of = dict(zip("bmnk", (1, *sizes) if len(sizes) == 3 else tuple(sizes), strict=True))
    with ir.Context():
        module = case.module()
        engine = run_tile(module, sizes)
        assert module.operation.verify()
        text = str(module)
        assert TARGET_ATTR not in text
        reparsed = parse_module(text)
        assert reparsed.operation.verify()
        inner = linalg_ops(module.operation)
        assert inner, "no linalg op left"
        # One tile over every parallel loop: the one-step scf.forall is folded away.
        single_tile = all(
            role not in case.dynamic and case.extents[role] <= size_of[role]
            for role in case.loops
            if role != "k"
        )
        for op in inner:
            if not single_tile:
                assert _inside(op, "scf.forall"), f"{op.name} is outside the micro-kernel loop"
            got = [str(v.type) for v in op.operands]
            want = [
                f"tensor<{'x'.join(str(size_of[r]) for r in layout)}x{t}>"
                for layout, t in zip(case.layouts, case.types, strict=True)
            ]
            assert got == want, f"tile operand types {got}, expected {want}"
    messages = [d.message for d in engine.diagnostics]
    assert len(inner) == case.copies, f"{len(inner)} micro-kernel ops for {case.copies} copies"
    assert len(messages) == case.copies, messages
    assert all(m.startswith("micro-kernel ") for m in messages), messages


def _inside(op: ir.Operation, name: str) -> bool:
    parent = op.parent
    while parent is not None:
        if parent.operation.name == name:
            return True
        parent = parent.operation.parent
    return False


# --- property 2: dcmlir-emit-dispatch --------------------------------------------------------------


@dataclass
class Dispatched:
    """A module after ``dcmlir-emit-dispatch``, with the plan it ran with."""

    case: Contraction
    plan: WorkloadPlan
    text: str
    probes: list[dict[int, int]] = field(default_factory=list)


def emit(case: Contraction, spec: PlanSpec) -> tuple[ir.Module, Workload, WorkloadPlan, int]:
    """Parse, plan and dispatch in the active context: (module, workload, plan, rewrites)."""
    module = case.module()
    _, workload = analysed(module)
    planned = make_plan(workload, case, spec)
    engine = DiagnosticEngine("fuzz.mlir")
    count = emit_dispatch(
        PassContext(engine, io.StringIO()), module.operation, Plan(PLAN_TARGET, "fuzz", (planned,))
    )
    return module, workload, planned, count


def probe_values(lo: int, hi: int, thresholds: Sequence[int], rng: random.Random) -> list[int]:
    """Values of one loop that meet every decision of the cascade: 0, 1, the range ends and
    one past them, both sides of every threshold, a few random ones and values beyond."""
    values = {0, 1, lo, hi, hi + 1, hi + 2, 2 * hi + 3, rng.randint(lo, hi)}
    if lo > 0:
        values.add(lo - 1)
    for t in thresholds:
        values |= {t, t + 1}
    return sorted(v for v in values if v >= 0)


def probe_shapes(plan: WorkloadPlan, rng: random.Random, limit: int) -> list[dict[int, int]]:
    """Shapes (``{loop: value}``) that reach every leaf and every range check.

    Per loop: :func:`probe_values` (and every value in range when the range is
    small), so the product meets every cell of the tree; above ``limit`` shapes
    a random sample, the all-corners kept.
    """
    per_loop: dict[int, list[int]] = {}
    for dim in plan.dims:
        lo, hi = dim.range
        thresholds = [s.threshold for s in plan.tree.splits() if s.loop == dim.loop]
        values = set(probe_values(lo, hi, thresholds, rng))
        if hi - lo < 24:
            values |= set(range(lo, hi + 1))
        per_loop[dim.loop] = sorted(values)
    loops = list(per_loop)
    total = math.prod(len(v) for v in per_loop.values())
    if total <= limit:
        combos = list(itertools.product(*(per_loop[loop] for loop in loops)))
    else:
        corners = [sorted({0, d.range[0], d.range[1], d.range[1] + 1}) for d in plan.dims]
        combos = list(itertools.product(*corners))
        seen = set(combos)
        while len(combos) < limit:
            combo = tuple(rng.choice(per_loop[loop]) for loop in loops)
            if combo not in seen:
                seen.add(combo)
                combos.append(combo)
    return [dict(zip(loops, combo, strict=True)) for combo in combos]


def check_emit_dispatch(
    case: Contraction, spec: PlanSpec, probe_limit: int = 200, counter: str = "emit_dispatch"
) -> Dispatched:
    """The emitted module verifies; its cascade runs what the plan's tree runs on every probe.

    Outside the range it runs the op as it was (the fallback, no config); a
    second run of the pass changes nothing. Counted under ``counter``.
    """
    COUNTS[counter] += 1
    with ir.Context():
        module, workload, planned, count = emit(case, spec)
        assert count == case.copies
        assert module.operation.verify()
        text = str(module)
        assert parse_module(text).operation.verify()
        infos = {k.index: k.candidate.compilation_info(workload) for k in planned.kernels}
        parsed_infos = {
            index: None if info is None else str(ir.Attribute.parse(info))
            for index, info in infos.items()
        }
        func = module.body.operations[0]
        rng = random.Random(spec.seed)
        probes = probe_shapes(planned, rng, probe_limit)
        for dims in probes:
            COUNTS[f"{counter}.shapes"] += 1
            kernel = planned.select(dims)
            for copy in range(case.copies):
                reached, path = walk_cascade(func, case.arg_shapes(dims), result=copy)
                reached, chain = _contraction_behind(reached)
                assert chain == len(case.consumers), f"{chain} consumers in the branch of {dims}"
                label = ir.StringAttr(reached.attributes[KERNEL_ATTR]).value
                config = (
                    str(reached.attributes[COMPILATION_INFO])
                    if COMPILATION_INFO in reached.attributes
                    else None
                )
                # The cascade opens with the range check (then: the fallback); with copies
                # the path holds every cascade's branches, the kernel reached is what counts.
                if kernel is None:
                    assert label == FALLBACK and config is None, (dims, label)
                    assert case.copies > 1 or path == [True], (dims, path)
                    continue
                assert case.copies > 1 or path[0] is False, (dims, path)
                assert label == kernel.candidate_key, (dims, label, kernel.candidate_key)
                assert config == parsed_infos[kernel.index], (dims, config)
        again = DiagnosticEngine("fuzz.mlir")
        plan = Plan(PLAN_TARGET, "fuzz", (planned,))
        assert emit_dispatch(PassContext(again, io.StringIO()), module.operation, plan) == 0
        assert str(module) == text, "a second dcmlir-emit-dispatch changed the module"
    return Dispatched(case, planned, text, probes)


def _contraction_behind(op: ir.Operation) -> tuple[ir.Operation, int]:
    """The kernel a branch runs, from the op it yields (the last of its fused consumers):
    each consumer reads its producer as its first input. Also how many consumers were passed."""
    chain = 0
    while KERNEL_ATTR not in op.attributes:
        op = op.operands[0].owner.operation
        chain += 1
    return op, chain


# --- property 3: the compiled dispatch matches numpy -----------------------------------------------


UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11}
"""Of the output type, which the contraction accumulates in."""
SUBNORMAL_STEP = {"f32": 2.0**-149, "f16": 2.0**-24}
"""Spacing of the output type's subnormals: the absolute error of a rounding near 0."""


def error_bound(out_type: str, depth: int, magnitudes: np.ndarray) -> np.ndarray:
    """The classic bound of a dot product's rounding error, accumulated in ``out_type``.

    ``(K + 2) (u sum_k |a_k b_k| + s)`` (``K`` additions, the product and the
    output rounded once more; ``s`` for roundings among subnormals): a wrong
    kernel, a lost tile or garbage padding is off by a whole term or more, far
    beyond it in f32; f16 accumulation is what it is.
    """
    return (depth + 2) * (UNIT_ROUNDOFF[out_type] * magnitudes + SUBNORMAL_STEP[out_type])


def run_shapes(
    case: Contraction, plan: WorkloadPlan, rng: random.Random, extra: int
) -> list[dict[int, int]]:
    """0, 1, the range ends and one past them, beyond the range, random ones; all loops alike
    and mixed."""
    loops = [d.loop for d in plan.dims]
    ends = {d.loop: d.range for d in plan.dims}
    shapes = [
        {loop: 0 for loop in loops},
        {loop: 1 for loop in loops},
        {loop: ends[loop][0] for loop in loops},
        {loop: ends[loop][1] for loop in loops},
        {loop: ends[loop][1] + 1 for loop in loops},
        {loop: ends[loop][1] + rng.randint(2, 40) for loop in loops},
    ]
    for _ in range(extra):
        shapes.append(
            {
                loop: rng.choice([0, 1, ends[loop][0], ends[loop][1], ends[loop][1] + 1])
                if rng.random() < 0.4
                else rng.randint(ends[loop][0], ends[loop][1])
                for loop in loops
            }
        )
    unique = {tuple(sorted(s.items())): s for s in shapes}
    return list(unique.values())


def check_compiled(
    case: Contraction,
    spec: PlanSpec,
    cache: BuildCache | None = None,
    extra_shapes: int = 4,
) -> int:
    """The dispatched module, compiled by IREE for llvm-cpu, matches numpy on every shape run.

    Returns how many shapes ran. The reference is an einsum over the
    description's layouts in float64, checked also against dcmlir's
    :func:`dcmlir.codegen.kernel.reference`.
    """
    COUNTS["compiled"] += 1
    dispatched = check_emit_dispatch(case, spec, probe_limit=60, counter="compiled.cascade")
    built = build(dispatched.text, "llvm-cpu", cache=cache, source_name="fuzz.mlir")
    again = build(dispatched.text, "llvm-cpu", cache=cache, source_name="fuzz.mlir")
    assert again.cached and again.vmfb == built.vmfb, "the build cache did not return the build"
    function = load_function(built.vmfb, FUNCTION)
    rng = random.Random(spec.seed)
    data = np.random.default_rng(spec.seed)
    with ir.Context():
        _, workload = analysed(case.module())
    ran = 0
    out_type = NUMPY[case.types[2]]
    for dims in run_shapes(case, dispatched.plan, rng, extra_shapes):
        a_shape, b_shape, _ = case.shapes(dims)
        a = data.standard_normal(a_shape).astype(NUMPY[case.types[0]])
        b = data.standard_normal(b_shape).astype(NUMPY[case.types[1]])
        inputs = [a, b]
        bias = None
        if case.bias_role() is not None:
            bias = data.standard_normal(case.arg_shapes(dims)[2]).astype(out_type)
            inputs.append(bias)
        outputs = function(*inputs)
        assert len(outputs) == case.copies, f"{len(outputs)} results for {case.copies} copies"
        product = np.einsum(case.einsum(), a.astype(np.float64), b.astype(np.float64))
        (theirs,) = reference(workload, [a, b])
        np.testing.assert_allclose(theirs, product, rtol=1e-12, atol=1e-12)
        want = case.apply_consumers(product, None if bias is None else bias.astype(np.float64))
        kernel = dispatched.plan.select(dims)
        where = f"shape {dims} ({kernel.candidate_key if kernel else FALLBACK})"
        values = case.values(dims)
        out_shape = tuple(values[role] for role in case.result_layout())
        scale = np.einsum(case.einsum(), np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
        magnitudes = case.magnitudes(scale, None if bias is None else bias.astype(np.float64))
        bound = error_bound(case.types[2], values["k"] + len(case.consumers), magnitudes)
        for copy, got in enumerate(outputs):
            at = f"{where}, result {copy}"
            assert got.shape == out_shape, f"{at}: output {got.shape}, expected {out_shape}"
            assert got.dtype == out_type, f"{at}: dtype {got.dtype}"
            error = np.abs(got.astype(np.float64) - want) - bound
            if error.size:
                worst = np.unravel_index(int(np.argmax(error)), error.shape)
                assert error[worst] <= 0, (
                    f"{at}: got {got[worst]}, numpy {want[worst]} at {tuple(map(int, worst))}"
                )
        ran += 1
        COUNTS["compiled.shapes"] += 1
    return ran


# --- property 4: the tuner's kernel modules compute the op ----------------------------------------


def check_kernel_module(
    case: Contraction, spec: PlanSpec, cache: BuildCache | None = None, shapes: int = 4
) -> int:
    """Every variant of a kernel module (the module the tuner builds and times: the op
    re-created from its workload, one function per candidate, configs attached as the
    ``config`` route does) matches numpy. Returns how many (variant, shape) calls ran."""
    COUNTS["kernel_module"] += 1
    with ir.Context():
        _, workload = analysed(case.module())
    names = [f"v{index}" for index in range(len(spec.kernels))]
    variants = [
        ConfigRoute().variant(workload, candidate, name)
        for name, candidate in zip(names, spec.kernels, strict=True)
    ]
    text = kernel_module_text(workload, variants)
    built = build(text, "llvm-cpu", cache=cache, source_name="kernels.mlir")
    functions, errors = load_functions(built.vmfb, names)
    assert not errors, errors
    rng = random.Random(spec.seed)
    data = np.random.default_rng(spec.seed)
    ranges = case.role_ranges()
    ran = 0
    for _ in range(shapes):
        dims = {
            loop: rng.choice([0, 1, lo, hi, hi + 1, rng.randint(lo, hi)])
            for loop, (lo, hi) in ranges.items()
        }
        a_shape, b_shape, out_shape = case.shapes(dims)
        assert input_shapes(workload, dims) == [a_shape, b_shape]
        a = data.standard_normal(a_shape).astype(NUMPY[case.types[0]])
        b = data.standard_normal(b_shape).astype(NUMPY[case.types[1]])
        want = np.einsum(case.einsum(), a.astype(np.float64), b.astype(np.float64))
        scale = np.einsum(case.einsum(), np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
        bound = error_bound(case.types[2], case.values(dims)["k"], scale)
        for name, candidate in zip(names, spec.kernels, strict=True):
            (got,) = functions[name](a, b)
            where = f"variant {name} ({candidate.key()}) at {dims}"
            assert got.shape == out_shape, f"{where}: output {got.shape}, expected {out_shape}"
            error = np.abs(got.astype(np.float64) - want) - bound
            if error.size:
                worst = np.unravel_index(int(np.argmax(error)), error.shape)
                assert error[worst] <= 0, (
                    f"{where}: got {got[worst]}, numpy {want[worst]} at {tuple(map(int, worst))}"
                )
            ran += 1
            COUNTS["kernel_module.calls"] += 1
    return ran


def describe_case(**drawn: Any) -> str:
    """One line per drawn value, for a reproducer."""
    lines = []
    for name, value in drawn.items():
        text = value.describe() if hasattr(value, "describe") else repr(value)
        lines.append(f"{name}: {text}")
    return "\n".join(lines)
