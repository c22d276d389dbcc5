// The three BERT-base dense (fully connected) layer shapes in f16, f32 accumulate and
// output, without bias: x[T, 768] @ w[768, 768] (Q, K, V, attention output),
// x[T, 768] @ w[768, 3072] (FFN up), x[T, 3072] @ w[3072, 768] (FFN down).
// T, the sequence length (times the batch), is only known at run time. Workloads: three
// linalg.matmul, M dynamic; on CUDA the tensor-core family (cuda-mma) applies to them.
func.func @projection(%x: tensor<?x768xf16>, %w: tensor<768x768xf16>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %x, %c0 : tensor<?x768xf16>
  %empty = tensor.empty(%t) : tensor<?x768xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x768xf32>) -> tensor<?x768xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x768xf16>, tensor<768x768xf16>)
                     outs(%acc : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %y : tensor<?x768xf32>
}

func.func @ffn_up(%x: tensor<?x768xf16>, %w: tensor<768x3072xf16>) -> tensor<?x3072xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %x, %c0 : tensor<?x768xf16>
  %empty = tensor.empty(%t) : tensor<?x3072xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x768xf16>, tensor<768x3072xf16>)
                     outs(%acc : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  return %y : tensor<?x3072xf32>
}

func.func @ffn_down(%x: tensor<?x3072xf16>, %w: tensor<3072x768xf16>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %x, %c0 : tensor<?x3072xf16>
  %empty = tensor.empty(%t) : tensor<?x768xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x768xf32>) -> tensor<?x768xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x3072xf16>, tensor<3072x768xf16>)
                     outs(%acc : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %y : tensor<?x768xf32>
}
