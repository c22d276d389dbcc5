"""Issue 14 item 4 with fresh records: one row per (workload, budget), the live tunes of
seeds 0, 1, 2 side by side (``benchmarks/never_slower.py --seed S --machine zen3-seedS``).

Per run, dcmlir's geomean over the 40 T of its time / the faster IREE build's (the median
of per-round ratios, one process, interleaved, every output checked). Two tunes' qualities
against one oracle differ by the ratio of these geomeans (the oracle cancels), so
1 - min/max of them bounds the seeds' quality spread. The peers are each run's geomean
speedup over IREE's default, the median of the three runs.

python docs/results/live_seeds_2026-12-07/seed_table.py
"""

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from constant_weight_bench import geomean, ratios  # noqa: E402
from never_slower import load_result  # noqa: E402

SEEDS = (0, 1, 2)
PEERS = ("iree-data-tiling", "onnxruntime", "numpy", "torch")


def main() -> None:
    print(
        "| workload | budget | dcmlir / best IREE build, seeds 0 / 1 / 2 | 1 - min/max "
        "| dcmlir over IREE default, seeds 0 / 1 / 2 | "
        + " | ".join(f"{peer} over IREE default" for peer in PEERS)
        + " |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * len(PEERS))
    rows = {}
    for seed in SEEDS:
        for path in sorted(
            (ROOT / "docs/results" / f"never_slower_zen3-seed{seed}").glob("b*/*.json")
        ):
            result = load_result(path)
            rows.setdefault((path.stem, int(path.parent.name[1:])), {})[seed] = result
    for (name, budget), runs in sorted(rows.items(), key=lambda item: (item[0][1], item[0][0])):
        if len(runs) < len(SEEDS):
            continue
        ordered = [runs[seed] for seed in SEEDS]
        against = [geomean(ratios(result, "dcmlir")) for result in ordered]
        default = [result.geomean_speedup("dcmlir") for result in ordered]
        peers = [
            statistics.median(result.geomean_speedup(peer) for result in ordered) for peer in PEERS
        ]
        print(
            f"| `{name}` | {budget} | {' / '.join(f'{g:.3f}' for g in against)} "
            f"| {1 - min(against) / max(against):.3f} "
            f"| {' / '.join(f'{d:.2f}x' for d in default)} | "
            + " | ".join(f"{p:.2f}x" for p in peers)
            + " |"
        )


if __name__ == "__main__":
    main()
