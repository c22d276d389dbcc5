"""Which part of a decision tree a call evaluates: the top levels as branches, the
subtree a shape reaches as selects.

``dcmlir-emit-dispatch`` evaluates a tree with ``arith.cmpi`` + ``arith.select``, every
split of it on every call: IREE 3.13 ran the wrong branch when the tree was nested
``scf.if`` yielding the index (docs/design.md section 8). That costs about 11 ns a split
(IREE's VM, EPYC): the 40 splits of ``heldout_scores_h80``'s tree were 4% of its 10 us
calls. So a large tree's top levels become ``scf.if`` branches over tensors, like the
search over kernels that follows them (the form IREE compiles right), and each side
evaluates only its own subtree. The branches nest at most :data:`MAX_NESTING` deep, with
the range check and the search, below the 8 levels IREE 3.13 once miscompiled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dcmlir.dispatch.tree import DecisionTree, Node, Split, kernels_under, splits_under

__all__ = [
    "BRANCH_ABOVE",
    "MAX_BRANCH_LEVELS",
    "MAX_NESTING",
    "branch_levels",
    "branch_path",
    "evaluated_splits",
    "is_branched",
]

BRANCH_ABOVE = 4
"""A subtree with more splits than this is branched on its root (fewer cost under 50 ns)."""

MAX_BRANCH_LEVELS = 3
"""The tree's top levels that may become branches."""

MAX_NESTING = 6
"""Nested ``scf.if`` at most around a kernel: the range check, the tree's branches and the
balanced search over kernels (IREE 3.13 failed at run time with 8, passed with 7)."""


def branch_levels(tree: DecisionTree) -> int:
    """How many of the tree's top levels may be branches: the nesting left once the range
    check and the search over all its kernels are counted."""
    search = math.ceil(math.log2(max(1, len(tree.kernels()))))
    return max(0, min(MAX_BRANCH_LEVELS, MAX_NESTING - 1 - search))


def is_branched(node: Node, levels: int) -> bool:
    """Whether the dispatch branches on ``node``'s split, ``levels`` branch levels left."""
    return levels > 0 and isinstance(node, Split) and splits_under(node) > BRANCH_ABOVE


def branch_path(tree: DecisionTree, dims: Mapping[int, int]) -> tuple[int, Node]:
    """The branches a call with ``dims`` takes and the subtree it reaches (evaluated as
    selects)."""
    node, levels, branches = tree.root, branch_levels(tree), 0
    while is_branched(node, levels):
        assert isinstance(node, Split)
        branches += 1
        levels -= 1
        node = node.left if dims[node.loop] <= node.threshold else node.right
    return branches, node


def evaluated_splits(tree: DecisionTree, dims: Mapping[int, int]) -> int:
    """The splits a call with ``dims`` evaluates: the branches on its path, then every
    split of the subtree it reaches (as selects), unless that subtree has one kernel."""
    branches, node = branch_path(tree, dims)
    selects = 0 if len(kernels_under(node)) == 1 else splits_under(node)
    return branches + selects
