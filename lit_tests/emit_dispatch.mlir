// RUN: dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.plan.json}' | FileCheck %s
// RUN: dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.plan.json table=never}' | FileCheck %s
// RUN: dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.plan.json table=always}' | FileCheck %s --check-prefix=TABLE
// RUN: dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.plan.json}' --verify-diagnostics
// RUN: not dcmlir-opt %s -p 'dcmlir-emit-dispatch' 2>&1 | FileCheck %s --check-prefix=NOPLAN
// RUN: not dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.plan.json table=maybe}' 2>&1 | FileCheck %s --check-prefix=BADTABLE
// RUN: not dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/no-such-plan.json}' 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.other.plan.json}' 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: not dcmlir-opt %s -p 'dcmlir-emit-dispatch{plan=%S/Inputs/emit_dispatch.td.plan.json}' 2>&1 | FileCheck %s --check-prefix=TD

// The plans in Inputs/ are written by tests/test_plan_dispatch.py with the
// Plan API (workload keys taken from this file); see docs/plan.md.

// NOPLAN: dcmlir-opt: error: pass 'dcmlir-emit-dispatch': option 'plan' is required: plan=FILE
// BADTABLE: dcmlir-opt: error: pass 'dcmlir-emit-dispatch': option 'table' is 'maybe': one of auto, always, never
// MISSING: error: plan {{.*}}no-such-plan.json: cannot read: No such file or directory
// OTHER: error: plan {{.*}}emit_dispatch.other.plan.json (for 'half.mlir') has workloads that match no op in this module: {{[0-9a-f]+}} (matmul); the module's workloads: 5aebb14787f9885e (matmul), 3a268f7f08e08fdd (batch_matmul), {{[0-9a-f]+}} (matmul)
// TD: emit_dispatch.mlir:[[# @LINE + 106]]:8: error: plan for workload 5aebb14787f9885e: kernel 2 (cpu:wg32x32:v8x16:k4) uses route 'td'; dcmlir-emit-dispatch emits only 'config' kernels

// The encodings of @packed's kernels: M's iteration size ? for the weight and the fallback,
// the kernel's bound (4, 16) in its branches.
// CHECK-DAG: #[[ENC_W:encoding[0-9]*]] = #iree_encoding.encoding<operand_index = 1 : i64, {{.*}}iteration_sizes = [?, 48, 64]>
// CHECK-DAG: #[[ENC_4:encoding[0-9]*]] = #iree_encoding.encoding<operand_index = 0 : i64, {{.*}}iteration_sizes = [4, 48, 64]>
// CHECK-DAG: #[[ENC_16:encoding[0-9]*]] = #iree_encoding.encoding<operand_index = 0 : i64, {{.*}}iteration_sizes = [16, 48, 64]>

// The configs of the dense plan's two tuned kernels (kernel 0 is IREE's default).
// CHECK-DAG: #[[SKINNY:.*]] = #iree_cpu.lowering_config<distribution = [8, 128, 0], vector_common_parallel = [1, 16, 0], vector_reduction = [0, 0, 8]>
// CHECK-DAG: #[[SQUARE:.*]] = #iree_cpu.lowering_config<distribution = [32, 32, 0], vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 4]>
// CHECK-DAG: #[[SKINNY_B:.*]] = #iree_cpu.lowering_config<distribution = [1, 8, 128, 0], vector_common_parallel = [1, 1, 16, 0], vector_reduction = [0, 0, 0, 8]>
// CHECK-DAG: #[[SQUARE_B:.*]] = #iree_cpu.lowering_config<distribution = [1, 32, 32, 0], vector_common_parallel = [1, 8, 16, 0], vector_reduction = [0, 0, 0, 4]>
// CHECK-DAG: #[[CI_SKINNY:.*]] = #iree_codegen.compilation_info<lowering_config = #[[SKINNY]],
// CHECK-DAG: #[[CI_SQUARE:.*]] = #iree_codegen.compilation_info<lowering_config = #[[SQUARE]],
// CHECK-DAG: #[[CI_SKINNY_B:.*]] = #iree_codegen.compilation_info<lowering_config = #[[SKINNY_B]],
// CHECK-DAG: #[[CI_SQUARE_B:.*]] = #iree_codegen.compilation_info<lowering_config = #[[SQUARE_B]],
// An explicit mmt4d tile over every row of M's tuned range (1..16) in one workgroup per
// weight block: 16 / M0 row tiles.
// CHECK-DAG: #[[MM_8:.*]] = #iree_cpu.lowering_config<distribution = [2, 1, 0, 0, 0, 0], vector_common_parallel = [1, 1, 0, 8, 32, 0], vector_reduction = [0, 0, 1, 0, 0, 1]>
// CHECK-DAG: #[[MM_1:.*]] = #iree_cpu.lowering_config<distribution = [16, 1, 0, 0, 0, 0], vector_common_parallel = [1, 1, 0, 1, 32, 0], vector_reduction = [0, 0, 1, 0, 0, 1]>
// CHECK-DAG: #[[CI_MM_8:.*]] = #iree_codegen.compilation_info<lowering_config = #[[MM_8]], translation_info = #[[MM_PIPE:.*]]>
// CHECK-DAG: #[[CI_MM_1:.*]] = #iree_codegen.compilation_info<lowering_config = #[[MM_1]], translation_info = #[[MM_PIPE]]>
// CHECK-DAG: #[[MM_PIPE]] = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<Mmt4dTilingExpert>>

