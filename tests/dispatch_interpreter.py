"""An interpreter for the ``scf.if`` cascade ``dcmlir-emit-dispatch`` emits.

Shared by the dispatch tests and the fuzz tests: it follows the emitted IR itself
(not the plan's tree), so a test can check that the cascade picks what the tree picks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dcmlir.ir.mlir import ir

_PREDICATES: dict[int, Callable[[int, int], bool]] = {
    0: lambda a, b: a == b,
    1: lambda a, b: a != b,
    6: lambda a, b: a < b,  # ult (values are non-negative)
    7: lambda a, b: a <= b,  # ule
    8: lambda a, b: a > b,  # ugt
    9: lambda a, b: a >= b,  # uge
}


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "arith.ori": lambda a, b: a or b,
    "arith.andi": lambda a, b: a and b,
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
}


def walk_cascade(
    func: ir.Operation,
    arg_shapes: list[tuple[int, ...]],
    result: int = 0,
    selects: list[bool] | None = None,
) -> tuple[ir.Operation, list[bool]]:
    """Follow the function's scf.if branches for given argument shapes.

    Returns the linalg op that yields the function's result ``result`` on the
    taken path and the branch taken at each scf.if (True: then); each arith.select evaluated
    on the way is appended to ``selects``. Only what the cascade uses is evaluated: constants,
    tensor.dim of arguments, arith.cmpi, the integer ops of the table's offset, arith.select,
    the case table (``util.buffer.constant`` and ``util.buffer.load``), scf.if, scf.yield.
    """
    env: dict[ir.Value, Any] = {}
    path: list[bool] = []

    def run(block: ir.Block) -> Any:
        for op in block.operations:
            name = op.operation.name
            if name == "arith.constant" and isinstance(op.result.type, ir.IndexType):
                env[op.result] = ir.IntegerAttr(op.attributes["value"]).value
            elif name == "tensor.dim" and isinstance(op.operands[0], ir.BlockArgument):
                shape = arg_shapes[op.operands[0].arg_number]
                env[op.result] = shape[env[op.operands[1]]]
            elif name == "arith.cmpi":
                predicate = ir.IntegerAttr(op.attributes["predicate"]).value
                env[op.result] = _PREDICATES[predicate](env[op.operands[0]], env[op.operands[1]])
            elif name in _BINARY:
                env[op.result] = _BINARY[name](env[op.operands[0]], env[op.operands[1]])
            elif name == "util.buffer.constant":  # the case table: its bytes
                env[op.result] = bytes(int(v) & 0xFF for v in op.attributes["value"])
            elif name == "util.buffer.load":  # (table, its size, offset, length 1)
                table, size, offset, length = (env[v] for v in op.operands)
                assert len(table) == size and length == 1 and 0 <= offset < size
                env[op.result] = table[offset]
            elif name == "arith.index_castui":
                env[op.result] = env[op.operands[0]]
            elif name == "arith.select":
                chosen = op.operands[1] if env[op.operands[0]] else op.operands[2]
                if selects is not None:
                    selects.append(bool(env[op.operands[0]]))
                env[op.result] = env[chosen]
            elif name == "scf.if":
                taken = bool(env[op.operands[0]])
                path.append(taken)
                env[op.results[0]] = run(op.regions[0 if taken else 1].blocks[0])
            elif name == "scf.yield":
                return env[op.operands[0]]
            elif name == "func.return":
                return env[op.operands[result]]
            elif name.startswith("linalg.") and name != "linalg.fill":
                env[op.results[0]] = op.operation
        raise AssertionError("block without a terminator")

    reached = run(func.regions[0].blocks[0])
    return reached, path
