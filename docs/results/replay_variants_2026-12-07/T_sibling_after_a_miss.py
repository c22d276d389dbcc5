"""Variant T, replayed and not kept (docs/benchmarks.md, "The final selection's margin from
the search's own verification errors", last paragraph): a measured kernel whose
measurement at a new shape misses its estimate by more than twice the contender margin
brings its best-estimated unmeasured reduction sibling beside it there, before the
proofs of the next round. The search is patched in this process (and the forked
workers); run as replay_cells.py is:

python docs/results/replay_variants_2026-12-07/T_sibling_after_a_miss.py \\
    all 60,110,240 0,1,2 out.json
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_cells

from dcmlir.search import shape_generic as sg

SIBLINGS = 1  # per miss
TRIGGER = 2.0  # times the contender margin
_orig_measure = sg.ShapeGenericSearch._measure
_orig_estimate = sg.ShapeGenericSearch.estimate
_orig_unproven = sg.ShapeGenericSearch._unproven


def estimate(self):
    out = _orig_estimate(self)
    self._last_estimate = out[0]
    return out


def _measure(self, pairs, calls=None, again=()):
    est = getattr(self, "_last_estimate", None)
    before = []
    if est is not None:
        never = set(self.book.never_measured())
        for cand, shape in pairs:
            col = self.columns.get(cand.key())
            row = self.shape_index.get(shape)
            if col is None or row is None or col in never:
                continue
            if (cand.key(), shape) in self.measured:
                continue
            e = float(est[row, col])
            if math.isfinite(e):
                before.append((col, row, cand.key(), shape, e))
    _orig_measure(self, pairs, calls, again)
    queue = self.__dict__.setdefault("_sibq", [])
    done = self.__dict__.setdefault("_sibdone", set())
    margin = self.settings.contender_margin * TRIGGER
    for col, row, key, shape, e in before:
        s = self.measured.get((key, shape), math.inf)
        if not (math.isfinite(s) and s > e * (1 + margin)):
            continue
        if (col, row) in done:
            continue
        done.add((col, row))
        sibs = [c for c in self.siblings.get(col, []) if (self.keys[c], shape) not in self.measured]
        sibs.sort(key=lambda c: est[row, c] if math.isfinite(est[row, c]) else math.inf)
        queue.extend((c, row) for c in sibs[:SIBLINGS])


def _unproven(self, estimate, kernels, choice):
    queue = self.__dict__.get("_sibq", [])
    found = []
    while queue:
        c, row = queue.pop(0)
        if (self.keys[c], self.shapes[row]) not in self.measured:
            found.append((self.candidates[c], self.shapes[row]))
    if found:
        return found
    return _orig_unproven(self, estimate, kernels, choice)


sg.ShapeGenericSearch.estimate = estimate
sg.ShapeGenericSearch._measure = _measure
sg.ShapeGenericSearch._unproven = _unproven


if __name__ == "__main__":
    replay_cells.run_cells(sys.argv[1:])  # the search patched above, in the forked workers too
