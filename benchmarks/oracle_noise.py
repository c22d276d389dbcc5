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

(``--records`` an oracle of ``benchmarks/oracle.py`` with ``--tuner-protocol``: timed again
as it was timed.)

writes ``docs/results/oracle_noise.json`` and prints a markdown table.

``--rescore QUALITY_JSON`` instead times, with 8 rounds of >= 20 ms, the same kernels
plus every kernel that ``benchmarks/quality.py``'s dcmlir (budgets 110 and 240) and
exhaustive-8 dispatch, and scores those dispatches against this precise oracle
(``docs/results/oracle_rescored.json``): the replay's quality with less noise in the
reference.
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
from oracle import known_workloads, load_oracle, protocol
from quality import load_problem

from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import RecordDatabase

ROOT = Path(__file__).resolve().parent.parent
ORACLE_SETTINGS = MeasureSettings(min_time=0.01, rounds=2, warmup=0.005)  # tuner_benchmark's
PRECISE_SETTINGS = MeasureSettings(min_time=0.02, rounds=8, warmup=0.01)
RESCORED_BUDGETS = ("110", "240")


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


def retime(
    name: str,
    text: str,
    records: list,
    count: int,
    settings: MeasureSettings,
    extra: frozenset[str] = frozenset(),
) -> tuple[list[str], np.ndarray, np.ndarray, list]:
    """Time :func:`chosen_kernels` (and ``extra``) again at the oracle's T, interleaved per T:
    (their keys, the oracle's seconds, the new seconds, the shapes), rows in shape order."""
    with tempfile.TemporaryDirectory() as scratch:
        problem = load_problem(name, text, records, Path(scratch))
        keys = [c.key() for c in problem.candidates]
        shapes = problem.shapes
        full = np.array([[problem.table.seconds(k, s) for k in keys] for s in shapes])
        chosen = set(chosen_kernels(keys, full, count)) | extra
        candidates = [c for c in problem.candidates if c.key() in chosen]
        names = [c.key() for c in candidates]
        db = RecordDatabase(Path(scratch) / "again.jsonl", fsync=False)
        with Measurer(
            problem.workload,
            problem.target,
            db,
            runner_settings=RunnerSettings(settings),
            stream=io.StringIO(),
        ) as measurer:
            again = measurer.measure(candidates, shapes)
        old = np.array([[problem.table.seconds(k, s) for k in names] for s in shapes])
        new = np.array([[again.median(k, s) for k in names] for s in shapes])
    return names, old, new, shapes


def measure_again(
    name: str, text: str, records: list, count: int, settings: MeasureSettings = ORACLE_SETTINGS
) -> dict:
    names, old, new, shapes = retime(name, text, records, count, settings)
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


def dispatched_kernels(entry: dict) -> set[str]:
    """Every kernel dcmlir (budgets 110, 240, all seeds) and exhaustive-8 dispatch."""
    found = set(entry["exhaustive-8"]["dispatch"].values())
    for budget in RESCORED_BUDGETS:
        for run in entry["dcmlir"].get(budget, {}).values():
            found.update(run["dispatch"].values())
    return found


def precise_quality(times: dict[str, list[float]], best: list[float], dispatch: dict) -> float:
    """Geomean over T of the precise best / the precise time of the dispatched kernel."""
    ratios = [b / times[dispatch[str(i)]][row] for row, (i, b) in enumerate(best)]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def rescore(name: str, text: str, records: list, entry: dict, count: int) -> dict:
    """The replay's dispatches of one workload scored against a precise oracle."""
    extra = frozenset(dispatched_kernels(entry))
    names, _, new, shapes = retime(name, text, records, count, PRECISE_SETTINGS, extra)
    times = {key: new[:, column].tolist() for column, key in enumerate(names)}
    best = [(s[0], min(times[k][row] for k in times)) for row, s in enumerate(shapes)]
    scores: dict[str, dict[str, float]] = {
        "exhaustive-8": {
            "replay": entry["exhaustive-8"]["quality"],
            "precise": precise_quality(times, best, entry["exhaustive-8"]["dispatch"]),
        }
    }
    for budget in RESCORED_BUDGETS:
        for seed, run in entry["dcmlir"].get(budget, {}).items():
            scores[f"dcmlir B={budget} seed={seed}"] = {
                "replay": run["quality"],
                "precise": precise_quality(times, best, run["dispatch"]),
            }
    return {"kernels": sorted(times), "seconds": times, "scores": scores}


def main_rescore(args: argparse.Namespace, records: list) -> int:
    report = json.loads(Path(args.rescore).read_text())
    texts = bert_workloads()
    results = {}
    for name in args.workloads.split(","):
        print(f"== {name}", file=sys.stderr, flush=True)
        entry = report["workloads"][name]
        results[name] = rescore(name, texts[name], records, entry, args.kernels)
    out = Path(args.out).with_name("oracle_rescored.json")
    out.write_text(json.dumps(results, indent=1) + "\n")
    lines = [
        "| workload | kernels | exhaustive-8 | dcmlir B=110 | dcmlir B=240 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        scores = result["scores"]

        def cell(prefix: str, scores: dict = scores) -> str:
            picked = [v for k, v in scores.items() if k.startswith(prefix)]
            replay = sum(v["replay"] for v in picked) / len(picked)
            precise = sum(v["precise"] for v in picked) / len(picked)
            return f"{precise:.3f} ({replay:.3f})"

        lines.append(
            f"| `{name}` | {len(result['kernels'])} | {cell('exhaustive-8')} |"
            f" {cell('dcmlir B=110')} | {cell('dcmlir B=240')} |"
        )
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(ROOT / "docs/results/oracle_records.jsonl"))
    parser.add_argument("--workloads", default=",".join(bert_workloads()))
    parser.add_argument("--kernels", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "docs/results/oracle_noise.json"))
    parser.add_argument("--rescore", metavar="QUALITY_JSON", help="see the module docstring")
    parser.add_argument(
        "--tuner-protocol",
        action="store_true",
        help="time as benchmarks/oracle.py does (3 samples, short calls call by call)",
    )
    args = parser.parse_args(argv)
    records = load_oracle(args.records)
    if args.rescore:
        return main_rescore(args, records)
    texts = known_workloads()
    settings = protocol() if args.tuner_protocol else ORACLE_SETTINGS
    results = {}
    lines = [
        "| workload | kernels x T | median change | cells > 10% | cells > 25% |"
        " old oracle scored by new | new scored by old | same pick |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.workloads.split(","):
        print(f"== {name}", file=sys.stderr, flush=True)
        r = results[name] = measure_again(name, texts[name], records, args.kernels, settings)
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
