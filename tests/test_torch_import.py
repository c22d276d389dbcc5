"""The PyTorch importer: export, decompositions, FX import, IREE's input conversion, numerics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dcmlir.bench.model_compare import torch_source  # noqa: E402
from dcmlir.bench.model_peers import encoder_config  # noqa: E402
from dcmlir.build.compiler import build  # noqa: E402
from dcmlir.ir.iree import load_function  # noqa: E402
from dcmlir.measure.timing import relative_error  # noqa: E402
from dcmlir.models import (  # noqa: E402
    EncoderConfig,
    encoder_reference,
    generate_encoder,
    make_weights,
    random_input,
)
from dcmlir.models.torch_import import (  # noqa: E402
    TorchEncoder,
    TorchImportError,
    export_program,
    hf_bert_model,
    import_torch,
    torch_reference,
)
from dcmlir.tools.cli import main  # noqa: E402

SMALL = EncoderConfig(hidden=64, heads=4, ffn=128, layers=2, seq=(1, 128))
SEQ_LENS = (1, 7, 64, 128)
RTOL = 1e-4


@pytest.fixture(scope="module")
def generated():
    return generate_encoder(SMALL)


@pytest.fixture(scope="module")
def encoder(generated) -> TorchEncoder:
    """The torch twin of the generated encoder, holding the same weights."""
    return TorchEncoder(SMALL).load_generator_weights(generated.weights).eval()


def targets(program) -> set[str]:
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


def test_decompositions_give_matmuls_not_linear_or_fused_attention(encoder) -> None:
    program = export_program(encoder, [torch.randn(7, 64)], {"seq": (1, 128)})
    ops = targets(program)
    assert {"aten.addmm.default", "aten.bmm.default", "aten._softmax.default"} <= ops
    assert not {t for t in ops if "linear" in t or "scaled_dot_product" in t}
    assert "aten.squeeze.dims" not in ops  # IREE 3.13's frontend does not know it
    assert [str(r) for r in program.range_constraints.values()] == ["VR[1, 128]"]


@pytest.mark.parametrize("mode", ["inline", "params"])
def test_import_matches_torch_and_numpy(encoder, generated, mode: str, tmp_path: Path) -> None:
    imported = import_torch(encoder, [torch.randn(7, 64)], {"seq": (1, 128)}, weights=mode)
    text = imported.text
    # Lowered: linalg on tensors, T dynamic, its range as util.assume.int, no torch left.
    assert "util.func public @main(%arg0: tensor<?x64xf32>) -> tensor<?x64xf32>" in text
    assert "util.assume.int" in text and "umin = 1, umax = 128" in text
    assert text.count("linalg.matmul") == 8 and text.count("linalg.batch_matmul") == 4
    assert (
        not any(f in text for f in ("!torch.", "= torch.", "torch_c."))
        and "tensor<4x?x?xf32>" in text
    )
    if mode == "params":
        assert "dense_resource" not in text and len(imported.parameters) == 24
        assert '#flow.parameter.named<"model"::"layers.0.qkv.weight">' in text
    else:
        assert "dense_resource<torch_tensor_192_64_torch.float32>" in text
    params = imported.save(tmp_path / "enc.mlir")
    function = load_function(build(text, "llvm-cpu").vmfb, "main", parameters=params)
    for seq_len in SEQ_LENS:
        x = random_input(SMALL, seq_len)
        (out,) = function(x)
        assert relative_error(out, torch_reference(encoder, [x])) < RTOL, seq_len
        assert relative_error(out, encoder_reference(SMALL, generated.weights, x)) < RTOL


def test_torch_dialect_output_keeps_symbolic_range(encoder) -> None:
    imported = import_torch(encoder, [torch.randn(5, 64)], {"seq": (3, 90)}, lower=False)
    assert 'torch.symbolic_int "' in imported.text and "min_val = 3, max_val = 90" in imported.text
    assert "torch.aten.addmm" in imported.text and "torch.aten.bmm" in imported.text


def test_hf_bert_model_imports_and_matches_torch(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    config = EncoderConfig(hidden=64, heads=4, ffn=128, layers=2, seq=(1, 128))
    model = hf_bert_model(config)
    example = torch.zeros((1, 7), dtype=torch.int64)
    imported = import_torch(model, [example], {"seq": (1, 128)}, input_dims=[{1: "seq"}],
                            weights="params")  # fmt: skip
    params = imported.save(tmp_path / "bert.mlir")
    function = load_function(build(imported.text, "llvm-cpu").vmfb, "main", parameters=params)
    rng = np.random.default_rng(0)
    for seq_len in SEQ_LENS:
        ids = rng.integers(0, 30000, (1, seq_len)).astype(np.int64)
        (out,) = function(ids)
        assert out.shape == (1, seq_len, 64)
        assert relative_error(out, torch_reference(model, [ids])) < RTOL, seq_len


def test_bad_dynamic_dims_are_clear_errors(encoder) -> None:
    x = torch.randn(7, 64)
    with pytest.raises(TorchImportError, match="range 0:8 is not 1 <= LO <= HI"):
        import_torch(encoder, [x], {"seq": (0, 8)})
    with pytest.raises(TorchImportError, match="dynamic dim 'batch' is not in dynamic_dims"):
        import_torch(encoder, [x], {"seq": (1, 8)}, input_dims=[{0: "batch"}])
    with pytest.raises(TorchImportError, match="weights must be one of inline, params"):
        import_torch(encoder, [x], weights="npz")
    with pytest.raises(TorchImportError, match=r"torch\.export failed"):
        import_torch(encoder, [x], {"seq": (1, 128)}, input_dims=[{1: "seq"}])


class _SizeArithmetic(torch.nn.Module):
    """``max`` of sizes, as MPT's ALiBi offset has it: ``torch.sym_max`` in the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.ones(1, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = max(0, self.bias.shape[0] - x.shape[0])
        return x + self.bias[start:, :]


