"""A whole model's workloads as a graph: where model time goes and how the budget is split.

Tuning a model is tuning its distinct workloads (identical ops in different layers
share a structural key and are tuned once) under one measurement budget. This
module keeps the model's view of them:

- a :mod:`networkx` graph whose nodes are the model's dynamic contractions (one per
  op, with its key) and whose edges are the producer/consumer links between them
  through the ops dcmlir leaves to IREE (softmax, layernorm, elementwise, reshapes);
- each key's estimated share of model time: IREE's default time of the op, measured
  at a few probe shapes and interpolated over the range, summed over the shapes a
  run can have and multiplied by the number of ops with that key;
- the budget split: a floor per workload, the rest in proportion to the shares.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import networkx as nx

from dcmlir.codegen.kernel import unmeasurable
from dcmlir.cost_model import work
from dcmlir.files import write_atomic
from dcmlir.ir.mlir import ir
from dcmlir.shapes import MAX_SHAPES, Shape, spread
from dcmlir.workload import NotAWorkload, Workload, dynamic_linalg_ops, workloads

FLOOR_SHARE = 0.25
"""Each workload gets at least this fraction of an even split of the budget: a workload
with a small share of model time is still tuned (its default may be far off)."""

PROBE_FRACTIONS = (0.0, 0.25, 0.5, 1.0)
"""Where in each dynamic dim's range IREE's default is probed for the time estimate."""


# --- shapes ----------------------------------------------------------------------------------


def run_shapes(workload: Workload) -> list[Shape]:
    """The dynamic shapes a run of the model can give this op, in the ranges.

    Loops with one run-time value (attention's T x T) give the diagonal only; other
    loops vary independently (every combination). A range past
    :data:`~dcmlir.shapes.MAX_SHAPES` shapes is sampled on a grid (:func:`spread`), so
    memory does not grow with the range.
    """
    tied = workload.tied_shapes()
    if tied is not None:
        return tied
    axes = []
    for dim in workload.dynamic_dims:
        if dim.range is None:
            raise ValueError(f"{workload.location}: loop d{dim.index} has no range")
        axes.append(dim.range)
    per_axis = max(2, int(MAX_SHAPES ** (1 / max(len(axes), 1))))
    values = [spread(lo, hi) if len(axes) == 1 else spread(lo, hi, per_axis) for lo, hi in axes]
    shapes: list[Shape] = [()]
    for axis in values:
        shapes = [(*shape, value) for shape in shapes for value in axis]
    return shapes


def probe_shapes(workload: Workload) -> list[Shape]:
    """A few shapes spread over the range (both ends included) to time IREE's default on."""
    found: list[Shape] = []
    for fraction in PROBE_FRACTIONS:
        shape = []
        for dim in workload.dynamic_dims:
            if dim.range is None:
                raise ValueError(f"{workload.location}: loop d{dim.index} has no range")
            lo, hi = dim.range
            shape.append(lo + round(fraction * (hi - lo)))
        if tuple(shape) not in found:
            found.append(tuple(shape))
    return found


def interpolated_seconds(
    workload: Workload, probes: Mapping[Shape, float], shapes: Sequence[Shape]
) -> list[float]:
    """Seconds at each shape from timings at a few: throughput interpolated in log(FLOPs).

    Without a usable probe every shape runs at one throughput (time proportional to
    FLOPs, in arbitrary units): the estimate is then a FLOPs share.
    """
    points = sorted(
        (math.log(work(workload, s)), math.log(work(workload, s) / t))
        for s, t in probes.items()
        if math.isfinite(t) and t > 0 and work(workload, s) > 0
    )
    found = []
    for shape in shapes:
        flops = work(workload, shape)
        if not points or flops <= 0:
            found.append(flops * 1e-12)
            continue
        found.append(flops / math.exp(_interpolate(points, math.log(flops))))
    return found


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through ``points`` (sorted by x), constant beyond the ends."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


# --- the budget --------------------------------------------------------------------------------


def split_budget(
    weights: Mapping[str, float], budget: int, floor_share: float = FLOOR_SHARE
) -> dict[str, int]:
    """``budget`` measurements over the keys: a floor each, the rest by weight.

    The floor is ``floor_share`` of an even split (at least 1); the remainder goes by
    weight with largest-remainder rounding, so the parts add up to ``budget`` exactly
    (when ``budget`` covers one measurement per key).
    """
    keys = list(weights)
    if not keys:
        return {}
    floor = max(1, math.floor(floor_share * budget / len(keys)))
    if floor * len(keys) > budget:
        floor = max(1, budget // len(keys))
    rest = max(0, budget - floor * len(keys))
    total = sum(max(w, 0.0) for w in weights.values())
    exact = {k: rest * (max(weights[k], 0.0) / total if total > 0 else 1 / len(keys)) for k in keys}
    parts = {k: floor + math.floor(v) for k, v in exact.items()}
    left = budget - sum(parts.values())
    by_remainder = sorted(keys, key=lambda k: (-(exact[k] - math.floor(exact[k])), keys.index(k)))
    for key in by_remainder[: max(left, 0)]:
        parts[key] += 1
    return parts


# --- the graph ---------------------------------------------------------------------------------


@dataclass
class KeyEstimate:
    """What the model spends on one workload key, per call, averaged over the run shapes."""

    key: str
    ops: int
    default_seconds: float  # all ops of this key together, IREE's default
    source: str  # "measured" (probes of IREE's default) or "flops" (no timing)
    probes: dict[Shape, float] = field(default_factory=dict)
    budget: int = 0
    measurements: int = 0
    tuned_seconds: float | None = None  # from the plan's per-shape costs, when tuned
    default_search_seconds: float | None = None  # IREE's default as the search saw it

    @property
    def speedup(self) -> float | None:
        if not self.tuned_seconds or self.default_search_seconds is None:
            return None
        return self.default_search_seconds / self.tuned_seconds

    @property
    def tuned_per_call(self) -> float | None:
        """The tuned seconds per call the report shows beside ``default_seconds``: those
        divided by the search's speedup when both are known, so the row reads default,
        tuned, ratio consistently. The search's own absolute estimate (``tuned_seconds``)
        stands beside its own default (``default_search_seconds``); the probes measured
        the default apart (other shapes, other moments), and set beside them it could show
        a tuned time slower than the default next to a speedup above 1."""
        if self.speedup and self.source == "measured" and self.default_seconds > 0:
            return self.default_seconds / self.speedup
        return self.tuned_seconds


@dataclass
class ModelGraph:
    """The model's dynamic contractions (nodes) and their links through untuned ops (edges)."""

    source: str
    graph: nx.DiGraph
    workloads: dict[str, Workload]  # distinct, by key, in first-seen order
    left_to_iree: list[dict[str, str]] = field(default_factory=list)
    estimates: dict[str, KeyEstimate] = field(default_factory=dict)
    level: str = "input"

    @classmethod
    def from_module(cls, module: ir.Operation, source: str) -> ModelGraph:
        """Nodes in IR order (``op0``, ``op1``...); edges found by walking each op's uses."""
        graph = nx.DiGraph()
        found: dict[str, Workload] = {}
        node_of: dict[ir.Operation, str] = {}
        skipped: list[dict[str, str]] = []
        instances: dict[str, list[Workload]] = {}
        for op, result in workloads(module, source):
            reason = str(result) if isinstance(result, NotAWorkload) else unmeasurable(result)
            if reason is not None:
                skipped.append({"op": op.name, "reason": reason})
                continue
            node = f"op{len(node_of)}"
            node_of[op] = node
            instances.setdefault(result.key, []).append(result)
            found.setdefault(result.key, result)
            graph.add_node(
                node,
                key=result.key,
                kind=result.kind,
                op=result.op_name,
                location=result.location,
                space="x".join(d.describe() for d in result.dims),
            )
        for key, seen in instances.items():
            found[key] = _common_ties(found[key], seen)
        for op, node in node_of.items():
            for target, through in _consumers(op, node_of).items():
                graph.add_edge(node, target, through=through)
        other = Counter(s["op"] for s in skipped)
        other.update(_unanalysed_dynamic_ops(module))
        graph.graph["left_to_iree"] = dict(other)
        return cls(source, graph, found, skipped)

    # -- queries -------------------------------------------------------------------------------
    def ops_of(self, key: str) -> list[str]:
        return [n for n, data in self.graph.nodes(data=True) if data["key"] == key]

    def counts(self) -> dict[str, int]:
        return {key: len(self.ops_of(key)) for key in self.workloads}

    def estimate(
        self, default_times: Callable[[Workload], Mapping[Shape, float]] | None = None
    ) -> dict[str, KeyEstimate]:
        """Each key's IREE-default seconds per model call, averaged over its run shapes.

        ``default_times(workload)`` gives measured seconds of IREE's default at probe
        shapes (:func:`probe_shapes`); without it (or without a finite probe) the
        estimate is proportional to FLOPs.
        """
        estimates = {}
        for key, workload in self.workloads.items():
            probes = dict(default_times(workload)) if default_times is not None else {}
            shapes = run_shapes(workload)
            seconds = interpolated_seconds(workload, probes, shapes)
            measured = any(math.isfinite(t) and t > 0 for t in probes.values())
            estimates[key] = KeyEstimate(
                key,
                len(self.ops_of(key)),
                len(self.ops_of(key)) * sum(seconds) / len(seconds),
                "measured" if measured else "flops",
                probes,
            )
        self.estimates = estimates
        return estimates

    def shares(self) -> dict[str, float]:
        total = sum(e.default_seconds for e in self.estimates.values())
        return {
            key: (e.default_seconds / total if total > 0 else 1 / len(self.estimates))
            for key, e in self.estimates.items()
        }

    def split(self, budget: int) -> dict[str, int]:
        """The budget per key (:func:`split_budget` over the shares); stored in the estimates."""
        parts = split_budget(self.shares(), budget)
        for key, part in parts.items():
            self.estimates[key].budget = part
        return parts

    # -- output --------------------------------------------------------------------------------
    def table(self) -> list[str]:
        """'Where model time goes': one row per key, most expensive first."""
        shares = self.shares()
        rows = [
            (
                "key",
                "kind",
                "iteration space",
                "ops",
                "IREE default ms/call",
                "share",
                "budget",
                "measured",
                "tuned ms/call (est.)",
                "est. speedup",
            )
        ]
        order = sorted(self.estimates, key=lambda k: -self.estimates[k].default_seconds)
        for key in order:
            est, workload = self.estimates[key], self.workloads[key]
            unit = 1e3 if est.source == "measured" else None
            rows.append(
                (
                    key,
                    workload.kind,
                    "x".join(d.describe() for d in workload.dims),
                    str(est.ops),
                    f"{est.default_seconds * unit:.3f}" if unit else "(FLOPs only)",
                    f"{shares[key]:.1%}",
                    str(est.budget),
                    str(est.measurements),
                    f"{tuned * 1e3:.3f}" if (tuned := est.tuned_per_call) else "-",
                    f"{est.speedup:.2f}x" if est.speedup else "-",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        left = {0, 1, 2}
        lines = [
            "  ".join(
                cell.ljust(w) if i in left else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        others = self.graph.graph.get("left_to_iree", {})
        if others:
            listed = ", ".join(f"{n} {name}" for name, n in sorted(others.items()))
            lines.append(f"left to IREE (not estimated): {listed}")
        return lines

    def summary(self) -> str:
        edges = self.graph.number_of_edges()
        return (
            f"model graph: {self.graph.number_of_nodes()} dynamic contractions, "
            f"{len(self.workloads)} distinct workloads, {edges} producer/consumer links"
        )

    def to_json(self) -> dict[str, Any]:
        shares = self.shares() if self.estimates else {}
        data = nx.node_link_data(self.graph, edges="edges")
        return {
            "source": self.source,
            "level": self.level,
            "graph": data,
            "workloads": [
                {
                    "key": key,
                    "kind": workload.kind,
                    "space": "x".join(d.describe() for d in workload.dims),
                    "ops": self.ops_of(key),
                    "equal_loops": [list(g) for g in workload.equal_loops],
                    **(_estimate_json(self.estimates[key], shares[key]) if shares else {}),
                }
                for key, workload in self.workloads.items()
            ],
            "left_to_iree": self.left_to_iree,
        }

    def save(self, path: str | Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=1) + "\n")


def graph_path_for(plan_path: str | Path) -> Path:
    """Where the graph of a plan is saved: ``plan.json`` -> ``plan.graph.json``."""
    path = Path(plan_path)
    return path.with_name(path.stem + ".graph.json")


def _estimate_json(est: KeyEstimate, share: float) -> dict[str, Any]:
    return {
        "default_seconds": est.default_seconds,
        "estimate_from": est.source,
        "share": share,
        "budget": est.budget,
        "measurements": est.measurements,
        "probes": [{"dims": list(s), "seconds": t} for s, t in est.probes.items()],
        "tuned_seconds": est.tuned_seconds,
        "default_search_seconds": est.default_search_seconds,
    }


def _common_ties(first: Workload, seen: Sequence[Workload]) -> Workload:
    """The workload with only the equal-loop groups every op of its key has."""
    groups = set(first.equal_loops)
    for other in seen[1:]:
        groups &= set(other.equal_loops)
    if groups == set(first.equal_loops):
        return first
    return replace(first, equal_loops=tuple(g for g in first.equal_loops if g in groups))


def _consumers(start: ir.Operation, nodes: Mapping[ir.Operation, str]) -> dict[str, list[str]]:
    """Workload nodes reached from ``start``'s results, each with the untuned ops on the way."""
    found: dict[str, list[str]] = {}
    queue: deque[tuple[ir.Operation, list[str]]] = deque([(start, [])])
    visited: set[ir.Operation] = {start}
    while queue:
        op, path = queue.popleft()
        for result in op.results:
            for use in result.uses:
                user = use.owner.operation
                if user in visited:
                    continue
                visited.add(user)
                if user in nodes:
                    found.setdefault(nodes[user], path)
                    continue
                queue.append((user, [*path, user.name]))
    return found


def _unanalysed_dynamic_ops(module: ir.Operation) -> Counter[str]:
    """Dynamic linalg ops the workload analysis does not list (no indexing maps: softmax)."""
    listed = set(dynamic_linalg_ops(module))
    dynamic = ir.ShapedType.get_dynamic_size()
    found: Counter[str] = Counter()

    def visit(op: ir.Operation) -> ir.WalkResult:
        if not op.name.startswith("linalg.") or op.name == "linalg.fill" or op in listed:
            return ir.WalkResult.ADVANCE
        if any(
            isinstance(r.type, ir.RankedTensorType) and dynamic in r.type.shape for r in op.results
        ):
            found[op.name] += 1
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found
