"""``dcmlir.compile``: the last step of the data flow, plan -> dispatch -> IREE.

The plan's ``scf.if`` dispatch is emitted into the module (at the level the plan was
tuned at: a plan tuned at the global-optimization level lowers the module there first
and resumes IREE from it) and the result is built with IREE's own flags and cache.
:func:`compile_default` is IREE's own build of the same module: the baseline a
dispatch is timed against.
"""

from __future__ import annotations

import dataclasses
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dcmlir.build.code_layout import code_flags
from dcmlir.build.compiler import Build, BuildError, build
from dcmlir.codegen.mmt4d import MMT4D_KERNEL_FLAGS
from dcmlir.codegen.packed import DATA_TILING_FLAGS, ENCODED_KERNEL_FLAGS
from dcmlir.dispatch import Plan, PlanError, PlannedKernel, WorkloadPlan
from dcmlir.driver.loading import (
    GLOBAL_OPT,
    TuneError,
    add_module_attributes,
    check_writable,
    lower_to_global_optimization,
    read_source,
)
from dcmlir.files import write_atomic
from dcmlir.ir.diagnostics import DiagnosticEngine
from dcmlir.ir.iree import versions
from dcmlir.ir.mlir import ir
from dcmlir.ir.pass_base import PassContext, PassFailure
from dcmlir.passes.emit_dispatch import emit_dispatch
from dcmlir.passes.split_entry import EntrySplit, dcmlir_ranges, split_entry
from dcmlir.space import DefaultCandidate, Mmt4dCandidate, PackedFamily, PackedWeightCandidate
from dcmlir.target import CpuTarget, Target, target_from_name
from dcmlir.workload import dynamic_linalg_ops


@dataclass
class CompileResult:
    vmfb: bytes
    mlir: str
    dispatched: int  # ops rewritten into a dispatch
    split: EntrySplit | None = None  # where the entry calls IREE's data tiling instead
    # workload key -> the plan's kernels IREE rejected in this module, run as its default
    rejected: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    data_tiled: bool = False  # built with IREE's data tiling (split entry, explicit kernels)
    # the iree-compile flags beyond the target's that built ``vmfb`` from ``mlir``: the
    # dispatch's IR needs them (an encoded or split module does not build without its flags)
    flags: tuple[str, ...] = ()


def compile(
    input: str | Path,
    *,
    plan: str | Path | Plan,
    target: str | None = None,
    output: str | Path | None = None,
    emit_mlir: str | Path | None = None,
    allow_other_iree: bool = False,
    stream: IO[str] | None = None,
) -> CompileResult:
    """Emit ``plan``'s dispatch into ``input`` and compile it with IREE for the plan's target.

    A plan tuned at the global-optimization level lowers ``input`` there first and
    resumes IREE from it; ``emit_mlir`` then holds that level's IR with the dispatch.
    A plan tuned with another IREE is refused unless ``allow_other_iree``; one tuned
    on another CPU is used with a warning; a module without dynamic ops passes through.
    """
    stream = stream if stream is not None else sys.stderr
    check_writable(output, "-o")
    check_writable(emit_mlir, "--emit-mlir")
    try:
        loaded = plan if isinstance(plan, Plan) else Plan.load(plan)
    except PlanError as err:
        raise TuneError(str(err)) from None
    if target is not None and target != loaded.target.backend:
        raise TuneError(
            f"--target {target} but the plan was tuned for {loaded.target.backend} "
            f"({loaded.target_key}); tune again for {target}"
        )
    _check_plan_origin(loaded, str(plan), allow_other_iree, stream)
    rejected: dict[str, tuple[str, ...]] = {}
    source, text = read_source(input)
    original, flags = text, ()
    if loaded.level == GLOBAL_OPT:
        # checked after lowering: StableHLO, TOSA and torch input has no linalg op before
        lowered = _lowered(original, source, loaded, data_tiled=False)
        if not loaded.workloads or _has_dynamic_ops(lowered, source):
            text, flags = lowered, ("--compile-from=global-optimization",)
        else:
            loaded = _plan_not_used(loaded, source, stream)
    elif loaded.workloads and not _has_dynamic_ops(text, source):
        loaded = _plan_not_used(loaded, source, stream)
    # IREE's data tiling (for the entry's untouched copy, or for the ops around explicit
    # kernels) is set in its dispatch creation, after global optimization, so a lowered
    # module takes it too; where it cannot compile the module, it is compiled without it
    for with_data_tiling in (True, False):
        lowered_tiled = bool(flags) and with_data_tiling and _may_split(loaded)
        emitted = _lowered(original, source, loaded, data_tiled=True) if lowered_tiled else text
        mlir, dispatched, split = _emit(
            emitted, source, loaded, str(plan), with_data_tiling, stream
        )
        data_tiled = split is not None or (
            with_data_tiling and bool(dispatched) and _data_tiled_around(loaded)
        )
        if lowered_tiled and not data_tiled:
            continue  # lowered for data tiling, not split: the plain lowering is the module
        run_flags = flags + _kernel_flags(loaded, bool(dispatched), data_tiled)
        run_flags += code_flags(loaded.target)
        try:
            built = build(
                mlir, loaded.target, run_flags, source_name=source, placement=loaded.placement
            )
        except BuildError as err:
            if data_tiled:
                first = next((line for line in str(err).splitlines() if "error" in line), "")
                print(
                    f"dcmlir: IREE's data tiling cannot compile {source} ({first.strip()}); "
                    + ("the entry is not split" if split else "compiled without it"),
                    file=stream,
                )
                continue
            mlir, dispatched, built, run_flags, rejected = _without_rejected_kernels(
                err, text, source, loaded, str(plan), flags, stream
            )
        if split is not None:
            print(f"dcmlir: entry split: {split.describe()}", file=stream)
        elif data_tiled:
            print(
                "dcmlir: the ops outside the plan's explicit mmt4d kernels compile with "
                "IREE's data tiling",
                file=stream,
            )
        break
    if emit_mlir is not None:
        _write(emit_mlir, mlir, "--emit-mlir")
    if output is not None:
        _write(output, built.vmfb, "-o")
    return CompileResult(built.vmfb, mlir, dispatched, split, rejected, data_tiled, run_flags)