// The DietCode dense layer, M in 1..16, 3 kernels: M <= 4 -> the skinny
// kernel, 5..8 -> IREE's default, 9..16 -> the square one. Outside 1..16
// (0 included) the op runs without a config (IREE's own lowering). Inside (by default:
// two splits cost its calls less than a table; and with table=never), the tree is
// evaluated with arith.select to a position among the
// distinct kernels it uses (0: default, 1: skinny, 2: square), and a balanced
// scf.if search over the positions runs one clone per kernel.
// With table=always the position is read from a table instead, one byte per M of the range
// (M - 1: 1 for M <= 4, 0 for 5..8, 2 for 9..16), with one util.buffer.load.
// TABLE-LABEL: func.func @dense
// TABLE: arith.cmpi ult, %[[M:.*]], %{{.*}} : index
// TABLE: %[[OUT:.*]] = arith.ori
// TABLE: scf.if %[[OUT]] -> (tensor<?x768xf32>) {
// TABLE-NEXT: linalg.matmul {dcmlir.kernel = "fallback"}
// TABLE-NEXT: scf.yield
// TABLE-NEXT: } else {
// TABLE-NEXT: %[[LO:.*]] = arith.constant 1 : index
// TABLE-NEXT: %[[ROW:.*]] = arith.subi %[[M]], %[[LO]] : index
// TABLE-NEXT: %[[CASES:.*]] = util.buffer.constant : !util.buffer = dense<[1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2]> : tensor<16xi8>
// TABLE-NEXT: %[[SIZE:.*]] = arith.constant 16 : index
// TABLE-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// TABLE-NEXT: %[[BYTE:.*]] = util.buffer.load %[[CASES]][%[[ROW]] for %[[ONE]]] : !util.buffer{%[[SIZE]]} -> i8
// TABLE-NEXT: %[[CASE:.*]] = arith.index_castui %[[BYTE]] : i8 to index
// TABLE-NEXT: %[[P0:.*]] = arith.constant 0 : index
// TABLE-NEXT: %[[IS0:.*]] = arith.cmpi ule, %[[CASE]], %[[P0]] : index
// TABLE-NEXT: scf.if %[[IS0]] -> (tensor<?x768xf32>) {
// TABLE-NEXT: linalg.matmul {dcmlir.kernel = "default"}
// TABLE-NOT: arith.select
// TABLE: dcmlir.kernel = "cpu:wg8x128:v1x16:k8"
// TABLE: dcmlir.kernel = "cpu:wg32x32:v8x16:k4"
// TABLE: return
// CHECK-LABEL: func.func @dense
// CHECK-SAME: (%[[X:.*]]: tensor<?x768xf32>, %[[W:.*]]: tensor<768x768xf32>) -> tensor<?x768xf32>
// CHECK: %[[INIT:.*]] = linalg.fill
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[M:.*]] = tensor.dim %[[X]], %[[C0]] : tensor<?x768xf32>
// CHECK: %[[C1:.*]] = arith.constant 1 : index
// CHECK: %[[LOW:.*]] = arith.cmpi ult, %[[M]], %[[C1]] : index
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[HIGH:.*]] = arith.cmpi ugt, %[[M]], %[[C16]] : index
// CHECK: %[[OUT:.*]] = arith.ori %[[LOW]], %[[HIGH]] : i1
// CHECK: %[[R:.*]] = scf.if %[[OUT]] -> (tensor<?x768xf32>) {
// CHECK-NEXT: %[[FB:.*]] = linalg.matmul {dcmlir.kernel = "fallback"} ins(%[[X]], %[[W]] : tensor<?x768xf32>, tensor<768x768xf32>) outs(%[[INIT]] : tensor<?x768xf32>) -> tensor<?x768xf32>
// CHECK-NEXT: scf.yield %[[FB]] : tensor<?x768xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[LE8:.*]] = arith.cmpi ule, %[[M]], %[[C8]] : index
// CHECK-NEXT: %[[C4:.*]] = arith.constant 4 : index
// CHECK-NEXT: %[[LE4:.*]] = arith.cmpi ule, %[[M]], %[[C4]] : index
// CHECK-NEXT: %[[SKINNY_POS:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[DEFAULT_POS:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[SEL4:.*]] = arith.select %[[LE4]], %[[SKINNY_POS]], %[[DEFAULT_POS]] : index
// CHECK-NEXT: %[[SQUARE_POS:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[CASE:.*]] = arith.select %[[LE8]], %[[SEL4]], %[[SQUARE_POS]] : index
// CHECK-NEXT: %[[P0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[IS0:.*]] = arith.cmpi ule, %[[CASE]], %[[P0]] : index
// CHECK-NEXT: %[[R0:.*]] = scf.if %[[IS0]] -> (tensor<?x768xf32>) {
// CHECK-NEXT: %[[K0:.*]] = linalg.matmul {dcmlir.kernel = "default"} ins(%[[X]], %[[W]] : {{.*}}) outs(%[[INIT]] : tensor<?x768xf32>)
// CHECK-NEXT: scf.yield %[[K0]] : tensor<?x768xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[P1:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[IS1:.*]] = arith.cmpi ule, %[[CASE]], %[[P1]] : index
// CHECK-NEXT: %[[R1:.*]] = scf.if %[[IS1]] -> (tensor<?x768xf32>) {
// CHECK-NEXT: %[[K1:.*]] = linalg.matmul {compilation_info = #[[CI_SKINNY]], dcmlir.kernel = "cpu:wg8x128:v1x16:k8"} ins(%[[X]], %[[W]] : {{.*}}) outs(%[[INIT]] : tensor<?x768xf32>)
// CHECK-NEXT: scf.yield %[[K1]] : tensor<?x768xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: %[[K2:.*]] = linalg.matmul {compilation_info = #[[CI_SQUARE]], dcmlir.kernel = "cpu:wg32x32:v8x16:k4"} ins(%[[X]], %[[W]] : {{.*}}) outs(%[[INIT]] : tensor<?x768xf32>)
// CHECK-NEXT: scf.yield %[[K2]] : tensor<?x768xf32>
// CHECK-NEXT: }
// CHECK-NEXT: scf.yield %[[R1]] : tensor<?x768xf32>
// CHECK-NEXT: }
// CHECK-NEXT: scf.yield %[[R0]] : tensor<?x768xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[R]] : tensor<?x768xf32>
func.func @dense(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  return %r : tensor<?x768xf32>
}

