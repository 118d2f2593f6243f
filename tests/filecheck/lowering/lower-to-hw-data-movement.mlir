// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// lower-to-hw of the data movement lower-to-hw.mlir does not cover (lowering/hw/
// data_movement.py): expand and gather move per-channel exponents with the codes (gather's
// channels 3, 0, 3 take exponents 2, 5, 2); space_to_depth keeps a per-tensor exponent.
// FuseAvgPoolFakeQuant (adaptive): a 1x1 output of a 4x4 plane is nh.avg_pool with kernel
// and stride 4; the output grid is finer (5 > 4), so the codes move onto it first by a left
// shift (i16) and one division remains; the requant that follows shifts by 0.

// CHECK-LABEL: func.func @movement
// CHECK-NEXT:  %[[E:.*]] = nh.expand %x : tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>> -> tensor<?x4x5x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>>
// CHECK-NEXT:  %[[G:.*]] = nh.gather %x {axis = 1 : i64, indices = array<i64: 3, 0, 3>} : tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>> -> tensor<?x3x1x6xi8, #nh.fixed<[2, 5, 2], BCMD>>
// CHECK-NEXT:  %[[S:.*]] = nh.space_to_depth %z {block = 2 : i64} : tensor<?x2x4x4xi8, #nh.fixed<4, BCMD>> -> tensor<?x8x2x2xi8, #nh.fixed<4, BCMD>>
// CHECK-NEXT:  %[[Z:.*]] = nh.requant %z {shift = array<i64: -1>} : tensor<?x2x4x4xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x4x4xi16, #nh.fixed<5, BCMD>>
// CHECK-NEXT:  %[[A:.*]] = nh.avg_pool %[[Z]] {kernel = array<i64: 4, 4>, strides = array<i64: 4, 4>} : tensor<?x2x4x4xi16, #nh.fixed<5, BCMD>> -> tensor<?x2x1x1xi16, #nh.fixed<5, BCMD>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[A]] {shift = array<i64: 0>} {{.*}} -> tensor<?x2x1x1xi8, #nh.fixed<5, BCMD>>
// CHECK-NEXT:  func.return %[[E]], %[[G]], %[[S]], %[[Q]]
// CHECK-NOT:   nf.

func.func @movement(%x: tensor<?x4x1x6xf32>, %z: tensor<?x2x4x4xf32>) -> (tensor<?x4x5x6xf32>, tensor<?x3x1x6xf32>, tensor<?x8x2x2xf32>, tensor<?x2x1x1xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[[5]], [[4]], [[3]], [[2]]]> : tensor<4x1x1xi8>} : tensor<?x4x1x6xf32>
  %e = nf.expand %xq : tensor<?x4x1x6xf32> -> tensor<?x4x5x6xf32>
  %g = nf.gather %xq {axis = 1 : i64, indices = array<i64: 3, 0, 3>} : tensor<?x4x1x6xf32> -> tensor<?x3x1x6xf32>
  %zq = nq.fake_quant %z {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x4x4xf32>
  %s = nf.space_to_depth %zq {block = 2 : i64} : tensor<?x2x4x4xf32> -> tensor<?x8x2x2xf32>
  %a = nf.adaptive_avg_pool %zq {output_size = array<i64: 1, 1>} : tensor<?x2x4x4xf32> -> tensor<?x2x1x1xf32>
  %aq = nq.fake_quant %a {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x2x1x1xf32>
  func.return %e, %g, %s, %aq : tensor<?x4x5x6xf32>, tensor<?x3x1x6xf32>, tensor<?x8x2x2xf32>, tensor<?x2x1x1xf32>
}
