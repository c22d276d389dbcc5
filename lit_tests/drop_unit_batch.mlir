// RUN: dcmlir-opt %s -p 'dcmlir-drop-unit-batch' | FileCheck %s
// RUN: dcmlir-opt %s -p 'dcmlir-drop-unit-batch' --verify-diagnostics

// An ONNX MatMul as IREE's importer gives it: [1, T, K] x the weight broadcast to
// [1, K, N]. It becomes a matmul on the weight itself, the result expanded back.
// CHECK-LABEL: func.func @onnx_matmul
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32>, %[[W:.*]]: tensor<64x32xf32>)
// CHECK: %[[A:.*]] = tensor.collapse_shape %[[X]] {{\[\[}}0, 1], [2]] : tensor<1x?x64xf32> into tensor<?x64xf32>
// CHECK: %[[C:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<1x?x32xf32> into tensor<?x32xf32>
// CHECK: %[[P:.*]] = linalg.matmul ins(%[[A]], %[[W]] : tensor<?x64xf32>, tensor<64x32xf32>) outs(%[[C]] : tensor<?x32xf32>)
// CHECK: %[[R:.*]] = tensor.expand_shape %[[P]] {{\[\[}}0, 1], [2]] output_shape [1, %{{.*}}, 32] : tensor<?x32xf32> into tensor<1x?x32xf32>
// CHECK-NOT: linalg.batch_matmul
// CHECK: return %[[R]]
func.func @onnx_matmul(%x: tensor<1x?x64xf32>, %w: tensor<64x32xf32>) -> tensor<1x?x32xf32> {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c1 : tensor<1x?x64xf32>
  %zero = arith.constant 0.0 : f32
  %eb = tensor.empty() : tensor<1x64x32xf32>
  %wb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%w : tensor<64x32xf32>) outs(%eb : tensor<1x64x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x64x32xf32>
  %e = tensor.empty(%t) : tensor<1x?x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
  // expected-remark @below {{rewritten as linalg.matmul (unit batch)}}
  %r = linalg.batch_matmul ins(%x, %wb : tensor<1x?x64xf32>, tensor<1x64x32xf32>) outs(%init : tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
  return %r : tensor<1x?x32xf32>
}

// A transposed weight ([1, N, K]) that is not a broadcast: collapsed, and the matmul
// reads it transposed.
// CHECK-LABEL: func.func @transposed_weight
// CHECK: %[[WT:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<1x32x64xf32> into tensor<32x64xf32>
// CHECK: linalg.matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] ins(%{{.*}}, %[[WT]] : tensor<?x64xf32>, tensor<32x64xf32>)
// CHECK-NOT: linalg.batch_matmul
func.func @transposed_weight(%x: tensor<1x?x64xf32>, %w: tensor<1x32x64xf32>, %init: tensor<1x?x32xf32>) -> tensor<1x?x32xf32> {
  // expected-remark @below {{rewritten as linalg.matmul (unit batch)}}
  %r = linalg.batch_matmul indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>]
      ins(%x, %w : tensor<1x?x64xf32>, tensor<1x32x64xf32>) outs(%init : tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
  return %r : tensor<1x?x32xf32>
}

// RoPE's frequencies: [1, 32, 1] x positions [1, 1, T], the dynamic dim is N (from a
// Qwen2 exported to ONNX): the expanded result takes the product's N.
// CHECK-LABEL: func.func @dynamic_n
// CHECK: %[[P:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<32x1xf32>, tensor<1x?xf32>) outs(%{{.*}} : tensor<32x?xf32>)
// CHECK: %[[N:.*]] = tensor.dim %[[P]], %{{.*}} : tensor<32x?xf32>
// CHECK: tensor.expand_shape %[[P]] {{\[\[}}0, 1], [2]] output_shape [1, 32, %[[N]]] : tensor<32x?xf32> into tensor<1x32x?xf32>
func.func @dynamic_n(%f: tensor<1x32x1xf32>, %p: tensor<1x1x?xf32>, %init: tensor<1x32x?xf32>) -> tensor<1x32x?xf32> {
  // expected-remark @below {{rewritten as linalg.matmul (unit batch)}}
  %r = linalg.batch_matmul ins(%f, %p : tensor<1x32x1xf32>, tensor<1x1x?xf32>) outs(%init : tensor<1x32x?xf32>) -> tensor<1x32x?xf32>
  return %r : tensor<1x32x?xf32>
}

// M and N both dynamic: both sizes come from the product.
// CHECK-LABEL: func.func @dynamic_m_and_n
// CHECK: %[[P:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x8xf32>, tensor<8x?xf32>) outs(%{{.*}} : tensor<?x?xf32>)
// CHECK: %[[M:.*]] = tensor.dim %[[P]], %{{.*}} : tensor<?x?xf32>
// CHECK: %[[N:.*]] = tensor.dim %[[P]], %{{.*}} : tensor<?x?xf32>
// CHECK: tensor.expand_shape %[[P]] {{\[\[}}0, 1], [2]] output_shape [1, %[[M]], %[[N]]] : tensor<?x?xf32> into tensor<1x?x?xf32>
func.func @dynamic_m_and_n(%a: tensor<1x?x8xf32>, %b: tensor<1x8x?xf32>, %init: tensor<1x?x?xf32>) -> tensor<1x?x?xf32> {
  // expected-remark @below {{rewritten as linalg.matmul (unit batch)}}
  %r = linalg.batch_matmul ins(%a, %b : tensor<1x?x8xf32>, tensor<1x8x?xf32>) outs(%init : tensor<1x?x?xf32>) -> tensor<1x?x?xf32>
  return %r : tensor<1x?x?xf32>
}

// Attention's batch (heads) and a dynamic batch are real batches: untouched.
// CHECK-LABEL: func.func @real_batches
// CHECK: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<12x?x64xf32>
// CHECK: linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<?x?x64xf32>
func.func @real_batches(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>, %i: tensor<12x?x?xf32>, %x: tensor<?x?x64xf32>, %w: tensor<?x64x32xf32>, %j: tensor<?x?x32xf32>) -> (tensor<12x?x?xf32>, tensor<?x?x32xf32>) {
  %s = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%i : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %r = linalg.batch_matmul ins(%x, %w : tensor<?x?x64xf32>, tensor<?x64x32xf32>) outs(%j : tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  return %s, %r : tensor<12x?x?xf32>, tensor<?x?x32xf32>
}
