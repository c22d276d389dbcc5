"""The one door to IREE's compiler tool and runtime (the MLIR bindings live in dcmlir.ir.mlir).

The rest of dcmlir calls these few functions instead of importing
``iree.compiler``/``iree.runtime`` piecemeal: the packages are untyped, their
Python layout moves between releases, and the measurement rules (inputs on the
device, no per-call marshalling) want the low-level invoke path in one place.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from iree.compiler import version as _compiler_version  # type: ignore[import-untyped]
from iree.compiler.tools.binaries import find_tool  # type: ignore[import-untyped]

from dcmlir.version import __version__


class _OnFirstUse:
    """A module imported when first used: ``iree.runtime`` takes 0.9 s to import (its
    native libraries), which every ``dcmlir-opt`` run and every command that only compiles
    paid without calling it. Each attribute is looked up once and kept on the instance, so
    later uses are plain attribute reads (``invoke`` runs inside the timed loop: going
    through ``importlib`` there cost 1.5 us a call)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:  # only for attributes not yet kept
        module: ModuleType = importlib.import_module(self._name)
        value = getattr(module, attribute)
        setattr(self, attribute, value)
        return value


if TYPE_CHECKING:
    import iree.runtime as rt  # type: ignore[import-untyped]
    from iree.runtime import _binding  # type: ignore[import-untyped]
else:
    rt = _OnFirstUse("iree.runtime")
    _binding = _OnFirstUse("iree.runtime._binding")

__all__ = [
    "STDIN_NAME",
    "CompilerRun",
    "LoadedFunction",
    "ParameterFile",
    "RuntimeFailure",
    "compiler_version",
    "cuda_device_available",
    "device_config",
    "load_function",
    "load_functions",
    "parameter_scopes",
    "run_compile",
    "set_task_threads",
    "versions",
    "write_parameter_archive",
]

STDIN_NAME = "<stdin>"
"""How ``iree-compile`` names a buffer read from stdin in its diagnostics."""


class RuntimeFailure(RuntimeError):
    """Loading or calling a compiled module failed; the message says what and where."""


def compiler_version() -> str:
    """The compiler release and its IREE revision: part of every build-cache key."""
    revision = _compiler_version.REVISIONS.get("IREE", "unknown")
    return f"{_compiler_version.VERSION} ({revision})"


def versions() -> dict[str, str]:
    """The stamp every record, plan, build-cache key and result carries: dcmlir's and IREE's."""
    return {"dcmlir": __version__, "iree": compiler_version()}


# --- compiler ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompilerRun:
    """What one ``iree-compile`` invocation gave back."""

    returncode: int
    output: bytes
    log: str  # stderr: diagnostics, warnings (some failures exit 0 and only print here)


def run_compile(
    input_text: str,
    flags: Sequence[str],
    timeout: float | None = None,
    *,
    input_name: str | None = None,
) -> CompilerRun:
    """Run the ``iree-compile`` binary of the wheel on ``input_text`` (fed on stdin, or
    from a file ``input_name`` in its scratch directory: IREE keeps that name in each
    executable, so its length places the code, :mod:`dcmlir.build.code_layout`).

    We call the binary ourselves rather than ``iree.compiler.compile_str``: that one
    raises with the whole command line on failure and copies stderr to ours on
    success, while callers here need the log as data (a transform library that
    fails to load prints an error but exits 0). Raises ``subprocess.TimeoutExpired``
    after ``timeout`` seconds.

    iree-compile links each executable through object files in ``$TMPDIR``
    (``NAME_dispatch_0-XXXXXX.o``/``.so``) and deletes them when done; one killed
    mid-link (a time limit, kill -9) cannot. So it gets a scratch directory of its own,
    removed here, named ``dcmlir-compile-PID-*`` so that what a killed dcmlir leaves is
    found and removed later (``dcmlir.build.compiler.stale_scratch``).
    """
    command = [find_tool("iree-compile"), input_name or "-", "-o", "-", *flags]
    with tempfile.TemporaryDirectory(prefix=f"dcmlir-compile-{os.getpid()}-") as scratch:
        if input_name is not None:
            (Path(scratch) / input_name).write_text(input_text)
        process = subprocess.run(
            command,
            input=None if input_name is not None else input_text.encode(),
            capture_output=True,
            check=False,
            timeout=timeout,
            cwd=scratch if input_name is not None else None,
            env={**os.environ, "TMPDIR": scratch},
        )
    log = process.stderr.decode("utf-8", errors="replace")
    return CompilerRun(process.returncode, process.stdout, log)


