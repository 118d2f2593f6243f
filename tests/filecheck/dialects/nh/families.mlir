// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s

// issue 32's op families at the hw level: comparisons (codes 0/1 at exponent 0), selection,
// reductions and prefix sums on codes, bicubic sums, L2 normalisation's integer algorithm.

// CHECK-LABEL: func.func @select
func.func @select(%x: tensor<?x16xi8, #nh.fixed<5, BC>>, %t: tensor<1xi8, #nh.fixed<5, C>>) -> tensor<?x16xi8, #nh.fixed<5, BC>> {
  // CHECK-NEXT: %m = nh.compare "gt" %x, %t : (tensor<?x16xi8, #nh.fixed<5, BC>>, tensor<1xi8, #nh.fixed<5, C>>) -> tensor<?x16xi2, #nh.fixed<0, BC>>
  // CHECK-NEXT: %y = nh.select %m, %x, %t : (tensor<?x16xi2, #nh.fixed<0, BC>>, tensor<?x16xi8, #nh.fixed<5, BC>>, tensor<1xi8, #nh.fixed<5, C>>) -> tensor<?x16xi8, #nh.fixed<5, BC>>
  %m = nh.compare "gt" %x, %t : (tensor<?x16xi8, #nh.fixed<5, BC>>, tensor<1xi8, #nh.fixed<5, C>>) -> tensor<?x16xi2, #nh.fixed<0, BC>>
  %y = nh.select %m, %x, %t : (tensor<?x16xi2, #nh.fixed<0, BC>>, tensor<?x16xi8, #nh.fixed<5, BC>>, tensor<1xi8, #nh.fixed<5, C>>) -> tensor<?x16xi8, #nh.fixed<5, BC>>
  func.return %y : tensor<?x16xi8, #nh.fixed<5, BC>>
}

// -----

// CHECK-LABEL: func.func @reduce
func.func @reduce(%x: tensor<?x16x8xi8, #nh.fixed<5, BCM>>) -> (tensor<?x16x1xi16, #nh.fixed<5, BCM>>, tensor<?x1x8xi32, #nh.fixed<0, BCM>>, tensor<?x16x8xi16, #nh.fixed<5, BCM>>, tensor<?x16x1xi8, #nh.fixed<5, BCM>>) {
  // CHECK-NEXT: %s = nh.reduce "sum" %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x1xi16, #nh.fixed<5, BCM>>
  // CHECK-NEXT: %i = nh.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x1x8xi32, #nh.fixed<0, BCM>>
  // CHECK-NEXT: %c = nh.cumsum %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x8xi16, #nh.fixed<5, BCM>>
  // CHECK-NEXT: %m = nh.reduce "max" %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x1xi8, #nh.fixed<5, BCM>>
  %s = nh.reduce "sum" %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x1xi16, #nh.fixed<5, BCM>>
  %i = nh.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x1x8xi32, #nh.fixed<0, BCM>>
  %c = nh.cumsum %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x8xi16, #nh.fixed<5, BCM>>
  %m = nh.reduce "max" %x {dims = array<i64: 2>} : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x1xi8, #nh.fixed<5, BCM>>
  func.return %s, %i, %c, %m : tensor<?x16x1xi16, #nh.fixed<5, BCM>>, tensor<?x1x8xi32, #nh.fixed<0, BCM>>, tensor<?x16x8xi16, #nh.fixed<5, BCM>>, tensor<?x16x1xi8, #nh.fixed<5, BCM>>
}

// -----

// CHECK-LABEL: func.func @resize_and_normalize
func.func @resize_and_normalize(%x: tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>) -> (tensor<?x4x6x6xi32, #nh.fixed<21, BCMD>>, tensor<?x4x3x3xi8, #nh.fixed<7, BCMD>>) {
  // CHECK-NEXT: %b = nh.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x6x6xi32, #nh.fixed<21, BCMD>>
  // CHECK-NEXT: %n = nh.normalize %x {axis = 1 : i64, bits = 8 : i64, max_shift = 30 : i64, eps_term = 0 : i64, guard = 24 : i64, nudge = 10 : i64, rounding = #nq.rounding<half_even>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x3x3xi8, #nh.fixed<7, BCMD>>
  %b = nh.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x6x6xi32, #nh.fixed<21, BCMD>>
  %n = nh.normalize %x {axis = 1 : i64, bits = 8 : i64, max_shift = 30 : i64, eps_term = 0 : i64, guard = 24 : i64, nudge = 10 : i64, rounding = #nq.rounding<half_even>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x3x3xi8, #nh.fixed<7, BCMD>>
  func.return %b, %n : tensor<?x4x6x6xi32, #nh.fixed<21, BCMD>>, tensor<?x4x3x3xi8, #nh.fixed<7, BCMD>>
}
