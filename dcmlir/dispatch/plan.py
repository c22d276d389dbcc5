"""The tuning plan: what the tuner decided, per workload, in one versioned JSON file.

A plan is the hand-off between tuning (slow, measured) and dispatch emission
(fast, repeatable): for each workload of one module it lists the kernels the
selection kept, the decision tree that picks one from the dynamic dim
values, and, for every training shape, the chosen kernel with its predicted
and measured time, so a later reader can see why. ``dcmlir-emit-dispatch``
reads it; ``docs/plan.md`` documents the format. One workload's part is a
:class:`~dcmlir.dispatch.workload_plan.WorkloadPlan`.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcmlir.build.code_layout import LONGEST
from dcmlir.dispatch.json_fields import get_field, pretty_json
from dcmlir.dispatch.workload_plan import WorkloadPlan
from dcmlir.files import write_atomic
from dcmlir.ir.iree import versions
from dcmlir.target import Target, target_from_json

__all__ = ["LEVELS", "PLAN_FORMAT", "Plan", "PlanError"]

PLAN_FORMAT = 1
"""The format this dcmlir writes and reads; bumped on any incompatible change."""

LEVELS = ("input", "global-optimization")
"""Where in IREE's pipeline the plan's workloads were found and its dispatch is emitted:
the module as given (``input``), or the module after ``iree-compile
--compile-to=global-optimization`` (the forms codegen sees: folded transposes, fused
epilogues), compiled on with ``--compile-from=global-optimization``."""


class PlanError(ValueError):
    """A plan that cannot be read or does not hold together; the message names the file."""


# --- the file --------------------------------------------------------------------------------


def _iree_version() -> str:
    return versions()["iree"]


def _dcmlir_version() -> str:
    return versions()["dcmlir"]


@dataclass(frozen=True)
class Plan:
    """Every workload plan of one module for one target."""

    target: Target
    source: str
    workloads: tuple[WorkloadPlan, ...]
    iree_version: str = field(default_factory=_iree_version)
    dcmlir_version: str = field(default_factory=_dcmlir_version)
    level: str = "input"
    predicted: bool = False
    """Kernels chosen by the offline model (no GPU timed them): ``"predicted": true``."""
    device: str | None = None
    """The IREE runtime device the kernels were timed on (``local-sync``, ``local-task``,
    ``cuda``); None in plans written before dcmlir recorded it."""
    threads: int | None = None
    """The threads they were timed with (1 on ``local-sync``)."""
    placement: int | None = None
    """Where the compiled module's code lands (:mod:`dcmlir.build.code_layout`), the fastest
    of those timed after tuning; None: compiled as IREE compiles a module from stdin."""

    def __post_init__(self) -> None:
        if not isinstance(self.predicted, bool):
            raise ValueError(f"predicted={self.predicted!r} must be true or false")
        if self.threads is not None and (isinstance(self.threads, bool) or self.threads < 1):
            raise ValueError(f"threads={self.threads!r} must be a whole number >= 1")
        if self.placement is not None and not 0 <= self.placement <= LONGEST:
            raise ValueError(f"placement={self.placement!r} must be in 0..{LONGEST}")
        if self.level not in LEVELS:
            raise ValueError(f"level '{self.level}' is not one of {', '.join(LEVELS)}")
        keys = [w.key for w in self.workloads]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"workload keys appear more than once: {', '.join(duplicates)}")

    @property
    def target_key(self) -> str:
        return self.target.key()

    def keys(self) -> list[str]:
        return [w.key for w in self.workloads]

    def runs(self, kind: type | types.UnionType) -> bool:
        """Whether a kernel of any workload's plan is a candidate of ``kind``."""
        return any(workload.runs(kind) for workload in self.workloads)

    def for_workload(self, key: str) -> WorkloadPlan | None:
        """The plan of the workload with structural key ``key``; None if it has none."""
        return next((w for w in self.workloads if w.key == key), None)

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "source": self.source,
            "target_key": self.target_key,
            "target": self.target.to_json(),
            "iree_version": self.iree_version,
            "dcmlir_version": self.dcmlir_version,
            "level": self.level,
        }
        if self.predicted:
            found["predicted"] = True
        if self.device is not None:
            found["device"] = self.device
        if self.threads is not None:
            found["threads"] = self.threads
        if self.placement is not None:
            found["placement"] = self.placement
        found["workloads"] = [w.to_json() for w in self.workloads]
        return found

    @classmethod
    def from_json(cls, obj: Any, origin: str = "<json>") -> Plan:
        """Decode a plan; any problem is a :class:`PlanError` naming ``origin`` (the file)."""
        try:
            return cls._decode(obj)
        except PlanError:
            raise
        except (TypeError, ValueError) as err:
            raise PlanError(f"plan {origin}: {err}") from None

    @classmethod
    def _decode(cls, obj: Any) -> Plan:
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        version = obj.get("format")
        if version != PLAN_FORMAT:
            raise ValueError(
                f"format {version!r} is not supported (this dcmlir reads format {PLAN_FORMAT})"
            )
        try:
            target = target_from_json(get_field(obj, "target", dict, "plan"))
        except (TypeError, ValueError) as err:
            raise ValueError(f"target: {err}") from None
        stated = get_field(obj, "target_key", str, "plan")
        if stated != target.key():
            raise ValueError(f"target_key '{stated}' does not match its target ('{target.key()}')")
        workloads = get_field(obj, "workloads", list, "plan")
        return cls(
            target=target,
            source=get_field(obj, "source", str, "plan"),
            workloads=tuple(
                WorkloadPlan.from_json(w, f"workloads[{i}]") for i, w in enumerate(workloads)
            ),
            iree_version=get_field(obj, "iree_version", str, "plan"),
            dcmlir_version=get_field(obj, "dcmlir_version", str, "plan"),
            level=get_field(obj, "level", str, "plan") if "level" in obj else "input",
            predicted=get_field(obj, "predicted", bool, "plan") if "predicted" in obj else False,
            device=get_field(obj, "device", str, "plan") if "device" in obj else None,
            threads=get_field(obj, "threads", int, "plan") if "threads" in obj else None,
            placement=get_field(obj, "placement", int, "plan") if "placement" in obj else None,
        )

    def device_mismatch(self, device: str, threads: int) -> str | None:
        """Why running on ``device`` with ``threads`` is not what the plan was tuned for,
        else None (also for a plan that does not say)."""
        if self.device is None or self.threads is None:
            return None
        if (self.device, self.threads) == (device, threads):
            return None
        return (
            f"the plan was tuned on {self.device} with {self.threads} thread(s), this runs on"
            f" {device} with {threads}: its kernels may not be the best here (tune again with"
            f" --device {device}" + (f" --threads {threads})" if device == "local-task" else ")")
        )

    def dumps(self) -> str:
        """Indented JSON whose small objects (a shape, a kernel) stay on one line."""
        return pretty_json(self.to_json()) + "\n"

    def save(self, path: str | Path) -> None:
        write_atomic(path, self.dumps())

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file; missing, not JSON, wrong format, bad fields: one PlanError."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise PlanError(f"plan {path}: cannot read: {err.strerror or err}") from None
        except UnicodeDecodeError:
            raise PlanError(
                f"plan {path}: not UTF-8 text (plans are UTF-8 JSON, as dcmlir tune writes them)"
            ) from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise PlanError(f"plan {path}: not JSON: {err}") from None
        except RecursionError:
            raise PlanError(f"plan {path}: nested too deeply to be a plan") from None
        return cls.from_json(obj, str(path))
