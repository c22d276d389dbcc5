"""The modules of the peers ``dcmlir bench`` compares a dispatched workload with.

Each function returns MLIR text that IREE compiles as it is; every function
takes the workload's inputs and returns its output, so the runner times all of
them on the same input sets and checks them against the same reference:

- :func:`static_module`: one function per shape with every extent static: what
  a per-shape compiler gets from IREE without tuning;
- :func:`oracle_module`: one function per distinct best candidate, to time each
  shape with the best kernel of dcmlir's own space measured at that shape;
- :func:`bucketing_module`: the TVM ``FlexibleShapeDispatch`` / Nimble style:
  inputs padded up to the smallest bucket that holds them, a kernel tuned for
  each bucket size, the real rows sliced back out; IREE's default beyond the
  largest bucket;
- :func:`specialized_module`: IREE's own multi-versioning: the op annotated
  with ``iree_codegen.specialization_ranges`` (IREE 3.13 compiles one export
  per range and picks at run time, with its own default configs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from dcmlir.codegen.kernel import KernelVariant, kernel_function_text, kernel_module_text, op_text
from dcmlir.dispatch import PlannedDim
from dcmlir.dispatch.tree import DecisionTree, Leaf, Node
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.shapes import Shape
from dcmlir.space import Candidate
from dcmlir.workload import Workload, workloads
from dcmlir.workload import entry_function as workload_entry

Box = tuple[tuple[int, int], ...]  # an inclusive range per dynamic loop

SPECIALIZATION_ATTR = "iree_codegen.specialization_ranges"


def shape_label(shape: Shape) -> str:
    return "x".join(map(str, shape))


def static_workload(workload: Workload, shape: Shape) -> Workload:
    """The same workload with its dynamic loops fixed to ``shape`` (loop order)."""
    values = workload.shape_dims(shape)
    dims = tuple(
        dataclasses.replace(d, extent=values[d.index], range=None) if d.dynamic else d
        for d in workload.dims
    )
    return dataclasses.replace(workload, dims=dims)


def static_function(shape: Shape) -> str:
    return f"s{shape_label(shape)}"


def static_module(workload: Workload, shapes: Sequence[Shape]) -> str:
    """``@s17`` (``@s17x17`` ...) per shape: the workload with static extents, IREE's config."""
    body = "\n".join(
        kernel_function_text(static_workload(workload, shape), static_function(shape))
        for shape in shapes
    )
    return f"module {{\n{body}\n}}"


def oracle_module(workload: Workload, kernels: Sequence[Candidate]) -> str:
    """``@o0`` .. per candidate: the dynamic kernel with that candidate's config."""
    return kernel_module_text(
        workload,
        [KernelVariant(f"o{index}", _config(c, workload)) for index, c in enumerate(kernels)],
    )


def _config(candidate: Candidate, workload: Workload) -> dict[str, str]:
    info = candidate.compilation_info(workload)
    return {"compilation_info": info} if info else {}


# --- bucketing -------------------------------------------------------------------------------


def bucketing_module(workload: Workload, buckets: Mapping[int, Candidate]) -> str:
    """``@main``: pad every dynamic loop up to the smallest bucket >= the largest of them.

    ``buckets``: bucket size -> the candidate tuned at that size (every dynamic
    loop at the bucket size). Zero padding is exact for a contraction: padded
    rows and columns only produce outputs that are sliced away, padded
    reduction entries add zero. Shapes above the largest bucket run the
    dynamic op with IREE's default.
    """
    if not buckets:
        raise ValueError("bucketing needs at least one bucket size")
    sizes = sorted(buckets)
    a_type, b_type, c_type = (workload.operand_type(i) for i in range(3))
    element = workload.element_types[2]
    zero = "0.0" if element.startswith(("f", "bf")) else "0"
    lines = [
        f"func.func @main(%a: {a_type}, %b: {b_type}) -> {c_type} {{",
        f"%zero = arith.constant {zero} : {element}",
        *_dynamic_extents(workload),
    ]
    largest = f"%d{workload.dynamic_dims[0].index}"
    for loop in workload.dynamic_dims[1:]:
        lines.append(f"%max{loop.index} = arith.maxui {largest}, %d{loop.index} : index")
        largest = f"%max{loop.index}"
    lines += _bucket_cascade(workload, sizes, 0, largest)
    lines += [f"return %r0 : {c_type}", "}"]
    with ir.Context():
        module = parse_module("module {\n" + "\n".join(lines) + "\n}")
        for op in _static_contractions(module.operation, workload.op_name):
            size = _bucket_of(op, workload)
            shape = (size,) * len(workload.dynamic_dims)
            info = buckets[size].compilation_info(static_workload(workload, shape))
            if info:
                op.attributes["compilation_info"] = ir.Attribute.parse(info)
        return str(module)


