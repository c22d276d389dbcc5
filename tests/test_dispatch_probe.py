"""IREE runs the kernel the plan picks: each kernel's op in a dispatched module is swapped
for a fill of the kernel's position, the module is built by IREE and called at shapes
across the range, and every output names the branch that ran.

The outputs of the real module cannot show a wrong pick: every kernel computes the same
result. An emission IREE 3.13 compiled to the wrong branch passed every output check:
the tree written as nested ``scf.if`` over an index (a551bf8, reverted) ran kernel 2
where this plan picks kernel 3, at T = 5..61 of ``attention_context``, 1.1-1.4x slower.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import CONTEXT
from test_plan_dispatch import DENSE, dense_plan, run_pass

from dcmlir.build.compiler import build
from dcmlir.dispatch import Plan
from dcmlir.ir.iree import load_function
from dcmlir.ir.mlir import arith, ir, linalg, parse_module
from dcmlir.passes.emit_dispatch import FALLBACK, KERNEL_ATTR

DATA = Path(__file__).parent / "data"

PROBE_T = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 23, 24, 31, 33, 47, 61, 64, 65, 77, 96, 101, 127)


def probe_module(text: str, plan: Plan, table: str = "always") -> str:
    """The dispatched module with each kernel's op replaced by a fill of its position in
    the plan's kernels (the fallback: -1); ``table``: the pass's option (always: the cases
    read from a table)."""
    (planned,) = plan.workloads
    position = {kernel.candidate_key: float(kernel.index) for kernel in planned.kernels}
    position[FALLBACK] = -1.0
    with ir.Context(), ir.Location.unknown():
        module = parse_module(text)
        count, diagnostics = run_pass(module, plan, table)
        assert count == 1, diagnostics
        assert ("util.buffer.load" in str(module)) == (table == "always"), "a table as asked"
        marked = _marked(module.operation)
        names = {ir.StringAttr(op.attributes[KERNEL_ATTR]).value for op in marked}
        kernels = {planned.kernels[k].candidate_key for k in planned.tree.kernels()}
        kernels |= {planned.kernels[e.kernel].candidate_key for e in planned.exact}
        assert names == kernels | {FALLBACK}, (
            "a clone of every kernel (the tree's branches may repeat one)"
        )
        for op in marked:
            key = ir.StringAttr(op.attributes[KERNEL_ATTR]).value
            with ir.InsertionPoint(op):
                value = arith.ConstantOp(ir.F32Type.get(), position[key]).result
                filled = linalg.fill(value, outs=[op.operands[-1]])
            op.results[0].replace_all_uses_with(filled)
            op.erase()
        return str(module)


def _marked(op: ir.Operation) -> list[ir.Operation]:
    """The ops carrying a kernel's name, in ``op``'s regions, outermost first."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                if KERNEL_ATTR in inner.attributes:
                    found.append(inner.operation)
                found += _marked(inner.operation)
    return found


def branch_ran(function: object, inputs: list[np.ndarray]) -> int:
    (out,) = function(*inputs)  # type: ignore[operator]
    assert np.all(out == out.flat[0]), "one fill per call"
    return int(out.flat[0])


@pytest.mark.parametrize("table", ["always", "never"], ids=["table", "tree"])
@pytest.mark.parametrize("case", ["attention_context", "dense"])
def test_iree_runs_the_branch_the_plan_picks(case: str, table: str) -> None:
    """attention_context: a 2-D plan with 6 kernels and a deep tree from a real tune
    (EPYC, budget 60; its `datatiled` kernel swapped for a config, so every kernel is one
    op); dense: the lit test's 3-kernel plan. Both read from the table (one load) and
    evaluated as the tree."""
    if case == "dense":
        plan, text = dense_plan(), DENSE
        shapes = [(m,) for m in range(0, 21)]

        def inputs(shape: tuple[int, ...]) -> list[np.ndarray]:
            return [np.ones((shape[0], 768), np.float32), np.ones((768, 768), np.float32)]

        def dims(shape: tuple[int, ...]) -> dict[int, int]:
            return {0: shape[0]}
    else:
        plan = Plan.load(str(DATA / "probe_attention_context.plan.json"))
        text = CONTEXT
        shapes = [(t, k) for t in PROBE_T for k in PROBE_T[::3]] + [(t, t) for t in PROBE_T]
        shapes += [(129, 5), (5, 129)]  # outside the range: the fallback

        def inputs(shape: tuple[int, ...]) -> list[np.ndarray]:
            t, k = shape
            return [np.ones((12, t, k), np.float32), np.ones((12, k, 64), np.float32)]

        def dims(shape: tuple[int, ...]) -> dict[int, int]:
            return {1: shape[0], 3: shape[1]}

    (planned,) = plan.workloads
    built = build(probe_module(text, plan, table), "llvm-cpu", [])
    function = load_function(built.vmfb, "context" if case != "dense" else "dense")
    wrong = {}
    for shape in shapes:
        if not all(dims(shape).values()):
            continue  # an empty output names no branch
        picked = planned.select(dims(shape))
        want = -1 if picked is None else picked.index
        got = branch_ran(function, inputs(shape))
        if got != want:
            wrong[shape] = (got, want)
    assert not wrong, f"(IREE ran, plan picks) by shape: {wrong}"