// Attention scores, two dynamic dims: M (d1, read from %q dim 1) and N (d2,
// read from %k dim 2), both in 1..16. M <= 4 -> skinny; else N <= 8 ->
// default, N > 8 -> square. Both dims are range-checked first; the tree tests
// both dims, once each.
// CHECK-LABEL: func.func @scores
// CHECK-SAME: (%[[Q:.*]]: tensor<12x?x64xf32>, %[[K:.*]]: tensor<12x64x?xf32>, %[[I:.*]]: tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
// CHECK: %[[P1:.*]] = arith.constant 1 : index
// CHECK: %[[SM:.*]] = tensor.dim %[[Q]], %[[P1]] : tensor<12x?x64xf32>
// CHECK: %[[P2:.*]] = arith.constant 2 : index
// CHECK: %[[SN:.*]] = tensor.dim %[[K]], %[[P2]] : tensor<12x64x?xf32>
// CHECK: arith.cmpi ult, %[[SM]], %{{.*}} : index
// CHECK: arith.cmpi ugt, %[[SM]], %{{.*}} : index
// CHECK: arith.cmpi ult, %[[SN]], %{{.*}} : index
// CHECK: arith.cmpi ugt, %[[SN]], %{{.*}} : index
// CHECK: arith.ori
// CHECK: arith.ori
// CHECK: %[[OUT2:.*]] = arith.ori
// CHECK: %[[R2:.*]] = scf.if %[[OUT2]] -> (tensor<12x?x?xf32>) {
// CHECK-NEXT: linalg.batch_matmul {dcmlir.kernel = "fallback"} ins(%[[Q]], %[[K]] : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%[[I]] : tensor<12x?x?xf32>)
// CHECK: } else {
// CHECK-NEXT: %[[C4B:.*]] = arith.constant 4 : index
// CHECK-NEXT: %[[MLE4:.*]] = arith.cmpi ule, %[[SM]], %[[C4B]] : index
// CHECK: %[[C8B:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[NLE8:.*]] = arith.cmpi ule, %[[SN]], %[[C8B]] : index
// CHECK: %[[BYN:.*]] = arith.select %[[NLE8]], %{{.*}}, %{{.*}} : index
// CHECK-NEXT: %[[CASEB:.*]] = arith.select %[[MLE4]], %{{.*}}, %[[BYN]] : index
// CHECK-NOT: tensor.dim
// CHECK: arith.cmpi ule, %[[CASEB]]
// CHECK-NEXT: scf.if
// CHECK-NEXT: linalg.batch_matmul {dcmlir.kernel = "default"}
// CHECK: } else {
// CHECK: arith.cmpi ule, %[[CASEB]]
// CHECK-NEXT: scf.if
// CHECK-NEXT: linalg.batch_matmul {compilation_info = #[[CI_SKINNY_B]], dcmlir.kernel = "cpu:wg8x128:v1x16:k8"}
// CHECK: } else {
// CHECK-NEXT: linalg.batch_matmul {compilation_info = #[[CI_SQUARE_B]], dcmlir.kernel = "cpu:wg32x32:v8x16:k4"}
// CHECK: return %[[R2]] : tensor<12x?x?xf32>
func.func @scores(%q: tensor<12x?x64xf32>, %k: tensor<12x64x?xf32>, %init: tensor<12x?x?xf32>) -> tensor<12x?x?xf32> {
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d1=1:16, d2=1:16}}
  %r = linalg.batch_matmul ins(%q, %k : tensor<12x?x64xf32>, tensor<12x64x?xf32>) outs(%init : tensor<12x?x?xf32>) -> tensor<12x?x?xf32>
  return %r : tensor<12x?x?xf32>
}

