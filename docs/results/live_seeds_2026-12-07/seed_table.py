"""Issue 14 item 4 with fresh records: one row per (workload, budget), the live tunes of
seeds 0, 1, 2 side by side (``benchmarks/never_slower.py --seed S --machine zen3-seedS``).

Per run, dcmlir's geomean over the 40 T of its time / the faster IREE build's (the median
of per-round ratios, one process, interleaved, every output checked). Two tunes' qualities
against one oracle differ by the ratio of these geomeans (the oracle cancels), so
1 - min/max of them bounds the seeds' quality spread. The peers are each run's geomean
speedup over IREE's default, the median of the three runs.

python docs/results/live_seeds_2026-12-07/seed_table.py
python docs/results/live_seeds_2026-12-07/seed_table.py zen4-seed zen4-tied-seed

The arguments are the ``--machine`` names less the seed (default ``zen3-seed``); with
more than one, each row says which. Where every run of a row was timed again at every T
(``never_slower.py --recheck-only --recheck-all``: call by call beside the two IREE builds
alone, 3 fresh processes), a last column gives those geomeans and their 1 - min/max.
"""

import statistics
import sys
from pathlib import Path

from dcmlir.bench import BenchResult

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from constant_weight_bench import geomean, ratios  # noqa: E402
from never_slower import final_ratios, load_result  # noqa: E402

SEEDS = (0, 1, 2)
PEERS = ("iree-data-tiling", "onnxruntime", "numpy", "torch")


def remeasured(result: BenchResult) -> float | None:
    """The geomean of the ratios timed again at every T; None where not every T was."""
    if not result.info.get("rechecked_all") or not result.info.get("rechecked"):
        return None
    return geomean(final_ratios(result))


def main(prefixes: list[str]) -> None:
    rows: dict[tuple[str, int], dict[int, BenchResult]] = {}
    for prefix in prefixes:
        for seed in SEEDS:
            for path in sorted(
                (ROOT / "docs/results" / f"never_slower_{prefix}{seed}").glob("b*/*.json")
            ):
                result = load_result(path)
                label = f"`{path.stem}`" + (f" ({prefix})" if len(prefixes) > 1 else "")
                rows.setdefault((label, int(path.parent.name[1:])), {})[seed] = result
    every = any(
        len(runs) == len(SEEDS) and all(remeasured(r) for r in runs.values())
        for runs in rows.values()
    )
    print(
        "| workload | budget | dcmlir / best IREE build, seeds 0 / 1 / 2 | 1 - min/max "
        "| dcmlir over IREE default, seeds 0 / 1 / 2 | "
        + " | ".join(f"{peer} over IREE default" for peer in PEERS)
        + (" | re-measured at every T, seeds 0 / 1 / 2 (1 - min/max)" if every else "")
        + " |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * (len(PEERS) + every))
    for (name, budget), runs in sorted(rows.items(), key=lambda item: (item[0][1], item[0][0])):
        if len(runs) < len(SEEDS):
            continue
        ordered = [runs[seed] for seed in SEEDS]
        against = [geomean(ratios(result, "dcmlir")) for result in ordered]
        default = [result.geomean_speedup("dcmlir") for result in ordered]
        peers = [
            statistics.median(result.geomean_speedup(peer) for result in ordered) for peer in PEERS
        ]
        found = [g for g in (remeasured(result) for result in ordered) if g is not None]
        column = " | " if every else ""
        if every and len(found) == len(SEEDS):
            values = " / ".join(f"{g:.3f}" for g in found)
            column = f" | {values} ({1 - min(found) / max(found):.3f})"
        print(
            f"| {name} | {budget} | {' / '.join(f'{g:.3f}' for g in against)} "
            f"| {1 - min(against) / max(against):.3f} "
            f"| {' / '.join(f'{d:.2f}x' for d in default)} | "
            + " | ".join(f"{p:.2f}x" for p in peers)
            + column
            + " |"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["zen3-seed"])
