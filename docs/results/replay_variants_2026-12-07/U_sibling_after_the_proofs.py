"""Variant U, replayed and not kept (docs/benchmarks.md, "Item 4 on attention context",
last paragraph): variant T's reduction sibling after a miss (``T_sibling_after_a_miss.py``),
timed only once the proofs want nothing more, so that it takes verification's budget, not
the proofs'. The search is patched in this process (and the forked workers); run as
replay_cells.py is:

python docs/results/replay_variants_2026-12-07/U_sibling_after_the_proofs.py \\
    all 60,110,240 0,1,2 out.json
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_cells
import T_sibling_after_a_miss as variant_t  # patches estimate and _measure; _unproven below

from dcmlir.search import shape_generic as sg

_orig_unproven = variant_t._orig_unproven
AT_ONCE = 100  # queued siblings per round, at most


def _unproven(self, estimate, kernels, choice):
    """The proofs' pairs first; the queued siblings only where the proofs want none."""
    found = _orig_unproven(self, estimate, kernels, choice)
    if found:
        return found
    queue = self.__dict__.get("_sibq", [])
    out = []
    while queue and len(out) < AT_ONCE:
        column, row = queue.pop(0)
        if (self.keys[column], self.shapes[row]) not in self.measured:
            out.append((self.candidates[column], self.shapes[row]))
    return out


sg.ShapeGenericSearch._unproven = _unproven


if __name__ == "__main__":
    replay_cells.run_cells(sys.argv[1:])  # the search patched above, in the forked workers too
