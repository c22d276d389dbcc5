"""The result of tuning: the plan file and its decision tree over the dynamic dims.

In data-flow order: :mod:`~dcmlir.dispatch.tree` (a selection becomes a tree),
:mod:`~dcmlir.dispatch.workload_plan` (one workload's kernels, tree and shapes),
:mod:`~dcmlir.dispatch.plan` (every workload of a module, the versioned file), with
:mod:`~dcmlir.dispatch.json_fields` reading and writing its JSON;
:mod:`~dcmlir.dispatch.case_table` (the tree as a table, read with one load per call).
``dcmlir-emit-dispatch`` (:mod:`dcmlir.passes.emit_dispatch`) turns a plan into IR.
"""

from dcmlir.dispatch.plan import LEVELS, PLAN_FORMAT, Plan, PlanError
from dcmlir.dispatch.tree import (
    MAX_DIM_VALUE,
    DecisionTree,
    Leaf,
    Node,
    Split,
    TreeReport,
    decode_float,
    encode_float,
    fit_tree,
    kernels_under,
    node_from_json,
)
from dcmlir.dispatch.workload_plan import (
    ExactShape,
    PlannedDim,
    PlannedKernel,
    PlannedShape,
    WorkloadPlan,
)

__all__ = [
    "LEVELS",
    "MAX_DIM_VALUE",
    "PLAN_FORMAT",
    "DecisionTree",
    "ExactShape",
    "Leaf",
    "Node",
    "Plan",
    "PlanError",
    "PlannedDim",
    "PlannedKernel",
    "PlannedShape",
    "Split",
    "TreeReport",
    "WorkloadPlan",
    "decode_float",
    "encode_float",
    "fit_tree",
    "kernels_under",
    "node_from_json",
]
