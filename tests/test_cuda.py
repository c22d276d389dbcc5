"""CUDA without a GPU: what compiles for sm_80 and sm_90, and what says it cannot run here.

Every candidate kind (IREE's default, unpromoted, promoted) on every workload
kind of the BERT benchmarks (dense matmul, transposed-B matmul, the two
attention batch matmuls) is compiled for sm_80 (IREE's target table) and
sm_90 (the explicit executable target) in one module per arch, and the PTX in
the ``.vmfb`` is read back: the arch, one kernel per candidate, the workgroup
size, shared memory exactly when promoted (and exactly the footprint the
limit check assumed), different code for different candidates. The final
dispatched module of a hand-built CUDA plan compiles for both archs and
reaches one kernel per planned micro-kernel plus IREE's default fallback.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import pytest
from helpers import CONTEXT, DENSE

import dcmlir
from dcmlir.codegen.kernel import kernel_function_text
from dcmlir.cost_model import (
    T4_PRIOR,
    CostModel,
    OccupancyCurve,
    occupancy,
    pad,
    parallel_units_for,
    work,
)
from dcmlir.dispatch import Plan, WorkloadPlan
from dcmlir.ir.iree import cuda_device_available, run_compile
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.measure.loop import TD_ON_CUDA, Measurer, NoDevice
from dcmlir.ptx import PtxEntry, ptx_entries, ptx_modules
from dcmlir.records import Record, RecordDatabase
from dcmlir.space import CudaCandidate, DefaultCandidate, cuda_space
from dcmlir.target import CudaTarget
from dcmlir.tools.cli import main
from dcmlir.workload import Workload, workloads

ARCHS = ("sm_80", "sm_90")

TRANSPOSED_B = """
func.func @transposed(%x: tensor<?x768xf32>, %w: tensor<3072x768xf32>) -> tensor<?x3072xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x3072xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%x, %w : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  return %r : tensor<?x3072xf32>
}
"""

ATTENTION_SCORES = """
func.func @scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>) -> tensor<12x?x?xf32> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c1 : tensor<12x?x64xf32>
  %s = tensor.dim %k, %c2 : tensor<12x64x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t, %s) : tensor<12x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}
"""

WORKLOAD_TEXTS = {
    "dense": DENSE,
    "transposed": TRANSPOSED_B,
    "scores": ATTENTION_SCORES,
    "context": CONTEXT,
}
"""The four workload kinds of the BERT benchmarks, by name."""

CANDIDATES = {
    "default": DefaultCandidate(),
    "plain": CudaCandidate(16, 128, 2, 8, 16),  # 128 threads, operands from global memory
    "promoted": CudaCandidate(32, 64, 4, 4, 8, promote=True),  # 128 threads, A and B tiles in smem
}
"""One candidate of each kind; both tiled ones lie in the space of every known GPU."""

_SHARED_GLOBAL = re.compile(r"addrspace\(3\) global (\[[^\n]*?\]) (?:undef|zeroinitializer|poison)")
_ELEMENT_BYTES = {"float": 4, "i32": 4, "half": 2, "bfloat": 2, "i8": 1, "double": 8}


def workload_of(text: str) -> Workload:
    with ir.Context():
        module = parse_module(text)
        (found,) = [w for _, w in workloads(module.operation, "test") if isinstance(w, Workload)]
    return found


WORKLOADS = {name: workload_of(text) for name, text in WORKLOAD_TEXTS.items()}


def kernel_module(target: CudaTarget, kernels: list[tuple[str, Workload, object]]) -> str:
    """One module, one function per (name, workload, candidate), for ``target``.

    Attributes are attached through the bindings, as :func:`dcmlir.codegen.kernel.kernel_module_text`
    does for a single workload.
    """
    body = "\n".join(kernel_function_text(workload, name) for name, workload, _ in kernels)
    with ir.Context():
        module = parse_module(target.wrap_module(body))
        for func, (_, workload, candidate) in zip(module.body.operations, kernels, strict=True):
            info = candidate.compilation_info(workload)  # type: ignore[attr-defined]
            if info is None:
                continue
            (op,) = [
                op.operation
                for op in func.regions[0].blocks[0].operations
                if op.operation.name.startswith("linalg.") and op.operation.name != "linalg.fill"
            ]
            op.attributes["compilation_info"] = ir.Attribute.parse(info)
        text = str(module)
    if not target.needs_explicit_target:
        assert "hal.device.targets" not in text  # the flag names the arch
    return text


def shared_bytes(linked_ll: str) -> int:
    """Bytes of the statically sized shared-memory buffers of one kernel's LLVM IR."""
    total = 0
    for array in _SHARED_GLOBAL.findall(linked_ll):
        element = array.replace("[", " ").replace("]", " ").split()[-1]
        total += math.prod(int(n) for n in re.findall(r"(\d+) x", array)) * _ELEMENT_BYTES[element]
    return total


