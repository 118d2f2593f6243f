// RUN: nanoir-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @unknown_function(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.unary "expp" %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: error: nf.unary: unknown function 'expp'

// -----

func.func @missing_params(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.unary "pow" %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: error: nf.unary: pow takes 1 parameter(s) (exponent), got 0

// -----

func.func @nan_inside_the_domain(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.unary "fmod" %x {params = array<f64: 0.0>} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: error: nf.unary: fmod's divisor must not be 0 (the result would be NaN)

// -----

func.func @predicate(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.compare "lte" %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: error: nf.compare: predicate 'lte' is not one of eq, ne, lt, le, gt, ge, and, or, xor

// -----

func.func @reduce_kind(%x: tensor<4x3xf32>) -> tensor<4x1xf32> {
  %y = nf.reduce "mean" %x {dims = array<i64: 1>} : tensor<4x3xf32> -> tensor<4x1xf32>
  func.return %y : tensor<4x1xf32>
}
// CHECK: error: nf.reduce: kind 'mean' is not one of sum, max, min, prod

// -----

func.func @reduce_shape(%x: tensor<4x3xf32>) -> tensor<4xf32> {
  %y = nf.reduce "sum" %x {dims = array<i64: 1>} : tensor<4x3xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: error: nf.reduce: result 4 is not 4x3 reduced over [1] (kept as size 1: 4x1)

// -----

func.func @arg_reduce_dims(%x: tensor<4x3xf32>) -> tensor<1x1xf32> {
  %y = nf.arg_reduce "argmax" %x {dims = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<1x1xf32>
  func.return %y : tensor<1x1xf32>
}
// CHECK: error: nf.arg_reduce: reduces one dim, got dims [0, 1]

// -----

func.func @bicubic_x3(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x12x4xf32> {
  %y = nf.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<1x2x4x4xf32> -> tensor<1x2x12x4xf32>
  func.return %y : tensor<1x2x12x4xf32>
}
// CHECK: error: nf.upsample_bicubic: 1x2x4x4 -> 1x2x12x4 must keep batch, channels and rank and keep or double each static spatial dim (x2 only)

// -----

func.func @normalize_axis(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %y = nf.normalize %x {axis = 2 : i64} : tensor<4x3xf32>
  func.return %y : tensor<4x3xf32>
}
// CHECK: error: nf.normalize: axis 2 is out of range for rank 2
