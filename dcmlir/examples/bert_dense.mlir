// A BERT-base dense (fully connected) layer without its bias: x[T, 768] @ w[768, 768].
// T, the sequence length (times the batch), is only known at run time; dcmlir
// tunes it for T in 1..128. Workload: linalg.matmul, M dynamic, N = K = 768.
func.func @dense(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %x, %c0 : tensor<?x768xf32>
  %empty = tensor.empty(%t) : tensor<?x768xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x768xf32>) -> tensor<?x768xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>)
                     outs(%acc : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %y : tensor<?x768xf32>
}
