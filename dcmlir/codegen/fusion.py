"""What IREE fuses into a contraction's dispatch: the consumers a dispatch branch carries.

``dcmlir-emit-dispatch`` clones these into every branch after the kernel, so each
branch still forms one dispatch with them (docs/design.md section 8).
"""

from __future__ import annotations

from dcmlir.ir.mlir import ir

__all__ = ["fused_consumers"]


def fused_consumers(op: ir.Operation) -> tuple[tuple[ir.Operation, int], ...]:
    """The elementwise chain IREE fuses after ``op``: (consumer, operand index it reads).

    Each link is the only user of the previous result: a ``linalg.generic`` in the
    same block with parallel loops only and one result, reading the value as an input
    through a permutation (identity or transpose). That is what IREE's dispatch
    formation puts in the op's dispatch (bias, activation, residual add, head
    transposes); a reduction (layernorm) or a reshape ends the chain.
    """
    chain: list[tuple[ir.Operation, int]] = []
    current = op
    while len(current.results) == 1:
        uses = list(current.results[0].uses)
        if len(uses) != 1:
            break
        user, operand = uses[0].owner.operation, uses[0].operand_number
        if not _fusable_consumer(user, operand, op):
            break
        chain.append((user, operand))
        current = user
    return tuple(chain)


def _fusable_consumer(user: ir.Operation, operand: int, producer: ir.Operation) -> bool:
    if user.name != "linalg.generic" or len(user.results) != 1:
        return False
    if user.parent != producer.parent:
        return False
    n_inputs = len(user.operands) - len(user.results)
    if operand >= n_inputs:
        return False
    iterators = ir.ArrayAttr(user.attributes["iterator_types"])
    if any("parallel" not in str(kind) for kind in iterators):
        return False
    amap = ir.ArrayAttr(user.attributes["indexing_maps"])[operand].value
    return amap.is_permutation
