"""What every ``dcmlir`` command shares: its errors, its inputs, the workload listing and
the ``--shapes`` grammar as an option.

The command modules (``cmd_*``) import from here and ``cli`` imports them, so nothing
here imports a command module.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import IO, NoReturn

from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.inputs import InputError, read_module_source
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext, PassFailure
from dcmlir.passes.annotate_ranges import DimsOptionPass, QuietDimsOptionPass
from dcmlir.shapes import Shape, parse_shapes
from dcmlir.workload import Workload, workloads

PROG = "dcmlir"


class CliError(Exception):
    """A user error: printed as one ``dcmlir: error:`` line, exit status 1."""


class DiagnosticsError(CliError):
    """IR diagnostics, already ``file:line:col: error: ...``: printed as they are."""


class UsageError(CliError):
    """A command line argparse rejects: exit status 2, as argparse's own errors."""


_DIAGNOSTIC = re.compile(r"^[^\s:][^:]*(?::\d+:\d+)?: error: ")


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is (one line, records kept, scratch removed), exit 143."""


def on_sigterm(signum: int, frame: object) -> NoReturn:
    """The CLI's SIGTERM handler: unwind like Ctrl-C, so every ``finally`` and ``with`` runs."""
    raise Terminated


def interrupted_status(error: KeyboardInterrupt) -> int:
    """What a shell reports for the signal: 143 for SIGTERM, 130 for Ctrl-C (SIGINT)."""
    return 143 if isinstance(error, Terminated) else 130


def seconds(text: str) -> float:
    """An argparse type for a time in seconds: a finite number > 0 (not nan, inf or 0).

    ``--min-time inf`` used to be accepted and every request then ran to its time limit.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"'{text}' must be a finite number of seconds > 0")
    return value


def seed(text: str) -> int:
    """An argparse type for a random seed: an integer in 0..2**32-1, what numpy and
    scikit-learn accept (``--seed -1`` used to fail after the measuring, with a traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"'{text}' is not in 0..{2**32 - 1}")
    return value


def positive_int(text: str) -> int:
    """An argparse type for a count: a whole number >= 1 (``--threads``, ``--layers``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """``--threads N`` beside ``--device``: local-task's workers and the peers'."""
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="local-task: the threads IREE (and every peer) computes with "
        "(default: every core this process may use)",
    )


def checked_threads(device: str, threads: int | None) -> None:
    """``--threads`` only where there is a thread pool to size."""
    if threads is not None and device != "local-task":
        raise CliError(f"--threads applies to --device local-task (this is {device}: one thread)")


def plan_device_warning(
    plan_device: str | None, plan_threads: int | None, cores: int
) -> str | None:
    """What ``compile`` says of a ``local-task`` plan tuned for another core count than here."""
    if plan_device != "local-task" or plan_threads is None or plan_threads == cores:
        return None
    return (
        f"dcmlir: warning: the plan was tuned on local-task with {plan_threads} threads and this"
        f" machine has {cores} cores: IREE's local-task uses every core unless told otherwise"
        f" (run with --task_topology_max_group_count={plan_threads}, or tune again here)"
    )


def distinct_paths(paths: dict[str, str | os.PathLike[str] | None]) -> None:
    """Refuse two roles that name one file (``tune -o records.jsonl --db records.jsonl``).

    ``paths`` maps what a file is (an option, or ``INPUT``) to its path; unset ones and
    stdin (``-``) are skipped. Without this check an output silently replaced an input.
    """
    seen: dict[str, str] = {}
    for role, path in paths.items():
        if path is None or str(path) == "-":
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise CliError(
                f"{role} and {seen[key]} name the same file '{path}': writing one would "
                "destroy the other; give them different paths"
            )
        seen[key] = role


def user_error(message: str) -> CliError:
    """The error to raise for ``message``: a diagnostic (``file:line:col: error: ...``)
    prints as it is, anything else behind ``dcmlir: error:``; never both prefixes."""
    return DiagnosticsError(message) if _DIAGNOSTIC.match(message) else CliError(message)


def shapes_option(option: str, text: str, dynamic_dims: int | None = 1) -> list[Shape]:
    """``text`` of ``option`` in the shared shape grammar (:func:`dcmlir.shapes.parse_shapes`);
    a bad item ends as one ``dcmlir: error: OPTION: ...`` line."""
    try:
        return parse_shapes(text, dynamic_dims)
    except ValueError as err:
        raise CliError(f"{option}: {err}") from None


def sizes_option(option: str, text: str) -> list[int]:
    """The values of one dynamic dim (``T``) in the shape grammar: ``1,7,16:128:16``."""
    return [shape[0] for shape in shapes_option(option, text, 1)]


def example_path(name: str) -> Traversable:
    """A shipped example module (package data of ``dcmlir``)."""
    return resources.files("dcmlir") / "examples" / name


def read_input(path: str) -> tuple[str, str]:
    """(name for diagnostics, text) of a file, or of stdin for ``-``."""
    try:
        return read_module_source(path, sys.stdin)
    except InputError as err:
        raise CliError(str(err)) from None


@dataclass
class WorkloadListing:
    """The dynamic ops of a module: workloads, the ones left to IREE, one line each in IR order."""

    source: str
    found: list[Workload] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def list_workloads(
    text: str,
    source: str,
    dims: Sequence[str],
    stderr: IO[str],
    *,
    ranges_needed: bool = True,
) -> WorkloadListing:
    """Parse a module and describe its dynamic ops; ``dims`` (``--dims`` as ``dcmlir tune``
    takes it: ``LO:HI``, ``ARG.DIM=LO:HI``) fills unknown ranges.

    Diagnostics go to ``stderr``; an error among them becomes :class:`CliError`. A loop
    left without a range gets a warning naming ``--dims`` unless ``ranges_needed`` is
    False (``dcmlir measure`` takes its shapes from ``--shapes``).
    """
    kind = DimsOptionPass if ranges_needed else QuietDimsOptionPass
    try:
        annotate = kind.from_dims(dims)
    except ValueError as err:
        raise CliError(f"--dims: {err}") from None
    engine = DiagnosticEngine(source)
    listing = WorkloadListing(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is not None:  # ranges the IR assumes (util.assume.int) count without --dims
            with suppress(PassFailure):  # the pass emitted its error diagnostic
                annotate.apply(PassContext(engine, stderr), module.operation)
        if module is not None and not engine.has_errors:
            for op, result in workloads(module.operation, source):
                if isinstance(result, Workload):
                    listing.found.append(result)
                    listing.lines.append(f"{result.location}: {op.name}: {result.describe()}")
                    continue
                where = str(engine.locate(op))
                listing.skipped.append({"op": op.name, "location": where, "reason": str(result)})
                listing.lines.append(f"{where}: {op.name}: not a workload, left to IREE: {result}")
    errors = [d for d in engine.diagnostics if d.severity == "error"]
    for diag in engine.diagnostics:
        if diag.severity != "error":
            print(diag.format(), file=stderr)
    if errors:
        # The first error is the one line; the others follow it as they would from mlir-opt.
        raise DiagnosticsError("\n".join(d.format() for d in errors))
    return listing
