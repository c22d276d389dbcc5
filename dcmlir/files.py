"""Writing a user's output file so that a crash or a full disk never leaves half of it.

Every output dcmlir writes over (the plan, its workload graph, a compiled module, the
dispatched MLIR, benchmark results) goes to a temporary file beside it first, is
flushed to disk, and is then renamed over the target: the old file stays whole until
the new one is. The temporary file is ``.NAME.PID.tmp`` in the target's folder (the
same file system, so the rename is atomic) and is removed when the write fails.

A link is followed (the file it names is replaced, the link stays), and a target that
is not a regular file (``/dev/null``, a pipe) is written directly: renaming over a
device would replace the device.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["temporary_path", "unwritable", "write_atomic"]


def unwritable(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written (a folder, a missing or read-only folder), else None:
    checked before long work, so a bad output path fails in a second, not after hours."""
    target = Path(path)
    if target.is_dir():
        return "is a directory; give a file name"
    directory = target.parent
    if not directory.is_dir():
        return f"directory {directory} does not exist"
    if not os.access(directory, os.W_OK):
        return f"directory {directory} is not writable"
    return None


def temporary_path(path: str | os.PathLike[str]) -> Path:
    """Where :func:`write_atomic` stages ``path``: ``.NAME.PID.tmp`` beside it."""
    target = Path(path)
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (str: UTF-8) in one rename; raise OSError, leaving
    ``path`` as it was, when the data cannot be written whole."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        with open(target, "wb") as out:
            out.write(payload)
        return
    temp = temporary_path(target)
    try:
        with open(temp, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
