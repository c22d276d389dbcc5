"""dcmlir's IR passes, one file each, registered by kebab-case name.

The registry maps a name to a loader so that listing passes or running one
imports only what is used.
"""

from __future__ import annotations

from collections.abc import Callable

from dcmlir.ir.pass_base import ModulePass


def _annotate_ranges() -> type[ModulePass]:
    from dcmlir.passes.annotate_ranges import AnnotateRangesPass

    return AnnotateRangesPass


def _drop_unit_batch() -> type[ModulePass]:
    from dcmlir.passes.drop_unit_batch import DropUnitBatchPass

    return DropUnitBatchPass


def _emit_dispatch() -> type[ModulePass]:
    from dcmlir.passes.emit_dispatch import EmitDispatchPass

    return EmitDispatchPass


def _list_workloads() -> type[ModulePass]:
    from dcmlir.passes.list_workloads import ListWorkloadsPass

    return ListWorkloadsPass


def _microkernel_tile() -> type[ModulePass]:
    from dcmlir.passes.microkernel_tile import MicrokernelTilePass

    return MicrokernelTilePass


def _split_entry() -> type[ModulePass]:
    from dcmlir.passes.split_entry import SplitEntryPass

    return SplitEntryPass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every dcmlir pass by name, loaded on first use."""
    return {
        "dcmlir-annotate-ranges": _annotate_ranges,
        "dcmlir-drop-unit-batch": _drop_unit_batch,
        "dcmlir-emit-dispatch": _emit_dispatch,
        "dcmlir-list-workloads": _list_workloads,
        "dcmlir-microkernel-tile": _microkernel_tile,
        "dcmlir-split-entry": _split_entry,
    }
