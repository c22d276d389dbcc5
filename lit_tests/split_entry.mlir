// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-split-entry{plan=%S/Inputs/split_entry.plan.json}' | FileCheck %s
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-split-entry{plan=%S/Inputs/split_entry.plan.json}' --verify-diagnostics
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-split-entry{plan=%S/Inputs/split_entry.plan.json},dcmlir-emit-dispatch{plan=%S/Inputs/split_entry.plan.json}' | FileCheck %s --check-prefix=EMIT
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-split-entry{plan=%S/Inputs/split_entry.mmt4d.plan.json}' 2>&1 | FileCheck %s --check-prefix=MMT4D
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-split-entry{plan=%S/Inputs/split_entry.datatiled.plan.json}' 2>&1 | FileCheck %s --check-prefix=TILED
// RUN: dcmlir-opt %s --split-input-file -p 'dcmlir-split-entry{plan=%S/Inputs/split_entry.patchy.plan.json}' 2>&1 | FileCheck %s --check-prefix=PATCHY
// RUN: not dcmlir-opt %s -p 'dcmlir-split-entry' 2>&1 | FileCheck %s --check-prefix=NOPLAN
// RUN: not dcmlir-opt %s -p 'dcmlir-split-entry{plan=%S/Inputs/no-such-plan.json}' 2>&1 | FileCheck %s --check-prefix=MISSING

// NOPLAN: option 'plan' is required

// A plan whose projection runs explicit mmt4d kernels (faster than data tiling at every
// T, their weight packed 32 x 1) leaves the entry whole: a data-tiled copy would hold
// that weight a second time, in data tiling's layout.
// MMT4D: remark: entry not split: {{[0-9a-f]+}} run explicit mmt4d kernels, whose weight layout is not data tiling's
// MMT4D-LABEL: util.func public @main
// MMT4D-NOT: util.call
// MMT4D: util.return
// MISSING: no-such-plan.json

// A plan whose projection runs data tiling's own tile at every M: nothing for dcmlir to
// dispatch, so the entry is the function as it was, left to IREE's data tiling whole (its
// cascades, all data tiling, would lose what IREE does across ops).
// TILED: remark: entry split: @main: every arg0.0 runs IREE's data tiling of it as it was
// TILED-LABEL: util.func public @main
// TILED-SAME: dcmlir.left_to_iree
// TILED-NOT: util.call
// TILED: linalg.matmul
// TILED: util.return

// A plan that runs IREE's default at M = 2, 5 and 6 (where the guard left it) and data
// tiling's own tile at every other M: the entry calls an untouched copy at those M too,
// kept from IREE's data tiling by its hint (a cascade of defaults is not IREE's default
// build), and no cascade at all.
// PATCHY: remark: entry split: @main: arg0.0 runs, in 2, 5..6 IREE's default, elsewhere IREE's data tiling (IREE's builds: of the function as it was)
// PATCHY-LABEL: util.func private @main$default
// PATCHY-SAME: {dcmlir.left_to_iree, inlining_policy = #util.inline.never, iree.opt.data_tiling}
// PATCHY-LABEL: util.func private @main$iree
// PATCHY-SAME: {dcmlir.left_to_iree, inlining_policy = #util.inline.never}
// PATCHY-LABEL: util.func public @main(
// PATCHY: %[[M:.*]] = tensor.dim
// PATCHY: %[[C2:.*]] = arith.constant 2 : index
// PATCHY: %[[LE2:.*]] = arith.cmpi ule, %[[M]], %[[C2]]
// PATCHY: %[[GE2:.*]] = arith.cmpi uge, %[[M]], %{{.*}}
// PATCHY: %[[IN2:.*]] = arith.andi %[[GE2]], %[[LE2]]
// PATCHY: %[[C6:.*]] = arith.constant 6 : index
// PATCHY: %[[LE6:.*]] = arith.cmpi ule, %[[M]], %[[C6]]
// PATCHY: %[[C5:.*]] = arith.constant 5 : index
// PATCHY: %[[GE5:.*]] = arith.cmpi uge, %[[M]], %[[C5]]
// PATCHY: %[[IN5:.*]] = arith.andi %[[GE5]], %[[LE6]]
// PATCHY: %[[ANY:.*]] = arith.ori %[[IN2]], %[[IN5]]
// PATCHY: scf.if %[[ANY]]
// PATCHY-NEXT: util.call @main$default
// PATCHY: } else {
// PATCHY-NEXT: util.call @main$iree
// PATCHY-NOT: @main$dcmlir

