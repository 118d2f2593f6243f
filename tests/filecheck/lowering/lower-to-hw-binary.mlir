// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// lower-to-hw of the aligned binary ops not in lower-to-hw.mlir (lowering/hw/elementwise.py).

// LowerMaxMin: the operands are aligned
// to the finer exponent by a left shift (%y: 3 -> 5, i8 codes into i16), the op picks a code
// and keeps that exponent; an output fake-quant requantizes (5 -> 4).

// CHECK-LABEL: func.func @maximum_minimum
// CHECK-NEXT:  %[[Y1:.*]] = nh.requant %y {shift = array<i64: -2>} : tensor<?x4xi8, #nh.fixed<3, BC>> -> tensor<?x4xi16, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[M:.*]] = nh.maximum %x, %[[Y1]] : (tensor<?x4xi8, #nh.fixed<5, BC>>, tensor<?x4xi16, #nh.fixed<5, BC>>) -> tensor<?x4xi16, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[Y2:.*]] = nh.requant %y {shift = array<i64: -2>}
// CHECK-NEXT:  %[[N:.*]] = nh.minimum %x, %[[Y2]] : (tensor<?x4xi8, #nh.fixed<5, BC>>, tensor<?x4xi16, #nh.fixed<5, BC>>) -> tensor<?x4xi16, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[N]] {shift = array<i64: 1>} : tensor<?x4xi16, #nh.fixed<5, BC>> -> tensor<?x4xi8, #nh.fixed<4, BC>>
// CHECK-NEXT:  func.return %[[M]], %[[Q]]
// CHECK-NOT:   nf.

func.func @maximum_minimum(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %m = nf.maximum %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %n = nf.minimum %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %nq = nq.fake_quant %n {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %m, %nq : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// LowerAddSub (sub): %y shifted onto the finer exponent, the difference in i32, then the
// output fake-quant's requant.

// CHECK-LABEL: func.func @sub
// CHECK-NEXT:  %[[Y1:.*]] = nh.requant %y {shift = array<i64: -2>} : tensor<?x4xi8, #nh.fixed<3, BC>> -> tensor<?x4xi16, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[S:.*]] = nh.sub %x, %[[Y1]] : (tensor<?x4xi8, #nh.fixed<5, BC>>, tensor<?x4xi16, #nh.fixed<5, BC>>) -> tensor<?x4xi32, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[S]] {shift = array<i64: 1>} : tensor<?x4xi32, #nh.fixed<5, BC>> -> tensor<?x4xi8, #nh.fixed<4, BC>>
// CHECK-NEXT:  func.return %[[Q]]

func.func @sub(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %s = nf.sub %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sq = nq.fake_quant %s {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %sq : tensor<?x4xf32>
}
