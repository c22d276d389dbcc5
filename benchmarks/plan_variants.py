"""Benchmark: one kernel's time in different dispatched modules (docs/design.md section 8,
"The code's layout").

A tuned plan from ``never_slower.py`` and variants of it that run the same kernel where
the plan runs it, re-measured as ``never_slower.py`` re-measures a T (beside IREE's
default and data-tiling builds, call by call, 100 rounds, 3 fresh processes, the median
of the processes' ratios to the faster build):

- ``plan``: the plan as tuned;
- ``no-exact``: without its exact builds;
- ``KERNEL-alone``: one leaf, the kernel alone (plus the range check's fallback);
- ``default+KERNEL``: IREE's default up to T = 8, the kernel above;
- ``KERNEL-everywhere``: every leaf of the plan's tree the kernel (its kernel list whole).

Reproduce: ``python benchmarks/plan_variants.py --plan
results/never_slower_epyc-novel/b60/novel_context_h48.plan.json --kernel datatiled --shapes
33,65,127``.

``--placements``: instead, the plan compiled from stdin (no placement) and under each
placement of its code at another offset (:mod:`dcmlir.driver.placing`), the one the
tune chose marked: ``python benchmarks/plan_variants.py --placements --plan
results/never_slower_epyc-placement/b60/unseen_context_h80.plan.json --shapes
5,9,13,17,23,31,33,63,97,127``.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

from never_slower import remeasure

from dcmlir.dispatch import Plan
from dcmlir.driver.placing import _distinct_placements


def variants(plan: dict[str, Any], kernel: str) -> dict[str, dict[str, Any]]:
    """The plan and its variants (module docstring), as plan JSON."""
    workload = plan["workloads"][0]
    keys = {k["candidate_key"]: k["index"] for k in workload["kernels"]}
    if kernel not in keys:
        raise SystemExit(f"plan_variants: the plan has no kernel '{kernel}': {', '.join(keys)}")
    index, loops = keys[kernel], workload["tree"]["loops"]
    found = {"plan": plan, "no-exact": _with(plan, exact=[])}
    alone = {"loops": loops, "root": {"kernel": index}}
    found[f"{kernel}-alone"] = _with(plan, exact=[], tree=alone)
    if "default" in keys:
        left, right = {"kernel": keys["default"]}, {"kernel": index}
        split = {"loop": loops[0], "threshold": 8, "left": left, "right": right}
        found[f"default+{kernel}"] = _with(plan, exact=[], tree={"loops": loops, "root": split})
    everywhere = copy.deepcopy(workload["tree"])
    _every_leaf(everywhere["root"], index)
    found[f"{kernel}-everywhere"] = _with(plan, tree=everywhere)
    return found


def placement_variants(plan: dict[str, Any], source: Path) -> dict[str, dict[str, Any]]:
    """The plan from stdin, and under each placement whose code lands at another offset."""
    chosen = plan.get("placement")
    stdin = {k: v for k, v in plan.items() if k != "placement"}
    found = {"stdin": stdin}
    for placement in _distinct_placements(Plan.from_json(stdin), source):
        mark = " (chosen)" if placement == chosen else ""
        found[f"placement {placement}{mark}"] = {**stdin, "placement": placement}
    return found


def _with(plan: dict[str, Any], **fields: Any) -> dict[str, Any]:
    changed = copy.deepcopy(plan)
    changed["workloads"][0].update(fields)
    return changed


def _every_leaf(node: dict[str, Any], kernel: int) -> None:
    if "kernel" in node:
        node["kernel"] = kernel
        return
    _every_leaf(node["left"], kernel)
    _every_leaf(node["right"], kernel)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True, help="a plan never_slower.py wrote")
    parser.add_argument("--kernel", default="datatiled", help="the kernel the variants run")
    parser.add_argument("--shapes", default="33,65,127")
    parser.add_argument("--weights", default="argument", choices=("argument", "constant"))
    parser.add_argument("--placements", action="store_true", help="the plan's placements")
    args = parser.parse_args(argv)
    name = args.plan.name.removesuffix(".plan.json")
    source = args.plan.with_name(f"{name}.mlir")
    shapes = [int(t) for t in args.shapes.split(",")]
    plan = json.loads(args.plan.read_text())
    what = "placements" if args.placements else f"kernel `{args.kernel}`"
    print(f"`{name}`, {what}: dcmlir over the faster IREE build, re-measured")
    print("| variant | " + " | ".join(f"T={t}" for t in shapes) + " | worst |")
    print("|---|" + "---:|" * (len(shapes) + 1))
    with tempfile.TemporaryDirectory() as work:
        db = Path(work) / "records.jsonl"
        found = placement_variants(plan, source) if args.placements else variants(plan, args.kernel)
        for label, variant in found.items():
            path = Path(work) / f"{label}.plan.json"
            path.write_text(json.dumps(variant))
            found = remeasure(source, path, [(t,) for t in shapes], args.weights, db=db)
            by_t = {shape[0]: ratio for shape, ratio in found.items()}
            cells = " | ".join(f"{by_t[t]:.3f}" for t in shapes)
            print(f"| {label} | {cells} | worst {max(by_t.values()):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
