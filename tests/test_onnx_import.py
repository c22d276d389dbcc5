"""``dcmlir import-onnx``: dynamic axes to ranges, one-line errors, and an ONNX export of BERT,
GPT-2 and Llama imported, tuned, compiled and run by ``run-model`` against onnxruntime on the
file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="import-onnx needs onnx (pip install 'dcmlir[bench]')")
pytest.importorskip("onnxruntime", reason="the reference is onnxruntime ('dcmlir[bench]')")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from dcmlir.bench.model_compare import parameters_for, run_model  # noqa: E402
from dcmlir.build.compiler import build  # noqa: E402
from dcmlir.ir.iree import RuntimeFailure  # noqa: E402
from dcmlir.measure.timing import MeasureSettings  # noqa: E402
from dcmlir.models.hf_models import source_from_text  # noqa: E402
from dcmlir.models.onnx_import import dynamic_axes, import_onnx  # noqa: E402
from dcmlir.models.onnx_source import onnx_source_from_text  # noqa: E402
from dcmlir.tools.cli import main  # noqa: E402

QUICK_TUNE = ["--budget", "4", "--min-time", "0.002", "--rounds", "1"]
QUICK_RUN = ["--min-time", "0.002", "--rounds", "2"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("dcmlir: error: "), err
    return err.removeprefix("dcmlir: error: ").strip()


def projection_model(path: Path) -> Path:
    """``x[batch, seq, 8] @ w[8, 4] + b`` and ``mask[batch, ?]`` (an unnamed axis) summed in."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Unsqueeze", ["mask", "axis"], ["mask3"]),
        helper.make_node("Add", ["xw", "mask3"], ["y"]),
    ]
    axis = numpy_helper.from_array(np.array([2], np.int64), "axis")
    graph = helper.make_graph(nodes, "projection", [x, mask], [y], [weight, axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_dynamic_axes_are_named_by_dim_param_else_input_and_axis(tmp_path: Path) -> None:
    model = onnx.load(projection_model(tmp_path / "p.onnx"))
    described = [axis.describe() for axis in dynamic_axes(model)]
    assert described == ["x[0] (batch)", "x[1] (seq)", "mask[0] (batch)", "mask[1] (mask.1)"]


def test_ranges_bind_each_axis_and_a_single_size_makes_it_static(tmp_path: Path) -> None:
    path = projection_model(tmp_path / "p.onnx")
    ranges = {"batch": (1, 1), "seq": (2, 16), "mask.1": (2, 16)}
    imported, chosen = import_onnx(path, ranges, weights="inline")
    assert chosen == ranges
    text = imported.text
    assert "util.func public @main(%arg0: tensor<1x?x8xf32>, %arg1: tensor<1x?xf32>)" in text
    # IREE's input conversion keeps the top (umax) and writes umin = 1 whatever the bottom,
    # as for a torch-imported module; a static axis has none
    assert text.count("umin = 1, umax = 16") == 2 and "umax = 1>" not in text
    source = onnx_source_from_text(text)
    assert source is not None and source.path == str(path.resolve()) and source.dims == ranges
    assert source.vocab is None  # no input indexes a table
    assert source_from_text(text) is None  # an ONNX file, no torch model to rebuild
    # the module against onnxruntime on the file (its reference): both dynamic axes at T
    vmfb = build(text, "llvm-cpu").vmfb
    settings = MeasureSettings(min_time=0.002, rounds=1, input_sets=2, warmup=0.0)
    result = run_model(text, vmfb, vmfb, [3, 9], settings=settings, peers=())
    assert result.reference == "onnxruntime on p.onnx" and not result.failures
    assert all(row.max_error <= 1e-5 for row in result.rows)
    # a static first input: the range binds to the second argument, the one it belongs to
    static_x = {"batch": (1, 1), "seq": (5, 5), "mask.1": (2, 16)}
    imported, _ = import_onnx(path, static_x, weights="inline")
    assert "@main(%arg0: tensor<1x5x8xf32>, %arg1: tensor<1x?xf32>)" in imported.text
    assert "util.assume.int %dim<umin = 1, umax = 16>" in imported.text
    static_vmfb = build(imported.text, "llvm-cpu").vmfb
    result = run_model(imported.text, static_vmfb, static_vmfb, [5], settings=settings, peers=())
    assert result.reference == "onnxruntime on p.onnx" and not result.failures
    # T = 4 for the mask against x's fixed 5: onnxruntime's refusal is one line
    with pytest.raises(RuntimeFailure, match=r"onnxruntime \(the reference\) failed on inputs "):
        run_model(imported.text, static_vmfb, static_vmfb, [4], settings=settings, peers=())
    # the default range for an axis given none
    _, chosen = import_onnx(path, {"batch": (1, 1)}, weights="inline", lower=False)
    assert chosen == {"batch": (1, 1), "seq": (1, 128), "mask.1": (1, 128)}


def test_run_model_refuses_a_changed_onnx_file(tmp_path: Path) -> None:
    path = projection_model(tmp_path / "p.onnx")
    imported, _ = import_onnx(path, {"batch": (1, 1)}, weights="inline")
    vmfb = build(imported.text, "llvm-cpu").vmfb
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(ValueError, match="changed since the module was imported from it"):
        run_model(imported.text, vmfb, vmfb, [3], peers=())
    result = run_model(imported.text, vmfb, vmfb, [3], peers=(), reference="default")
    assert result.reference == "IREE's default build"


def test_bad_inputs_are_one_line_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = str(tmp_path / "m.mlir")
    code, _, err = run(capsys, "import-onnx", str(tmp_path / "none.onnx"), "-o", out)
    assert code == 1 and one_line_error(err).endswith("none.onnx': no such file")
    text = tmp_path / "text.onnx"
    text.write_text("func.func @main() {\n  return\n}\n")
    code, _, err = run(capsys, "import-onnx", str(text), "-o", out)
    assert code == 1 and "text.onnx' is not an ONNX model" in one_line_error(err)
    path = str(projection_model(tmp_path / "p.onnx"))
    code, _, err = run(capsys, "import-onnx", path, "-o", out, "--dims", "sequence=1:8")
    assert code == 1 and one_line_error(err) == (
        "--dims: 'sequence' is not a dynamic axis of the model; its dynamic axes: "
        "x[0] (batch), x[1] (seq), mask[0] (batch), mask[1] (mask.1)"
    )
    code, _, err = run(capsys, "import-onnx", path, "-o", path)
    assert code == 1 and one_line_error(err).startswith("-o and MODEL.onnx name the same file")
    code, _, err = run(capsys, "import-onnx", path, "-o", out, "--params", path)
    assert code == 1 and one_line_error(err).startswith("--params and MODEL.onnx name the same")
    code, _, err = run(capsys, "import-onnx", path, "-o", out, "--dims", "seq=8:1")
    assert code == 2 and "seq: range '8:1' is reversed" in err
    # an op IREE does not know: the importer's lowering fails, in one line
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 4])
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [x], [y])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), tmp_path / "odd.onnx")
    code, _, err = run(capsys, "import-onnx", str(tmp_path / "odd.onnx"), "-o", out)
    assert code == 1 and "IREE's torch input conversion failed" in one_line_error(err)


