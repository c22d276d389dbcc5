"""An op's dynamic extents fixed to one shape, for IREE to build it static (the exact build).

Each operand of the op (inputs and init) is cast to its static type at the shape and
back: ``tensor.cast %x : tensor<12x?x?xf32> to tensor<12x5x5xf32>`` then ``to
tensor<12x?x?xf32>``. The pair is no identity: MLIR keeps a chain whose middle type is
more static than both ends, and its linalg canonicalization folds the static-to-dynamic
cast into the op, which then has static types; IREE forms a dispatch whose loads,
tiles and loops are all static (checked with ``--iree-hal-dump-executable-sources-to``:
``tensor<12x5x5xf32>`` loads). The op's own result type stays as it was, so the
consumers and the branch around it need no change. A call at another shape fails the
casts, so the dispatch runs the op only where every dynamic extent equals the shape
(:class:`dcmlir.space.ExactCandidate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dcmlir.ir.mlir import arith, ir, linalg, scf, tensor
from dcmlir.shapes import Shape
from dcmlir.workload import Workload

__all__ = ["balanced_cases", "exact_cascade", "fix_extents", "static_type"]


def static_type(workload: Workload, operand: int, shape: Shape, element: ir.Type) -> ir.Type:
    """Operand ``operand``'s tensor type with every dynamic loop at its value in ``shape``."""
    extents = workload.concrete(workload.shape_dims(shape))
    return ir.RankedTensorType.get(
        [extents[loop] for loop in workload.operand_loops[operand]], element
    )


def fix_extents(op: ir.Operation, workload: Workload, shape: Shape) -> None:
    """Cast every dynamic operand of ``op`` through its static type at ``shape`` (casts
    inserted just before ``op``). An operand that is a fill (the accumulator) is filled
    again at its static type instead (:func:`_static_operand`)."""
    with ir.InsertionPoint(op), op.location:
        for operand in range(len(workload.operand_loops)):
            value = op.operands[operand]
            if ir.RankedTensorType(value.type).has_static_shape:
                continue
            element = ir.RankedTensorType(value.type).element_type
            fixed = _static_operand(value, static_type(workload, operand, shape, element))
            op.operands[operand] = tensor.CastOp(value.type, fixed).result


def _static_operand(value: ir.Value, static: ir.Type) -> ir.Value:
    """``value`` at its static type ``static``: a fill made again at that type (its own
    empty tensor, the value filled the same), anything else cast.

    With a cast of the dispatch's shared accumulator, IREE ran the module's other branches
    slower (which of its passes the cast disturbs was not looked for): the data-tiling
    branch of attention context with 16 heads of size 80 ran 1.08-1.13x behind IREE's own
    data-tiling build at T = 13 and 77 with three exact builds in the module, 1.01-1.02x
    with a fill of their own (``benchmarks/data_tiling_branch.py``; docs/design.md
    section 13)."""
    owner = value.owner if isinstance(value, ir.OpResult) else None
    if owner is None or owner.name != "linalg.fill":
        return tensor.CastOp(static, value).result
    empty = ir.Operation.create("tensor.empty", results=[static], operands=[])
    return linalg.fill(owner.operands[0], outs=[empty.results[0]])


def exact_cascade(
    shapes: Sequence[Shape],
    dims: Sequence[ir.Value],
    result_types: Sequence[ir.Type],
    build: Callable[[int], Sequence[ir.Value]],
    rest: Callable[[], Sequence[ir.Value]],
) -> list[ir.Value]:
    """``build(i)`` where the dynamic extents ``dims`` equal ``shapes[i]``, else ``rest()``:
    the case number from ``arith.cmpi eq`` and ``arith.select`` (``len(shapes)``: none),
    one ``scf.if`` on it, and a balanced ``scf.if`` search over the cases (a nesting depth
    of log2 of the shapes, not one level a shape)."""
    index = ir.IndexType.get()
    none = arith.ConstantOp(index, len(shapes)).result
    case = none
    for number, shape in reversed(list(enumerate(shapes))):
        equal = None
        for value, extent in zip(dims, shape, strict=True):
            check = arith.CmpIOp(
                arith.CmpIPredicate.eq, value, arith.ConstantOp(index, extent).result
            ).result
            equal = check if equal is None else arith.AndIOp(equal, check).result
        case = arith.SelectOp(equal, arith.ConstantOp(index, number).result, case).result
    hit = arith.CmpIOp(arith.CmpIPredicate.ult, case, none).result
    branch = scf.IfOp(hit, list(result_types), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp(balanced_cases(case, list(range(len(shapes))), result_types, build))
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp(list(rest()))
    return list(branch.results)


def balanced_cases(
    case: ir.Value,
    numbers: list[int],
    result_types: Sequence[ir.Type],
    build: Callable[[int], Sequence[ir.Value]],
) -> list[ir.Value]:
    """``build(n)`` for the ``n`` of ``numbers`` (ascending) that ``case`` holds: a balanced
    ``scf.if`` search, ``case <= middle``, log2 levels deep."""
    if len(numbers) == 1:
        return list(build(numbers[0]))
    half = len(numbers) // 2
    index = ir.IndexType.get()
    low = arith.CmpIOp(
        arith.CmpIPredicate.ule, case, arith.ConstantOp(index, numbers[half - 1]).result
    ).result
    branch = scf.IfOp(low, list(result_types), has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp(balanced_cases(case, numbers[:half], result_types, build))
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp(balanced_cases(case, numbers[half:], result_types, build))
    return list(branch.results)
