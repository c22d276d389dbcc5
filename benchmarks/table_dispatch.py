"""Benchmark: what a call pays for the dispatch's decision, read from the case table or
evaluated as the tree (docs/design.md section 8, "The case table").

For each workload of a ``never_slower.py`` records folder, the plan's dispatched module is
built twice with the same flags (``dcmlir compile``'s: the same kernels, the same loop
alignment): ``table``, as ``dcmlir compile`` emits it (each shape's case read with one
``util.buffer.load``), and ``tree`` (``dcmlir-emit-dispatch{table=false}``: the exact
shapes' equality tests, the tree's branches and selects). Beside them IREE's default and
data-tiling builds as a user gets them. All are timed side by side in one process, call by
call and interleaved (:func:`dcmlir.driver.module_timing.timed_side_by_side`), every output
first checked against IREE's default. Short calls (small T) show the decision's cost.

Reproduce: ``python benchmarks/table_dispatch.py --dir results/never_slower_xeon-aligned/b60
--workloads novel_scores_h32,unseen_context_h80,attention_scores --shapes 1,2,4,5,7,9,13,16,31``
(prints the table).
"""

from __future__ import annotations

import io
from pathlib import Path

from loop_alignment import arguments, iree_builds, measure

import dcmlir
from dcmlir.build.compiler import build
from dcmlir.dispatch import Plan
from dcmlir.driver.loading import add_module_attributes
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext
from dcmlir.passes.emit_dispatch import emit_dispatch
from dcmlir.passes.split_entry import split_entry


def tree_form(text: str, plan: Plan, split: bool) -> str:
    """The module with the plan's dispatch evaluated as the tree (``split``: the entry
    split first, as ``dcmlir compile`` did)."""
    engine = DiagnosticEngine("tree.mlir")
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        assert module is not None, engine.first_error()
        ctx = PassContext(engine, io.StringIO())
        if split:
            split_entry(ctx, module.operation, plan)
        emit_dispatch(ctx, module.operation, plan, table=False)
        add_module_attributes(module, plan.target)
        return str(module)


def builds(source: Path, plan: Plan) -> dict[str, bytes]:
    """Build name -> module: the plan's table and tree forms, IREE's two builds."""
    text = source.read_text()
    compiled = dcmlir.compile(source, plan=plan, stream=io.StringIO())
    if "util.buffer.load" not in compiled.mlir:
        raise SystemExit(f"{source.stem}: its plan keeps the tree (no table to compare)")
    tree = tree_form(text, plan, compiled.split is not None)
    return {
        "table": compiled.vmfb,
        "tree": build(tree, plan.target, compiled.flags, placement=plan.placement).vmfb,
        **iree_builds(text),
    }


def main() -> int:
    folder, names, shapes, rounds = arguments(__doc__, "1,2,4,5,7,9,13,16,31")
    for name in names:
        ratios, best = measure(folder, name, shapes, rounds, builds)
        print(f"\n{name} ({folder}): time over the faster IREE build, and table over tree")
        print("| T | table | tree | table / tree | faster IREE build (us) |")
        print("|---:|---:|---:|---:|---:|")
        for t in shapes:
            table, tree = ratios["table"][t], ratios["tree"][t]
            print(f"| {t} | {table:.3f} | {tree:.3f} | {table / tree:.3f} | {best[t] * 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
