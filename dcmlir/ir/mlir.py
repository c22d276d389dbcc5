"""The one door to the MLIR Python bindings bundled with ``iree-base-compiler``.

Everything in dcmlir imports MLIR from here, never from ``iree.compiler``
directly: the bindings are untyped, their layout moves between IREE releases,
and keeping them behind one module keeps the ignores and the version quirks in
one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iree.compiler import ir, passmanager  # type: ignore[import-untyped]
from iree.compiler.dialects import (  # type: ignore[import-untyped]
    arith,
    builtin,
    func,
    linalg,
    scf,
    tensor,
    transform,
)
from iree.compiler.dialects.transform import (  # type: ignore[import-untyped]
    interpreter,
    structured,
)

__all__ = [
    "SourceLoc",
    "arith",
    "builtin",
    "func",
    "fx_importer",
    "interpreter",
    "ir",
    "linalg",
    "onnx_importers",
    "parse_module",
    "passmanager",
    "scf",
    "source_loc",
    "structured",
    "tensor",
    "transform",
]


PARSER_BUFFER_NAME = "-"


@dataclass(frozen=True)
class SourceLoc:
    """A location reduced to what a user can open in an editor."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        if not self.line:  # an unknown location: name the file at least
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


def source_loc(loc: ir.Location, default_file: str = "-") -> SourceLoc:
    """Find the first file:line:col inside any MLIR location (name, call site, fused)."""
    if type(loc) is ir.Location:  # diagnostics hand out the base class: downcast it
        loc = ir.Location.from_attr(loc.attr)
    if isinstance(loc, ir.FileLineColLoc):
        # Module.parse names every buffer "-": give it the file the user gave us.
        name = default_file if loc.filename == PARSER_BUFFER_NAME else loc.filename
        return SourceLoc(name, loc.start_line, loc.start_col)
    if isinstance(loc, ir.NameLoc):
        return source_loc(loc.child_loc, default_file)
    if isinstance(loc, ir.CallSiteLoc):
        return source_loc(loc.callee, default_file)
    if isinstance(loc, ir.FusedLoc):
        for inner in loc.locations:
            found = source_loc(inner, default_file)
            if found.line:
                return found
    return SourceLoc(default_file, 0, 0)


def parse_module(text: str) -> ir.Module:
    """Parse ``text`` as a module in the current context, as mlir-opt does.

    Top-level ops that are not inside a ``builtin.module`` are wrapped in one.
    Locations name the buffer ``"-"``; :func:`source_loc` maps that back to the
    real file name. Raises ``ir.MLIRError`` carrying the parser's diagnostics.
    """
    return ir.Module.parse(text)


def fx_importer() -> Any:
    """IREE's bundled torch FX importer (``iree.compiler.extras.fx_importer``).

    Imported on demand: it imports ``torch``, which only the ``dcmlir[torch]`` extra has.
    """
    from iree.compiler.extras import fx_importer as module  # type: ignore[import-untyped]

    return module


def onnx_importers() -> tuple[Any, Any]:
    """IREE's ONNX importer and its parameter-externalizing overrides (``iree-import-onnx``'s).

    Imported on demand: both import ``onnx``, which only the ``dcmlir[bench]`` extra has.
    """
    from iree.compiler.extras import onnx_importer  # type: ignore[import-untyped]
    from iree.compiler.tools.import_onnx import (  # type: ignore[import-untyped]
        importer_externalization_overrides as overrides,
    )

    return onnx_importer, overrides
