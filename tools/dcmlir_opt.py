"""``dcmlir-opt``: an mlir-opt-style driver for dcmlir's passes and MLIR's own.

The driver is a class so tests can run it in-process:
``DcmlirOptMain(args=["in.mlir", "-p", "canonicalize"]).run()`` returns the
exit code and writes to the streams it was given.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import IO

from dcmlir.ir.diagnostics import DiagnosticEngine, verify_expectations
from dcmlir.ir.inputs import InputError, read_source
from dcmlir.ir.iree import versions
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext
from dcmlir.ir.pipeline import PipelineElement, PipelineError, build_pass_manager, parse_pipeline
from dcmlir.passes import get_all_passes

SPLIT_MARKER = "// -----"


class DriverError(Exception):
    """A usage problem reported as one ``dcmlir-opt: error: ...`` line."""


class DcmlirOptMain:
    """Parse arguments, read the input, run the pipeline, print the result."""

    prog = "dcmlir-opt"

    def __init__(
        self,
        args: Sequence[str] | None = None,
        stdin: IO[str] | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> None:
        self.stdin = stdin if stdin is not None else sys.stdin
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.parser = self.build_parser()
        self.args_list = list(args) if args is not None else sys.argv[1:]

    def build_parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=self.prog,
            description="Run dcmlir and MLIR passes over an MLIR file, like mlir-opt.",
        )
        parser.add_argument("input", nargs="?", default="-", help="input file ('-' for stdin)")
        parser.add_argument("-o", "--output", default="-", help="output file (default stdout)")
        parser.add_argument(
            "-p",
            "--pass-pipeline",
            default="",
            help="textual pipeline, e.g. 'dcmlir-annotate-ranges{range=1:128},canonicalize'",
        )
        parser.add_argument("--list-passes", action="store_true", help="list dcmlir passes")
        parser.add_argument(
            "--split-input-file",
            action="store_true",
            help=f"process chunks separated by '{SPLIT_MARKER}' independently",
        )
        parser.add_argument(
            "--verify-diagnostics",
            action="store_true",
            help="check diagnostics against expected-error/remark/... comments",
        )
        parser.add_argument("--version", action="store_true", help="print versions and exit")
        return parser

    # -- entry -------------------------------------------------------------------
    def run(self) -> int:
        try:
            args = self.parser.parse_args(self.args_list)
        except SystemExit as exit_:  # argparse already printed usage
            return int(exit_.code or 0)
        try:
            return self._run(args)
        except DriverError as err:
            print(f"{self.prog}: error: {err}", file=self.stderr)
            return 1

    def _run(self, args: argparse.Namespace) -> int:
        if args.version:
            print(self.version_text(), file=self.stdout)
            return 0
        if args.list_passes:
            self.stdout.write(self.list_passes_text())
            return 0
        registry = get_all_passes()
        with ir.Context():
            try:
                pipeline = parse_pipeline(args.pass_pipeline, registry)
            except PipelineError as err:
                raise DriverError(str(err)) from None
        source_name, text = self.read_input(args.input)
        chunks = split_input(text) if args.split_input_file else [text]
        outputs: list[str] = []
        failed = False
        for chunk in chunks:
            ok, output = self.process_chunk(chunk, source_name, pipeline, args.verify_diagnostics)
            failed |= not ok
            if output is not None:
                outputs.append(output)
        self.write_output(args.output, f"\n{SPLIT_MARKER}\n".join(outputs))
        return 1 if failed else 0

    # -- pieces ------------------------------------------------------------------
    def process_chunk(
        self, text: str, source_name: str, pipeline: list[PipelineElement], verify: bool
    ) -> tuple[bool, str | None]:
        """Parse and transform one buffer; returns (success, printed module or None)."""
        engine = DiagnosticEngine(source_name)
        output: str | None = None
        with ir.Context() as context, engine.capture(context):
            module = engine.parse(text)  # the parser verifies too
            if module is not None and self.transform(module, pipeline, engine):
                output = str(module)
        if verify:
            problems = verify_expectations(text, source_name, engine.diagnostics)
            for problem in problems:
                print(problem, file=self.stderr)
            return not problems, output
        for diag in engine.diagnostics:
            print(diag.format(), file=self.stderr)
        return not engine.has_errors and output is not None, output

    def transform(
        self, module: ir.Module, pipeline: list[PipelineElement], engine: DiagnosticEngine
    ) -> bool:
        if not pipeline:
            return True
        ctx = PassContext(engine, self.stdout)
        pm = build_pass_manager(pipeline, ctx)
        try:
            pm.run(module.operation)
        except ir.MLIRError as err:
            engine.add_mlir_error(err)
            return False
        return not engine.has_errors

    def read_input(self, path: str) -> tuple[str, str]:
        try:
            return read_source(path, self.stdin)
        except InputError as err:
            raise DriverError(str(err)) from None

    def write_output(self, path: str, text: str) -> None:
        if text and not text.endswith("\n"):
            text += "\n"
        if path == "-":
            self.stdout.write(text)
            return
        try:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            raise DriverError(f"cannot write '{path}': {err.strerror}") from None

    # -- listings ----------------------------------------------------------------
    @staticmethod
    def version_text() -> str:
        stamp = versions()
        return f"dcmlir-opt {stamp['dcmlir']} (IREE compiler {stamp['iree']})"

    @staticmethod
    def list_passes_text() -> str:
        out = io.StringIO()
        out.write("dcmlir passes (upstream MLIR/IREE passes are accepted by name too):\n")
        for name, load in sorted(get_all_passes().items()):
            pass_cls = load()
            out.write(f"  {name}: {pass_cls.summary}\n")
            for option, type_name, default, help_text in pass_cls.option_help():
                shown = f" (default: {default})" if default != "" else ""
                out.write(f"    {option}=<{type_name}>{shown}: {help_text}\n")
        return out.getvalue()


def split_input(text: str) -> list[str]:
    """Split at ``// -----`` lines, padding each chunk so line numbers stay the file's."""
    chunks: list[str] = []
    current: list[str] = []
    start_line = 0
    for index, line in enumerate(text.splitlines(keepends=True)):
        if line.strip() == SPLIT_MARKER:
            chunks.append("\n" * start_line + "".join(current))
            current = []
            start_line = index + 1
            continue
        current.append(line)
    chunks.append("\n" * start_line + "".join(current))
    return chunks


def main(argv: Sequence[str] | None = None) -> int:
    return DcmlirOptMain(args=argv).run()


if __name__ == "__main__":
    sys.exit(main())
