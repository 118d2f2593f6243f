// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @constants
func.func @constants() -> tensor<2xf32> {
  // CHECK: %w = nf.constant "layer1.0.conv1.weight" dense<[1.000000e+00, -2.500000e+00]> : tensor<2xf32>
  // GENERIC: "nf.constant"() <{value = dense<[1.000000e+00, -2.500000e+00]> : tensor<2xf32>, name = "layer1.0.conv1.weight"}> : () -> tensor<2xf32>
  %w = nf.constant "layer1.0.conv1.weight" dense<[1.0, -2.5]> : tensor<2xf32>
  // CHECK: %s = nf.constant dense<2.000000e+00> : tensor<f32>
  %s = nf.constant dense<2.0> : tensor<f32>
  func.return %w : tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<?x16x7x5xf32>) -> tensor<?x16x7x5xf32> {
  // CHECK-NEXT: %0 = nf.relu %x : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %1 = nf.sigmoid %0 : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %2 = nf.tanh %1 : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %3 = nf.hardsigmoid %2 : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %4 = nf.hardswish %3 : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %5 = nf.clamp %4 {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64} : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %6 = nf.clamp %5 {max = 1.000000e+00 : f64} : tensor<?x16x7x5xf32>
  // CHECK-NEXT: %7 = nf.leaky_relu %6 {alpha = 1.000000e-02 : f64} : tensor<?x16x7x5xf32>
  // GENERIC: "nf.leaky_relu"(%{{.*}}) <{alpha = 1.000000e-02 : f64}> : (tensor<?x16x7x5xf32>) -> tensor<?x16x7x5xf32>
  %0 = nf.relu %x : tensor<?x16x7x5xf32>
  %1 = nf.sigmoid %0 : tensor<?x16x7x5xf32>
  %2 = nf.tanh %1 : tensor<?x16x7x5xf32>
  %3 = nf.hardsigmoid %2 : tensor<?x16x7x5xf32>
  %4 = nf.hardswish %3 : tensor<?x16x7x5xf32>
  %5 = nf.clamp %4 {min = 0.0 : f64, max = 6.0 : f64} : tensor<?x16x7x5xf32>
  %6 = nf.clamp %5 {max = 1.0 : f64} : tensor<?x16x7x5xf32>
  %7 = nf.leaky_relu %6 {alpha = 0.01 : f64} : tensor<?x16x7x5xf32>
  func.return %7 : tensor<?x16x7x5xf32>
}

// -----

// CHECK-LABEL: func.func @binary
func.func @binary(%x: tensor<?x16x7x5xf32>, %c: tensor<16x1x1xf32>, %s: tensor<f32>, %a: tensor<16xf32>) -> tensor<?x16x7x5xf32> {
  // CHECK-NEXT: %0 = nf.add %x, %c : (tensor<?x16x7x5xf32>, tensor<16x1x1xf32>) -> tensor<?x16x7x5xf32>
  // CHECK-NEXT: %1 = nf.sub %0, %s : (tensor<?x16x7x5xf32>, tensor<f32>) -> tensor<?x16x7x5xf32>
  // CHECK-NEXT: %2 = nf.mul %1, %x : (tensor<?x16x7x5xf32>, tensor<?x16x7x5xf32>) -> tensor<?x16x7x5xf32>
  // CHECK-NEXT: %3 = nf.div %2, %s : (tensor<?x16x7x5xf32>, tensor<f32>) -> tensor<?x16x7x5xf32>
  // CHECK-NEXT: %4 = nf.prelu %3, %a : (tensor<?x16x7x5xf32>, tensor<16xf32>) -> tensor<?x16x7x5xf32>
  %0 = nf.add %x, %c : (tensor<?x16x7x5xf32>, tensor<16x1x1xf32>) -> tensor<?x16x7x5xf32>
  %1 = nf.sub %0, %s : (tensor<?x16x7x5xf32>, tensor<f32>) -> tensor<?x16x7x5xf32>
  %2 = nf.mul %1, %x : (tensor<?x16x7x5xf32>, tensor<?x16x7x5xf32>) -> tensor<?x16x7x5xf32>
  %3 = nf.div %2, %s : (tensor<?x16x7x5xf32>, tensor<f32>) -> tensor<?x16x7x5xf32>
  %4 = nf.prelu %3, %a : (tensor<?x16x7x5xf32>, tensor<16xf32>) -> tensor<?x16x7x5xf32>
  func.return %4 : tensor<?x16x7x5xf32>
}