def _data_tiled_around(plan: Plan) -> bool:
    """Whether the ops around the plan's explicit mmt4d kernels compile with IREE's data
    tiling: at the input level (measured there, design.md section 12); a plan at the
    global-optimization level runs them as it was tuned, data tiling for a split entry only."""
    return plan.runs(Mmt4dCandidate) and plan.level != GLOBAL_OPT


def _may_split(plan: Plan) -> bool:
    """Whether ``dcmlir-split-entry`` may split the plan's entry (it keeps it whole beside
    explicit mmt4d kernels): a lowered module is then lowered again for data tiling."""
    return not plan.runs(Mmt4dCandidate) and dcmlir_ranges(plan) is not None


def _lowered(text: str, source: str, plan: Plan, *, data_tiled: bool) -> str:
    """``text`` after IREE's global optimization, its executable targets set for the build:
    the ukernels off where an explicit mmt4d kernel runs (docs/design.md section 12), data
    tiling's mmt4d ukernels where the module is compiled with it. A lowered module carries
    its targets as attributes; a later compile's flags no longer change them."""
    if plan.runs(Mmt4dCandidate):
        targets: tuple[str, ...] = MMT4D_KERNEL_FLAGS
    else:
        targets = DATA_TILING_FLAGS[1:] if data_tiled else ()
    with_attributes = _with_module_attributes(text, source, plan.target)
    return lower_to_global_optimization(with_attributes, plan.target, source, targets)


def _plan_not_used(plan: Plan, source: str, stream: IO[str]) -> Plan:
    """Say that ``source`` has nothing the plan could dispatch; the empty plan to compile with."""
    print(
        f"dcmlir: {source} has no dynamic-shape linalg op: compiled as IREE compiles it,"
        " the plan is not used",
        file=stream,
    )
    return dataclasses.replace(plan, workloads=(), level="input")


def _emit(
    text: str, source: str, loaded: Plan, origin: str, split_entry_first: bool, stream: IO[str]
) -> tuple[str, int, EntrySplit | None]:
    """The module with the plan's dispatch: (its text, ops rewritten, the entry split)."""
    engine = DiagnosticEngine(source)
    split = None
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        ctx = PassContext(engine, stream)
        try:
            if split_entry_first:
                split = split_entry(ctx, module.operation, loaded)
            dispatched = emit_dispatch(ctx, module.operation, loaded, origin=origin)
        except PassFailure:
            raise TuneError(engine.first_error()) from None
        if loaded.level != GLOBAL_OPT:
            add_module_attributes(module, loaded.target)
        return str(module), dispatched, split


