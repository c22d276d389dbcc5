"""Vendor-library peers: a workload's contraction computed by numpy (BLAS), PyTorch or ONNX Runtime.

They have the interface of :class:`dcmlir.ir.iree.LoadedFunction` (``prepare``,
``invoke``, ``to_host``) so the runner's worker times them
(:class:`~dcmlir.measure.variants.HostLibrary`) exactly like a compiled
function: inputs prepared once, only the library call in the timed path. The
contraction is an einsum spec (one letter per loop, as
:meth:`dcmlir.workload.Workload.einsum` writes it), run as a batched matmul on
views of the inputs (no copies), so the library's GEMM does the work. Both get
the thread count of the IREE device they are compared with (one for
``local-sync``, every core for ``local-task``). ONNX Runtime runs the
contraction as a one-op ONNX model (``MatMul``, with ``Transpose`` where the
layout needs it, every axis symbolic) in an ``InferenceSession`` with that
many intra-op threads, one inter-op thread, sequential execution.

A peer may hold operand 1 as a constant (``weight``, a model's weight): its
calls then take only the activation, and ONNX Runtime gets the weight as an
initializer (folded and laid out once, as IREE hoists a constant).
:class:`WeightedHost` builds such a peer in the measuring process.
:class:`HostCall` wraps any other Python function of host arrays the same way.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dcmlir.reference import MatmulForm

HOST_LIBRARIES = ("numpy", "torch", "onnxruntime")
ONNX_OPSET, ONNX_IR_VERSION = 17, 8  # what onnxruntime 1.17 and later all load


def device_threads(driver: str, threads: int | None = None) -> int:
    """Threads an IREE runtime device computes with: one for ``local-sync``, else ``threads``
    when given, else every core (``cuda``: the host threads that feed the GPU)."""
    if driver == "local-sync":
        return 1
    if threads is not None:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


class HostFunction:
    """One library's contraction with :class:`~dcmlir.ir.iree.LoadedFunction`'s interface.

    ``gpu``: torch's tensors live on the CUDA device (cuBLAS) and a call waits for
    the device, as an IREE call on the ``cuda`` driver does. ``weight``: operand 1
    as a constant, so calls take only the activation.
    """

    def __init__(
        self,
        library: str,
        spec: str,
        threads: int,
        *,
        gpu: bool = False,
        weight: np.ndarray | None = None,
    ) -> None:
        if library not in HOST_LIBRARIES:
            known = ", ".join(HOST_LIBRARIES)
            raise ValueError(f"unknown host library '{library}' (known: {known})")
        self.library = library
        self.form = MatmulForm.parse(spec)
        self.name = spec
        self.threads = threads
        self._torch: Any = None
        self._onnx: OnnxContraction | None = None
        if gpu and library != "torch":
            raise ValueError(f"{library} runs on the host only")
        self.device = "cuda" if gpu else "cpu"
        if library == "torch":
            import torch  # optional: only a torch baseline needs it

            torch.set_num_threads(threads)
            self._torch = torch
        elif library == "onnxruntime":
            self._onnx = OnnxContraction(spec, threads, weight)
        else:
            threadpool_limits(limits=threads)  # stays in force in this (worker) process
        self.weight = None if weight is None else self._operand(weight, self.form.b_axes)

    def _operand(self, array: np.ndarray, axes: tuple[int, ...]) -> Any:
        """The library's own copy of an input, as a view in batch-matmul form."""
        viewed = np.array(array, copy=True).transpose(axes)
        if self._torch is not None:
            return self._torch.from_numpy(viewed).to(self.device)
        return viewed

    def prepare(self, inputs: Sequence[np.ndarray]) -> Any:
        if self._onnx is not None:
            return self._onnx.prepare(inputs)
        a = self._operand(inputs[0], self.form.a_axes)
        b = self.weight if self.weight is not None else self._operand(inputs[1], self.form.b_axes)
        return a, b

    def invoke(self, prepared: Any) -> Any:
        if self._onnx is not None:
            return self._onnx.invoke(prepared)
        a, b = prepared
        result = a @ b
        if self.device == "cuda":
            self._torch.cuda.synchronize()
        return result

    def to_host(self, result: Any) -> list[np.ndarray]:
        if self._onnx is not None:
            return self._onnx.to_host(result)
        array = result.cpu().numpy() if self._torch is not None else result
        return [np.ascontiguousarray(array.transpose(self.form.out_axes))]


