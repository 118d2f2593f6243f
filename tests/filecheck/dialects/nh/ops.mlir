// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @conv_chain
func.func @conv_chain(%x: tensor<?x3x8x7xi8, #nh.fixed<7, BCMD>>) -> tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>> {
  // CHECK-NEXT: %w = nh.constant "conv1.weight" dense<{{.*}}> : tensor<2x3x1x1xi8> -> tensor<2x3x1x1xi4, #nh.fixed<[3, 2], CCDD>>
  // GENERIC: "nh.constant"() <{value = dense<{{.*}}> : tensor<2x3x1x1xi8>, name = "conv1.weight"}> : () -> tensor<2x3x1x1xi4, #nh.fixed<[3, 2], CCDD>>
  %w = nh.constant "conv1.weight" dense<[[[[1]], [[-8]], [[7]]], [[[0]], [[1]], [[-1]]]]> : tensor<2x3x1x1xi8> -> tensor<2x3x1x1xi4, #nh.fixed<[3, 2], CCDD>>
  // CHECK-NEXT: %b = nh.constant dense<[5, -6]> : tensor<2xi32> -> tensor<2xi32, #nh.fixed<[10, 9], C>>
  %b = nh.constant dense<[5, -6]> : tensor<2xi32> -> tensor<2xi32, #nh.fixed<[10, 9], C>>
  // CHECK-NEXT: %acc = nh.conv %x, %w, %b : (tensor<?x3x8x7xi8, #nh.fixed<7, BCMD>>, tensor<2x3x1x1xi4, #nh.fixed<[3, 2], CCDD>>, tensor<2xi32, #nh.fixed<[10, 9], C>>) -> tensor<?x2x8x7xi32, #nh.fixed<[10, 9], BCMD>>
  %acc = nh.conv %x, %w, %b : (tensor<?x3x8x7xi8, #nh.fixed<7, BCMD>>, tensor<2x3x1x1xi4, #nh.fixed<[3, 2], CCDD>>, tensor<2xi32, #nh.fixed<[10, 9], C>>) -> tensor<?x2x8x7xi32, #nh.fixed<[10, 9], BCMD>>
  // CHECK-NEXT: %y = nh.requant %acc {shift = array<i64: 6, 5>, rounding = #nq.rounding<half_even>} : tensor<?x2x8x7xi32, #nh.fixed<[10, 9], BCMD>> -> tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
  // GENERIC: "nh.requant"(%acc) <{shift = array<i64: 6, 5>, rounding = #nq.rounding<half_even>}>
  %y = nh.requant %acc {shift = array<i64: 6, 5>, rounding = #nq.rounding<half_even>} : tensor<?x2x8x7xi32, #nh.fixed<[10, 9], BCMD>> -> tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %r = nh.relu %y : tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
  %r = nh.relu %y : tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %c = nh.clamp %r {min = 0 : i64, max = 96 : i64} : tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
  %c = nh.clamp %r {min = 0 : i64, max = 96 : i64} : tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
  func.return %c : tensor<?x2x8x7xi8, #nh.fixed<4, BCMD>>
}

// -----

// CHECK-LABEL: func.func @depthwise_1d_dilated
func.func @depthwise_1d_dilated(%x: tensor<?x2x50xi8, #nh.fixed<[3, 5], BCM>>, %w: tensor<2x1x3xi2, #nh.fixed<1, CCD>>) -> tensor<?x2x22xi32, #nh.fixed<[4, 6], BCM>> {
  // CHECK-NEXT: %0 = nh.conv %x, %w {strides = array<i64: 2>, dilations = array<i64: 3>, groups = 2 : i64} : (tensor<?x2x50xi8, #nh.fixed<[3, 5], BCM>>, tensor<2x1x3xi2, #nh.fixed<1, CCD>>) -> tensor<?x2x22xi32, #nh.fixed<[4, 6], BCM>>
  %0 = nh.conv %x, %w {strides = array<i64: 2>, dilations = array<i64: 3>, groups = 2 : i64} : (tensor<?x2x50xi8, #nh.fixed<[3, 5], BCM>>, tensor<2x1x3xi2, #nh.fixed<1, CCD>>) -> tensor<?x2x22xi32, #nh.fixed<[4, 6], BCM>>
  func.return %0 : tensor<?x2x22xi32, #nh.fixed<[4, 6], BCM>>
}

// -----

// CHECK-LABEL: func.func @binary_weights
func.func @binary_weights(%x: tensor<?x16xi8, #nh.fixed<4, BC>>) -> tensor<?x3xi32, #nh.fixed<[4, 5, 6], BC>> {
  // 1-bit weights: codes -1/+1 at exponent -k for magnitude 2**k.
  // CHECK-NEXT: %w = nh.constant dense<{{.*}}> : tensor<3x16xi8> -> tensor<3x16xi1, #nh.fixed<[0, 1, 2], CC>>
  %w = nh.constant dense<1> : tensor<3x16xi8> -> tensor<3x16xi1, #nh.fixed<[0, 1, 2], CC>>
  // CHECK-NEXT: %acc = nh.linear %x, %w : (tensor<?x16xi8, #nh.fixed<4, BC>>, tensor<3x16xi1, #nh.fixed<[0, 1, 2], CC>>) -> tensor<?x3xi32, #nh.fixed<[4, 5, 6], BC>>
  %acc = nh.linear %x, %w : (tensor<?x16xi8, #nh.fixed<4, BC>>, tensor<3x16xi1, #nh.fixed<[0, 1, 2], CC>>) -> tensor<?x3xi32, #nh.fixed<[4, 5, 6], BC>>
  func.return %acc : tensor<?x3xi32, #nh.fixed<[4, 5, 6], BC>>
}

// -----

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, %b: tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, %s: tensor<16x1x1xi4, #nh.fixed<[2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3], CMD>>, %m: tensor<?x4x8xi8, #nh.fixed<4, BMC>>, %n: tensor<8x5xi8, #nh.fixed<6, CC>>) -> tensor<?x16x1x3xi16, #nh.fixed<7, BCMD>> {
  // CHECK-NEXT: %0 = nh.add %a, %b : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>) -> tensor<?x16x1x3xi16, #nh.fixed<7, BCMD>>
  // CHECK-NEXT: %1 = nh.sub %a, %b : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>) -> tensor<?x16x1x3xi32, #nh.fixed<7, BCMD>>
  // CHECK-NEXT: %2 = nh.mul %a, %s : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, tensor<16x1x1xi4, #nh.fixed<[2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3], CMD>>) -> tensor<?x16x1x3xi16, #nh.fixed<[9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10], BCMD>>
  // CHECK-NEXT: %3 = nh.matmul %m, %n : (tensor<?x4x8xi8, #nh.fixed<4, BMC>>, tensor<8x5xi8, #nh.fixed<6, CC>>) -> tensor<?x4x5xi32, #nh.fixed<10, BMC>>
  %0 = nh.add %a, %b : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>) -> tensor<?x16x1x3xi16, #nh.fixed<7, BCMD>>
  %1 = nh.sub %a, %b : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>) -> tensor<?x16x1x3xi32, #nh.fixed<7, BCMD>>
  %2 = nh.mul %a, %s : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>, tensor<16x1x1xi4, #nh.fixed<[2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3], CMD>>) -> tensor<?x16x1x3xi16, #nh.fixed<[9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10], BCMD>>
  %3 = nh.matmul %m, %n : (tensor<?x4x8xi8, #nh.fixed<4, BMC>>, tensor<8x5xi8, #nh.fixed<6, CC>>) -> tensor<?x4x5xi32, #nh.fixed<10, BMC>>
  func.return %0 : tensor<?x16x1x3xi16, #nh.fixed<7, BCMD>>
}

// -----

// CHECK-LABEL: func.func @pools_and_layout
func.func @pools_and_layout(%x: tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>>, %y: tensor<?x2x7x7xi8, #nh.fixed<4, BCMD>>, %p: tensor<?x2x7x7xi8, #nh.fixed<[1, 2], BCMD>>) -> tensor<?x4x4x4xi8, #nh.fixed<4, BCMD>> {
  // CHECK-NEXT: %0 = nh.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true} : tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x4x4x4xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %1 = nh.avg_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = false, rounding = #nq.rounding<half_even>} : tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %2 = nh.concat %x, %y {axis = 1 : i64} : (tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>>, tensor<?x2x7x7xi8, #nh.fixed<4, BCMD>>) -> tensor<?x6x7x7xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %3 = nh.concat %p, %p {axis = 1 : i64} : (tensor<?x2x7x7xi8, #nh.fixed<[1, 2], BCMD>>, tensor<?x2x7x7xi8, #nh.fixed<[1, 2], BCMD>>) -> tensor<?x4x7x7xi8, #nh.fixed<[1, 2, 1, 2], BCMD>>
  // CHECK-NEXT: %4 = nh.reshape %x : tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x196xi8, #nh.fixed<4, BC>>
  // CHECK-NEXT: %5 = nh.lut %y {table = array<i64: {{.*}}>} : tensor<?x2x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x7x7xi8, #nh.fixed<7, BCMD>>
  %0 = nh.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true} : tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x4x4x4xi8, #nh.fixed<4, BCMD>>
  %1 = nh.avg_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = false, rounding = #nq.rounding<half_even>} : tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>>
  %2 = nh.concat %x, %y {axis = 1 : i64} : (tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>>, tensor<?x2x7x7xi8, #nh.fixed<4, BCMD>>) -> tensor<?x6x7x7xi8, #nh.fixed<4, BCMD>>
  %3 = nh.concat %p, %p {axis = 1 : i64} : (tensor<?x2x7x7xi8, #nh.fixed<[1, 2], BCMD>>, tensor<?x2x7x7xi8, #nh.fixed<[1, 2], BCMD>>) -> tensor<?x4x7x7xi8, #nh.fixed<[1, 2, 1, 2], BCMD>>
  %4 = nh.reshape %x : tensor<?x4x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x196xi8, #nh.fixed<4, BC>>
  %5 = nh.lut %y {table = array<i64: -128, -127, -126, -125, -124, -123, -122, -121, -120, -119, -118, -117, -116, -115, -114, -113, -112, -111, -110, -109, -108, -107, -106, -105, -104, -103, -102, -101, -100, -99, -98, -97, -96, -95, -94, -93, -92, -91, -90, -89, -88, -87, -86, -85, -84, -83, -82, -81, -80, -79, -78, -77, -76, -75, -74, -73, -72, -71, -70, -69, -68, -67, -66, -65, -64, -63, -62, -61, -60, -59, -58, -57, -56, -55, -54, -53, -52, -51, -50, -49, -48, -47, -46, -45, -44, -43, -42, -41, -40, -39, -38, -37, -36, -35, -34, -33, -32, -31, -30, -29, -28, -27, -26, -25, -24, -23, -22, -21, -20, -19, -18, -17, -16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127>} : tensor<?x2x7x7xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x7x7xi8, #nh.fixed<7, BCMD>>
  func.return %0 : tensor<?x4x4x4xi8, #nh.fixed<4, BCMD>>
}

// -----

// The ops that every nf op lowers to: prelu, and data movement that keeps exponents.

// CHECK-LABEL: func.func @prelu_and_data_movement
func.func @prelu_and_data_movement(%x: tensor<?x2x3x4xi8, #nh.fixed<[5, 6], BCMD>>) -> (tensor<?x2x4x3xi16, #nh.fixed<[7, 8], BCMD>>, tensor<?x1x5x4xi8, #nh.fixed<5, BCMD>>, tensor<?x1x6x8xi8, #nh.fixed<6, BCMD>>) {
  // CHECK-NEXT: %a = nh.constant dense<[1, -2]> : tensor<2xi8> -> tensor<2xi4, #nh.fixed<2, C>>
  %a = nh.constant dense<[1, -2]> : tensor<2xi8> -> tensor<2xi4, #nh.fixed<2, C>>
  // CHECK-NEXT: %p = nh.prelu %x, %a {shift = 2 : i64} : (tensor<?x2x3x4xi8, #nh.fixed<[5, 6], BCMD>>, tensor<2xi4, #nh.fixed<2, C>>) -> tensor<?x2x3x4xi16, #nh.fixed<[7, 8], BCMD>>
  // GENERIC: "nh.prelu"(%x, %a) <{shift = 2 : i64}>
  %p = nh.prelu %x, %a {shift = 2 : i64} : (tensor<?x2x3x4xi8, #nh.fixed<[5, 6], BCMD>>, tensor<2xi4, #nh.fixed<2, C>>) -> tensor<?x2x3x4xi16, #nh.fixed<[7, 8], BCMD>>
  // CHECK-NEXT: %t = nh.transpose %p {perm = array<i64: 0, 1, 3, 2>} : tensor<?x2x3x4xi16, #nh.fixed<[7, 8], BCMD>> -> tensor<?x2x4x3xi16, #nh.fixed<[7, 8], BCMD>>
  %t = nh.transpose %p {perm = array<i64: 0, 1, 3, 2>} : tensor<?x2x3x4xi16, #nh.fixed<[7, 8], BCMD>> -> tensor<?x2x4x3xi16, #nh.fixed<[7, 8], BCMD>>
  // CHECK-NEXT: %s0, %s1 = nh.split %x {axis = 1 : i64, sizes = array<i64: 1, 1>} : (tensor<?x2x3x4xi8, #nh.fixed<[5, 6], BCMD>>) -> (tensor<?x1x3x4xi8, #nh.fixed<5, BCMD>>, tensor<?x1x3x4xi8, #nh.fixed<6, BCMD>>)
  %s0, %s1 = nh.split %x {axis = 1 : i64, sizes = array<i64: 1, 1>} : (tensor<?x2x3x4xi8, #nh.fixed<[5, 6], BCMD>>) -> (tensor<?x1x3x4xi8, #nh.fixed<5, BCMD>>, tensor<?x1x3x4xi8, #nh.fixed<6, BCMD>>)
  // CHECK-NEXT: %pd = nh.pad %s0 {pads = array<i64: 0, 0, 1, 0, 0, 0, 1, 0>, mode = "edge"} : tensor<?x1x3x4xi8, #nh.fixed<5, BCMD>> -> tensor<?x1x5x4xi8, #nh.fixed<5, BCMD>>
  %pd = nh.pad %s0 {pads = array<i64: 0, 0, 1, 0, 0, 0, 1, 0>, mode = "edge"} : tensor<?x1x3x4xi8, #nh.fixed<5, BCMD>> -> tensor<?x1x5x4xi8, #nh.fixed<5, BCMD>>
  // CHECK-NEXT: %u = nh.upsample_nearest %s1 : tensor<?x1x3x4xi8, #nh.fixed<6, BCMD>> -> tensor<?x1x6x8xi8, #nh.fixed<6, BCMD>>
  %u = nh.upsample_nearest %s1 : tensor<?x1x3x4xi8, #nh.fixed<6, BCMD>> -> tensor<?x1x6x8xi8, #nh.fixed<6, BCMD>>
  func.return %t, %pd, %u : tensor<?x2x4x3xi16, #nh.fixed<[7, 8], BCMD>>, tensor<?x1x5x4xi8, #nh.fixed<5, BCMD>>, tensor<?x1x6x8xi8, #nh.fixed<6, BCMD>>
}

// -----

// CHECK-LABEL: func.func @conv_transpose_grouped
func.func @conv_transpose_grouped(%x: tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>, %w: tensor<4x3x2x2xi4, #nh.fixed<[3, 2, 1], DCDD>>) -> tensor<?x6x6x6xi32, #nh.fixed<[8, 7, 6, 8, 7, 6], BCMD>> {
  // CHECK-NEXT: %0 = nh.conv_transpose %x, %w {strides = array<i64: 2, 2>, groups = 2 : i64} : (tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>, tensor<4x3x2x2xi4, #nh.fixed<[3, 2, 1], DCDD>>) -> tensor<?x6x6x6xi32, #nh.fixed<[8, 7, 6, 8, 7, 6], BCMD>>
  // GENERIC: "nh.conv_transpose"(%x, %w) <{strides = array<i64: 2, 2>, groups = 2 : i64}>
  %0 = nh.conv_transpose %x, %w {strides = array<i64: 2, 2>, groups = 2 : i64} : (tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>, tensor<4x3x2x2xi4, #nh.fixed<[3, 2, 1], DCDD>>) -> tensor<?x6x6x6xi32, #nh.fixed<[8, 7, 6, 8, 7, 6], BCMD>>
  func.return %0 : tensor<?x6x6x6xi32, #nh.fixed<[8, 7, 6, 8, 7, 6], BCMD>>
}

// -----

// CHECK-LABEL: func.func @block_ops
func.func @block_ops(%x: tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>>) -> (tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>, tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>) {
  // CHECK-NEXT: %0 = nh.depth_to_space %x {block = 2 : i64} : tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>
  // GENERIC: "nh.depth_to_space"(%x) <{block = 2 : i64, mode = "CRD"}>
  %0 = nh.depth_to_space %x {block = 2 : i64} : tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %1 = nh.space_to_depth %0 {block = 2 : i64, mode = "DCR"} : tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>> -> tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>>
  %1 = nh.space_to_depth %0 {block = 2 : i64, mode = "DCR"} : tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>> -> tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>>
  // CHECK-NEXT: %2 = nh.depth_to_space %1 {block = 2 : i64, mode = "DCR"} : tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>
  %2 = nh.depth_to_space %1 {block = 2 : i64, mode = "DCR"} : tensor<?x8x3x5xi8, #nh.fixed<4, BCMD>> -> tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>
  func.return %0, %2 : tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>, tensor<?x2x6x10xi8, #nh.fixed<4, BCMD>>
}

// -----

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%x: tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>>) -> (tensor<?x4x5x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>>, tensor<?x2x1x6xi8, #nh.fixed<[2, 5], BCMD>>) {
  // CHECK-NEXT: %0 = nh.expand %x : tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>> -> tensor<?x4x5x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>>
  // GENERIC: "nh.expand"(%x)
  %0 = nh.expand %x : tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>> -> tensor<?x4x5x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>>
  // CHECK-NEXT: %1 = nh.gather %x {axis = 1 : i64, indices = array<i64: 3, 0>} : tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>> -> tensor<?x2x1x6xi8, #nh.fixed<[2, 5], BCMD>>
  // GENERIC: "nh.gather"(%x) <{axis = 1 : i64, indices = array<i64: 3, 0>}>
  %1 = nh.gather %x {axis = 1 : i64, indices = array<i64: 3, 0>} : tensor<?x4x1x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>> -> tensor<?x2x1x6xi8, #nh.fixed<[2, 5], BCMD>>
  func.return %0, %1 : tensor<?x4x5x6xi8, #nh.fixed<[5, 4, 3, 2], BCMD>>, tensor<?x2x1x6xi8, #nh.fixed<[2, 5], BCMD>>
}
