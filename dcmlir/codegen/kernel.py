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

from dcmlir.codegen.exact import fix_extents
from dcmlir.codegen.mmt4d import rewrite_explicit, tuned_m_bound
from dcmlir.codegen.packed import data_tile
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.layouts import fixed_weight, resource_trailer, weight_seed
from dcmlir.reference import contract
from dcmlir.workload import K, Workload

_NAMED_WITH_MAPS = ("linalg.matmul", "linalg.batch_matmul")


@dataclass(frozen=True)
class KernelVariant:
    """One function of a kernel module: a name and the attributes its op (and func) carry."""

    name: str
    op_attributes: Mapping[str, str] = field(default_factory=dict)  # name -> attribute text
    func_attributes: Mapping[str, str] = field(default_factory=dict)
    encoded: EncodedForm | None = None  # the op on data-tiling encodings, not as it is
    mmt4d: Mmt4dForm | None = None  # the op as explicit pack / mmt4d / unpack
    exact: tuple[int, ...] | None = None  # the op's dynamic extents fixed to this shape

    @property
    def constant_weight(self) -> bool:
        """Whether the function reads the module's constant weight instead of ``%b``."""
        form = self.encoded or self.mmt4d
        return form is not None and form.constant_weight


@dataclass(frozen=True)
class EncodedForm:
    """A kernel on IREE's data-tiling encodings (:mod:`dcmlir.codegen.packed`).

    ``m0``: M's iteration size in the encodings (IREE picks its tile from it; None:
    ``?``, IREE's choice for a large M). ``constant_weight``: the weight is the module's
    constant (:func:`dcmlir.layouts.fixed_weight`), encoded once outside the call, as in
    a model; else both inputs are encoded in the call.
    """

    m0: int | None
    constant_weight: bool


@dataclass(frozen=True)
class Mmt4dForm:
    """A kernel written as explicit pack / mmt4d / unpack (:mod:`dcmlir.codegen.mmt4d`)
    with tile ``m0 x n0``; ``constant_weight`` as in :class:`EncodedForm`."""

    m0: int
    n0: int
    constant_weight: bool


WEIGHT_GLOBAL = "dcmlir_weight"


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


def kernel_function_text(workload: Workload, name: str, constant_weight: bool = False) -> str:
    """``func.func @name(%a, %b) -> %c``: zero-fill the output, run the op once (on the
    module's constant weight instead of ``%b`` with ``constant_weight``)."""
    a_type, b_type, c_type = (workload.operand_type(i) for i in range(3))
    lines = [f"func.func @{name}(%a: {a_type}, %b: {b_type}) -> {c_type} {{"]
    sizes = []
    for index, (operand, dim) in enumerate(_output_dim_sources(workload)):
        value, value_type = ("%a", a_type) if operand == 0 else ("%b", b_type)
        lines.append(f"  %i{index} = arith.constant {dim} : index")
        lines.append(f"  %n{index} = tensor.dim {value}, %i{index} : {value_type}")
        sizes.append(f"%n{index}")
    zero = "0.0" if workload.element_types[2].startswith(("f", "bf")) else "0"
    weight = "%b"
    if constant_weight:
        weight = "%w"
        lines.append(f"  %w = util.global.load @{WEIGHT_GLOBAL} : {b_type}")
    lines += [
        f"  %zero = arith.constant {zero} : {workload.element_types[2]}",
        f"  %empty = tensor.empty({', '.join(sizes)}) : {c_type}",
        f"  %init = linalg.fill ins(%zero : {workload.element_types[2]}) "
        f"outs(%empty : {c_type}) -> {c_type}",
        f"  %r = {op_text(workload, '%a', weight, '%init')}",
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
    constant = any(v.constant_weight for v in variants)
    body = "\n".join(kernel_function_text(workload, v.name, v.constant_weight) for v in variants)
    if constant:
        body = f"{weight_global(workload)}\n{body}"
    header = f"module attributes {{{module_attributes}}} {{" if module_attributes else "module {"
    resources = weight_resource(workload) if constant else ""
    with ir.Context():
        module = parse_module(f"{header}\n{body}\n}}{resources}")
        functions = {op.sym_name.value: op for op in module.body.operations}
        for variant in variants:
            func = functions[variant.name]
            if variant.encoded is not None:
                form = variant.encoded
                data_tile(_contraction_of(func), workload, form.m0, form.constant_weight)
                continue
            if variant.mmt4d is not None:
                _explicit(_contraction_of(func), workload, variant.mmt4d)
                continue
            op = _contraction_of(func)
            if variant.exact is not None:
                fix_extents(op, workload, variant.exact)
            _attach(op, variant.op_attributes, variant.name)
            _attach(func.operation, variant.func_attributes, variant.name)
        return str(module)


def _explicit(op: ir.Operation, workload: Workload, form: Mmt4dForm) -> None:
    """Replace ``op`` by its explicit pack / mmt4d / unpack form (the weight packed in the
    function: IREE hoists it when the weight is the module's constant)."""
    rewrite_explicit(op, workload, form.m0, form.n0, tuned_m_bound(workload))


def weight_global(workload: Workload) -> str:
    """The module's constant weight (see :class:`EncodedForm`), a ``dense_resource``."""
    return (
        f"util.global private @{WEIGHT_GLOBAL} = dense_resource<{WEIGHT_GLOBAL}> : "
        f"{workload.operand_type(1)}"
    )


def weight_resource(workload: Workload) -> str:
    """The resource trailer holding :func:`dcmlir.layouts.fixed_weight`'s bytes."""
    shape = tuple(e for e in workload.operand_shape(1) if e is not None)
    if len(shape) != len(workload.operand_shape(1)):
        raise ValueError(f"{workload.kind}: a constant weight needs a static shape")
    dtype = np.dtype(NUMPY_TYPES[workload.element_types[1]]).name
    weight = fixed_weight(shape, dtype, weight_seed(workload.key))
    return "\n" + resource_trailer(WEIGHT_GLOBAL, weight) + "\n"


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