// A workload the plan does not cover (another N) is left as it was.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: scf.if
// CHECK-NOT: tensor.dim
// CHECK: %[[U:.*]] = linalg.matmul ins(%arg0, %arg1 : tensor<?x768xf32>, tensor<768x3072xf32>) outs(%arg2 : tensor<?x3072xf32>) -> tensor<?x3072xf32>
// CHECK-NEXT: return %[[U]] : tensor<?x3072xf32>
func.func @untouched(%x: tensor<?x768xf32>, %w: tensor<768x3072xf32>, %init: tensor<?x3072xf32>) -> tensor<?x3072xf32> {
  // expected-remark @below {{left untouched: workload}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x3072xf32>) outs(%init : tensor<?x3072xf32>) -> tensor<?x3072xf32>
  return %r : tensor<?x3072xf32>
}

// The elementwise ops IREE fuses into the matmul's dispatch (bias, then an
// activation: single-use, all-parallel generics) are cloned into every branch
// after the kernel, so each branch is still one dispatch; the row reduction
// (not elementwise) and the second user of %act read the cascade's result.
// CHECK-LABEL: func.func @dense_bias_act
// CHECK-SAME: (%[[X3:.*]]: tensor<?x768xf32>, %[[W3:.*]]: tensor<768x768xf32>, %[[B3:.*]]: tensor<768xf32>)
// CHECK: %[[E3:.*]] = tensor.empty
// CHECK: %[[I3:.*]] = linalg.fill
// CHECK-NOT: linalg.generic
// CHECK: %[[R3:.*]] = scf.if %{{.*}} -> (tensor<?x768xf32>) {
// CHECK-NEXT: %[[FB3:.*]] = linalg.matmul {dcmlir.kernel = "fallback"} ins(%[[X3]], %[[W3]] : {{.*}}) outs(%[[I3]] : tensor<?x768xf32>)
// CHECK-NEXT: %[[FB3B:.*]] = linalg.generic {{.*}} ins(%[[FB3]], %[[B3]] : tensor<?x768xf32>, tensor<768xf32>) outs(%[[E3]] : tensor<?x768xf32>)
// CHECK: arith.addf
// CHECK: %[[FB3A:.*]] = linalg.generic {{.*}} ins(%[[FB3B]] : tensor<?x768xf32>) outs(%[[E3]] : tensor<?x768xf32>)
// CHECK: math.tanh
// CHECK: scf.yield %[[FB3A]] : tensor<?x768xf32>
// CHECK-NEXT: } else {
// CHECK: linalg.matmul {dcmlir.kernel = "default"}
// CHECK-NEXT: linalg.generic
// CHECK: %[[K3:.*]] = linalg.matmul {compilation_info = #[[CI_SKINNY]], dcmlir.kernel = "cpu:wg8x128:v1x16:k8"}
// CHECK-NEXT: %[[K3B:.*]] = linalg.generic {{.*}} ins(%[[K3]], %[[B3]] : tensor<?x768xf32>, tensor<768xf32>)
// CHECK: %[[K3A:.*]] = linalg.generic {{.*}} ins(%[[K3B]] : tensor<?x768xf32>)
// CHECK: scf.yield %[[K3A]] : tensor<?x768xf32>
// CHECK: linalg.matmul {compilation_info = #[[CI_SQUARE]], dcmlir.kernel = "cpu:wg32x32:v8x16:k4"}
// CHECK-NEXT: linalg.generic
// CHECK: %[[SUM3:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%[[R3]] : tensor<?x768xf32>)
// CHECK: return %[[R3]], %[[SUM3]] : tensor<?x768xf32>, tensor<?xf32>
func.func @dense_bias_act(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>, %b: tensor<768xf32>) -> (tensor<?x768xf32>, tensor<?xf32>) {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16, 2 fused consumer(s) in each branch}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %biased = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : tensor<?x768xf32>, tensor<768xf32>) outs(%e : tensor<?x768xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %s = arith.addf %v, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %act = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%biased : tensor<?x768xf32>) outs(%e : tensor<?x768xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    linalg.yield %t : f32
  } -> tensor<?x768xf32>
  %row = tensor.empty(%m) : tensor<?xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%row : tensor<?xf32>) -> tensor<?xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %sum = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>], iterator_types = ["parallel", "reduction"]}
      ins(%act : tensor<?x768xf32>) outs(%acc : tensor<?xf32>) {
  ^bb0(%v: f32, %o: f32):
    %s = arith.addf %v, %o : f32
    linalg.yield %s : f32
  } -> tensor<?xf32>
  return %act, %sum : tensor<?x768xf32>, tensor<?xf32>
}

