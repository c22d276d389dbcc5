"""Batch x sequence: a model with its batch and sequence length both dynamic.

The dense layers' ``M`` is then ``B*T`` and attention's batch ``B*heads``: products of
dynamic dims whose ranges are traced, tuned on their real shapes, dispatched on at run
time and checked on a grid of (batch, T).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from dcmlir.bench.model_inputs import ArgumentType, ModelRunError, check_points, point_label
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.models.hf_models import (
    DECODER_BATCH_SEQ_MAX,
    Gpt2Config,
    family_header,
    hf_model,
    model_header,
    source_from_text,
)
from dcmlir.tools.cli import main
from dcmlir.tools.dcmlir_opt import DcmlirOptMain
from dcmlir.workload import Workload, workloads

SCORES_BXT = """
func.func @scores(%x: tensor<?x?x16xf32>, %q: tensor<?x?x16xf32>, %k: tensor<?x16x?xf32>) -> tensor<?x?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b_dim = tensor.dim %x, %c0 : tensor<?x?x16xf32>
  %t_dim = tensor.dim %x, %c1 : tensor<?x?x16xf32>
  %b = util.assume.int %b_dim<umin = 1, umax = 3> : index
  %t = util.assume.int %t_dim<umin = 1, umax = 16> : index
  %b64 = arith.index_cast %b : index to i64
  %c4 = arith.constant 4 : i64
  %bh64 = arith.muli %b64, %c4 : i64
  %bh = arith.index_castui %bh64 : i64 to index
  %e = tensor.empty(%bh, %t, %t) : tensor<?x?x?xf32>
  %s = linalg.batch_matmul ins(%q, %k : tensor<?x?x16xf32>, tensor<?x16x?xf32>) outs(%e : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  return %s : tensor<?x?x?xf32>
}
"""


def annotated_workload(text: str) -> Workload:
    out, err = io.StringIO(), io.StringIO()
    args = ["-", "-p", "dcmlir-annotate-ranges"]
    code = DcmlirOptMain(args=args, stdin=io.StringIO(text), stdout=out, stderr=err).run()
    assert code == 0, err.getvalue()
    with ir.Context():
        ((_, found),) = list(workloads(parse_module(out.getvalue()).operation))
    assert isinstance(found, Workload)
    return found


def test_batch_heads_is_traced_and_tuned_beside_the_t_diagonal() -> None:
    """``B*4`` through an i64 ``muli`` gets 4..12; the T x T loops stay one value."""
    scores = annotated_workload(SCORES_BXT)
    assert [d.range for d in scores.dynamic_dims] == [(4, 12), (1, 16), (1, 16)]
    assert scores.equal_loops == ((1, 2),)
    shapes = scores.tied_shapes()
    assert shapes is not None and len(shapes) == 9 * 16  # every B*4 x the T diagonal
    assert all(t == s for _, t, s in shapes)
    assert {b for b, _, _ in shapes} == set(range(4, 13))


def test_points_fill_the_dynamic_dims_in_order() -> None:
    ids = ArgumentType((None, None), "i64")
    assert ids.shape((3, 7)) == (3, 7) and ids.shape(5) == (5, 5)
    assert ArgumentType((1, None, 64), "f32").shape(9) == (1, 9, 64)
    check_points([ids], [(1, 1), (3, 16)])
    with pytest.raises(ModelRunError, match=r"input 0 \(\?x\?\) has 2 dynamic dims; T=7 gives 1"):
        check_points([ids], [7])
    with pytest.raises(ModelRunError, match="BxT=3x7 gives 2"):
        check_points([ArgumentType((1, None), "i64")], [(3, 7)])
    assert point_label((3, 7)) == "BxT=3x7" and point_label(7) == "T=7"


def test_gpt2_batch_range_is_checked_and_kept_in_the_header() -> None:
    config = Gpt2Config(1, 64, 4, n_positions=16, vocab=100, seq=(1, 16), batch=(1, 3))
    assert "batch in 1..3, T in 1..16" in config.describe()
    source = source_from_text(model_header(config))
    assert source is not None and "batch in 1..3" in source.name
    assert "batch" not in model_header(Gpt2Config(1, 64, 4))
    with pytest.raises(ValueError, match="holds one size: leave the batch static"):
        Gpt2Config(1, 64, 4, batch=(1, 1))


def test_bert_header_rebuilds_the_model_and_decoders_keep_t_where_iree_is_right() -> None:
    sizes = {"layers": 1, "hidden": 64, "heads": 4, "vocab": 100}
    source = source_from_text(family_header("bert", sizes, (1, 16), 0, (1, 3)))
    assert (
        source is not None and source.name == "1-layer BERT, hidden 64, batch in 1..3, T in 1..16"
    )
    assert source.seq == (1, 16) and source.vocab == 100
    with pytest.raises(ValueError, match="bert header is not a valid config"):
        source_from_text('// dcmlir-model: bert {"seq": [1, 16]}')
    top = DECODER_BATCH_SEQ_MAX + 1
    for family in ("gpt2", "llama"):
        with pytest.raises(ValueError, match="causal attention wrongly past T = 64"):
            hf_model(family, sizes, seq=(1, top), batch=(1, 2))


def test_batch_needs_an_hf_config_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-torch", "-o", "x.mlir", "--batch", "1:4"]) == 1
    assert "--batch makes the batch of an --hf-config model dynamic" in capsys.readouterr().err


# --- with torch: import, tune, compile, run on a grid ---------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="import-torch needs the torch extra")
    pytest.importorskip("transformers", reason="--hf-config needs transformers")
    path = tmp_path_factory.mktemp("batch_seq") / "bert_bt.mlir"
    sizes = "layers=1,hidden=64,heads=4,vocab=100,positions=16"
    args = ["import-torch", "--hf-config", "bert", "--hf-sizes", sizes, "-o", str(path)]
    assert main([*args, "--seq", "1:16", "--batch", "1:3"]) == 0
    return path


def test_import_records_both_ranges(model: Path) -> None:
    text = model.read_text()
    assert text.startswith("// dcmlir-model: bert {") and '"batch": [1, 3]' in text
    assumed = re.findall(r"util\.assume\.int %\w+<umin = (\d+), umax = (\d+)>", text)
    assert sorted(set(assumed)) == [("1", "16"), ("1", "3")]
    assert "tensor<?x?xi64>" in text  # input_ids [B, T]


def test_tune_compile_and_check_a_batch_x_seq_grid(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    # 10: candidates are still built and timed on B*T shapes (the plumbing under test);
    # a larger budget only searched longer (at 30 every workload kept IREE's default too)
    tune = ["tune", str(model), "--budget", "10", "--db", str(tmp_path / "r.jsonl")]
    assert main([*tune, "-o", str(plan), "--min-time", "0.002", "--rounds", "1"]) == 0
    graph = json.loads(plan.with_suffix(".graph.json").read_text())
    dense = [w for w in graph["workloads"] if w["kind"].startswith("matmul")]
    assert dense and all(w["space"].startswith("?[1..48]x") for w in dense)  # B*T: 1..3*16
    scores = [w for w in graph["workloads"] if w["kind"] == "batch_matmul"]  # B*heads: 4..12
    assert scores and all(w["space"].startswith("?[4..12]x?[1..16]x") for w in scores)
    capsys.readouterr()
    vmfb = tmp_path / "tuned.vmfb"
    assert main(["compile", str(model), "--plan", str(plan), "-o", str(vmfb)]) == 0
    ops = len(graph["graph"]["nodes"])  # every dynamic contraction: dispatched on B*T, B*heads
    assert f"{ops} op(s) dispatched" in capsys.readouterr().out
    args = ["run-model", str(model), "--plan", str(plan), "--vmfb", str(vmfb)]
    args += ["--seq", "1,5,16", "--batch", "1,3"]
    out_json = tmp_path / "run.json"
    settings = ["--peers", "none", "--min-time", "0.002", "--rounds", "1"]
    code = main([*args, *settings, "--json", str(out_json)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "every output checked against torch (float64)" in captured.out
    assert "BxT=3x5" in captured.err and " 3x5 |" in captured.out
    result = json.loads(out_json.read_text())
    assert [row["t"] for row in result["rows"]] == [[b, t] for b in (1, 3) for t in (1, 5, 16)]
    for row in result["rows"]:
        assert not row["errors"] and row["max_rel_error"] <= 1e-4
        assert row["speedup"] > 0
