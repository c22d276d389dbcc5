"""GPT-2 from a config, token-id inputs, and run-model's peers (IREE data tiling, onnxruntime)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dcmlir.bench.model_inputs import TokenProblem, embedding_rows, is_integer, token_bound
from dcmlir.bench.model_peers import DATA_TILING, NUMPY, ONNX, TORCH, data_tiling_build
from dcmlir.measure.runner import ShapeProblem
from dcmlir.models.hf_models import Gpt2Config, source_from_text

TINY = {"layers": 1, "hidden": 64, "heads": 2, "n_positions": 16, "vocab": 100, "seq": (1, 8)}


def test_gpt2_config_refuses_a_range_past_its_position_table() -> None:
    with pytest.raises(ValueError, match=r"T up to 128 needs n_positions >= 128: the position"):
        Gpt2Config(2, n_positions=64)
    with pytest.raises(ValueError, match="not a multiple of heads"):
        Gpt2Config(1, hidden=64, heads=3)
    assert Gpt2Config(12).describe().startswith("12-layer GPT-2, hidden 768, 12 heads, vocab 50257")


def test_token_problem_draws_ids_below_the_bound_and_keeps_floats() -> None:
    def reference(inputs):
        return [np.asarray(inputs[1], dtype=np.float64)]

    shapes = ((1, 9), (9, 4))
    tokens = TokenProblem(shapes, ("int64", "float32"), reference=reference, bounds=(7, None))
    plain = ShapeProblem(shapes, ("int64", "float32"), reference=reference)
    inputs, expected = tokens.arrays(3, 0)
    plain_inputs, _ = plain.arrays(3, 0)
    for (ids, x), (plain_ids, plain_x), (out,) in zip(inputs, plain_inputs, expected, strict=True):
        assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 7
        assert len(np.unique(ids)) > 1  # varied ids, not one token
        assert not plain_ids.any()  # what a plain problem feeds: floats in (-1, 1) cast, zeros
        np.testing.assert_array_equal(x, plain_x)  # f32 inputs as before
        np.testing.assert_array_equal(out, x)


def test_token_bounds_come_from_the_config_else_the_embedding_table_else_two() -> None:
    text = (
        "%e = tensor.extract %p_wte[%a, %b] : tensor<100x64xf32>\n"
        "%p = tensor.extract %p_wpe[%c, %b] : tensor<16x64xf32>\n"
        "%m = tensor.extract %mask[%c, %b] : tensor<1x?xi64>\n"
    )
    assert embedding_rows(text) == 16 and token_bound(text, None) == 16
    assert token_bound("util.func @main()", None) == 2
    assert is_integer("i64") and is_integer("si32") and not is_integer("f32")


def test_data_tiling_that_does_not_compile_is_a_one_line_reason() -> None:
    reason = data_tiling_build("func.func @main( {")
    assert isinstance(reason, str) and reason.startswith(
        "IREE could not compile it with data tiling:"
    )
    assert "\n" not in reason


# --- with torch: GPT-2 imported, run, checked --------------------------------------------


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dcmlir.models.hf_models import gpt2  # the torch extra: README command 2 installs it

    path = tmp_path_factory.mktemp("gpt2") / "gpt2.mlir"
    gpt2(**TINY).save(path)
    return path


def test_gpt2_imports_with_token_ids_and_matches_torch(gpt2_file: Path) -> None:
    from dcmlir.build.compiler import build
    from dcmlir.ir.iree import ParameterFile, load_function
    from dcmlir.measure.timing import relative_error
    from dcmlir.models.torch_import import torch_reference

    text = gpt2_file.read_text()
    assert text.startswith("// dcmlir-model: gpt2 {")
    assert "util.func public @main(%arg0: tensor<1x?xi64>) -> tensor<1x?x64xf32>" in text
    assert "umin = 1, umax = 8" in text and text.count("linalg.matmul") == 4
    source = source_from_text(text)
    assert source is not None and source.vocab == 100 and source.seq_axes == (1,)
    assert embedding_rows(text) == 16  # the smaller table: the position embedding
    params = ParameterFile(str(gpt2_file.with_suffix(".irpa")), "model")
    function = load_function(build(text, "llvm-cpu").vmfb, "main", parameters=params)
    model = source.build()
    rng = np.random.default_rng(0)
    for t in (1, 5, 8):
        ids = rng.integers(0, 100, (1, t)).astype(np.int64)
        (out,) = function(ids)
        assert out.shape == (1, t, 64)
        assert relative_error(out, torch_reference(model, [ids])) < 1e-4


def test_run_model_feeds_token_ids_and_checks_every_peer(gpt2_file: Path) -> None:
    """Both IREE builds, onnxruntime, numpy and torch eager checked against torch float64 on
    int64 ids; a build of other weights fails its check (the ids reach a real comparison)."""
    from dcmlir.bench.model_compare import run_model
    from dcmlir.build.compiler import build
    from dcmlir.ir.iree import ParameterFile
    from dcmlir.measure.timing import MeasureSettings
    from dcmlir.models.hf_models import gpt2

    text = gpt2_file.read_text()
    params = ParameterFile(str(gpt2_file.with_suffix(".irpa")), "model")
    default = build(text, "llvm-cpu").vmfb
    other = gpt2(**{**TINY, "seed": 1}).import_model("inline")  # same shapes, other weights
    wrong = build(other.text, "llvm-cpu").vmfb
    settings = MeasureSettings(min_time=0.002, rounds=2, input_sets=2, warmup=0.002)
    run = run_model(text, default, default, [8, 1], parameters=params, settings=settings)
    assert run.reference == "torch (float64)" and not run.unavailable
    assert run.columns == ["IREE default", DATA_TILING, "dcmlir", ONNX, NUMPY, TORCH]
    for row in run.rows:
        for name, timing in row.comparison.timings.items():
            assert timing.ok and timing.max_error is not None and timing.max_error <= 1e-4, name
        assert math.isfinite(row.versus_best_iree(ONNX))
    assert not run.failures and not run.peer_failures
    assert any(line.startswith("geomean time / best of IREE") for line in run.table())
    # other weights in the tuned slot: its check fails against the reference
    bad = run_model(text, wrong, default, [3], parameters=params, settings=settings, peers=())
    assert bad.columns == ["IREE default", "dcmlir", TORCH]
    assert bad.failures and "dcmlir: check: MismatchError" in bad.failures[0]


@pytest.fixture(scope="module")
def gpt2_plan(gpt2_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan tuned in a hurry on ``local-sync`` (budget 6, one round of 2 ms samples); the
    tests only read it, so the module tunes it once."""
    from dcmlir.tools.cli import main

    plan = tmp_path_factory.mktemp("gpt2-plan") / "plan.json"
    tune = ["tune", str(gpt2_file), "--budget", "6", "--db", str(plan.with_name("r.jsonl"))]
    assert main([*tune, "-o", str(plan), "--min-time", "0.002", "--rounds", "1"]) == 0
    return plan