// -----

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<?x3x32x31xf32>, %w: tensor<16x3x3x3xf32>, %b: tensor<16xf32>, %dw: tensor<16x1x3x3xf32>, %x1: tensor<?x8x101xf32>, %w1: tensor<4x8x5xf32>) -> tensor<?x16x16x16xf32> {
  // CHECK-NEXT: %0 = nf.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 2>} : (tensor<?x3x32x31xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<?x16x16x16xf32>
  // GENERIC: "nf.conv"(%x, %w, %b) <{strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 2>, groups = 1 : i64}>
  // CHECK-NEXT: %1 = nf.conv %0, %dw {pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 2, 2>, groups = 16 : i64} : (tensor<?x16x16x16xf32>, tensor<16x1x3x3xf32>) -> tensor<?x16x16x16xf32>
  // CHECK-NEXT: %2 = nf.conv %x1, %w1 {strides = array<i64: 3>, dilations = array<i64: 2>} : (tensor<?x8x101xf32>, tensor<4x8x5xf32>) -> tensor<?x4x31xf32>
  %0 = nf.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 2>} : (tensor<?x3x32x31xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<?x16x16x16xf32>
  %1 = nf.conv %0, %dw {pads = array<i64: 2, 2, 2, 2>, dilations = array<i64: 2, 2>, groups = 16 : i64} : (tensor<?x16x16x16xf32>, tensor<16x1x3x3xf32>) -> tensor<?x16x16x16xf32>
  %2 = nf.conv %x1, %w1 {strides = array<i64: 3>, dilations = array<i64: 2>} : (tensor<?x8x101xf32>, tensor<4x8x5xf32>) -> tensor<?x4x31xf32>
  func.return %1 : tensor<?x16x16x16xf32>
}

// -----

