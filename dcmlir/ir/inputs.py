"""Reading the user's input files the same way in every command."""

from __future__ import annotations

from typing import IO


class InputError(ValueError):
    """An input that cannot be read; the message names the file and the reason."""


def read_source(path: str, stdin: IO[str]) -> tuple[str, str]:
    """(name for diagnostics, text) of a file, or of ``stdin`` for ``-``."""
    if path == "-":
        return "<stdin>", stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return path, handle.read()
    except OSError as err:
        raise InputError(f"cannot read '{path}': {err.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(
            f"cannot read '{path}': not UTF-8 text (MLIR bytecode is not supported)"
        ) from None


def read_module_source(path: str, stdin: IO[str]) -> tuple[str, str]:
    """:func:`read_source` for commands that need a module: an empty file is an error."""
    name, text = read_source(path, stdin)
    if not text.strip():
        raise InputError(f"{name}: the file is empty: no MLIR module in it")
    return name, text
