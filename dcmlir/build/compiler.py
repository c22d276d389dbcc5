"""Compile MLIR modules to IREE ``.vmfb`` for a target, with a disk cache.

Tuning compiles many variants and re-runs see the same ones again, so every
build is cached under a key that changes whenever the output could: the IREE
release and revision, the target, every flag, the IR text and, for
``--iree-llvmcpu-target-cpu=host``, the host CPU.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dcmlir.build.code_layout import placement_name
from dcmlir.files import write_atomic
from dcmlir.ir.iree import STDIN_NAME, CompilerRun, run_compile, versions

__all__ = [
    "TARGETS",
    "Build",
    "BuildCache",
    "BuildError",
    "build",
    "cache_key",
    "clear_cache",
    "compile_module",
    "default_cache",
    "default_cache_dir",
    "directory_bytes",
    "remove_stale_scratch",
    "scratch_directory",
    "stale_scratch",
    "target_flags",
]

log = logging.getLogger(__name__)

TARGETS: dict[str, tuple[str, ...]] = {
    "llvm-cpu": (
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    ),
    # Compile-only works without a GPU; sm_90 is missing from IREE 3.13's target table.
    "cuda": ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"),
}
"""The flags that select each target; ``extra_flags`` come after them."""

DISPATCH_REPEAT_FLAG = "--iree-hal-benchmark-dispatch-repeat-count"
"""Repeats every dispatch of a function that many times in its command buffer: a call then
times the device's work R times over one host round trip (for measuring only)."""

Compiler = Callable[..., CompilerRun]
"""How ``iree-compile`` is run: :func:`dcmlir.ir.iree.run_compile`, or a test's stand-in,
called as ``(text, flags, timeout)``, with ``input_name=`` for a placement."""

CACHE_ENV = "DCMLIR_CACHE_DIR"
_MAX_ERROR_LINES = 12


class BuildError(Exception):
    """IREE could not compile a module: ``str()`` is the first lines of its diagnostics."""

    def __init__(self, message: str, log_text: str = "") -> None:
        super().__init__(message)
        self.log = log_text  # the whole stderr of iree-compile, for records and debugging


@dataclass(frozen=True)
class Build:
    """A compiled module and how it was obtained."""

    vmfb: bytes
    key: str
    cached: bool
    seconds: float  # compile time (0 for a cache hit)
    log: str  # iree-compile's stderr: warnings even on success


def target_flags(target: str) -> tuple[str, ...]:
    """The flags of a named target; a ValueError naming the known ones otherwise."""
    if target not in TARGETS:
        raise ValueError(f"unknown target '{target}' (known: {', '.join(TARGETS)})")
    return TARGETS[target]


# --- cache ---------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$DCMLIR_CACHE_DIR``, else ``~/.cache/dcmlir``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "dcmlir"


