// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Upsampling other than nearest (which is in ops.mlir): zero insertion (the Magik manual's
// Unpool2D mode zero) and x2 bilinear.

// CHECK-LABEL: func.func @upsample_zero
func.func @upsample_zero(%x: tensor<?x16x4x4xf32>, %x1: tensor<?x3x5xf32>) -> (tensor<?x16x8x8xf32>, tensor<?x3x15xf32>) {
  // CHECK-NEXT: %0 = nf.upsample_zero %x {offsets = array<i64: 0, 0>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
  // GENERIC: "nf.upsample_zero"(%x) <{offsets = array<i64: 0, 0>}> : (tensor<?x16x4x4xf32>) -> tensor<?x16x8x8xf32>
  %0 = nf.upsample_zero %x {offsets = array<i64: 0, 0>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
  // One spatial dim, x3, each value in the middle of its window.
  // CHECK-NEXT: %1 = nf.upsample_zero %x1 {offsets = array<i64: 1>} : tensor<?x3x5xf32> -> tensor<?x3x15xf32>
  %1 = nf.upsample_zero %x1 {offsets = array<i64: 1>} : tensor<?x3x5xf32> -> tensor<?x3x15xf32>
  func.return %0, %1 : tensor<?x16x8x8xf32>, tensor<?x3x15xf32>
}

// -----

// CHECK-LABEL: func.func @upsample_bilinear
func.func @upsample_bilinear(%x: tensor<?x16x4x4xf32>, %w: tensor<?x2x3x5xf32>) -> (tensor<?x16x8x8xf32>, tensor<?x2x3x10xf32>) {
  // CHECK-NEXT: %0 = nf.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
  // GENERIC: "nf.upsample_bilinear"(%x) <{pads = array<i64: 1, 1, 1, 1>}> : (tensor<?x16x4x4xf32>) -> tensor<?x16x8x8xf32>
  %0 = nf.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
  // Only the last dim doubled.
  // CHECK-NEXT: %1 = nf.upsample_bilinear %w {pads = array<i64: 1, 1, 1, 1>} : tensor<?x2x3x5xf32> -> tensor<?x2x3x10xf32>
  %1 = nf.upsample_bilinear %w {pads = array<i64: 1, 1, 1, 1>} : tensor<?x2x3x5xf32> -> tensor<?x2x3x10xf32>
  func.return %0, %1 : tensor<?x16x8x8xf32>, tensor<?x2x3x10xf32>
}
