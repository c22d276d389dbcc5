"""The peers a whole model is timed against beside IREE's default, and the inputs they all get.

``dcmlir run-model`` (:mod:`dcmlir.bench.model_compare`) times, at each ``T``:

- ``IREE data tiling``: the same module built by IREE with ``--iree-opt-data-tiling``
  (packed layouts, the mmt4d microkernel), :func:`data_tiling_build`;
- ``onnxruntime``: the module's torch model exported by ``torch.onnx.export(...,
  dynamo=True)`` with ``T`` symbolic (:func:`export_onnx`, in this process), run by
  an ``InferenceSession`` built in the measuring worker (:class:`OnnxModel`);
- ``numpy``: the model's forward pass in float32 numpy, for a generated encoder and
  GPT-2 (:mod:`dcmlir.bench.numpy_models`);
- ``torch eager``: the torch model itself, float32 (:class:`TorchEager`).

The torch model comes from a :class:`~dcmlir.models.hf_models.TorchSource`: the
generated encoder's config (:func:`encoder_source`) or a saved model's header; its
float64 copy is the reference (:func:`torch_reference`). Integer inputs are token
ids (:class:`~dcmlir.bench.model_inputs.TokenProblem`). :func:`peer_variants` assembles
a run's library peers, or says why one cannot run.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import io
import logging
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dcmlir.bench.model_inputs import Point, example_inputs
from dcmlir.bench.numpy_models import NUMPY, numpy_variant
from dcmlir.bench.peers import DATA_TILING_FLAGS, not_installed
from dcmlir.build.compiler import BuildError, build
from dcmlir.ir.iree import RuntimeFailure
from dcmlir.measure.timing import Inputs
from dcmlir.measure.variants import HostLibrary, HostModel, Variant
from dcmlir.models import EncoderConfig
from dcmlir.models.hf_models import TorchSource
from dcmlir.models.onnx_source import onnx_source_from_text
from dcmlir.target import CpuTarget, Target

__all__ = [
    "DATA_TILING",
    "NUMPY",
    "ONNX",
    "PEERS",
    "TORCH",
    "OnnxModel",
    "TorchEager",
    "contraction_peers",
    "data_tiling_build",
    "encoder_config",
    "encoder_module",
    "encoder_source",
    "export_onnx",
    "onnx_file_reference",
    "onnx_file_variant",
    "onnx_variant",
    "peer_variants",
    "torch_eager_variant",
    "torch_reference",
]

DATA_TILING, ONNX, TORCH = "IREE data tiling", "onnxruntime", "torch eager"
PEERS = (DATA_TILING, ONNX, NUMPY, TORCH)
"""The peers :func:`~dcmlir.bench.model_compare.run_model` adds by default (a torch
reference brings torch eager with it, asked for or not)."""

_GENERATED = re.compile(
    r"^// (\d+)-layer encoder, hidden (\d+), (\d+) heads, FFN (\d+), T in (\d+)\.\.(\d+), "
    r"seed (\d+); weights: .*\(dcmlir (?:generate-bert|import-torch)\)$",
    re.MULTILINE,
)


def encoder_config(text: str) -> EncoderConfig | None:
    """The config of a module ``dcmlir generate-bert`` wrote (its first line says it), else None.

    The GELU form is read from the IR (``math.erf`` or ``math.tanh``); the weights are
    the config's seeded ones (:func:`dcmlir.models.bert.make_weights`).
    """
    match = _GENERATED.search(text.split("\n", 1)[0])
    if match is None:
        return None
    layers, hidden, heads, ffn, lo, hi, seed = (int(v) for v in match.groups())
    gelu = "tanh" if "math.erf" not in text and "math.tanh" in text else "erf"
    return EncoderConfig(
        hidden=hidden, heads=heads, ffn=ffn, layers=layers, seq=(lo, hi), seed=seed, gelu=gelu
    )


# --- torch models --------------------------------------------------------------------------


def encoder_module(config: EncoderConfig) -> Any:
    """The generated encoder in torch (float32) with the generator's seeded weights."""
    from dcmlir.models.torch_import import TorchEncoder  # needs torch

    return TorchEncoder.generated(config)


