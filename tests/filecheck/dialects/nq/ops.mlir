// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @fake_quant
func.func @fake_quant(%x: tensor<?x3x1x5xf32>, %w: tensor<2x3x3x3xf32>, %b: tensor<2xf32>) -> tensor<?x3x1x5xf32> {
  // CHECK-NEXT: %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x3x1x5xf32>
  // GENERIC: %q = "nq.fake_quant"(%x) <{bits = 8 : i64, exp = dense<7> : tensor<1xi8>, rounding = #nq.rounding<trunc>}> : (tensor<?x3x1x5xf32>) -> tensor<?x3x1x5xf32>
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x3x1x5xf32>
  // CHECK-NEXT: %w4 = nq.fake_quant %w {bits = 4 : i64, exp = dense<{{\[\[\[\[}}3]]], {{\[\[\[}}-2]]]]> : tensor<2x1x1x1xi8>, rounding = #nq.rounding<half_even>} : tensor<2x3x3x3xf32>
  %w4 = nq.fake_quant %w {bits = 4 : i64, exp = dense<[[[[3]]], [[[-2]]]]> : tensor<2x1x1x1xi8>, rounding = #nq.rounding<half_even>} : tensor<2x3x3x3xf32>
  // CHECK-NEXT: %w1 = nq.fake_quant %w {bits = 1 : i64, exp = dense<0> : tensor<1xi8>, rounding = #nq.rounding<floor>} : tensor<2x3x3x3xf32>
  %w1 = nq.fake_quant %w {bits = 1 : i64, exp = dense<0> : tensor<1xi8>, rounding = #nq.rounding<floor>} : tensor<2x3x3x3xf32>
  // CHECK-NEXT: %a = nq.fake_quant %x {bits = 2 : i64, exp = dense<[{{\[\[}}1]], {{\[\[}}2]], {{\[\[}}-3]]]> : tensor<3x1x1xi32>, rounding = #nq.rounding<half_up>} : tensor<?x3x1x5xf32>
  %a = nq.fake_quant %x {bits = 2 : i64, exp = dense<[[[1]], [[2]], [[-3]]]> : tensor<3x1x1xi32>, rounding = #nq.rounding<half_up>} : tensor<?x3x1x5xf32>
  // Full-shape exponents.
  // CHECK-NEXT: %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<[7, 6]> : tensor<2xi8>} : tensor<2xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<[7, 6]> : tensor<2xi8>} : tensor<2xf32>
  // An exponent chosen for a join keeps its origin.
  // CHECK-NEXT: %j = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>, origin = "join:%layer1.0"} : tensor<?x3x1x5xf32>
  // GENERIC: %j = "nq.fake_quant"(%x) <{bits = 8 : i64, exp = dense<5> : tensor<1xi8>, origin = "join:%layer1.0", rounding = #nq.rounding<trunc>}> : (tensor<?x3x1x5xf32>) -> tensor<?x3x1x5xf32>
  %j = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>, origin = "join:%layer1.0"} : tensor<?x3x1x5xf32>
  func.return %q : tensor<?x3x1x5xf32>
}