// A model's FFN epilogue (GPT-2): bias on [T, N], the [T, N] -> [1, T, N] reshape, then
// an activation DAG (two generics read the reshaped value, a third combines them). The
// whole group moves into every branch, without the reshape's unit dim (a reshape inside
// a dispatch stops IREE from distributing it): the consumers' inits are collapsed, and
// the reshape is redone once, after the cascade.
// CHECK-LABEL: func.func @dense_reshape_dag
// CHECK: %[[E6:.*]] = tensor.empty(%{{.*}}) : tensor<1x?x768xf32>
// CHECK: %[[R6:.*]] = scf.if
// CHECK: linalg.matmul {dcmlir.kernel = "fallback"}
// CHECK-NEXT: %[[B6:.*]] = linalg.generic
// CHECK: tensor.collapse_shape %[[E6]] {{\[\[}}0, 1], [2]] : tensor<1x?x768xf32> into tensor<?x768xf32>
// CHECK-NEXT: linalg.generic {{.*}} ins(%[[B6]] : tensor<?x768xf32>)
// CHECK: math.tanh
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<?x768xf32>, tensor<?x768xf32>) outs(%{{.*}} : tensor<?x768xf32>)
// CHECK: scf.yield %{{.*}} : tensor<?x768xf32>
// CHECK: %[[W6:.*]] = tensor.expand_shape %[[R6]] {{\[\[}}0, 1], [2]] output_shape [1, %{{.*}}, 768] : tensor<?x768xf32> into tensor<1x?x768xf32>
// CHECK-NEXT: return %[[W6]]
func.func @dense_reshape_dag(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>, %b: tensor<768xf32>) -> tensor<1x?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16, 5 fused consumer(s) in each branch}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %biased = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : tensor<?x768xf32>, tensor<768xf32>) outs(%e : tensor<?x768xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %s = arith.addf %v, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x768xf32>
  %wide = tensor.expand_shape %biased [[0, 1], [2]] output_shape [1, %m, 768] : tensor<?x768xf32> into tensor<1x?x768xf32>
  %e3 = tensor.empty(%m) : tensor<1x?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %halved = linalg.generic {indexing_maps = [affine_map<(a, i, j) -> (a, i, j)>, affine_map<(a, i, j) -> (a, i, j)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%wide : tensor<1x?x768xf32>) outs(%e3 : tensor<1x?x768xf32>) {
  ^bb0(%v: f32, %o: f32):
    %p = arith.mulf %v, %half : f32
    linalg.yield %p : f32
  } -> tensor<1x?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %squashed = linalg.generic {indexing_maps = [affine_map<(a, i, j) -> (a, i, j)>, affine_map<(a, i, j) -> (a, i, j)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%wide : tensor<1x?x768xf32>) outs(%e3 : tensor<1x?x768xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    linalg.yield %t : f32
  } -> tensor<1x?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %gelu = linalg.generic {indexing_maps = [affine_map<(a, i, j) -> (a, i, j)>, affine_map<(a, i, j) -> (a, i, j)>, affine_map<(a, i, j) -> (a, i, j)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%halved, %squashed : tensor<1x?x768xf32>, tensor<1x?x768xf32>) outs(%e3 : tensor<1x?x768xf32>) {
  ^bb0(%p: f32, %t: f32, %o: f32):
    %g = arith.mulf %p, %t : f32
    linalg.yield %g : f32
  } -> tensor<1x?x768xf32>
  return %gelu : tensor<1x?x768xf32>
}

// A result with two users is not fused by IREE either: nothing moves into the branches.
// CHECK-LABEL: func.func @dense_two_users
// CHECK: %[[R4:.*]] = scf.if
// CHECK: linalg.matmul {dcmlir.kernel = "fallback"}
// CHECK-NEXT: scf.yield
// CHECK: linalg.matmul {dcmlir.kernel = "default"}
// CHECK-NEXT: scf.yield
// CHECK: linalg.matmul {compilation_info = #[[CI_SKINNY]]
// CHECK-NEXT: scf.yield
// CHECK: linalg.matmul {compilation_info = #[[CI_SQUARE]]
// CHECK-NEXT: scf.yield
// CHECK: %[[G4:.*]] = linalg.generic {{.*}} ins(%[[R4]], %[[R4]] : tensor<?x768xf32>, tensor<?x768xf32>)
// CHECK: return %[[G4]]
func.func @dense_two_users(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %sq = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %r : tensor<?x768xf32>, tensor<?x768xf32>) outs(%e : tensor<?x768xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    linalg.yield %p : f32
  } -> tensor<?x768xf32>
  return %sq : tensor<?x768xf32>
}

// SwiGLU (Llama's MLP): silu(gate) * up reads two planned contractions. The product
// joins the first one's group only (gate's, with its activation); up's cascade carries
// nothing, and gate's branches read its result.
// CHECK-LABEL: func.func @swiglu
// CHECK: %[[UP:.*]] = scf.if
// CHECK: linalg.matmul {dcmlir.kernel = "fallback"}
// CHECK-NEXT: scf.yield
// CHECK-NOT: arith.mulf
// CHECK: linalg.matmul {dcmlir.kernel = "fallback"}
// CHECK-NEXT: linalg.generic
// CHECK: math.tanh
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %[[UP]] : tensor<?x768xf32>, tensor<?x768xf32>)
// CHECK: arith.mulf
func.func @swiglu(%x: tensor<?x768xf32>, %wg: tensor<768x768xf32>, %wu: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16, 2 fused consumer(s) in each branch}}
  %gate = linalg.matmul ins(%x, %wg : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %act = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%gate : tensor<?x768xf32>) outs(%e : tensor<?x768xf32>) {
  ^bb0(%v: f32, %o: f32):
    %t = math.tanh %v : f32
    linalg.yield %t : f32
  } -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16}}
  %up = linalg.matmul ins(%x, %wu : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %prod = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%act, %up : tensor<?x768xf32>, tensor<?x768xf32>) outs(%e : tensor<?x768xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    linalg.yield %p : f32
  } -> tensor<?x768xf32>
  return %prod : tensor<?x768xf32>
}

