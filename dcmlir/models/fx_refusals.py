"""IREE's FX importer's refusals in one line.

The importer raises bare exceptions whose text carries the failing node's whole metadata
(its stack trace, module stack, fx provenance: 1.7 KB for MPT's ``sym_max``, the
``max(0, position_bias.size(1) - query_length)`` of its ALiBi offset, which IREE 3.13's
importer has no lowering for). :func:`import_failure` names what it could not import and
the model's line that made it.
"""

from __future__ import annotations

import re

__all__ = ["import_failure"]

_UNIMPLEMENTED = re.compile(r"Unimplemented call_function: target=(?:<function )?([\w.]+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in \w+(?:\\n\s*([^\'\\]*))?')


def import_failure(err: BaseException) -> str:
    """IREE's FX importer's refusal in one line: what it cannot import and the model's line
    that made it (its message carries the node's whole metadata)."""
    text = str(err)
    missing = _UNIMPLEMENTED.search(text)
    if missing is None:
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        return f"FX import failed: {first[:300]}"
    frames = _FRAME.findall(text)
    where = ""
    if frames:
        path, line, code = frames[-1]
        code = f": {code.strip()[:120]}" if code.strip() else ""
        where = f" (from {path.rsplit('/', 1)[-1]}:{line}{code})"
    return (
        f"FX import failed: IREE's FX importer cannot import {missing.group(1)}{where}; "
        "torch.export left it in the graph"
    )
