"""Building with the transform-dialect library: the flags, the guard, one compile for many variants.

The library itself (one named sequence per variant) is :mod:`dcmlir.codegen.library`;
this module compiles a module against it and proves, from two IREE dumps, that each
variant was built by its own sequence (never trust a build on its exit code alone:
a library that fails to load can leave IREE on its default pipeline).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from dcmlir.build.compiler import (
    Build,
    BuildCache,
    BuildError,
    Compiler,
    cache_key,
    default_cache,
    scratch_directory,
    target_flags,
)
from dcmlir.codegen.library import (
    CONFIG_DUMP,
    CONFIG_ENTRY,
    LIBRARY_FILE,
    LOWERED_DUMP,
    LOWERING_PASS,
    NO_PIPELINE,
    SEQUENCE_ATTR,
    SEQUENCE_PREFIX,
    TD_PIPELINE,
    TdVariant,
    codegen_library,
    normalize_variants,
)
from dcmlir.ir.iree import STDIN_NAME, run_compile
from dcmlir.space import TileLevels
from dcmlir.workload import Workload

__all__ = ["RouteError", "build_td", "td_flags", "verify_td_build"]


class RouteError(BuildError):
    """The transform-library route could not build, or its guard rejected the build."""


# --- flags ---------------------------------------------------------------------------------


def td_flags(library: Path, dump_dir: Path) -> list[str]:
    """Every flag this route adds to the target's: the library, the two guard dumps, no threads."""
    if "@" in str(library):
        # IREE splits the flag value at '@' (FILE@ENTRY): a path with '@' cannot be passed.
        raise ValueError(f"library path '{library}' contains '@'")
    return [
        f"--iree-codegen-transform-dialect-library={library}@{CONFIG_ENTRY}",
        # IREE 3.13 self-deadlocks when a thread parsing the library (holding the
        # library mutex) runs another dispatch's config pass from the thread pool
        # (1 of 25 four-variant compiles hung forever); on 2 cores the serial
        # compile was no slower (1.08 s vs 1.14 s mean).
        "--mlir-disable-threading",
        f"--iree-hal-dump-executable-configurations-to={dump_dir / CONFIG_DUMP}",
        f"--mlir-print-ir-after={LOWERING_PASS}",
        f"--mlir-print-ir-tree-dir={dump_dir / LOWERED_DUMP}",
    ]


# --- the guard -----------------------------------------------------------------------------

_ALIAS = re.compile(r"^(#[\w.$-]+) = (.*)$", re.MULTILINE)
_FUNC = re.compile(r"^\s*func\.func @([\w.$-]+)\([^)]*\)[^{\n]*?attributes \{(.*)\} \{\s*$", re.M)
_SPEC = re.compile(r"codegen_spec = @([\w.$-]+)")
_ERROR = re.compile(r"(^|:\s*)error:\s", re.MULTILINE)


def _functions(text: str) -> dict[str, str]:
    """Each ``func.func`` of a dump with its attribute text, aliases (``#translation``) expanded."""
    aliases = dict(_ALIAS.findall(text))
    found: dict[str, str] = {}
    for name, attrs in _FUNC.findall(text):
        for alias in sorted(aliases, key=len, reverse=True):
            attrs = re.sub(re.escape(alias) + r"\b", lambda _m, a=alias: aliases[a], attrs)
        found[name] = attrs
    return found


def _read_dumps(directory: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.rglob("*.mlir")):
        found.update(_functions(path.read_text(encoding="utf-8", errors="replace")))
    return found


