func.func @main(%x: tensor<?x3072xf32>, %w: tensor<3072x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x3072xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x3072xf32>, tensor<3072x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}
