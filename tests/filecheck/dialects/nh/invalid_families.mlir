// RUN: nanoir-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @compare_unaligned(%x: tensor<4xi8, #nh.fixed<5, C>>, %y: tensor<4xi8, #nh.fixed<4, C>>) -> tensor<4xi2, #nh.fixed<0, C>> {
  %m = nh.compare "lt" %x, %y : (tensor<4xi8, #nh.fixed<5, C>>, tensor<4xi8, #nh.fixed<4, C>>) -> tensor<4xi2, #nh.fixed<0, C>>
  func.return %m : tensor<4xi2, #nh.fixed<0, C>>
}
// CHECK: error: nh.compare: operands must be aligned to one exponent: exponents 5 and 4 differ

// -----

func.func @compare_result(%x: tensor<4xi8, #nh.fixed<5, C>>) -> tensor<4xi2, #nh.fixed<1, C>> {
  %m = nh.compare "lt" %x, %x : (tensor<4xi8, #nh.fixed<5, C>>, tensor<4xi8, #nh.fixed<5, C>>) -> tensor<4xi2, #nh.fixed<1, C>>
  func.return %m : tensor<4xi2, #nh.fixed<1, C>>
}
// CHECK: error: nh.compare: the result holds 0 and 1 at exponent 0 (i2 or wider), got i2 at exponent 1

// -----

func.func @select_narrow(%c: tensor<4xi2, #nh.fixed<0, C>>, %x: tensor<4xi16, #nh.fixed<5, C>>, %y: tensor<4xi8, #nh.fixed<5, C>>) -> tensor<4xi8, #nh.fixed<5, C>> {
  %z = nh.select %c, %x, %y : (tensor<4xi2, #nh.fixed<0, C>>, tensor<4xi16, #nh.fixed<5, C>>, tensor<4xi8, #nh.fixed<5, C>>) -> tensor<4xi8, #nh.fixed<5, C>>
  func.return %z : tensor<4xi8, #nh.fixed<5, C>>
}
// CHECK: error: nh.select: result i8 cannot hold the codes of i16 and i8

// -----

func.func @sum_overflow(%x: tensor<4x300xi8, #nh.fixed<5, CD>>) -> tensor<4x1xi16, #nh.fixed<5, CD>> {
  %s = nh.reduce "sum" %x {dims = array<i64: 1>} : tensor<4x300xi8, #nh.fixed<5, CD>> -> tensor<4x1xi16, #nh.fixed<5, CD>>
  func.return %s : tensor<4x1xi16, #nh.fixed<5, CD>>
}
// CHECK: error: nh.reduce: result i16 may overflow; the exact result needs i17

// -----

func.func @sum_across_channels(%x: tensor<4x2xi8, #nh.fixed<[5, 6, 5, 5], CD>>) -> tensor<1x2xi16, #nh.fixed<5, CD>> {
  %s = nh.reduce "sum" %x {dims = array<i64: 0>} : tensor<4x2xi8, #nh.fixed<[5, 6, 5, 5], CD>> -> tensor<1x2xi16, #nh.fixed<5, CD>>
  func.return %s : tensor<1x2xi16, #nh.fixed<5, CD>>
}
// CHECK: error: nh.reduce: the input's per-channel exponents run along reduced dim 0; align them to one exponent first

// -----

func.func @argmax_exponent(%x: tensor<4x3xi8, #nh.fixed<5, CD>>) -> tensor<4x1xi32, #nh.fixed<5, CD>> {
  %i = nh.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<4x3xi8, #nh.fixed<5, CD>> -> tensor<4x1xi32, #nh.fixed<5, CD>>
  func.return %i : tensor<4x1xi32, #nh.fixed<5, CD>>
}
// CHECK: error: nh.arg_reduce: the result holds argmax's integers at exponent 0 (i3 or wider), got i32 at exponent 5

// -----

func.func @cumsum_overflow(%x: tensor<4x3xi16, #nh.fixed<5, CD>>) -> tensor<4x3xi16, #nh.fixed<5, CD>> {
  %c = nh.cumsum %x {dims = array<i64: 1>} : tensor<4x3xi16, #nh.fixed<5, CD>> -> tensor<4x3xi16, #nh.fixed<5, CD>>
  func.return %c : tensor<4x3xi16, #nh.fixed<5, CD>>
}
// CHECK: error: nh.cumsum: result i16 may overflow; the exact result needs i18

// -----

func.func @bicubic_exponent(%x: tensor<1x2x3x3xi8, #nh.fixed<5, BCMD>>) -> tensor<1x2x6x3xi32, #nh.fixed<5, BCMD>> {
  %b = nh.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<1x2x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<1x2x6x3xi32, #nh.fixed<5, BCMD>>
  func.return %b : tensor<1x2x6x3xi32, #nh.fixed<5, BCMD>>
}
// CHECK: error: nh.upsample_bicubic: the result's exponent is the input's + 8: exponents 13 and 5 differ

// -----

func.func @normalize_dynamic(%x: tensor<2x?xi8, #nh.fixed<5, BC>>) -> tensor<2x?xi8, #nh.fixed<7, BC>> {
  %n = nh.normalize %x {axis = 1 : i64, bits = 8 : i64, max_shift = 30 : i64, eps_term = 0 : i64, guard = 24 : i64, nudge = 10 : i64} : tensor<2x?xi8, #nh.fixed<5, BC>> -> tensor<2x?xi8, #nh.fixed<7, BC>>
  func.return %n : tensor<2x?xi8, #nh.fixed<7, BC>>
}
// CHECK: error: nh.normalize: the normalised dim must be static
