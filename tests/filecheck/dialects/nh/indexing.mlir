// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// The nh ops that read or write positions: embedding (token ids are i32 at exponent 0),
// max pooling's indices (i32 at exponent 0) and max unpooling.

// CHECK-LABEL: func.func @embedding
func.func @embedding(%ids: tensor<?x8xi32, #nh.fixed<0, BC>>, %table: tensor<100x16xi4, #nh.fixed<5, CD>>) -> tensor<?x8x16xi4, #nh.fixed<5, BCM>> {
  // CHECK-NEXT: %0 = nh.embedding %ids, %table : (tensor<?x8xi32, #nh.fixed<0, BC>>, tensor<100x16xi4, #nh.fixed<5, CD>>) -> tensor<?x8x16xi4, #nh.fixed<5, BCM>>
  // GENERIC: "nh.embedding"(%ids, %table) : (tensor<?x8xi32, #nh.fixed<0, BC>>, tensor<100x16xi4, #nh.fixed<5, CD>>) -> tensor<?x8x16xi4, #nh.fixed<5, BCM>>
  %0 = nh.embedding %ids, %table : (tensor<?x8xi32, #nh.fixed<0, BC>>, tensor<100x16xi4, #nh.fixed<5, CD>>) -> tensor<?x8x16xi4, #nh.fixed<5, BCM>>
  func.return %0 : tensor<?x8x16xi4, #nh.fixed<5, BCM>>
}

// -----

// Per-channel exponents travel with the codes through the pool and the unpool.

// CHECK-LABEL: func.func @pool_and_unpool
func.func @pool_and_unpool(%x: tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>>) -> tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>> {
  // CHECK-NEXT: %p = nh.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>> -> tensor<?x2x4x3xi8, #nh.fixed<[5, 6], BCMD>>
  // CHECK-NEXT: %i = nh.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>> -> tensor<?x2x4x3xi32, #nh.fixed<0, BCMD>>
  // GENERIC: "nh.max_pool_indices"(%x) <{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}> : (tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>>) -> tensor<?x2x4x3xi32, #nh.fixed<0, BCMD>>
  // CHECK-NEXT: %u = nh.max_unpool %p, %i : (tensor<?x2x4x3xi8, #nh.fixed<[5, 6], BCMD>>, tensor<?x2x4x3xi32, #nh.fixed<0, BCMD>>) -> tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>>
  // GENERIC: "nh.max_unpool"(%p, %i) : (tensor<?x2x4x3xi8, #nh.fixed<[5, 6], BCMD>>, tensor<?x2x4x3xi32, #nh.fixed<0, BCMD>>) -> tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>>
  %p = nh.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>> -> tensor<?x2x4x3xi8, #nh.fixed<[5, 6], BCMD>>
  %i = nh.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>> -> tensor<?x2x4x3xi32, #nh.fixed<0, BCMD>>
  %u = nh.max_unpool %p, %i : (tensor<?x2x4x3xi8, #nh.fixed<[5, 6], BCMD>>, tensor<?x2x4x3xi32, #nh.fixed<0, BCMD>>) -> tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>>
  func.return %u : tensor<?x2x8x6xi8, #nh.fixed<[5, 6], BCMD>>
}
