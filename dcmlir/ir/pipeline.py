"""Textual pass pipelines mixing dcmlir passes with upstream MLIR/IREE passes.

``dcmlir-annotate-ranges{range=1:128},canonicalize,func.func(cse)`` is split at
top-level commas; names in the dcmlir registry become Python passes, every
other element is handed to MLIR's own pipeline parser. The result runs as one
``PassManager``, so C++ and Python passes interleave in order.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from dcmlir.ir.mlir import ir, passmanager
from dcmlir.ir.pass_base import ModulePass, PassContext, PassFailure, PassOptionError


class PipelineError(ValueError):
    """A pipeline that does not parse: unknown pass, bad option, bad nesting."""


@dataclass(frozen=True)
class UpstreamPass:
    """A pipeline element MLIR's parser handles (``canonicalize``, ``func.func(cse)``)."""

    text: str

    def spec(self) -> str:
        return self.text


PipelineElement = ModulePass | UpstreamPass


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split at ``separator`` outside of ``{}``, ``()``, ``[]``, ``<>`` and quotes."""
    parts, depth, quote, start = [], 0, False, 0
    for index, char in enumerate(text):
        if char == '"':
            quote = not quote
        elif quote:
            continue
        elif char in "{([<":
            depth += 1
        elif char in "})]>":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{char}' at column {index + 1} of '{text}'")
        elif char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth != 0 or quote:
        raise PipelineError(f"unbalanced brackets or quotes in '{text}'")
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _strip_module_anchor(text: str) -> str:
    text = text.strip()
    for anchor in ("builtin.module(", "module("):
        if text.startswith(anchor) and text.endswith(")"):
            return text[len(anchor) : -1].strip()
    return text


def parse_options(text: str) -> dict[str, str | None]:
    """``key=value key2="a b" flag`` -> ``{key: value, key2: '"a b"', flag: None}``."""
    options: dict[str, str | None] = {}
    for item in split_top_level(text, " "):
        if not item:
            continue
        key, has_value, value = item.partition("=")
        if not key:
            raise PipelineError(f"bad option '{item}': expected key=value")
        options[key] = value if has_value else None
    return options


def parse_pipeline(
    text: str, registry: dict[str, Callable[[], type[ModulePass]]]
) -> list[PipelineElement]:
    """Parse pipeline text; dcmlir passes are instantiated, the rest validated by MLIR."""
    elements: list[PipelineElement] = []
    body = _strip_module_anchor(text)
    if not body:
        return elements
    for item in split_top_level(body):
        if not item:
            raise PipelineError(f"empty pass name in pipeline '{text}'")
        name, _, rest = item.partition("{")
        name = name.strip()
        if name in registry:
            if rest and not rest.rstrip().endswith("}"):
                raise PipelineError(f"bad options for '{name}': expected {name}{{key=value ...}}")
            options = parse_options(rest.rstrip()[:-1]) if rest else {}
            try:
                elements.append(registry[name]().from_options(options))
            except PassOptionError as err:
                raise PipelineError(str(err)) from None
            continue
        elements.append(_validated_upstream(item, registry))
    return elements


def _validated_upstream(
    item: str, registry: dict[str, Callable[[], type[ModulePass]]]
) -> UpstreamPass:
    try:
        passmanager.PassManager.parse(f"builtin.module({item})")
    except ValueError as err:
        detail = str(err).strip().splitlines()[0]
        known = ", ".join(sorted(registry))
        raise PipelineError(
            f"unknown pass or bad pipeline element '{item}' ({detail}); "
            f"dcmlir passes: {known}; upstream MLIR/IREE passes are accepted by name"
        ) from None
    return UpstreamPass(item)


def pipeline_spec(elements: list[PipelineElement]) -> str:
    """Pipeline text that :func:`parse_pipeline` reads back to equal elements."""
    return ",".join(element.spec() for element in elements)


def build_pass_manager(
    elements: list[PipelineElement], ctx: PassContext
) -> passmanager.PassManager:
    """One PassManager running the elements in order (needs an active ``ir.Context``)."""
    pm = passmanager.PassManager("builtin.module")
    for element in elements:
        if isinstance(element, UpstreamPass):
            pm.add(element.text)
        else:
            pm.add(_as_callable(element, ctx), element.name)
    return pm


def _as_callable(pass_: ModulePass, ctx: PassContext) -> Callable[[ir.Operation, object], None]:
    def run(op: ir.Operation, handle: object) -> None:
        try:
            pass_.apply(ctx, op)
        except PassFailure:
            handle.signal_pass_failure()  # type: ignore[attr-defined]
        except Exception as err:  # a bug in a pass: report it where the user looks
            traceback.print_exc(file=sys.stderr)
            ctx.diagnostics.error(op, f"internal error in pass '{pass_.name}': {err!r}")
            handle.signal_pass_failure()  # type: ignore[attr-defined]

    return run
