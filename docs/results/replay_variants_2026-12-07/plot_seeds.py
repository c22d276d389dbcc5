"""Each workload's replayed quality over seeds 0-5 at budgets 110 and 240, from results.json.

python docs/results/replay_variants_2026-12-07/plot_seeds.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).parent
LINES = {60: None, 110: 0.95, 240: 0.97}

data = json.loads((HERE / "results.json").read_text())
cells = data["base_a13f21c"] | data["base_a13f21c_seeds_3_5"]
names = sorted({key.split(":")[0] for key in cells})
fig, axes = plt.subplots(1, 3, figsize=(15, 5), sharey=True)
for ax, (budget, line) in zip(axes, LINES.items(), strict=True):
    for x, name in enumerate(names):
        values = [cells[f"{name}:{budget}:{seed}"][0] for seed in range(6)]
        ax.scatter(
            [x] * 3, values[:3], color="tab:blue", s=14, label="seeds 0-2" if x == 0 else None
        )
        ax.scatter(
            [x] * 3,
            values[3:],
            color="tab:orange",
            s=14,
            marker="x",
            label="seeds 3-5" if x == 0 else None,
        )
    if line is not None:
        ax.axhline(line, color="tab:red", linewidth=0.8, label=f"issue 14's line ({line})")
    ax.set_title(f"budget {budget}")
    ax.set_xticks(range(len(names)), names, rotation=75, fontsize=7)
    ax.set_ylim(0.85, 1.0)
    ax.grid(axis="y", linewidth=0.3)
axes[0].set_ylabel("quality (oracle time / dispatched time, geomean over T)")
axes[1].legend(fontsize=7, loc="lower left")
fig.suptitle("dcmlir's replayed quality per seed (a13f21c, EPYC oracle records)")
fig.tight_layout()
fig.savefig(HERE / "seeds_0_5.png", dpi=110)
