"""How far one live tune's records of samples of the minimum time are from quiet tunes' of the
same pairs, read as the median of their first three samples (what a tune recorded before
1c5d540), their fastest, or the record's median (all its samples: more where they had
not settled) (docs/benchmarks.md, "A slow phase of the machine during a tune").

    python docs/results/live_seeds_2026-12-07/sample_readings.py \\
        tune_records/zen4-tied18-seed0.jsonl.gz tune_records/zen4-tied18-seed1.jsonl.gz \\
        tune_records/zen4-tied18-seed2.jsonl.gz

The first file is the tune read; the others are the reference, each pair's median over them
of their records' medians (paths relative to this folder, or absolute). Only records of
samples of the minimum time (not call by call) that every file holds are read. The common
shift (the median log ratio) is taken out: what ranks kernels is how far they move from
each other. Also printed: the share of the tune's records whose slowest of the first three
samples is more than 10% over the fastest.
"""

import gzip
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
READINGS: dict[str, Callable[[Sequence[float]], float]] = {
    "median of the first 3": lambda t: statistics.median(t[:3]),
    "fastest of the first 3": lambda t: min(t[:3]),
    "median of all": statistics.median,
}


def samples(path: str) -> dict[tuple[str, str, str], list[float]]:
    """(workload, candidate, dims) -> the first record's samples of the minimum time."""
    found: dict[tuple[str, str, str], list[float]] = {}
    file = Path(path) if Path(path).is_absolute() else HERE / path
    with gzip.open(file, "rt") if file.suffix == ".gz" else file.open() as lines:
        for line in lines:
            record = json.loads(line)
            times, sampling = record["times"], record["extra"].get("sampling")
            if record["kind"] != "measure" or not times or sampling == "call-by-call":
                continue
            key = (record["workload"], record["candidate_key"], json.dumps(record["dims"]))
            found.setdefault(key, times)
    return found


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    tune, *quiet = (samples(p) for p in sys.argv[1:])
    keys = [k for k in tune if all(k in q for q in quiet)]
    spread = sum(max(tune[k][:3]) > 1.10 * min(tune[k][:3]) for k in keys) / len(keys)
    print(f"{len(keys)} pairs; slowest sample > 1.10x the fastest in {spread:.0%} of them")
    for name, read in READINGS.items():
        logs = [
            math.log(read(tune[k]) / statistics.median(statistics.median(q[k]) for q in quiet))
            for k in keys
        ]
        shift = statistics.median(logs)
        errors = sorted(abs(v - shift) for v in logs)
        p90 = errors[int(0.9 * (len(errors) - 1))]
        print(
            f"{name:22s}: shift {shift:+.3f}, |log ratio - shift| median "
            f"{statistics.median(errors):.3f}, 90th percentile {p90:.3f}, worst {errors[-1]:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
