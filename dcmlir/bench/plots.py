"""``dcmlir bench``'s plots: latency and speedup against shape, one line per baseline.

matplotlib is optional (``pip install -e '.[bench]'``), so it is imported only
when a plot is drawn; without it :func:`plot` draws nothing and returns False.
"""

from __future__ import annotations

import math
from pathlib import Path

from dcmlir.bench.results import BASELINE, BASELINES, BenchResult

__all__ = ["plot"]


def plot(result: BenchResult, path: str | Path) -> bool:
    """Latency against shape (one line per baseline) and the speedup over IREE's default."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = result.measured_baselines()
    x = [s[0] if len(set(s)) == 1 else i for i, s in enumerate(result.shapes)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    drawn = 0
    for name in names:
        points = [
            (xv, c.median_us)
            for xv, s in zip(x, result.shapes, strict=True)
            if (c := result.cell(s, name)) is not None and math.isfinite(c.median_us)
        ]
        if not points:  # every shape failed: nothing to draw for this baseline
            continue
        drawn += 1
        style = {
            "lw": 2.4 if name == "dcmlir" else 1.2,
            "color": plt.get_cmap("tab10")(list(BASELINES).index(name)),
        }
        left.plot(*zip(*points, strict=True), marker=".", label=name, **style)
        if name != BASELINE:
            speedups = [
                (xv, c.speedup)
                for xv, s in zip(x, result.shapes, strict=True)
                if (c := result.cell(s, name)) is not None and math.isfinite(c.speedup)
            ]
            if speedups:
                right.plot(*zip(*speedups, strict=True), marker=".", label=name, **style)
    if not drawn:  # no time to plot (every baseline failed): no figure, not a crash
        plt.close(fig)
        return False
    left.set(xlabel="T", ylabel="latency (us)", title=f"{result.name}: latency")
    left.set_yscale("log")
    if min(x) > 0:  # T from 1 to 128: small T get as much room as large ones
        left.set_xscale("log", base=2)
        right.set_xscale("log", base=2)
    left.legend(fontsize=7)
    right.axhline(1.0, color="grey", lw=0.8)
    right.set(xlabel="T", ylabel=f"speedup over {BASELINE}", title=f"{result.name}: speedup")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
