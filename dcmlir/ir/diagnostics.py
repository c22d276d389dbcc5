"""Diagnostics in MLIR's shape: ``file:line:col: severity: message``.

MLIR's own diagnostics (parser, verifier, C++ passes, the transform
interpreter) and the ones dcmlir's Python passes emit end up in one
:class:`DiagnosticEngine`, so the driver prints them in one order and
``--verify-diagnostics`` checks them against one list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from dcmlir.ir.mlir import SourceLoc, ir, parse_module, source_loc

SEVERITIES = ("error", "warning", "remark", "note")

_MLIR_SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.REMARK: "remark",
    ir.DiagnosticSeverity.NOTE: "note",
}


@dataclass(frozen=True)
class Diagnostic:
    severity: str
    loc: SourceLoc
    message: str
    notes: tuple[Diagnostic, ...] = ()

    def format(self) -> str:
        lines = [f"{self.loc}: {self.severity}: {self.message}"]
        lines.extend(note.format() for note in self.notes)
        return "\n".join(lines)


class DiagnosticEngine:
    """Collects diagnostics of one input buffer, whichever side emitted them."""

    def __init__(self, source_name: str) -> None:
        self.source_name = source_name
        self.diagnostics: list[Diagnostic] = []

    def locate(self, where: ir.Location | ir.Operation | ir.OpView | SourceLoc) -> SourceLoc:
        if isinstance(where, SourceLoc):
            return where
        if isinstance(where, ir.Location):
            return source_loc(where, self.source_name)
        return source_loc(where.location, self.source_name)

    def emit(
        self, severity: str, where: ir.Location | ir.Operation | ir.OpView | SourceLoc, message: str
    ) -> Diagnostic:
        diag = Diagnostic(severity, self.locate(where), message)
        self.diagnostics.append(diag)
        return diag

    def remark(self, where: ir.Location | ir.Operation | ir.OpView, message: str) -> None:
        self.emit("remark", where, message)

    def warning(self, where: ir.Location | ir.Operation | ir.OpView, message: str) -> None:
        self.emit("warning", where, message)

    def error(self, where: ir.Location | ir.Operation | ir.OpView, message: str) -> None:
        self.emit("error", where, message)

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)

    def convert(self, diag: ir.Diagnostic | ir.DiagnosticInfo) -> Diagnostic:
        return Diagnostic(
            _MLIR_SEVERITY.get(diag.severity, "error"),
            source_loc(diag.location, self.source_name),
            reword(diag.message),
            tuple(self.convert(note) for note in diag.notes),
        )

    def add_mlir_error(self, error: ir.MLIRError) -> None:
        """Record what an ``MLIRError`` carries, skipping ones the handler already saw."""
        found = [self.convert(d) for d in error.error_diagnostics]
        if not found and self.has_errors:
            return  # the generic "pipeline failed" adds nothing to the errors we have
        if not found:
            found = [Diagnostic("error", SourceLoc(self.source_name, 0, 0), error.message)]
        for diag in found:
            if diag not in self.diagnostics:
                self.diagnostics.append(diag)

    def first_error(self) -> str:
        """The first error, formatted, for one-line reports (``file:line:col: error: ...``)."""
        errors = [d.format() for d in self.diagnostics if d.severity == "error"]
        return errors[0] if errors else f"{self.source_name}: error: unknown error"

    def parse(self, text: str) -> ir.Module | None:
        """Parse ``text`` in the current context; on failure record why and return None."""
        try:
            return parse_module(text)
        except ir.MLIRError as error:
            self.add_mlir_error(error)
            return None

    @contextmanager
    def capture(self, context: ir.Context) -> Iterator[DiagnosticEngine]:
        """Route every MLIR diagnostic of ``context`` into this engine while active."""

        def handler(diag: ir.Diagnostic) -> bool:
            self.diagnostics.append(self.convert(diag))
            return True

        handle = context.attach_diagnostic_handler(handler)
        try:
            yield self
        finally:
            handle.detach()


_UNREGISTERED = (
    "operation being parsed with an unregistered dialect. If this is intended, please use "
    "-allow-unregistered-dialect with the MLIR tool used"
)
UNREGISTERED_DIALECT = (
    "operation of an unregistered dialect: dcmlir reads the dialects IREE compiles (linalg, "
    "tensor, arith, stablehlo, tosa, torch, ...); convert the op to one of them first"
)


def reword(message: str) -> str:
    """MLIR's message, minus advice that does not apply to dcmlir: the parser suggests
    ``-allow-unregistered-dialect``, a flag neither ``dcmlir`` nor ``dcmlir-opt`` has (an
    unregistered op could not be compiled by IREE anyway)."""
    return message.replace(_UNREGISTERED, UNREGISTERED_DIALECT)


# expected-error @+1 {{message}}, expected-remark@below {{...}}, expected-note {{...}}
_EXPECTED = re.compile(
    r"expected-(?P<severity>error|warning|remark|note)"
    r"(?:\s*@(?P<where>above|below|[+-]\d+|\d+))?"
    r"\s*\{\{(?P<message>.*?)\}\}"
)


@dataclass
class Expectation:
    severity: str
    line: int
    message: str
    comment_line: int
    matched: bool = False


def parse_expectations(text: str) -> list[Expectation]:
    """Read MLIR's ``expected-*`` comments; ``@below``/``@above`` skip other comment lines."""
    lines = text.splitlines()
    found: list[Expectation] = []
    for index, line in enumerate(lines):
        comment = line.find("//")
        if comment < 0:
            continue
        for match in _EXPECTED.finditer(line[comment:]):
            line_no = index + 1
            where = match.group("where")
            if where == "below":
                line_no = _next_code_line(lines, index, +1)
            elif where == "above":
                line_no = _next_code_line(lines, index, -1)
            elif where and where[0] in "+-":
                line_no += int(where)
            elif where:
                line_no = int(where)
            found.append(
                Expectation(match.group("severity"), line_no, match.group("message"), index + 1)
            )
    return found


def _next_code_line(lines: list[str], index: int, step: int) -> int:
    probe = index + step
    while 0 <= probe < len(lines) and lines[probe].lstrip().startswith("//"):
        probe += step
    return probe + 1


def verify_expectations(text: str, source_name: str, diagnostics: list[Diagnostic]) -> list[str]:
    """Match diagnostics to ``expected-*`` comments; return one problem line per mismatch."""
    expectations = parse_expectations(text)
    problems: list[str] = []
    flat: list[Diagnostic] = []
    for diag in diagnostics:
        flat.append(diag)
        flat.extend(diag.notes)
    for diag in flat:
        for exp in expectations:
            if exp.matched or exp.severity != diag.severity or exp.line != diag.loc.line:
                continue
            if exp.message in diag.message:
                exp.matched = True
                break
        else:
            problems.append(f"{diag.loc}: error: unexpected {diag.severity}: {diag.message}")
    for exp in expectations:
        if not exp.matched:
            problems.append(
                f"{source_name}:{exp.comment_line}: error: expected {exp.severity} "
                f'"{exp.message}" was not produced'
            )
    return problems