// CHECK-LABEL: func.func @linear_algebra
func.func @linear_algebra(%x: tensor<?x400xf32>, %w: tensor<120x400xf32>, %b: tensor<120xf32>, %a: tensor<?x4x8xf32>, %m: tensor<8x5xf32>, %v: tensor<8xf32>) -> tensor<?x120xf32> {
  // CHECK-NEXT: %0 = nf.linear %x, %w, %b : (tensor<?x400xf32>, tensor<120x400xf32>, tensor<120xf32>) -> tensor<?x120xf32>
  // CHECK-NEXT: %1 = nf.linear %x, %w : (tensor<?x400xf32>, tensor<120x400xf32>) -> tensor<?x120xf32>
  // CHECK-NEXT: %2 = nf.matmul %a, %m : (tensor<?x4x8xf32>, tensor<8x5xf32>) -> tensor<?x4x5xf32>
  // CHECK-NEXT: %3 = nf.matmul %a, %v : (tensor<?x4x8xf32>, tensor<8xf32>) -> tensor<?x4xf32>
  %0 = nf.linear %x, %w, %b : (tensor<?x400xf32>, tensor<120x400xf32>, tensor<120xf32>) -> tensor<?x120xf32>
  %1 = nf.linear %x, %w : (tensor<?x400xf32>, tensor<120x400xf32>) -> tensor<?x120xf32>
  %2 = nf.matmul %a, %m : (tensor<?x4x8xf32>, tensor<8x5xf32>) -> tensor<?x4x5xf32>
  %3 = nf.matmul %a, %v : (tensor<?x4x8xf32>, tensor<8xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x120xf32>
}

// -----

// CHECK-LABEL: func.func @batch_norm
func.func @batch_norm(%x: tensor<?x16x7x5xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %m: tensor<16xf32>, %v: tensor<16xf32>) -> tensor<?x16x7x5xf32> {
  // CHECK-NEXT: %0 = nf.batch_norm %x, %g, %b, %m, %v : (tensor<?x16x7x5xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16x7x5xf32>
  // CHECK-NEXT: %1 = nf.batch_norm %0, %g, %b, %m, %v {epsilon = 1.000000e-03 : f64} : (tensor<?x16x7x5xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16x7x5xf32>
  %0 = nf.batch_norm %x, %g, %b, %m, %v : (tensor<?x16x7x5xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16x7x5xf32>
  %1 = nf.batch_norm %0, %g, %b, %m, %v {epsilon = 0.001 : f64} : (tensor<?x16x7x5xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16x7x5xf32>
  func.return %1 : tensor<?x16x7x5xf32>
}

// -----

// CHECK-LABEL: func.func @pools
func.func @pools(%x: tensor<?x16x7x5xf32>, %x1: tensor<?x8x50xf32>) -> tensor<?x16x4x3xf32> {
  // CHECK-NEXT: %0 = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true} : tensor<?x16x7x5xf32> -> tensor<?x16x4x3xf32>
  // CHECK-NEXT: %1 = nf.max_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 2, 1>} : tensor<?x16x7x5xf32> -> tensor<?x16x5x5xf32>
  // CHECK-NEXT: %2 = nf.avg_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = false} : tensor<?x16x7x5xf32> -> tensor<?x16x4x3xf32>
  // CHECK-NEXT: %3 = nf.avg_pool %x1 {kernel = array<i64: 4>, divisor_override = 3 : i64} : tensor<?x8x50xf32> -> tensor<?x8x47xf32>
  // CHECK-NEXT: %4 = nf.adaptive_avg_pool %x {output_size = array<i64: 1, 1>} : tensor<?x16x7x5xf32> -> tensor<?x16x1x1xf32>
  // GENERIC: "nf.max_pool"(%x) <{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true}> : (tensor<?x16x7x5xf32>) -> tensor<?x16x4x3xf32>
  %0 = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true} : tensor<?x16x7x5xf32> -> tensor<?x16x4x3xf32>
  %1 = nf.max_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 2, 1>} : tensor<?x16x7x5xf32> -> tensor<?x16x5x5xf32>
  %2 = nf.avg_pool %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, count_include_pad = false} : tensor<?x16x7x5xf32> -> tensor<?x16x4x3xf32>
  %3 = nf.avg_pool %x1 {kernel = array<i64: 4>, divisor_override = 3 : i64} : tensor<?x8x50xf32> -> tensor<?x8x47xf32>
  %4 = nf.adaptive_avg_pool %x {output_size = array<i64: 1, 1>} : tensor<?x16x7x5xf32> -> tensor<?x16x1x1xf32>
  func.return %0 : tensor<?x16x4x3xf32>
}

