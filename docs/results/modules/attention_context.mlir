func.func @main(%p: tensor<12x?x?xf32>, %v: tensor<12x?x64xf32>) -> tensor<12x?x64xf32> {
  %c1 = arith.constant 1 : index
  %t = tensor.dim %p, %c1 : tensor<12x?x?xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<12x?x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  %r = linalg.batch_matmul ins(%p, %v : tensor<12x?x?xf32>, tensor<12x?x64xf32>) outs(%init : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  return %r : tensor<12x?x64xf32>
}
