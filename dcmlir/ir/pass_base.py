"""What a dcmlir pass is: a small frozen dataclass with a kebab-case name.

The fields of a pass are its options. They are written in a pipeline as
``name{key=value key2=v1,v2}`` (MLIR's syntax) and :meth:`ModulePass.spec`
writes them back the same way, so a pass and its pipeline text round-trip.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar, Self

from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.mlir import ir


class PassOptionError(ValueError):
    """A pass option that does not parse; the message names the option and the form."""


class PassFailure(Exception):
    """Raised by a pass to stop the pipeline after emitting an error diagnostic."""


@dataclass
class PassContext:
    """What a pass may touch besides the IR: diagnostics and the driver's stdout."""

    diagnostics: DiagnosticEngine
    stdout: IO[str]

    def remark(self, where: ir.Location | ir.Operation | ir.OpView, message: str) -> None:
        self.diagnostics.remark(where, message)

    def warning(self, where: ir.Location | ir.Operation | ir.OpView, message: str) -> None:
        self.diagnostics.warning(where, message)

    def fail(self, where: ir.Location | ir.Operation | ir.OpView, message: str) -> PassFailure:
        """Emit an error at ``where`` and return the exception to raise."""
        self.diagnostics.error(where, message)
        return PassFailure(message)


def option(default: Any, help: str) -> Any:
    """Declare a pass option: its default and the one line ``--list-passes`` shows."""
    if isinstance(default, list | dict | set):
        raise TypeError("pass options are immutable: use a tuple")
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ModulePass(ABC):
    """Base of every dcmlir pass. Subclasses set ``name`` and ``summary``."""

    name: ClassVar[str]
    summary: ClassVar[str]

    @abstractmethod
    def apply(self, ctx: PassContext, module: ir.Operation) -> None:
        """Rewrite or analyse ``module`` (a ``builtin.module``) in place."""

    # -- options -----------------------------------------------------------
    @classmethod
    def option_fields(cls) -> list[dataclasses.Field[Any]]:
        return list(dataclasses.fields(cls))

    @classmethod
    def option_help(cls) -> list[tuple[str, str, str, str]]:
        """(option, type, default, help) rows for ``--list-passes``."""
        hints = typing.get_type_hints(cls)
        return [
            (
                _kebab(f.name),
                _type_name(hints[f.name]),
                _render(f.default),
                f.metadata.get("help", ""),
            )
            for f in cls.option_fields()
        ]

    @classmethod
    def from_options(cls, options: dict[str, str | None]) -> Self:
        """Build the pass from ``{option: text}``; unknown or malformed options raise."""
        hints = typing.get_type_hints(cls)
        by_option = {_kebab(f.name): f for f in cls.option_fields()}
        values: dict[str, Any] = {}
        for key, text in options.items():
            known = by_option.get(key)
            if known is None:
                accepted = ", ".join(sorted(by_option)) or "none"
                raise PassOptionError(
                    f"pass '{cls.name}' has no option '{key}' (options: {accepted})"
                )
            if text is None:  # a bare flag: only booleans may be written that way
                if hints[known.name] is not bool:
                    raise PassOptionError(
                        f"pass '{cls.name}': option '{key}' needs a value: "
                        f"{key}=<{_type_name(hints[known.name])}>"
                    )
                text = "true"
            try:
                values[known.name] = _parse_value(hints[known.name], text)
            except ValueError as err:
                raise PassOptionError(
                    f"pass '{cls.name}': bad value '{text}' for option '{key}': "
                    f"expected {_type_name(hints[known.name])} ({err})"
                ) from None
        try:
            return cls(**values)
        except ValueError as err:
            raise PassOptionError(f"pass '{cls.name}': {err}") from None

    def spec(self) -> str:
        """This pass as pipeline text: ``name{opt=value ...}`` with non-default options."""
        parts = []
        for f in self.option_fields():
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{_kebab(f.name)}={_render(value)}")
        return f"{self.name}{{{' '.join(parts)}}}" if parts else self.name


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is tuple:
        (inner, _ellipsis) = typing.get_args(hint)
        return f"list of {_type_name(inner)}"
    if _is_optional(hint):
        return _type_name(_optional_inner(hint))
    return {int: "int", float: "float", bool: "bool", str: "string"}.get(hint, str(hint))


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(hint)
    )


def _optional_inner(hint: Any) -> Any:
    return next(arg for arg in typing.get_args(hint) if arg is not type(None))


def _parse_value(hint: Any, text: str) -> Any:
    if _is_optional(hint):
        return None if text == "" else _parse_value(_optional_inner(hint), text)
    if typing.get_origin(hint) is tuple:
        (inner, _ellipsis) = typing.get_args(hint)
        items = [item.strip() for item in _split_list(text)]
        return tuple(_parse_value(inner, item) for item in items if item)
    if hint is bool:
        lowered = text.lower()
        if lowered in ("", "true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError("use true or false")
    if hint is int:
        return int(text)
    if hint is float:
        return float(text)
    if hint is str:
        return _unquote(text)
    raise ValueError(f"unsupported option type {hint}")


def _split_list(text: str) -> list[str]:
    """Split ``a,b,c`` at commas that are not inside quotes or brackets."""
    items, depth, quote, start = [], 0, False, 0
    for index, char in enumerate(text):
        if char == '"':
            quote = not quote
        elif not quote and char in "[{(":
            depth += 1
        elif not quote and char in "]})":
            depth -= 1
        elif not quote and depth == 0 and char == ",":
            items.append(text[start:index])
            start = index + 1
    items.append(text[start:])
    return items


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


_BARE = re.compile(r"^[A-Za-z0-9_./:+\-=]*$")


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(_render(item) for item in value)
    if isinstance(value, str) and not _BARE.match(value):
        return f'"{value}"'
    return str(value)