// -----

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%a: tensor<?x8x4x4xf32>, %b: tensor<?x4x4x4xf32>) -> tensor<?x12x4x4xf32> {
  // CHECK-NEXT: %0 = nf.concat %a, %b {axis = 1 : i64} : (tensor<?x8x4x4xf32>, tensor<?x4x4x4xf32>) -> tensor<?x12x4x4xf32>
  // CHECK-NEXT: %1, %2 = nf.split %0 {axis = 1 : i64, sizes = array<i64: 5, 7>} : (tensor<?x12x4x4xf32>) -> (tensor<?x5x4x4xf32>, tensor<?x7x4x4xf32>)
  // CHECK-NEXT: %3 = nf.reshape %0 : tensor<?x12x4x4xf32> -> tensor<?x192xf32>
  // CHECK-NEXT: %4 = nf.transpose %0 {perm = array<i64: 0, 2, 3, 1>} : tensor<?x12x4x4xf32> -> tensor<?x4x4x12xf32>
  // CHECK-NEXT: %5 = nf.pad %0 {pads = array<i64: 0, 0, 1, 2, 0, 0, 1, 0>, value = -1.000000e+00 : f64} : tensor<?x12x4x4xf32> -> tensor<?x12x6x6xf32>
  // CHECK-NEXT: %6 = nf.pad %0 {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "reflect"} : tensor<?x12x4x4xf32> -> tensor<?x12x6x6xf32>
  // CHECK-NEXT: %7 = nf.upsample_nearest %0 : tensor<?x12x4x4xf32> -> tensor<?x12x8x12xf32>
  %0 = nf.concat %a, %b {axis = 1 : i64} : (tensor<?x8x4x4xf32>, tensor<?x4x4x4xf32>) -> tensor<?x12x4x4xf32>
  %1, %2 = nf.split %0 {axis = 1 : i64, sizes = array<i64: 5, 7>} : (tensor<?x12x4x4xf32>) -> (tensor<?x5x4x4xf32>, tensor<?x7x4x4xf32>)
  %3 = nf.reshape %0 : tensor<?x12x4x4xf32> -> tensor<?x192xf32>
  %4 = nf.transpose %0 {perm = array<i64: 0, 2, 3, 1>} : tensor<?x12x4x4xf32> -> tensor<?x4x4x12xf32>
  %5 = nf.pad %0 {pads = array<i64: 0, 0, 1, 2, 0, 0, 1, 0>, value = -1.0 : f64} : tensor<?x12x4x4xf32> -> tensor<?x12x6x6xf32>
  %6 = nf.pad %0 {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "reflect"} : tensor<?x12x4x4xf32> -> tensor<?x12x6x6xf32>
  %7 = nf.upsample_nearest %0 : tensor<?x12x4x4xf32> -> tensor<?x12x8x12xf32>
  func.return %0 : tensor<?x12x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @custom
func.func @custom(%x: tensor<?x16xf32>) -> tensor<?x4xf32> {
  // CHECK-NEXT: %y = nf.custom %x {op_type = "Gather", attrs = {axis = 0 : i64}} : (tensor<?x16xf32>) -> tensor<?x4xf32>
  // GENERIC: "nf.custom"(%x) <{op_type = "Gather", attrs = {axis = 0 : i64}}> : (tensor<?x16xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %z, %w = nf.custom %y, %x {op_type = "Foo"} : (tensor<?x4xf32>, tensor<?x16xf32>) -> (tensor<?x4xf32>, tensor<?x16xf32>)
  %y = nf.custom %x {op_type = "Gather", attrs = {axis = 0 : i64}} : (tensor<?x16xf32>) -> tensor<?x4xf32>
  %z, %w = nf.custom %y, %x {op_type = "Foo"} : (tensor<?x4xf32>, tensor<?x16xf32>) -> (tensor<?x4xf32>, tensor<?x16xf32>)
  func.return %y : tensor<?x4xf32>
}

// -----

// CHECK-LABEL: func.func @conv_transpose_and_block_ops
func.func @conv_transpose_and_block_ops(%x: tensor<?x8x4x4xf32>, %w: tensor<8x4x4x4xf32>, %b: tensor<4xf32>) -> (tensor<?x4x8x8xf32>, tensor<?x2x8x8xf32>, tensor<?x32x2x2xf32>) {
  // CHECK-NEXT: %0 = nf.conv_transpose %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<?x8x4x4xf32>, tensor<8x4x4x4xf32>, tensor<4xf32>) -> tensor<?x4x8x8xf32>
  // GENERIC: "nf.conv_transpose"(%x, %w, %b) <{strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, groups = 1 : i64}>
  %0 = nf.conv_transpose %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<?x8x4x4xf32>, tensor<8x4x4x4xf32>, tensor<4xf32>) -> tensor<?x4x8x8xf32>
  // CHECK-NEXT: %1 = nf.depth_to_space %x {block = 2 : i64} : tensor<?x8x4x4xf32> -> tensor<?x2x8x8xf32>
  // GENERIC: "nf.depth_to_space"(%x) <{block = 2 : i64, mode = "CRD"}>
  %1 = nf.depth_to_space %x {block = 2 : i64} : tensor<?x8x4x4xf32> -> tensor<?x2x8x8xf32>
  // CHECK-NEXT: %2 = nf.space_to_depth %x {block = 2 : i64, mode = "DCR"} : tensor<?x8x4x4xf32> -> tensor<?x32x2x2xf32>
  %2 = nf.space_to_depth %x {block = 2 : i64, mode = "DCR"} : tensor<?x8x4x4xf32> -> tensor<?x32x2x2xf32>
  func.return %0, %1, %2 : tensor<?x4x8x8xf32>, tensor<?x2x8x8xf32>, tensor<?x32x2x2xf32>
}

