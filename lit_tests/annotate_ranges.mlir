// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-annotate-ranges{range=1:128}' | FileCheck %s
// RUN: dcmlir-opt %s -p 'dcmlir-annotate-ranges{range=1:128 dims=arg0.0=4:16}' | FileCheck %s --check-prefix=OVERRIDE
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-annotate-ranges' --verify-diagnostics
// RUN: not dcmlir-opt %s -p 'dcmlir-annotate-ranges{range=128:1}' 2>&1 | FileCheck %s --check-prefix=REVERSED
// RUN: not dcmlir-opt %s -p 'dcmlir-annotate-ranges{range=a:b}' 2>&1 | FileCheck %s --check-prefix=NONNUM
// RUN: not dcmlir-opt %s -p 'dcmlir-annotate-ranges{range=-1:4}' 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not dcmlir-opt %s --split-input-file -p 'dcmlir-annotate-ranges{dims=arg7.0=1:8}' 2>&1 | FileCheck %s --check-prefix=NODIM
// RUN: not dcmlir-opt %s -p 'dcmlir-annotate-ranges{ranges=1:8}' 2>&1 | FileCheck %s --check-prefix=BADKEY
// RUN: dcmlir-opt %s -p 'dcmlir-annotate-ranges{dims=arg0.1=4:16,arg0.2=arg0.1}' 2>/dev/null | FileCheck %s --check-prefix=TIE
// RUN: not dcmlir-opt %s -p 'dcmlir-annotate-ranges{range=1:128 dims=arg0.1=arg0.2}' 2>&1 | FileCheck %s --check-prefix=TIEDRANGES
// RUN: not dcmlir-opt %s -p 'dcmlir-annotate-ranges{dims=arg0.1=1:8,arg0.2=16:32,arg0.1=arg0.2}' 2>&1 | FileCheck %s --check-prefix=TIEDDIMS

// REVERSED: dcmlir-opt: error: pass 'dcmlir-annotate-ranges': range '128:1' is reversed; write 1:128
// NONNUM: dcmlir-opt: error: pass 'dcmlir-annotate-ranges': range 'a:b' is not LO:HI with integers
// NEG: error: pass 'dcmlir-annotate-ranges': range '-1:4' has a negative bound
// NODIM: error: dims: arg7.0 is not a dynamic dimension of any function argument (dynamic ones: arg0.0)
// BADKEY: dcmlir-opt: error: pass 'dcmlir-annotate-ranges' has no option 'ranges' (options: dims, range)
// TIEDRANGES: annotate_ranges.mlir:{{[0-9]+}}:8: error: loops d1, d3 are tied by dims but their ranges do not overlap
// TIEDDIMS: dcmlir-opt: error: pass 'dcmlir-annotate-ranges': tied dims have ranges that do not overlap (arg0.1=1:8, arg0.2=16:32)

// Without --split-input-file the three functions form one module, so arg0.0 names
// a dynamic dim of @dense only (argN.D applies to every function that has it).
// The default range reaches the matmul through tensor.dim -> tensor.empty -> linalg.fill.
// CHECK-LABEL: func.func @dense
// CHECK-NOT: linalg.fill {{.*}}dcmlir.dim_ranges
// CHECK: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 1, 128>}}
// OVERRIDE-LABEL: func.func @dense
// OVERRIDE: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 4, 16>}}
func.func @dense(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-warning @below {{no range for dynamic loop d0}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}

// -----

// util.assume.int bounds in the IR beat the blanket default; both dynamic dims get one.
// CHECK-LABEL: func.func @attention_scores
// CHECK: linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 1, 128>, d2 = array<i64: 1, 512>}}
// OVERRIDE-LABEL: func.func @attention_scores
// OVERRIDE: linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 1, 128>, d2 = array<i64: 1, 512>}}
func.func @attention_scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>) -> tensor<12x?x?xf32> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %q, %c1 : tensor<12x?x64xf32>
  %s = tensor.dim %k, %c2 : tensor<12x64x?xf32>
  %sa = util.assume.int %s<umin = 1, umax = 512> : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t, %sa) : tensor<12x?x?xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  // expected-warning @below {{no range for dynamic loop d1}}
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}

// -----

// No dynamic op: the module comes out unchanged, no attribute anywhere.
// CHECK-LABEL: func.func @static_only
// CHECK-NOT: dcmlir.dim_ranges
// CHECK: return
func.func @static_only(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// A range recorded earlier is kept over the blanket default (it is what the IR says),
// but a per-argument range still wins.
// CHECK-LABEL: func.func @recorded
// CHECK: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 2, 6>}}
// OVERRIDE-LABEL: func.func @recorded
// OVERRIDE: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 4, 16>}}
func.func @recorded(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>, %init: tensor<?x768xf32>) -> tensor<?x768xf32> {
  %r = linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 2, 6>}} ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}

