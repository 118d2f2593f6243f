// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// FuseLookupTableFakeQuant for the float-only functions lower-to-hw.mlir does not cover: each
// becomes an nh.lut over every input code. Input: 2-bit codes -2..1 at exponent 0; output: 4
// bits at exponent 3, trunc(8 f(x)) saturated to -8..7:
//   hardsigmoid relu6(x + 3) / 6:   8 [1/6, 1/3, 1/2, 2/3]        -> 1, 2, 4, 5
//   hardswish x hardsigmoid(x):     8 [-1/3, -1/3, 0, 2/3]        -> -2, -2, 0, 5
//   silu x sigmoid(x):              8 [-0.238, -0.269, 0, 0.731]  -> -1, -2, 0, 5
//   gelu x Phi(x):                  8 [-0.0455, -0.159, 0, 0.841] -> 0, -1, 0, 6
//   leaky_relu (alpha 0.25):        8 [-0.5, -0.25, 0, 1]         -> -4, -2, 0, 7 (8 saturates)
// Each table records the nf op it evaluates and its float params (function, params), except
// gelu's, whose form is a string property.

// CHECK-LABEL: func.func @lookup_tables
// CHECK-NEXT:  nh.lut %x {table = array<i64: 1, 2, 4, 5>, function = "hardsigmoid", params = array<f64: 0.16666666666666666, 5.000000e-01>} : tensor<?x4xi2, #nh.fixed<0, BC>> -> tensor<?x4xi4, #nh.fixed<3, BC>>
// CHECK-NEXT:  nh.lut %x {table = array<i64: -2, -2, 0, 5>, function = "hardswish"}
// CHECK-NEXT:  nh.lut %x {table = array<i64: -1, -2, 0, 5>, function = "silu"}
// CHECK-NEXT:  nh.lut %x {table = array<i64: 0, -1, 0, 6>} :
// CHECK-NEXT:  nh.lut %x {table = array<i64: -4, -2, 0, 7>, function = "leaky_relu", params = array<f64: 2.500000e-01>}
// CHECK-NOT:   nf.

func.func @lookup_tables(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) {
  %xq = nq.fake_quant %x {bits = 2 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x4xf32>
  %a = nf.hardsigmoid %xq : tensor<?x4xf32>
  %aq = nq.fake_quant %a {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %b = nf.hardswish %xq : tensor<?x4xf32>
  %bq = nq.fake_quant %b {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %c = nf.silu %xq : tensor<?x4xf32>
  %cq = nq.fake_quant %c {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %d = nf.gelu %xq : tensor<?x4xf32>
  %dq = nq.fake_quant %d {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %e = nf.leaky_relu %xq {alpha = 0.25 : f64} : tensor<?x4xf32>
  %eq = nq.fake_quant %e {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %aq, %bq, %cq, %dq, %eq : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>
}
