// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// lower-to-hw of issue 32's op families (lowering/hw/): each nf op becomes its nh op on the
// input codes; the numbers below are derived by hand from the ops' docstrings.

// nf.unary "exp" on 4-bit codes at exponent 2 (values c/4, c in -8..7) into 8-bit codes at
// exponent 5: one table, trunc(32 exp(c/4)) saturated at 127: c = -8 gives trunc(4.33) = 4,
// c = 0 gives 32, c = 3 gives trunc(67.7) = 67, c >= 5 saturate.

// CHECK-LABEL: func.func @unary
// CHECK-NEXT:  %eq = nh.lut %x {table = array<i64: 4, 5, 7, 9, 11, 15, 19, 24, 32, 41, 52, 67, 86, 111, 127, 127>} : tensor<?x16xi4, #nh.fixed<2, BC>> -> tensor<?x16xi8, #nh.fixed<5, BC>>
// CHECK-NEXT:  func.return %eq

func.func @unary(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x16xf32>
  %e = nf.unary "exp" %xq : tensor<?x16xf32>
  %eq = nq.fake_quant %e {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x16xf32>
  func.return %eq : tensor<?x16xf32>
}


// -----

// nf.compare aligns its operands as an add does (the coarser %t, exponent 4, shifted left by
// one into i16) and gives 0/1 codes at exponent 0 (i2); nf.where puts both branches on the
// output's grid (exponent 4: %x requantized by a right shift of 1, %t as it is).

// CHECK-LABEL: func.func @select
// CHECK-NEXT:  %[[T:.*]] = nh.requant %t {shift = array<i64: -1>} : tensor<?x16xi8, #nh.fixed<4, BC>> -> tensor<?x16xi16, #nh.fixed<5, BC>>
// CHECK-NEXT:  %m = nh.compare "gt" %x, %[[T]] : {{.*}} -> tensor<?x16xi2, #nh.fixed<0, BC>>
// CHECK-NEXT:  %[[X:.*]] = nh.requant %x {shift = array<i64: 1>} : tensor<?x16xi8, #nh.fixed<5, BC>> -> tensor<?x16xi8, #nh.fixed<4, BC>>
// CHECK-NEXT:  %y = nh.select %m, %[[X]], %t : {{.*}} -> tensor<?x16xi8, #nh.fixed<4, BC>>
// CHECK-NEXT:  func.return %y

func.func @select(%x: tensor<?x16xf32>, %t: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x16xf32>
  %tq = nq.fake_quant %t {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x16xf32>
  %m = nf.compare "gt" %xq, %tq : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %y = nf.where %m, %xq, %tq : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x16xf32>
  func.return %yq : tensor<?x16xf32>
}


// -----

// A sum of 8 codes of i8 needs 11 bits: i16 at the input's exponent, then the output's
// requant (5 - 2 = 3); argmax gives i32 indices at exponent 0 (never requantized); a cumsum
// along 8 codes is also i16 at exponent 5.

// CHECK-LABEL: func.func @reduce
// CHECK-NEXT:  %s = nh.reduce "sum" %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x1xi16, #nh.fixed<5, BCM>>
// CHECK-NEXT:  %sq = nh.requant %s {shift = array<i64: 3>} : {{.*}} -> tensor<?x16x1xi8, #nh.fixed<2, BCM>>
// CHECK-NEXT:  %i = nh.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x1x8xi32, #nh.fixed<0, BCM>>
// CHECK-NEXT:  %c = nh.cumsum %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x8xi16, #nh.fixed<5, BCM>>
// CHECK-NEXT:  %cq = nh.requant %c {shift = array<i64: 3>} : {{.*}} -> tensor<?x16x8xi8, #nh.fixed<2, BCM>>

func.func @reduce(%x: tensor<?x16x8xf32>) -> (tensor<?x16x1xf32>, tensor<?x1x8xf32>, tensor<?x16x8xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x16x8xf32>
  %s = nf.reduce "sum" %xq {dims = array<i64: 2>} : tensor<?x16x8xf32> -> tensor<?x16x1xf32>
  %sq = nq.fake_quant %s {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x16x1xf32>
  %i = nf.arg_reduce "argmax" %xq {dims = array<i64: 1>} : tensor<?x16x8xf32> -> tensor<?x1x8xf32>
  %c = nf.cumsum %xq {dims = array<i64: 2>} : tensor<?x16x8xf32>
  %cq = nq.fake_quant %c {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x16x8xf32>
  func.return %sq, %i, %cq : tensor<?x16x1xf32>, tensor<?x1x8xf32>, tensor<?x16x8xf32>
}


// -----

// Bicubic x2 along H alone (half-pixel, A = -0.75): the weights at phases 1/4 and 3/4 are
// (-18, 222, 58, -6) / 256, so the exact sum is at exponent 5 + 8 = 13, requantized by 8 onto
// the output's 5. nf.normalize is its integer algorithm on the codes, with its plan.

// CHECK-LABEL: func.func @resize_and_normalize
// CHECK-NEXT:  %b = nh.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<?x16x4x4xi8, #nh.fixed<5, BCMD>> -> tensor<?x16x8x4xi32, #nh.fixed<13, BCMD>>
// CHECK-NEXT:  %bq = nh.requant %b {shift = array<i64: 8>} : {{.*}} -> tensor<?x16x8x4xi8, #nh.fixed<5, BCMD>>
// CHECK-NEXT:  %n = nh.normalize %x {axis = 1 : i64, bits = 8 : i64, {{.*}}} : tensor<?x16x4x4xi8, #nh.fixed<5, BCMD>> -> tensor<?x16x4x4xi8, #nh.fixed<7, BCMD>>
// CHECK-NOT:   nf.

func.func @resize_and_normalize(%x: tensor<?x16x4x4xf32>) -> (tensor<?x16x8x4xf32>, tensor<?x16x4x4xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x16x4x4xf32>
  %b = nf.upsample_bicubic %xq {pads = array<i64: 2, 2, 2, 2>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x4xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x16x8x4xf32>
  %n = nf.normalize %xq {axis = 1 : i64, epsilon = 0.5 : f64} : tensor<?x16x4x4xf32>
  %nq = nq.fake_quant %n {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x16x4x4xf32>
  func.return %bq, %nq : tensor<?x16x8x4xf32>, tensor<?x16x4x4xf32>
}