def encoder_source(config: EncoderConfig) -> TorchSource:
    """The :class:`TorchSource` of a generated encoder: ``[T, hidden]`` floats, ``T`` on axis 0."""
    build = functools.partial(encoder_module, config)
    return TorchSource(config.describe(), build, (0,), config.seq, family="encoder")


def _tensors(torch: Any, inputs: Inputs, floats: Any) -> list[Any]:
    return [
        torch.from_numpy(np.array(a, copy=True)).to(
            floats if np.issubdtype(a.dtype, np.floating) else torch.int64
        )
        for a in inputs
    ]


def _outputs(result: Any) -> list[np.ndarray]:
    items = result if isinstance(result, (tuple, list)) else [result]
    return [item.detach().numpy() for item in items]


def torch_reference(source: TorchSource, threads: int) -> Callable[[Inputs], list[np.ndarray]]:
    """The source's model in float64 (built once): the outputs every build is checked against."""
    import torch  # optional: only a torch reference needs it

    wide = copy.deepcopy(source.build()).to(torch.float64).eval()
    torch.set_num_threads(threads)

    def reference(inputs: Inputs) -> list[np.ndarray]:
        with torch.no_grad():
            return _outputs(wide(*_tensors(torch, inputs, torch.float64)))

    return reference


class TorchEager:
    """The source's torch model in eager mode (float32), built in the measuring worker.

    With the IREE device's thread count; the timed call is the forward pass only.
    """

    def __init__(self, build: Callable[[], Any], threads: int) -> None:
        import torch  # optional: only a torch reference builds this

        torch.set_num_threads(threads)
        self._torch = torch
        self.model = build().eval()

    def prepare(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        return _tensors(self._torch, inputs, self._torch.float32)  # its own copies

    def invoke(self, tensors: list[Any]) -> Any:
        with self._torch.no_grad():
            return self.model(*tensors)

    def to_host(self, result: Any) -> list[np.ndarray]:
        return _outputs(result)


def contraction_peers(einsum: str) -> dict[str, HostLibrary | str]:
    """The library peers of a module that is one contraction: onnxruntime, numpy and torch
    computing ``einsum`` (:class:`~dcmlir.measure.variants.HostLibrary`); a library that is
    not installed is one line saying so."""
    peers: dict[str, HostLibrary | str] = {}
    for column, library in ((ONNX, "onnxruntime"), (NUMPY, "numpy"), (TORCH, "torch")):
        peers[column] = not_installed(library) or HostLibrary(column, library, einsum)
    return peers


def torch_eager_variant(source: TorchSource | None, threads: int) -> HostModel | str:
    """The torch eager peer of ``source``'s model, else one line saying why there is none."""
    missing = not_installed("torch")
    if missing is not None:
        return missing
    if source is None:
        return "no torch model of this module (a generated encoder or a saved model has one)"
    return HostModel(TORCH, functools.partial(TorchEager, source.build, threads))


# --- ONNX Runtime --------------------------------------------------------------------------


def export_onnx(source: TorchSource, example: Sequence[np.ndarray], path: Path) -> str | None:
    """``torch.onnx.export(dynamo=True)`` of the source's model, ``T`` a symbolic dim.

    Where the exporter cannot translate the model as it is (torch 2.13 translates
    only 4-D ``scaled_dot_product_attention``; the generated encoder's is 3-D), the
    core-ATen graph IREE imports (:func:`~dcmlir.models.torch_import.export_program`:
    attention as ``bmm``/softmax) is exported instead, and the returned note says so
    (else None). A failure of both is a ValueError with the exporter's reason.
    """
    import torch  # optional: only the onnxruntime peer needs it

    from dcmlir.models.torch_import import export_program

    lo, hi = source.seq
    model = source.build().eval()
    args = tuple(_tensors(torch, example, torch.float32))
    try:
        seq = torch.export.Dim("seq", min=lo, max=hi)
        shapes = tuple({axis: seq} for axis in source.seq_axes)
        _quietly(lambda: torch.onnx.export(model, args, dynamo=True, dynamic_shapes=shapes), path)
        return None
    except Exception as err:  # torch raises many types here; all mean "cannot export"
        first = _exporter_reason(err)
    try:
        program = export_program(
            model, args, {"seq": (lo, hi)}, [{axis: "seq"} for axis in source.seq_axes]
        )
        _quietly(lambda: torch.onnx.export(program, dynamo=True), path)
    except Exception as err:  # any failure (TorchImportError too) is the column's reason
        raise ValueError(f"torch.onnx.export failed: {first}; {_exporter_reason(err)}") from None
    return f"exported from the core-ATen graph IREE imports (as it is: {first})"


def _quietly(export: Callable[[], Any], path: Path) -> None:
    """Run the exporter without its progress lines and warnings; save what it made."""
    quiet = [logging.getLogger(name) for name in ("torch.onnx", "torch.export")]
    levels = [logger.level for logger in quiet]
    try:
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            program = export()
            program.save(str(path))
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _exporter_reason(err: BaseException) -> str:
    """The innermost cause the exporter names (its "Exception summary"), on one line."""
    text = _ANSI.sub("", str(err)).strip()
    causes = [line for line in text.splitlines() if line.startswith("<class '")]
    if causes:  # "<class 'AssertionError'>: only 4D query, key, and value are supported"
        kind, _, message = causes[0].partition(">: ")
        name = kind.removeprefix("<class ").strip("'").rsplit(".", 1)[-1]
        return f"{name}: {message}"
    return text.splitlines()[0] if text else type(err).__name__


class OnnxModel:
    """An exported model in an ``onnxruntime.InferenceSession``, built in the measuring worker.

    ``intra_op_num_threads`` = the IREE device's thread count, one inter-op thread,
    sequential execution, every graph optimisation; inputs and outputs bound once per
    input set (an I/O binding), so a timed call is one ``run_with_iobinding``.
    """

    def __init__(self, path: str, threads: int) -> None:
        try:  # only here: importing onnxruntime writes $TMPDIR/.ses (its session id)
            import onnxruntime
        except ImportError:
            raise ImportError(
                "onnxruntime is not installed (pip install 'dcmlir[bench]')"
            ) from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 4  # its errors come back as exceptions: not printed too
        try:
            self.session = onnxruntime.InferenceSession(
                path, options, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # onnxruntime's own exception types: one ValueError
            raise ValueError(f"onnxruntime: {str(err).strip().splitlines()[0]}") from None
        self._ort = onnxruntime
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def prepare(self, inputs: Sequence[np.ndarray]) -> tuple[Any, list[Any]]:
        binding = self.session.io_binding()
        values = []
        for name, array in zip(self.inputs, inputs, strict=True):
            values.append(self._ort.OrtValue.ortvalue_from_numpy(np.array(array, copy=True)))
            binding.bind_ortvalue_input(name, values[-1])
        for name in self.outputs:
            binding.bind_output(name, "cpu")
        return binding, values

    def invoke(self, prepared: tuple[Any, list[Any]]) -> Any:
        binding, _ = prepared
        self.session.run_with_iobinding(binding)
        return binding

    def to_host(self, binding: Any) -> list[np.ndarray]:
        return [np.ascontiguousarray(a) for a in binding.copy_outputs_to_cpu()]


def onnx_variant(
    source: TorchSource | None, example: Sequence[np.ndarray], threads: int, scratch: Path
) -> tuple[HostModel, str | None] | str:
    """The onnxruntime variant of the module's torch model (exported into ``scratch`` with
    ``example`` inputs) with a note on how it was exported, or the reason there is none."""
    if source is None:
        return (
            "no torch model to export (the module is neither a generated encoder nor saved "
            "with a '// dcmlir-model:' header)"
        )
    for package, extra in (("torch", "torch"), ("onnxruntime", "bench"), ("onnxscript", "bench")):
        if importlib.util.find_spec(package) is None:  # onnxscript: the dynamo exporter's
            return f"{package} is not installed (pip install 'dcmlir[{extra}]')"
    path = scratch / "model.onnx"
    try:
        note = export_onnx(source, example, path)
    except ValueError as err:
        return str(err)
    return HostModel(ONNX, functools.partial(OnnxModel, str(path), threads)), note


# --- a module imported from ONNX: onnxruntime on the very file ---------------------------


def onnx_file_reference(
    kind: str, text: str, threads: int
) -> tuple[str, Callable[[Inputs], list[np.ndarray]]] | None:
    """onnxruntime on the ``.onnx`` file a module was imported from (``dcmlir import-onnx``
    records it): the reference ``auto`` (when onnxruntime is installed) and ``onnxruntime``
    pick; None for another reference or module. A file gone or changed is a ValueError.
    """
    source = onnx_source_from_text(text)
    if kind == "onnxruntime" and source is None:
        raise ValueError(
            "--reference onnxruntime: the module was not imported from ONNX (dcmlir import-onnx)"
        )
    if source is None or kind not in ("auto", "onnxruntime"):
        return None
    if importlib.util.find_spec("onnxruntime") is None:
        if kind == "auto":
            return None
        raise ValueError(
            "--reference onnxruntime: onnxruntime is not installed (pip install 'dcmlir[bench]')"
        )
    source.check()
    model = OnnxModel(source.path, threads)

    def reference(inputs: Inputs) -> list[np.ndarray]:
        try:
            return model.to_host(model.invoke(model.prepare(inputs)))
        except Exception as err:  # onnxruntime's own types: one line, not a traceback
            shapes = ", ".join("x".join(map(str, np.shape(a))) for a in inputs)
            message = str(err).strip().splitlines()[0]
            raise RuntimeFailure(
                f"onnxruntime (the reference) failed on inputs {shapes}: {message}"
            ) from None

    return f"onnxruntime on {Path(source.path).name}", reference


def onnx_file_variant(text: str, threads: int) -> tuple[HostModel, None] | str | None:
    """The onnxruntime variant of the ``.onnx`` file an ONNX-imported module came from (no
    note, as :func:`onnx_variant`), the reason there is none, or None for another module."""
    source = onnx_source_from_text(text)
    if source is None:
        return None
    missing = not_installed("onnxruntime")
    if missing is not None:
        return missing
    try:
        source.check()
    except ValueError as err:
        return str(err)
    return HostModel(ONNX, functools.partial(OnnxModel, source.path, threads)), None


# --- every library peer of a run ----------------------------------------------------------


def peer_variants(
    text: str,
    arguments: Sequence[Any],
    seq_lens: Sequence[Point],
    peers: Sequence[str],
    own: Mapping[str, Variant | str],
    torch_variant: HostModel | None,
    config: EncoderConfig | None,
    source: TorchSource | None,
    threads: int,
    scratch: Path,
    say: Callable[[str], None],
    notes: dict[str, str],
) -> dict[str, Variant | str]:
    """The library peers of ``peers`` (not IREE's builds): a variant, or why there is none.

    ``own``: the caller's peers (a reference's, :class:`~dcmlir.bench.model_compare.Reference`)
    first; onnxruntime on an ONNX-imported module's file, else
    the torch model's export (how, in ``notes``); numpy for a generated encoder or GPT-2; torch
    eager (``torch_variant``, which a torch reference brings whether asked for or not).
    """
    made: dict[str, Variant | str] = {p: v for p, v in own.items() if p in peers}
    if ONNX in peers and ONNX not in made and any(not isinstance(t, int) for t in seq_lens):
        made[ONNX] = "the ONNX export keeps every dim but T static (no batch)"
    elif ONNX in peers and ONNX not in made:
        onnx = onnx_file_variant(text, threads)
        if onnx is None:
            say("exporting the torch model to ONNX")
            example = example_inputs(arguments, source.seq if source else (1, 1))
            onnx = onnx_variant(source, example, threads, scratch)
        made[ONNX] = onnx if isinstance(onnx, str) else onnx[0]
        if not isinstance(onnx, str) and onnx[1]:
            notes[ONNX] = onnx[1]
    if NUMPY in peers and NUMPY not in made:
        made[NUMPY] = numpy_variant(config, source, threads)
    if torch_variant is not None:
        made[TORCH] = torch_variant
    elif TORCH in peers and TORCH not in made:
        made[TORCH] = torch_eager_variant(source, threads)
    return made


# --- IREE data tiling ----------------------------------------------------------------------


def data_tiling_build(text: str, target: Target | None = None) -> bytes | str:
    """IREE's build of ``text`` with data tiling, or the one-line reason it does not compile."""
    try:
        return build(text, target or CpuTarget(), DATA_TILING_FLAGS, source_name="model").vmfb
    except BuildError as err:
        lines = str(err).splitlines()
        first = next((line for line in lines if "error:" in line), lines[0] if lines else "")
        return f"IREE could not compile it with data tiling: {first.strip().rstrip(':')}"
