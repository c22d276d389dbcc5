"""A ``torch.export`` archive (``torch.export.save``) as dynamic-shape linalg, its ranges kept.

The archive's program already holds its dynamic dims as symbols with ranges
(``range_constraints``); :func:`exported_dims` reads them per input and
:func:`import_exported` decomposes, imports and lowers the program as
:func:`~dcmlir.models.torch_import.import_torch` does, optionally narrowing a range
(never widening it: the export proved its guards for the recorded range only).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import sympy
import torch
from torch.utils._sympy.value_ranges import ValueRanges

from dcmlir.models.torch_guards import TorchImportError, first_line
from dcmlir.models.torch_import import (
    ImportedModel,
    check_weights,
    decompose_program,
    import_decomposed,
)

__all__ = ["ExportedDim", "exported_dims", "import_exported", "load_exported"]


def load_exported(path: str | Path) -> torch.export.ExportedProgram:
    """``torch.export.load`` of a ``.pt2`` archive (``torch.export.save``), as one-line errors.

    Loading unpickles parts of the archive: load only archives you trust.
    """
    if not Path(path).is_file():
        raise TorchImportError(f"cannot read '{path}': no such file")
    logged = _Logged()
    logger = logging.getLogger("torch.export")
    logger.addHandler(logged)
    propagate, logger.propagate = logger.propagate, False
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            program = torch.export.load(str(path))
    except Exception as err:  # zipfile, pickle, torch's own deserialisation errors
        # torch logs the real error, then raises "check the warnings above": show the former
        reason = logged.reason or first_line(err)
        if "check the warnings above" in reason:  # and torch logged nothing: no program in it
            reason = "it holds no exported program (did torch.export.save finish?)"
        raise TorchImportError(
            f"'{path}' is not a torch.export archive (torch.export.save): {reason}"
        ) from err
    finally:
        logger.removeHandler(logged)
        logger.propagate = propagate
    if not isinstance(program, torch.export.ExportedProgram):
        raise TorchImportError(f"'{path}' holds a {type(program).__name__}, not an ExportedProgram")
    return program


class _Logged(logging.Handler):
    """Keeps the first line of the first exception torch logs instead of printing it."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.reason is None and record.exc_info and record.exc_info[1] is not None:
            self.reason = first_line(record.exc_info[1])


@dataclass(frozen=True)
class ExportedDim:
    """A dynamic dim of an exported program: its symbol, where it is, the range recorded."""

    symbol: str
    input_name: str
    input_index: int
    axis: int
    lo: int
    hi: int | None  # None: no upper bound recorded

    def describe(self) -> str:
        top = "inf" if self.hi is None else str(self.hi)
        return f"{self.input_name}[{self.axis}] ({self.symbol}) in {self.lo}..{top}"


def exported_dims(program: torch.export.ExportedProgram) -> list[ExportedDim]:
    """Each user input dim that is a bare symbol, with the range the program records
    (lower bounds below 1 read as 1: dcmlir's shapes start at 1)."""
    user_inputs = list(program.graph_signature.user_inputs)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    ranges = {str(k): v for k, v in program.range_constraints.items()}
    found = []
    for index, name in enumerate(user_inputs):
        value = placeholders[name].meta.get("val") if name in placeholders else None
        for axis, size in enumerate(getattr(value, "shape", ())):
            if not isinstance(size, torch.SymInt):
                continue
            symbol = str(size.node.expr)
            if symbol not in ranges:
                continue  # a derived size (2 * s0): its symbol's own dim carries the range
            lower, upper = ranges[symbol].lower, ranges[symbol].upper
            hi = int(upper) if isinstance(upper, sympy.Integer) else None  # else int_oo
            found.append(ExportedDim(symbol, name, index, axis, max(1, int(lower)), hi))
    return found


def import_exported(
    program: torch.export.ExportedProgram,
    ranges: Mapping[str, tuple[int, int]] | None = None,
    *,
    weights: str = "inline",
    lower: bool = True,
    func_name: str = "main",
) -> ImportedModel:
    """Decompose, import and lower an already exported program, keeping its dynamic dims.

    The ranges are the program's own (:func:`exported_dims`); ``ranges`` narrows them by
    symbol (a range must lie within the recorded one: a wider one would drop the
    guards the export proved). A dim without an upper bound needs one from ``ranges``.
    """
    check_weights(weights)
    dims = exported_dims(program)
    if not dims:
        raise TorchImportError(
            "the program has no dynamic dims: export it with dynamic_shapes (torch.export.Dim)"
        )
    recorded: dict[str, ExportedDim] = {}
    for dim in dims:
        recorded.setdefault(dim.symbol, dim)  # the first input that carries it names it
    unknown = sorted(set(ranges or {}) - set(recorded))
    if unknown:
        raise TorchImportError(
            f"no dynamic dim '{unknown[0]}' in the program (it has {', '.join(recorded)})"
        )
    program = decompose_program(program)
    # run_decompositions keeps the symbols; the FX importer reads range_constraints
    constraints = {str(k): k for k in program.range_constraints}
    for symbol, dim in recorded.items():
        lo, hi = (ranges or {}).get(symbol, (dim.lo, dim.hi))
        if hi is None:
            raise TorchImportError(
                f"dynamic dim {dim.describe()} has no upper bound: give its range (--seq LO:HI)"
            )
        if not dim.lo <= lo <= hi or (dim.hi is not None and hi > dim.hi):
            raise TorchImportError(
                f"range {lo}:{hi} is not within {dim.describe()}, the range the program "
                "was exported for (export it with a wider torch.export.Dim)"
            )
        program.range_constraints[constraints[symbol]] = ValueRanges(lo, hi)
    return import_decomposed(program, weights, lower, func_name)
