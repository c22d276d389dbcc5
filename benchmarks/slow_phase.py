"""How a slow phase of the machine moves the tuner's first measurements, and what reading of
a kernel's samples withstands it.

The search's first measurements are one shape's group of kernels timed side by side, three
samples each; on a shared machine a slow phase can take two of a kernel's three samples
(it lengthens a sample and never shortens one), and the search ranks every kernel it has
not measured by the ones it has. This script times one workload's first group (a spread
subset of its space, as the search takes it, and IREE's two builds) at one shape: once
quietly (the reference: each kernel's median of 9 samples), then ``--trials`` times under
an injected slow phase (``--hogs`` processes busy for ``--duty`` of the time in bursts of
0.05-0.5 s; ``--hog memory``: copying 64 MiB arrays, else spinning), 12 rounds each with
the tuner's sampling. Each trial is read from its own samples several ways: the median of
the first 3 (what ``dcmlir tune`` records), their minimum, the median of all 12, and the
median of the first R, R the round where ``dcmlir tune``'s sampling stops (from 3 on, the
first where no kernel's median is more than 5% over its fastest sample). Per trial and
reading it reports how far they are from the reference once their common shift is taken
out (what ranks kernels: median and 90th percentile of |log ratio - its median|) and what
the fastest kernel by them runs at by the reference (1.0: the reference's fastest).

    python benchmarks/slow_phase.py --workload heldout_scores_h80 --t 128 --trials 12 \\
        --hog memory --hogs 1 --duty 0.5 --out docs/results/slow_phase_2026-12-07.json
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from never_slower import all_workloads

from dcmlir.driver.loading import load_model
from dcmlir.driver.tuning import SETTLE_ROUNDS, SETTLE_TOLERANCE, tuning_measure
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import unsettled
from dcmlir.records import RecordDatabase
from dcmlir.search.first_measurements import spread_subset
from dcmlir.search.settings import SearchSettings
from dcmlir.space import Candidate, DataTiledCandidate, DefaultCandidate, workload_space
from dcmlir.target import target_from_name
from dcmlir.workload import Workload

MIN_TIME, ROUNDS = 0.03, 3  # dcmlir tune's defaults
MOST_ROUNDS = SETTLE_ROUNDS * ROUNDS


def settled_round(samples: dict[str, tuple[float, ...]]) -> int:
    """The round where the tuner's sampling stops: the first from :data:`ROUNDS` on where no
    kernel's samples so far are :func:`~dcmlir.measure.timing.unsettled`; at most
    :data:`MOST_ROUNDS`."""
    for rounds in range(ROUNDS, MOST_ROUNDS):
        if not any(unsettled(t[:rounds], SETTLE_TOLERANCE) for t in samples.values()):
            return rounds
    return MOST_ROUNDS


def readings(samples: dict[str, tuple[float, ...]]) -> dict[str, dict[str, float]]:
    """Each reading's time of each kernel, from one trial's samples."""
    settled = settled_round(samples)
    return {
        "median of 3": {k: statistics.median(t[:ROUNDS]) for k, t in samples.items()},
        "min of 3": {k: min(t[:ROUNDS]) for k, t in samples.items()},
        f"median of {MOST_ROUNDS}": {k: statistics.median(t) for k, t in samples.items()},
        "median, rounds until settled": {
            k: statistics.median(t[:settled]) for k, t in samples.items()
        },
    }


def _busy(stop: Any, duty: float, seed: int, memory: bool) -> None:
    """Busy in bursts of 0.05-0.5 s for ``duty`` of the time, idle between them."""
    rng = random.Random(seed)
    source = np.ones(16 << 20, dtype=np.float32) if memory else None
    target = np.empty_like(source) if memory else None
    while not stop.is_set():
        burst = rng.uniform(0.05, 0.5)
        end = time.perf_counter() + burst
        while time.perf_counter() < end:
            if memory:
                np.copyto(target, source)
        stop.wait(burst * (1 - duty) / duty)


def _samples(
    workload: Workload, group: list[Candidate], shape: tuple[int, ...], rounds: int
) -> dict[str, tuple[float, ...]]:
    """Each candidate's samples at ``shape``, the group timed side by side as the tuner does."""
    settings = dataclasses.replace(
        tuning_measure(MIN_TIME, ROUNDS), rounds=rounds, settle_tolerance=0.0
    )
    target = target_from_name("llvm-cpu")
    with tempfile.TemporaryDirectory() as scratch:
        db = RecordDatabase(Path(scratch) / "records.jsonl", fsync=False)
        with Measurer(workload, target, db, runner_settings=RunnerSettings(settings)) as m:
            report = m.measure(group, [shape])
    return {key: record.times for (key, _), record in report.records.items() if record.ok}


