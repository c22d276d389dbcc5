"""Run a compiled model at several sequence lengths: check it, time it against IREE's default.

What ``dcmlir run-model``, the README demo and the model benchmark share. The
tuned build (``dcmlir.compile`` with a plan) and IREE's default build of the same
module are timed by the :class:`~dcmlir.measure.runner.Runner`, the one timing path:
one supervised worker process on one device; at each ``T`` every output is
checked against a reference and the variants are timed side by side, interleaved
in rounds (docs/design.md, section 4), largest ``T`` first as a warm-up. The reference
outputs are computed here, in the parent, and sent to the worker with the inputs:
the generated encoder's float64 numpy model, or the same encoder in torch (then
torch eager is also timed, in the worker, with the thread count of the IREE
device), or, for a module nobody can rebuild, IREE's default build itself.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dcmlir.ir.iree import LoadedFunction, ParameterFile, load_function
from dcmlir.measure.host import device_threads
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeProblem, ShapeResult
from dcmlir.measure.timing import Inputs, MeasureSettings
from dcmlir.measure.variants import HostModel, ModuleFunction, Variant
from dcmlir.models import EncoderConfig, encoder_reference, make_weights

REFERENCES = ("auto", "numpy", "torch", "default")
"""``auto``: torch when it is installed and the module is a generated encoder, else numpy
for a generated encoder, else IREE's default build."""

RTOL = 1e-4
"""fp32 against the reference: max abs error relative to the output's scale (the issue's)."""

TIMEOUT = 300.0
"""Seconds one worker request may take (loading a model, checking it on every input set)."""

DEFAULT, TUNED, TORCH = "IREE default", "dcmlir", "torch eager"

_PARAMETER = re.compile(r'#flow\.parameter\.named<"([^"]+)"::')
_TENSOR = re.compile(r"tensor<([^>]*)>")


class ModelRunError(ValueError):
    """A model that cannot be run as asked; the message names the file or option."""


@dataclass(frozen=True)
class ArgumentType:
    """One tensor argument of the compiled function: dims (None where dynamic) and dtype."""

    dims: tuple[int | None, ...]
    dtype: str

    def shape(self, seq_len: int) -> tuple[int, ...]:
        return tuple(seq_len if d is None else d for d in self.dims)


def argument_types(function: LoadedFunction) -> list[ArgumentType]:
    """The inputs of a compiled function, from its ABI declaration (``tensor<?x768xf32>``)."""
    declaration = function.function.reflection.get("iree.abi.declaration", "")
    inputs = declaration.split("->", 1)[0]
    found = []
    for spec in _TENSOR.findall(inputs):
        *dims, dtype = spec.split("x")
        found.append(ArgumentType(tuple(None if d == "?" else int(d) for d in dims), dtype))
    if not found:
        raise ModelRunError(f"function '{function.name}' has no tensor inputs ({declaration})")
    for argument in found:
        if argument.dtype != "f32":
            raise ModelRunError(
                f"function '{function.name}': input {argument.dtype} tensors are not supported "
                "(run-model feeds random f32 inputs; token ids need the Python API)"
            )
    return found


def parameters_for(
    model: str | Path, text: str, parameters: str | Path | None = None
) -> ParameterFile | None:
    """The parameter archive a module with ``#flow.parameter.named`` weights needs.

    ``parameters`` if given, else ``MODEL.irpa`` beside the module; None for a module
    whose weights are in its text.
    """
    scopes = set(_PARAMETER.findall(text))
    if not scopes:
        return None
    if len(scopes) > 1:
        raise ModelRunError(f"{model}: parameters in several scopes ({', '.join(sorted(scopes))})")
    path = Path(parameters) if parameters else Path(model).with_suffix(".irpa")
    if not path.is_file():
        raise ModelRunError(
            f"{model}: its weights are parameters and '{path}' does not exist; "
            "give --params FILE.irpa"
        )
    return ParameterFile(str(path), scopes.pop())


# --- references ----------------------------------------------------------------------------


@dataclass
class Reference:
    """What outputs are checked against, and a torch variant to time when there is one."""

    name: str
    fn: Callable[[Inputs], Sequence[np.ndarray]]
    torch_variant: HostModel | None = None


