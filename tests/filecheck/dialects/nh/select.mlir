// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Elementwise maximum and minimum of codes at one exponent: the result picks a code, so it
// needs only the wider operand's range.

// CHECK-LABEL: func.func @maximum_minimum
func.func @maximum_minimum(%a: tensor<?x16xi8, #nh.fixed<7, BC>>, %b: tensor<?x16xi16, #nh.fixed<7, BC>>, %c: tensor<16xi4, #nh.fixed<7, C>>) -> (tensor<?x16xi16, #nh.fixed<7, BC>>, tensor<?x16xi8, #nh.fixed<7, BC>>) {
  // CHECK-NEXT: %0 = nh.maximum %a, %b : (tensor<?x16xi8, #nh.fixed<7, BC>>, tensor<?x16xi16, #nh.fixed<7, BC>>) -> tensor<?x16xi16, #nh.fixed<7, BC>>
  // GENERIC: "nh.maximum"(%a, %b) : (tensor<?x16xi8, #nh.fixed<7, BC>>, tensor<?x16xi16, #nh.fixed<7, BC>>) -> tensor<?x16xi16, #nh.fixed<7, BC>>
  %0 = nh.maximum %a, %b : (tensor<?x16xi8, #nh.fixed<7, BC>>, tensor<?x16xi16, #nh.fixed<7, BC>>) -> tensor<?x16xi16, #nh.fixed<7, BC>>
  // CHECK-NEXT: %1 = nh.minimum %a, %c : (tensor<?x16xi8, #nh.fixed<7, BC>>, tensor<16xi4, #nh.fixed<7, C>>) -> tensor<?x16xi8, #nh.fixed<7, BC>>
  // GENERIC: "nh.minimum"(%a, %c) : (tensor<?x16xi8, #nh.fixed<7, BC>>, tensor<16xi4, #nh.fixed<7, C>>) -> tensor<?x16xi8, #nh.fixed<7, BC>>
  %1 = nh.minimum %a, %c : (tensor<?x16xi8, #nh.fixed<7, BC>>, tensor<16xi4, #nh.fixed<7, C>>) -> tensor<?x16xi8, #nh.fixed<7, BC>>
  func.return %0, %1 : tensor<?x16xi16, #nh.fixed<7, BC>>, tensor<?x16xi8, #nh.fixed<7, BC>>
}
