// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// lower-to-hw of the ops that read or write positions (lowering/hw/embedding.py, upsample.py).

// LowerEmbedding: the token ids become the program's i32 input at exponent 0 (no fake-quant:
// they are not activations); the table its 4-bit codes at exponent 2 (0.5 -> 2, -0.25 -> -1,
// ...), which the rows keep.

// CHECK-LABEL: func.func @embedding
// CHECK-SAME:    (%ids: tensor<?x3xi32, #nh.fixed<0, BC>>) -> tensor<?x3x2xi4, #nh.fixed<2, BCM>>
// CHECK-NEXT:  %[[T:.*]] = nh.constant "emb.weight" dense<{{\[\[}}2, -1], [4, 0], [-2, 3]]> : tensor<3x2xi8> -> tensor<3x2xi4, #nh.fixed<2, CD>>
// CHECK-NEXT:  %[[Y:.*]] = nh.embedding %ids, %[[T]] : (tensor<?x3xi32, #nh.fixed<0, BC>>, tensor<3x2xi4, #nh.fixed<2, CD>>) -> tensor<?x3x2xi4, #nh.fixed<2, BCM>>
// CHECK-NEXT:  func.return %[[Y]]

func.func @embedding(%ids: tensor<?x3xf32>) -> tensor<?x3x2xf32> {
  %t = nf.constant "emb.weight" dense<[[0.5, -0.25], [1.0, 0.125], [-0.5, 0.75]]> : tensor<3x2xf32>
  %tq = nq.fake_quant %t {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<3x2xf32>
  %y = nf.embedding %ids, %tq : (tensor<?x3xf32>, tensor<3x2xf32>) -> tensor<?x3x2xf32>
  func.return %y : tensor<?x3x2xf32>
}

// -----

// LowerMaxPoolIndices and LowerMaxUnpool: the indices are i32 codes at exponent 0 (they are
// positions, not activations: no fake-quant, whatever the plane's size); the pooled codes keep
// their per-channel exponents through the unpool.

// CHECK-LABEL: func.func @pool_and_unpool
// CHECK-NEXT:  %[[P:.*]] = nh.max_pool %x {{.*}} -> tensor<?x2x2x2xi8, #nh.fixed<[3, 4], BCMD>>
// CHECK-NEXT:  %[[I:.*]] = nh.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x4x4xi8, #nh.fixed<[3, 4], BCMD>> -> tensor<?x2x2x2xi32, #nh.fixed<0, BCMD>>
// CHECK-NEXT:  %[[U:.*]] = nh.max_unpool %[[P]], %[[I]] : (tensor<?x2x2x2xi8, #nh.fixed<[3, 4], BCMD>>, tensor<?x2x2x2xi32, #nh.fixed<0, BCMD>>) -> tensor<?x2x4x4xi8, #nh.fixed<[3, 4], BCMD>>
// CHECK-NEXT:  func.return %[[U]]
// CHECK-NOT:   nf.

func.func @pool_and_unpool(%x: tensor<?x2x4x4xf32>) -> tensor<?x2x4x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[[3]], [[4]]]> : tensor<2x1x1xi8>} : tensor<?x2x4x4xf32>
  %p = nf.max_pool %xq {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x4x4xf32> -> tensor<?x2x2x2xf32>
  %i = nf.max_pool_indices %xq {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x2x4x4xf32> -> tensor<?x2x2x2xf32>
  %u = nf.max_unpool %p, %i : (tensor<?x2x2x2xf32>, tensor<?x2x2x2xf32>) -> tensor<?x2x4x4xf32>
  func.return %u : tensor<?x2x4x4xf32>
}

// -----

// Indices of a 32x32 plane (0..1023) are i32 at exponent 0 too: never an activation's 8 bits,
// which would wrap past 127.

// CHECK-LABEL: func.func @large_plane
// CHECK:       nh.max_pool_indices %x {{.*}} -> tensor<?x1x16x16xi32, #nh.fixed<0, BCMD>>

func.func @large_plane(%x: tensor<?x1x32x32xf32>) -> tensor<?x1x32x32xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x1x32x32xf32>
  %p = nf.max_pool %xq {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x1x32x32xf32> -> tensor<?x1x16x16xf32>
  %i = nf.max_pool_indices %xq {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x1x32x32xf32> -> tensor<?x1x16x16xf32>
  %u = nf.max_unpool %p, %i : (tensor<?x1x16x16xf32>, tensor<?x1x16x16xf32>) -> tensor<?x1x32x32xf32>
  func.return %u : tensor<?x1x32x32xf32>
}