// -----

// CHECK-LABEL: func.func @silu_gelu
func.func @silu_gelu(%x: tensor<?x16x7xf32>) -> tensor<?x16x7xf32> {
  // CHECK-NEXT: %0 = nf.silu %x : tensor<?x16x7xf32>
  // CHECK-NEXT: %1 = nf.gelu %0 : tensor<?x16x7xf32>
  // CHECK-NEXT: %2 = nf.gelu %1 {approximate = "tanh"} : tensor<?x16x7xf32>
  // GENERIC: "nf.gelu"(%{{.*}}) <{approximate = "tanh"}> : (tensor<?x16x7xf32>) -> tensor<?x16x7xf32>
  %0 = nf.silu %x : tensor<?x16x7xf32>
  %1 = nf.gelu %0 {approximate = "none"} : tensor<?x16x7xf32>
  %2 = nf.gelu %1 {approximate = "tanh"} : tensor<?x16x7xf32>
  func.return %2 : tensor<?x16x7xf32>
}

// -----

// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<?x2x8x8xf32>, %m: tensor<8x8xi1>) -> tensor<?x2x8x8xf32> {
  // CHECK-NEXT: %0 = nf.softmax %x {axis = -1 : i64} : (tensor<?x2x8x8xf32>) -> tensor<?x2x8x8xf32>
  // CHECK-NEXT: %1 = nf.softmax %0, %m {axis = 3 : i64} : (tensor<?x2x8x8xf32>, tensor<8x8xi1>) -> tensor<?x2x8x8xf32>
  // CHECK-NEXT: %2 = nf.log_softmax %1 {axis = 1 : i64} : (tensor<?x2x8x8xf32>) -> tensor<?x2x8x8xf32>
  // GENERIC: "nf.softmax"(%{{.*}}, %{{.*}}) <{axis = 3 : i64}> : (tensor<?x2x8x8xf32>, tensor<8x8xi1>) -> tensor<?x2x8x8xf32>
  %0 = nf.softmax %x {axis = -1 : i64} : (tensor<?x2x8x8xf32>) -> tensor<?x2x8x8xf32>
  %1 = nf.softmax %0, %m {axis = 3 : i64} : (tensor<?x2x8x8xf32>, tensor<8x8xi1>) -> tensor<?x2x8x8xf32>
  %2 = nf.log_softmax %1 {axis = 1 : i64} : (tensor<?x2x8x8xf32>) -> tensor<?x2x8x8xf32>
  func.return %2 : tensor<?x2x8x8xf32>
}

// -----

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%x: tensor<?x4x1x6xf32>) -> (tensor<?x4x5x6xf32>, tensor<?x3x1x6xf32>) {
  // CHECK-NEXT: %0 = nf.expand %x : tensor<?x4x1x6xf32> -> tensor<?x4x5x6xf32>
  // GENERIC: "nf.expand"(%x) : (tensor<?x4x1x6xf32>) -> tensor<?x4x5x6xf32>
  %0 = nf.expand %x : tensor<?x4x1x6xf32> -> tensor<?x4x5x6xf32>
  // CHECK-NEXT: %1 = nf.gather %x {axis = 1 : i64, indices = array<i64: 3, 0, 3>} : tensor<?x4x1x6xf32> -> tensor<?x3x1x6xf32>
  // GENERIC: "nf.gather"(%x) <{axis = 1 : i64, indices = array<i64: 3, 0, 3>}>
  %1 = nf.gather %x {axis = 1 : i64, indices = array<i64: 3, 0, 3>} : tensor<?x4x1x6xf32> -> tensor<?x3x1x6xf32>
  func.return %0, %1 : tensor<?x4x5x6xf32>, tensor<?x3x1x6xf32>
}