def _dynamic_extents(workload: Workload) -> list[str]:
    """A ``%dN = tensor.dim`` per dynamic loop N, read from the input that has it."""
    lines = []
    for loop in workload.dynamic_dims:
        operand = 0 if loop.index in workload.operand_loops[0] else 1
        dim = workload.operand_loops[operand].index(loop.index)
        value = "%a" if operand == 0 else "%b"
        lines += [
            f"%i{loop.index} = arith.constant {dim} : index",
            f"%d{loop.index} = tensor.dim {value}, %i{loop.index} : "
            f"{workload.operand_type(operand)}",
        ]
    return lines


def _output_sizes(workload: Workload) -> list[str]:
    """The output's extents: static ones as numbers, dynamic ones as their ``%dN``."""
    return [
        str(workload.dims[loop].extent) if workload.dims[loop].extent is not None else f"%d{loop}"
        for loop in workload.operand_loops[2]
    ]


def _bucket_cascade(workload: Workload, sizes: list[int], level: int, largest: str) -> list[str]:
    """``%rL = scf.if largest <= size_L {padded} else {next level, or IREE's default}``."""
    c_type = workload.operand_type(2)
    element = workload.element_types[2]
    if level == len(sizes):  # beyond the largest bucket: the dynamic op, IREE's default
        dynamic = [s for s in _output_sizes(workload) if s.startswith("%")]
        return [
            f"%ef = tensor.empty({', '.join(dynamic)}) : {c_type}",
            f"%ff = linalg.fill ins(%zero : {element}) outs(%ef : {c_type}) -> {c_type}",
            f"%rf = {op_text(workload, '%a', '%b', '%ff')}",
            f"scf.yield %rf : {c_type}",
        ]
    inner = _bucket_cascade(workload, sizes, level + 1, largest)
    if level + 1 < len(sizes):
        inner.append(f"scf.yield %r{level + 1} : {c_type}")
    return [
        f"%s{level} = arith.constant {sizes[level]} : index",
        f"%in{level} = arith.cmpi ule, {largest}, %s{level} : index",
        f"%r{level} = scf.if %in{level} -> ({c_type}) {{",
        *_padded_branch(workload, sizes[level], level),
        "} else {",
        *inner,
        "}",
    ]


