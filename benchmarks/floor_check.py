"""The floor's choice on a tune's own evidence, against the bench's side-by-side truth (issue 14).

With an argument weight, where no kernel is proven the plan runs the faster of IREE's
default and its data tiling as :class:`dcmlir.search.floor_builds.FloorBuilds` estimates
them from the tune's pairs. This script takes the records of real tunes
(``benchmarks/never_slower.py``'s ``tune.jsonl``), gives every pair in them to the search
once (nothing is timed), and reads the floor's pick at each T of the bench's diagonal
(``data tiling`` where its estimate is below the default's). The truth is the two
builds' times in the bench's per-T files (``never_slower.py``'s ``<workload>.json``, the
geomean over the runs given): a pick more than 1.03x the faster build is a miss. The
evidence is fixed, so a change to the floor's estimate is judged on it alone, in seconds,
without a new tune: the search's later choices, which a replay of the whole search would
add, are left out.

    python benchmarks/floor_check.py \\
        --records docs/results/never_slower/floor_evidence/b60.jsonl.gz,... \\
        --bench docs/results/never_slower/b60,docs/results/never_slower/b240 [--verbose]

``--grid-oracle`` does the same on a grid oracle (``oracle.py --grid``), the oracle the
truth: the pairs are those of the replayed searches (``grid_replay.py``'s, budgets 60, 110
and 240, seeds 0-2), kept in ``--evidence`` by a run with ``--dump`` (so one search's
pairs judge another floor):

    python benchmarks/floor_check.py --grid-oracle docs/results/oracle_zen3_grid.jsonl.gz \\
        --evidence docs/results/never_slower/floor_evidence/zen3_grid_searches.json.gz [--dump]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from never_slower import all_workloads
from oracle import load_oracle
from quality import SLOWER, load_problem, search

from dcmlir.bench import load_result
from dcmlir.cost_model import CostModel
from dcmlir.driver.loading import load_model
from dcmlir.records import Record
from dcmlir.search.settings import SearchSettings
from dcmlir.search.shape_generic import ShapeGenericSearch
from dcmlir.search.shape_range import shapes_in_range
from dcmlir.shapes import Shape
from dcmlir.space import workload_space
from dcmlir.target import target_from_json
from dcmlir.testing.replay import ReplayMeasurer, ReplayTable
from dcmlir.workload import Workload

LINE = SLOWER[0]
"""A pick above this over the faster build misses issue 14's 0.97x (``quality.py``'s)."""

GRID_WORKLOADS = (
    "attention_scores",
    "attention_context",
    "heldout_scores_h80",
    "unseen_context_h80",
)
"""The workloads of the Zen 3's grid oracle (``docs/results/oracle_zen3_grid.jsonl.gz``)."""


def truth(benches: Sequence[Path], name: str) -> dict[int, tuple[float, float]]:
    """T -> (IREE default, data tiling) seconds, the geomean over the bench runs."""
    found: dict[int, list[tuple[float, float]]] = {}
    for folder in benches:
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        result = load_result(path)
        for shape in result.shapes:
            cells = [result.cell(shape, b) for b in ("iree-default", "iree-data-tiling")]
            times = tuple(c.median_us for c in cells if c is not None)
            if len(times) == 2 and all(math.isfinite(t) for t in times):
                found.setdefault(shape[0], []).append(times)

    def mean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values)) * 1e-6

    return {t: (mean([d for d, _ in v]), mean([x for _, x in v])) for t, v in found.items()}


def floor_picks(
    workload: Workload,
    table: ReplayTable,
    found: Sequence[tuple[str, Shape]],
    shapes: Sequence[Shape],
    t_values: Sequence[int],
    seed: int = 0,
) -> dict[int, str]:
    """T -> the floor's pick at T x T, the search on ``shapes`` given the pairs ``found``
    at once (as a resumed tune reads its records), answered from ``table``, nothing timed."""
    target = target_from_json(table.target)
    candidates = workload_space(target, workload)
    by_key = {c.key(): c for c in candidates}
    pairs = [(by_key[key], tuple(shape)) for key, shape in found if key in by_key]
    every = sorted({tuple(s) for s in shapes} | {(t, t) for t in t_values} | {s for _, s in pairs})
    model = CostModel(workload, target, 1, seed, route="config")
    search = ShapeGenericSearch(
        workload,
        ReplayMeasurer(workload, table),
        model,
        candidates,
        SearchSettings(seed=seed),
        stream=io.StringIO(),
        shapes=every,
    )
    search._measure(pairs)  # the evidence; then the estimate the plan's floor comes from
    estimate, _ = search.estimate()
    default, tiled = search.default, search.data_tiled
    if default is None or tiled is None or search.floor is None:
        raise SystemExit(f"floor_check: {workload.key}: no floor of two IREE builds here")
    rows = {t: search.shape_index[(t, t)] for t in t_values}
    return {
        t: "datatiled" if estimate[row, tiled] < estimate[row, default] else "default"
        for t, row in rows.items()
    }


