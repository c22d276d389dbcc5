"""Weight modes of ``dcmlir bench``: operand 1 as a module constant, or as an argument.

In a model the weight of a ``?xK @ KxN`` projection is a constant, and IREE
treats constants differently from arguments: it hoists work on them (a
transpose, data tiling's packing) into an initializer that runs once at load.
Timing the weight as an argument charges every call for work a model never
pays. In ``constant`` mode every IREE-built baseline gets one fixed random
weight (seeded, never a splat) as a ``util.global`` holding a
``dense_resource`` blob, and its public functions take only the activation;
the host peers get the same array, and the reference is computed with it.
``argument`` mode passes both operands, as the kernels are tuned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dcmlir.codegen.kernel import check_tolerance, input_dtypes, input_shapes
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.layouts import resource_trailer
from dcmlir.measure.runner import ShapeProblem
from dcmlir.measure.timing import random_inputs
from dcmlir.reference import contract
from dcmlir.workload import Workload

__all__ = [
    "ARGUMENT",
    "CONSTANT",
    "WEIGHT_MODES",
    "ConstantWeightReference",
    "WeightError",
    "check_weight_arguments",
    "constant_weight_problem",
    "default_weight_mode",
    "weight_array",
    "weight_problem",
    "with_constant_weight",
]

CONSTANT, ARGUMENT = "constant", "argument"
WEIGHT_MODES = (CONSTANT, ARGUMENT)
WEIGHT_SEED = 20261123  # one fixed weight: the same array in every baseline and run
GLOBAL = "dcmlir_bench_weight"  # the global's and the resource blob's name
CALLEE_SUFFIX = "__weighted"  # the original function, now private, called by the wrapper


class WeightError(ValueError):
    """A module none of whose public functions takes the weight as an argument."""


def weight_problem(workload: Workload) -> str | None:
    """Why operand 1 cannot be a constant (it has a dynamic dim), else None."""
    if any(extent is None for extent in workload.operand_shape(1)):
        return (
            f"operand 1 ({workload.operand_type(1)}) has a dynamic dim: it is an activation, "
            "not a weight; use --weights argument"
        )
    return None


def default_weight_mode(workload: Workload) -> str:
    """``constant`` when operand 1 is fully static (a projection's weight), else ``argument``."""
    return CONSTANT if weight_problem(workload) is None else ARGUMENT


def weight_array(workload: Workload) -> np.ndarray:
    """The fixed random weight (operand 1's static shape and type), values in [-1, 1)."""
    reason = weight_problem(workload)
    if reason is not None:
        raise ValueError(reason)
    shape = tuple(int(e) for e in workload.operand_shape(1) if e is not None)
    dtype = input_dtypes(workload)[1]
    return random_inputs([shape], sets=1, dtype=dtype, seed=WEIGHT_SEED)[0][0]


class ConstantWeightReference:
    """The float64 reference with the constant weight: what every output is checked against.

    Hashed by identity (a runner keys input sets by their problem), so one
    instance serves every shape.
    """

    def __init__(self, spec: str, weight: np.ndarray) -> None:
        self.spec = spec
        self.weight = weight.astype(np.float64)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        (activation,) = inputs
        return [contract(self.spec, activation.astype(np.float64), self.weight)]


def constant_weight_problem(
    workload: Workload, dims: Mapping[int, int], reference: ConstantWeightReference
) -> ShapeProblem:
    """One shape's problem in ``constant`` mode: only the activation rotates over input sets."""
    return ShapeProblem(
        (tuple(input_shapes(workload, dims)[0]),),
        (np.dtype(input_dtypes(workload)[0]).name,),
        rtol=check_tolerance(workload),
        reference=reference,
    )


def _resource_trailer(weight: np.ndarray) -> str:
    """The ``{-# dialect_resources #-}`` trailer that holds the global's blob."""
    return resource_trailer(GLOBAL, weight)


def _wrapper(name: str, function_type: Any, weight_type: str) -> str:
    """``@name`` without its weight arguments: it loads the global and calls the original."""
    inputs = [str(t) for t in function_type.inputs]
    results = [str(t) for t in function_type.results]
    kept = [(index, t) for index, t in enumerate(inputs) if t != weight_type]
    params = ", ".join(f"%arg{index}: {t}" for index, t in kept)
    operands = ", ".join("%w" if t == weight_type else f"%arg{i}" for i, t in enumerate(inputs))
    call = (
        f"call @{name}{CALLEE_SUFFIX}({operands}) : ({', '.join(inputs)}) -> ({', '.join(results)})"
    )
    if len(results) == 1:
        values, target = ["%r"], "%r = "
    else:
        values, target = [f"%r#{i}" for i in range(len(results))], f"%r:{len(results)} = "
    returned = f"return {', '.join(values)} : {', '.join(results)}" if results else "return"
    return "\n".join(
        [
            f"func.func @{name}({params}) -> ({', '.join(results)}) {{",
            f"  %w = util.global.load @{GLOBAL} : {weight_type}",
            f"  {target if results else ''}{call}",
            f"  {returned}",
            "}",
        ]
    )


def _weighted_functions(module: Any, weight_type: str) -> list[tuple[Any, str, Any]]:
    """(op, name, type) of every public function with an argument of ``weight_type``."""
    found = []
    for op in module.body.operations:
        if op.operation.name != "func.func" or "sym_visibility" in op.attributes:
            continue
        function_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        if any(str(t) == weight_type for t in function_type.inputs):
            found.append((op, ir.StringAttr(op.attributes["sym_name"]).value, function_type))
    if not found:
        raise WeightError(f"no public function of the module takes a {weight_type} argument")
    return found


def check_weight_arguments(text: str, weight_type: str) -> None:
    """:class:`WeightError` unless a public function of ``text`` takes the weight."""
    with ir.Context():
        _weighted_functions(parse_module(text), weight_type)


def with_constant_weight(text: str, weight: np.ndarray, weight_type: str) -> str:
    """``text`` with every public function that takes a ``weight_type`` argument wrapped.

    The original becomes ``private @NAME__weighted``; the new public ``@NAME``
    takes the other arguments, loads ``@dcmlir_bench_weight`` (a
    ``dense_resource`` of ``weight``) and passes it for every argument of that
    type (a workload's activation has a dynamic dim, so only the weight has
    it). IREE inlines the call, so the contraction reads a constant, as in a
    model. Names stay, so a caller picks the same functions as in ``argument`` mode.
    """
    with ir.Context():
        module = parse_module(text)
        wrappers, declarations = [], []
        for op, name, function_type in _weighted_functions(module, weight_type):
            op.attributes["sym_name"] = ir.StringAttr.get(f"{name}{CALLEE_SUFFIX}")
            op.attributes["sym_visibility"] = ir.StringAttr.get("private")
            wrappers.append(_wrapper(name, function_type, weight_type))
            declarations.append(f"func.func private @{name}{CALLEE_SUFFIX}{function_type}")
        # parsed on its own (the declarations make it verify), then moved over
        added = parse_module(
            "\n".join(
                [
                    "module {",
                    *declarations,
                    f"util.global private @{GLOBAL} = dense_resource<{GLOBAL}> : {weight_type}",
                    *wrappers,
                    "}",
                    _resource_trailer(weight),
                ]
            )
        )
        for op in list(added.body.operations)[len(declarations) :]:
            module.body.append(op)
        return str(module)
