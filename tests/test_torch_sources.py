"""``import-torch``'s model sources: transformers configs, ``.pt2`` archives, factories, guards.

Each source is imported through the command and its module parsed; the archive and the
factory go on through ``dcmlir tune`` and ``dcmlir compile`` and are checked against torch.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dcmlir.bench.model_compare import reference_for  # noqa: E402
from dcmlir.bench.model_inputs import ModelRunError  # noqa: E402
from dcmlir.ir.iree import ParameterFile, load_function  # noqa: E402
from dcmlir.ir.mlir import ir  # noqa: E402
from dcmlir.measure.timing import relative_error  # noqa: E402
from dcmlir.models import EncoderConfig  # noqa: E402
from dcmlir.models.hf_models import hf_model, source_from_text  # noqa: E402
from dcmlir.models.torch_guards import ExportGuardError, explain_export_failure  # noqa: E402
from dcmlir.models.torch_import import TorchEncoder, torch_reference  # noqa: E402
from dcmlir.tools.cli import main  # noqa: E402

TINY = EncoderConfig(hidden=32, heads=2, ffn=64, layers=1, seq=(1, 64), seed=3)
QUICK_TUNE = ["--budget", "4", "--min-time", "0.002", "--rounds", "1"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(err: str) -> str:
    """The message of a ``dcmlir: error:`` line, the only line on stderr."""
    assert err.count("\n") == 1 and err.startswith("dcmlir: error: "), err
    return err.removeprefix("dcmlir: error: ").strip()


def main_signature(path: Path) -> str:
    """``@main``'s line, after checking the module parses (the header comment included)."""
    text = path.read_text()
    with ir.Context():
        ir.Module.parse(text)
    return next(line.strip() for line in text.splitlines() if "util.func public @main" in line)


def tune_compile_and_load(
    capsys: pytest.CaptureFixture[str], module: Path, tmp_path: Path
) -> object:
    """``dcmlir tune`` (tiny budget) and ``dcmlir compile``; the compiled ``main``."""
    plan = tmp_path / "plan.json"
    code, out, err = run(
        capsys, "tune", str(module), "--db", str(tmp_path / "r.jsonl"), "-o", str(plan),
        *QUICK_TUNE,
    )  # fmt: skip
    assert code == 0, err
    assert plan.is_file() and "workload" in out
    vmfb = tmp_path / "model.vmfb"
    code, _, err = run(capsys, "compile", str(module), "--plan", str(plan), "-o", str(vmfb))
    assert code == 0, err
    parameters = ParameterFile(str(module.with_suffix(".irpa")))
    return load_function(vmfb.read_bytes(), "main", parameters=parameters)


# --- transformers configs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "first_line"),
    [
        ("bert", "bert: 1-layer BERT, hidden 32, 2 heads, FFN 64, vocab 100, positions 512"),
        ("gpt2", "gpt2: 1-layer GPT-2, hidden 32, 2 heads, FFN 64, vocab 100, n_positions 1024"),
        ("llama", "llama: 1-layer Llama, hidden 32, 2 heads (1 KV), FFN 64, vocab 100"),
    ],
)
def test_hf_config_imports_with_token_ids_and_a_dynamic_seq(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, family: str, first_line: str
) -> None:
    pytest.importorskip("transformers")
    sizes = "layers=1,hidden=32,heads=2,ffn=64,vocab=100" + (
        ",kv-heads=1" if family == "llama" else ""
    )
    out_path = tmp_path / f"{family}.mlir"
    code, out, err = run(
        capsys, "import-torch", "-o", str(out_path), "--hf-config", family, "--hf-sizes", sizes,
        "--seq", "1:32",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0].startswith(first_line), out
    assert "T in 1..32, seed 0" in out.splitlines()[0]
    assert main_signature(out_path).startswith("util.func public @main(%arg0: tensor<1x?xi64>)")
    assert "-> tensor<1x?x32xf32>" in main_signature(out_path)
    assert "umin = 1, umax = 32" in out_path.read_text()
    # the header lets run-model rebuild the torch model: the same weights, the same outputs
    assert out_path.read_text().startswith(f"// dcmlir-model: {family} {{"), out_path.read_text()
    source = source_from_text(out_path.read_text())
    assert source is not None and source.seq == (1, 32) and source.vocab == 100
    ids = torch.randint(0, 100, (1, 9))
    parsed = {key: int(value) for key, value in (kv.split("=") for kv in sizes.split(","))}
    again = hf_model(family, parsed, seq=(1, 32)).module
    with torch.no_grad():
        assert torch.equal(source.build()(ids), again(ids))


