// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// lower-to-hw of zero and bilinear upsampling (lowering/hw/upsample.py).

// LowerUpsampleZero moves codes (exponents kept, no requant); LowerUpsampleBilinear sums
// with the weights 1 and 3 per doubled dim, exactly: two doubled dims give 4**2 times the value,
// exponent 5 + 4 = 9 and 8 + 4 = 12-bit codes (i16); the output fake-quant at 6 is its one
// rounding, a requant by 9 - 6 = 3.

// CHECK-LABEL: func.func @upsample
// CHECK-NEXT:  %[[Z:.*]] = nh.upsample_zero %x {offsets = array<i64: 1, 0>} : tensor<?x2x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x2x6x6xi8, #nh.fixed<5, BCMD>>
// CHECK-NEXT:  %[[B:.*]] = nh.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>} : tensor<?x2x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x2x6x6xi16, #nh.fixed<9, BCMD>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[B]] {shift = array<i64: 3>} : tensor<?x2x6x6xi16, #nh.fixed<9, BCMD>> -> tensor<?x2x6x6xi8, #nh.fixed<6, BCMD>>
// CHECK-NEXT:  func.return %[[Z]], %[[Q]]
// CHECK-NOT:   nf.

func.func @upsample(%x: tensor<?x2x3x3xf32>) -> (tensor<?x2x6x6xf32>, tensor<?x2x6x6xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x2x3x3xf32>
  %z = nf.upsample_zero %xq {offsets = array<i64: 1, 0>} : tensor<?x2x3x3xf32> -> tensor<?x2x6x6xf32>
  %b = nf.upsample_bilinear %xq {pads = array<i64: 1, 1, 1, 1>} : tensor<?x2x3x3xf32> -> tensor<?x2x6x6xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<?x2x6x6xf32>
  func.return %z, %bq : tensor<?x2x6x6xf32>, tensor<?x2x6x6xf32>
}

// -----

// One doubled dim of a 1-D signal: exponent + 2, per-channel exponents kept.

// CHECK-LABEL: func.func @bilinear_one_dim
// CHECK:       nh.upsample_bilinear %x {pads = array<i64: 1, 1>} : tensor<?x2x5xi8, #nh.fixed<[3, 4], BCM>> -> tensor<?x2x10xi16, #nh.fixed<[5, 6], BCM>>
// CHECK-NEXT:  nh.requant %{{.*}} {shift = array<i64: 2, 3>} {{.*}} -> tensor<?x2x10xi8, #nh.fixed<3, BCM>>

func.func @bilinear_one_dim(%x: tensor<?x2x5xf32>) -> tensor<?x2x10xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[3], [4]]> : tensor<2x1xi8>} : tensor<?x2x5xf32>
  %b = nf.upsample_bilinear %xq {pads = array<i64: 1, 1>} : tensor<?x2x5xf32> -> tensor<?x2x10xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x10xf32>
  func.return %bq : tensor<?x2x10xf32>
}