class OnnxContraction:
    """The contraction as an ONNX model run by ``onnxruntime.InferenceSession`` on the CPU.

    The session is made on the first input set (the model's element type is the
    inputs'), outside the timed calls; a call is one ``run_with_ort_values``.
    """

    def __init__(self, spec: str, threads: int, weight: np.ndarray | None = None) -> None:
        try:  # only here: importing onnxruntime writes $TMPDIR/.ses (its session id)
            import onnxruntime
            from onnx import helper, numpy_helper
        except ImportError:
            raise ImportError(
                "onnxruntime is not installed (pip install 'dcmlir[bench]')"
            ) from None
        self._ort, self._helper, self._numpy_helper = onnxruntime, helper, numpy_helper
        self.spec, self.threads, self.weight = spec, threads, weight
        self.form = MatmulForm.parse(spec)
        self._session: Any = None

    def model(self, dtype: np.dtype[Any]) -> bytes:
        """``c = out_perm(MatMul(a_perm(a), b_perm(b)))``; ``b`` an initializer given a weight."""
        inputs, _, out = self.spec.partition("->")
        a_axes, _, b_axes = inputs.partition(",")
        element = self._helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        values = [self._helper.make_tensor_value_info("a", element, list(a_axes))]
        initializers = []
        if self.weight is None:
            values.append(self._helper.make_tensor_value_info("b", element, list(b_axes)))
        else:
            initializers.append(self._numpy_helper.from_array(self.weight.astype(dtype), "b"))
        nodes: list[Any] = []

        def permuted(name: str, perm: tuple[int, ...], result: str) -> str:
            if perm == tuple(range(len(perm))):
                return name
            nodes.append(self._helper.make_node("Transpose", [name], [result], perm=list(perm)))
            return result

        a = permuted("a", self.form.a_axes, "a_mm")
        b = permuted("b", self.form.b_axes, "b_mm")
        last = self.form.out_axes == tuple(range(len(self.form.out_axes)))
        nodes.append(self._helper.make_node("MatMul", [a, b], ["c" if last else "c_mm"]))
        permuted("c_mm", self.form.out_axes, "c")
        graph = self._helper.make_graph(
            nodes,
            "dcmlir_contraction",
            values,
            [self._helper.make_tensor_value_info("c", element, list(out))],
            initializers,
        )
        made = self._helper.make_model(
            graph, opset_imports=[self._helper.make_opsetid("", ONNX_OPSET)]
        )
        made.ir_version = ONNX_IR_VERSION
        return bytes(made.SerializeToString())

    def _session_for(self, dtype: np.dtype[Any]) -> Any:
        if self._session is None:
            options = self._ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = self._ort.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            try:
                self._session = self._ort.InferenceSession(
                    self.model(dtype), options, providers=["CPUExecutionProvider"]
                )
            except Exception as err:  # onnxruntime's own exception types: one ValueError
                raise ValueError(f"onnxruntime: {str(err).splitlines()[0]}") from None
        return self._session

    def prepare(self, inputs: Sequence[np.ndarray]) -> tuple[Any, Any, list[Any]]:
        """(session, an I/O binding with this set's inputs bound, the bound values)."""
        session = self._session_for(inputs[0].dtype)
        names = ["a"] if self.weight is not None else ["a", "b"]
        binding = session.io_binding()
        values = []
        for name, array in zip(names, inputs, strict=False):
            values.append(self._ort.OrtValue.ortvalue_from_numpy(np.array(array, copy=True)))
            binding.bind_ortvalue_input(name, values[-1])
        binding.bind_output("c")
        return session, binding, values

    def invoke(self, prepared: tuple[Any, Any, list[Any]]) -> Any:
        """One run: a bound call costs 3 us in Python, ``run_with_ort_values`` 37."""
        session, binding, _ = prepared
        session.run_with_iobinding(binding)
        return binding

    def to_host(self, result: Any) -> list[np.ndarray]:
        return [np.ascontiguousarray(result.copy_outputs_to_cpu()[0])]


@dataclass(frozen=True, eq=False)
class WeightedHost:
    """Builds a :class:`HostFunction` whose operand 1 is ``weight``, in the measuring process.

    A :class:`~dcmlir.measure.variants.HostModel` factory: it pickles with its
    weight; its ``repr`` (part of the variant's key) names the weight by digest.
    """

    library: str
    spec: str
    threads: int
    weight: np.ndarray = field(repr=False)
    gpu: bool = False
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(np.ascontiguousarray(self.weight).tobytes()).hexdigest()[:16]
        object.__setattr__(self, "digest", digest)

    def __call__(self) -> HostFunction:
        return HostFunction(self.library, self.spec, self.threads, gpu=self.gpu, weight=self.weight)


class HostCall:
    """Any picklable Python function of host arrays, as a callee (timed as a
    :class:`~dcmlir.measure.variants.HostModel`: ``partial(HostCall, np.matmul)``).

    Each input set is copied once when prepared; the timed call is ``fn(*arrays)``.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def prepare(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array(array, copy=True) for array in inputs]

    def invoke(self, prepared: list[np.ndarray]) -> Any:
        return self.fn(*prepared)

    def to_host(self, result: Any) -> list[np.ndarray]:
        if isinstance(result, np.ndarray):
            return [result]
        return [np.asarray(r) for r in result]
