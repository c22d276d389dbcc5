"""dcmlir's replayed quality per (workload, budget, seed), two processes: the cells of
results.json. Apply a variant's diff first (``git apply <diff>``) to replay it.

python docs/results/replay_variants_2026-12-07/replay_cells.py all 60,110,240 0,1,2 out.json
"""

import json
import sys
import tempfile
from collections.abc import Iterator
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import quality  # noqa: E402

RECORDS = [ROOT / path for path in quality.RECORDS]
ALL = (
    "dense_qkv,dense_out,dense_ffn1,dense_ffn2,attention_scores,attention_context,"
    "heldout_large_ffn1,heldout_linear_t,heldout_scores_h80,unseen_proj_narrow,"
    "unseen_scores_h128,unseen_context_h80,fresh_ffn_384,fresh_scores_h96,fresh_context_h96"
)
PROBLEMS = {}


def problems(names: list[str]) -> Iterator[tuple[str, quality.Problem]]:
    """Each named workload's replay problem over the oracle's records, in order."""
    texts = quality.known_workloads()
    records = [record for path in RECORDS for record in quality.load_oracle(str(path))]
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            yield name, quality.load_problem(name, texts[name], records, Path(scratch))


def one(job: tuple[str, int, int]) -> tuple[str, list[float]]:
    name, budget, seed = job
    result = quality.run_dcmlir(PROBLEMS[name], budget, seed)
    return f"{name}:{budget}:{seed}", [result["quality"], max(result["against_iree"].values())]


def run_cells(argv: list[str]) -> tuple[list[str], list[int], list[int], dict[str, list[float]]]:
    """``WORKLOADS|all BUDGETS SEEDS OUT.json``: every cell, over two processes, written to
    OUT.json; a variant that patches the search in its process runs it the same way."""
    names = (ALL if argv[0] == "all" else argv[0]).split(",")
    budgets = [int(value) for value in argv[1].split(",")]
    seeds = [int(value) for value in argv[2].split(",")]
    PROBLEMS.update(problems(names))  # before the pool: the workers inherit them
    jobs = [(name, budget, seed) for name in names for budget in budgets for seed in seeds]
    with Pool(2) as pool:
        cells = dict(pool.map(one, jobs, chunksize=1))
    Path(argv[3]).write_text(json.dumps(cells, indent=0) + "\n")
    return names, budgets, seeds, cells


if __name__ == "__main__":
    names, budgets, seeds, cells = run_cells(sys.argv[1:])
    for name in names:
        line = [name.ljust(20)]
        for budget in budgets:
            values = [cells[f"{name}:{budget}:{seed}"][0] for seed in seeds]
            line.append(f"B{budget} worst {min(values):.3f} spread {max(values) - min(values):.3f}")
        print("  ".join(line))
