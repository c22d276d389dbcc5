"""The dispatcher of one workload: a decision tree from dynamic dim values to a kernel.

DietCode's last step (docs/design.md, section 1 (the idea), item 5, and section 8
(plans, the decision tree and the dispatch shape)): the selection says which
kernel runs each shape; a scikit-learn ``DecisionTreeClassifier`` learns that
map from the dynamic dims, and the learned tree is exported to a small plain
tree with integer thresholds (``value <= threshold`` goes left) that the plan
stores as JSON and ``dcmlir-emit-dispatch`` turns into an ``scf.if`` cascade.

Without a depth cap the tree reproduces the selection exactly (every shape is
a distinct point, so sklearn grows until every leaf is pure); a cap trades
exactness for a shorter cascade, and :class:`TreeReport` says what that costs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MAX_DIM_VALUE",
    "DecisionTree",
    "Leaf",
    "Node",
    "Split",
    "TreeReport",
    "decode_float",
    "encode_float",
    "fit_tree",
    "kernels_under",
    "node_from_json",
    "splits_under",
]

RANDOM_STATE = 0
"""sklearn breaks ties between equally good splits at random: fixed, so plans are reproducible."""

TRIED_STATES = 8
"""With several dims, ties between splits on different dims are common (a selection
cut along M and N is as pure split either way first) and the first pick can need
more leaves; this many fixed random states are tried and the smallest tree kept."""

MAX_DIM_VALUE = 2**63
"""Dim values lie in ``0..MAX_DIM_VALUE-1`` (a 64-bit index). sklearn holds features as
float32, exact only up to 2**24, so the tree is learnt on each value's rank among the
training shapes and its thresholds are mapped back to values (:func:`_learn`)."""


@dataclass(frozen=True)
class Leaf:
    """Run kernel ``kernel`` (an index into the plan's kernel list)."""

    kernel: int

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel}


@dataclass(frozen=True)
class Split:
    """``dims[loop] <= threshold``: go ``left``, else ``right``. ``loop``: the workload's loop."""

    loop: int
    threshold: int
    left: Node
    right: Node

    def to_json(self) -> dict[str, Any]:
        return {
            "loop": self.loop,
            "threshold": self.threshold,
            "left": self.left.to_json(),
            "right": self.right.to_json(),
        }


Node = Leaf | Split


MAX_TREE_DEPTH = 256
"""Deeper than any tree dcmlir writes (one leaf per sampled shape at most 256 deep)."""
_INDEX_RANGE = (-(2**63), 2**63 - 1)  # a threshold is compared as an MLIR ``index``


def node_from_json(obj: Mapping[str, Any], depth: int = 0) -> Node:
    """The inverse of ``to_json``; a ValueError naming what is missing or malformed."""
    if depth > MAX_TREE_DEPTH:
        raise ValueError(f"the tree is deeper than {MAX_TREE_DEPTH} levels")
    if "kernel" in obj and "loop" in obj:
        raise ValueError(
            f"tree node {_short(obj)} is both a leaf (kernel) and a split (loop); a node is one"
        )
    if "kernel" in obj:
        return Leaf(_int(obj, "kernel"))
    if "loop" in obj:
        threshold = _int(obj, "threshold")
        lo, hi = _INDEX_RANGE
        if not lo <= threshold <= hi:
            raise ValueError(f"tree threshold {threshold} does not fit a 64-bit index")
        return Split(
            _int(obj, "loop"),
            threshold,
            node_from_json(_mapping(obj, "left"), depth + 1),
            node_from_json(_mapping(obj, "right"), depth + 1),
        )
    raise ValueError(f"tree node {_short(obj)} is neither a leaf (kernel) nor a split (loop)")


def _short(obj: Mapping[str, Any]) -> str:
    """A node for an error line: its own fields, its children elided."""
    return repr({k: ("{...}" if isinstance(v, Mapping) else v) for k, v in obj.items()})


def _int(obj: Mapping[str, Any], name: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"tree node field '{name}' must be an integer, got {value!r}")
    return value


