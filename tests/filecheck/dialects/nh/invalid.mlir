// RUN: nanoir-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @float_at_nh(%x: tensor<4xf32, #nh.fixed<7, C>>) -> tensor<4xf32, #nh.fixed<7, C>> {
  %y = nh.relu %x : tensor<4xf32, #nh.fixed<7, C>>
  func.return %y : tensor<4xf32, #nh.fixed<7, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.relu: input has element type f32; the nh level holds only integers

// -----

func.func @no_encoding(%x: tensor<4xi8>) -> tensor<4xi8> {
  %y = nh.relu %x : tensor<4xi8>
  func.return %y : tensor<4xi8>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.relu: input of type tensor<4xi8> lacks the #nh.fixed<exp, layout> encoding

// -----

func.func @odd_width(%x: tensor<4xi3, #nh.fixed<1, C>>) -> tensor<4xi3, #nh.fixed<1, C>> {
  %y = nh.relu %x : tensor<4xi3, #nh.fixed<1, C>>
  func.return %y : tensor<4xi3, #nh.fixed<1, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.relu: input is i3; nh allows i1, i2, i4, i8, i16, i32

// -----

func.func @layout_rank(%x: tensor<2x4xi8, #nh.fixed<1, BCMD>>) -> tensor<2x4xi8, #nh.fixed<1, BCMD>> {
  %y = nh.relu %x : tensor<2x4xi8, #nh.fixed<1, BCMD>>
  func.return %y : tensor<2x4xi8, #nh.fixed<1, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.relu: input has rank 2 but layout 'BCMD'

// -----

func.func @channel_count(%x: tensor<2x4xi8, #nh.fixed<[1, 2, 3], BC>>) -> tensor<2x4xi8, #nh.fixed<[1, 2, 3], BC>> {
  %y = nh.relu %x : tensor<2x4xi8, #nh.fixed<[1, 2, 3], BC>>
  func.return %y : tensor<2x4xi8, #nh.fixed<[1, 2, 3], BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.relu: input has 3 per-channel exponents but 4 channels along dim 1

// -----

func.func @layout_letters(%x: tensor<2x4xi8, #nh.fixed<1, BX>>) -> tensor<2x4xi8, #nh.fixed<1, BX>> {
  %y = nh.relu %x : tensor<2x4xi8, #nh.fixed<1, BX>>
  func.return %y : tensor<2x4xi8, #nh.fixed<1, BX>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: layout 'BX' must be a string of the letters BCMD

// -----

func.func @per_channel_without_c(%x: tensor<2x4xi8, #nh.fixed<[1, 2], MD>>) -> tensor<2x4xi8, #nh.fixed<[1, 2], MD>> {
  %y = nh.relu %x : tensor<2x4xi8, #nh.fixed<[1, 2], MD>>
  func.return %y : tensor<2x4xi8, #nh.fixed<[1, 2], MD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: per-channel exponents need a C in the layout 'MD'

// -----

func.func @constant_range() -> tensor<2xi4, #nh.fixed<3, C>> {
  %y = nh.constant dense<[7, 8]> : tensor<2xi8> -> tensor<2xi4, #nh.fixed<3, C>>
  func.return %y : tensor<2xi4, #nh.fixed<3, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.constant: code 8 does not fit i4 (-8..7)

// -----

func.func @constant_binary_zero() -> tensor<2xi1, #nh.fixed<0, C>> {
  %y = nh.constant dense<[1, 0]> : tensor<2xi8> -> tensor<2xi1, #nh.fixed<0, C>>
  func.return %y : tensor<2xi1, #nh.fixed<0, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.constant: code 0 does not fit i1 (-1 or +1)

// -----

func.func @constant_shape() -> tensor<3xi8, #nh.fixed<3, C>> {
  %y = nh.constant dense<[1, 2]> : tensor<2xi8> -> tensor<3xi8, #nh.fixed<3, C>>
  func.return %y : tensor<3xi8, #nh.fixed<3, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.constant: data shape 2 differs from the result shape 3

// -----

func.func @conv_exponent(%x: tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, %w: tensor<4x3x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi32, #nh.fixed<8, BCMD>> {
  %y = nh.conv %x, %w : (tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, tensor<4x3x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi32, #nh.fixed<8, BCMD>>
  func.return %y : tensor<?x4x8x8xi32, #nh.fixed<8, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv: result exponent must be input + weight exponent: exponents 9 and 8 differ

// -----

func.func @conv_bias_alignment(%x: tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, %w: tensor<4x3x1x1xi8, #nh.fixed<2, CCDD>>, %b: tensor<4xi32, #nh.fixed<7, C>>) -> tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>> {
  %y = nh.conv %x, %w, %b : (tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, tensor<4x3x1x1xi8, #nh.fixed<2, CCDD>>, tensor<4xi32, #nh.fixed<7, C>>) -> tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>>
  func.return %y : tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv: bias must be aligned to the accumulator exponent: exponents 7 and 9 differ

// -----

func.func @conv_mixed_input_exps(%x: tensor<?x2x8x8xi8, #nh.fixed<[7, 6], BCMD>>, %w: tensor<4x2x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>> {
  %y = nh.conv %x, %w : (tensor<?x2x8x8xi8, #nh.fixed<[7, 6], BCMD>>, tensor<4x2x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>>
  func.return %y : tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv: input channels summed together have different exponents [7, 6]; requantize them to one exponent first

// -----

func.func @conv_not_i32(%x: tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, %w: tensor<4x3x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi16, #nh.fixed<9, BCMD>> {
  %y = nh.conv %x, %w : (tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, tensor<4x3x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi16, #nh.fixed<9, BCMD>>
  func.return %y : tensor<?x4x8x8xi16, #nh.fixed<9, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv: result must be an i32 accumulator, got i16

// -----

func.func @conv_groups(%x: tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, %w: tensor<4x2x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>> {
  %y = nh.conv %x, %w : (tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, tensor<4x2x1x1xi8, #nh.fixed<2, CCDD>>) -> tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>>
  func.return %y : tensor<?x4x8x8xi32, #nh.fixed<9, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv: input has 3 channels but weight expects 2 per group x 1 groups = 2

// -----

func.func @linear_per_channel_input(%x: tensor<?x2xi8, #nh.fixed<[1, 2], BC>>, %w: tensor<3x2xi8, #nh.fixed<2, CC>>) -> tensor<?x3xi32, #nh.fixed<3, BC>> {
  %y = nh.linear %x, %w : (tensor<?x2xi8, #nh.fixed<[1, 2], BC>>, tensor<3x2xi8, #nh.fixed<2, CC>>) -> tensor<?x3xi32, #nh.fixed<3, BC>>
  func.return %y : tensor<?x3xi32, #nh.fixed<3, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.linear: input features are summed together, so the input needs one exponent, got [1, 2]

// -----

func.func @matmul_exponent(%a: tensor<4x8xi8, #nh.fixed<4, MC>>, %b: tensor<8x5xi8, #nh.fixed<6, CC>>) -> tensor<4x5xi32, #nh.fixed<11, MC>> {
  %y = nh.matmul %a, %b : (tensor<4x8xi8, #nh.fixed<4, MC>>, tensor<8x5xi8, #nh.fixed<6, CC>>) -> tensor<4x5xi32, #nh.fixed<11, MC>>
  func.return %y : tensor<4x5xi32, #nh.fixed<11, MC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.matmul: result exponent 11 must be 4 + 6 = 10

// -----

func.func @add_unaligned(%a: tensor<?x4xi8, #nh.fixed<4, BC>>, %b: tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x4xi16, #nh.fixed<4, BC>> {
  %y = nh.add %a, %b : (tensor<?x4xi8, #nh.fixed<4, BC>>, tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x4xi16, #nh.fixed<4, BC>>
  func.return %y : tensor<?x4xi16, #nh.fixed<4, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.add: operands must be aligned to one exponent: exponents 4 and 5 differ

// -----

func.func @add_overflow(%a: tensor<?x4xi8, #nh.fixed<4, BC>>, %b: tensor<?x4xi8, #nh.fixed<4, BC>>) -> tensor<?x4xi8, #nh.fixed<4, BC>> {
  %y = nh.sub %a, %b : (tensor<?x4xi8, #nh.fixed<4, BC>>, tensor<?x4xi8, #nh.fixed<4, BC>>) -> tensor<?x4xi8, #nh.fixed<4, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<4, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.sub: result i8 may overflow; the exact result needs i9

// -----

func.func @mul_exponent(%a: tensor<?x4xi8, #nh.fixed<4, BC>>, %b: tensor<?x4xi8, #nh.fixed<[1, 1, 2, 2], BC>>) -> tensor<?x4xi16, #nh.fixed<5, BC>> {
  %y = nh.mul %a, %b : (tensor<?x4xi8, #nh.fixed<4, BC>>, tensor<?x4xi8, #nh.fixed<[1, 1, 2, 2], BC>>) -> tensor<?x4xi16, #nh.fixed<5, BC>>
  func.return %y : tensor<?x4xi16, #nh.fixed<5, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.mul: result exponent must be lhs + rhs exponent: exponents [5, 5, 6, 6] and 5 differ

// -----

func.func @mul_overflow(%a: tensor<?x4xi8, #nh.fixed<4, BC>>, %b: tensor<?x4xi4, #nh.fixed<1, BC>>) -> tensor<?x4xi8, #nh.fixed<5, BC>> {
  %y = nh.mul %a, %b : (tensor<?x4xi8, #nh.fixed<4, BC>>, tensor<?x4xi4, #nh.fixed<1, BC>>) -> tensor<?x4xi8, #nh.fixed<5, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<5, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.mul: result i8 may overflow; the exact result needs i12

// -----

func.func @requant_shift(%x: tensor<?x4xi32, #nh.fixed<10, BC>>) -> tensor<?x4xi8, #nh.fixed<7, BC>> {
  %y = nh.requant %x {shift = array<i64: 2>} : tensor<?x4xi32, #nh.fixed<10, BC>> -> tensor<?x4xi8, #nh.fixed<7, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<7, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.requant: shift must equal input exponent - result exponent: exponents 3 and 2 differ

// -----

func.func @requant_per_channel_count(%x: tensor<?x4xi32, #nh.fixed<[10, 10, 11, 11], BC>>) -> tensor<?x4xi8, #nh.fixed<7, BC>> {
  %y = nh.requant %x {shift = array<i64: 3, 4>} : tensor<?x4xi32, #nh.fixed<[10, 10, 11, 11], BC>> -> tensor<?x4xi8, #nh.fixed<7, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<7, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.requant: 2 shifts for 4 channels

// -----

func.func @requant_float_result(%x: tensor<?x4xi32, #nh.fixed<10, BC>>) -> tensor<?x4xf32> {
  %y = nh.requant %x {shift = array<i64: 3>} : tensor<?x4xi32, #nh.fixed<10, BC>> -> tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.requant: result has element type f32; the nh level holds only integers

// -----

func.func @lut_entries(%x: tensor<?x4xi2, #nh.fixed<1, BC>>) -> tensor<?x4xi8, #nh.fixed<7, BC>> {
  %y = nh.lut %x {table = array<i64: 1, 2, 3>} : tensor<?x4xi2, #nh.fixed<1, BC>> -> tensor<?x4xi8, #nh.fixed<7, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<7, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.lut: table has 3 entries, an i2 input needs 4

// -----

func.func @lut_value(%x: tensor<?x4xi1, #nh.fixed<1, BC>>) -> tensor<?x4xi4, #nh.fixed<7, BC>> {
  %y = nh.lut %x {table = array<i64: -9, 2>} : tensor<?x4xi1, #nh.fixed<1, BC>> -> tensor<?x4xi4, #nh.fixed<7, BC>>
  func.return %y : tensor<?x4xi4, #nh.fixed<7, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.lut: table entry -9 does not fit i4

// -----

func.func @clamp_bounds(%x: tensor<?x4xi8, #nh.fixed<1, BC>>) -> tensor<?x4xi8, #nh.fixed<1, BC>> {
  %y = nh.clamp %x {min = 5 : i64, max = 1 : i64} : tensor<?x4xi8, #nh.fixed<1, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<1, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.clamp: min 5 is greater than max 1

// -----

func.func @pool_exponent(%x: tensor<?x4x8x8xi8, #nh.fixed<4, BCMD>>) -> tensor<?x4x4x4xi8, #nh.fixed<5, BCMD>> {
  %y = nh.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x4x8x8xi8, #nh.fixed<4, BCMD>> -> tensor<?x4x4x4xi8, #nh.fixed<5, BCMD>>
  func.return %y : tensor<?x4x4x4xi8, #nh.fixed<5, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.max_pool: pooling keeps the exponent: exponents 4 and 5 differ

// -----

func.func @avg_pool_width(%x: tensor<?x4x8x8xi8, #nh.fixed<4, BCMD>>) -> tensor<?x4x4x4xi16, #nh.fixed<4, BCMD>> {
  %y = nh.avg_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x4x8x8xi8, #nh.fixed<4, BCMD>> -> tensor<?x4x4x4xi16, #nh.fixed<4, BCMD>>
  func.return %y : tensor<?x4x4x4xi16, #nh.fixed<4, BCMD>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.avg_pool: result i16 must have the input's type i8

// -----

func.func @concat_exponents(%a: tensor<?x4xi8, #nh.fixed<4, BC>>, %b: tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x8xi8, #nh.fixed<4, BC>> {
  %y = nh.concat %a, %b {axis = 0 : i64} : (tensor<?x4xi8, #nh.fixed<4, BC>>, tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x8xi8, #nh.fixed<4, BC>>
  func.return %y : tensor<?x8xi8, #nh.fixed<4, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.concat: result shape ?x8 does not match the inferred shape ?x4

// -----

func.func @concat_unaligned(%a: tensor<?x4xi8, #nh.fixed<4, BC>>, %b: tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x8xi8, #nh.fixed<4, BC>> {
  %y = nh.concat %a, %b {axis = 1 : i64} : (tensor<?x4xi8, #nh.fixed<4, BC>>, tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x8xi8, #nh.fixed<4, BC>>
  func.return %y : tensor<?x8xi8, #nh.fixed<4, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.concat: input 1 must share the result exponent: exponents 5 and 4 differ

// -----

func.func @reshape_exponent(%x: tensor<?x4x2xi8, #nh.fixed<4, BCM>>) -> tensor<?x8xi8, #nh.fixed<3, BC>> {
  %y = nh.reshape %x : tensor<?x4x2xi8, #nh.fixed<4, BCM>> -> tensor<?x8xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x8xi8, #nh.fixed<3, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.reshape: exponents change from [4] to [3]

// -----

func.func @reshape_width(%x: tensor<?x4x2xi8, #nh.fixed<4, BCM>>) -> tensor<?x8xi16, #nh.fixed<4, BC>> {
  %y = nh.reshape %x : tensor<?x4x2xi8, #nh.fixed<4, BCM>> -> tensor<?x8xi16, #nh.fixed<4, BC>>
  func.return %y : tensor<?x8xi16, #nh.fixed<4, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.reshape: element type changes from i8 to i16

// -----

// Exponents are int8 in NanoEngine; one beyond int64 used to crash nanoir-run (OverflowError).
func.func @exponent_range(%x: tensor<4xi8, #nh.fixed<99999999999999999999, C>>) -> tensor<4xi8, #nh.fixed<0, C>> {
  %y = nh.requant %x {shift = array<i64: 0>} : tensor<4xi8, #nh.fixed<99999999999999999999, C>> -> tensor<4xi8, #nh.fixed<0, C>>
  func.return %y : tensor<4xi8, #nh.fixed<0, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:54
// CHECK: error: exponent 99999999999999999999 is outside -128..127 (NanoEngine stores exponents as int8)

// -----

func.func @per_channel_exponent_range(%x: tensor<2xi8, #nh.fixed<[1, -129], C>>) -> tensor<2xi8, #nh.fixed<[1, -129], C>> {
  %y = nh.relu %x : tensor<2xi8, #nh.fixed<[1, -129], C>>
  func.return %y : tensor<2xi8, #nh.fixed<[1, -129], C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: exponent -129 is outside -128..127

// -----

func.func @signed_codes(%x: tensor<4xsi8, #nh.fixed<3, C>>) -> tensor<4xsi8, #nh.fixed<3, C>> {
  %y = nh.relu %x : tensor<4xsi8, #nh.fixed<3, C>>
  func.return %y : tensor<4xsi8, #nh.fixed<3, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:3
// CHECK: error: nh.relu: input has element type si8; nh codes are signless integers (two's complement), e.g. i8

// -----

func.func @unsigned_codes(%x: tensor<4xi8, #nh.fixed<3, C>>) -> tensor<4xui32, #nh.fixed<3, C>> {
  %y = nh.requant %x {shift = array<i64: 0>} : tensor<4xi8, #nh.fixed<3, C>> -> tensor<4xui32, #nh.fixed<3, C>>
  func.return %y : tensor<4xui32, #nh.fixed<3, C>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:3
// CHECK: error: nh.requant: result has element type ui32; unsigned nh codes are ui2, ui4, ui8, ui16

// -----

// The runtime quantizes a float input as nq.bits, nq.exp and nq.rounding say: all three or none.
func.func @no_rounding(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:1
// CHECK: error: func.func: argument 0 of @no_rounding has nq.bits, nq.exp but no nq.rounding; a quantized input needs all of nq.bits, nq.exp, nq.rounding

// -----

func.func @no_exp(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @no_exp has nq.bits, nq.rounding but no nq.exp

// -----

func.func @input_bits(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 99 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_bits: nq.bits = 99 is outside 1..16

// -----

func.func @input_bits_wider_than_type(%x: tensor<?x4xi4, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi4, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi4, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi4, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_bits_wider_than_type: 8-bit codes (nq.bits) do not match the element type i4

// -----

func.func @input_exp_range(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<999> : tensor<1xi16>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_exp_range: nq.exp 999 is outside -60..60

// -----

func.func @input_exp_type(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<3.0> : tensor<1xf32>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_exp_type: nq.exp must be a dense tensor of i8, i16, i32 or i64 exponents

// -----

func.func @input_rounding(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = "trunc"}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_rounding: nq.rounding must be a rounding mode

// -----

func.func @input_exp_disagrees(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<4> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_exp_disagrees: its exponents 3 are not nq.exp = 4

// -----

func.func @input_exp_shape(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {nq.bits = 8 : i64, nq.exp = dense<3> : tensor<3xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
// CHECK: error: func.func: argument 0 of @input_exp_shape: nq.exp of shape 3 does not broadcast against the argument ?x4

// -----

func.func @input_not_nh(%x: tensor<?x4xf32> {nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xf32> {
  func.return %x : tensor<?x4xf32>
}
// CHECK: error: func.func: argument 0 of @input_not_nh: its type has element type f32; the nh level holds only integers

// -----

func.func @prelu_slope_not_at_the_shift(%x: tensor<?x2xi8, #nh.fixed<5, BC>>, %a: tensor<2xi4, #nh.fixed<3, C>>) -> tensor<?x2xi16, #nh.fixed<7, BC>> {
  %y = nh.prelu %x, %a {shift = 2 : i64} : (tensor<?x2xi8, #nh.fixed<5, BC>>, tensor<2xi4, #nh.fixed<3, C>>) -> tensor<?x2xi16, #nh.fixed<7, BC>>
  func.return %y : tensor<?x2xi16, #nh.fixed<7, BC>>
}
// CHECK: nh.prelu: the slope's exponent is the shift: exponents 3 and 2 differ

// -----

func.func @transpose_changes_exponent(%x: tensor<?x2x3xi8, #nh.fixed<5, BCM>>) -> tensor<?x3x2xi8, #nh.fixed<4, BCM>> {
  %y = nh.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<?x2x3xi8, #nh.fixed<5, BCM>> -> tensor<?x3x2xi8, #nh.fixed<4, BCM>>
  func.return %y : tensor<?x3x2xi8, #nh.fixed<4, BCM>>
}
// CHECK: nh.transpose: data movement keeps the exponents: exponents 5 and 4 differ

// -----

func.func @split_sizes_do_not_add_up(%x: tensor<?x4xi8, #nh.fixed<5, BC>>) -> tensor<?x1xi8, #nh.fixed<5, BC>> {
  %a, %b = nh.split %x {axis = 1 : i64, sizes = array<i64: 1, 2>} : (tensor<?x4xi8, #nh.fixed<5, BC>>) -> (tensor<?x1xi8, #nh.fixed<5, BC>>, tensor<?x2xi8, #nh.fixed<5, BC>>)
  func.return %a : tensor<?x1xi8, #nh.fixed<5, BC>>
}
// CHECK: nh.split: sizes [1, 2] do not add up to 4

// -----

func.func @conv_transpose_weight_axis(%x: tensor<?x2x3xi8, #nh.fixed<5, BCM>>, %w: tensor<2x3x2xi8, #nh.fixed<[1, 2], CCD>>) -> tensor<?x3x4xi32, #nh.fixed<6, BCM>> {
  %0 = nh.conv_transpose %x, %w : (tensor<?x2x3xi8, #nh.fixed<5, BCM>>, tensor<2x3x2xi8, #nh.fixed<[1, 2], CCD>>) -> tensor<?x3x4xi32, #nh.fixed<6, BCM>>
  func.return %0 : tensor<?x3x4xi32, #nh.fixed<6, BCM>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv_transpose: per-channel weight exponents must run along dim 1 (the output channels of a [C, O/g, *K] weight), layout 'CCD'

// -----

func.func @conv_transpose_result_exp(%x: tensor<?x2x3xi8, #nh.fixed<5, BCM>>, %w: tensor<2x3x2xi8, #nh.fixed<[1, 2, 3], DCD>>) -> tensor<?x3x4xi32, #nh.fixed<6, BCM>> {
  %0 = nh.conv_transpose %x, %w : (tensor<?x2x3xi8, #nh.fixed<5, BCM>>, tensor<2x3x2xi8, #nh.fixed<[1, 2, 3], DCD>>) -> tensor<?x3x4xi32, #nh.fixed<6, BCM>>
  func.return %0 : tensor<?x3x4xi32, #nh.fixed<6, BCM>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv_transpose: result exponent must be input + weight exponent

// -----

func.func @conv_transpose_shape(%x: tensor<?x2x3xi8, #nh.fixed<5, BCM>>, %w: tensor<2x3x2xi8, #nh.fixed<1, DCD>>) -> tensor<?x3x5xi32, #nh.fixed<6, BCM>> {
  %0 = nh.conv_transpose %x, %w : (tensor<?x2x3xi8, #nh.fixed<5, BCM>>, tensor<2x3x2xi8, #nh.fixed<1, DCD>>) -> tensor<?x3x5xi32, #nh.fixed<6, BCM>>
  func.return %0 : tensor<?x3x5xi32, #nh.fixed<6, BCM>>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nh.conv_transpose: result shape

// -----

func.func @gather_keeps_exponents(%x: tensor<?x4xi8, #nh.fixed<[5, 4, 3, 2], BC>>) -> tensor<?x2xi8, #nh.fixed<[5, 4], BC>> {
  %y = nh.gather %x {axis = 1 : i64, indices = array<i64: 3, 0>} : tensor<?x4xi8, #nh.fixed<[5, 4, 3, 2], BC>> -> tensor<?x2xi8, #nh.fixed<[5, 4], BC>>
  func.return %y : tensor<?x2xi8, #nh.fixed<[5, 4], BC>>
}
// CHECK: error: nh.gather: data movement keeps the exponents: exponents [2, 5] and [5, 4] differ

// -----

func.func @pad_reflect_as_wide_as_the_cropped_dim(%x: tensor<?x1x4xi8, #nh.fixed<3, BCM>>) -> tensor<?x1x4xi8, #nh.fixed<3, BCM>> {
  %y = nh.pad %x {pads = array<i64: 0, 0, -2, 0, 0, 2>, mode = "reflect"} : tensor<?x1x4xi8, #nh.fixed<3, BCM>> -> tensor<?x1x4xi8, #nh.fixed<3, BCM>>
  func.return %y : tensor<?x1x4xi8, #nh.fixed<3, BCM>>
}
// CHECK: error: nh.pad: reflect pads (-2, 2) on dim 2 of size 2 after cropping: at most 1 rows a side reflect