# --- BERT and GPT-2 exported by torch.onnx, through tune, compile and run-model ----------------


def export_hf(family: str, path: Path) -> Path:
    """A 1-layer, 64-wide ``family`` model, random weights, exported with ``seq`` dynamic."""
    torch = pytest.importorskip("torch", reason="the ONNX export needs torch")
    pytest.importorskip("transformers", reason="the ONNX export needs transformers")
    from dcmlir.bench.model_peers import _quietly
    from dcmlir.models.hf_models import hf_model

    sizes = {"layers": 1, "hidden": 64, "heads": 2, "ffn": 128, "vocab": 100}
    model = hf_model(family, sizes, seq=(1, 32))
    seq = torch.export.Dim("seq", min=1, max=32)

    def export():
        return torch.onnx.export(
            model.module, tuple(model.example_inputs), dynamo=True, dynamic_shapes=({1: seq},)
        )

    _quietly(export, path)
    return path


# llama: RoPE's frequencies are a unit-batch MatMul [1, 32, 1] x [1, 1, T] whose dynamic dim is
# N, which dcmlir-drop-unit-batch once expanded without its size (invalid IR, a traceback)
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_hf_export_imports_tunes_compiles_and_matches_onnxruntime(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, family: str
) -> None:
    onnx_file = export_hf(family, tmp_path / f"{family}.onnx")
    module = tmp_path / f"{family}.mlir"
    code, out, err = run(
        capsys, "import-onnx", str(onnx_file), "-o", str(module), "--dims", "seq=1:32"
    )
    assert code == 0, err
    assert out.splitlines()[0] == f"{onnx_file}: seq in 1..32"
    text = module.read_text()
    assert text.startswith("// dcmlir-model: onnx {") and "umin = 1, umax = 32" in text
    source = onnx_source_from_text(text)
    assert source is not None and source.vocab == 100  # token ids index the 100-row table
    assert "util.func public @main(%arg0: tensor<1x?xi64>) -> tensor<1x?x64xf32>" in text
    assert parameters_for(module, text) is not None  # the weights went to the .irpa
    # MatMul by a weight (a unit-batch batch_matmul from IREE's importer) is a matmul now
    batched = [line for line in text.splitlines() if "linalg.batch_matmul" in line]
    assert "linalg.matmul" in text and not any("ins(%" in b and ": tensor<1x" in b for b in batched)
    plan = tmp_path / "plan.json"
    tune = ["tune", str(module), "--db", str(tmp_path / "r.jsonl"), "-o", str(plan)]
    code, out, err = run(capsys, *tune, *QUICK_TUNE)
    assert code == 0, err
    assert "?[1..32]x" in out  # the range reached the workloads
    result = tmp_path / "run.json"
    args = ["run-model", str(module), "--plan", str(plan), "--seq", "2,9,32"]
    code, out, err = run(capsys, *args, *QUICK_RUN, "--peers", "onnxruntime", "--json", str(result))
    assert code == 0, err
    assert f"every output checked against onnxruntime on {family}.onnx" in out
    rows = json.loads(result.read_text())
    assert rows["columns"] == ["IREE default", "dcmlir", "onnxruntime"]
    for row in rows["rows"]:
        assert not row["errors"] and row["max_rel_error"] <= 1e-4, row
