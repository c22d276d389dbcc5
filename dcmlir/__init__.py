"""dcmlir: DietCode-style tuning of dynamic-shape linalg programs on top of IREE.

``dcmlir.tune(...)`` and ``dcmlir.compile(...)`` are the Python API (see
:mod:`dcmlir.driver`). They are resolved on first use, so ``import dcmlir`` (and
every ``dcmlir.*`` submodule import, which runs this file first) stays free of
IREE's start-up cost.
"""

from __future__ import annotations

from typing import Any

from dcmlir.version import __version__

__all__ = ["__version__", "compile", "tune"]


def __getattr__(name: str) -> Any:
    if name in ("tune", "compile"):
        import dcmlir.driver

        return getattr(dcmlir.driver, name)
    raise AttributeError(f"module 'dcmlir' has no attribute {name!r}")
