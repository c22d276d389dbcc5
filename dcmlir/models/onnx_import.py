"""ONNX models as dynamic-shape linalg: IREE's ONNX importer, a range for every dynamic axis.

Needs the ``onnx`` package (the ``dcmlir[bench]`` extra). The steps, each for a reason:

1. :func:`load_model` reads the file; :func:`dynamic_axes` lists the graph inputs'
   dynamic axes, named by their ``dim_param`` (``"seq"``, ``"batch"``; one name shared
   by several inputs is one axis) or, unnamed, ``INPUT.AXIS``;
2. an axis given a single size (``batch=1``) becomes static in the graph, every
   ``dim_param`` of that name with it, and ONNX shape inference runs as
   ``iree-import-onnx`` runs it;
3. IREE's ONNX importer writes torch-dialect IR (``onnx.*`` ops), weights inline or,
   with ``weights="params"``, as ``util.global``s of the ``model`` parameter scope;
4. each remaining dynamic axis gets a ``torch.symbolic_int`` with its range, bound to
   the function's arguments (``torch.bind_symbolic_shape``), as the FX importer
   writes a ``torch.export.Dim``; IREE's input conversion
   (:func:`~dcmlir.models.input_conversion.lower_to_linalg`) makes it the same
   ``util.assume.int`` a torch-imported module has, so ``dcmlir tune`` reads the range;
5. ``MatMul`` of ``[1, T, K]`` by a weight, a unit-batch ``linalg.batch_matmul`` there,
   becomes the ``linalg.matmul`` torch's import gives (``dcmlir-drop-unit-batch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from dcmlir.ir.mlir import ir, onnx_importers, passmanager
from dcmlir.models.bert import PARAMETER_SCOPE, WEIGHT_MODES
from dcmlir.models.input_conversion import ConversionError, ImportedModel, lower_to_linalg
from dcmlir.models.onnx_source import OnnxSource, file_sha256
from dcmlir.passes.drop_unit_batch import drop_unit_batch

__all__ = [
    "DEFAULT_RANGE",
    "OnnxAxis",
    "OnnxImportError",
    "UnknownAxisError",
    "dynamic_axes",
    "import_onnx",
    "load_model",
]

DEFAULT_RANGE = (1, 128)
"""The range of an axis the user gives none (as ``import-torch --seq``'s default)."""

PARAMETER_ELEMENTS = 100
"""Initializers of at least this many elements go to the parameter archive
(``iree-import-onnx --num-elements-threshold``'s default); smaller ones stay inline."""


class OnnxImportError(ValueError):
    """A model that cannot be read, given ranges or imported; the message says which step."""


class UnknownAxisError(OnnxImportError):
    """A range names no dynamic axis of the model; the message lists the ones there are."""


@dataclass(frozen=True)
class OnnxAxis:
    """A dynamic axis of a graph input: its name, the input and the axis number."""

    name: str
    input_name: str
    axis: int

    def describe(self) -> str:
        return f"{self.input_name}[{self.axis}] ({self.name})"


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def load_model(path: str | Path) -> onnx.ModelProto:
    """The ONNX model in ``path`` (external data beside it); one-line errors."""
    if not Path(path).is_file():
        raise OnnxImportError(f"cannot read '{path}': no such file")
    try:
        model = onnx.load(str(path))
    except Exception as err:  # protobuf's DecodeError, onnx's own, OSError for external data
        raise OnnxImportError(f"'{path}' is not an ONNX model: {_first_line(err)}") from None
    if not model.ir_version or not model.graph.node:  # protobuf parses most bytes as *something*
        raise OnnxImportError(f"'{path}' is not an ONNX model: it holds no graph")
    return model


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds (older exporters list initializers among the inputs too)."""
    weights = {tensor.name for tensor in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in weights]


def dynamic_axes(model: onnx.ModelProto) -> list[OnnxAxis]:
    """Every dynamic axis of the graph's inputs, in input order."""
    found = []
    for value in _graph_inputs(model):
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            kind = dim.WhichOneof("value")
            if kind == "dim_value":
                continue
            name = dim.dim_param if kind == "dim_param" else f"{value.name}.{axis}"
            found.append(OnnxAxis(name, value.name, axis))
    return found


_RESHAPES = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Cast", "Expand"}
"""Ops whose output holds the same ids as their first input, only reshaped."""


def token_rows(model: onnx.ModelProto) -> int | None:
    """Rows of the smallest table an input's ids index (a ``Gather`` of an initializer by
    the input itself or a reshape of it): the vocabulary run-model draws token ids from;
    None when no input indexes a table."""
    derived = {value.name for value in _graph_inputs(model)}
    tables = {tensor.name: tensor.dims[0] for tensor in model.graph.initializer if tensor.dims}
    rows = []
    for node in model.graph.node:  # ONNX graphs are topologically sorted
        if node.op_type in _RESHAPES and node.input and node.input[0] in derived:
            derived.update(node.output)
        if node.op_type == "Gather" and node.input[1] in derived and node.input[0] in tables:
            rows.append(tables[node.input[0]])
    return min(rows) if rows else None


def axis_ranges(
    axes: list[OnnxAxis], given: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """Each axis name's range: the one ``given``, else :data:`DEFAULT_RANGE`."""
    names = list(dict.fromkeys(axis.name for axis in axes))
    unknown = [name for name in given if name not in names]
    if unknown:
        listed = ", ".join(axis.describe() for axis in axes) or "none (every input is static)"
        raise UnknownAxisError(
            f"'{unknown[0]}' is not a dynamic axis of the model; its dynamic axes: {listed}"
        )
    ranges = {name: given.get(name, DEFAULT_RANGE) for name in names}
    for name, (lo, hi) in ranges.items():
        if not 1 <= lo <= hi:
            raise OnnxImportError(f"axis '{name}': range {lo}:{hi} is not 1 <= LO <= HI")
    return ranges


def _fix_sizes(
    model: onnx.ModelProto, axes: list[OnnxAxis], sizes: Mapping[str, int]
) -> onnx.ModelProto:
    """A copy with every axis of ``sizes`` static: the inputs' dims and each ``dim_param`` of
    that name in the outputs and recorded shapes (so they do not contradict the inputs)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    inputs = {value.name: value for value in fixed.graph.input}
    for axis in axes:
        if axis.name in sizes:
            inputs[axis.input_name].type.tensor_type.shape.dim[axis.axis].dim_value = sizes[
                axis.name
            ]
    for value in [*fixed.graph.output, *fixed.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.WhichOneof("value") == "dim_param" and dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]
    return fixed


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX's checker and shape inference, as ``iree-import-onnx`` runs them."""
    try:
        onnx.checker.check_model(model)
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as err:  # onnx's ValidationError, InferenceError, protobuf's size limit
        raise OnnxImportError(f"ONNX's checker refused the model: {_first_line(err)}") from None


def _to_torch_dialect(
    model: onnx.ModelProto,
    weights: str,
    data_dir: Path,
    axes: list[OnnxAxis],
    ranges: Mapping[str, tuple[int, int]],
) -> tuple[str, dict[str, np.ndarray]]:
    """IREE's ONNX importer with the ranges bound: torch-dialect text and the arrays of the
    externalized weights."""
    onnx_importer, overrides = onnx_importers()
    arrays: dict[str, np.ndarray] = {}
    with ir.Context() as context:
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=context).operation
        try:
            if weights == "params":
                where = overrides.ParamData(
                    param_bit_threshold=None,
                    num_elements_threshold=PARAMETER_ELEMENTS,
                    params_scope=PARAMETER_SCOPE,
                    data_dir=str(data_dir),
                    param_path="",
                    input_index_threshold=None,
                )
                importer = overrides.IREENodeImporter.define_function(
                    info.main_graph, module, where
                )
            else:
                importer = onnx_importer.NodeImporter.define_function(info.main_graph, module)
            importer.import_all()
        except Exception as err:  # the importer raises bare ValueError/KeyError/...
            raise OnnxImportError(f"IREE's ONNX importer failed: {_first_line(err)}") from None
        ops = [op.operation for op in module.regions[0].blocks[0]]
        (function,) = (op for op in ops if op.name == "func.func")
        if ranges:  # the importer's arguments: the graph inputs that are no initializer
            _bind_ranges(function, [v.name for v in _graph_inputs(model)], axes, ranges)
        try:
            module.verify()
        except ir.MLIRError as err:
            raise OnnxImportError(
                f"the imported module does not verify: {_first_line(err)}"
            ) from None
        if weights == "params":
            tensors = {tensor.name: tensor for tensor in model.graph.initializer}
            for name, symbol in importer.globals:
                arrays[symbol] = numpy_helper.to_array(tensors[name], base_dir=str(data_dir))
        return str(module), arrays


def _bind_ranges(
    function: ir.Operation,
    inputs: list[str],
    axes: list[OnnxAxis],
    ranges: Mapping[str, tuple[int, int]],
) -> None:
    """A ``torch.symbolic_int`` per dynamic axis name at the top of ``function``, bound to
    each argument with a dynamic axis by ``torch.bind_symbolic_shape`` (the FX importer's
    form). ``inputs``: the graph inputs' names, in the order of the function's arguments."""
    block = function.regions[0].blocks[0]
    arguments = dict(zip(inputs, block.arguments, strict=True))
    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint.at_block_begin(block), ir.Location.unknown():
        symbols = {}
        for index, (name, (lo, hi)) in enumerate(ranges.items()):
            symbols[name] = ir.Operation.create(
                "torch.symbolic_int",
                results=[ir.Type.parse("!torch.int")],
                attributes={
                    "symbol_name": ir.StringAttr.get(f"s{index}"),
                    "min_val": ir.IntegerAttr.get(i64, lo),
                    "max_val": ir.IntegerAttr.get(i64, hi),
                },
            ).result
        for input_name in dict.fromkeys(axis.input_name for axis in axes):
            mine = {axis.axis: axis.name for axis in axes if axis.input_name == input_name}
            used = list(dict.fromkeys(mine.values()))
            argument = arguments[input_name]
            sizes = str(argument.type).split("[", 1)[1].split("]", 1)[0].split(",")
            exprs = [f"s{used.index(mine[a])}" if a in mine else n for a, n in enumerate(sizes)]
            names = ", ".join(f"s{i}" for i in range(len(used)))
            ir.Operation.create(
                "torch.bind_symbolic_shape",
                operands=[argument, *(symbols[name] for name in used)],
                attributes={
                    "shape_expressions": ir.Attribute.parse(
                        f"affine_map<()[{names}] -> ({', '.join(exprs)})>"
                    )
                },
            )


def import_onnx(
    path: str | Path,
    ranges: Mapping[str, tuple[int, int]] | None = None,
    *,
    weights: str = "params",
    lower: bool = True,
    func_name: str = "main",
) -> tuple[ImportedModel, dict[str, tuple[int, int]]]:
    """The ONNX model in ``path`` as linalg on tensors (``lower=False``: torch dialect).

    ``ranges`` by axis name (:func:`dynamic_axes`); an axis given none has
    :data:`DEFAULT_RANGE`, one given ``(n, n)`` becomes static. The module's first line
    records the file (:class:`~dcmlir.models.onnx_source.OnnxSource`) for ``run-model``.
    Returns the module and the range of every axis.
    """
    if weights not in WEIGHT_MODES:
        raise OnnxImportError(f"weights must be one of {', '.join(WEIGHT_MODES)}, not '{weights}'")
    model = load_model(path)
    axes = dynamic_axes(model)
    chosen = axis_ranges(axes, ranges or {})
    sizes = {name: lo for name, (lo, hi) in chosen.items() if lo == hi}
    model = _infer_shapes(_fix_sizes(model, axes, sizes) if sizes else model)
    model.graph.name = func_name  # the importer names the function after the graph
    dynamic = [axis for axis in axes if axis.name not in sizes]
    bound = {name: span for name, span in chosen.items() if name not in sizes}
    text, arrays = _to_torch_dialect(model, weights, Path(path).parent, dynamic, bound)
    if lower:
        try:
            text = lower_to_linalg(text)
        except ConversionError as err:
            raise OnnxImportError(str(err)) from None
        text = _matmuls_without_unit_batch(text)
    source = OnnxSource(str(Path(path).resolve()), file_sha256(path), chosen, token_rows(model))
    return ImportedModel(f"{source.header()}\n{text}", weights, arrays, func_name), chosen


def _matmuls_without_unit_batch(text: str) -> str:
    """ONNX ``MatMul`` of ``[1, T, K]`` by a weight: a ``linalg.matmul``, as torch's import
    gives it (``dcmlir-drop-unit-batch``), so the packed family and data tiling apply."""
    with ir.Context():
        module = ir.Module.parse(text)
        if not drop_unit_batch(module.operation):
            return text
        try:
            passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)
        except ir.MLIRError as err:  # a form the rewrite gets wrong: one line, not a traceback
            lines = str(err).splitlines()
            first = next((line.strip() for line in lines if "error:" in line), lines[0])
            raise OnnxImportError(
                f"dcmlir-drop-unit-batch left invalid IR (a dcmlir bug, please report it): {first}"
            ) from None
        return str(module)
