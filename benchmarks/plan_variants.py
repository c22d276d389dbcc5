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
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

from never_slower import remeasure


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
    args = parser.parse_args(argv)
    name = args.plan.name.removesuffix(".plan.json")
    source = args.plan.with_name(f"{name}.mlir")
    shapes = [int(t) for t in args.shapes.split(",")]
    plan = json.loads(args.plan.read_text())
    print(f"`{name}`, kernel `{args.kernel}`: dcmlir over the faster IREE build, re-measured")
    print("| variant | " + " | ".join(f"T={t}" for t in shapes) + " |")
    print("|---|" + "---:|" * len(shapes))
    with tempfile.TemporaryDirectory() as work:
        db = Path(work) / "records.jsonl"
        for label, variant in variants(plan, args.kernel).items():
            path = Path(work) / f"{label}.plan.json"
            path.write_text(json.dumps(variant))
            found = remeasure(source, path, [(t,) for t in shapes], args.weights, db=db)
            by_t = {shape[0]: ratio for shape, ratio in found.items()}
            print(f"| {label} | " + " | ".join(f"{by_t[t]:.3f}" for t in shapes) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