// The plan runs packed kernels on the projection below for M <= 4 (M0 = 4, narrower than
// data tiling's 16 rows) and M0 = 16 above: the entry keeps its name and signature and
// calls the copy dcmlir dispatches for arg0.0 <= 4, and an untouched copy (left to IREE's
// data tiling) above.
// The dcmlir copy carries IREE's data-tiling hint on the function (IREE then hints none of
// its ops: only the cascades' own encodings are data-tiled there); the IREE copy does not.
// CHECK-LABEL: util.func private @main$dcmlir
// CHECK-SAME: {inlining_policy = #util.inline.never, iree.opt.data_tiling}
// CHECK: linalg.matmul
// CHECK-LABEL: util.func private @main$iree
// CHECK-SAME: {dcmlir.left_to_iree, inlining_policy = #util.inline.never}
// CHECK: linalg.matmul
// CHECK-LABEL: util.func public @main(
// CHECK-SAME: %[[X:.*]]: tensor<?x64xf32>, %[[B:.*]]: tensor<48xf32>) -> tensor<?x48xf32>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[M:.*]] = tensor.dim %[[X]], %[[C0]]
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[SMALL:.*]] = arith.cmpi ule, %[[M]], %[[C4]]
// CHECK: %[[R:.*]] = scf.if %[[SMALL]] -> (tensor<?x48xf32>) {
// CHECK-NEXT: %[[D:.*]] = util.call @main$dcmlir(%[[X]], %[[B]])
// CHECK-NEXT: scf.yield %[[D]]
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[I:.*]] = util.call @main$iree(%[[X]], %[[B]])
// CHECK-NEXT: scf.yield %[[I]]
// CHECK: util.return %[[R]]

// With the dispatch emitted: the cascade is in @main$dcmlir only; @main$iree keeps the op.
// EMIT-LABEL: util.func private @main$dcmlir
// EMIT: scf.if
// EMIT: iree_encoding.unset_encoding {dcmlir.kernel = "packed:m4n16k1"}
// EMIT-LABEL: util.func private @main$iree
// EMIT-NOT: iree_encoding
// EMIT: linalg.matmul
// EMIT-NOT: iree_encoding
// EMIT-LABEL: util.func public @main(
// expected-remark @below {{entry split: @main: arg0.0 <= 4 runs dcmlir's kernels, above it IREE's data tiling of the function as it was}}
util.func public @main(%x: tensor<?x64xf32>, %b: tensor<48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %w = arith.constant dense<0.25> : tensor<48x64xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%x, %w : tensor<?x64xf32>, tensor<48x64xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : tensor<?x48xf32>, tensor<48xf32>) outs(%e : tensor<?x48xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %s = arith.addf %in, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x48xf32>
  util.return %y : tensor<?x48xf32>
}

// -----

// A func.func entry is not split (IREE's inliner policy is util.func's); the remark says so.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: util.call
// EMIT-LABEL: func.func @plain
// EMIT: scf.if
// expected-remark @below {{entry not split: the packed workloads are in a func.func, not a util.func}}
func.func @plain(%x: tensor<?x64xf32>, %b: tensor<48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %w = arith.constant dense<0.25> : tensor<48x64xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%x, %w : tensor<?x64xf32>, tensor<48x64xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : tensor<?x48xf32>, tensor<48xf32>) outs(%e : tensor<?x48xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %s = arith.addf %in, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x48xf32>
  return %y : tensor<?x48xf32>
}

// -----

// A private function is not an entry: not split.
// CHECK-LABEL: util.func private @helper
// CHECK-NOT: util.call
// expected-remark @below {{entry not split: the packed workloads are not in a public function}}
util.func private @helper(%x: tensor<?x64xf32>, %b: tensor<48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %w = arith.constant dense<0.25> : tensor<48x64xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%x, %w : tensor<?x64xf32>, tensor<48x64xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  util.return %r : tensor<?x48xf32>
}

// -----

// A module lowered to global optimization takes its arguments as !hal.buffer_view (IREE's
// ABI): the entry reads T with hal.buffer_view.dim, and the copies keep the ABI stub mark.
// CHECK-LABEL: util.func private @lowered$dcmlir
// CHECK-SAME: iree.abi.stub, iree.opt.data_tiling}
// CHECK-LABEL: util.func private @lowered$iree
// CHECK-LABEL: util.func public @lowered(
// CHECK-SAME: %[[V:.*]]: !hal.buffer_view, %[[B:.*]]: tensor<48xf32>) -> tensor<?x48xf32>
// CHECK: %[[M:.*]] = hal.buffer_view.dim<%[[V]] : !hal.buffer_view>[0] : index
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: arith.cmpi ule, %[[M]], %[[C4]]
// CHECK: util.call @lowered$dcmlir(%[[V]], %[[B]])
// CHECK: util.call @lowered$iree(%[[V]], %[[B]])
// expected-remark @below {{entry split: @lowered: arg0.0 <= 4 runs dcmlir's kernels}}
util.func public @lowered(%v: !hal.buffer_view, %b: tensor<48xf32>) -> tensor<?x48xf32> attributes {iree.abi.stub} {
  %m = hal.buffer_view.dim<%v : !hal.buffer_view>[0] : index
  %x = hal.tensor.import %v "input0" : !hal.buffer_view -> tensor<?x64xf32>{%m}
  %w = arith.constant dense<0.25> : tensor<48x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%x, %w : tensor<?x64xf32>, tensor<48x64xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  util.return %r : tensor<?x48xf32>
}