def test_run_model_command_on_gpt2_with_peers(
    gpt2_file: Path, gpt2_plan: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dcmlir.tools.cli import main

    args = ["run-model", str(gpt2_file), "--plan", str(gpt2_plan), "--seq", "2,8"]
    out_json = tmp_path / "run.json"
    code = main([*args, "--min-time", "0.002", "--rounds", "2", "--json", str(out_json)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "building the module with IREE data tiling" in captured.err
    assert "IREE data tiling (ms)" in captured.out and "onnxruntime (ms)" in captured.out
    result = json.loads(out_json.read_text())
    assert result["columns"] == ["IREE default", DATA_TILING, "dcmlir", ONNX, NUMPY, TORCH]
    for row in result["rows"]:
        assert set(row["ms"]) == set(result["columns"]) and not row["errors"]
        assert row["max_rel_error"] <= 1e-4
    code = main([*args, "--peers", "nope"])
    assert code == 1 and "--peers: 'nope' is not one of" in capsys.readouterr().err


def test_a_module_without_a_torch_model_has_no_onnx_column(tmp_path: Path) -> None:
    """Checked against IREE's default build; the onnxruntime column says why it is absent."""
    from dcmlir.bench.model_compare import run_model
    from dcmlir.build.compiler import build
    from dcmlir.measure.timing import MeasureSettings

    text = (
        "func.func @main(%a: tensor<?x8xf32>, %b: tensor<8x4xf32>) -> tensor<?x4xf32> {\n"
        "  %c0 = arith.constant 0 : index\n  %z = arith.constant 0.0 : f32\n"
        "  %m = tensor.dim %a, %c0 : tensor<?x8xf32>\n"
        "  %e = tensor.empty(%m) : tensor<?x4xf32>\n"
        "  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>\n"
        "  %r = linalg.matmul ins(%a, %b : tensor<?x8xf32>, tensor<8x4xf32>)"
        " outs(%f : tensor<?x4xf32>) -> tensor<?x4xf32>\n"
        "  return %r : tensor<?x4xf32>\n}\n"
    )
    vmfb = build(text, "llvm-cpu").vmfb
    settings = MeasureSettings(min_time=0.002, rounds=1, input_sets=1, warmup=0.0)
    run = run_model(text, vmfb, vmfb, [3], settings=settings)
    assert run.reference == "IREE's default build"
    assert run.unavailable[ONNX].startswith("no torch model to export")
    assert run.unavailable[NUMPY].startswith("no numpy model of this module")
    assert run.unavailable[TORCH].startswith("no torch model of this module")
    assert DATA_TILING in run.rows[0].comparison.timings and not run.failures
    assert any(line.startswith("onnxruntime: not timed: no torch model") for line in run.table())


def test_the_encoder_exports_to_onnx_through_the_core_aten_graph(tmp_path: Path) -> None:
    """torch 2.13's exporter refuses the encoder's 3-D attention; the graph IREE imports
    exports instead (with a note saying so), and onnxruntime matches torch on it."""
    from dcmlir.bench.model_peers import OnnxModel, encoder_source, export_onnx, torch_reference
    from dcmlir.measure.timing import relative_error
    from dcmlir.models import EncoderConfig

    source = encoder_source(EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(1, 16)))
    path = tmp_path / "encoder.onnx"
    note = export_onnx(source, [np.ones((7, 32), np.float32)], path)
    assert note == (
        "exported from the core-ATen graph IREE imports (as it is: AssertionError: only 4D "
        "query, key, and value are supported)"
    )
    session = OnnxModel(str(path), 1)
    reference = torch_reference(source, 1)
    for t in (1, 16):
        x = np.random.default_rng(t).random((t, 32), dtype=np.float32)
        (out,) = session.to_host(session.invoke(session.prepare([x])))
        assert relative_error(out, reference([x])[0]) < 1e-4


def test_run_model_on_local_task_times_every_peer_in_its_own_process(gpt2_file: Path) -> None:
    """Two threads: IREE's builds, onnxruntime and torch eager each in a measuring process of
    their own, every output still checked against torch float64."""
    from dcmlir.bench.model_compare import run_model
    from dcmlir.build.compiler import build
    from dcmlir.ir.iree import ParameterFile
    from dcmlir.measure.timing import MeasureSettings

    text = gpt2_file.read_text()
    params = ParameterFile(str(gpt2_file.with_suffix(".irpa")), "model")
    default = build(text, "llvm-cpu").vmfb
    settings = MeasureSettings(min_time=0.002, rounds=2, input_sets=2, warmup=0.002)
    run = run_model(
        text,
        default,
        default,
        [4],
        parameters=params,
        settings=settings,
        device="local-task",
        threads=2,
    )
    assert (run.device, run.threads) == ("local-task", 2)
    assert run.columns == ["IREE default", DATA_TILING, "dcmlir", ONNX, NUMPY, TORCH]
    for name, timing in run.rows[0].comparison.timings.items():
        assert timing.ok and timing.max_error is not None and timing.max_error <= 1e-4, name
        assert timing.interference < 0.5, (name, timing.interference)


def test_run_model_warns_when_the_plan_was_tuned_on_another_device(
    gpt2_file: Path, gpt2_plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dcmlir.tools.cli import main

    args = ["run-model", str(gpt2_file), "--plan", str(gpt2_plan), "--seq", "2", "--peers", "none"]
    code = main(
        [*args, "--device", "local-task", "--threads", "2", "--min-time", "0.002", "--rounds", "1"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "warning: the plan was tuned on local-sync with 1 thread(s)" in captured.err
    assert "--device local-task --threads 2" in captured.err
    assert "on local-task (2 threads)" in captured.out