def _mapping(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    if not isinstance(value, Mapping):
        raise ValueError(f"tree node field '{name}' must be an object, got {value!r}")
    return value


@dataclass(frozen=True)
class DecisionTree:
    """A tree over the dynamic loops ``loops`` (one feature each, in this order)."""

    loops: tuple[int, ...]
    root: Node

    def __post_init__(self) -> None:
        for split in self.splits():
            if split.loop not in self.loops:
                raise ValueError(
                    f"tree splits on loop d{split.loop}, which is not one of its loops "
                    f"({', '.join(f'd{loop}' for loop in self.loops) or 'none'})"
                )

    def select(self, dims: Mapping[int, int] | Sequence[int]) -> int:
        """The kernel index for one shape: ``{loop: value}`` or values in ``loops`` order."""
        values = dims if isinstance(dims, Mapping) else self._by_loop(dims)
        node = self.root
        while isinstance(node, Split):
            node = node.left if values[node.loop] <= node.threshold else node.right
        return node.kernel

    def _by_loop(self, dims: Sequence[int]) -> dict[int, int]:
        if len(dims) != len(self.loops):
            raise ValueError(f"shape {tuple(dims)} has {len(dims)} values, the tree {self.loops}")
        return dict(zip(self.loops, dims, strict=True))

    @property
    def depth(self) -> int:
        """Splits on the longest path from the root (0: a single leaf)."""
        return _depth(self.root)

    def splits(self) -> list[Split]:
        return [node for node in _nodes(self.root) if isinstance(node, Split)]

    def leaves(self) -> list[Leaf]:
        return [node for node in _nodes(self.root) if isinstance(node, Leaf)]

    def kernels(self) -> list[int]:
        """The distinct kernels some leaf runs, ascending: what a dispatch has to build."""
        return kernels_under(self.root)

    def to_json(self) -> dict[str, Any]:
        return {"loops": list(self.loops), "root": self.root.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DecisionTree:
        loops = obj.get("loops")
        if not isinstance(loops, list) or not all(
            isinstance(loop, int) and not isinstance(loop, bool) for loop in loops
        ):
            raise ValueError(f"tree field 'loops' must be a list of integers, got {loops!r}")
        return cls(tuple(loops), node_from_json(_mapping(obj, "root")))


def _nodes(root: Node) -> list[Node]:
    found: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, Split):
            stack += [node.right, node.left]
    return found


def kernels_under(node: Node) -> list[int]:
    """The distinct kernels of the leaves under ``node``, ascending."""
    return sorted({leaf.kernel for leaf in _nodes(node) if isinstance(leaf, Leaf)})


def splits_under(node: Node) -> int:
    """The splits under ``node``, itself included."""
    return sum(isinstance(split, Split) for split in _nodes(node))


def _depth(node: Node) -> int:
    if isinstance(node, Leaf):
        return 0
    return 1 + max(_depth(node.left), _depth(node.right))


@dataclass(frozen=True)
class TreeReport:
    """How well the tree reproduces the selection on its training shapes.

    ``total_slowdown``: sum over shapes of the tree's kernel time over the sum
    of the selected kernel time, minus 1; ``geomean_slowdown``: the geometric
    mean of the per-shape ratio, minus 1; ``worst_slowdown``: the largest
    per-shape ratio, minus 1 (a geomean hides the one shape a user loses on).
    Each 0.0 for an exact tree, None without a cost table, ``inf`` where the
    tree picks a kernel that failed.
    """

    shapes: int
    accuracy: float
    mistakes: int
    depth: int
    leaves: int
    total_slowdown: float | None = None
    geomean_slowdown: float | None = None
    worst_slowdown: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "shapes": self.shapes,
            "accuracy": self.accuracy,
            "mistakes": self.mistakes,
            "depth": self.depth,
            "leaves": self.leaves,
            "total_slowdown": encode_float(self.total_slowdown),
            "geomean_slowdown": encode_float(self.geomean_slowdown),
            "worst_slowdown": encode_float(self.worst_slowdown),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TreeReport:
        return cls(
            shapes=int(obj["shapes"]),
            accuracy=float(obj["accuracy"]),
            mistakes=int(obj["mistakes"]),
            depth=int(obj["depth"]),
            leaves=int(obj["leaves"]),
            total_slowdown=decode_float(obj.get("total_slowdown"), "total_slowdown"),
            geomean_slowdown=decode_float(obj.get("geomean_slowdown"), "geomean_slowdown"),
            worst_slowdown=decode_float(obj.get("worst_slowdown"), "worst_slowdown"),
        )


def encode_float(value: float | None) -> float | str | None:
    """JSON has no infinity (a failed kernel's time): write it as the string ``"inf"``."""
    if value is None or math.isfinite(value):
        return value
    return "inf" if value > 0 else "-inf"


def decode_float(value: Any, where: str = "value") -> float | None:
    """The inverse of :func:`encode_float`; a ValueError naming ``where`` otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f'{where} must be a number, null or "inf", got {value!r}')
    return float(value)


def fit_tree(
    shapes: Sequence[Sequence[int]],
    choices: Sequence[int],
    costs: Sequence[Sequence[float]] | None = None,
    max_depth: int | None = None,
    loops: Sequence[int] | None = None,
) -> tuple[DecisionTree, TreeReport]:
    """Learn ``shape -> choices[i]`` and report accuracy and the cost of the mistakes.

    ``shapes``: the dynamic dim values of each training shape (every shape in
    range, or a sample the caller draws when the range is huge), one value per
    loop of ``loops`` (default ``0..n-1``). ``costs[i][k]``: seconds of kernel
    ``k`` on shape ``i`` (predicted or measured), for the report only.
    """
    X, y, loop_ids = _training_data(shapes, choices, loops)
    if costs is not None and len(costs) != len(shapes):
        raise ValueError(f"costs has {len(costs)} rows for {len(shapes)} shapes")
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"max_depth={max_depth} must be >= 0 (or None: no cap)")
    states = range(RANDOM_STATE, RANDOM_STATE + (TRIED_STATES if X.shape[1] > 1 else 1))
    best: tuple[tuple[int, int, int], DecisionTree, TreeReport] | None = None
    for state in states:
        tree = DecisionTree(loop_ids, _merge(_learn(X, y, loop_ids, max_depth, state)))
        report = _report(tree, X, y, costs)
        rank = (report.mistakes, report.leaves, report.depth)
        if best is None or rank < best[0]:
            best = (rank, tree, report)
    assert best is not None  # states is never empty
    return best[1], best[2]


def _training_data(
    shapes: Sequence[Sequence[int]], choices: Sequence[int], loops: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    if len(shapes) == 0:
        raise ValueError("no training shapes: a tree needs at least one shape")
    if len(shapes) != len(choices):
        raise ValueError(f"{len(shapes)} shapes but {len(choices)} choices")
    width = len(shapes[0])
    loop_ids = tuple(loops) if loops is not None else tuple(range(width))
    if len(loop_ids) != width or len(set(loop_ids)) != width:
        raise ValueError(f"loops {loop_ids} must name each of the {width} features once")
    rows = [tuple(int(v) for v in shape) for shape in shapes]
    for row in rows:
        if len(row) != width:
            raise ValueError(f"shape {row} has {len(row)} values, expected {width}")
        if any(v < 0 or v >= MAX_DIM_VALUE for v in row):
            raise ValueError(f"shape {row}: dim values must lie in 0..{MAX_DIM_VALUE - 1}")
    if len(set(rows)) != len(rows):
        duplicate = next(row for row in rows if rows.count(row) > 1)
        raise ValueError(f"shape {duplicate} appears more than once in the training shapes")
    if any(int(c) < 0 for c in choices):
        raise ValueError("kernel indices in choices must be >= 0")
    X = np.array(rows, dtype=np.int64).reshape(len(rows), width)
    return X, np.array([int(c) for c in choices], dtype=np.int64), loop_ids


def _learn(
    X: np.ndarray, y: np.ndarray, loops: tuple[int, ...], max_depth: int | None, state: int
) -> Node:
    """Fit sklearn's tree and rebuild it with integer thresholds."""
    classes = np.unique(y)
    if len(classes) == 1 or X.shape[1] == 0 or max_depth == 0:
        return Leaf(int(np.bincount(y).argmax()))  # ties: the lowest kernel index
    from sklearn.tree import DecisionTreeClassifier  # imported late: ~0.5 s

    # Ranks, not values: exact in float32 whatever the values (1..10**9 is not).
    values = [np.unique(X[:, column]) for column in range(X.shape[1])]
    ranks = np.stack([np.searchsorted(values[c], X[:, c]) for c in range(X.shape[1])], axis=1)
    model = DecisionTreeClassifier(max_depth=max_depth, random_state=state)
    model.fit(ranks.astype(np.float64), y)
    inner = model.tree_
    labels = model.classes_

    def build(node: int) -> Node:
        left, right = int(inner.children_left[node]), int(inner.children_right[node])
        if left == right:  # both -1: a leaf
            return Leaf(int(labels[int(np.argmax(inner.value[node][0]))]))
        feature = int(inner.feature[node])
        # rank <= t holds exactly when rank <= floor(t); between the two training values
        # either side of the cut, the midpoint (floored), as sklearn splits values.
        rank = math.floor(float(inner.threshold[node]))
        below, column = int(values[feature][rank]), values[feature]
        above = int(column[rank + 1]) if rank + 1 < len(column) else below
        threshold = below + (above - below) // 2
        return Split(loops[feature], threshold, build(left), build(right))

    return build(0)


def _merge(node: Node) -> Node:
    """Fold splits whose two sides decide the same way: a shorter cascade, same choices."""
    if isinstance(node, Leaf):
        return node
    left, right = _merge(node.left), _merge(node.right)
    if left == right:
        return left
    return Split(node.loop, node.threshold, left, right)


def _report(
    tree: DecisionTree,
    X: np.ndarray,
    y: np.ndarray,
    costs: Sequence[Sequence[float]] | None,
) -> TreeReport:
    picked = [tree.select(tuple(int(v) for v in row)) for row in X]
    mistakes = sum(1 for p, c in zip(picked, y, strict=True) if p != int(c))
    total = geomean = worst = None
    if costs is not None:
        total, geomean, worst = _slowdowns(picked, [int(c) for c in y], costs)
    return TreeReport(
        shapes=len(y),
        accuracy=1.0 - mistakes / len(y),
        mistakes=mistakes,
        depth=tree.depth,
        leaves=len(tree.leaves()),
        total_slowdown=total,
        geomean_slowdown=geomean,
        worst_slowdown=worst,
    )


def _slowdowns(
    picked: Sequence[int], chosen: Sequence[int], costs: Sequence[Sequence[float]]
) -> tuple[float, float, float]:
    """(total, geomean, worst) slowdown of the tree's picks over the selection's."""
    tree_time = chosen_time = log_sum = 0.0
    worst = 1.0
    for shape, (p, c) in enumerate(zip(picked, chosen, strict=True)):
        row = costs[shape]
        if max(p, c) >= len(row):
            raise ValueError(f"costs row {shape} has {len(row)} kernels; kernel {max(p, c)} used")
        mine, best = float(row[p]), float(row[c])
        tree_time += mine
        chosen_time += best
        ratio = 1.0 if p == c else _ratio(mine, best)
        log_sum += math.log(ratio) if math.isfinite(ratio) else math.inf
        worst = max(worst, ratio)
    total = 0.0 if tree_time == chosen_time else _ratio(tree_time, chosen_time) - 1.0
    geomean = math.exp(log_sum / len(picked)) - 1.0 if math.isfinite(log_sum) else math.inf
    return total, geomean, worst - 1.0


def _ratio(mine: float, best: float) -> float:
    """``mine / best``; a selected kernel without a finite time gives no information (1.0)."""
    if mine == best or not math.isfinite(best):
        return 1.0
    if not math.isfinite(mine) or best <= 0.0:
        return math.inf
    return mine / best if mine > 0.0 else 1.0
