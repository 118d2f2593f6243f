// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// The host boundary (lower-to-hw{host=true}): engine codes to host floats and back.

// CHECK-LABEL: func.func @island
func.func @island(%x: tensor<?x4x3xi8, #nh.fixed<5, BCM>>) -> tensor<?x4x3xi8, #nh.fixed<[4, 3, 4, 2], BCM>> {
  // CHECK-NEXT: %f = nh.to_host %x : tensor<?x4x3xi8, #nh.fixed<5, BCM>> -> tensor<?x4x3xf32>
  // GENERIC: "nh.to_host"(%x) : (tensor<?x4x3xi8, #nh.fixed<5, BCM>>) -> tensor<?x4x3xf32>
  %f = nh.to_host %x : tensor<?x4x3xi8, #nh.fixed<5, BCM>> -> tensor<?x4x3xf32>
  // CHECK-NEXT: %e = nf.relu %f {nh.host = "lowers to nh.relu, which the target 'tiny' does not take"} : tensor<?x4x3xf32>
  %e = nf.relu %f {nh.host = "lowers to nh.relu, which the target 'tiny' does not take"} : tensor<?x4x3xf32>
  // CHECK-NEXT: %q = nh.from_host %e {bits = 6 : i64, rounding = #nq.rounding<half_even>} : tensor<?x4x3xf32> -> tensor<?x4x3xi8, #nh.fixed<[4, 3, 4, 2], BCM>>
  // GENERIC: "nh.from_host"(%e) <{bits = 6 : i64, rounding = #nq.rounding<half_even>}> : (tensor<?x4x3xf32>) -> tensor<?x4x3xi8, #nh.fixed<[4, 3, 4, 2], BCM>>
  %q = nh.from_host %e {bits = 6 : i64, rounding = #nq.rounding<half_even>} : tensor<?x4x3xf32> -> tensor<?x4x3xi8, #nh.fixed<[4, 3, 4, 2], BCM>>
  func.return %q : tensor<?x4x3xi8, #nh.fixed<[4, 3, 4, 2], BCM>>
}

// -----

// CHECK-LABEL: func.func @unsigned_and_binary
func.func @unsigned_and_binary(%x: tensor<2x8xf32>) -> (tensor<2x8xui4, #nh.fixed<2, BC>>, tensor<2x8xi1, #nh.fixed<-3, BC>>) {
  // CHECK-NEXT: %u = nh.from_host %x {bits = 4 : i64} : tensor<2x8xf32> -> tensor<2x8xui4, #nh.fixed<2, BC>>
  %u = nh.from_host %x {bits = 4 : i64} : tensor<2x8xf32> -> tensor<2x8xui4, #nh.fixed<2, BC>>
  // CHECK-NEXT: %s = nh.from_host %x {bits = 1 : i64} : tensor<2x8xf32> -> tensor<2x8xi1, #nh.fixed<-3, BC>>
  %s = nh.from_host %x {bits = 1 : i64} : tensor<2x8xf32> -> tensor<2x8xi1, #nh.fixed<-3, BC>>
  func.return %u, %s : tensor<2x8xui4, #nh.fixed<2, BC>>, tensor<2x8xi1, #nh.fixed<-3, BC>>
}