def rejected_kernels(input: str | Path, plan: Plan) -> dict[str, tuple[str, ...]]:
    """Each workload's kernels IREE cannot compile fused into the module (a kernel is timed
    as a module of its own op; in a model IREE fuses its consumers into it: data tiling on
    an attention batch matmul then meets the 32 KiB vector limit). What ``dcmlir tune``
    asks at its end; compiling here costs nothing later: :func:`compile` of the same plan
    finds the build in the cache."""
    if not any(not _is_default(k) for w in plan.workloads for k in w.kernels):
        return {}
    try:
        return compile(input, plan=plan, stream=io.StringIO()).rejected
    except TuneError:  # not even IREE's default compiles: compile will say so
        return {}


def _without_rejected_kernels(
    err: BuildError,
    text: str,
    source: str,
    plan: Plan,
    origin: str,
    flags: tuple[str, ...],
    stream: IO[str],
) -> tuple[str, int, Build, tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The dispatched module built with IREE's default in place of the kernels IREE
    cannot compile inside this module, saying which: (its text, ops rewritten, build, the
    flags it was built with, each such workload's key -> the kernels put back to the default).

    A kernel is built and timed alone when tuned; in a model IREE fuses its consumers
    into it, and some kernels then fail (data tiling on an attention batch matmul with
    two dynamic dims and its fused scale: "large vector sizes (32768 bytes)", the 2-layer
    encoder of ``dcmlir demo``). Every workload's kernels are first all put back to
    IREE's default (if that fails too, the module is the problem: ``err`` is raised);
    then each workload gets its kernels back, else its kernels but the packed family,
    kept where IREE compiles the module. At most 1 + 2 x workloads builds, only here.
    """
    tuned = [w.key for w in plan.workloads if any(not _is_default(k) for k in w.kernels)]
    first = next((line for line in str(err).splitlines() if "error" in line), "").strip()
    print(
        f"dcmlir: IREE could not compile the dispatched module ({first}); finding the"
        f" kernels it rejects ({len(tuned)} workloads, up to {1 + 2 * len(tuned)} builds)",
        file=stream,
    )
    try:
        best = _build_plan(text, source, _to_default(plan, {}), origin, flags)
    except BuildError:
        raise TuneError(f"IREE could not compile the dispatched module:\n{err}") from None
    kept: dict[str, bool] = {}  # workload key -> True: every kernel; False: packed dropped
    for key in tuned:
        for packed_too in (True, False):
            trial = {**kept, key: packed_too}
            candidate = _to_default(plan, trial)
            if candidate == _to_default(plan, kept):  # nothing but the packed family to drop
                break
            try:
                best = _build_plan(text, source, candidate, origin, flags)
            except BuildError:
                continue
            kept = trial
            break
    lost = [key for key in tuned if kept.get(key) is not True]
    final = _to_default(plan, kept)
    rejected = {
        key: tuple(
            kernel.candidate_key
            for kernel, now in zip(
                _workload(plan, key).kernels, _workload(final, key).kernels, strict=True
            )
            if kernel != now
        )
        for key in lost
    }
    if not lost:  # every workload's kernels compile when put back one by one
        return (*best, rejected)
    print(
        "dcmlir: warning: IREE could not compile "
        + ", ".join(f"workload {key}'s {'packed ' if key in kept else ''}kernels" for key in lost)
        + f" in {source} (they build alone, not fused into this module): IREE's default"
        " runs in their place",
        file=stream,
    )
    return (*best, rejected)


def _workload(plan: Plan, key: str) -> WorkloadPlan:
    return next(w for w in plan.workloads if w.key == key)


def _build_plan(
    text: str, source: str, plan: Plan, origin: str, flags: tuple[str, ...]
) -> tuple[str, int, Build, tuple[str, ...]]:
    """Emit ``plan``'s dispatch (no entry split) and build it: (text, ops rewritten, build,
    the flags it was built with)."""
    mlir, dispatched, _ = _emit(text, source, plan, origin, False, io.StringIO())
    run_flags = flags + _kernel_flags(plan, bool(dispatched), False) + code_flags(plan.target)
    return (
        mlir,
        dispatched,
        build(mlir, plan.target, run_flags, source_name=source, placement=plan.placement),
        run_flags,
    )


def _to_default(plan: Plan, kept: dict[str, bool]) -> Plan:
    """``plan`` with IREE's default in place of every kernel of the workloads not in
    ``kept``, and of the packed family of those kept with False (same tree, same indices)."""
    workloads = []
    for workload in plan.workloads:
        keep = kept.get(workload.key)
        kernels = tuple(
            kernel
            if keep or (keep is False and not _is_packed(kernel))
            else PlannedKernel(kernel.index, DefaultCandidate())
            for kernel in workload.kernels
        )
        exact = workload.exact if keep is not None else ()  # its builds are kernels too
        workloads.append(dataclasses.replace(workload, kernels=kernels, exact=exact))
    return dataclasses.replace(plan, workloads=tuple(workloads))


def _is_default(kernel: PlannedKernel) -> bool:
    return isinstance(kernel.candidate, DefaultCandidate)


def _is_packed(kernel: PlannedKernel) -> bool:
    return isinstance(kernel.candidate, PackedWeightCandidate)


def _kernel_flags(plan: Plan, dispatched: bool, data_tiled: bool) -> tuple[str, ...]:
    """The flags the dispatched module needs: IREE's data tiling for a split entry and
    around explicit kernels (``data_tiled``), its encodings for packed kernels, and no mmt4d
    ukernels where an explicit kernel runs (a tile no ukernel has would run the ukernel's
    generic loop, 50x slower).

    Around explicit kernels data tiling packs the other contractions (attention's batch
    matmuls), and IREE's default in a plan (where no kernel was proven) is its data
    tiling, not its default lowering, several times slower on a projection; the model's
    time is otherwise within noise of the encodings alone (a 2-layer GPT-2 with explicit
    projections: 0.81-0.83 against 0.81-0.87 of data tiling's, two runs of
    ``benchmarks/explicit_in_model.py``; docs/design.md section 12)."""
    if data_tiled:
        flags = DATA_TILING_FLAGS
    elif dispatched and plan.runs(PackedFamily):
        flags = ENCODED_KERNEL_FLAGS
    else:
        flags = ()
    if not (dispatched or data_tiled) or not plan.runs(Mmt4dCandidate):
        return flags
    kept = tuple(f for f in flags if not f.startswith("--iree-llvmcpu-enable-ukernels="))
    return kept + MMT4D_KERNEL_FLAGS


def _write(path: str | Path, data: bytes | str, option: str) -> None:
    """Write an output whole; a full disk or an unwritable place is one TuneError line."""
    try:
        write_atomic(path, data)
    except OSError as err:
        raise TuneError(f"{option} {path}: cannot write: {err.strerror or err}") from None


def compile_default(
    input: str | Path,
    target: str | Target = "llvm-cpu",
    *,
    arch: str | None = None,
    flags: tuple[str, ...] = (),
) -> bytes:
    """IREE's own compilation of ``input`` for ``target`` (with ``flags``: IREE's data tiling's
    :data:`~dcmlir.codegen.packed.DATA_TILING_FLAGS`): the baseline a dispatch is timed
    against (same flags, same cache)."""
    target_object = target if not isinstance(target, str) else target_from_name(target, arch)
    source, text = read_source(input)
    try:
        module = _with_module_attributes(text, source, target_object)
        return build(module, target_object, flags).vmfb
    except BuildError as err:
        raise TuneError(f"IREE could not compile {source}:\n{err}") from None


def _check_plan_origin(plan: Plan, name: str, allow_other_iree: bool, stream: IO[str]) -> None:
    """Another IREE: refused (its configs may mean something else); another CPU: a warning."""
    current = versions()["iree"]
    if plan.iree_version != current and not allow_other_iree:
        raise TuneError(
            f"plan {name} was tuned with IREE {plan.iree_version}, this is IREE {current}:"
            " its kernels were measured with another compiler; tune again (dcmlir tune),"
            " or pass --allow-other-iree to use it anyway"
        )
    if not isinstance(plan.target, CpuTarget) or plan.target.target_cpu != "host":
        return
    here = CpuTarget()
    if here.key() != plan.target.key():
        print(
            f"dcmlir: warning: plan {name} was tuned on {plan.target.describe()}; this host is"
            f" {here.describe()}: the dispatch computes the same results, but its kernels may"
            " not be the fastest here (tune again on this host)",
            file=stream,
        )


def _has_dynamic_ops(text: str, source: str) -> bool:
    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        return bool(dynamic_linalg_ops(module.operation))


def _with_module_attributes(text: str, source: str, target: Target) -> str:
    """The module text with the target's module attributes (an explicit CUDA target)."""
    if not target.module_attributes():
        return text
    engine = DiagnosticEngine(source)
    with ir.Context() as context, engine.capture(context):
        module = engine.parse(text)
        if module is None:
            raise TuneError(engine.first_error())
        add_module_attributes(module, target)
        return str(module)
