"""Measure a per-shape oracle on this machine: every candidate of the space at every T (issue 14).

``benchmarks/quality.py`` scores each search strategy against such a records file (the
replay). This script makes one: for each workload, every candidate of
:func:`dcmlir.space.workload_space` (IREE's default and data tiling included) at each T,
with the tuner's own protocol (``dcmlir tune``'s, with shorter samples: >= ``--min-time`` each,
``--rounds`` of them, a shape whose calls are all shorter than 250 us timed call by
call), the candidates of one T interleaved, every output checked. Resumable: a pair the
records hold is not timed again.

    python benchmarks/oracle.py --out results/oracle_epyc.jsonl \\
        --compact docs/results/oracle_epyc.jsonl.gz \\
        [--workloads dense_qkv,...] [--t 1,2,...] [--min-time 0.01] [--rounds 3]

``--grid``: the shapes ``dcmlir tune`` searches (:func:`search_shapes`: for attention's
two dynamic loops, the 256-shape T x T' grid, off the diagonal too) instead of ``--t``'s
diagonal; ``benchmarks/grid_replay.py`` replays the search on such an oracle.

``--compact``: the records gzipped, less what a replay never reads (``quality.py`` and
``oracle_noise.py`` read either form).

``--merge``: one oracle from several passes of this script (``--out`` of each, the first
the whole oracle): a pair timed in every pass gets the median of its passes' medians
(``extra["passes"]``) and their samples pooled (``extra["pass_samples"]``: how many
each pass took); the rest is the first pass's. One pass scores a second pass's picks at
0.940-0.997 (six workloads, EPYC); the median of three is what a target of 0.97 can be
checked against.

    python benchmarks/oracle.py --out results/pass2.jsonl   # then pass3 the same way
    python benchmarks/oracle.py --merge docs/results/oracle_epyc.jsonl.gz,results/pass2.jsonl,\
results/pass3.jsonl --compact docs/results/oracle_epyc_passes.jsonl.gz

The workloads of ``benchmarks/never_slower.py`` (BERT-base, held out, unseen and fresh;
weights as arguments here, as in the replay) are known by name. The unseen three and the
fresh three were each measured in three passes on their own (``--workloads`` the three,
pass1..3 merged into ``docs/results/oracle_epyc_unseen.jsonl.gz`` and
``oracle_epyc_fresh.jsonl.gz``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

from never_slower import NOVEL, STRUCTURE, all_workloads

from dcmlir.driver.loading import load_model
from dcmlir.driver.tuning import tuning_measure
from dcmlir.measure.loop import Measurer
from dcmlir.measure.runner import RunnerSettings
from dcmlir.measure.timing import MeasureSettings
from dcmlir.records import Record, RecordDatabase
from dcmlir.search.settings import SearchSettings
from dcmlir.search.shape_range import shapes_in_range
from dcmlir.shapes import Shape
from dcmlir.space import workload_space
from dcmlir.target import target_from_name
from dcmlir.workload import Workload

ORACLE_T = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 24, 31, 32, 33, 40, 48, 56, 63, 64, 65, 72, 80)
ORACLE_T += (88, 96, 100, 104, 112, 120, 127, 128)  # the Xeon oracle's 31 T


def known_workloads() -> dict[str, str]:
    """never_slower.py's workloads with an oracle: BERT-base, held out, unseen, fresh (the
    novel ones and those of another structure are judged live only, so that nothing is
    tuned on their oracle)."""
    live_only = NOVEL.keys() | STRUCTURE.keys()
    return {name: text for name, text in all_workloads().items() if name not in live_only}


def protocol(min_time: float = 0.01, rounds: int = 3) -> MeasureSettings:
    """The tuner's way of timing (``dcmlir tune``), with samples of ``min_time``."""
    return tuning_measure(min_time, rounds)


def search_shapes(workload: Workload) -> list[Shape]:
    """The shapes ``dcmlir tune`` searches at its default settings (seed 0): a replay over
    them makes the same choices of where to measure as a real tune."""
    settings = SearchSettings()
    return shapes_in_range(workload, settings.max_shapes, settings.seed)


