"""The generated BERT-style encoder: its IR, its workloads, IREE's build of it, its reference."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dcmlir.bench.model_compare import run_model
from dcmlir.bench.model_peers import NUMPY, TORCH
from dcmlir.bench.numpy_models import NumpyEncoder
from dcmlir.build.compiler import build
from dcmlir.ir.iree import ParameterFile, run_compile
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.timing import MeasureSettings, MismatchError, relative_error
from dcmlir.models import (
    BERT_BASE,
    EncoderConfig,
    encoder_reference,
    generate_encoder,
    make_weights,
    random_input,
    save_model,
    verify_encoder,
    weight_shapes,
)
from dcmlir.tools.cli import main

SMALL = EncoderConfig(hidden=64, heads=4, ffn=128, layers=2, seq=(1, 128))
SEQ_LENS = (1, 7, 64, 128)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def listed(capsys: pytest.CaptureFixture[str], path: Path) -> list[dict[str, object]]:
    code, out, err = run(capsys, "workloads", str(path), "--json")  # no --dims on purpose
    assert code == 0, err
    return json.loads(out)["workloads"]


# --- configuration and weights -------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden": 100, "heads": 12}, "hidden (100) must be a multiple of heads (12)"),
        ({"layers": 0}, "layers must be a positive integer"),
        ({"seq": (0, 8)}, "seq must be LO:HI with 1 <= LO <= HI"),
        ({"seq": (9, 8)}, "seq must be LO:HI with 1 <= LO <= HI"),
        ({"dtype": "f16"}, "dtype 'f16' is not supported"),
        ({"gelu": "relu"}, "gelu must be one of erf, tanh"),
    ],
)
def test_config_rejects_bad_values(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EncoderConfig(**changes)  # type: ignore[arg-type]


def test_weights_are_seeded_and_sized() -> None:
    first, again = make_weights(SMALL), make_weights(SMALL)
    other = make_weights(EncoderConfig(hidden=64, heads=4, ffn=128, layers=2, seed=1))
    assert list(first) == list(weight_shapes(SMALL))
    assert all(
        first[n].shape == s and first[n].dtype == np.float32
        for n, s in weight_shapes(SMALL).items()
    )
    assert all(np.array_equal(first[n], again[n]) for n in first)
    assert not np.array_equal(first["layer0.qkv_w"], other["layer0.qkv_w"])
    assert BERT_BASE.parameter_count() == 2 * (4 * 768 * 768 + 2 * 768 * 3072 + 9 * 768 + 3072)


def test_generate_rejects_wrong_weights() -> None:
    weights = make_weights(SMALL)
    weights["layer1.out_w"] = weights["layer1.out_w"][:, :3]
    with pytest.raises(
        ValueError, match=r"weight 'layer1.out_w' is missing or not of shape \(64, 64\)"
    ):
        generate_encoder(SMALL, values=weights)
    with pytest.raises(ValueError, match="weights must be one of inline, params"):
        generate_encoder(SMALL, weights="npz")


# --- the IR --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["params", "inline"])
def test_module_parses_with_range_and_dynamic_signature(mode: str) -> None:
    model = generate_encoder(SMALL, weights=mode)
    with ir.Context():
        module = parse_module(model.text)
        (main_fn,) = [
            op.operation for op in module.body.operations if op.operation.name == "func.func"
        ]
        assert str(main_fn.attributes["function_type"]) == "(tensor<?x64xf32>) -> tensor<?x64xf32>"
    assert "util.assume.int %t_in<umin = 1, umax = 128> : index" in model.text
    if mode == "params":
        assert model.text.count('#flow.parameter.named<"model"::') == len(weight_shapes(SMALL))
        assert "dense_resource" not in model.text and set(model.parameters) == set(model.weights)
    else:
        assert model.text.count("dense_resource<") == len(weight_shapes(SMALL))
        assert "util.global" not in model.text and model.parameters == {}


def test_workloads_listed_with_ranges_without_dims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bert.mlir"
    save_model(generate_encoder(BERT_BASE), path)
    found = listed(capsys, path)
    described = [
        (w["kind"], [(loop["extent"], loop["range"]) for loop in w["loops"]]) for w in found
    ]
    t = (None, [1, 128])
    per_layer = [
        ("matmul", [t, (2304, None), (768, None)]),  # QKV
        ("batch_matmul", [(12, None), t, t, (64, None)]),  # scores 12 x T x T x 64
        ("batch_matmul", [(12, None), t, (64, None), t]),  # context 12 x T x 64 x T
        ("matmul", [t, (768, None), (768, None)]),  # attention output
        ("matmul", [t, (3072, None), (768, None)]),  # FFN1
        ("matmul", [t, (768, None), (3072, None)]),  # FFN2
    ]
    assert described == per_layer * BERT_BASE.layers
    # The same structural key in every layer: one tuning run serves them all.
    assert len({w["key"] for w in found}) == len(per_layer)


def test_out_in_layout_gives_transposed_b_matmuls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = generate_encoder(SMALL, weight_layout="out_in")
    params = save_model(model, tmp_path / "t.mlir")
    kinds = [w["kind"] for w in listed(capsys, tmp_path / "t.mlir")]
    assert (
        kinds[:6]
        == ["matmul_transpose_b", "batch_matmul", "batch_matmul"] + ["matmul_transpose_b"] * 3
    )
    assert model.parameters["layer0.qkv_w"].shape == (192, 64)  # stored [out, in]
    vmfb = build(model.text, "llvm-cpu").vmfb
    errors = verify_encoder(vmfb, model, (1, 7, 128), parameters=params)
    assert max(errors.values()) < 1e-5


# --- IREE builds it and it computes the reference ------------------------------------------


def test_reference_is_a_real_encoder() -> None:
    """Rows mix through attention (row 0 changes when row 1 does); layernorm holds each row."""
    weights = make_weights(SMALL)
    x = random_input(SMALL, 5)
    out = encoder_reference(SMALL, weights, x)
    changed = x.copy()
    changed[1] += 1.0
    assert not np.allclose(out[0], encoder_reference(SMALL, weights, changed)[0])
    # The last op is a layernorm: undoing its gamma and beta leaves rows of mean 0, variance 1.
    gamma, beta = weights["layer1.ln2_g"], weights["layer1.ln2_b"]
    unscaled = (out - beta) / gamma
    np.testing.assert_allclose(unscaled.mean(axis=1), 0, atol=1e-9)
    np.testing.assert_allclose(unscaled.var(axis=1), 1, atol=1e-6)


@pytest.mark.parametrize("mode", ["params", "inline"])
def test_iree_build_matches_reference(mode: str, tmp_path: Path) -> None:
    model = generate_encoder(SMALL, weights=mode)
    params = save_model(model, tmp_path / "small.mlir")
    assert (params is None) == (mode == "inline")
    vmfb = build(model.text, "llvm-cpu").vmfb
    errors = verify_encoder(vmfb, model, SEQ_LENS, parameters=params)
    assert set(errors) == set(SEQ_LENS) and max(errors.values()) < 1e-5


def test_tanh_gelu_matches_its_reference() -> None:
    config = EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(1, 16), gelu="tanh")
    model = generate_encoder(config, weights="inline")
    assert "math.tanh" in model.text and "math.erf" not in model.text
    errors = verify_encoder(build(model.text, "llvm-cpu").vmfb, model, (1, 16))
    assert max(errors.values()) < 1e-5


def test_verify_catches_a_wrong_model(tmp_path: Path) -> None:
    """A module built from other weights fails the check, naming the T."""
    model = generate_encoder(SMALL, weights="inline")
    other = generate_encoder(
        EncoderConfig(hidden=64, heads=4, ffn=128, layers=2, seq=(1, 128), seed=5),
        weights="inline",
    )
    vmfb = build(other.text, "llvm-cpu").vmfb
    with pytest.raises(MismatchError, match=r"T=1: relative error .* exceeds 0.0001"):
        verify_encoder(vmfb, model, (1, 7))
    with pytest.raises(ValueError, match=r"needs its \.irpa"):
        verify_encoder(vmfb, generate_encoder(SMALL), (1,))


def test_run_model_times_in_the_worker_and_keeps_a_wrong_build_as_a_failure() -> None:
    """run_model: the parent's numpy reference checks both builds in the Runner's worker;
    a build of other weights fails at every T (error text, infinite time), never dropped."""
    config = EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(1, 16))
    model = generate_encoder(config, weights="inline")
    other = generate_encoder(dataclasses.replace(config, seed=5), weights="inline")
    default = build(model.text, "llvm-cpu").vmfb
    settings = MeasureSettings(min_time=0.002, rounds=2, input_sets=2, warmup=0.002)
    seen: list[int] = []
    run = run_model(
        model.text,
        build(other.text, "llvm-cpu").vmfb,
        default,
        [3, 1],
        reference="numpy",
        settings=settings,
        progress=seen.append,
        config=config,
        peers=(),  # the builds alone: no torch eager without a torch reference or the peer
    )
    assert seen == [3, 1] and run.reference == "numpy (float64)" and not run.has_torch
    assert [row.seq_len for row in run.rows] == [3, 1]
    for row in run.rows:
        default_timing = row.comparison["IREE default"]
        assert default_timing.ok and len(default_timing.samples) == 2
        assert (row.comparison["dcmlir"].error or "").startswith("check: MismatchError")
        assert math.isnan(row.speedup)  # default time over a failed build's: no ratio
    assert len(run.failures) == 2 and run.failures[0].startswith("T=3: dcmlir: check:")
    assert any("failed" in line for line in run.table())


def test_numpy_and_torch_time_a_generated_encoder_beside_iree() -> None:
    """The numpy peer is the encoder's float32 forward (the reference's formula on float32
    weights), torch eager the same model in torch; each is checked like the builds."""
    config = EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(1, 16))
    encoder = NumpyEncoder(config, 1)
    x = random_input(config, 7)
    (out,) = encoder.to_host(encoder.invoke(encoder.prepare([x])))
    expected = encoder_reference(config, make_weights(config), x)
    assert out.dtype == np.float32 and relative_error(out, expected) < 1e-5
    model = generate_encoder(config, weights="inline")
    vmfb = build(model.text, "llvm-cpu").vmfb
    settings = MeasureSettings(min_time=0.002, rounds=2, input_sets=2, warmup=0.002)
    run = run_model(
        model.text, vmfb, vmfb, [5, 16], reference="numpy", settings=settings, peers=(NUMPY, TORCH)
    )
    assert run.columns == ["IREE default", "dcmlir", NUMPY, TORCH] and not run.unavailable
    for row in run.rows:
        for name in (NUMPY, TORCH):
            timing = row.comparison[name]
            assert timing.ok and timing.max_error is not None and timing.max_error <= 1e-4, name
    assert not run.failures and not run.peer_failures


def test_global_optimization_round_trip(tmp_path: Path) -> None:
    """The route dcmlir tunes on: --compile-to=global-optimization, then --compile-from."""
    model = generate_encoder(SMALL)
    params = save_model(model, tmp_path / "m.mlir")
    flags = (
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    )
    staged = run_compile(model.text, (*flags, "--compile-to=global-optimization"))
    assert staged.returncode == 0, staged.log
    text = staged.output.decode()
    # Weights stay out of the IR; the range and the contractions survive.
    assert '#flow.parameter.named<"model"::"layer0.qkv_w">' in text and "dense_resource" not in text
    assert "util.assume.int" in text and text.count("linalg.batch_matmul") == 4
    final = run_compile(text, (*flags, "--compile-from=global-optimization"))
    assert final.returncode == 0, final.log
    errors = verify_encoder(final.output, model, (1, 33, 128), parameters=params)
    assert max(errors.values()) < 1e-5


def test_bert_base_two_layers_matches_reference(tmp_path: Path) -> None:
    """The issue's model: 2-layer BERT-base sizes (14M weights), checked at three T."""
    model = generate_encoder(BERT_BASE)
    params = save_model(model, tmp_path / "bert.mlir")
    assert isinstance(params, ParameterFile) and Path(params.path).stat().st_size > 56_000_000
    vmfb = build(model.text, "llvm-cpu").vmfb
    errors = verify_encoder(vmfb, model, (1, 77, 128), parameters=params)
    assert max(errors.values()) < 1e-4


