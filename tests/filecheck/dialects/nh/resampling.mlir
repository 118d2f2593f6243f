// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Zero insertion keeps the codes and their exponents; x2 bilinear is an exact sum with the
// weights 1 and 3 per doubled dim, so its result's exponent is the input's + 2 per doubled dim
// and its codes 2 bits wider per doubled dim.

// CHECK-LABEL: func.func @upsample_zero
func.func @upsample_zero(%x: tensor<?x4x3x3xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>, %b: tensor<?x2x3xi2, #nh.fixed<1, BCM>>) -> (tensor<?x4x6x6xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>, tensor<?x2x9xi2, #nh.fixed<1, BCM>>) {
  // CHECK-NEXT: %0 = nh.upsample_zero %x {offsets = array<i64: 0, 1>} : tensor<?x4x3x3xi8, #nh.fixed<[5, 5, 6, 6], BCMD>> -> tensor<?x4x6x6xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>
  // GENERIC: "nh.upsample_zero"(%x) <{offsets = array<i64: 0, 1>}> : (tensor<?x4x3x3xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>) -> tensor<?x4x6x6xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>
  %0 = nh.upsample_zero %x {offsets = array<i64: 0, 1>} : tensor<?x4x3x3xi8, #nh.fixed<[5, 5, 6, 6], BCMD>> -> tensor<?x4x6x6xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>
  // CHECK-NEXT: %1 = nh.upsample_zero %b {offsets = array<i64: 2>} : tensor<?x2x3xi2, #nh.fixed<1, BCM>> -> tensor<?x2x9xi2, #nh.fixed<1, BCM>>
  %1 = nh.upsample_zero %b {offsets = array<i64: 2>} : tensor<?x2x3xi2, #nh.fixed<1, BCM>> -> tensor<?x2x9xi2, #nh.fixed<1, BCM>>
  func.return %0, %1 : tensor<?x4x6x6xi8, #nh.fixed<[5, 5, 6, 6], BCMD>>, tensor<?x2x9xi2, #nh.fixed<1, BCM>>
}

// -----

// CHECK-LABEL: func.func @upsample_bilinear
func.func @upsample_bilinear(%x: tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>, %w: tensor<?x2x3x5xi4, #nh.fixed<[2, 3], BCMD>>) -> (tensor<?x4x6x6xi16, #nh.fixed<9, BCMD>>, tensor<?x2x3x10xi8, #nh.fixed<[4, 5], BCMD>>) {
  // CHECK-NEXT: %0 = nh.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x6x6xi16, #nh.fixed<9, BCMD>>
  // GENERIC: "nh.upsample_bilinear"(%x) <{pads = array<i64: 1, 1, 1, 1>}> : (tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>) -> tensor<?x4x6x6xi16, #nh.fixed<9, BCMD>>
  %0 = nh.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x6x6xi16, #nh.fixed<9, BCMD>>
  // One doubled dim: exponents + 2, 4-bit codes into 6 bits (held in i8).
  // CHECK-NEXT: %1 = nh.upsample_bilinear %w {pads = array<i64: 1, 1, 1, 1>} : tensor<?x2x3x5xi4, #nh.fixed<[2, 3], BCMD>> -> tensor<?x2x3x10xi8, #nh.fixed<[4, 5], BCMD>>
  %1 = nh.upsample_bilinear %w {pads = array<i64: 1, 1, 1, 1>} : tensor<?x2x3x5xi4, #nh.fixed<[2, 3], BCMD>> -> tensor<?x2x3x10xi8, #nh.fixed<[4, 5], BCMD>>
  func.return %0, %1 : tensor<?x4x6x6xi16, #nh.fixed<9, BCMD>>, tensor<?x2x3x10xi8, #nh.fixed<[4, 5], BCMD>>
}
