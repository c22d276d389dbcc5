"""Reading and writing the plan's JSON: typed fields whose errors say where they are.

Every field of a plan file is checked for its JSON type on the way in, with a message
that names its place (``workloads[0].kernels[1]: missing field 'route'``), so a
damaged file is one clear :class:`~dcmlir.dispatch.plan.PlanError`; on the way out,
small objects (a shape, a kernel) stay on one line so a plan diffs and reads well.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["get_field", "int_pair", "pretty_json"]

_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


def get_field(obj: Any, name: str, kind: type, where: str) -> Any:
    """``obj[name]`` of JSON type ``kind`` (``object``: anything), or a ValueError naming it."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} must be an object, got {type(obj).__name__}")
    if name not in obj:
        raise ValueError(f"{where}: missing field '{name}'")
    value = obj[name]
    wrong = (kind is int and isinstance(value, bool)) or not isinstance(value, kind)
    if wrong:
        raise ValueError(
            f"{where}.{name} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {value!r}"
        )
    return value


def int_pair(value: list[Any], where: str) -> tuple[int, int]:
    """``[lo, hi]`` as two integers (booleans refused), or a ValueError naming ``where``."""
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{where} must be [lo, hi] with integers, got {value!r}")
    return int(value[0]), int(value[1])


_LINE = 96


def pretty_json(value: Any, indent: int = 0, prefix: int = 0) -> str:
    """JSON with nesting shown, but any value that fits on its line kept on one line.

    ``prefix``: characters already on the line before the value (a key).
    """
    flat = json.dumps(value, allow_nan=False)
    if indent + prefix + len(flat) <= _LINE or not isinstance(value, dict | list) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, list):
        items = [pad + pretty_json(item, indent + 2) for item in value]
    else:
        items = []
        for key, item in value.items():
            label = f"{json.dumps(key)}: "
            items.append(pad + label + pretty_json(item, indent + 2, len(label)))
    opening, closing = ("[", "]") if isinstance(value, list) else ("{", "}")
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing
