"""How each reduction tile's time moves against its siblings' (the same workgroup and
vector tiles) from T = 128 down to small T, per workload of the oracle: the geometric
mean over the tiles of (time / siblings' geometric mean at T) / (the same at T = 128),
with the standard deviation of its log across the tiles.

python docs/results/replay_variants_2026-12-07/sibling_ratios.py
"""

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from replay_cells import ALL, problems  # noqa: E402

BANDS = [(1, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 127)]


def relative_logs(problem, keys: dict[int, str], shape) -> dict[int, float] | None:
    """Each reduction tile's log time less the siblings' mean log time at ``shape``."""
    logs = {k: math.log(problem.table.seconds(key, shape)) for k, key in keys.items()}
    if not all(math.isfinite(value) for value in logs.values()):
        return None
    mean = statistics.fmean(logs.values())
    return {k: value - mean for k, value in logs.items()}


def report(name: str, problem) -> None:
    groups: dict[str, dict[int, str]] = defaultdict(dict)
    for key in problem.table.candidate_keys:
        if ":k" in key:
            prefix, k = key.rsplit(":k", 1)
            groups[prefix][int(k)] = key
    at_128 = next(shape for shape in problem.shapes if shape[0] == 128)
    moved: dict[tuple[int, tuple[int, int]], list[float]] = defaultdict(list)
    for keys in groups.values():
        reference = relative_logs(problem, keys, at_128) if len(keys) > 1 else None
        if reference is None:
            continue
        for band in BANDS:
            per_tile = defaultdict(list)
            for shape in problem.shapes:
                if band[0] <= shape[0] <= band[1]:
                    found = relative_logs(problem, keys, shape)
                    for k, value in (found or {}).items():
                        per_tile[k].append(value - reference[k])
            for k, values in per_tile.items():
                moved[(k, band)].append(statistics.fmean(values))
    print(f"{name}: T bands " + " ".join(f"{a}-{b}" for a, b in BANDS))
    for k in sorted({k for k, _ in moved}):
        cells = []
        for band in BANDS:
            values = moved.get((k, band), [])
            spread = statistics.pstdev(values) if values else 0.0
            cells.append(
                f"{math.exp(statistics.fmean(values)):.2f} ({spread:.2f})" if values else "-"
            )
        print(f"  k{k:<3} " + "  ".join(cells))


if __name__ == "__main__":
    for name, problem in problems((ALL if len(sys.argv) < 2 else sys.argv[1]).split(",")):
        report(name, problem)
