"""Run a compiled model at several sequence lengths: check it, time it against its peers.

What ``dcmlir run-model``, the README demo and the model benchmark share. The
tuned build (``dcmlir.compile`` with a plan), IREE's default build of the same
module and the peers of :mod:`dcmlir.bench.model_peers` (IREE with data tiling,
ONNX Runtime, numpy, torch eager) are timed by the :class:`~dcmlir.measure.runner.Runner`,
the one timing path: one supervised worker process on one device; at each ``T``
every output is checked against a reference and the variants are timed side by
side, interleaved in rounds (docs/design.md, section 4), largest ``T`` first as a
warm-up. The reference outputs are computed here, in the parent, and sent to the
worker with the inputs: onnxruntime on the file an ONNX-imported module came from,
the module's torch model in float64 (the generated encoder, or a model saved with a
``// dcmlir-model:`` header, e.g. GPT-2), the generated encoder's float64 numpy model,
or, for a module nobody can rebuild, IREE's default build itself. Integer inputs are
token ids (``[0, vocab)``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dcmlir.bench import model_peers
from dcmlir.bench.model_inputs import (
    ModelRunError,
    Point,
    argument_types,
    check_points,
    point_label,
    token_problems,
)
from dcmlir.bench.model_peers import (
    DATA_TILING,
    NUMPY,
    ONNX,
    PEERS,
    TORCH,
    encoder_config,
)
from dcmlir.ir.iree import LoadedFunction, ParameterFile, load_function, parameter_scopes
from dcmlir.measure.host import device_threads
from dcmlir.measure.runner import Runner, RunnerSettings, ShapeResult
from dcmlir.measure.timing import Inputs, MeasureSettings
from dcmlir.measure.variants import HostModel, ModuleFunction, Variant
from dcmlir.models import EncoderConfig, encoder_reference, make_weights
from dcmlir.models.hf_models import TorchSource, source_from_text
from dcmlir.target import Target

REFERENCES = ("auto", "numpy", "torch", "onnxruntime", "default")
"""``auto``: onnxruntime on an ONNX-imported module's file, torch when it is installed and the
module's torch model is known (a generated encoder, a saved GPT-2), else numpy for a
generated encoder, else IREE's default build (each when its package is installed)."""

RTOL = 1e-4
"""fp32 against the reference: max abs error relative to the output's scale (the issue's)."""

TIMEOUT = 300.0
"""Seconds one worker request may take (loading a model, checking it on every input set)."""

DEFAULT, TUNED = "IREE default", "dcmlir"
COLUMNS = (DEFAULT, DATA_TILING, TUNED, ONNX, NUMPY, TORCH)
"""Every column a run may have, in the order tables show them."""
IREE_BUILDS = (DEFAULT, DATA_TILING)
"""The IREE builds a user would pick from: ratios are against the faster of the two."""
_OWN = (DEFAULT, TUNED)  # the columns whose failure fails the run


def parameters_for(
    model: str | Path, text: str, parameters: str | Path | None = None
) -> ParameterFile | None:
    """The parameter archive a module with ``#flow.parameter.named`` weights needs.

    ``parameters`` if given, else ``MODEL.irpa`` beside the module; None for a module
    whose weights are in its text.
    """
    scopes = parameter_scopes(text)
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
    """What outputs are checked against, and a torch variant to time when there is one.

    ``peers``: the caller's own peer columns by name (a variant, or one line saying why
    there is none), in place of what :func:`run_model` would make (a single op's library
    call, say, where run_model knows only whole models).
    """

    name: str
    fn: Callable[[Inputs], Sequence[np.ndarray]]
    torch_variant: HostModel | None = None
    peers: Mapping[str, Variant | str] = field(default_factory=dict)


def torch_source(text: str, config: EncoderConfig | None = None) -> TorchSource | None:
    """The module's torch model: the generated encoder of ``config`` (or of the module's
    first line), or the model a ``// dcmlir-model:`` header names; None when unknown."""
    config = config if config is not None else encoder_config(text)
    if config is not None:
        return model_peers.encoder_source(config)
    try:
        return source_from_text(text)
    except ValueError as err:
        raise ModelRunError(str(err)) from None