def reference_for(
    kind: str | Reference,
    text: str,
    default: LoadedFunction,
    threads: int,
    config: EncoderConfig | None = None,
) -> Reference:
    """The reference ``kind`` (see :data:`REFERENCES`) for the module ``text``.

    ``config``: the :class:`~dcmlir.models.bert.EncoderConfig` the module was
    generated from, when the caller knows it (else it is read from the module). A
    :class:`Reference` is the caller's own (a float64 formula of a single op, say).
    """
    if isinstance(kind, Reference):
        return kind
    if kind not in REFERENCES:
        raise ModelRunError(f"--reference: '{kind}' is not one of {', '.join(REFERENCES)}")
    config = config if config is not None else encoder_config(text)
    if kind == "default" or (kind == "auto" and config is None):
        return Reference("IREE's default build", lambda inputs: default(*inputs))
    if config is None:
        raise ModelRunError(
            f"--reference {kind}: the module is not a generated encoder (dcmlir generate-bert), "
            "so there is no model to rebuild; use --reference default"
        )
    weights = make_weights(config)
    if kind == "torch" or (kind == "auto" and _torch_available()):
        return _torch_reference(config, weights, threads)
    wide = {name: w.astype(np.float64) for name, w in weights.items()}  # cast once, not per call
    return Reference("numpy (float64)", lambda inputs: [encoder_reference(config, wide, inputs[0])])


_GENERATED = re.compile(
    r"^// (\d+)-layer encoder, hidden (\d+), (\d+) heads, FFN (\d+), T in (\d+)\.\.(\d+), "
    r"seed (\d+); weights: .*\(dcmlir generate-bert\)$",
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


def _torch_available() -> bool:
    try:
        import torch  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_reference(
    config: EncoderConfig, weights: Mapping[str, np.ndarray], threads: int
) -> Reference:
    if not _torch_available():
        raise ModelRunError(
            "--reference torch: torch is not installed (pip install torch==2.13.0 for the CPU "
            "wheel, or use --reference numpy)"
        )
    import torch  # optional: only the torch reference needs it

    from dcmlir.models.torch_import import TorchEncoder  # needs torch

    model = TorchEncoder(config).load_generator_weights(weights).eval()
    wide = copy.deepcopy(model).to(torch.float64)  # once: a 12-layer copy is 85M weights
    torch.set_num_threads(threads)

    def reference(inputs: Inputs) -> list[np.ndarray]:
        with torch.no_grad():
            return [wide(torch.from_numpy(np.asarray(inputs[0], dtype=np.float64))).numpy()]

    eager = HostModel(TORCH, functools.partial(TorchEager, config, threads))
    return Reference("torch (float64)", reference, eager)


class TorchEager:
    """The generated encoder in torch eager (float32), built in the measuring worker.

    Built from the config's seeded weights (:func:`dcmlir.models.bert.make_weights`),
    with the IREE device's thread count; the timed call is the forward pass only.
    """

    def __init__(self, config: EncoderConfig, threads: int) -> None:
        import torch  # optional: only a torch reference builds this

        from dcmlir.models.torch_import import TorchEncoder  # needs torch

        torch.set_num_threads(threads)
        self._torch = torch
        self.model = TorchEncoder(config).load_generator_weights(make_weights(config)).eval()

    def prepare(self, inputs: Sequence[np.ndarray]) -> Any:
        return self._torch.from_numpy(np.array(inputs[0], copy=True))  # its own copy

    def invoke(self, x: Any) -> Any:
        with self._torch.no_grad():
            return self.model(x)

    def to_host(self, result: Any) -> list[np.ndarray]:
        return [result.numpy()]


# --- the run ---------------------------------------------------------------------------------


@dataclass
class SeqRow:
    """One sequence length: medians, the paired speedup and the worst error of the run."""

    seq_len: int
    comparison: ShapeResult

    def median(self, name: str) -> float:
        try:
            return self.comparison[name].median
        except KeyError:
            return math.nan

    @property
    def speedup(self) -> float:
        """IREE default time over dcmlir time, median of per-round ratios."""
        return self.comparison.ratio(DEFAULT, TUNED)

    @property
    def max_error(self) -> float:
        timings = self.comparison.timings.values()
        errors = [t.max_error for t in timings if t.max_error is not None]
        return max(errors) if errors else math.nan

    @property
    def errors(self) -> list[str]:
        timings = self.comparison.timings.values()
        return [f"{t.name}: {t.error}" for t in timings if t.error is not None]


@dataclass
class ModelRun:
    rows: list[SeqRow]
    reference: str
    device: str
    threads: int
    settings: MeasureSettings
    failures: list[str] = field(default_factory=list)

    @property
    def geomean_speedup(self) -> float:
        ratios = [r.speedup for r in self.rows if math.isfinite(r.speedup) and r.speedup > 0]
        if not ratios:
            return math.nan
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios))

    @property
    def has_torch(self) -> bool:
        return any(TORCH in r.comparison.timings for r in self.rows)

    def table(self) -> list[str]:
        """T | IREE default | dcmlir | speedup | torch eager | max rel err, then the geomean."""
        header = ["T", f"{DEFAULT} (ms)", f"{TUNED} (ms)", "speedup"]
        if self.has_torch:
            header += [f"{TORCH} (ms)", "dcmlir vs torch"]
        header.append("max rel err")
        rows = [header]
        for row in self.rows:
            cells = [
                str(row.seq_len),
                _ms(row.median(DEFAULT)),
                _ms(row.median(TUNED)),
                f"{row.speedup:.2f}x" if math.isfinite(row.speedup) else "-",
            ]
            if self.has_torch:
                versus = row.comparison.ratio(TORCH, TUNED)
                cells += [
                    _ms(row.median(TORCH)),
                    f"{versus:.2f}x" if math.isfinite(versus) else "-",
                ]
            cells.append(f"{row.max_error:.1e}" if math.isfinite(row.max_error) else "-")
            rows.append(cells)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        lines.append(f"geomean speedup of dcmlir over IREE default: {self.geomean_speedup:.2f}x")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "device": self.device,
            "threads": self.threads,
            "min_time": self.settings.min_time,
            "rounds": self.settings.rounds,
            "input_sets": self.settings.input_sets,
            "geomean_speedup": self.geomean_speedup,
            "rows": [
                {
                    "t": r.seq_len,
                    "default_ms": r.median(DEFAULT) * 1e3,
                    "dcmlir_ms": r.median(TUNED) * 1e3,
                    "speedup": r.speedup,
                    **(
                        {
                            "torch_ms": r.median(TORCH) * 1e3,
                            "dcmlir_vs_torch": r.comparison.ratio(TORCH, TUNED),
                        }
                        if self.has_torch
                        else {}
                    ),
                    "max_rel_error": r.max_error,
                    "errors": r.errors,
                }
                for r in self.rows
            ],
        }