@functools.cache
def _host_cpu_id() -> str:
    """What a ``target-cpu=host`` build depends on: the CPU model and its feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features"))]
    return "\n".join(dict.fromkeys(wanted))  # one copy per distinct line, in order


def cache_key(mlir_text: str, flags: Sequence[str]) -> str:
    """sha256 over everything the compiled bytes depend on."""
    payload = {
        "iree": versions()["iree"],
        "flags": list(flags),
        "host": _host_cpu_id() if any(f.endswith("-cpu=host") for f in flags) else "",
        "ir": mlir_text,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class BuildCache:
    """``<dir>/builds/<key>.vmfb`` (plus ``.log``), written atomically; ``<dir>/td/`` holds
    the td route's transform libraries.

    ``hits`` and ``misses`` count lookups, so callers and tests can see whether
    anything was compiled.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hits = 0
        self.misses = 0

    @property
    def builds_dir(self) -> Path:
        return self.directory / "builds"

    def load(self, key: str) -> tuple[bytes, str] | None:
        try:
            vmfb = (self.builds_dir / f"{key}.vmfb").read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            log_text = (self.builds_dir / f"{key}.log").read_text(encoding="utf-8")
        except OSError:
            log_text = ""
        self.hits += 1
        return vmfb, log_text

    def store(self, key: str, vmfb: bytes, log_text: str) -> None:
        """Best effort: a cache that cannot be written costs time, never a build."""
        # The log first: a reader that finds the .vmfb finds its log too.
        self._write({f"{key}.log": log_text.encode("utf-8"), f"{key}.vmfb": vmfb})

    def _write(self, files: dict[str, bytes]) -> None:
        """Write ``files`` under ``builds/`` in order, each atomically; a warning if it cannot."""
        try:
            self.builds_dir.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                write_atomic(self.builds_dir / name, data)
        except OSError as err:
            log.warning("dcmlir: warning: cannot write build cache %s: %s", self.builds_dir, err)

    def load_failure(self, key: str) -> str | None:
        """The log of a build that failed with an error of IREE's (:meth:`store_failure`)."""
        try:
            return (self.builds_dir / f"{key}.failed").read_text(encoding="utf-8")
        except OSError:
            return None

    def store_failure(self, key: str, log_text: str) -> None:
        """Remember that ``key`` fails: IREE's errors are the same on the same input and flags
        (a module data tiling cannot compile is asked again by each compile of its plans)."""
        self._write({f"{key}.failed": log_text.encode("utf-8")})

    def remove(self, key: str) -> None:
        """Forget one build (e.g. one that compiled but was not built as asked)."""
        for suffix in (".vmfb", ".log", ".failed"):
            (self.builds_dir / f"{key}{suffix}").unlink(missing_ok=True)

    def entries(self) -> list[Path]:
        if not self.builds_dir.is_dir():
            return []
        return sorted(
            path
            for path in self.builds_dir.glob("*.vmfb")
            if path.is_file() and _BUILD_FILE.match(path.name)
        )

    @property
    def td_dir(self) -> Path:
        """The transform libraries of the ``td`` route (:mod:`dcmlir.build.routes`), by content."""
        return self.directory / "td"

    def _files(self) -> list[Path]:
        """Every file dcmlir wrote here: modules, logs, td libraries, a killed writer's temp.

        Only names dcmlir gives are counted (and cleared): a cache directory pointed at a
        folder that holds other files keeps them.
        """
        found: list[Path] = []
        for directory, pattern in ((self.builds_dir, _BUILD_FILE), (self.td_dir, _TD_FILE)):
            if directory.is_dir():
                found += [
                    path
                    for path in directory.iterdir()
                    if path.is_file() and not path.is_symlink() and pattern.match(path.name)
                ]
        return found

    def size_bytes(self) -> int:
        return sum(path.stat().st_size for path in self._files())

    def clear(self) -> int:
        """Delete every cached build and td library; returns how many modules were removed."""
        removed = len(self.entries())
        for path in self._files():
            path.unlink(missing_ok=True)
        return removed


_BUILD_FILE = re.compile(r"^\.?[0-9a-f]{64}\.(vmfb|log|failed)(\.[A-Za-z0-9_]+)*$")
"""``KEY.vmfb``, ``KEY.log`` (KEY: a sha256), and ``.KEY.vmfb.PID.tmp`` (or an older
release's ``.KEY.vmfb.XXXX``), a killed writer's staging file."""
_TD_FILE = re.compile(r"^[0-9a-f]{24}\.mlir$")
"""A td library, named by the first 24 hex digits of its content's sha256."""


_CACHES: dict[Path, BuildCache] = {}


def default_cache() -> BuildCache:
    """The cache of :func:`default_cache_dir`, one object per directory so counters add up."""
    directory = default_cache_dir()
    if directory not in _CACHES:
        _CACHES[directory] = BuildCache(directory)
    return _CACHES[directory]


def clear_cache() -> int:
    """Empty the default cache; returns how many modules were removed."""
    return default_cache().clear()


# --- scratch directories -------------------------------------------------------------------

SCRATCH_PATTERN = re.compile(r"^dcmlir-([a-z]+)-(\d+)-[^/]+$")
"""``dcmlir-ROLE-PID-XXXXXXXX``: the scratch directories of :func:`scratch_directory`."""


