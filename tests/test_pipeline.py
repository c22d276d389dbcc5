"""Pipeline text: parsing, options, round-trip."""

from __future__ import annotations

import pytest

from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import ModulePass
from dcmlir.ir.pipeline import (
    PipelineError,
    UpstreamPass,
    parse_pipeline,
    pipeline_spec,
    split_top_level,
)
from dcmlir.passes import get_all_passes

REGISTRY = get_all_passes()


def parse(text: str):
    with ir.Context():
        return parse_pipeline(text, REGISTRY)


@pytest.mark.parametrize(
    "text",
    [
        "dcmlir-annotate-ranges{range=1:128}",
        "dcmlir-annotate-ranges{range=1:128 dims=arg0.0=1:64,arg1.1=2:32}",
        "dcmlir-list-workloads{json=out/workloads.json}",
        "dcmlir-microkernel-tile{sizes=8,16,8}",
        "dcmlir-microkernel-tile{print-schedule=true sizes=1,8,32,4}",
        "canonicalize,dcmlir-annotate-ranges{range=1:4},func.func(cse)",
        "dcmlir-annotate-ranges",
    ],
)
def test_round_trip(text: str) -> None:
    elements = parse(text)
    spec = pipeline_spec(elements)
    assert parse(spec) == elements
    assert pipeline_spec(parse(spec)) == spec


def test_builtin_module_anchor_is_accepted() -> None:
    assert parse("builtin.module(canonicalize,cse)") == [
        UpstreamPass("canonicalize"),
        UpstreamPass("cse"),
    ]


def test_options_reach_the_dataclass() -> None:
    (pass_,) = parse("dcmlir-annotate-ranges{range=2:9 dims=arg0.1=1:4}")
    assert isinstance(pass_, ModulePass)
    assert pass_.range == "2:9"  # type: ignore[attr-defined]
    assert pass_.dims == ("arg0.1=1:4",)  # type: ignore[attr-defined]


def test_defaults_are_not_written_back() -> None:
    (pass_,) = parse("dcmlir-microkernel-tile{sizes=4,4,4 print-schedule=false}")
    assert pass_.spec() == "dcmlir-microkernel-tile{sizes=4,4,4}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-such-pass", "unknown pass or bad pipeline element 'no-such-pass'"),
        ("dcmlir-annotate-ranges{range=1:2", "unbalanced"),
        ("dcmlir-annotate-ranges{bogus=1}", "has no option 'bogus'"),
        ("dcmlir-annotate-ranges{range=x}", "not LO:HI"),
        ("dcmlir-microkernel-tile{print-schedule=maybe sizes=8,8,8}", "use true or false"),
        ("canonicalize,,cse", "empty pass name"),
        ("canonicalize{nope=1}", "unknown pass or bad pipeline element"),
    ],
)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(PipelineError, match=message):
        parse(text)


def test_split_top_level_respects_nesting() -> None:
    assert split_top_level("a{x=1,2},b(c,d),e") == ["a{x=1,2}", "b(c,d)", "e"]