def _score(found: dict[str, float], reference: dict[str, float]) -> dict[str, float]:
    keys = [k for k in reference if k in found]
    logs = [math.log(found[k] / reference[k]) for k in keys]
    shift = statistics.median(logs)
    spread = sorted(abs(v - shift) for v in logs)
    pick = min(keys, key=found.__getitem__)
    return {
        "shift": shift,
        "median_error": statistics.median(spread),
        "p90_error": spread[int(0.9 * (len(spread) - 1))],
        "pick_at": reference[pick] / min(reference[k] for k in keys),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="heldout_scores_h80")
    parser.add_argument("--t", type=int, default=128)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--hog", choices=("spin", "memory"), default="spin")
    parser.add_argument("--duty", type=float, default=0.3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    texts = all_workloads()
    if args.workload not in texts:
        parser.error(f"unknown workload {args.workload} (known: {', '.join(texts)})")
    if not 0 < args.duty < 1:
        parser.error("--duty must be in (0, 1)")
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / f"{args.workload}.mlir"
        source.write_text(texts[args.workload])
        (workload,) = load_model(source, ["1:128"], io.StringIO()).workloads
    space = workload_space(target_from_name("llvm-cpu"), workload)
    builds = [c for c in space if isinstance(c, DefaultCandidate | DataTiledCandidate)]
    kernels = [c for c in space if c not in builds]
    group = builds + spread_subset(kernels, SearchSettings(budget=60).first_room)
    shape = (args.t,) * len(workload.dynamic_dims)
    print(f"{args.workload} at {shape}: {len(group)} candidates; quiet reference", file=sys.stderr)
    quiet = _samples(workload, group, shape, 3 * ROUNDS)
    reference = {key: statistics.median(times) for key, times in quiet.items()}
    trials = []
    for trial in range(args.trials):
        stop = multiprocessing.Event()
        memory = args.hog == "memory"
        hogs = [
            multiprocessing.Process(target=_busy, args=(stop, args.duty, 100 * trial + h, memory))
            for h in range(args.hogs)
        ]
        for hog in hogs:
            hog.start()
        try:
            samples = _samples(workload, group, shape, MOST_ROUNDS)
        finally:
            stop.set()
            for hog in hogs:
                hog.join()
        found = {name: _score(read, reference) for name, read in readings(samples).items()}
        trials.append(found | {"settled_round": settled_round(samples)})
        print(f"trial {trial}: {json.dumps(trials[-1])}", file=sys.stderr)
    print(
        f"\n{args.workload} at T = {args.t}, {len(group)} candidates, {args.trials} trials, "
        f"{args.hogs} {args.hog} processes busy {args.duty:.0%} of the time; medians of trials"
    )
    print("| reading | common shift | median error | p90 error | fastest by it, at |")
    print("|---|---|---|---|---|")
    summary = {}
    for name in trials[0]:
        if name == "settled_round":
            continue
        rows = [t[name] for t in trials]
        summary[name] = {
            key: statistics.median(r[key] for r in rows)
            for key in ("shift", "median_error", "p90_error", "pick_at")
        } | {"worst_pick_at": max(r["pick_at"] for r in rows)}
        s = summary[name]
        print(
            f"| {name} | {s['shift']:+.3f} | {s['median_error']:.3f} | {s['p90_error']:.3f} | "
            f"{s['pick_at']:.3f} (worst {s['worst_pick_at']:.3f}) |"
        )
    rounds = [t["settled_round"] for t in trials]
    print(f"rounds until settled: {', '.join(map(str, rounds))}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": " ".join(sys.argv), "reference": reference, "trials": trials}
    args.out.write_text(json.dumps(record | {"summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
