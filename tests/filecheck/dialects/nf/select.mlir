// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Elementwise maximum and minimum, with broadcasting.

// CHECK-LABEL: func.func @maximum_minimum
func.func @maximum_minimum(%x: tensor<?x16x8x8xf32>, %y: tensor<?x16x8x8xf32>, %c: tensor<16x1x1xf32>, %s: tensor<f32>) -> (tensor<?x16x8x8xf32>, tensor<?x16x8x8xf32>) {
  // CHECK-NEXT: %0 = nf.maximum %x, %y : (tensor<?x16x8x8xf32>, tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32>
  // GENERIC: "nf.maximum"(%x, %y) : (tensor<?x16x8x8xf32>, tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32>
  // CHECK-NEXT: %1 = nf.minimum %0, %c : (tensor<?x16x8x8xf32>, tensor<16x1x1xf32>) -> tensor<?x16x8x8xf32>
  // GENERIC: "nf.minimum"(%0, %c) : (tensor<?x16x8x8xf32>, tensor<16x1x1xf32>) -> tensor<?x16x8x8xf32>
  // CHECK-NEXT: %2 = nf.maximum %s, %1 : (tensor<f32>, tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32>
  %0 = nf.maximum %x, %y : (tensor<?x16x8x8xf32>, tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32>
  %1 = nf.minimum %0, %c : (tensor<?x16x8x8xf32>, tensor<16x1x1xf32>) -> tensor<?x16x8x8xf32>
  %2 = nf.maximum %s, %1 : (tensor<f32>, tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32>
  func.return %1, %2 : tensor<?x16x8x8xf32>, tensor<?x16x8x8xf32>
}
