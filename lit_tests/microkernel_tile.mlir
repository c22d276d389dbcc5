// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-microkernel-tile{sizes=8,16,8}' | FileCheck %s
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-microkernel-tile{sizes=8,16,8}' --verify-diagnostics | FileCheck %s --check-prefix=CLEAN
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-microkernel-tile{sizes=2,8,16,8 print-schedule=true}' 2>/dev/null > %t
// RUN: FileCheck %s --check-prefix=SCHED < %t
// RUN: FileCheck %s --check-prefix=UNCHANGED < %t
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-microkernel-tile{sizes=2,8,16,8}' 2>/dev/null | FileCheck %s --check-prefix=BATCH4
// RUN: not dcmlir-opt %s -p 'dcmlir-microkernel-tile{sizes=0,16}' 2>&1 | FileCheck %s --check-prefix=BADOPT

// The tag the pass matches its targets with never survives.
// CLEAN-NOT: dcmlir.mk_target

// With print-schedule=true the payload comes out as it went in.
// UNCHANGED-NOT: {{scf.forall|tensor.pad|linalg.*dcmlir.mk_target}}
// UNCHANGED: linalg.matmul ins(%arg0, %arg1 : tensor<?x768xf32>, tensor<768x768xf32>) outs(%arg2 : tensor<?x768xf32>)
// UNCHANGED-NOT: {{scf.forall|tensor.pad|linalg.*dcmlir.mk_target}}
// UNCHANGED: linalg.batch_matmul ins(%arg0, %arg1 : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%arg2 : tensor<12x?x?xf32>)
// UNCHANGED-NOT: {{scf.forall|tensor.pad|linalg.*dcmlir.mk_target}}

// BADOPT: dcmlir-opt: error: pass 'dcmlir-microkernel-tile': option 'sizes' needs 3 values (m,n,k) or 4 values (b,m,n,k), all positive; got 2: 0,16

// The DietCode dense layer: M dynamic, 768x768 weights. One scf.forall over
// 8x16 output tiles, K walked by 8 inside, each tile padded to a static
// 8x16x8 micro-kernel and the real part copied back.
// CHECK-LABEL: func.func @dense
// CHECK-SAME: (%[[X:.*]]: tensor<?x768xf32>, %[[W:.*]]: tensor<768x768xf32>, %[[INIT:.*]]: tensor<?x768xf32>)
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[M:.*]] = tensor.dim %[[X]], %c0
// CHECK: %[[TILES:.*]] = affine.apply #{{.*}}()[%[[M]]]
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (%[[TILES]], 48) shared_outs(%{{.*}} = %[[INIT]]) -> (tensor<?x768xf32>)
// CHECK: %[[ROWS:.*]] = affine.min
// CHECK: scf.for %{{.*}} = %c0 to %c768 step %c8
// CHECK: tensor.pad %{{.*}} low[0, 0] high[%{{.*}}, 0]
// CHECK: tensor.yield %[[ZERO]] : f32
// CHECK: } : tensor<?x8xf32> to tensor<8x8xf32>
// CHECK: } : tensor<?x16xf32> to tensor<8x16xf32>
// CHECK: %[[MK:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NOT: dcmlir.mk_target
// CHECK: tensor.extract_slice %[[MK]][0, 0] [%[[ROWS]], 16] [1, 1] : tensor<8x16xf32> to tensor<?x16xf32>
// CHECK: scf.forall.in_parallel
// CHECK: tensor.parallel_insert_slice
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED: %[[T:.*]] = transform.structured.match attributes {dcmlir.mk_target = 0 : i64} in %arg0
// SCHED: %[[TILED:.*]], %{{.*}} = transform.structured.tile_using_forall %[[T]] tile_sizes [8, 16, 0]
// SCHED: %[[INNER:.*]], %{{.*}} = transform.structured.tile_using_for %[[TILED]] tile_sizes [0, 0, 8]
// SCHED: %[[PADDED:.*]], %{{.*}}, %{{.*}} = transform.structured.pad %[[INNER]] pad_to_multiple_of [8, 16, 8] <padding_values = [0.000000e+00 : f32, 0.000000e+00 : f32, 0.000000e+00 : f32], padding_dimensions = [0, 1, 2], copy_back_op = "none">
// SCHED: %[[FUNC:.*]] = transform.get_parent_op %[[PADDED]] <isolated_from_above, deduplicate>
// SCHED: transform.apply_patterns to %[[FUNC]] {
// SCHED: transform.apply_patterns.canonicalization
// SCHED: transform.apply_cse to %[[FUNC]]
// BATCH4-LABEL: func.func @dense
// BATCH4: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xf32>)
func.func @dense(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>, %init: tensor<?x768xf32>) -> tensor<?x768xf32> {
  // expected-remark @below {{micro-kernel 8x16x8 (m,n,k)}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}

// -----

// Attention scores: two dynamic dims (T x T). The batch loop is tiled by 1
// (by b when four sizes are given); M and N are both padded.
// CHECK-LABEL: func.func @scores
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (12, %{{.*}}, %{{.*}})
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c8
// CHECK: } : tensor<1x?x8xf32> to tensor<1x8x8xf32>
// CHECK: } : tensor<1x8x?xf32> to tensor<1x8x16xf32>
// CHECK: } : tensor<1x?x?xf32> to tensor<1x8x16xf32>
// CHECK: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<1x8x8xf32>, tensor<1x8x16xf32>) outs(%{{.*}} : tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED: transform.structured.tile_using_forall %{{.*}} tile_sizes [2, 8, 16, 0]
// SCHED: transform.structured.tile_using_for %{{.*}} tile_sizes [0, 0, 0, 8]
// SCHED: transform.structured.pad %{{.*}} pad_to_multiple_of [2, 8, 16, 8]
// BATCH4-LABEL: func.func @scores
// BATCH4: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (6, %{{.*}}, %{{.*}})
// BATCH4: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<2x8x8xf32>, tensor<2x8x16xf32>) outs(%{{.*}} : tensor<2x8x16xf32>)
func.func @scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>, %init: tensor<12x?x?xf32>) -> tensor<12x?x?xf32> {
  // expected-remark @below {{micro-kernel 1x8x16x8 (b,m,n,k)}}
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}

