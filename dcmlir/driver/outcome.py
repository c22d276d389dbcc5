"""What ``dcmlir.tune`` hands back: the plan and, per workload, the search behind it.

The CLI prints :meth:`TuneReport.lines` (per workload: kernels, tree, measurements
against exhaustive tuning) and :meth:`TuneReport.model_lines` (where model time goes
and how the budget followed it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dcmlir.codegen.kernel import input_dtypes, input_shapes
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.search.model_graph import ModelGraph
from dcmlir.search.selection import weight_layouts
from dcmlir.search.shape_generic import SearchResult
from dcmlir.space import packing_problem
from dcmlir.workload import Workload


@dataclass
class WorkloadReport:
    """One workload's search and the plan made of it: kept together so that the report
    can set the plan beside the measurements it cost."""

    workload: Workload
    search: SearchResult
    plan: WorkloadPlan

    @property
    def exhaustive(self) -> int:
        """Pairs per-shape exhaustive tuning of the same space would time."""
        return len(self.search.candidates) * len(self.search.shapes)


@dataclass
class TuneReport:
    """The plan (also written to ``output``) with what the CLI and tests report about it."""

    plan: Plan
    workloads: list[WorkloadReport] = field(default_factory=list)
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # dynamic ops left to IREE, with reasons
    graph: ModelGraph | None = None
    level: str = "input"
    level_reason: str = ""
    probes: int = 0  # measurements of IREE's default for the budget split
    graph_path: Path | None = None

    @property
    def measurements(self) -> int:
        """Measurements the whole tuning counted: the probes and every search's."""
        return self.probes + sum(item.search.measurements for item in self.workloads)

    @property
    def measured_now(self) -> int:
        """Measurements this run timed itself (the rest came from the records)."""
        return sum(item.search.measured_now for item in self.workloads)

    def model_lines(self) -> list[str]:
        """The level, the graph and the table of where model time goes (and the split)."""
        if self.graph is None:
            return []
        lines = [f"level: {self.level} ({self.level_reason})", self.graph.summary()]
        if self.plan.predicted:
            lines.append("where model time goes, by FLOPs (a predicted plan times nothing):")
        elif self.probes:
            lines.append(
                "where model time goes, IREE's default per call averaged over the range "
                f"(from {self.probes} probe measurements); the budget follows the shares:"
            )
        elif len(self.workloads) > 1:
            lines.append(
                "where model time goes, by FLOPs (budget too small to probe IREE's default); "
                "the budget follows the shares:"
            )
        else:
            lines.append("where model time goes (one workload: the whole budget is its own):")
        lines += [f"  {line}" for line in self.graph.table()]
        lines.append(
            f"total: {self.measurements} measurements ({self.probes} probes), "
            f"{self.seconds:.0f} s tuning wall time"
        )
        return lines

    def lines(self) -> list[str]:
        """Per workload: its kernels and tree, and its measurements against exhaustive tuning."""
        if self.plan.predicted:
            return self._predicted_lines()
        out = []
        for item in self.workloads:
            search, plan = item.search, item.plan
            report = plan.report
            out.append(
                f"{item.workload.kind} key={item.workload.key} range {plan.describe_range()}: "
                f"{len(plan.kernels)} kernels, tree depth {plan.tree.depth} "
                f"(accuracy {report.accuracy:.0%}), {search.measurements} measurements "
                f"({search.measured_now} new) vs {item.exhaustive} exhaustive "
                f"({item.exhaustive / max(search.measurements, 1):.0f}x fewer), "
                f"{search.seconds:.0f} s"
            )
            for index, kernel in enumerate(plan.kernels):
                shapes = sum(1 for s in plan.shapes if s.kernel == index)
                out.append(f"  kernel {index}: {kernel.candidate_key} ({shapes} shapes)")
            out += _layout_lines(item.workload, plan)
        return out

    def _predicted_lines(self) -> list[str]:
        """Per workload of a predicted plan: its kernels, where each is chosen, its time there."""
        out = []
        for item in self.workloads:
            plan, search = item.plan, item.search
            out.append(
                f"{item.workload.kind} key={item.workload.key} range {plan.describe_range()}: "
                f"{len(plan.kernels)} kernels, tree depth {plan.tree.depth} "
                f"(accuracy {plan.report.accuracy:.0%}), 0 measurements: the offline model "
                f"over {len(search.candidates)} built candidates x {len(search.shapes)} shapes"
            )
            for index, kernel in enumerate(plan.kernels):
                mine = [s for s in plan.shapes if s.kernel == index]
                where = (
                    f", e.g. {list(mine[-1].dims)}: {mine[-1].predicted * 1e6:.1f} us"
                    if mine
                    else ""
                )
                out.append(f"  kernel {index}: {kernel.candidate_key} ({len(mine)} shapes{where})")
        return out


def _layout_lines(workload: Workload, plan: WorkloadPlan) -> list[str]:
    """A line where the plan keeps a constant weight in more than one layout (``dcmlir tune
    --weight-layouts``): what the second copy costs in memory, and why it is there."""
    layouts = weight_layouts([kernel.candidate for kernel in plan.kernels])
    if layouts < 2 or packing_problem(workload) is not None:
        return []
    lo = {dim.loop: dim.range[0] for dim in plan.dims}
    weight = math.prod(input_shapes(workload, lo)[workload.constant_operands[0]])
    copy = weight * np.dtype(input_dtypes(workload)[workload.constant_operands[0]]).itemsize
    more = f"{copy / 2**20:.1f} MiB" if copy >= 2**20 else f"{copy / 2**10:.0f} KiB"
    return [
        f"  its constant weight is kept in {layouts} layouts ({more} more): "
        "each kernel family alone was slower than an IREE build somewhere; "
        "--weight-layouts 1 keeps one"
    ]
