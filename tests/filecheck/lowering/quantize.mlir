// RUN: nanoir-opt %s -p 'quantize{exponents="%S/inputs/quantize-exponents.json"}' | filecheck %s

// quantize with imported exponents (inputs/quantize-exponents.json, keyed by tensor name), so
// that no calibration runs: 8-bit fake-quants on the input, the weights (per output channel,
// as imported), the bias and every other named constant (per tensor), and on the result of
// every op except data movement (the transpose keeps its input's grid). The float constants
// stay for lower-to-hw to fold.

// CHECK-LABEL: func.func @main
// CHECK:       %[[X:.*]] = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>}
// CHECK:       %[[W:.*]] = nf.constant "conv.weight"
// CHECK-NEXT:  %[[WQ:.*]] = nq.fake_quant %[[W]] {bits = 8 : i64, exp = dense<{{\[\[\[}}6]], {{\[\[}}5]]]> : tensor<2x1x1xi8>}
// CHECK:       %[[B:.*]] = nf.constant "conv.bias"
// CHECK-NEXT:  %[[BQ:.*]] = nq.fake_quant %[[B]] {bits = 8 : i64, exp = dense<4> : tensor<1xi8>}
// CHECK-NEXT:  %[[C:.*]] = nf.conv %[[X]], %[[WQ]], %[[BQ]]
// CHECK-NEXT:  %[[CQ:.*]] = nq.fake_quant %[[C]] {bits = 8 : i64, exp = dense<3> : tensor<1xi8>}
// CHECK-NEXT:  %[[R:.*]] = nf.relu %[[CQ]]
// CHECK-NEXT:  %[[RQ:.*]] = nq.fake_quant %[[R]] {bits = 8 : i64, exp = dense<3> : tensor<1xi8>}
// CHECK:       %[[AQ:.*]] = nq.fake_quant %{{.*}} {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<2xf32>
// CHECK-NEXT:  %[[P:.*]] = nf.prelu %[[RQ]], %[[AQ]]
// CHECK-NEXT:  %[[PQ:.*]] = nq.fake_quant %[[P]] {bits = 8 : i64, exp = dense<2> : tensor<1xi8>}
// CHECK-COUNT-4: nq.fake_quant %{{.*}} {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<2xf32>
// CHECK:       %[[N:.*]] = nf.batch_norm %[[PQ]],
// CHECK-NEXT:  %[[NQ:.*]] = nq.fake_quant %[[N]] {bits = 8 : i64, exp = dense<1> : tensor<1xi8>}
// CHECK-NEXT:  %[[T:.*]] = nf.transpose %[[NQ]]
// CHECK-NEXT:  func.return %[[T]]

func.func @main(%x: tensor<?x1x4xf32>) -> tensor<?x4x2xf32> {
  %w = nf.constant "conv.weight" dense<[[[0.5, -0.25, 1.0]], [[0.75, 0.125, -1.5]]]> : tensor<2x1x3xf32>
  %b = nf.constant "conv.bias" dense<[0.5, -1.0]> : tensor<2xf32>
  %c = nf.conv %x, %w, %b {pads = array<i64: 1, 1>} : (tensor<?x1x4xf32>, tensor<2x1x3xf32>, tensor<2xf32>) -> tensor<?x2x4xf32>
  %r = nf.relu %c : tensor<?x2x4xf32>
  %a = nf.constant "prelu.weight" dense<[0.25, -0.5]> : tensor<2xf32>
  %p = nf.prelu %r, %a : (tensor<?x2x4xf32>, tensor<2xf32>) -> tensor<?x2x4xf32>
  %g = nf.constant "bn.weight" dense<[1.0, 3.0]> : tensor<2xf32>
  %be = nf.constant "bn.bias" dense<0.5> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<0.0> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<2.0> : tensor<2xf32>
  %n = nf.batch_norm %p, %g, %be, %m, %v : (tensor<?x2x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x4xf32>
  %t = nf.transpose %n {perm = array<i64: 0, 2, 1>} : tensor<?x2x4xf32> -> tensor<?x4x2xf32>
  func.return %t : tensor<?x4x2xf32>
}
