"""How reproducible is the oracle the quality replay scores against? (issue 14)

``docs/results/oracle_records.jsonl`` holds one measurement of every (candidate, T)
pair: 2 rounds of >= 10 ms each, the protocol of ``benchmarks/tuner_benchmark.py``.
``benchmarks/quality.py`` takes each T's fastest record as the truth. This script
measures part of that oracle again, with the same protocol on the same machine,
and scores the two measurements against each other. For each workload it takes IREE's
default, every kernel that is fastest at some T, and the kernels with the best
geomean quality, up to ``--kernels``. It times them all at the oracle's 31 T,
interleaved per T. It reports:

- the relative change of each cell (time over the fastest at its T, so that a drift
  of the whole machine between the two runs cancels): median, share over 10% and 25%;
- **the old oracle scored by the new one**: geomean over T of new-best / new-time of
  the old oracle's pick at that T, and the reverse. A search that found exactly the
  oracle's kernels would score this against a second measurement;
- the share of T where both measurements pick the same kernel.

    python benchmarks/oracle_noise.py [--workloads ...] [--kernels 10]

writes ``docs/results/oracle_noise.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
from bert_workloads import workloads as bert_workloads
from quality import load_problem

from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase

ROOT = Path(__file__).resolve().parent.parent
ORACLE_SETTINGS = MeasureSettings(min_time=0.01, rounds=2, warmup=0.005)  # tuner_benchmark's


def chosen_kernels(keys: list[str], table: np.ndarray, count: int) -> list[str]:
    """IREE's default, each T's fastest, then the best geomean quality, up to ``count``."""
    quality = np.exp(np.mean(np.log(table.min(1, keepdims=True) / table), axis=0))
    winners = sorted({keys[j] for j in table.argmin(1)}, key=lambda k: -quality[keys.index(k)])
    ranked = [keys[j] for j in np.argsort(-quality)]
    found = list(dict.fromkeys(["default", *winners, *ranked]))
    return found[: max(count, len(winners) + 1)]


def cross_quality(judge: np.ndarray, picks: np.ndarray) -> float:
    """Geomean over T of the judge's best time / the judge's time of each T's pick."""
    rows = np.arange(len(judge))
    return math.exp(float(np.mean(np.log(judge.min(1) / judge[rows, picks]))))


def measure_again(name: str, text: str, records: list, count: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        problem = load_problem(name, text, records, Path(scratch))
        keys = [c.key() for c in problem.candidates]
        shapes = problem.shapes
        full = np.array([[problem.table.seconds(k, s) for k in keys] for s in shapes])
        chosen = chosen_kernels(keys, full, count)
        candidates = [c for c in problem.candidates if c.key() in chosen]
        names = [c.key() for c in candidates]
        db = RecordDatabase(Path(scratch) / "again.jsonl", fsync=False)
        settings = RunnerSettings(ORACLE_SETTINGS)
        with Measurer(
            problem.workload, problem.target, db, runner_settings=settings, stream=io.StringIO()
        ) as measurer:
            again = measurer.measure(candidates, shapes)
        old = np.array([[problem.table.seconds(k, s) for k in names] for s in shapes])
        new = np.array([[again.median(k, s) for k in names] for s in shapes])
    change = np.abs(np.log((new / new.min(1, keepdims=True)) / (old / old.min(1, keepdims=True))))
    return {
        "kernels": names,
        "shapes": [list(s) for s in shapes],
        "old_seconds": old.tolist(),
        "new_seconds": new.tolist(),
        "median_change": float(np.exp(np.median(change)) - 1),
        "over_10_percent": float(np.mean(change > math.log(1.10))),
        "over_25_percent": float(np.mean(change > math.log(1.25))),
        "old_scored_by_new": cross_quality(new, old.argmin(1)),
        "new_scored_by_old": cross_quality(old, new.argmin(1)),
        "same_pick": float(np.mean(old.argmin(1) == new.argmin(1))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(ROOT / "docs/results/oracle_records.jsonl"))
    parser.add_argument("--workloads", default=",".join(bert_workloads()))
    parser.add_argument("--kernels", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "docs/results/oracle_noise.json"))
    args = parser.parse_args(argv)
    records = RecordDatabase(args.records, fsync=False).load()
    texts = bert_workloads()
    results = {}
    lines = [
        "| workload | kernels x T | median change | cells > 10% | cells > 25% |"
        " old oracle scored by new | new scored by old | same pick |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.workloads.split(","):
        print(f"== {name}", file=sys.stderr, flush=True)
        r = results[name] = measure_again(name, texts[name], records, args.kernels)
        lines.append(
            f"| `{name}` | {len(r['kernels'])} x {len(r['shapes'])} |"
            f" {r['median_change']:.1%} | {r['over_10_percent']:.0%} |"
            f" {r['over_25_percent']:.0%} | {r['old_scored_by_new']:.3f} |"
            f" {r['new_scored_by_old']:.3f} | {r['same_pick']:.0%} |"
        )
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
