"""Stand-alone kernel modules of a workload: what the builder compiles and the runner times.

A workload is re-created on its own as ``func.func @name(%a, %b) -> %c`` with
the output allocated and zero-filled inside (so a call computes the whole
contraction), in the op form the input had (``linalg.matmul`` /
``linalg.batch_matmul`` with its indexing maps, else ``linalg.generic``). Many
variants of one workload go into one module, each function with its own
attributes, so one ``iree-compile`` builds them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dcmlir.ir.mlir import ir, parse_module
from dcmlir.layouts import PackedWeight
from dcmlir.reference import contract
from dcmlir.workload import K, N, Workload

_NAMED_WITH_MAPS = ("linalg.matmul", "linalg.batch_matmul")


@dataclass(frozen=True)
class KernelVariant:
    """One function of a kernel module: a name and the attributes its op (and func) carry."""

    name: str
    op_attributes: Mapping[str, str] = field(default_factory=dict)  # name -> attribute text
    func_attributes: Mapping[str, str] = field(default_factory=dict)
    packed: PackedTile | None = None  # a packed kernel (pack, mmt4d, unpack), not the op


@dataclass(frozen=True)
class PackedTile:
    """The tile of a packed kernel: activations ``m0 x k0``, weights ``n0 x k0``."""

    m0: int
    n0: int
    k0: int


def weight_layout(workload: Workload) -> str:
    """``kn`` or ``nk``: how a projection holds its weight (operand 1)."""
    roles = [workload.dims[loop].role for loop in workload.operand_loops[1]]
    if roles == [K, N]:
        return "kn"
    if roles == [N, K]:
        return "nk"
    raise ValueError(f"{workload.kind} ({workload.layout}) is not a projection with a weight")


def packed_weight(workload: Workload, tile: PackedTile) -> PackedWeight:
    return PackedWeight(weight_layout(workload), tile.n0, tile.k0)


def _static_extent(workload: Workload, role: str) -> int:
    (dim,) = workload.dims_of(role)
    if dim.extent is None:
        raise ValueError(f"{workload.kind}: the {role.upper()} loop must be static to be packed")
    return dim.extent


def packed_weight_type(workload: Workload, tile: PackedTile) -> str:
    """``tensor<N1xK1xN0xK0xf32>``: the weight as every packed kernel of the workload reads it."""
    shape = packed_weight(workload, tile).shape(
        _static_extent(workload, K), _static_extent(workload, N)
    )
    return f"tensor<{'x'.join(map(str, shape))}x{workload.element_types[1]}>"


def packed_function_text(workload: Workload, name: str, tile: PackedTile) -> str:
    """``func.func @name(%a, %packed_b) -> %c``: pack ``%a``, ``linalg.mmt4d``, unpack.

    The weight comes in packed (the worker packs it once per input set, as IREE packs a
    model's constant weight once): a call times what a model pays per call.
    """
    k, n = _static_extent(workload, K), _static_extent(workload, N)
    n1, k1 = packed_weight(workload, tile).outer(k, n)
    m0, n0, k0 = tile.m0, tile.n0, tile.k0
    t = workload.element_types[2]
    a_type, c_type = workload.operand_type(0), workload.operand_type(2)
    lhs = f"tensor<?x{k1}x{m0}x{k0}x{t}>"
    acc = f"tensor<?x{n1}x{m0}x{n0}x{t}>"
    return "\n".join(
        [
            f"func.func @{name}(%a: {a_type}, %b: {packed_weight_type(workload, tile)}) "
            f"-> {c_type} {{",
            "  %c0 = arith.constant 0 : index",
            f"  %zero = arith.constant 0.0 : {t}",
            f"  %m = tensor.dim %a, %c0 : {a_type}",
            f"  %mo = affine.apply affine_map<()[s0] -> (s0 ceildiv {m0})>()[%m]",
            f"  %le = tensor.empty(%mo) : {lhs}",
            f"  %l = linalg.pack %a padding_value(%zero : {t}) inner_dims_pos = [0, 1] "
            f"inner_tiles = [{m0}, {k0}] into %le : {a_type} -> {lhs}",
            f"  %ae = tensor.empty(%mo) : {acc}",
            f"  %acc = linalg.fill ins(%zero : {t}) outs(%ae : {acc}) -> {acc}",
            f"  %r = linalg.mmt4d ins(%l, %b : {lhs}, {packed_weight_type(workload, tile)}) "
            f"outs(%acc : {acc}) -> {acc}",
            f"  %oe = tensor.empty(%m) : {c_type}",
            f"  %o = linalg.unpack %r inner_dims_pos = [0, 1] inner_tiles = [{m0}, {n0}] "
            f"into %oe : {acc} -> {c_type}",
            f"  return %o : {c_type}",
            "}",
        ]
    )


def _affine_maps(workload: Workload) -> list[str]:
    loops = ", ".join(f"d{d.index}" for d in workload.dims)
    return [
        f"affine_map<({loops}) -> ({', '.join(f'd{i}' for i in operand)})>"
        for operand in workload.operand_loops
    ]


def op_text(workload: Workload, a: str, b: str, init: str) -> str:
    types = [workload.operand_type(i) for i in range(3)]
    operands = f"ins({a}, {b} : {types[0]}, {types[1]}) outs({init} : {types[2]})"
    maps = ", ".join(_affine_maps(workload))
    if workload.op_name in _NAMED_WITH_MAPS:
        return f"{workload.op_name} indexing_maps = [{maps}] {operands} -> {types[2]}"
    iterators = ", ".join('"reduction"' if d.role == K else '"parallel"' for d in workload.dims)
    lhs, rhs, out = workload.element_types
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
        f"{operands} {{\n    {region}\n  }} -> {types[2]}"
    )


def _output_dim_sources(workload: Workload) -> list[tuple[int, int]]:
    """For each dynamic output dim, an input (operand, dim) that holds the same extent."""
    sources = []
    for loop in workload.operand_loops[2]:
        if workload.dims[loop].extent is not None:
            continue
        for operand in (0, 1):
            if loop in workload.operand_loops[operand]:
                sources.append((operand, workload.operand_loops[operand].index(loop)))
                break
        else:
            raise ValueError(f"output loop d{loop} appears in no input; cannot size the output")
    return sources


def kernel_function_text(workload: Workload, name: str) -> str:
    """``func.func @name(%a, %b) -> %c``: zero-fill the output, run the op once."""
    a_type, b_type, c_type = (workload.operand_type(i) for i in range(3))
    lines = [f"func.func @{name}(%a: {a_type}, %b: {b_type}) -> {c_type} {{"]
    sizes = []
    for index, (operand, dim) in enumerate(_output_dim_sources(workload)):
        value, value_type = ("%a", a_type) if operand == 0 else ("%b", b_type)
        lines.append(f"  %i{index} = arith.constant {dim} : index")
        lines.append(f"  %n{index} = tensor.dim {value}, %i{index} : {value_type}")
        sizes.append(f"%n{index}")
    zero = "0.0" if workload.element_types[2].startswith(("f", "bf")) else "0"
    lines += [
        f"  %zero = arith.constant {zero} : {workload.element_types[2]}",
        f"  %empty = tensor.empty({', '.join(sizes)}) : {c_type}",
        f"  %init = linalg.fill ins(%zero : {workload.element_types[2]}) "
        f"outs(%empty : {c_type}) -> {c_type}",
        f"  %r = {op_text(workload, '%a', '%b', '%init')}",
        f"  return %r : {c_type}",
        "}",
    ]
    return "\n".join(lines)


def kernel_module_text(
    workload: Workload, variants: Sequence[KernelVariant], module_attributes: str = ""
) -> str:
    """One module with a function per variant; attributes attached through the bindings.

    Attributes are parsed (not pasted as text) so a malformed one fails here,
    naming the variant, instead of deep inside ``iree-compile``.
    """
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must be distinct: {names}")
    body = "\n".join(
        packed_function_text(workload, v.name, v.packed)
        if v.packed is not None
        else kernel_function_text(workload, v.name)
        for v in variants
    )
    header = f"module attributes {{{module_attributes}}} {{" if module_attributes else "module {"
    with ir.Context():
        module = parse_module(f"{header}\n{body}\n}}")
        functions = {op.sym_name.value: op for op in module.body.operations}
        for variant in variants:
            func = functions[variant.name]
            if variant.packed is not None:
                continue
            op = _contraction_of(func)
            _attach(op, variant.op_attributes, variant.name)
            _attach(func.operation, variant.func_attributes, variant.name)
        return str(module)


def _contraction_of(func: ir.OpView) -> ir.Operation:
    for op in func.regions[0].blocks[0].operations:
        name = op.operation.name
        if name.startswith("linalg.") and name != "linalg.fill":
            return op.operation
    raise LookupError("kernel function without its contraction")


def _attach(op: ir.Operation, attributes: Mapping[str, str], variant: str) -> None:
    for key, text in attributes.items():
        try:
            op.attributes[key] = ir.Attribute.parse(text)
        except ir.MLIRError as err:
            raise ValueError(
                f"variant '{variant}': attribute '{key}' does not parse: {err}"
            ) from None


# --- shapes and the numpy reference ------------------------------------------------------------


def input_shapes(workload: Workload, dims: Mapping[int, int]) -> list[tuple[int, ...]]:
    """Shapes of the two inputs for one value of the dynamic loops ``{loop: extent}``."""
    space = workload.concrete(dict(dims))
    return [tuple(space[loop] for loop in workload.operand_loops[i]) for i in (0, 1)]


def output_shape(workload: Workload, dims: Mapping[int, int]) -> tuple[int, ...]:
    space = workload.concrete(dict(dims))
    return tuple(space[loop] for loop in workload.operand_loops[2])


NUMPY_TYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64}

CHECK_TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "f64": 1e-4}
"""Max |actual - expected| relative to the output's scale, by the narrowest element type:
f16 keeps 11 bits, and a 768-long f16 dot product is already 7e-3 off a float64 one."""


def check_tolerance(workload: Workload) -> float:
    """The tolerance a variant of ``workload`` is checked with (the loosest its types need)."""
    return max(CHECK_TOLERANCE.get(t, 1e-4) for t in workload.element_types)


def unmeasurable(workload: Workload) -> str | None:
    """Why dcmlir cannot time ``workload`` (its inputs have no numpy type), or None."""
    missing = sorted({t for t in workload.element_types[:2] if t not in NUMPY_TYPES})
    if not missing:
        return None
    return (
        f"element type {', '.join(missing)} is not tuned: dcmlir checks and times candidates"
        f" on numpy inputs, and numpy has no {', '.join(missing)} (tuned: f32, f16); IREE"
        " compiles it with its default"
    )


def input_dtypes(workload: Workload) -> list[type[np.generic]]:
    """numpy types of the inputs; a ValueError for types numpy cannot hold (bf16)."""
    found = []
    for name in workload.element_types[:2]:
        if name not in NUMPY_TYPES:
            raise ValueError(f"element type {name} has no numpy equivalent for measurement")
        found.append(NUMPY_TYPES[name])
    return found


def reference(workload: Workload, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The contraction in float64 with numpy: what every variant is checked against."""
    a, b = (np.asarray(x, dtype=np.float64) for x in inputs)
    return [contract(workload.einsum(), a, b)]