def reference_for(
    kind: str | Reference,
    text: str,
    default: LoadedFunction,
    threads: int,
    config: EncoderConfig | None = None,
    source: TorchSource | None = None,
) -> Reference:
    """The reference ``kind`` (see :data:`REFERENCES`) for the module ``text``.

    ``config``: the :class:`~dcmlir.models.bert.EncoderConfig` the module was
    generated from, when the caller knows it (else it is read from the module);
    ``source``: the module's torch model (else :func:`torch_source`). A
    :class:`Reference` is the caller's own (a float64 formula of a single op, say).
    """
    if isinstance(kind, Reference):
        return kind
    if kind not in REFERENCES:
        raise ModelRunError(f"--reference: '{kind}' is not one of {', '.join(REFERENCES)}")
    try:  # a module imported from ONNX: onnxruntime on its file
        onnx = model_peers.onnx_file_reference(kind, text, threads)
    except ValueError as err:
        raise ModelRunError(str(err)) from None
    if onnx is not None:
        return Reference(*onnx)
    config = config if config is not None else encoder_config(text)
    source = source if source is not None else torch_source(text, config)
    if kind == "default" or (kind == "auto" and source is None):
        return Reference("IREE's default build", lambda inputs: default(*inputs))
    if kind == "torch" or (kind == "auto" and _torch_available()):
        if source is None:
            raise ModelRunError(
                "--reference torch: the module's torch model is unknown (neither a generated "
                "encoder nor a saved model with a '// dcmlir-model:' header); use --reference "
                "default"
            )
        return _torch_reference(source, threads)
    if config is None:
        raise ModelRunError(
            f"--reference {kind}: the module is not a generated encoder (dcmlir generate-bert), "
            "so there is no numpy model; use --reference torch or default"
        )
    weights = make_weights(config)
    wide = {name: w.astype(np.float64) for name, w in weights.items()}  # cast once, not per call
    return Reference("numpy (float64)", lambda inputs: [encoder_reference(config, wide, inputs[0])])


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _torch_reference(source: TorchSource, threads: int) -> Reference:
    if not _torch_available():
        raise ModelRunError(
            "--reference torch: torch is not installed (pip install torch==2.13.0 for the CPU "
            "wheel, or use --reference numpy)"
        )
    try:  # a factory's model is rebuilt here: gone, or other weights, is one line
        fn = model_peers.torch_reference(source, threads)
    except ValueError as err:
        raise ModelRunError(str(err)) from None
    eager = HostModel(TORCH, functools.partial(model_peers.TorchEager, source.build, threads))
    return Reference("torch (float64)", fn, eager)


# --- the run ---------------------------------------------------------------------------------


