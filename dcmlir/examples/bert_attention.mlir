// BERT-base self-attention core for one sequence: 12 heads of size 64, sequence
// length T known only at run time (1..128 when tuned).
//   scores[h, i, j] = sum_d q[h, i, d] * kt[h, d, j]     batch_matmul 12 x T x T x 64
//   probs           = softmax(scores / 8) over j
//   context[h, i, d] = sum_j probs[h, i, j] * v[h, j, d]  batch_matmul 12 x T x 64 x T
// Workloads: the two batch matmuls (the scale and softmax are left to IREE).
func.func @attention(%q: tensor<12x?x64xf32>, %kt: tensor<12x64x?xf32>, %v: tensor<12x?x64xf32>)
    -> tensor<12x?x64xf32> {
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %scale = arith.constant 0.125 : f32
  %t = tensor.dim %q, %c1 : tensor<12x?x64xf32>
  %scores_empty = tensor.empty(%t, %t) : tensor<12x?x?xf32>
  %scores_acc = linalg.fill ins(%zero : f32) outs(%scores_empty : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %scores = linalg.batch_matmul ins(%q, %kt : tensor<12x?x64xf32>, tensor<12x64x?xf32>)
                                outs(%scores_acc : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %scaled = linalg.generic {
      indexing_maps = [affine_map<(h, i, j) -> (h, i, j)>, affine_map<(h, i, j) -> (h, i, j)>],
      iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%scores : tensor<12x?x?xf32>) outs(%scores_empty : tensor<12x?x?xf32>) {
  ^bb0(%s: f32, %out: f32):
    %r = arith.mulf %s, %scale : f32
    linalg.yield %r : f32
  } -> tensor<12x?x?xf32>
  %probs = linalg.softmax dimension(2) ins(%scaled : tensor<12x?x?xf32>)
                                       outs(%scores_empty : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  %context_empty = tensor.empty(%t) : tensor<12x?x64xf32>
  %context_acc = linalg.fill ins(%zero : f32) outs(%context_empty : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  %context = linalg.batch_matmul ins(%probs, %v : tensor<12x?x?xf32>, tensor<12x?x64xf32>)
                                 outs(%context_acc : tensor<12x?x64xf32>) -> tensor<12x?x64xf32>
  return %context : tensor<12x?x64xf32>
}