// -----

// Batch and T both dynamic: a flatten of [B, T, 64] sizes the dense layer's M as B*T
// (collapse_shape, arith.muli) and attention's batch as B*12 (affine.apply): each range
// is the product of the factors' ranges. A per-argument range of a factor (B: arg0.0)
// goes into the product.
// CHECK-LABEL: func.func @batch_x_seq
// CHECK: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 1, 512>}}
// CHECK: linalg.batch_matmul {dcmlir.dim_ranges = {d0 = array<i64: 12, 48>, d1 = array<i64: 1, 128>, d2 = array<i64: 1, 128>}}
// OVERRIDE-LABEL: func.func @batch_x_seq
// OVERRIDE: linalg.matmul {dcmlir.dim_ranges = {d0 = array<i64: 4, 2048>}}
// OVERRIDE: linalg.batch_matmul {dcmlir.dim_ranges = {d0 = array<i64: 48, 192>, d1 = array<i64: 1, 128>, d2 = array<i64: 1, 128>}}
func.func @batch_x_seq(%x: tensor<?x?x64xf32>, %w: tensor<64x64xf32>, %q: tensor<?x?x16xf32>, %k: tensor<?x16x?xf32>) -> (tensor<?x64xf32>, tensor<?x?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %b_dim = tensor.dim %x, %c0 : tensor<?x?x64xf32>
  %t_dim = tensor.dim %x, %c1 : tensor<?x?x64xf32>
  %b = util.assume.int %b_dim<umin = 1, umax = 4> : index
  %t = util.assume.int %t_dim<umin = 1, umax = 128> : index
  %flat = tensor.collapse_shape %x [[0, 1], [2]] : tensor<?x?x64xf32> into tensor<?x64xf32>
  %m = arith.muli %b, %t : index
  %e = tensor.empty(%m) : tensor<?x64xf32>
  %r = linalg.matmul ins(%flat, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %bh = affine.apply affine_map<()[s0] -> (s0 * 12)>()[%b]
  %e2 = tensor.empty(%bh, %t, %t) : tensor<?x?x?xf32>
  %s = linalg.batch_matmul ins(%q, %k : tensor<?x?x16xf32>, tensor<?x16x?xf32>) outs(%e2 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  return %r, %s : tensor<?x64xf32>, tensor<?x?x?xf32>
}

// -----

// Attention context with its probabilities an argument: nothing in the IR says that T
// (d1, from %p) and T' (d3, from %p and %v) are one value. dims=argN.D=argM.E ties them
// (dcmlir.equal_loops: the search tunes their diagonal), and a range given to one of
// them holds for both.
// CHECK-LABEL: func.func @context
// CHECK: linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 1, 128>, d3 = array<i64: 1, 128>}} ins
// TIE-LABEL: func.func @context
// TIE: linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 4, 16>, d3 = array<i64: 4, 16>}, dcmlir.equal_loops = [array<i64: 1, 3>]}
func.func @context(%p: tensor<12x?x?xf32>, %v: tensor<12x?x64xf32>) -> tensor<12x?x64xf32> {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %p, %c1 : tensor<12x?x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<12x?x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  // expected-warning @below {{no range for dynamic loop d1}}
  // expected-warning @below {{no range for dynamic loop d3}}
  %r = linalg.batch_matmul ins(%p, %v : tensor<12x?x?xf32>, tensor<12x?x64xf32>) outs(%init : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  return %r : tensor<12x?x64xf32>
}

// -----

// Tied loops get one range, the overlap of theirs; ranges the IR records that do not
// overlap are an error on the op (TIEDRANGES), not a silent pick of one.
// CHECK-LABEL: func.func @context_recorded
// CHECK: linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 1, 8>, d3 = array<i64: 16, 32>}} ins
// TIE-LABEL: func.func @context_recorded
// TIE: linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 4, 16>, d3 = array<i64: 4, 16>}, dcmlir.equal_loops = [array<i64: 1, 3>]}
func.func @context_recorded(%p: tensor<12x?x?xf32>, %v: tensor<12x?x64xf32>, %init: tensor<12x?x64xf32>) -> tensor<12x?x64xf32> {
  %r = linalg.batch_matmul {dcmlir.dim_ranges = {d1 = array<i64: 1, 8>, d3 = array<i64: 16, 32>}} ins(%p, %v : tensor<12x?x?xf32>, tensor<12x?x64xf32>) outs(%init : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  return %r : tensor<12x?x64xf32>
}