// In IREE's util.func (the global-optimization level), the cascade's dynamic
// result is tied to its size, read from the op's init before the cascade, so IREE can
// resolve it.
// CHECK-LABEL: util.func public @dense_global_opt
// CHECK: %[[I5:.*]] = linalg.fill
// CHECK: %[[D5:.*]] = tensor.dim %[[I5]], %{{.*}} : tensor<?x768xf32>
// CHECK: %[[R5:.*]] = scf.if
// CHECK: %[[T5:.*]] = flow.tensor.tie_shape %[[R5]] : tensor<?x768xf32>{%[[D5]]}
// CHECK-NEXT: util.return %[[T5]] : tensor<?x768xf32>
util.func public @dense_global_opt(%x: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x768xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
  // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16}}
  %r = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
  util.return %r : tensor<?x768xf32>
}

// In a loop that carries the activation, M is read from the init (its size traces to
// %m, defined before the loop), not from the loop-carried %x, and the cascade's result
// is tied to that size: IREE resolves the dims of a loop-carried tensor through the
// value the loop yields, and an scf.if gives it none.
// CHECK-LABEL: func.func @dense_in_loop
// CHECK: scf.for {{.*}} iter_args(%[[XL:.*]] = %{{.*}}) -> (tensor<?x768xf32>)
// CHECK: %[[IL:.*]] = linalg.fill
// CHECK: %[[ML:.*]] = tensor.dim %[[IL]], %{{.*}} : tensor<?x768xf32>
// CHECK-NOT: tensor.dim %[[XL]]
// CHECK: %[[RL:.*]] = scf.if
// CHECK: %[[TL:.*]] = flow.tensor.tie_shape %[[RL]] : tensor<?x768xf32>{%{{.*}}}
// CHECK-NEXT: scf.yield %[[TL]] : tensor<?x768xf32>
func.func @dense_in_loop(%x0: tensor<?x768xf32>, %w: tensor<768x768xf32>) -> tensor<?x768xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %m = tensor.dim %x0, %c0 : tensor<?x768xf32>
  %zero = arith.constant 0.0 : f32
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%x = %x0) -> tensor<?x768xf32> {
    %e = tensor.empty(%m) : tensor<?x768xf32>
    %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x768xf32>) -> tensor<?x768xf32>
    // expected-remark @below {{dispatch: 3 kernels, tree depth 2, range d0=1:16}}
    %y = linalg.matmul ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) outs(%init : tensor<?x768xf32>) -> tensor<?x768xf32>
    scf.yield %y : tensor<?x768xf32>
  }
  return %r : tensor<?x768xf32>
}

