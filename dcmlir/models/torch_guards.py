"""torch.export's refusals as one line: a guard on a dynamic dim's range, what bounds it.

torch.export refuses a ``Dim`` range the model's code cannot take ("Constraints
violated (seq)! ... satisfy the generated guard ... <= 128"), e.g. BERT slicing a
position buffer of ``max_position_embeddings`` rows. :func:`explain_export_failure`
reads the guard and torch's suggested fix from the message, finds the model's size
that has the guard's number (a config entry or position buffer), and says which range
works and what to raise instead. Needs no torch import of its own (it reads the model).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the model is only read: modules, config, buffers
    from torch import nn

__all__ = ["ExportGuardError", "TorchImportError", "explain_export_failure", "first_line"]


class TorchImportError(RuntimeError):
    """A model that cannot be exported, imported or lowered; the message says which step."""


def first_line(err: BaseException) -> str:
    """torch's errors run to pages of advice; the first line names the problem."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class ExportGuardError(TorchImportError):
    """torch.export refused a dynamic dim's range: the model's code bounds it (a guard).

    ``allowed``: the part of the asked range the model takes (None if torch gave none);
    ``bound_by``: what sets the bound when it could be found (``max_position_embeddings =
    128``, a position buffer); ``raise_what``: the size to raise instead. :meth:`explain`
    words it for a command line option.
    """

    def __init__(
        self,
        dim: str,
        asked: tuple[int, int],
        guard: str,
        allowed: tuple[int, int] | None,
        bound_by: str | None = None,
        raise_what: str | None = None,
    ) -> None:
        self.dim, self.asked, self.guard, self.allowed = dim, asked, guard, allowed
        self.bound_by, self.raise_what = bound_by, raise_what
        super().__init__(self.explain(f"the range of '{dim}'"))

    def explain(self, option: str, raise_hint: str | None = None) -> str:
        """One line: the guard, what bounds it, and ``option``'s range that works."""
        lo, hi = self.asked
        text = f"torch.export refused {self.dim} in {lo}..{hi}: the model needs {self.guard}"
        if self.bound_by:
            text += f" ({self.bound_by})"
        if self.allowed is None:
            return text
        fix = f"lower {option} to {self.allowed[0]}:{self.allowed[1]}"
        if self.allowed[0] > lo:
            fix = f"set {option} to {self.allowed[0]}:{self.allowed[1]}"
        if self.raise_what:
            fix += f" or raise {self.raise_what}" + (f" ({raise_hint})" if raise_hint else "")
        return f"{text}; {fix}"


_CONSTANT = re.compile(r"specialized it to be a constant \((\d+)\)")
_GUARD = re.compile(r"satisfy the generated guard (.+)$", re.MULTILINE)
_FIX = re.compile(r"^\s*(\w+) = Dim\('\w+'(?:, min=(\d+))?(?:, max=(\d+))?\)\s*$", re.MULTILINE)
_UPPER = re.compile(r"(<=|<|!=)\s*(\d+)")
_SIZE_WORDS = ("position", "ctx", "seq", "len")
_SIZE_EXPR = re.compile(r"L\[[^\]]*\]\.size\(\)\[\d+\]")


def explain_export_failure(
    err: BaseException, model: nn.Module, dynamic_dims: Mapping[str, tuple[int, int]]
) -> TorchImportError:
    """torch.export's error as one line; a guard on a dynamic dim's range says what bounds
    it (a config size or position buffer of the model, when one has the guard's number)."""
    message = str(err)
    constant = _CONSTANT.search(message)
    if constant and int(constant[1]) <= 1:
        return TorchImportError(
            f"torch.export failed: it fixed a dynamic dim to the example's size {constant[1]}: "
            "give example inputs whose dynamic dims are 2 or more (torch fixes sizes 0 and 1)"
        )
    if constant:
        return TorchImportError(
            f"torch.export failed: the model fixes a dim marked dynamic to {constant[1]}: "
            "check which input dims carry the dynamic dims"
        )
    guard = _GUARD.search(message)
    fixes = {m[1]: m for m in _FIX.finditer(message)}
    name = next((n for n in fixes if n in dynamic_dims), None)
    if name is None and len(dynamic_dims) == 1 and guard:
        (name,) = dynamic_dims
    if name is None or guard is None:
        return TorchImportError(f"torch.export failed: {first_line(err)}")
    lo, hi = dynamic_dims[name]
    # L['input_ids'].size()[1] -> seq; torch's own "2 <= seq" (it fixes sizes 0 and 1) goes
    guard_text = _SIZE_EXPR.sub(name, guard[1].strip())
    guard_text = re.sub(rf"^2 <= {re.escape(name)} and ", "", guard_text)
    uppers = [(op, int(n)) for op, n in _UPPER.findall(guard_text)]
    fix = fixes.get(name)
    new_lo = max(lo, int(fix[2])) if fix and fix[2] else lo
    if fix and fix[3]:
        new_hi = min(hi, int(fix[3]))
    else:
        new_hi = min([hi, *(n - (op != "<=") for op, n in uppers)])
    allowed = (new_lo, new_hi) if new_lo <= new_hi and (new_lo, new_hi) != (lo, hi) else None
    bound = uppers[-1][1] if uppers else new_hi
    bound_by, raise_what = _size_named(model, bound)
    return ExportGuardError(name, (lo, hi), guard_text, allowed, bound_by, raise_what)


def _size_named(model: nn.Module, size: int) -> tuple[str | None, str | None]:
    """A config entry (``max_position_embeddings``) or position buffer of ``size``, if any."""
    for module in model.modules():
        config = getattr(module, "config", None)
        items = config.to_dict().items() if hasattr(config, "to_dict") else ()
        for key, value in items:
            if value == size and isinstance(value, int) and any(w in key for w in _SIZE_WORDS):
                table = ", the position table's rows" if "position" in key else ""
                return f"{key} = {size}{table}", key
    for key, tensor in [*model.named_buffers(), *model.named_parameters()]:
        if "pos" in key and size in tensor.shape:
            return f"'{key}' has {size} positions", f"the size of '{key}'"
    return None, None
