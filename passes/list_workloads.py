"""``dcmlir-list-workloads``: report every dynamic-shape linalg op as a workload.

An analysis: the IR is not changed. Each workload becomes a remark at its op
(kind, iteration space with ranges, element types, structural key); with
``json=FILE`` (``json=-`` for stdout) the same goes out as a JSON document
that the tuner and scripts read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from dcmlir.ir.mlir import ir, source_loc
from dcmlir.ir.pass_base import ModulePass, PassContext, option
from dcmlir.workload import Workload, workloads


@dataclass(frozen=True)
class ListWorkloadsPass(ModulePass):
    name = "dcmlir-list-workloads"
    summary = "report each dynamic-shape linalg op as a workload (remarks, optional JSON)"

    json: str = option("", "also write the workloads as JSON to this file ('-' for stdout)")

    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        source = ctx.diagnostics.source_name
        found: list[Workload] = []
        skipped: list[dict[str, str]] = []
        for op, result in workloads(module, source):
            if isinstance(result, Workload):
                found.append(result)
                ctx.remark(op, f"workload {result.describe()}")
                continue
            skipped.append(
                {
                    "op": op.name,
                    "location": str(source_loc(op.location, source)),
                    "reason": str(result),
                }
            )
            ctx.remark(op, f"not a workload, left to IREE: {result}")
        if self.json:
            self.write_json(ctx, build_report(source, found, skipped))

    def write_json(self, ctx: PassContext, report: dict[str, object]) -> None:
        text = json.dumps(report, indent=2) + "\n"
        if self.json == "-":
            ctx.stdout.write(text)
            return
        try:
            with open(self.json, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            raise ctx.fail(
                ir.Location.unknown(), f"cannot write '{self.json}': {err.strerror}"
            ) from None


def build_report(
    source: str, found: list[Workload], skipped: list[dict[str, str]]
) -> dict[str, object]:
    """The JSON document: workloads in IR order, plus how many distinct keys they share."""
    return {
        "source": source,
        "workloads": [w.to_json() for w in found],
        "distinct_keys": len({w.key for w in found}),
        "skipped": skipped,
    }
