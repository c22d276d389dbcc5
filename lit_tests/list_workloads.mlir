// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-annotate-ranges{range=1:128},dcmlir-list-workloads' --verify-diagnostics | FileCheck %s
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-annotate-ranges{range=1:128},dcmlir-list-workloads{json=-}' 2>/dev/null | FileCheck %s --check-prefix=JSON
// RUN: not dcmlir-opt %s -p 'dcmlir-list-workloads{json}' 2>&1 | FileCheck %s --check-prefix=NOJSON
// RUN: not dcmlir-opt %s -p 'dcmlir-list-workloads{json=%t.missing/dir/out.json}' 2>&1 | FileCheck %s --check-prefix=BADPATH

// NOJSON: dcmlir-opt: error: pass 'dcmlir-list-workloads': option 'json' needs a value: json=<string>
// BADPATH: error: cannot write '{{.*}}out.json': No such file or directory

// The analysis leaves the IR as it was (only the ranges the first pass added).
// CHECK-LABEL: func.func @two_layers
// CHECK-COUNT-2: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 1, 128>}}
// JSON: "source": "{{.*}}list_workloads.mlir"
// JSON: "kind": "matmul"
// JSON: "location": "{{.*}}list_workloads.mlir:[[L1:[0-9]+]]:
// JSON: "range": [
// JSON-NEXT: 1,
// JSON-NEXT: 128
// JSON: "distinct_keys": 1
func.func @two_layers(%x: tensor<?x768xf32>, %w0: tensor<768x768xf32>, %w1: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // Identical ops in two layers share one structural key.
  // expected-remark @below {{workload matmul (mnk) ?[1..128]x768x768 f32,f32,f32 key=5aebb14787f9885e}}
  %h = linalg.matmul ins(%x, %w0 : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{workload matmul (mnk) ?[1..128]x768x768 f32,f32,f32 key=5aebb14787f9885e}}
  %y = linalg.matmul ins(%h, %w1 : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %y : tensor<?x768xf32>
}

// -----

// Transposed weights, as a PyTorch import produces them: B is indexed (n, k).
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs_t = affine_map<(d0, d1, d2) -> (d1, d2)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @transposed
// JSON: "kind": "matmul_transpose_b"
// JSON: "layout": "mk,nk->mn"
// JSON: "kind": "matmul_transpose_b"
// JSON: "distinct_keys": 2
func.func @transposed(%x: tensor<?x768xf32>, %w: tensor<3072x768xf32>, %init: tensor<?x3072xf32>) -> (tensor<?x3072xf32>, tensor<?x3072xf32>) {
  // expected-remark @below {{workload matmul_transpose_b (mnk) ?[1..128]x3072x768 f32,f32,f32}}
  %a = linalg.matmul indexing_maps = [#lhs, #rhs_t, #out] ins(%x, %w : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  // expected-remark @below {{workload matmul_transpose_b (mnk) ?[1..128]x3072x768 f32,f32,f32}}
  %b = linalg.generic {indexing_maps = [#lhs, #rhs_t, #out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %p = arith.mulf %i, %j : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<?x3072xf32>
  return %a, %b : tensor<?x3072xf32>, tensor<?x3072xf32>
}

// -----

// Two dynamic dims (T x T) in the attention scores.
// CHECK-LABEL: func.func @scores
// JSON: "kind": "batch_matmul"
func.func @scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>, %init: tensor<12x?x?xf32>) -> tensor<12x?x?xf32> {
  // expected-remark @below {{workload batch_matmul (bmnk) 12x?[1..128]x?[1..128]x64 f32,f32,f32}}
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}

// -----

// Dynamic ops that are not contractions are reported and left to IREE.
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @elementwise
// JSON: "skipped": [
// JSON: "op": "linalg.generic"
// JSON: "reason": "'linalg.generic' is not a contraction
func.func @elementwise(%x: tensor<?x768xf32>, %init: tensor<?x768xf32>) -> tensor<?x768xf32> {
  // expected-remark @below {{not a workload, left to IREE: 'linalg.generic' is not a contraction}}
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<?x768xf32>) outs(%init : tensor<?x768xf32>) {
  ^bb0(%i: f32, %o: f32):
    %e = math.exp %i : f32
    linalg.yield %e : f32
  } -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}
