// RUN: nanoir-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @bits_zero(%x: tensor<4xf32>) -> tensor<4xf32> {
  %q = nq.fake_quant %x {bits = 0 : i64, exp = dense<7> : tensor<1xi8>} : tensor<4xf32>
  func.return %q : tensor<4xf32>
}
// CHECK: invalid.mlir:4:3
// CHECK: error: nq.fake_quant: bits = 0 is outside the supported 1..16

// -----

func.func @bits_wide(%x: tensor<4xf32>) -> tensor<4xf32> {
  %q = nq.fake_quant %x {bits = 32 : i64, exp = dense<7> : tensor<1xi8>} : tensor<4xf32>
  func.return %q : tensor<4xf32>
}
// CHECK: error: nq.fake_quant: bits = 32 is outside the supported 1..16

// -----

func.func @exp_no_broadcast(%x: tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<[1, 2, 3]> : tensor<3xi8>} : tensor<?x16x8x8xf32>
  func.return %q : tensor<?x16x8x8xf32>
}
// CHECK: error: nq.fake_quant: exp of shape 3 does not broadcast against the input ?x16x8x8

// -----

func.func @exp_grows_input(%x: tensor<16x1xf32>) -> tensor<16x1xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<[1, 2, 3]> : tensor<3xi8>} : tensor<16x1xf32>
  func.return %q : tensor<16x1xf32>
}
// CHECK: error: nq.fake_quant: exp of shape 3 does not broadcast against the input 16x1

// -----

func.func @exp_float(%x: tensor<4xf32>) -> tensor<4xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<7.0> : tensor<1xf32>} : tensor<4xf32>
  func.return %q : tensor<4xf32>
}
// CHECK: error: nq.fake_quant: exp must be an integer tensor, got tensor<1xf32>

// -----

func.func @exp_out_of_range(%x: tensor<2xf32>) -> tensor<2xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<[7, 99]> : tensor<2xi8>} : tensor<2xf32>
  func.return %q : tensor<2xf32>
}
// CHECK: error: nq.fake_quant: exponent 99 is outside -60..60

// -----

func.func @bad_rounding(%x: tensor<2xf32>) -> tensor<2xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<7> : tensor<1xi8>, rounding = #nq.rounding<nearest>} : tensor<2xf32>
  func.return %q : tensor<2xf32>
}
// CHECK: invalid.mlir:[[# @LINE - 3]]:{{[0-9]+}}
// CHECK: Expected `trunc`, `floor`, `half_up`, or `half_even`

// -----

// Exponents are read as whole bytes: an i4 exp used to pass and crash nanoir-run (KeyError: 4).
func.func @narrow_exp(%x: tensor<2xf32>) -> tensor<2xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<1> : tensor<1xi4>} : tensor<2xf32>
  func.return %q : tensor<2xf32>
}
// CHECK: invalid.mlir:[[# @LINE - 3]]:3
// CHECK: error: nq.fake_quant: exp must hold i8, i16, i32 or i64 integers, got tensor<1xi4>