@dataclass
class SeqRow:
    """One sequence length (or (batch, T) point): medians, the paired speedup, the worst error."""

    seq_len: Point
    comparison: ShapeResult

    def median(self, name: str) -> float:
        timing = self.comparison.timings.get(name)
        return math.nan if timing is None else timing.median

    @property
    def speedup(self) -> float:
        """IREE default time over dcmlir time, median of per-round ratios."""
        return self.comparison.ratio(DEFAULT, TUNED)

    @property
    def best_iree(self) -> float:
        """The faster of IREE's default and data-tiling builds (seconds), NaN if neither ran."""
        times = [self.median(n) for n in IREE_BUILDS if math.isfinite(self.median(n))]
        return min(times) if times else math.nan

    @property
    def best_iree_build(self) -> str | None:
        """The name of the faster IREE build (by median), None if neither ran."""
        times = {n: self.median(n) for n in IREE_BUILDS if math.isfinite(self.median(n))}
        return min(times, key=times.__getitem__) if times else None

    def versus_best_iree(self, name: str) -> float:
        """``name``'s time over the best IREE build's (<1: faster), the median of per-round
        ratios, as the speedup (a ratio of medians swung 0.96-1.14 at one T between runs
        of one build); inf when ``name`` failed, NaN when no IREE build ran."""
        best = self.best_iree_build
        if best is None or math.isnan(self.median(name)):
            return math.nan
        if name == best:
            return 1.0
        return self.comparison.ratio(name, best)

    @property
    def max_error(self) -> float:
        timings = self.comparison.timings.values()
        errors = [t.max_error for t in timings if t.max_error is not None]
        return max(errors) if errors else math.nan

    def errors_of(self, names: Sequence[str]) -> list[str]:
        timings = self.comparison.timings.values()
        return [f"{t.name}: {t.error}" for t in timings if t.error is not None and t.name in names]

    @property
    def errors(self) -> list[str]:
        return self.errors_of(COLUMNS)


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of the finite positive values; NaN when there are none."""
    good = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


@dataclass
class ModelRun:
    """Every ``T``'s timings, the columns that could not run (``unavailable``) and why."""

    rows: list[SeqRow]
    reference: str
    device: str
    threads: int
    settings: MeasureSettings
    failures: list[str] = field(default_factory=list)  # IREE default's or dcmlir's: fatal
    unavailable: dict[str, str] = field(default_factory=dict)  # column -> one-line reason
    peer_failures: list[str] = field(default_factory=list)  # a peer's run or check: reported
    notes: dict[str, str] = field(default_factory=dict)  # column -> how it was made, if unusual

    @property
    def geomean_speedup(self) -> float:
        return geomean([r.speedup for r in self.rows])

    @property
    def has_torch(self) -> bool:
        return any(TORCH in r.comparison.timings for r in self.rows)

    @property
    def columns(self) -> list[str]:
        """The columns timed or reported unavailable, in :data:`COLUMNS` order."""
        timed = {name for r in self.rows for name in r.comparison.timings}
        return [c for c in COLUMNS if c in timed or c in self.unavailable]

    def geomean_versus_best_iree(self, name: str) -> float:
        return geomean([r.versus_best_iree(name) for r in self.rows])

    def table(self) -> list[str]:
        """T, IREE default, dcmlir, speedup, the peers, dcmlir vs the best IREE build, error."""
        peers = [c for c in self.columns if c not in _OWN]
        batched = any(not isinstance(r.seq_len, int) for r in self.rows)
        header = ["BxT" if batched else "T", f"{DEFAULT} (ms)", f"{TUNED} (ms)", "speedup"]
        header += [*(f"{c} (ms)" for c in peers), "dcmlir/best IREE", "max rel err"]
        rows = [header]
        for row in self.rows:
            cells = [
                point_label(row.seq_len).split("=")[1],
                _ms(row.median(DEFAULT)),
                _ms(row.median(TUNED)),
            ]
            cells.append(_ratio(row.speedup, "x"))
            cells += ["n/a" if c in self.unavailable else _ms(row.median(c)) for c in peers]
            cells.append(_ratio(row.versus_best_iree(TUNED), ""))
            cells.append(f"{row.max_error:.1e}" if math.isfinite(row.max_error) else "-")
            rows.append(cells)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        lines.append(f"geomean speedup of dcmlir over IREE default: {self.geomean_speedup:.2f}x")
        versus = [
            f"{c} {self.geomean_versus_best_iree(c):.2f}"
            for c in self.columns
            if c not in self.unavailable
        ]
        lines.append("geomean time / best of IREE default and data tiling: " + ", ".join(versus))
        lines += [f"{c}: not timed: {why}" for c, why in self.unavailable.items()]
        lines += [f"{c}: {note}" for c, note in self.notes.items()]
        return lines

    def to_json(self) -> dict[str, Any]:
        columns = self.columns
        return {
            "reference": self.reference,
            "device": self.device,
            "threads": self.threads,
            "min_time": self.settings.min_time,
            "rounds": self.settings.rounds,
            "input_sets": self.settings.input_sets,
            "columns": columns,
            "unavailable": dict(self.unavailable),
            "notes": dict(self.notes),
            "geomean_speedup": self.geomean_speedup,
            "geomean_vs_best_iree": {
                c: self.geomean_versus_best_iree(c) for c in columns if c not in self.unavailable
            },
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
                    "ms": {c: r.median(c) * 1e3 for c in columns if c not in self.unavailable},
                    "best_iree_ms": r.best_iree * 1e3,
                    "vs_best_iree": {
                        c: r.versus_best_iree(c) for c in columns if c not in self.unavailable
                    },
                    "max_rel_error": r.max_error,
                    "errors": r.errors,
                }
                for r in self.rows
            ],
        }


def _ms(seconds: float) -> str:
    return "failed" if not math.isfinite(seconds) else f"{seconds * 1e3:.2f}"


def _ratio(value: float, unit: str) -> str:
    return f"{value:.2f}{unit}" if math.isfinite(value) else "-"