def scratch_directory(role: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory (in ``$TMPDIR``) named for its role and this process.

    Removed when closed, as any ``TemporaryDirectory``; a process killed with SIGKILL
    cannot do that, and the process id in the name is how a later run tells such a
    leftover (:func:`stale_scratch`) from a directory another live run is using.
    """
    return tempfile.TemporaryDirectory(prefix=f"dcmlir-{role}-{os.getpid()}-")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def stale_scratch(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """This user's scratch directories whose process is gone (killed before cleaning up)."""
    base = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = SCRATCH_PATTERN.match(entry.name)
        if match is None or int(match.group(2)) == os.getpid():
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        mine = entry.is_dir() and not entry.is_symlink() and info.st_uid == os.getuid()
        if mine and not _process_alive(int(match.group(2))):
            found.append(entry)
    return sorted(found)


def directory_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (what deleting it frees)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # gone meanwhile: nothing to count
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def remove_stale_scratch(directory: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Delete :func:`stale_scratch`; (directories removed, bytes freed)."""
    removed = freed = 0
    for path in stale_scratch(directory):
        size = directory_bytes(path)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed += 1
            freed += size
    return removed, freed


# --- build ---------------------------------------------------------------------------------


class HasCompileFlags(Protocol):
    """A target description (see :mod:`dcmlir.target`) that knows its iree-compile flags."""

    def compile_flags(self) -> tuple[str, ...]: ...


def flags_of(target: str | HasCompileFlags) -> tuple[str, ...]:
    """The flags that select a target given by name or as a target object."""
    return target_flags(target) if isinstance(target, str) else tuple(target.compile_flags())


def build(
    mlir_text: str,
    target: str | HasCompileFlags = "llvm-cpu",
    extra_flags: Sequence[str] = (),
    *,
    cache: BuildCache | None = None,
    use_cache: bool = True,
    source_name: str = "<input>",
    timeout: float | None = None,
    uncached_flags: Sequence[str] = (),
    compiler: Compiler = run_compile,
    placement: int | None = None,
) -> Build:
    """Compile ``mlir_text`` for ``target``; a cached result when the key matches.

    Raises :class:`BuildError` with IREE's diagnostics (locations name
    ``source_name``) when ``iree-compile`` fails or runs past ``timeout`` seconds.
    ``uncached_flags`` reach iree-compile but not the cache key: where to dump
    intermediates, which does not change the compiled bytes. ``compiler`` runs
    ``iree-compile`` (a seam for tests: a fake crash, or proof that a cache hit compiles nothing).
    ``placement``: compile under that placement's file name (:mod:`.code_layout`; the
    ``compiler`` is then given ``input_name``), else from stdin.
    """
    flags = (*flags_of(target), *extra_flags)
    named = None if placement is None else placement_name(placement)
    key = cache_key(mlir_text, flags if named is None else (*flags, f"<input {named}>"))
    store = None
    if use_cache:
        store = cache if cache is not None else default_cache()
        found = store.load(key)
        if found is not None:
            return Build(found[0], key, cached=True, seconds=0.0, log=found[1])
        failed = store.load_failure(key)
        if failed is not None:  # IREE said no to this input and these flags before
            failed = failed.replace(f"{named or STDIN_NAME}:", f"{source_name}:")
            raise BuildError(_error_summary(failed, 1), failed)
    start = time.perf_counter()
    try:
        if named is None:
            result = compiler(mlir_text, (*flags, *uncached_flags), timeout)
        else:
            result = compiler(mlir_text, (*flags, *uncached_flags), timeout, input_name=named)
    except subprocess.TimeoutExpired:
        raise BuildError(f"iree-compile ran past the {timeout:g} s time limit") from None
    seconds = time.perf_counter() - start
    log_text = result.log.replace(f"{named or STDIN_NAME}:", f"{source_name}:")
    if result.returncode != 0 or not result.output:
        if store is not None and result.returncode > 0 and _DIAGNOSTIC.search(log_text):
            store.store_failure(key, result.log)  # an error of IREE's, not a crash
        raise BuildError(_error_summary(log_text, result.returncode), log_text)
    if store is not None:
        store.store(key, result.output, log_text)
    return Build(result.output, key, cached=False, seconds=seconds, log=log_text)


def compile_module(
    mlir_text: str, target: str = "llvm-cpu", extra_flags: Sequence[str] = ()
) -> bytes:
    """The ``.vmfb`` bytes of ``mlir_text`` for ``target`` (cached; see :func:`build`)."""
    return build(mlir_text, target, extra_flags).vmfb


_DIAGNOSTIC = re.compile(r":\s*error:\s")


def _error_summary(log_text: str, returncode: int) -> str:
    """The first error diagnostic of the log and what follows it, without blank lines.

    IREE can print pages (pass pipelines, op dumps); a user needs the first error.
    """
    lines = [line.rstrip() for line in log_text.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if _DIAGNOSTIC.search(line)), 0)
    kept = lines[first : first + _MAX_ERROR_LINES]
    if len(lines) > first + _MAX_ERROR_LINES:
        kept.append(f"... ({len(lines) - first - _MAX_ERROR_LINES} more lines)")
    if returncode < 0:  # killed by a signal: a crash (its stack dump, if any, follows)
        kept.insert(0, f"iree-compile crashed ({_signal_name(-returncode)})")
    if not kept:
        return f"iree-compile failed with exit code {returncode} and printed nothing"
    return "\n".join(kept)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
