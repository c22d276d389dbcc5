"""Variant V, replayed and not kept (docs/benchmarks.md, "The search log", 2026-12-07,
seventeenth): the chase limit of :mod:`dcmlir.search.chase` per remainder class of a tile
family instead of per shape. A pair whose kernel was never measured in the pair's class
(the kernel's vector tiles on the dynamic loops and which of them leave a remainder) is a
first in that class; once ``V_LIMIT`` such firsts of one (tiles, class) came out slower
than ``V_FACTOR`` times their estimate, no kernel of those tiles is estimated in that class
until it is measured there. Run as replay_cells.py is (the search patched in this process
and the forked workers):

V_LIMIT=2 V_FACTOR=2 \\
    python docs/results/replay_variants_2026-12-07/V_chase_per_remainder_class.py \\
    all 60,110,240 0,1,2 out.json
"""

import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_cells

from dcmlir.search import shape_generic as sg

LIMIT = int(os.environ.get("V_LIMIT", "2"))
_orig_measure = sg.ShapeGenericSearch._measure
_orig_estimate = sg.ShapeGenericSearch.estimate


def _in_class(self, column, mask):
    masks = self.remainders.masks[:, column]
    return any(int(masks[r]) == mask for r in self._measured_rows(column))


def _measure(self, pairs, calls=None, again=(), why="first", estimate=None, kernels=()):
    firsts = []
    if estimate is not None:
        for c, s in pairs:
            col, row = self.columns[c.key()], self.shape_index[s]
            mask = int(self.remainders.masks[row, col])
            tiles = self.remainders.tiles[col]
            if not tiles or not mask or _in_class(self, col, mask):
                continue
            firsts.append((c.key(), s, (tiles, mask), float(estimate[row, col])))
    _orig_measure(self, pairs, calls, again, why, estimate, kernels)
    misses = self.__dict__.setdefault("_class_misses", {})
    margin = float(os.environ.get("V_FACTOR", "2")) - 1
    for key, s, cls, guess in firsts:
        seconds = self.measured.get((key, s), math.inf)
        if math.isfinite(guess) and guess * (1 + margin) < seconds < math.inf:
            misses[cls] = misses.get(cls, 0) + 1


def estimate(self):
    est, pred = _orig_estimate(self)
    misses = self.__dict__.get("_class_misses", {})
    chased = {cls for cls, n in misses.items() if n >= LIMIT}
    if chased:
        masks = self.remainders.masks
        for col, tiles in enumerate(self.remainders.tiles):
            for mask in {int(m) for m in masks[:, col]}:
                if (tiles, mask) in chased and not _in_class(self, col, mask):
                    est[masks[:, col] == mask, col] = math.inf
    return est, pred


sg.ShapeGenericSearch._measure = _measure
sg.ShapeGenericSearch.estimate = estimate

if __name__ == "__main__":
    replay_cells.run_cells(sys.argv[1:])