// -----

// Transposed weights as a PyTorch import leaves them (B indexed (n, k)), as a
// named matmul with indexing maps and as the equivalent linalg.generic: the
// B tile is 16x8 (n x k), the body of the generic is kept.
#lhs = affine_map<(d0, d1, d2) -> (d0, d2)>
#rhs_t = affine_map<(d0, d1, d2) -> (d1, d2)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @transposed
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED: transform.structured.match attributes {dcmlir.mk_target = 0 : i64}
// SCHED: transform.structured.match attributes {dcmlir.mk_target = 1 : i64}
// SCHED: %[[BOTH:.*]] = transform.merge_handles deduplicate %{{.*}}, %{{.*}} : !transform.any_op
// SCHED: transform.apply_patterns to %[[BOTH]]
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (%{{.*}}, 192)
// CHECK: linalg.matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] ins(%{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<16x8xf32>) outs(%{{.*}} : tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (%{{.*}}, 192)
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<16x8xf32>) outs(%{{.*}} : tensor<8x16xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: } -> tensor<8x16xf32>
func.func @transposed(%x: tensor<?x768xf32>, %w: tensor<3072x768xf32>, %init: tensor<?x3072xf32>) -> (tensor<?x3072xf32>, tensor<?x3072xf32>) {
  // expected-remark @below {{micro-kernel 8x16x8 (m,n,k)}}
  %a = linalg.matmul indexing_maps = [#lhs, #rhs_t, #out] ins(%x, %w : tensor<?x768xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  // expected-remark @below {{micro-kernel 8x16x8 (m,n,k)}}
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

// A mixed-precision generic contraction (f16 in, f32 accumulator), every dim
// dynamic: each operand is padded with a zero of its own element type.
// CHECK-LABEL: func.func @mixed_generic
// CHECK-DAG: %[[H0:.*]] = arith.constant 0.000000e+00 : f16
// CHECK-DAG: %[[F0:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: scf.for
// CHECK: tensor.yield %[[H0]] : f16
// CHECK: } : tensor<?x?xf16> to tensor<8x8xf16>
// CHECK: tensor.yield %[[H0]] : f16
// CHECK: } : tensor<?x?xf16> to tensor<8x16xf16>
// CHECK: tensor.yield %[[F0]] : f32
// CHECK: } : tensor<?x?xf32> to tensor<8x16xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x8xf16>, tensor<8x16xf16>) outs(%{{.*}} : tensor<8x16xf32>)
// CHECK: arith.extf
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED: padding_values = [0.000000e+00 : f16, 0.000000e+00 : f16, 0.000000e+00 : f32]
func.func @mixed_generic(%a: tensor<?x?xf16>, %b: tensor<?x?xf16>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  // expected-remark @below {{micro-kernel 8x16x8 (m,n,k)}}
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<?x?xf16>, tensor<?x?xf16>) outs(%c : tensor<?x?xf32>) {
  ^bb0(%x: f16, %y: f16, %acc: f32):
    %xe = arith.extf %x : f16 to f32
    %ye = arith.extf %y : f16 to f32
    %m = arith.mulf %xe, %ye : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// -----

// f16 matmul with a dynamic M, its accumulator filled with zero first: the
// fill stays outside the micro-kernel loops.
// CHECK-LABEL: func.func @half
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED: padding_values = [0.000000e+00 : f16, 0.000000e+00 : f16, 0.000000e+00 : f16]
// CHECK: linalg.fill ins(%{{.*}} : f16) outs(%{{.*}} : tensor<?x256xf16>)
// CHECK: scf.forall
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x8xf16>, tensor<8x16xf16>) outs(%{{.*}} : tensor<8x16xf16>) -> tensor<8x16xf16>
func.func @half(%x: tensor<?x128xf16>, %w: tensor<128x256xf16>) -> tensor<?x256xf16> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x128xf16>
  %zero = arith.constant 0.0 : f16
  %e = tensor.empty(%m) : tensor<?x256xf16>
  %init = linalg.fill ins(%zero : f16) outs(%e : tensor<?x256xf16>) -> tensor<?x256xf16>
  // expected-remark @below {{micro-kernel 8x16x8 (m,n,k)}}
  %r = linalg.matmul ins(%x, %w : tensor<?x128xf16>, tensor<128x256xf16>) outs(%init : tensor<?x256xf16>) -> tensor<?x256xf16>
  return %r : tensor<?x256xf16>
}

// -----

// Static shapes need no micro-kernel dispatch: unchanged, no remark.
// CHECK-LABEL: func.func @static
// CHECK-NOT: scf.forall
// CHECK: linalg.matmul ins(%arg0, %arg1 : tensor<64x768xf32>, tensor<768x768xf32>) outs(%arg2 : tensor<64x768xf32>)
// CHECK-NEXT: return
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED-NEXT: transform.yield
func.func @static(%x: tensor<64x768xf32>, %w: tensor<768x768xf32>, %init: tensor<64x768xf32>) -> tensor<64x768xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<64x768xf32>, tensor<768x768xf32>) outs(%init : tensor<64x768xf32>) -> tensor<64x768xf32>
  return %r : tensor<64x768xf32>
}