def _ms(seconds: float) -> str:
    return "failed" if not math.isfinite(seconds) else f"{seconds * 1e3:.2f}"


def run_model(
    text: str,
    tuned_vmfb: bytes,
    default_vmfb: bytes,
    seq_lens: Sequence[int],
    *,
    function: str = "main",
    parameters: ParameterFile | None = None,
    reference: str | Reference = "auto",
    device: str = "local-sync",
    settings: MeasureSettings | None = None,
    progress: Callable[[int], None] | None = None,
    config: EncoderConfig | None = None,
    timeout: float = TIMEOUT,
) -> ModelRun:
    """Check and time the tuned and default builds of one module at every ``T``.

    Both builds (and torch eager, with the torch reference) are timed in one
    :class:`~dcmlir.measure.runner.Runner` worker; this process loads them only to
    read their signatures and, with ``reference="default"``, to compute the
    reference outputs. ``config``: the generated encoder's config when the caller
    has it (see :func:`reference_for`).
    """
    settings = settings or MeasureSettings(min_time=0.05, rounds=5, warmup=0.1, rtol=RTOL)
    tuned = load_function(tuned_vmfb, function, device, parameters=parameters)
    default = load_function(default_vmfb, function, device, parameters=parameters)
    arguments = argument_types(default)
    if argument_types(tuned) != arguments:
        raise ModelRunError("the tuned and default builds have different signatures")
    threads = device_threads(device)
    chosen = reference_for(reference, text, default, threads, config)
    if parameters is not None:  # the worker may not share this process's directory
        parameters = dataclasses.replace(parameters, path=os.path.abspath(parameters.path))
    problems = {
        t: ShapeProblem(
            tuple(a.shape(t) for a in arguments),
            tuple(np.dtype(np.float32).name for _ in arguments),
            reference=chosen.fn,
        )
        for t in seq_lens
    }
    with tempfile.TemporaryDirectory(prefix="dcmlir-run-model-") as scratch:
        variants: list[Variant] = []
        for name, vmfb in ((DEFAULT, default_vmfb), (TUNED, tuned_vmfb)):
            path = Path(scratch) / f"{name.replace(' ', '_')}.vmfb"
            path.write_bytes(vmfb)
            variants.append(ModuleFunction(name, str(path), function, parameters))
        if chosen.torch_variant is not None:
            variants.append(chosen.torch_variant)
        runner_settings = RunnerSettings(settings, driver=device, timeout=timeout)
        with threadpool_limits(limits=threads), Runner(runner_settings) as runner:
            results = runner.measure_shapes(variants, problems, progress=progress)
    rows = [SeqRow(t, results[t]) for t in seq_lens]
    failures = [f"T={r.seq_len}: {e.splitlines()[0]}" for r in rows for e in r.errors]
    return ModelRun(rows, chosen.name, device, threads, settings, failures)
