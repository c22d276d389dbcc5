"""The ``dcmlir`` command: one entry point, one subcommand per job.

User errors (a missing file, bad IR, a malformed option) end as one
``dcmlir: error: ...`` line (IR errors as ``file:line:col: error: ...``) and a
non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, NoReturn

from dcmlir.build.compiler import (
    BuildError,
    default_cache,
    directory_bytes,
    remove_stale_scratch,
    stale_scratch,
)
from dcmlir.ir.iree import RuntimeFailure, versions
from dcmlir.passes.list_workloads import build_report
from dcmlir.tools import (
    cmd_bench,
    cmd_demo,
    cmd_import_onnx,
    cmd_inspect,
    cmd_measure,
    cmd_models,
    cmd_run_model,
    cmd_tune,
)
from dcmlir.tools.common import (
    PROG,
    CliError,
    DiagnosticsError,
    UsageError,
    interrupted_status,
    list_workloads,
    on_sigterm,
    read_input,
)

VALUE_OPTIONS = ("--dims", "--shapes", "--seq")
"""Options whose value may start with '-' (a negative bound the checks then name)."""


def _join_dash_values(argv: Sequence[str]) -> list[str]:
    """``--dims -3:5`` -> ``--dims=-3:5``: argparse would take ``-3:5`` for an option."""
    joined: list[str] = []
    index = 0
    while index < len(argv):
        item = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else ""
        if item in VALUE_OPTIONS and following[:1] == "-" and following[1:2].isdigit():
            joined.append(f"{item}={following}")
            index += 2
            continue
        joined.append(item)
        index += 1
    return joined


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so ``main`` returns."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# --- workloads -----------------------------------------------------------------------------


def cmd_workloads(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """One line per dynamic op of the module (or a JSON report), in IR order."""
    source, text = read_input(args.input)
    listing = list_workloads(text, source, args.dims, err)
    if args.json:
        report = build_report(listing.source, listing.found, listing.skipped)
        out.write(json.dumps(report, indent=2) + "\n")
        return 0
    for line in listing.lines:
        print(line, file=out)
    if not listing.found and not listing.skipped:
        print(f"{source}: no dynamic-shape linalg ops", file=err)
    return 0


# --- cache ---------------------------------------------------------------------------------


def _human_bytes(size: int) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units)."""
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def cmd_cache(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """The cache and, in $TMPDIR, scratch directories of runs killed before cleaning up."""
    cache = default_cache()
    if args.clear:
        removed = cache.clear()
        print(f"removed {removed} cached module(s) from {cache.builds_dir}", file=out)
        count, freed = remove_stale_scratch()
        if count:
            print(
                f"removed {count} temporary dir(s) of killed runs ({_human_bytes(freed)}) "
                f"from {tempfile.gettempdir()}",
                file=out,
            )
        return 0
    entries = cache.entries()
    size = cache.size_bytes()
    print(f"{cache.directory}", file=out)
    print(f"{len(entries)} cached module(s), {_human_bytes(size)}", file=out)
    stale = stale_scratch()
    if stale:
        left = _human_bytes(sum(directory_bytes(path) for path in stale))
        print(
            f"{len(stale)} temporary dir(s) of killed runs in {tempfile.gettempdir()}, {left}"
            " (dcmlir cache --clear removes them)",
            file=out,
        )
    return 0


# --- main ----------------------------------------------------------------------------------


def version_text() -> str:
    """``dcmlir X (IREE compiler Y)``."""
    stamp = versions()
    return f"{PROG} {stamp['dcmlir']} (IREE compiler {stamp['iree']})"


def build_parser() -> argparse.ArgumentParser:
    """The ``dcmlir`` parser: one subcommand per job, each command module adding its own."""
    parser = _Parser(
        prog=PROG,
        description="DietCode-style tuning of dynamic-shape MLIR linalg programs on IREE.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    listing = commands.add_parser(
        "workloads",
        help="list the dynamic-shape linalg ops of a module and what dcmlir would tune",
        description="List each dynamic-shape linalg op: its kind, iteration space, "
        "ranges, element types and structural key.",
    )
    listing.add_argument("input", metavar="INPUT.mlir", help="MLIR file ('-' for stdin)")
    listing.add_argument(
        "--dims",
        action="append",
        default=[],
        metavar="LO:HI | ARG.DIM=LO:HI | ARG.DIM=ARG.DIM",
        help="as for dcmlir tune: range (inclusive) of every dynamic dim whose range the IR "
        "does not give (util.assume.int bounds and recorded dcmlir.dim_ranges win), or of one "
        "argument dim (arg0.0=1:128), or two argument dims tied as one value (arg0.1=arg0.2); "
        "repeatable",
    )
    listing.add_argument("--json", action="store_true", help="print a JSON report instead")
    listing.set_defaults(run=cmd_workloads)

    cmd_demo.add_parser(commands)
    cmd_measure.add_parser(commands)
    cmd_inspect.add_parser(commands)
    cmd_models.add_parsers(commands)
    cmd_import_onnx.add_parser(commands)
    cmd_tune.add_parsers(commands)
    cmd_run_model.add_parser(commands)
    cmd_bench.add_parser(commands)

    cache = commands.add_parser(
        "cache",
        help="show or clear the build cache",
        description="Show where compiled modules are cached ($DCMLIR_CACHE_DIR, else "
        "~/.cache/dcmlir) and how many there are.",
    )
    cache.add_argument("--clear", action="store_true", help="delete every cached module")
    cache.set_defaults(run=cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user errors end as one line and an exit status, never a traceback."""
    out, err = sys.stdout, sys.stderr
    parser = build_parser()
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        args = parser.parse_args(_join_dash_values(sys.argv[1:] if argv is None else argv))
        if args.version:
            print(version_text(), file=out)
            return 0
        if args.command is None:
            parser.print_help(err)
            return 2
        return int(args.run(args, out, err))
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=err)
        return 2
    except DiagnosticsError as error:
        print(error, file=err)
        return 1
    except CliError as error:
        print(f"{PROG}: error: {error}", file=err)
        return 1
    except BuildError as error:
        print(f"{PROG}: error: IREE could not compile the module:\n{error}", file=err)
        return 1
    except RuntimeFailure as error:
        print(f"{PROG}: error: {error}", file=err)
        return 1
    except KeyboardInterrupt as stop:
        print(f"{PROG}: interrupted", file=err)
        return interrupted_status(stop)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