def test_hf_config_guard_names_the_position_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """BERT's 128-row position table bounds T: torch.export's guard, explained in one line."""
    pytest.importorskip("transformers")
    out_path = tmp_path / "bert.mlir"
    code, out, err = run(
        capsys, "import-torch", "-o", str(out_path), "--hf-config", "bert", "--hf-sizes",
        "layers=1,hidden=32,heads=2,ffn=64,vocab=100,positions=128", "--seq", "1:200",
    )  # fmt: skip
    assert code == 1 and not out
    assert one_line_error(err) == (
        "torch.export refused seq in 1..200: the model needs seq <= 128 "
        "(max_position_embeddings = 128, the position table's rows); lower --seq to 1:128 "
        "or raise max_position_embeddings (--hf-sizes positions=N)"
    )
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_guard_message_forms_torch_gives() -> None:
    """A "!= N" guard (GPT-2 at n_positions = T's top) and a guard with no size to name."""

    class Positions(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("position_ids", torch.arange(128))

    message = (
        'Constraints violated (seq)! For more information, run with TORCH_LOGS="+dynamic".\n'
        "  - Not all values of seq = L['x'].size()[1] in the specified range seq <= 128 "
        "satisfy the generated guard L['x'].size()[1] != 128\n"
        "Suggested fixes:\n  seq = Dim('seq', max=127)\n"
    )
    error = explain_export_failure(RuntimeError(message), Positions(), {"seq": (1, 128)})
    assert isinstance(error, ExportGuardError) and error.allowed == (1, 127)
    assert error.explain("--seq") == (
        "torch.export refused seq in 1..128: the model needs seq != 128 ('position_ids' has "
        "128 positions); lower --seq to 1:127 or raise the size of 'position_ids'"
    )
    plain = explain_export_failure(RuntimeError(message), torch.nn.Linear(4, 4), {"seq": (1, 128)})
    assert str(plain) == (
        "torch.export refused seq in 1..128: the model needs seq != 128; "
        "lower the range of 'seq' to 1:127"
    )


# --- a torch.export archive ---------------------------------------------------------------------


@pytest.fixture
def encoder_pt2(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    """A tiny encoder exported with T in 1..64 and saved as a .pt2 archive."""
    torch.manual_seed(TINY.seed)
    model = TorchEncoder(TINY).eval()
    seq = torch.export.Dim("seq", min=1, max=64)
    program = torch.export.export(model, (torch.randn(7, 32),), dynamic_shapes=({0: seq},))
    path = tmp_path / "encoder.pt2"
    torch.export.save(program, path)
    return model, path


def test_pt2_imports_tunes_compiles_and_matches_torch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, encoder_pt2: tuple[torch.nn.Module, Path]
) -> None:
    """The archive's own range (1..64) reaches the IR; the compiled module matches torch."""
    model, archive = encoder_pt2
    module = tmp_path / "model.mlir"
    code, out, err = run(capsys, "import-torch", "--pt2", str(archive), "-o", str(module))
    assert code == 0, err
    assert re.match(rf"{re.escape(str(archive))}: x\[0\] \(s\d+\) in 1\.\.64$", out.splitlines()[0])
    assert main_signature(module).startswith("util.func public @main(%arg0: tensor<?x32xf32>)")
    assert "umin = 1, umax = 64" in module.read_text()
    function = tune_compile_and_load(capsys, module, tmp_path)
    rng = np.random.default_rng(0)
    for seq_len in (1, 7, 64):
        x = rng.standard_normal((seq_len, 32), dtype=np.float32)
        (got,) = function(x)
        assert relative_error(got, torch_reference(model, [x])) <= 1e-4, seq_len


def test_pt2_ranges_narrow_but_never_widen(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, encoder_pt2: tuple[torch.nn.Module, Path]
) -> None:
    _, archive = encoder_pt2
    module = tmp_path / "model.mlir"
    base = ["import-torch", "--pt2", str(archive), "-o", str(module), "--weights", "inline"]
    code, out, err = run(capsys, *base, "--seq", "2:16")
    assert code == 0, err
    # IREE's input conversion keeps the top (umax) and writes umin = 1 whatever the bottom
    assert "in 2..16" in out.splitlines()[0] and "umin = 1, umax = 16" in module.read_text()
    module.unlink()
    code, _, err = run(capsys, *base, "--seq", "1:65")
    assert code == 1 and re.fullmatch(
        r"range 1:65 is not within x\[0\] \(s\d+\) in 1\.\.64, the range the program was "
        r"exported for \(export it with a wider torch.export.Dim\)",
        one_line_error(err),
    )
    code, _, err = run(
        capsys, "import-torch", "--pt2", str(tmp_path / "none.pt2"), "-o", str(module)
    )
    assert (
        code == 1 and one_line_error(err) == f"cannot read '{tmp_path / 'none.pt2'}': no such file"
    )
    not_archive = tmp_path / "x.pt2"
    not_archive.write_text("hello")
    code, _, err = run(capsys, "import-torch", "--pt2", str(not_archive), "-o", str(module))
    assert code == 1 and one_line_error(err).startswith(
        f"'{not_archive}' is not a torch.export archive"
    )
    unbounded = tmp_path / "unbounded.pt2"
    program = torch.export.export(
        torch.nn.Linear(8, 8), (torch.randn(5, 8),), dynamic_shapes=({0: torch.export.Dim("n")},)
    )
    torch.export.save(program, unbounded)
    code, _, err = run(capsys, "import-torch", "--pt2", str(unbounded), "-o", str(module))
    assert code == 1 and one_line_error(err).endswith(
        "in 1..inf has no upper bound: give its range (--seq LO:HI)"
    )
    assert not module.exists()


# --- package.module:factory ----------------------------------------------------------------------

FACTORY = '''
import torch
from torch import nn


class Gate(nn.Module):
    """Two inputs sharing the dynamic dim: a gated projection."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 48)
        self.down = nn.Linear(48, 32)

    def forward(self, x, gate):
        return self.down(torch.relu(self.up(x)) * torch.sigmoid(gate))


def make():
    torch.manual_seed(5)
    return Gate().eval(), (torch.randn(7, 32), torch.randn(7, 48)), [{0: "seq"}, {0: "seq"}]


def not_a_tuple():
    return Gate()


def bad_axes():
    return Gate(), (torch.randn(7, 32), torch.randn(7, 48)), [{0: "seq"}]


def raises():
    raise ValueError("no weights here")


def unseeded():
    import numpy as np

    model = Gate().eval()
    with torch.no_grad():  # weights from an unseeded generator: another model each call
        model.up.weight.copy_(torch.from_numpy(np.random.default_rng().random((48, 32))))
    return model, (torch.randn(7, 32), torch.randn(7, 48)), [{0: "seq"}, {0: "seq"}]


count = 3
'''


@pytest.fixture
def factory_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module in the current directory (a fresh name: no cached import between tests)."""
    name = f"dcmlir_factory_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_factory_imports_tunes_compiles_and_matches_torch(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    factory_module: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = tmp_path / "gate.mlir"
    code, out, err = run(
        capsys, "import-torch", "--model", f"{factory_module}:make", "-o", str(module),
        "--seq", "1:48",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0] == f"{factory_module}:make: 2 inputs, seq in 1..48"
    signature = main_signature(module)
    assert "(%arg0: tensor<?x32xf32>, %arg1: tensor<?x48xf32>) -> tensor<?x32xf32>" in signature
    assert "umin = 1, umax = 48" in module.read_text()
    function = tune_compile_and_load(capsys, module, tmp_path)
    model = sys.modules[factory_module].make()[0]
    rng = np.random.default_rng(1)
    for seq_len in (1, 9, 48):
        x = rng.standard_normal((seq_len, 32), dtype=np.float32)
        gate = rng.standard_normal((seq_len, 48), dtype=np.float32)
        (got,) = function(x, gate)
        assert relative_error(got, torch_reference(model, [x, gate])) <= 1e-4, seq_len
    # the header rebuilds the model (from elsewhere too): run-model's reference and torch peer
    assert module.read_text().startswith('// dcmlir-model: factory {"axes": [0, 0], "dir": ')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sys.modules.pop(factory_module)
    code, out, err = run(
        capsys, "run-model", str(module), "--plan", str(tmp_path / "plan.json"), "--seq", "1,9",
        "--peers", "torch", "--min-time", "0.001", "--rounds", "1",
    )  # fmt: skip
    assert code == 0, err
    assert "every output checked against torch (float64)" in out, out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("9 |"))
    assert "n/a" not in row, out


def test_factory_that_builds_other_weights_is_refused_by_run_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory_module: str
) -> None:
    module = tmp_path / "gate.mlir"
    spec = f"{factory_module}:unseeded"
    code, _, err = run(capsys, "import-torch", "--model", spec, "-o", str(module))
    assert code == 0, err
    source = source_from_text(module.read_text())
    assert source is not None and source.seq_axes == (0, 0) and source.seq == (1, 128)
    with pytest.raises(ValueError, match=rf"^{spec}: the factory now builds other weights"):
        source.build()
    with pytest.raises(ModelRunError, match=rf"^{spec}: the factory now builds other weights"):
        reference_for("torch", module.read_text(), default=None, threads=1)  # run-model's


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("no_such_module_xyz:make", "no_such_module_xyz:make: no module 'no_such_module_xyz' "
         "(on the Python path or in the current directory)"),
        ("{m}:missing", "{m}:missing: module '{m}' has no attribute 'missing'"),
        ("{m}:count", "{m}:count: 'count' is a int, not callable"),
        ("{m}:raises", "{m}:raises: the factory raised ValueError: no weights here"),
        ("{m}:not_a_tuple", "{m}:not_a_tuple: the factory must return (nn.Module, "
         "example_inputs[, dynamic_axes]), not Gate"),
        ("{m}:bad_axes", "{m}:bad_axes: dynamic_axes must be a list of one {{axis: name}} dict "
         "per input (2 inputs)"),
    ],
)  # fmt: skip
def test_factory_mistakes_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, factory_module: str, factory: str,
    expected: str,
) -> None:  # fmt: skip
    spec = factory.format(m=factory_module)
    code, out, err = run(capsys, "import-torch", "--model", spec, "-o", str(tmp_path / "m.mlir"))
    assert code == 1 and not out
    assert one_line_error(err) == expected.format(m=factory_module)
    assert not (tmp_path / "m.mlir").exists()
