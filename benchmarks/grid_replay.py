"""The search replayed on an oracle of the whole shape grid ``dcmlir tune`` searches (issue 14).

``benchmarks/quality.py`` replays the search on an oracle of T x T only, the diagonal of
attention's two dynamic loops. A tune of a module whose loops are not tied searches the
256-shape grid of both (:func:`dcmlir.search.shape_range.shapes_in_range`), and spends its
measurements off the diagonal too. This script replays that search, on an oracle made by
``python benchmarks/oracle.py --grid`` (every candidate at every shape of the grid), and
reports per workload, budget and seed: the quality (geomean of the oracle's best over the
dispatched kernel's time) over the grid and over its diagonal, and issue 14's never-slower
check on the diagonal (what ``benchmarks/never_slower.py`` times): the T where the
dispatched kernel's recorded time is more than 1.03x the faster of IREE's default and
data tiling, and the worst ratio.

    python benchmarks/grid_replay.py --records docs/results/oracle_zen3_grid.jsonl.gz \\
        [--workloads attention_scores,...] [--budgets 60,240] [--seeds 0,1,2] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from oracle import known_workloads, load_oracle
from quality import SLOWER, Problem, dispatched, load_problem, search

from dcmlir.shapes import Shape
from dcmlir.testing.replay import ReplayError

BUDGETS = (60, 240)
SEEDS = (0, 1, 2)


def replay(problem: Problem, budget: int, seed: int) -> dict:
    """One search on the grid: its qualities and the diagonal's never-slower check."""
    result, measured = search(problem, budget, seed)
    run = {"workload": problem.name, "budget": budget, "seed": seed, "measurements": measured}
    return run | scores(problem, dispatched(problem, result))


def scores(problem: Problem, ran: Mapping[Shape, str]) -> dict:
    """What ``ran`` (the kernel dispatched at each shape) scores on the oracle: the quality
    over every shape and over the diagonal, and the diagonal's T whose recorded time is
    above :data:`~quality.SLOWER`'s 1.03x the faster IREE build there, with the worst ratio."""
    diagonal = [s for s in problem.shapes if len(set(s)) == 1]
    against = problem.against_iree(ran, diagonal)
    return {
        "quality": problem.quality(ran),
        "diagonal_quality": problem.quality(ran, diagonal),
        "slower_t": sorted(t for t, r in against.items() if r > SLOWER[0]),
        "worst": max(against.values()),
        "shapes": len(problem.shapes),
    }


def markdown(rows: Sequence[dict]) -> list[str]:
    """One line per workload and budget, the seeds side by side."""
    lines = [
        "| workload | budget | quality (grid) | quality (diagonal) | T > 1.03x IREE | worst |",
        "|---|---:|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["workload"], r["budget"]) for r in rows))
    for name, budget in keys:
        mine = [r for r in rows if r["workload"] == name and r["budget"] == budget]

        def each(field: str, mine: list[dict] = mine) -> str:
            return " / ".join(f"{r[field]:.3f}" for r in mine)

        slower = " / ".join(str(len(r["slower_t"])) for r in mine)
        worst = " / ".join(f"{r['worst']:.2f}" for r in mine)
        quality, diagonal = each("quality"), each("diagonal_quality")
        lines.append(f"| `{name}` | {budget} | {quality} | {diagonal} | {slower} | {worst} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", required=True, help="comma-separated grid oracle files")
    parser.add_argument("--workloads", default="", help="default: every workload the records hold")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--out", type=Path, help="write every replay's figures here (JSON)")
    args = parser.parse_args()
    paths = [Path(p) for p in args.records.split(",")]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"--records: {missing[0]}: no such file")
    records = [r for path in paths for r in load_oracle(path)]
    texts = known_workloads()
    names = args.workloads.split(",") if args.workloads else list(texts)
    unknown = [n for n in names if n not in texts]
    if unknown:
        parser.error(f"unknown workload {unknown[0]} (known: {', '.join(texts)})")
    budgets = [int(b) for b in args.budgets.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            try:
                problem = load_problem(name, texts[name], records, Path(scratch))
            except ReplayError as err:
                if args.workloads:
                    parser.error(str(err))
                print(f"grid_replay: {name} skipped: {err}", file=sys.stderr)
                continue  # not in these records, or not every pair of it
            for budget in budgets:
                for seed in seeds:
                    row = replay(problem, budget, seed)
                    rows.append(row)
                    print(
                        f"{name} budget {budget} seed {seed}: quality {row['quality']:.3f} "
                        f"(diagonal {row['diagonal_quality']:.3f}), "
                        f"{len(row['slower_t'])} T > {SLOWER[0]}x IREE, worst {row['worst']:.2f}",
                        file=sys.stderr,
                        flush=True,
                    )
    print("\n".join(markdown(rows)))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