// A projection with a constant weight (x @ W^T, as torch's Linear) dispatched to packed
// kernels (docs/design.md section 12), on IREE's data-tiling encodings: the weight is
// encoded once, before the cascade (IREE hoists it: the weight is a constant), and every
// branch reads it; each branch is one flow.dispatch.region (activations encoded, the op,
// the result decoded, the bias consumer) whose encodings state the kernel's M bound
// (M <= 4: 4, else 16), from which IREE picks its tile. Outside 1..16 the op runs as
// IREE's own data tiling (M's iteration size ?), so the weight is only ever read packed.
// CHECK-LABEL: func.func @packed
// CHECK-SAME: (%[[X5:.*]]: tensor<?x64xf32>, %[[B5:.*]]: tensor<48xf32>)
// CHECK: %[[W5:.*]] = arith.constant dense<{{.*}}> : tensor<48x64xf32>
// CHECK: linalg.fill
// CHECK: %[[M5:.*]] = tensor.dim %[[X5]]
// CHECK: %[[WE5:.*]] = iree_encoding.set_encoding %[[W5]] encoding_dims{%[[M5]]} : tensor<48x64xf32> -> tensor<48x64xf32, #[[ENC_W]]>
// CHECK: scf.if %{{.*}} -> (tensor<?x48xf32>) {
// CHECK-NEXT: %[[FR5:.*]] = flow.dispatch.region -> (tensor<?x48xf32>{%{{.*}}}) {
// CHECK-NEXT: %[[FX5:.*]] = iree_encoding.set_encoding %[[X5]] encoding_dims{%[[M5]]}
// CHECK: %[[FM5:.*]] = linalg.matmul {{.*}} ins(%[[FX5]], %[[WE5]] :
// CHECK-NEXT: %[[FU5:.*]] = iree_encoding.unset_encoding {dcmlir.kernel = "fallback"} %[[FM5]] encoding_dims{%[[M5]]}
// CHECK-NEXT: %[[FB5:.*]] = linalg.generic {{.*}} ins(%[[FU5]], %[[B5]] : tensor<?x48xf32>, tensor<48xf32>)
// CHECK: flow.return %[[FB5]] : tensor<?x48xf32>
// CHECK: } else {
// CHECK: flow.dispatch.region
// CHECK-NEXT: %[[SX5:.*]] = iree_encoding.set_encoding %[[X5]] : tensor<?x64xf32> -> tensor<?x64xf32, #[[ENC_4]]>
// CHECK: linalg.matmul {{.*}} ins(%[[SX5]], %[[WE5]] :
// CHECK-NEXT: iree_encoding.unset_encoding {dcmlir.kernel = "packed:m4n16k1"}
// CHECK-NEXT: linalg.generic
// CHECK: flow.return
// CHECK: flow.dispatch.region
// CHECK-NEXT: %[[LX5:.*]] = iree_encoding.set_encoding %[[X5]] : tensor<?x64xf32> -> tensor<?x64xf32, #[[ENC_16]]>
// CHECK: linalg.matmul {{.*}} ins(%[[LX5]], %[[WE5]] :
// CHECK-NEXT: iree_encoding.unset_encoding {dcmlir.kernel = "packed:m16n16k1"}
// CHECK-NOT: linalg.matmul ins
// CHECK: return
func.func @packed(%x: tensor<?x64xf32>, %b: tensor<48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %w = arith.constant dense<0.25> : tensor<48x64xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  // expected-remark @below {{dispatch: 2 kernels, tree depth 1, range d0=1:16, 1 fused consumer(s) in each branch}}
  %r = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%x, %w : tensor<?x64xf32>, tensor<48x64xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %biased = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : tensor<?x48xf32>, tensor<48xf32>) outs(%e : tensor<?x48xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %s = arith.addf %v, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x48xf32>
  return %biased : tensor<?x48xf32>
}

// The same projection as x @ W (the weight K x N) dispatched to explicit mmt4d kernels
// (docs/design.md section 12): the weight is packed 32 x 1 once, before the cascade (N =
// 48 padded to 64), and each branch packs the activations M0 x 1, runs linalg.mmt4d on
// the packed weight and unpacks; the unpack takes the kernel's mark and the bias
// consumer follows it, for IREE to fuse. No dispatch region: IREE forms the pack, mmt4d
// and unpack dispatches. Outside 1..16 the kernel with the most rows (M0 = 8) runs, so
// the weight is only ever read packed.
// CHECK-LABEL: func.func @explicit
// CHECK-SAME: (%[[X6:.*]]: tensor<?x64xf32>, %[[B6:.*]]: tensor<48xf32>)
// CHECK: %[[W6:.*]] = arith.constant dense<{{.*}}> : tensor<64x48xf32>
// CHECK: %[[WP6:.*]] = linalg.pack %[[W6]] padding_value(%{{.*}} : f32) outer_dims_perm = [1, 0] inner_dims_pos = [1, 0] inner_tiles = [32, 1] into %{{.*}} : tensor<64x48xf32> -> tensor<2x64x32x1xf32>
// CHECK: scf.if %{{.*}} -> (tensor<?x48xf32>) {
// CHECK: %[[FX6:.*]] = linalg.pack %[[X6]] padding_value(%{{.*}} : f32) inner_dims_pos = [0, 1] inner_tiles = [8, 1] into %{{.*}} : tensor<?x64xf32> -> tensor<?x64x8x1xf32>
// CHECK: %[[FM6:.*]] = linalg.mmt4d {compilation_info = #[[CI_MM_8]]} ins(%[[FX6]], %[[WP6]] : tensor<?x64x8x1xf32>, tensor<2x64x32x1xf32>)
// CHECK: %[[FU6:.*]] = linalg.unpack %[[FM6]] inner_dims_pos = [0, 1] inner_tiles = [8, 32] into %{{.*}} {dcmlir.kernel = "fallback"} : tensor<?x2x8x32xf32> -> tensor<?x48xf32>
// CHECK-NEXT: %[[FB6:.*]] = linalg.generic {{.*}} ins(%[[FU6]], %[[B6]] : tensor<?x48xf32>, tensor<48xf32>)
// CHECK: scf.yield %[[FB6]] : tensor<?x48xf32>
// CHECK: } else {
// CHECK: linalg.pack %[[X6]] {{.*}} inner_tiles = [1, 1]
// CHECK: linalg.mmt4d {compilation_info = #[[CI_MM_1]]} ins(%{{.*}}, %[[WP6]] : tensor<?x64x1x1xf32>, tensor<2x64x32x1xf32>)
// CHECK: linalg.unpack {{.*}} {dcmlir.kernel = "mmt4d:m1n32k1"}
// CHECK-NEXT: linalg.generic
// CHECK: linalg.pack %[[X6]] {{.*}} inner_tiles = [8, 1]
// CHECK: linalg.mmt4d {compilation_info = #[[CI_MM_8]]} ins(%{{.*}}, %[[WP6]] : tensor<?x64x8x1xf32>, tensor<2x64x32x1xf32>)
// CHECK: linalg.unpack {{.*}} {dcmlir.kernel = "mmt4d:m8n32k1"}
// CHECK-NOT: linalg.matmul
// CHECK: return
func.func @explicit(%x: tensor<?x64xf32>, %b: tensor<48xf32>) -> tensor<?x48xf32> {
  %c0 = arith.constant 0 : index
  %w = arith.constant dense<0.5> : tensor<64x48xf32>
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x48xf32>) -> tensor<?x48xf32>
  // expected-remark @below {{dispatch: 2 kernels, tree depth 1, range d0=1:16, 1 fused consumer(s) in each branch}}
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x48xf32>) outs(%init : tensor<?x48xf32>) -> tensor<?x48xf32>
  // expected-remark @below {{left untouched: 'linalg.generic' is not a contraction}}
  %biased = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%r, %b : tensor<?x48xf32>, tensor<48xf32>) outs(%e : tensor<?x48xf32>) {
  ^bb0(%v: f32, %bias: f32, %o: f32):
    %s = arith.addf %v, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x48xf32>
  return %biased : tensor<?x48xf32>
}

