"""How well the kernels' order at one T tells their order over the range, per workload of
the oracle: Spearman's rank correlation, over the explicit kernels, between each kernel's
log time over the fastest at that T and the mean of the same over the oracle's 31 T.

python docs/results/replay_variants_2026-12-07/rank_at_one_t.py
"""

import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from replay_cells import ALL, problems  # noqa: E402

AT = (128, 120, 112, 96, 64, 32)

if __name__ == "__main__":
    print("workload".ljust(20), " ".join(f"T={t:<4}" for t in AT))
    for name, problem in problems(ALL.split(",")):
        keys = [k for k in problem.table.candidate_keys if k.startswith("cpu:")]
        logs = np.array(
            [[math.log(problem.table.seconds(k, s)) for k in keys] for s in problem.shapes]
        )
        logs = logs[:, np.isfinite(logs).all(axis=0)]
        behind = logs - logs.min(axis=1, keepdims=True)
        overall = behind.mean(axis=0)
        rows = {shape[0]: row for row, shape in enumerate(problem.shapes)}
        cells = [f"{spearmanr(behind[rows[t]], overall).statistic:6.2f}" for t in AT]
        print(name.ljust(20), " ".join(cells))