# --- the command ---------------------------------------------------------------------------


def test_generate_bert_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_path = tmp_path / "enc.mlir"
    code, out, err = run(
        capsys, "generate-bert", "-o", str(out_path), "--layers", "1", "--hidden", "32",
        "--heads", "2", "--ffn", "64", "--seq", "2:40", "--seed", "3",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert (
        lines[0] == "1-layer encoder, hidden 32, 2 heads, FFN 64, T in 2..40, seed 3: 8,544 weights"
    )
    assert lines[1].startswith(f"wrote {out_path} (") and lines[1].endswith(
        "@main, weights params)"
    )
    assert lines[2].startswith(f"wrote {tmp_path / 'enc.irpa'} (")
    assert "umin = 2, umax = 40" in out_path.read_text()
    config = EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(2, 40), seed=3)
    assert out_path.read_text() == generate_encoder(config).text


def test_generate_bert_inline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_path = tmp_path / "enc.mlir"
    code, out, _ = run(
        capsys, "generate-bert", "-o", str(out_path), "--layers", "1", "--hidden", "32",
        "--heads", "2", "--ffn", "64", "--weights", "inline",
    )  # fmt: skip
    assert code == 0 and "weights inline" in out and not (tmp_path / "enc.irpa").exists()
    assert "dense_resource<w_layer0_qkv_w>" in out_path.read_text()


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--hidden", "100"], 1, "dcmlir: error: hidden (100) must be a multiple of heads (12)"),
        (["--seq", "0:9"], 2, "dcmlir: error: argument --seq: range '0:9' must start at 1 or more"),
        (["--layers", "x"], 2, "dcmlir: error: argument --layers: 'x' is not an integer"),
        (["--weights", "inline", "--params", "w.irpa"], 1, "dcmlir: error: --params names"),
    ],
)
def test_generate_bert_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], status: int, message: str
) -> None:
    code, out, err = run(capsys, "generate-bert", "-o", str(tmp_path / "m.mlir"), *argv)
    assert code == status and out == ""
    assert err.startswith(message) and err.count("\n") == 1
