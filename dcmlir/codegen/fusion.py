"""What IREE fuses into a contraction's dispatch: the consumers a dispatch branch carries.

``dcmlir-emit-dispatch`` clones these into every branch after the kernel, so each
branch still forms one dispatch with them (docs/design.md section 8). A branch is an
``scf.if`` region (or a ``flow.dispatch.region``), and IREE forms dispatches inside it:
an elementwise consumer left outside it becomes a dispatch of its own, which re-reads
the op's whole output (measured on GPT-2: its GELU and residual adds cost 3-6% of the
model at T >= 16).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from dcmlir.ir.mlir import arith, ir, tensor

__all__ = ["FusedGroup", "fused_consumers"]

Dropped = tuple[int, ...]
"""Positions of a value's unit dims that the branch's clone leaves out (a model's
``[T, N] -> [1, T, N]`` reshape, undone): the clone's type is the value's without them."""

_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


@dataclass(frozen=True)
class FusedGroup:
    """The elementwise consumers IREE fuses after ``op`` (bias, activation, residual add,
    head transposes; a DAG, such as GELU's, as well as a chain), in IR order.

    Every member reads ``op``'s result, directly or through other members; its other
    operands do not depend on ``op``; only the last member's result is read outside the
    group. A reshape that only adds unit dims (``[T, N] -> [1, T, N]``) may sit between
    members: the branch's clones work on the value without those dims (a reshape inside
    a dispatch stops IREE from distributing it), and :meth:`restore` adds them back
    after the branch.
    """

    op: ir.Operation
    members: tuple[ir.Operation, ...] = ()

    def __len__(self) -> int:
        return len(self.members)

    @property
    def last(self) -> ir.Operation:
        """The member whose result leaves the group (the last in IR order)."""
        return self.members[-1] if self.members else self.op

    @property
    def output_type(self) -> ir.RankedTensorType:
        """The type of the branch's result: the last member's, without its dropped dims."""
        dropped = _dropped_dims(self.op, self.members)[self.last.results[0]]
        return _without(ir.RankedTensorType(self.last.results[0].type), dropped)

    def output_sizes(self) -> list[ir.Value]:
        """The values of the output's dynamic dims, read from the last member's init (a
        value defined before it), at the insertion point."""
        init = _init(self.last)
        shaped = ir.RankedTensorType(init.type)
        return [
            tensor.DimOp(init, _index(position)).result
            for position in range(shaped.rank)
            if shaped.is_dynamic_dim(position)
        ]

    def clone_after(self, first: ir.Operation) -> ir.Value:
        """Clones of the members reading ``first`` (the op's clone) instead of the op; returns
        the output's clone (of :attr:`output_type`)."""
        dropped = {self.op.results[0]: ()}
        clones = {self.op.results[0]: first.results[0]}
        for member in self.members:
            source = member.operands[0]
            if member.name in _RESHAPES:  # undone: its clone is its source's clone
                dropped[member.results[0]] = _added_dims(member)
                clones[member.results[0]] = clones[source]
                continue
            conversion = _conversion(member, dropped)
            assert conversion is not None, "checked when the group was formed"
            operands = [  # the collapses before the clone that reads them
                clones[operand]
                if operand in clones
                else _collapse(operand, drop)
                if drop
                else operand
                for operand, drop in zip(member.operands, conversion.operands, strict=True)
            ]
            clone = member.clone()
            for index, operand in enumerate(operands):
                clone.operands[index] = operand
            if conversion.loops:
                _drop_loops(clone, conversion.loops)
            result = member.results[0]
            drop = conversion.operands[-1]
            clone.results[0].set_type(_without(ir.RankedTensorType(result.type), drop))
            dropped[result] = drop
            clones[result] = clone.results[0]
        return clones[self.last.results[0]]

    def restore(self, value: ir.Value, sizes: Sequence[ir.Value]) -> ir.Value:
        """``value`` (of :attr:`output_type`) with the dropped unit dims added back: the
        type the group's users read."""
        wanted = ir.RankedTensorType(self.last.results[0].type)
        dropped = _dropped_dims(self.op, self.members)[self.last.results[0]]
        if not dropped:
            return value
        return tensor.ExpandShapeOp(
            wanted,
            value,
            _reassociation(wanted.rank, dropped),
            list(sizes),
            [
                ir.ShapedType.get_dynamic_size() if wanted.is_dynamic_dim(d) else wanted.shape[d]
                for d in range(wanted.rank)
            ],
        ).result


def fused_consumers(op: ir.Operation, taken: Collection[ir.Operation] = ()) -> FusedGroup:
    """The largest group of elementwise consumers IREE would fuse after ``op``.

    A member is a ``linalg.generic`` in ``op``'s block with parallel loops only, one
    result and no ``linalg.index``, reading group values through permutations (identity
    or transpose), or a reshape that only adds unit dims around a group value; its other
    operands do not depend on ``op``. Grown to a fixed point, then cut back to the longest
    prefix with one output, read only after it; a reduction (layernorm) is never a member.
    ``taken``: members of other ops' groups, never members of this one (SwiGLU's
    ``silu(gate) * up`` reads two contractions: it joins the first one's group only).
    """
    if len(op.results) != 1:
        return FusedGroup(op)
    order = {member: position for position, member in enumerate(op.block.operations)}
    members: list[ir.Operation] = []
    dropped: dict[ir.Value, Dropped] = {op.results[0]: ()}
    grown = True
    while grown:
        grown = False
        for value in list(dropped):
            for use in value.uses:
                user = use.owner.operation
                if user in members or user in taken or user.block != op.block:
                    continue
                drop = _member_drop(user, dropped, order, order[op])
                if drop is None:
                    continue
                members.append(user)
                dropped[user.results[0]] = drop
                grown = True
    members.sort(key=lambda member: order[member])
    for end in range(len(members), 0, -1):
        prefix = members[:end]
        if prefix[-1].name not in _RESHAPES and _single_output(op, prefix, order):
            return FusedGroup(op, tuple(prefix))
    return FusedGroup(op)


# --- forming the group ------------------------------------------------------------------------


def _member_drop(
    user: ir.Operation,
    dropped: dict[ir.Value, Dropped],
    order: dict[ir.Operation, int],
    start: int,
) -> Dropped | None:
    """The dropped dims of ``user``'s result if it can join the group, else None."""
    if len(user.results) != 1:
        return None
    inside = [operand for operand in user.operands if operand in dropped]
    outside = [operand for operand in user.operands if operand not in dropped]
    if len(set(inside)) != len(inside):
        return None  # reads a value twice (x * x): IREE does not fuse it either
    if any(_depends_on_group(operand, order, start) for operand in outside):
        return None
    if user.name in _RESHAPES:
        if user.name != "tensor.expand_shape" or dropped[inside[0]]:
            return None  # only [T, N] -> [1, T, N] on an undone value
        return _unit_dims(user)  # None: not such a reshape
    conversion = _conversion(user, dropped)
    return None if conversion is None else conversion.operands[-1]


def _depends_on_group(value: ir.Value, order: dict[ir.Operation, int], start: int) -> bool:
    """Whether ``value`` is computed, in ``op``'s block, from something after ``op``
    (conservative: a value defined after ``op`` that reads only earlier values is fine)."""
    pending = [value]
    seen: set[ir.Value] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        owner = current.owner
        if not isinstance(owner, ir.OpView | ir.Operation):
            continue  # a block argument
        owner = owner.operation
        position = order.get(owner)
        if position is None or position < start:
            continue  # defined in an enclosing block or before the op
        if position == start:
            return True
        pending.extend(owner.operands)
    return False


def _single_output(
    op: ir.Operation, members: Sequence[ir.Operation], order: dict[ir.Operation, int]
) -> bool:
    """Only the last member's result is read outside the group (after it)."""
    group = {op, *members}
    last = members[-1]
    for member in (op, *members):
        for result in member.results:
            outside = [use.owner.operation for use in result.uses]
            outside = [user for user in outside if user not in group]
            if outside and member != last:
                return False
            if any(_position(user, order) < order[last] for user in outside):
                return False
    return True


def _position(user: ir.Operation, order: dict[ir.Operation, int]) -> int:
    """The position in the group's block of ``user`` or of its ancestor there."""
    current: ir.Operation | None = user
    while current is not None and current not in order:
        parent = current.parent
        current = None if parent is None else parent.operation
    return len(order) if current is None else order[current]


def _dropped_dims(op: ir.Operation, members: Sequence[ir.Operation]) -> dict[ir.Value, Dropped]:
    dropped: dict[ir.Value, Dropped] = {op.results[0]: ()}
    for member in members:
        if member.name in _RESHAPES:
            dropped[member.results[0]] = _added_dims(member)
            continue
        conversion = _conversion(member, dropped)
        assert conversion is not None
        dropped[member.results[0]] = conversion.operands[-1]
    return dropped


# --- elementwise generics on values without their unit dims -----------------------------------


@dataclass(frozen=True)
class _Conversion:
    """How a member's clone drops unit dims: its loops to drop, and for each operand (the
    init last) the positions of its dims those loops index."""

    loops: tuple[int, ...]
    operands: tuple[Dropped, ...]


def _conversion(user: ir.Operation, dropped: dict[ir.Value, Dropped]) -> _Conversion | None:
    """The conversion of ``user`` (an elementwise generic reading group values), or None
    when it is not one IREE would fuse or its unit dims cannot be dropped consistently."""
    if user.name != "linalg.generic" or len(user.results) != 1:
        return None
    iterators = ir.ArrayAttr(user.attributes["iterator_types"])
    if any("parallel" not in str(kind) for kind in iterators):
        return None
    if any(inner.name == "linalg.index" for inner in _body(user)):
        return None
    maps = [entry.value for entry in ir.ArrayAttr(user.attributes["indexing_maps"])]
    inputs = len(user.operands) - len(user.results)
    loops: set[int] | None = None
    for index, operand in enumerate(user.operands):
        if operand not in dropped:
            continue
        if index >= inputs or not maps[index].is_permutation:
            return None
        reads = {_dim(maps[index].results[p]) for p in dropped[operand]}
        if loops is not None and reads != loops:
            return None
        loops = reads
    if loops is None:
        return None
    operands: list[Dropped] = []
    for amap, operand in zip(maps, user.operands, strict=True):
        positions: list[int] = []
        shaped = ir.RankedTensorType(operand.type)
        for position, expr in enumerate(amap.results):
            index = _dim(expr)
            if index is None and not isinstance(expr.maybe_downcast(), ir.AffineConstantExpr):
                return None
            if index in loops:
                if shaped.shape[position] != 1:
                    return None
                positions.append(position)
        if loops and len(positions) == shaped.rank and shaped.rank:
            return None  # would become rank 0
        operands.append(tuple(positions))
    return _Conversion(tuple(sorted(loops)), tuple(operands))


def _dim(expr: ir.AffineExpr) -> int | None:
    expr = expr.maybe_downcast()
    return expr.position if isinstance(expr, ir.AffineDimExpr) else None


def _body(op: ir.Operation) -> list[ir.Operation]:
    return [inner.operation for inner in op.regions[0].blocks[0].operations]


def _drop_loops(clone: ir.Operation, loops: tuple[int, ...]) -> None:
    """Rewrite ``clone``'s indexing maps and iterators without ``loops`` (unit loops)."""
    maps = [entry.value for entry in ir.ArrayAttr(clone.attributes["indexing_maps"])]
    count = maps[0].n_dims
    kept = [loop for loop in range(count) if loop not in loops]
    renumber = {loop: position for position, loop in enumerate(kept)}
    new_maps = []
    for amap in maps:
        exprs = []
        for expr in amap.results:
            index = _dim(expr)
            if index is None:
                exprs.append(expr)
            elif index not in loops:
                exprs.append(ir.AffineDimExpr.get(renumber[index]))
        new_maps.append(ir.AffineMapAttr.get(ir.AffineMap.get(len(kept), 0, exprs)))
    clone.attributes["indexing_maps"] = ir.ArrayAttr.get(new_maps)
    iterators = ir.ArrayAttr(clone.attributes["iterator_types"])
    clone.attributes["iterator_types"] = ir.ArrayAttr.get([iterators[loop] for loop in kept])


def _unit_dims(reshape: ir.Operation) -> Dropped | None:
    """The unit dims an ``expand_shape`` adds (its result's dims beside the kept one of each
    group), or None when it does more than add unit dims."""
    wide = ir.RankedTensorType(reshape.results[0].type)
    narrow = ir.RankedTensorType(reshape.operands[0].type)
    added: list[int] = []
    for position, group in enumerate(_groups(reshape)):
        kept = [d for d in group if wide.shape[d] == narrow.shape[position]]
        if not kept:
            return None
        keep = kept[-1]
        if any(wide.shape[d] != 1 for d in group if d != keep):
            return None
        added += [d for d in group if d != keep]
    return tuple(sorted(added))


def _added_dims(reshape: ir.Operation) -> Dropped:
    added = _unit_dims(reshape)
    assert added is not None, "checked when the group was formed"
    return added


def _groups(reshape: ir.Operation) -> list[list[int]]:
    return [
        [ir.IntegerAttr(dim).value for dim in ir.ArrayAttr(group)]
        for group in ir.ArrayAttr(reshape.attributes["reassociation"])
    ]


def _reassociation(rank: int, dropped: Dropped) -> list[list[int]]:
    """Groups of a rank-``rank`` shape's dims, each kept dim with the dropped dims before
    it (trailing dropped dims join the last group)."""
    groups: list[list[int]] = []
    pending: list[int] = []
    for dim in range(rank):
        pending.append(dim)
        if dim not in dropped:
            groups.append(pending)
            pending = []
    if pending:
        groups[-1] += pending
    return groups


def _without(shaped: ir.RankedTensorType, dropped: Dropped) -> ir.RankedTensorType:
    shape = [size for position, size in enumerate(shaped.shape) if position not in dropped]
    return ir.RankedTensorType.get(
        shape, shaped.element_type, shaped.encoding, loc=ir.Location.unknown()
    )


def _collapse(value: ir.Value, dropped: Dropped) -> ir.Value:
    """``value`` without its unit dims at ``dropped`` (a ``tensor.collapse_shape``)."""
    shaped = ir.RankedTensorType(value.type)
    return tensor.CollapseShapeOp(
        _without(shaped, dropped), value, _reassociation(shaped.rank, dropped)
    ).result


def _init(op: ir.Operation) -> ir.Value:
    """A destination-style op's (one) init operand."""
    return op.operands[len(op.operands) - len(op.results)]


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result