// Shapes with their own build (docs/design.md section 13): M = 2 and M = 3 run IREE's
// default on the op made static by a tensor.cast pair per operand, chosen by a case
// number (cmpi eq, select) before the tree; any other M in 1..16 runs the tree.
func.func @exact(%x: tensor<?x32xf32>, %w: tensor<32x16xf32>) -> tensor<?x16xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x32xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x16xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<?x16xf32>) -> tensor<?x16xf32>
  // expected-remark @below {{dispatch: 2 kernels, tree depth 1, range d0=1:16, 2 exact shape(s) first}}
  %r = linalg.matmul ins(%x, %w : tensor<?x32xf32>, tensor<32x16xf32>) outs(%init : tensor<?x16xf32>) -> tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}
// CHECK-LABEL: func.func @exact
// CHECK-SAME: (%[[X6:.*]]: tensor<?x32xf32>, %[[W6:.*]]: tensor<32x16xf32>)
// CHECK: %[[INIT6:.*]] = linalg.fill
// CHECK: %[[M6:.*]] = tensor.dim %[[X6]]
// CHECK: scf.if %{{.*}} -> (tensor<?x16xf32>) {
// CHECK: linalg.matmul {dcmlir.kernel = "fallback"}
// CHECK: } else {
// CHECK: %[[IS3:.*]] = arith.cmpi eq, %[[M6]], %c3
// CHECK-NEXT: %c1{{.*}} = arith.constant 1 : index
// CHECK-NEXT: %[[CASE3:.*]] = arith.select %[[IS3]], %c1{{.*}}, %c2
// CHECK: %[[IS2:.*]] = arith.cmpi eq, %[[M6]], %c2
// CHECK: %[[CASE:.*]] = arith.select %[[IS2]], %c0{{.*}}, %[[CASE3]]
// CHECK: %[[HIT:.*]] = arith.cmpi ult, %[[CASE]], %c2
// CHECK-NEXT: scf.if %[[HIT]] -> (tensor<?x16xf32>) {
// CHECK: %[[S2:.*]] = tensor.cast %[[X6]] : tensor<?x32xf32> to tensor<2x32xf32>
// CHECK-NEXT: %[[D2:.*]] = tensor.cast %[[S2]] : tensor<2x32xf32> to tensor<?x32xf32>
// The accumulator is filled again at the static type, not cast from the shared fill
// (a cast of it slowed the other branches' dispatches in IREE; design.md section 13).
// CHECK-NOT: tensor.cast %[[INIT6]]
// CHECK-NEXT: %[[E2:.*]] = tensor.empty() : tensor<2x16xf32>
// CHECK-NEXT: %[[I2:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E2]] : tensor<2x16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT: %[[J2:.*]] = tensor.cast %[[I2]] : tensor<2x16xf32> to tensor<?x16xf32>
// CHECK-NEXT: linalg.matmul {dcmlir.kernel = "exact:2"} ins(%[[D2]], %[[W6]] : {{.*}}) outs(%[[J2]] :
// CHECK: tensor.cast %[[X6]] : tensor<?x32xf32> to tensor<3x32xf32>
// CHECK: linalg.matmul {dcmlir.kernel = "exact:3"}
// CHECK: } else {
// CHECK: arith.cmpi ule, %[[M6]], %c8
// CHECK: linalg.matmul {dcmlir.kernel = "default"}
// CHECK: dcmlir.kernel = "cpu:wg8x128:v1x16:k8"
// CHECK: return
