func.func @main(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>) -> tensor<12x?x?xf32> {
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
