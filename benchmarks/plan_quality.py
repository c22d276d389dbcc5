"""Score tuned plans on an oracle: each plan's quality as ``quality.py`` scores a replay.

A live tune (``never_slower.py``) is timed beside IREE's builds, and that ratio carries
the timing run's own noise (two plans running one kernel re-measured 0.13 apart at one T).
Here each plan's decision tree is read at every T the oracle holds and scored on the
oracle's records instead: geomean of (the oracle's best at T) / (the recorded time of the
kernel the plan runs there), so the plans of three seeds compare on one set of numbers.
T where a plan runs an exact build (IREE's default made static for that T, outside the
oracle) are left out of every plan's score, and said so.

    python benchmarks/plan_quality.py \\
        --records docs/results/oracle_zen4_context_h80_all_t.jsonl.gz \\
        --workload unseen_context_h80 results/never_slower_zen4-ctx-tied17-seed{0,1,2}/b60
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from oracle import known_workloads, load_oracle
from quality import Problem, load_problem, plan_runs

from dcmlir.dispatch.plan import Plan, PlanError
from dcmlir.shapes import Shape
from dcmlir.testing.replay import ReplayError


def plan_dispatch(problem: Problem, plan_path: Path) -> dict[Shape, str]:
    """The kernel ``plan_path``'s tree runs at each of the oracle's shapes ("exact" where an
    exact build takes the shape, "default" where the plan keeps IREE's default)."""
    plan = Plan.from_json(json.loads(plan_path.read_text()), str(plan_path))
    workload = plan.for_workload(problem.workload.key)
    if workload is None:
        raise PlanError(f"{plan_path}: no workload {problem.workload.key} ({problem.name})")
    runs = plan_runs(problem, workload)
    return {s: "exact" if key.startswith("exact:") else key for s, key in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", required=True, help="comma-separated oracle records files")
    parser.add_argument("--workload", required=True, help="one of never_slower.py's workloads")
    parser.add_argument("runs", nargs="+", type=Path, help="folders holding WORKLOAD.plan.json")
    args = parser.parse_args()
    texts = known_workloads()
    if args.workload not in texts:
        parser.error(f"unknown workload '{args.workload}' (known: {', '.join(texts)})")
    plans = [run / f"{args.workload}.plan.json" for run in args.runs]
    missing = next((p for p in plans if not p.is_file()), None)
    if missing is not None:
        parser.error(f"{missing}: no such file")
    records = [r for path in args.records.split(",") for r in load_oracle(path)]
    try:
        with tempfile.TemporaryDirectory() as workdir:
            problem = load_problem(args.workload, texts[args.workload], records, Path(workdir))
        dispatches = [plan_dispatch(problem, path) for path in plans]
    except (ReplayError, PlanError) as err:
        print(f"plan_quality: error: {err}", file=sys.stderr)
        return 1
    exact = sorted({s for d in dispatches for s, k in d.items() if k == "exact"})
    scored = [s for s in problem.shapes if s not in exact]
    if exact:
        left = ", ".join(str(s[0]) for s in exact)
        print(f"left out (an exact build runs there in some plan): T = {left}")
    qualities = []
    for path, dispatch in zip(plans, dispatches, strict=True):
        quality = problem.quality(dispatch, scored)
        qualities.append(quality)
        table = problem.table
        ratios = {s: table.best(s)[1] / table.seconds(dispatch[s], s) for s in scored}
        worst = min(ratios, key=ratios.__getitem__)
        ratio = ratios[worst]
        kernels = len({dispatch[s] for s in scored})
        print(
            f"{path}: quality {quality:.3f} over {len(scored)} T, {kernels} kernels; "
            f"worst T = {worst[0]} ({ratio:.2f}, {dispatch[worst]})"
        )
    if len(qualities) > 1 and all(q > 0 for q in qualities):
        spread = max(qualities) - min(qualities)
        ratio = math.exp(max(map(math.log, qualities)) - min(map(math.log, qualities)))
        print(f"spread (max - min): {spread:.3f} (best / worst {ratio:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