def load_oracle(path: str | Path) -> list[Record]:
    """An oracle's records, from a records file or its gzip (``.jsonl.gz``, as committed)."""
    if not str(path).endswith(".gz"):
        return RecordDatabase(path, fsync=False).load()
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [Record.from_line(line) for line in lines if line.strip()]


def compact(records: Path, out: Path) -> None:
    """``records`` gzipped into ``out``, less what a replay never reads (the names a pair
    was timed beside: 87 per record)."""
    with gzip.open(out, "wt", encoding="utf-8") as handle:
        for record in RecordDatabase(records, fsync=False).load():
            extra = {k: v for k, v in record.extra.items() if k != "together"}
            handle.write(dataclasses.replace(record, extra=extra).to_line() + "\n")


def merge(passes: list[Path], out: Path) -> None:
    """The passes' records as one oracle in ``out`` (module docstring, ``--merge``)."""
    first, *others = [load_oracle(path) for path in passes]
    timed = [{_pair(r): r for r in records if r.kind == "measure"} for records in others]
    with out.open("w", encoding="utf-8") as handle:
        for record in first:
            again = [r for pairs in timed if (r := pairs.get(_pair(record))) is not None]
            if record.kind == "measure" and record.ok and len(again) == len(timed):
                record = _merged(record, again)
            handle.write(record.to_line() + "\n")


def _pair(record: Record) -> tuple[str, str, str, tuple[int, ...]]:
    return (record.workload, record.target_key, record.candidate_key, record.shape)


def _merged(record: Record, again: list[Record]) -> Record:
    """``record`` and the same pair timed again; a pass that failed it keeps its failure."""
    failed = next((r for r in again if not r.ok), None)
    if failed is not None:
        return failed
    medians = [record.median, *(r.median for r in again)]
    times = record.times + tuple(t for r in again for t in r.times)
    counts = [len(record.times), *(len(r.times) for r in again)]  # extra rounds vary them
    extra = {**record.extra, "passes": medians, "pass_samples": counts}
    return dataclasses.replace(record, median=statistics.median(medians), times=times, extra=extra)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="records file (appended to)")
    parser.add_argument(
        "--merge",
        metavar="PASSES",
        help="comma-separated records files of several passes: write one oracle to --compact",
    )
    parser.add_argument(
        "--compact", type=Path, metavar="GZ", help="then write the records gzipped to GZ"
    )
    parser.add_argument("--workloads", default=",".join(known_workloads()))
    parser.add_argument("--t", default=",".join(map(str, ORACLE_T)))
    parser.add_argument(
        "--grid",
        action="store_true",
        help="the shapes dcmlir tune searches (every dynamic loop on its own, off the "
        "diagonal too) instead of --t's diagonal",
    )
    parser.add_argument("--min-time", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.merge:
        if not args.compact:
            parser.error("--merge writes to --compact GZ; give it")
        with tempfile.TemporaryDirectory() as scratch:
            merged = Path(scratch) / "merged.jsonl"
            merge([Path(p) for p in args.merge.split(",")], merged)
            compact(merged, args.compact)
        return 0
    if args.out is None:
        parser.error("--out is needed to measure")
    texts = known_workloads()
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in texts]
    if unknown:
        parser.error(f"unknown workload {unknown[0]} (known: {', '.join(texts)})")
    ts = sorted({int(t) for t in args.t.split(",")})
    target = target_from_name("llvm-cpu")
    settings = RunnerSettings(protocol(args.min_time, args.rounds))
    db = RecordDatabase(args.out)
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            source = Path(scratch) / f"{name}.mlir"
            source.write_text(texts[name])
            (workload,) = load_model(source, ["1:128"], io.StringIO()).workloads
            space = workload_space(target, workload)
            shapes = [(t,) * len(workload.dynamic_dims) for t in ts]
            if args.grid:
                shapes = search_shapes(workload)
            start = time.perf_counter()
            print(f"== {name}: {len(space)} candidates x {len(shapes)} shapes", file=sys.stderr)
            with Measurer(workload, target, db, runner_settings=settings) as measurer:
                report = measurer.measure(space, shapes)
            failed = sum(not r.ok for r in report.records.values())
            seconds = time.perf_counter() - start
            print(f"== {name}: done in {seconds:.0f} s, {failed} failed pairs", file=sys.stderr)
    if args.compact:
        compact(args.out, args.compact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
