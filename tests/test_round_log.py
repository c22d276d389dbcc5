"""The search log (``dcmlir tune --search-log``): every measurement in it, in the order the
search asked, and the same rounds again when a tune is resumed from its records."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import DENSE, fake_dense_search

import dcmlir
from dcmlir.search.round_log import ROUND_REASONS, RoundLog
from dcmlir.search.shape_generic import SearchResult
from dcmlir.testing import FakeMeasurer, FakeRunner, small_cost_model


def logged_search(db: Path, budget: int = 120) -> tuple[SearchResult, list[dict], FakeMeasurer]:
    stream = io.StringIO()
    measurer, search = fake_dense_search(db, budget, log=RoundLog(stream))
    result = search.run()
    return result, [json.loads(line) for line in stream.getvalue().splitlines()], measurer


def test_the_log_holds_every_measurement_in_order_and_ends_with_the_selection(
    tmp_path: Path,
) -> None:
    result, lines, _ = logged_search(tmp_path / "r.jsonl")
    head, rounds, last = lines[0], lines[1:-1], lines[-1]
    assert head["event"] == "search" and head["budget"] == 120 and head["search"] == 1
    assert head["shapes"] == len(result.shapes) and head["candidates"] == len(result.candidates)
    assert {line["event"] for line in rounds} == {"round"}
    assert rounds[0]["why"] == "first" and {r["why"] for r in rounds} <= set(ROUND_REASONS)
    assert [r["round"] for r in rounds] == list(range(1, len(rounds) + 1))
    used = [r["used"] for r in rounds]
    assert used == sorted(used) and used[0] == 0 and used[-1] < result.measurements
    sizes = [sum(p["new"] for p in r["pairs"]) for r in rounds]
    assert [u + n for u, n in zip(used, sizes, strict=True)][:-1] == used[1:]  # no pair unlogged
    assert used[-1] + sizes[-1] == result.measurements
    # exact builds are timed beside the chosen kernel, both again: not first records
    searched = [r for r in rounds if r["why"] != "exact"]
    logged = {(p["candidate"], tuple(p["shape"])) for r in searched for p in r["pairs"]}
    assert logged == set(result.measured)
    for line in searched:
        for pair in line["pairs"]:
            seconds = result.measured[(pair["candidate"], tuple(pair["shape"]))]
            expected = round(seconds * 1e6, 2) if math.isfinite(seconds) else None
            assert pair["measured_us"] == expected
    # the rounds after the first measurements were asked from an estimate, of the table's
    # candidates; exact builds are not in the table
    later = [p for r in rounds[1:] if r["why"] != "exact" for p in r["pairs"]]
    assert later and all(p["estimate_us"] is not None for p in later)
    assert rounds[0]["kernels"] == [] and all(r["kernels"] for r in rounds[1:-1])
    assert rounds[-1]["why"] == "exact"  # this budget keeps some for exact builds
    exact = rounds[-1]["pairs"]
    assert {p["candidate"].split(":")[0] for p in exact[::2]} == {"exact"}
    assert all(p["measured_us"] is not None for p in exact)
    assert set(result.exact) <= {tuple(p["shape"]) for p in exact}  # kept where it won
    assert last["event"] == "selection" and last["used"] == result.measurements
    assert list(last["kernels"]) == [k.key() for k in result.kernels]
    chosen = {tuple(s): key for key, shapes in last["kernels"].items() for s in shapes}
    assert chosen == {s: result.kernels[k].key() for s, k in result.choice.items()}


def test_a_search_resumed_from_its_records_logs_the_same_rounds(tmp_path: Path) -> None:
    _, first, _ = logged_search(tmp_path / "r.jsonl")
    _, again, measurer = logged_search(tmp_path / "r.jsonl")
    assert measurer.timed == []  # nothing timed: the log came from the records
    assert again == first


def test_a_round_of_an_unknown_reason_is_refused() -> None:
    log = RoundLog(io.StringIO())
    log.started("w", 10, 2, 3)
    with pytest.raises(ValueError, match="unknown reason 'guess'"):
        log.round(None, "guess", [], np.zeros((1, 1)))  # type: ignore[arg-type]


def test_tune_writes_the_log_of_the_search_behind_its_plan(tmp_path: Path) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    log = tmp_path / "rounds.jsonl"
    options = {"dims": ["1:6"], "budget": 12, "level": "input", "stream": io.StringIO()}
    options |= {"runner": FakeRunner, "cost_model": small_cost_model(), "search_log": log}
    options |= {"guard": False, "placement": False, "db": tmp_path / "r.jsonl"}
    report = dcmlir.tune(source, output=tmp_path / "plan.json", **options)  # type: ignore[arg-type]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0]["event"] == "search"
    assert lines[-1]["event"] == "selection"
    (planned,) = report.plan.workloads
    assert lines[0]["workload"] == planned.key
    assert set(lines[-1]["kernels"]) >= {k.candidate_key for k in planned.kernels}
    first = log.read_text()
    dcmlir.tune(source, output=tmp_path / "again.json", **options)  # type: ignore[arg-type]
    assert log.read_text() == first  # written anew, the same rounds from the records