def entry_of(entries: list[PtxEntry], function: str) -> PtxEntry:
    (found,) = [e for e in entries if e.name.startswith(f"{function}_dispatch_")]
    return found


def body_without_name(entry: PtxEntry) -> str:
    return entry.text.replace(entry.name, "KERNEL")


# --- every candidate kind, every workload kind, both archs ---------------------------------


@pytest.fixture(scope="module", params=ARCHS)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Twelve kernels (4 workload kinds x 3 candidate kinds) in one compile for one arch."""
    target = CudaTarget.from_overrides({"arch": request.param})
    kernels = [(f"{w}_{c}", WORKLOADS[w], CANDIDATES[c]) for w in WORKLOADS for c in CANDIDATES]
    for _, _, candidate in kernels:
        candidate.validate(target)
    dumps = tmp_path_factory.mktemp(f"cuda-{request.param}")
    result = run_compile(
        kernel_module(target, kernels),
        (
            *target.compile_flags(),
            "--iree-hal-link-executables=false",  # one executable (one PTX) per kernel
            f"--iree-hal-dump-executable-sources-to={dumps}",
            f"--iree-hal-dump-executable-intermediates-to={dumps}",
        ),
    )
    assert result.returncode == 0, result.log
    return target, kernels, result.output, dumps


def test_every_candidate_kind_compiles_to_ptx_for_the_arch(built) -> None:
    target, kernels, vmfb, dumps = built
    modules = ptx_modules(vmfb)
    assert len(modules) == len(kernels) == 12
    for text in modules:
        assert f".target {target.arch}" in text
        assert ".version " in text
    entries = [entry for text in modules for entry in ptx_entries(text)]
    assert len(entries) == len(kernels)
    for name, workload, candidate in kernels:
        entry = entry_of(entries, name)
        source = (dumps / f"module_{name}_dispatch_0.mlir").read_text()
        if isinstance(candidate, DefaultCandidate):
            assert "compilation_info" not in source  # IREE chose the config
            continue
        assert candidate.lowering_config(workload) in source
        assert entry.maxntid == candidate.workgroup_size()
        assert entry.uses_shared_memory == candidate.promote, name


def test_shared_memory_footprint_is_what_the_limit_check_assumed(built) -> None:
    """With and without promotion: the bytes the build allocates equal ``smem_bytes()``."""
    target, kernels, _, dumps = built
    for name, _, candidate in kernels:
        if isinstance(candidate, DefaultCandidate):
            continue
        (linked,) = dumps.glob(f"module_{name}_dispatch_0_*.linked.ll")
        allocated = shared_bytes(linked.read_text())
        assert allocated == candidate.smem_bytes(), name
        assert allocated <= target.smem_per_block_bytes
        assert (allocated > 0) == candidate.promote


def test_different_candidates_yield_different_ptx(built) -> None:
    _, _, vmfb, _ = built
    entries = [entry for text in ptx_modules(vmfb) for entry in ptx_entries(text)]
    for workload in WORKLOADS:
        bodies = {c: body_without_name(entry_of(entries, f"{workload}_{c}")) for c in CANDIDATES}
        assert len(set(bodies.values())) == len(CANDIDATES), workload


def test_sm_80_and_sm_90_differ_only_in_the_ptx_header(tmp_path: Path) -> None:
    """The explicit sm_90 target reaches the PTX (the code itself is plain SIMT f32 on both)."""
    by_arch = {}
    for arch in ARCHS:
        target = CudaTarget.from_overrides({"arch": arch})
        text = kernel_module(target, [("k", WORKLOADS["dense"], CANDIDATES["promoted"])])
        result = run_compile(text, target.compile_flags())
        assert result.returncode == 0, result.log
        (ptx,) = ptx_modules(result.output)
        by_arch[arch] = ptx
    assert ".target sm_80" in by_arch["sm_80"] and ".target sm_90" in by_arch["sm_90"]
    assert re.search(r"\.version 8\.\d", by_arch["sm_90"])  # PTX ISA 8.x: Hopper's


def test_ptx_modules_of_a_cpu_build_is_empty() -> None:
    from dcmlir.build.compiler import build

    assert ptx_modules(build(DENSE, "llvm-cpu").vmfb) == []


# --- the final dispatched module -------------------------------------------------------------

DISPATCHED_INPUT = DENSE + ATTENTION_SCORES
DENSE_KERNELS = [CudaCandidate(16, 128, 2, 8, 16), CudaCandidate(32, 128, 4, 4, 8, promote=True)]
SCORES_KERNELS = [CudaCandidate(32, 64, 4, 4, 8, promote=True), CudaCandidate(16, 64, 2, 8, 8)]


def cuda_plan(target: CudaTarget) -> Plan:
    """A plan as the tuner would write it, with kernels chosen by hand: small T -> kernel 0."""
    dense = workload_of(DENSE)
    scores = workload_of(ATTENTION_SCORES)
    for candidate in (*DENSE_KERNELS, *SCORES_KERNELS):
        candidate.validate(target)
    dense_shapes = [(t,) for t in (1, 8, 16, 24, 32, 48, 64, 96, 128)]
    scores_shapes = [(t, s) for t in (1, 16, 32, 64, 128) for s in (1, 64, 128)]

    def choose(shape: tuple[int, ...]) -> int:
        return 0 if shape[0] <= 32 else 1

    def costs(shape: tuple[int, ...]) -> list[float]:
        return [1.0, 2.0] if choose(shape) == 0 else [2.0, 1.0]

    plans = (
        WorkloadPlan.build(
            dense,
            DENSE_KERNELS,
            {s: choose(s) for s in dense_shapes},
            {s: costs(s) for s in dense_shapes},
            ranges={0: (1, 128)},
        ),
        WorkloadPlan.build(
            scores,
            SCORES_KERNELS,
            {s: choose(s) for s in scores_shapes},
            {s: costs(s) for s in scores_shapes},
            ranges={1: (1, 128), 2: (1, 128)},
        ),
    )
    return Plan(target, "dispatched.mlir", plans)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_dispatched_module_compiles_for_the_arch(arch: str, tmp_path: Path) -> None:
    target = CudaTarget.from_overrides({"arch": arch})
    source = tmp_path / "dispatched.mlir"
    source.write_text(DISPATCHED_INPUT)
    plan = cuda_plan(target)
    assert [p.tree.depth for p in plan.workloads] == [1, 1]
    result = dcmlir.compile(source, plan=plan, stream=io.StringIO())
    assert result.dispatched == 2
    assert result.mlir.count("scf.if") >= 4  # range check + tree split, per workload
    for workload, kernels in (("dense", DENSE_KERNELS), ("scores", SCORES_KERNELS)):
        for candidate in kernels:
            assert candidate.lowering_config(workload_of(WORKLOAD_TEXTS[workload])) in result.mlir
    modules = ptx_modules(result.vmfb)
    assert modules and all(f".target {arch}" in text for text in modules)
    entries = [entry for text in modules for entry in ptx_entries(text)]
    for function, kernels in (("dense", DENSE_KERNELS), ("scores", SCORES_KERNELS)):
        mine = [e for e in entries if e.name.startswith(f"{function}_dispatch_")]
        # one kernel per planned micro-kernel, plus IREE's default outside the range
        assert len(mine) == len(kernels) + 1, [e.name for e in mine]
        sizes = {e.maxntid for e in mine}
        assert {c.workgroup_size() for c in kernels} <= sizes
        assert len({body_without_name(e) for e in mine}) == len(mine)
        promoted = [e for e in mine if e.maxntid == kernels[0].workgroup_size()]
        assert any(e.uses_shared_memory for e in promoted) == kernels[0].promote


def test_cli_compiles_a_cuda_plan_without_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, plan_path, out = tmp_path / "in.mlir", tmp_path / "plan.json", tmp_path / "out.vmfb"
    source.write_text(DISPATCHED_INPUT)
    cuda_plan(CudaTarget.known("h100")).save(plan_path)
    code = main(
        ["compile", str(source), "--plan", str(plan_path), "--target", "cuda", "-o", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    assert "2 op(s) dispatched" in capsys.readouterr().out
    assert all(".target sm_90" in text for text in ptx_modules(out.read_bytes()))
    code = main(
        ["compile", str(source), "--plan", str(plan_path), "--target", "llvm-cpu", "-o", str(out)]
    )
    assert code == 1
    assert "the plan was tuned for cuda" in capsys.readouterr().err


# --- no GPU: one line, a clean exit --------------------------------------------------------

needs_no_gpu = pytest.mark.skipif(
    cuda_device_available(), reason="a CUDA GPU is present: the no-GPU path does not apply"
)


@needs_no_gpu
def test_the_library_tuner_stops_with_no_device_instead_of_looping(tmp_path: Path) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    db = tmp_path / "r.jsonl"
    with pytest.raises(NoDevice, match="no CUDA GPU present: timing sm_80 kernels needs one"):
        dcmlir.tune(
            source,
            dims=["1:128"],
            target="cuda",
            budget=8,
            db=db,
            output=tmp_path / "plan.json",
            level="input",
            stream=io.StringIO(),
            predict=False,  # the measured path (without it: the offline plan, test_cuda_tools)
        )
    assert RecordDatabase(db).load() == []  # stopped before building anything


@needs_no_gpu
def test_a_measurer_that_must_time_raises_no_device(tmp_path: Path) -> None:
    db = RecordDatabase(tmp_path / "r.jsonl", fsync=False)
    with (
        Measurer(WORKLOADS["dense"], CudaTarget(), db, stream=io.StringIO()) as measurer,
        pytest.raises(NoDevice),
    ):
        measurer.measure([DefaultCandidate()], [(4,)])


@pytest.mark.parametrize("command", ["tune", "measure"])
def test_the_td_route_on_cuda_is_one_clear_error(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "dense.mlir"
    source.write_text(DENSE)
    argv = [command, str(source), "--target", "cuda", "--route", "td", "--db", str(tmp_path / "r")]
    if command == "measure":
        argv += ["--shapes", "8"]
    assert main(argv) == 1
    assert capsys.readouterr().err.splitlines() == [f"dcmlir: error: {TD_ON_CUDA}"]
    from dcmlir.build.routes import TransformLibraryRoute

    with pytest.raises(ValueError, match="builds llvm-cpu only"):
        Measurer(
            WORKLOADS["dense"],
            CudaTarget(),
            RecordDatabase(tmp_path / "x"),
            route=TransformLibraryRoute(),
        )


# --- occupancy on the SMs, calibrated from CUDA records ------------------------------------


def cuda_records(
    workload: Workload,
    target: CudaTarget,
    candidates: list[CudaCandidate],
    shapes: list[tuple[int, ...]],
    curve: OccupancyCurve,
    rates: dict[str, float],
) -> list[Record]:
    """Timings as a GPU with this curve would give them (``runner: cuda``, as the measurer writes)."""
    units = parallel_units_for(target, "cuda")
    loops = [d.index for d in workload.dynamic_dims]
    found = []
    for index, candidate in enumerate(candidates):
        for number, shape in enumerate(shapes):
            adaptation = float(pad(workload, candidate, shape)) * occupancy(
                workload, candidate, shape, units, curve
            )
            flops = work(workload, shape)
            found.append(
                Record.measurement(
                    workload=workload,
                    target=target,
                    candidate=candidate,
                    route="config",
                    dims=dict(zip(loops, shape, strict=True)),
                    times=[flops / (rates[candidate.key()] * adaptation)],
                    extra={"runner": "cuda"},
                    iree_version="3.13.test",
                    timestamp=f"2026-01-01T00:{index:02d}:{number:02d}.000+00:00",
                )
            )
    return found


def test_occupancy_on_h100_counts_132_sms_and_calibrates_from_cuda_records() -> None:
    h100 = CudaTarget.known("h100")
    assert parallel_units_for(h100, "cuda") == 132
    workload = workload_of(ATTENTION_SCORES)
    candidates = [  # grids of 12 to 192 blocks at T = 8..128: both sides of the 132 SMs
        CudaCandidate(8, 128, 1, 8, 8),
        CudaCandidate(16, 64, 2, 8, 8),
        CudaCandidate(32, 32, 4, 4, 8),
        CudaCandidate(16, 128, 2, 8, 16),
    ]
    space = cuda_space(h100)
    assert all(candidate in space for candidate in candidates)
    shapes = [(t, t) for t in (8, 16, 24, 40, 56, 72, 88, 100, 112, 128)]
    rates = {c.key(): 2e11 * (1 + 0.5 * i) for i, c in enumerate(candidates)}
    truth = OccupancyCurve(below=3.0, above=5.0)
    model = CostModel(workload, h100, parallel_units_for(h100, "cuda"))
    assert model.curve == T4_PRIOR  # the prior until CUDA measurements say otherwise
    model.update(cuda_records(workload, h100, candidates, shapes, truth, rates))
    assert model.curve_calibrated == (True, True)
    assert model.curve.below == pytest.approx(3.0, rel=0.01)
    assert model.curve.above == pytest.approx(5.0, rel=0.01)
    for candidate in candidates:
        assert model.throughput(candidate) == pytest.approx(rates[candidate.key()], rel=0.02)


def test_the_cost_model_report_reads_cuda_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dcmlir.cost_model.__main__ import main as cost_model_main

    h100 = CudaTarget.known("h100")
    workload = workload_of(ATTENTION_SCORES)
    candidates = [CudaCandidate(16, 64, 2, 8, 8), CudaCandidate(32, 32, 4, 4, 8)]
    shapes = [(t, t) for t in (8, 24, 56, 100, 128)]
    rates = {c.key(): 3e11 for c in candidates}
    db = RecordDatabase(tmp_path / "cuda.jsonl", fsync=False)
    for record in cuda_records(workload, h100, candidates, shapes, T4_PRIOR, rates):
        db.append(record)
    module = tmp_path / "scores.mlir"
    module.write_text(ATTENTION_SCORES)
    assert cost_model_main([str(tmp_path / "cuda.jsonl"), "--mlir", str(module)]) == 0
    assert f"target {h100.key()}, P = 132" in capsys.readouterr().out
