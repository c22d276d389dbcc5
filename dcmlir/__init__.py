"""dcmlir: DietCode-style tuning of dynamic-shape linalg programs on top of IREE.

``dcmlir.tune(...)`` and ``dcmlir.compile(...)`` are the Python API (see
:mod:`dcmlir.tuner`); they load IREE only when first used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "compile", "tune"]


def __getattr__(name: str) -> Any:
    if name in ("tune", "compile"):
        from dcmlir import tuner

        return getattr(tuner, name)
    raise AttributeError(f"module 'dcmlir' has no attribute {name!r}")