def run_model(
    text: str,
    tuned_vmfb: bytes,
    default_vmfb: bytes,
    seq_lens: Sequence[Point],
    *,
    function: str = "main",
    parameters: ParameterFile | None = None,
    reference: str | Reference = "auto",
    device: str = "local-sync",
    threads: int | None = None,
    settings: MeasureSettings | None = None,
    progress: Callable[[int], None] | None = None,
    config: EncoderConfig | None = None,
    timeout: float = TIMEOUT,
    peers: Sequence[str] = PEERS,
    target: Target | None = None,
    source: TorchSource | None = None,
    log: Callable[[str], None] | None = None,
) -> ModelRun:
    """Check and time the tuned and default builds of one module, and ``peers``, at every ``T``.

    Every build and peer is timed by one :class:`~dcmlir.measure.runner.Runner` (one
    worker process per thread pool when ``threads`` > 1); this process loads the two
    builds only to read their signatures and, with ``reference="default"``, to compute
    the reference outputs. ``config``: the generated encoder's config when the caller
    has it; ``source``: the module's torch
    model (see :func:`reference_for`). ``peers``: of :data:`PEERS` (IREE data tiling,
    built for ``target``; onnxruntime, on an ONNX-imported module's own file, else
    exported from the torch model; numpy, a generated encoder's or GPT-2's float32 forward; torch
    eager, which a torch reference brings anyway); one that
    cannot run is a column with its reason (:attr:`ModelRun.unavailable`). ``log``:
    one line per step (building, exporting).
    """
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise ModelRunError(f"unknown peer '{unknown[0]}' (known: {', '.join(PEERS)})")
    settings = settings or MeasureSettings(min_time=0.05, rounds=5, warmup=0.1, rtol=RTOL)
    tuned = load_function(tuned_vmfb, function, device, parameters=parameters)
    default = load_function(default_vmfb, function, device, parameters=parameters)
    arguments = argument_types(default)
    if argument_types(tuned) != arguments:
        raise ModelRunError("the tuned and default builds have different signatures")
    check_points(arguments, seq_lens)
    thread_count = device_threads(device, threads)
    config = config if config is not None else encoder_config(text)
    if source is None:  # read from the module: its ONNX export, maybe its reference
        source = torch_source(text, config)
    chosen = reference_for(reference, text, default, thread_count, config, source)
    if parameters is not None:  # the worker may not share this process's directory
        parameters = dataclasses.replace(parameters, path=os.path.abspath(parameters.path))
    problems = token_problems(text, arguments, source, chosen.fn, seq_lens)
    say = log or (lambda line: None)
    with tempfile.TemporaryDirectory(prefix="dcmlir-run-model-") as scratch:
        builds = {DEFAULT: default_vmfb}
        unavailable: dict[str, str] = {}
        notes: dict[str, str] = {}
        if DATA_TILING in peers:
            say("building the module with IREE data tiling")
            built = model_peers.data_tiling_build(text, target)
            if isinstance(built, str):
                unavailable[DATA_TILING] = built
            else:
                builds[DATA_TILING] = built
        builds[TUNED] = tuned_vmfb
        variants: list[Variant] = []
        for name, vmfb in builds.items():
            path = Path(scratch) / f"{name.replace(' ', '_')}.vmfb"
            path.write_bytes(vmfb)
            variants.append(ModuleFunction(name, str(path), function, parameters))
        made = model_peers.peer_variants(
            text,
            arguments,
            seq_lens,
            peers,
            chosen.peers,
            chosen.torch_variant,
            config,
            source,
            thread_count,
            Path(scratch),
            say,
            notes,
        )
        for peer in COLUMNS:  # in the tables' order
            variant = made.get(peer)
            if isinstance(variant, str):
                unavailable[peer] = variant
            elif variant is not None:
                variants.append(variant)
        runner_settings = RunnerSettings(settings, driver=device, timeout=timeout, threads=threads)
        with threadpool_limits(limits=thread_count), Runner(runner_settings) as runner:
            results = runner.measure_shapes(variants, problems, progress=progress)
    rows = [SeqRow(t, results[t]) for t in seq_lens]
    failures = [
        f"{point_label(r.seq_len)}: {e.splitlines()[0]}" for r in rows for e in r.errors_of(_OWN)
    ]
    others = [c for c in COLUMNS if c not in _OWN]
    peer_failures = [
        f"{point_label(r.seq_len)}: {e.splitlines()[0]}" for r in rows for e in r.errors_of(others)
    ]
    return ModelRun(
        rows,
        chosen.name,
        device,
        thread_count,
        settings,
        failures,
        unavailable,
        peer_failures,
        notes,
    )