// -----

// Dynamic ops that are not contractions, or that have no parallel loop to
// spread micro-kernels over, are left alone with a remark saying why.
// CHECK-LABEL: func.func @untouched
// SCHED-LABEL: transform.named_sequence @__transform_main
// SCHED-NEXT: transform.yield
// CHECK-NOT: scf.forall
// CHECK: linalg.generic
// CHECK: linalg.dot ins(%arg0, %arg0 : tensor<?xf32>, tensor<?xf32>)
func.func @untouched(%a: tensor<?xf32>, %c: tensor<?xf32>, %s: tensor<f32>) -> (tensor<?xf32>, tensor<f32>) {
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a : tensor<?xf32>) outs(%c : tensor<?xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  } -> tensor<?xf32>
  // expected-remark @below {{left untouched: no parallel loop to tile into micro-kernels}}
  %1 = linalg.dot ins(%a, %a : tensor<?xf32>, tensor<?xf32>) outs(%s : tensor<f32>) -> tensor<f32>
  return %0, %1 : tensor<?xf32>, tensor<f32>
}

// -----

// Only K is dynamic and the static M and N fit in one 8x16 tile: the scf.forall
// has one step and canonicalization folds it away. What is left is the same
// static micro-kernel, K walked by 8 with M padded from 3 to 8 (found by
// tests/test_fuzz.py; the pass used to fail with "not inside an scf.forall").
// CHECK-LABEL: func.func @k_only_single_tile
// CHECK-NOT: scf.forall
// CHECK: scf.for
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: tensor.extract_slice %{{.*}}[0, 0] [3, 16] [1, 1] : tensor<8x16xf32> to tensor<3x16xf32>
func.func @k_only_single_tile(%a: tensor<3x?xf32>, %b: tensor<?x16xf32>, %c: tensor<3x16xf32>) -> tensor<3x16xf32> {
  // expected-remark @below {{micro-kernel 8x16x8 (m,n,k)}}
  %r = linalg.matmul ins(%a, %b : tensor<3x?xf32>, tensor<?x16xf32>) outs(%c : tensor<3x16xf32>) -> tensor<3x16xf32>
  return %r : tensor<3x16xf32>
}