# --- runtime -------------------------------------------------------------------------------


def set_task_threads(threads: int) -> None:
    """Make ``local-task`` devices opened from now on in this process use ``threads`` workers.

    IREE reads its task topology from a runtime flag once, when the first such
    device is made; call this before :func:`device_config`.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, not {threads}")
    if device_config.cache_info().currsize:
        raise RuntimeError("set_task_threads must come before the first device is opened")
    rt.flags.parse_flags(f"--task_topology_max_group_count={threads}")


@functools.cache
def device_config(driver: str) -> rt.Config:
    """One runtime device per driver per process, shared by every loaded module.

    Variants compared side by side must run on the same device; creating a device
    per module would also pay its start-up (a thread pool for ``local-task``) each time.
    """
    try:
        return rt.Config(driver)
    except (ValueError, RuntimeError) as err:
        raise RuntimeFailure(f"cannot open IREE device '{driver}': {err}") from None


_RESULTS_CAPACITY = 4  # initial capacity only: the VM grows the list to the real count


class LoadedFunction:
    """A function of a compiled module, callable with inputs already on the device.

    :meth:`prepare` copies host arrays to the device once; :meth:`invoke` then calls
    the function with nothing but the VM call in the timed path.
    """

    def __init__(
        self,
        vmfb: bytes,
        function: str,
        driver: str = "local-sync",
        loaded: tuple[rt.VmModule, rt.SystemContext] | None = None,
        *,
        parameters: ParameterFile | None = None,
    ) -> None:
        self.driver = driver
        self.config = device_config(driver)
        module, self.context = loaded if loaded is not None else _load(vmfb, driver, parameters)
        self.function = module.lookup_function(function)
        if self.function is None:
            names = ", ".join(n for n in module.function_names if not n.startswith("__"))
            raise RuntimeFailure(f"module has no function '{function}' (it has: {names})")
        declaration = self.function.reflection.get("iree.abi.declaration", "")
        if not declaration.startswith("sync "):
            # Async (fence) ABIs need wait fences in the call; dcmlir compiles only sync ones.
            raise RuntimeFailure(f"function '{function}' does not use the synchronous ABI")
        self.name = function

    def prepare(self, inputs: Sequence[np.ndarray]) -> _binding.VmVariantList:
        """Copy one input set to the device and pack it as the call's argument list."""
        args = _binding.VmVariantList(len(inputs))
        for array in inputs:
            device_array = rt.asdevicearray(self.config.device, np.ascontiguousarray(array))
            args.push_ref(device_array._buffer_view)
        return args

    def invoke(self, args: _binding.VmVariantList) -> _binding.VmVariantList:
        """One call; blocks until the results are ready (synchronous ABI)."""
        results = _binding.VmVariantList(_RESULTS_CAPACITY)
        self.context.vm_context.invoke(self.function, args, results)
        return results

    def to_host(self, results: _binding.VmVariantList) -> list[np.ndarray]:
        """Copy every tensor result of :meth:`invoke` back to host arrays."""
        host: list[np.ndarray] = []
        for index in range(results.size):
            view = results.get_as_object(index, _binding.HalBufferView)
            host.append(rt.DeviceArray(self.config.device, view).to_host())
        return host

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Host arrays in, host arrays out: for checks, not for timing."""
        return self.to_host(self.invoke(self.prepare(inputs)))


# --- parameters (weights kept out of the module) -------------------------------------------


@dataclass(frozen=True)
class ParameterFile:
    """An IREE parameter archive (``.irpa``) and the scope the module names its entries in.

    A module that declares ``util.global @w = #flow.parameter.named<"model"::"key">``
    reads ``key`` from the archive registered under scope ``model`` when it is loaded.
    """

    path: str
    scope: str = "model"


_PARAMETER = re.compile(r'#(?:flow|stream)\.parameter\.named<"([^"]+)"::')


def parameter_scopes(text: str) -> set[str]:
    """The scopes a module's ``#flow.parameter.named`` weights are read from (none: its
    weights are in its text): the :class:`ParameterFile` it needs names one of them."""
    return set(_PARAMETER.findall(text))


def write_parameter_archive(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``{key: array}`` as an ``.irpa`` (raw little-endian bytes per key, in order)."""
    index = rt.ParameterIndex()
    for key, array in arrays.items():
        index.add_buffer(key, np.ascontiguousarray(array).tobytes())
    try:
        index.create_archive_file(os.fspath(path))
    except (ValueError, RuntimeError, OSError) as err:
        raise RuntimeFailure(f"cannot write parameter archive '{os.fspath(path)}': {err}") from None