def _padded_branch(workload: Workload, size: int, level: int) -> list[str]:
    """Pad both inputs to the bucket, run the static op, slice the real output back out."""
    static = static_workload(workload, (size,) * len(workload.dynamic_dims))
    element = workload.element_types[2]
    lines: list[str] = []
    padded = []
    for operand, value in ((0, "%a"), (1, "%b")):
        loops = workload.operand_loops[operand]
        if all(workload.dims[loop].extent is not None for loop in loops):
            padded.append(value)
            continue
        highs = []
        for loop in loops:
            if workload.dims[loop].extent is not None:
                highs.append("0")
                continue
            highs.append(f"%h{level}_{operand}_{loop}")
            lines.append(f"{highs[-1]} = arith.subi %s{level}, %d{loop} : index")
        name = f"%p{level}_{operand}"
        indices = ", ".join(f"%x{i}: index" for i in range(len(loops)))
        lines += [
            f"{name} = tensor.pad {value} low[{', '.join('0' for _ in loops)}] "
            f"high[{', '.join(highs)}] {{",
            f"^bb0({indices}):",
            f"  tensor.yield %zero : {workload.element_types[operand]}",
            f"}} : {workload.operand_type(operand)} to {static.operand_type(operand)}",
        ]
        padded.append(name)
    out = static.operand_type(2)
    sizes = _output_sizes(workload)
    return [
        *lines,
        f"%e{level} = tensor.empty() : {out}",
        f"%f{level} = linalg.fill ins(%zero : {element}) outs(%e{level} : {out}) -> {out}",
        f"%c{level} = {op_text(static, padded[0], padded[1], f'%f{level}')}",
        f"%y{level} = tensor.extract_slice %c{level}[{', '.join('0' for _ in sizes)}] "
        f"[{', '.join(sizes)}] [{', '.join('1' for _ in sizes)}] : {out} to "
        f"{workload.operand_type(2)}",
        f"scf.yield %y{level} : {workload.operand_type(2)}",
    ]


def _static_contractions(module: ir.Operation, op_name: str) -> list[ir.Operation]:
    """Every ``op_name`` op whose operands all have static shapes (the padded branches)."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == op_name and all(
            ir.ShapedType(value.type).has_static_shape for value in op.operands
        ):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def _bucket_of(op: ir.Operation, workload: Workload) -> int:
    """The bucket a static branch op was padded to: its first dynamic loop's extent."""
    loop = workload.dynamic_dims[0].index
    operand = 0 if loop in workload.operand_loops[0] else 1
    shape = ir.ShapedType(op.operands[operand].type).shape
    return int(shape[workload.operand_loops[operand].index(loop)])


# --- IREE's specialization -------------------------------------------------------------------


def leaf_boxes(tree: DecisionTree, dims: Sequence[PlannedDim]) -> list[tuple[Box, int]]:
    """The tree's leaves as (inclusive range per planned loop, kernel), left to right."""
    found: list[tuple[Box, int]] = []

    def visit(node: Node, box: dict[int, tuple[int, int]]) -> None:
        if isinstance(node, Leaf):
            found.append((tuple(box[d.loop] for d in dims), node.kernel))
            return
        lo, hi = box[node.loop]
        if lo <= min(hi, node.threshold):
            visit(node.left, {**box, node.loop: (lo, min(hi, node.threshold))})
        if max(lo, node.threshold + 1) <= hi:
            visit(node.right, {**box, node.loop: (max(lo, node.threshold + 1), hi)})

    visit(tree.root, {d.loop: d.range for d in dims})
    return found


def specialization_attribute(workload: Workload, boxes: Sequence[Box]) -> str:
    """``#util<int.assumption.multi_array[...]>``: one assumption per loop per range."""
    ranges = []
    for box in boxes:
        by_loop = dict(zip((d.index for d in workload.dynamic_dims), box, strict=True))
        row = []
        for dim in workload.dims:
            lo, hi = by_loop.get(dim.index, (dim.extent, dim.extent))
            row.append(f"<umin = {lo}, umax = {hi}>")
        ranges.append(f"[{', '.join(row)}]")
    return f"#util<int.assumption.multi_array[{', '.join(ranges)}]>"


def specialized_module(module_text: str, workload_key: str, boxes: Sequence[Box]) -> str:
    """The module with every op of ``workload_key`` annotated for IREE's multi-versioning."""
    with ir.Context():
        module = parse_module(module_text)
        annotated = 0
        for op, found in workloads(module.operation):
            if isinstance(found, Workload) and found.key == workload_key:
                op.attributes[SPECIALIZATION_ATTR] = ir.Attribute.parse(
                    specialization_attribute(found, boxes)
                )
                annotated += 1
        if not annotated:
            raise ValueError(f"no op of workload {workload_key} in the module")
        return str(module)


def entry_function(text: str) -> str:
    """The function of the user's module that holds the workload
    (:func:`dcmlir.workload.entry_function`)."""
    with ir.Context():
        return workload_entry(parse_module(text).operation)