def tune_picks(
    workload: Workload, records: list[Record], t_values: Sequence[int]
) -> dict[int, str]:
    """:func:`floor_picks` from a tune's records (the newest of each pair), on the grid that
    tune searched (seed 0, as ``never_slower.py`` tunes)."""
    table = ReplayTable.from_records(records, workload.key)
    settings = SearchSettings(seed=0)
    grid = shapes_in_range(workload, settings.max_shapes, settings.seed)
    return floor_picks(workload, table, list(table.records), grid, t_values)


def grid_check(oracle: Path, evidence: Path, dump: bool) -> tuple[int, float]:
    """On a grid oracle (``oracle.py --grid``): each replayed search's pairs (``--dump``:
    replay the searches, :func:`quality.search`, and keep their pairs in ``evidence``;
    else read them there) given to :func:`floor_picks`, its picks on the diagonal against
    the oracle's two builds. (T above 1.03, sum of log losses.)"""
    records = load_oracle(oracle)
    texts = all_workloads()
    kept = {} if dump else json.loads(gzip.decompress(evidence.read_bytes()))
    misses, excess = 0, 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for name in GRID_WORKLOADS:
            problem = load_problem(name, texts[name], records, Path(scratch))
            diagonal = [s[0] for s in problem.shapes if len(set(s)) == 1]
            for budget in (60, 110, 240):
                for seed in (0, 1, 2):
                    key = f"{name}:{budget}:{seed}"
                    if dump:
                        result, _ = search(problem, budget, seed)
                        kept[key] = [[k, list(s)] for k, s in result.measured]
                        continue
                    table, found = problem.table, [(k, tuple(s)) for k, s in kept[key]]
                    picks = floor_picks(
                        problem.workload, table, found, problem.shapes, diagonal, seed
                    )
                    losses = [
                        table.seconds(pick, (t, t))
                        / min(table.seconds(b, (t, t)) for b in ("default", "datatiled"))
                        for t, pick in picks.items()
                    ]
                    slower = sum(loss > LINE for loss in losses)
                    misses += slower
                    excess += sum(math.log(v) for v in losses)
                    print(f"{key}: {slower} T above {LINE}x of {len(losses)}", flush=True)
    if dump:
        evidence.write_bytes(gzip.compress(json.dumps(kept).encode()))
    return misses, excess


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", help="comma-separated tune records (.jsonl[.gz])")
    parser.add_argument("--bench", help="comma-separated never_slower.py result folders")
    parser.add_argument(
        "--grid-oracle", type=Path, help="instead: a grid oracle (oracle.py --grid)"
    )
    parser.add_argument("--evidence", type=Path, help="with --grid-oracle: the searches' pairs")
    parser.add_argument("--dump", action="store_true", help="replay the searches into --evidence")
    parser.add_argument(
        "--workloads", default="", help="default: every attention workload in the records"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="every T: the pick and the bench's ratio"
    )
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args()
    if args.grid_oracle is not None:
        if args.evidence is None or not (args.dump or args.evidence.exists()):
            parser.error("--grid-oracle needs --evidence (a file, or --dump to make it)")
        misses, excess = grid_check(args.grid_oracle, args.evidence, args.dump)
        if not args.dump:
            print(f"total: {misses} T above {LINE}x; sum of log losses {excess:.2f}")
        return 0
    if not args.records or not args.bench:
        parser.error("--records and --bench are needed (or --grid-oracle)")
    benches = [Path(p) for p in args.bench.split(",")]
    texts = all_workloads()
    names = (
        args.workloads.split(",")
        if args.workloads
        else [n for n in texts if "scores" in n or "context" in n]
    )
    paths = [Path(p) for p in args.records.split(",")]
    missing = next((p for p in paths if not p.exists()), None)
    if missing is not None:
        parser.error(f"--records: {missing}: no such file")
    with tempfile.TemporaryDirectory() as scratch:
        workloads = {}
        for name in names:
            source = Path(scratch) / f"{name}.mlir"
            source.write_text(texts[name])
            (workloads[name],) = load_model(source, ["1:128"], io.StringIO()).workloads
    truths = {name: truth(benches, name) for name in names}
    rows, misses, excess = [], 0, 0.0
    for path in paths:
        records = load_oracle(path)
        for name, workload in workloads.items():
            own = [r for r in records if r.workload == workload.key and r.kind != "build"]
            known = truths[name]
            if not own or not known:
                continue
            picks = tune_picks(workload, own, sorted(known))
            losses = {t: known[t][pick == "datatiled"] / min(known[t]) for t, pick in picks.items()}
            slower = [t for t, loss in losses.items() if loss > LINE]
            worst = max(losses.values())
            misses += len(slower)
            excess += sum(math.log(v) for v in losses.values())
            rows.append(
                {"records": str(path), "workload": name, "slower_t": slower, "worst": worst}
            )
            print(f"{path.name} {name}: {len(slower)} T above {LINE}x, worst {worst:.2f}: {slower}")
            if args.verbose:
                ratios = [
                    f"{t}:{p[0].upper()}/{known[t][1] / known[t][0]:.2f}" for t, p in picks.items()
                ]
                print("    (T:pick/data tiling over the default)", " ".join(ratios))
    print(f"total: {misses} T above {LINE}x over {len(rows)} tunes; sum of log losses {excess:.2f}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {"command": " ".join(sys.argv), "rows": rows, "misses": misses, "excess": excess},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