def _parameters_module(config: rt.Config, parameters: ParameterFile) -> rt.VmModule:
    index = rt.ParameterIndex()
    try:
        index.load(parameters.path)
    except (ValueError, RuntimeError, OSError) as err:
        raise RuntimeFailure(f"cannot read parameter archive '{parameters.path}': {err}") from None
    provider = index.create_provider(scope=parameters.scope)
    return rt.create_io_parameters_module(config.vm_instance, provider)


def _load(
    vmfb: bytes, driver: str, parameters: ParameterFile | None = None
) -> tuple[rt.VmModule, rt.SystemContext]:
    config = device_config(driver)
    try:
        module = rt.VmModule.copy_buffer(config.vm_instance, vmfb)
        modules = [module]
        if parameters is not None:
            modules.insert(0, _parameters_module(config, parameters))
        return module, rt.SystemContext(vm_modules=modules, config=config)
    except (ValueError, RuntimeError) as err:
        raise RuntimeFailure(f"cannot load module on '{driver}': {err}") from None


def load_functions(
    vmfb: bytes,
    functions: Sequence[str],
    driver: str = "local-sync",
    *,
    parameters: ParameterFile | None = None,
) -> tuple[dict[str, LoadedFunction], dict[str, str]]:
    """Load a many-variant module once and bind each function: (loaded, errors by name).

    ``parameters``: the ``.irpa`` a module with ``#flow.parameter.named`` globals reads.
    """
    loaded_module = _load(vmfb, driver, parameters)
    found: dict[str, LoadedFunction] = {}
    errors: dict[str, str] = {}
    for name in functions:
        try:
            found[name] = LoadedFunction(vmfb, name, driver, loaded_module)
        except RuntimeFailure as err:
            errors[name] = str(err)
    return found, errors


@functools.cache
def cuda_device_available() -> bool:
    """Whether this machine has a CUDA GPU IREE's runtime can open (no GPU: compile only)."""
    try:
        driver = rt.get_driver("cuda")
        return bool(driver.query_available_devices())
    except (ValueError, RuntimeError, OSError):
        return False


def load_function(
    vmfb: bytes,
    function: str,
    driver: str = "local-sync",
    *,
    parameters: ParameterFile | None = None,
) -> LoadedFunction:
    """Load ``vmfb`` on a driver (``local-sync``, ``local-task``, ``cuda``), bind ``function``.

    ``parameters``: the ``.irpa`` a module with ``#flow.parameter.named`` globals reads.
    """
    return LoadedFunction(vmfb, function, driver, parameters=parameters)