def test_what_the_fx_importer_refuses_is_one_line_naming_the_models_line() -> None:
    """IREE's FX importer has no lowering for ``sym_max``; its message is the node's whole
    metadata (1.7 KB for MPT), the error one line: what, and the model's line."""
    with pytest.raises(TorchImportError) as caught:
        import_torch(_SizeArithmetic(), [torch.randn(7, 8)], {"seq": (1, 64)})
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith("FX import failed: IREE's FX importer cannot import sym_max")
    assert "(from test_torch_import.py:" in message
    assert "start = max(0, self.bias.shape[0] - x.shape[0])" in message


def test_import_torch_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_path = tmp_path / "enc.mlir"
    code = main(
        ["import-torch", "-o", str(out_path), "--bert-config", "1,32,2,64", "--seq", "1:16"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert lines[0] == "encoder: 1-layer encoder, hidden 32, 2 heads, FFN 64, T in 1..16, seed 0"
    assert lines[1].startswith(f"wrote {out_path} (") and "linalg on tensors" in lines[1]
    assert (tmp_path / "enc.irpa").exists() and "umax = 16" in out_path.read_text()
    code = main(["import-torch", "-o", str(out_path), "--bert-config", "1,32,2"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("dcmlir: error: argument --bert-config: '1,32,2' is not")


@pytest.mark.parametrize("model", ["encoder", "hf-bert"])
def test_built_in_models_carry_the_header_run_model_rebuilds_them_from(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str
) -> None:
    """Without the first line run-model has no torch model: checked against IREE's default,
    onnxruntime and torch columns n/a. With it, the same weights the module holds."""
    if model == "hf-bert":
        pytest.importorskip("transformers")
    out_path = tmp_path / f"{model}.mlir"
    args = ["--model", model, "--bert-config", "1,32,2,64", "--seq", "1:16", "--seed", "3"]
    code = main(["import-torch", "-o", str(out_path), "--weights", "inline", *args])
    assert code == 0, capsys.readouterr().err
    text = out_path.read_text()
    source = torch_source(text)
    assert source is not None and source.seq == (1, 16)
    function = load_function(build(text, "llvm-cpu").vmfb, "main")
    if model == "encoder":
        config = encoder_config(text)
        assert config == EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(1, 16), seed=3)
        x = random_input(config, 11)
        want = encoder_reference(config, make_weights(config), x)
    else:
        assert text.startswith("// dcmlir-model: bert {"), text[:200]
        x = np.arange(11, dtype=np.int64).reshape(1, 11) * 7
        want = torch_reference(source.build(), [x])
    (got,) = function(x)
    assert relative_error(got, want) < RTOL
