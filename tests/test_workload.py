"""Workload extraction on the contraction forms a PyTorch import produces."""

from __future__ import annotations

import pytest
from helpers import DENSE, SCORES, TRANSPOSED

from dcmlir.dim_tracing import ArgDim, parse_arg_dim, trace_dim
from dcmlir.ir.mlir import ir, parse_module
from dcmlir.shapes import parse_range
from dcmlir.workload import NotAWorkload, Workload, workloads


def extract(text: str) -> list[Workload | NotAWorkload]:
    with ir.Context():
        module = parse_module(text)
        return [result for _, result in workloads(module.operation, "t.mlir")]


def test_matmul_dynamic_m() -> None:
    (found,) = extract(DENSE)
    assert isinstance(found, Workload)
    assert found.kind == "matmul"
    assert found.layout == "mk,kn->mn"
    assert [(d.role, d.extent) for d in found.dims] == [("m", None), ("n", 768), ("k", 768)]
    assert found.element_types == ("f32", "f32", "f32")
    assert found.location == "t.mlir:8:8"


def test_batch_matmul_two_dynamic_dims() -> None:
    (found,) = extract(SCORES)
    assert isinstance(found, Workload)
    assert found.kind == "batch_matmul"
    assert [d.role for d in found.dims] == ["b", "m", "n", "k"]
    assert [d.index for d in found.dynamic_dims] == [1, 2]
    # each dynamic loop knows an operand dim that holds its extent at run time
    assert (found.dims[1].source.operand, found.dims[1].source.dim) == (0, 1)
    assert (found.dims[2].source.operand, found.dims[2].source.dim) == (1, 2)


def test_transposed_named_and_generic_forms() -> None:
    named, generic = extract(TRANSPOSED)
    assert isinstance(named, Workload) and isinstance(generic, Workload)
    assert named.kind == generic.kind == "matmul_transpose_b"
    assert named.layout == "mk,nk->mn"
    # same computation, different op: different structural keys
    assert named.key != generic.key


def test_identical_layers_share_a_key_and_different_shapes_do_not() -> None:
    two_layers = DENSE + DENSE.replace("@dense", "@dense2")
    first, second = extract(two_layers)
    assert isinstance(first, Workload) and isinstance(second, Workload)
    assert first.key == second.key
    (other,) = extract(DENSE.replace("768", "1024"))
    assert isinstance(other, Workload)
    assert other.key != first.key


def test_non_contraction_is_reported_with_a_reason() -> None:
    text = """
    #id = affine_map<(d0) -> (d0)>
    func.func @f(%x: tensor<?xf32>, %o: tensor<?xf32>) -> tensor<?xf32> {
      %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
          ins(%x : tensor<?xf32>) outs(%o : tensor<?xf32>) {
      ^bb0(%i: f32, %j: f32):
        linalg.yield %i : f32
      } -> tensor<?xf32>
      return %r : tensor<?xf32>
    }"""
    (found,) = extract(text)
    assert isinstance(found, NotAWorkload)
    assert "not a contraction" in str(found)


def test_integer_contraction_is_not_supported() -> None:
    (found,) = extract(DENSE.replace("f32", "i32").replace("0.0 : i32", "0 : i32"))
    assert isinstance(found, NotAWorkload)
    assert "element types i32" in str(found)


def test_static_ops_are_not_workloads() -> None:
    text = """
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
      %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
      return %r : tensor<4x16xf32>
    }"""
    assert extract(text) == []


def test_trace_reaches_the_function_argument() -> None:
    with ir.Context():
        module = parse_module(DENSE)
        ((op, _),) = list(workloads(module.operation))
        init = op.operands[2]  # fill(empty(dim %x, 0))
        assert trace_dim(init, 0).arg_dims == {ArgDim(0, 0)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1:128", None),
        ("0:0", None),
        ("128:1", "reversed"),
        ("-1:4", "negative"),
        ("a:b", "not LO:HI"),
        ("", "not LO:HI"),
        ("5", "not LO:HI"),
    ],
)
def test_parse_range(text: str, message: str | None) -> None:
    if message is None:
        lo, hi = parse_range(text)
        assert lo <= hi
        return
    with pytest.raises(ValueError, match=message):
        parse_range(text)


def test_parse_arg_dim() -> None:
    assert parse_arg_dim("arg2.1") == ArgDim(2, 1)
    assert parse_arg_dim("0.0") == ArgDim(0, 0)
    with pytest.raises(ValueError, match=r"argN\.D"):
        parse_arg_dim("x.1")


def test_trace_through_what_a_torch_import_and_iree_produce() -> None:
    """tensor.reshape by from_elements, collapse_shape of a unit dim, extract_slice, the
    ABI's hal.buffer_view.dim in a util.func: every T loop reaches arg0.0 and its range."""
    text = """
    util.func public @f(%arg0: !hal.buffer_view, %p: tensor<12x?x?xf32>, %v: tensor<1x12x?x64xf32>) -> tensor<12x?x64xf32> {
      %d = hal.buffer_view.dim<%arg0 : !hal.buffer_view>[0] : index
      %t = util.assume.int %d<umin = 1, umax = 96> : index
      %t64 = arith.index_cast %t : index to i64
      %c12 = arith.constant 12 : i64
      %shape = tensor.from_elements %c12, %t64, %t64 : tensor<3xi64>
      %probs = tensor.reshape %p(%shape) : (tensor<12x?x?xf32>, tensor<3xi64>) -> tensor<12x?x?xf32>
      %vs = tensor.extract_slice %v[0, 0, 0, 0] [1, 12, %t, 64] [1, 1, 1, 1] : tensor<1x12x?x64xf32> to tensor<1x12x?x64xf32>
      %vc = tensor.collapse_shape %vs [[0, 1], [2], [3]] : tensor<1x12x?x64xf32> into tensor<12x?x64xf32>
      %e = tensor.empty(%t) : tensor<12x?x64xf32>
      %r = linalg.batch_matmul ins(%probs, %vc : tensor<12x?x?xf32>, tensor<12x?x64xf32>) outs(%e : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
      util.return %r : tensor<12x?x64xf32>
    }"""
    with ir.Context():
        module = parse_module(text)
        ((op, found),) = list(workloads(module.operation))
        assert isinstance(found, Workload)
        assert found.equal_loops == ((1, 3),)  # M (rows of probs) and K (its columns, v's rows)
        origin = trace_dim(op.operands[0], 2)
        assert origin.arg_dims == {ArgDim(0, 0)} and origin.assumed == (1, 96)
        assert trace_dim(op.operands[1], 1).arg_dims == {ArgDim(0, 0)}
