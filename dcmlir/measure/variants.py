"""What the Runner times: one family of variants, each a picklable description.

The parent process names a variant; the measuring worker loads it (:func:`load_group`)
into a :class:`Callee` and times only its ``invoke``:

- :class:`ModuleFunction`: a function of a compiled module file (``.vmfb``), with
  the parameter archive (``.irpa``) its weights live in, if any;
- :class:`HostLibrary`: a workload's contraction computed by numpy or PyTorch
  (the vendor-library peers of :mod:`dcmlir.measure.host`);
- :class:`HostModel`: a whole model run by a Python library on the host (torch
  eager), built in the worker by a picklable factory.

A variant's ``key`` names what the worker loaded (two variants with the same key
share it; the parent computes it, the worker files what it loads under it); its
``group`` names what is loaded in one go (every function of one module file); its
``pool`` names the thread pool it computes on (IREE's, OpenBLAS's, torch's ...): with
more than one thread, each pool gets a measuring process of its own
(:class:`~dcmlir.measure.runner.Runner`), so no library's idle workers spin on the
cores another one is being timed on.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dcmlir.ir.iree import ParameterFile, load_functions
from dcmlir.measure.host import HostFunction, device_threads

__all__ = [
    "Callee",
    "HostLibrary",
    "HostModel",
    "ModuleFunction",
    "Variant",
    "load_group",
]


class Callee(Protocol):
    """What a variant becomes in the worker (the interface of
    :class:`~dcmlir.ir.iree.LoadedFunction`): inputs prepared once, then timed calls."""

    def prepare(self, inputs: Sequence[np.ndarray]) -> Any: ...

    def invoke(self, prepared: Any) -> Any: ...

    def to_host(self, result: Any) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class ModuleFunction:
    """``function`` of the compiled module file ``vmfb_path``; ``parameters``: its weights."""

    name: str
    vmfb_path: str
    function: str
    parameters: ParameterFile | None = None

    @property
    def key(self) -> Hashable:
        return ("module", self.vmfb_path, self.parameters, self.function)

    @property
    def group(self) -> Hashable:
        return ("module", self.vmfb_path, self.parameters)

    @property
    def pool(self) -> str:
        return "iree"


@dataclass(frozen=True)
class HostLibrary:
    """``library`` (numpy, torch) computing the contraction ``einsum`` with the device's
    thread count (see :class:`~dcmlir.measure.host.HostFunction`)."""

    name: str
    library: str
    einsum: str

    @property
    def key(self) -> Hashable:
        return ("host", self.library, self.einsum)

    @property
    def group(self) -> Hashable:
        return self.key

    @property
    def pool(self) -> str:
        return self.library


@dataclass(frozen=True)
class HostModel:
    """A model run by a Python library on the host, e.g. torch eager.

    ``build()`` makes its :class:`Callee` in the worker; it must pickle (a
    module-level class or function, or a ``functools.partial`` of one) and set
    its own thread count.
    """

    name: str
    build: Callable[[], Callee]

    @property
    def key(self) -> Hashable:
        return ("model", self.name, repr(self.build))

    @property
    def group(self) -> Hashable:
        return self.key

    @property
    def pool(self) -> str:
        return f"model:{self.name}"


Variant = ModuleFunction | HostLibrary | HostModel


def load_group(
    group: Sequence[Variant], driver: str, threads: int | None = None
) -> tuple[dict[int, Callee], dict[int, str]]:
    """Load variants of one ``group`` on ``driver``: (callees, errors), by position in ``group``.

    ``threads``: what a host library computes with (see :func:`device_threads`).

    A module file that cannot be read or loaded raises: every function in it fails.
    """
    first = group[0]
    found: dict[int, Callee] = {}
    errors: dict[int, str] = {}
    if isinstance(first, ModuleFunction):
        with open(first.vmfb_path, "rb") as file:
            vmfb = file.read()
        names = [v.function for v in group if isinstance(v, ModuleFunction)]
        loaded, failed = load_functions(vmfb, names, driver, parameters=first.parameters)
        for index, name in enumerate(names):
            if name in loaded:
                found[index] = loaded[name]
            else:
                errors[index] = failed[name]
        return found, errors
    for index, variant in enumerate(group):
        try:
            if isinstance(variant, HostLibrary):
                found[index] = HostFunction(
                    variant.library,
                    variant.einsum,
                    device_threads(driver, threads),
                    gpu=driver == "cuda",
                )
            else:
                assert isinstance(variant, HostModel)
                found[index] = variant.build()
        except (ImportError, ValueError) as err:
            library = variant.library if isinstance(variant, HostLibrary) else variant.name
            errors[index] = f"{library}: {err}"
    return found, errors