def verify_td_build(log: str, dump_dir: Path, expected_variants: Iterable[str]) -> list[str]:
    """Problems that show a variant was not built by its own sequence; empty when all were.

    Three independent proofs: no ``error:`` in the log (a library that fails
    to load under ``FILE@ENTRY`` is only an error line, and iree-compile exits
    0); the configuration dump names ``codegen_spec = @<variant>`` on a
    dispatch (an op that lost its ``compilation_info`` compiles with IREE's
    default pipeline, exit 0); and the IR right after IREE's transform
    lowering carries ``no_pipeline`` and the ``dcmlir.td_sequence`` mark of
    that same variant (its sequence ran to its last step on that dispatch).
    """
    problems: list[str] = []
    errors = [line for line in log.splitlines() if _ERROR.search(line)]
    if errors:
        problems.append(f"iree-compile reported {len(errors)} error(s), first: {errors[0].strip()}")
    configured = _read_dumps(Path(dump_dir) / CONFIG_DUMP)
    lowered = _read_dumps(Path(dump_dir) / LOWERED_DUMP)
    built_by: dict[str, list[str]] = {}
    for function, attrs in sorted(configured.items()):
        spec = _SPEC.search(attrs)
        if spec is None or TD_PIPELINE not in attrs:
            continue  # a dispatch no variant claimed (a default-pipeline fallback branch, say)
        symbol = spec.group(1)
        if not symbol.startswith(SEQUENCE_PREFIX):
            problems.append(f"dispatch {function} asks for @{symbol}, not a dcmlir sequence")
            continue
        sequence = symbol.removeprefix(SEQUENCE_PREFIX)
        after = lowered.get(function)
        mark = f'{SEQUENCE_ATTR} = "{sequence}"'
        if after is None:
            problems.append(f"@{sequence}: dispatch {function} has no IR after {LOWERING_PASS}")
        elif NO_PIPELINE not in after:
            problems.append(f"@{sequence}: dispatch {function} was not marked no_pipeline")
        elif mark not in after:
            problems.append(f"@{sequence}: dispatch {function} lacks the mark {mark}")
        else:
            built_by.setdefault(sequence, []).append(function)
    for sequence in expected_variants:
        if sequence in built_by:
            continue
        if not configured:
            problems.append(f"@{sequence}: no executable configuration was dumped")
        else:
            problems.append(f"@{sequence}: no dispatch was built by this sequence")
    return problems


# --- build ---------------------------------------------------------------------------------


def build_td(
    mlir_text: str,
    variants: Sequence[tuple[str, Workload, TileLevels] | TdVariant],
    target: str = "llvm-cpu",
    *,
    cache: BuildCache | None = None,
    use_cache: bool = True,
    timeout: float | None = None,
    keep_dir: Path | None = None,
    library_text: str | None = None,
    compiler: Compiler = run_compile,
) -> Build:
    """Compile ``mlir_text`` (ops annotated by :func:`annotate_for_library`) with the library.

    One ``iree-compile`` call for all variants. Raises :class:`RouteError` when
    the compile fails or the guard finds a variant not built by its sequence.
    ``library_text`` overrides the generated library (to test the guard);
    ``keep_dir`` keeps the library and dumps there instead of a temporary folder.
    A cached build is one that passed the guard when it was stored.
    """
    if target != "llvm-cpu":
        raise ValueError(f"the transform-library route targets llvm-cpu only, not '{target}'")
    chosen = normalize_variants(variants)
    library = library_text if library_text is not None else codegen_library(chosen)
    names = [v.name for v in chosen]
    base = target_flags(target)
    digest = hashlib.sha256(library.encode()).hexdigest()
    key = cache_key(mlir_text, [*base, f"td-library-sha256={digest}"])
    store = (cache if cache is not None else default_cache()) if use_cache else None
    if store is not None:
        found = store.load(key)
        if found is not None:
            return Build(found[0], key, cached=True, seconds=0.0, log=found[1])
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        build = _compile(mlir_text, library, names, base, keep_dir, key, timeout, compiler)
    else:
        with scratch_directory("td") as scratch:
            build = _compile(mlir_text, library, names, base, Path(scratch), key, timeout, compiler)
    if store is not None:
        store.store(key, build.vmfb, build.log)
    return build


def _compile(
    mlir_text: str,
    library: str,
    names: Sequence[str],
    base: Sequence[str],
    workdir: Path,
    key: str,
    timeout: float | None,
    compiler: Compiler,
) -> Build:
    library_path = workdir / LIBRARY_FILE
    library_path.write_text(library, encoding="utf-8")
    dump_dir = workdir / "dumps"
    flags = [*base, *td_flags(library_path, dump_dir)]
    start = time.perf_counter()
    try:
        result = compiler(mlir_text, flags, timeout)
    except subprocess.TimeoutExpired:
        raise RouteError(f"iree-compile ran past the {timeout:g} s time limit") from None
    seconds = time.perf_counter() - start
    log_text = result.log.replace(f"{STDIN_NAME}:", "<input>:")
    problems = verify_td_build(log_text, dump_dir, names)
    if result.returncode != 0 or not result.output:
        problems.insert(0, f"iree-compile failed with exit code {result.returncode}")
    if problems:
        raise RouteError("; ".join(problems[:6]) + _more(problems, 6), log_text)
    return Build(result.output, key, cached=False, seconds=seconds, log=log_text)


def _more(items: Sequence[str], shown: int) -> str:
    return f"; ... ({len(items) - shown} more)" if len(items) > shown else ""
