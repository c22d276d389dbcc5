"""The floor's choice on a tune's own evidence, against the bench's side-by-side truth (issue 14).

With an argument weight, where no kernel is proven the plan runs the faster of IREE's
default and its data tiling as :class:`dcmlir.search.floor_builds.FloorBuilds` estimates
them from the tune's pairs. This script takes the records of real tunes
(``benchmarks/never_slower.py``'s ``tune.jsonl``), gives every pair in them to the search
once (nothing is timed), and reads the floor's pick at each T of the bench's diagonal
(``data tiling`` where its estimate is below the default's). The truth is the two
builds' times in the bench's per-T files (``never_slower.py``'s ``<workload>.json``, the
geomean over the runs given): a pick more than 1.03x the faster build is a miss. The
evidence is fixed, so a change to the floor's estimate is judged on it alone, in seconds,
without a new tune: the search's later choices, which a replay of the whole search would
add, are left out.

    python benchmarks/floor_check.py \\
        --records docs/results/never_slower/floor_evidence/b60.jsonl.gz,... \\
        --bench docs/results/never_slower/b60,docs/results/never_slower/b240 [--verbose]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from never_slower import all_workloads

from dcmlir.cost_model import CostModel
from dcmlir.driver.loading import load_model
from dcmlir.measure.loop import MeasureReport
from dcmlir.records import Record
from dcmlir.search.settings import SearchSettings
from dcmlir.search.shape_generic import ShapeGenericSearch
from dcmlir.search.shape_range import shapes_in_range
from dcmlir.shapes import Shape
from dcmlir.space import Candidate, workload_space
from dcmlir.target import target_from_json
from dcmlir.workload import Workload

SLOWER = 1.03
"""A pick above this over the faster build misses issue 14's 0.97x."""


class RecordsOnly:
    """A measurer that answers from records and times nothing."""

    def __init__(self, records: dict[tuple[str, Shape], Record]) -> None:
        self.records = records

    def measure_pairs(
        self,
        pairs: Sequence[tuple[Candidate, Shape]],
        *,
        calls: int | None = None,
        again: bool = False,
    ) -> MeasureReport:
        report = MeasureReport(workload=None, candidates=[], shapes=[])  # type: ignore[arg-type]
        for candidate, shape in pairs:
            record = self.records.get((candidate.key(), shape))
            if record is not None:
                report.records[candidate.key(), shape] = record
        return report


def load_records(path: Path) -> list[Record]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [Record.from_line(line) for line in lines if line.strip()]


def truth(benches: Sequence[Path], name: str) -> dict[int, tuple[float, float]]:
    """T -> (IREE default, data tiling) seconds, the geomean over the bench runs."""
    found: dict[int, list[tuple[float, float]]] = {}
    for folder in benches:
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        for row in json.loads(path.read_text())["rows"]:
            cells = row["cells"]
            times = (cells["iree-default"]["median_us"], cells["iree-data-tiling"]["median_us"])
            if None not in times:
                found.setdefault(row["shape"][0], []).append(times)

    def mean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values)) * 1e-6

    return {t: (mean([d for d, _ in v]), mean([x for _, x in v])) for t, v in found.items()}


def floor_picks(
    workload: Workload, records: list[Record], t_values: Sequence[int]
) -> dict[int, str]:
    """T -> the floor's pick on the diagonal, from every pair of ``records``."""
    target = target_from_json(records[0].target)
    candidates = workload_space(target, workload)
    by_key = {c.key(): c for c in candidates}
    found: dict[tuple[str, Shape], Record] = {}
    for record in records:
        if record.kind == "measure" and record.candidate_key in by_key:
            found.setdefault((record.candidate_key, tuple(record.shape)), record)
    settings = SearchSettings(seed=0)  # the tune's grid (seed 0, as never_slower.py tunes)
    grid = shapes_in_range(workload, settings.max_shapes, settings.seed)
    shapes = {tuple(s) for s in grid} | {(t, t) for t in t_values} | {s for _, s in found}
    model = CostModel(workload, target, 1, 0, route="config")
    search = ShapeGenericSearch(
        workload,
        RecordsOnly(found),
        model,
        candidates,
        settings,
        stream=io.StringIO(),
        shapes=sorted(shapes),
    )
    # every pair at once, as a resumed tune reads its records; then the estimate the plan's
    # floor comes from
    search._measure([(by_key[key], shape) for key, shape in found])
    estimate, _ = search.estimate()
    default, tiled = search.default, search.data_tiled
    if default is None or tiled is None or search.floor is None:
        raise SystemExit(f"floor_check: {workload.key}: no floor of two IREE builds here")
    picks = {}
    for t in t_values:
        row = search.shape_index[(t, t)]
        picks[t] = "datatiled" if estimate[row, tiled] < estimate[row, default] else "default"
    return picks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", required=True, help="comma-separated tune records (.jsonl[.gz])"
    )
    parser.add_argument(
        "--bench", required=True, help="comma-separated never_slower.py result folders"
    )
    parser.add_argument(
        "--workloads", default="", help="default: every attention workload in the records"
    )
    parser.add_argument("--verbose", action="store_true", help="every T: pick, estimate and truth")
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args()
    benches = [Path(p) for p in args.bench.split(",")]
    texts = all_workloads()
    names = (
        args.workloads.split(",")
        if args.workloads
        else [n for n in texts if "scores" in n or "context" in n]
    )
    rows, misses, excess = [], 0, 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for path in [Path(p) for p in args.records.split(",")]:
            if not path.exists():
                parser.error(f"--records: {path}: no such file")
            records = load_records(path)
            for name in names:
                source = Path(scratch) / f"{name}.mlir"
                source.write_text(texts[name])
                (workload,) = load_model(source, ["1:128"], io.StringIO()).workloads
                own = [r for r in records if r.workload == workload.key and r.kind != "build"]
                known = truth(benches, name)
                if not own or not known:
                    continue
                picks = floor_picks(workload, own, sorted(known))
                losses = {
                    t: known[t][pick == "datatiled"] / min(known[t]) for t, pick in picks.items()
                }
                slower = [t for t, loss in losses.items() if loss > SLOWER]
                misses += len(slower)
                excess += sum(math.log(v) for v in losses.values())
                rows.append(
                    {
                        "records": str(path),
                        "workload": name,
                        "slower_t": slower,
                        "worst": max(losses.values()),
                    }
                )
                worst, where = max(losses.values()), f"{path.name} {name}"
                print(f"{where}: {len(slower)} T above {SLOWER}x, worst {worst:.2f}: {slower}")
                if args.verbose:
                    cells = [
                        f"{t}:{p[0].upper()}/{known[t][1] / known[t][0]:.2f}"
                        for t, p in picks.items()
                    ]
                    print("    (T:pick/data tiling over the default)", " ".join(cells))
    print(
        f"total: {misses} T above {SLOWER}x over {len(rows)} tunes; sum of log losses {excess:.2f}"
    )
    if args.out:
        args.out.write_text(
            json.dumps(
                {"command": " ".join(sys.argv), "rows": rows, "misses": misses, "excess": excess},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
