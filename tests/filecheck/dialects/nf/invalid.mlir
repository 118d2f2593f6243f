// RUN: nanoir-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @int_at_float_level(%x: tensor<4xi8>) -> tensor<4xi8> {
  %y = nf.relu %x : tensor<4xi8>
  func.return %y : tensor<4xi8>
}
// CHECK: invalid.mlir:4:3
// CHECK: error: 'nf.relu' op has an operand or result of the wrong type: Unexpected attribute i8

// -----

func.func @clamp_bounds(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.clamp %x {min = 6.0 : f64, max = 0.0 : f64} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: invalid.mlir:13:3
// CHECK: error: nf.clamp: min 6.0 is greater than max 0.0

// -----

func.func @gelu_form(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.gelu %x {approximate = "fast"} : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: invalid.mlir:22:3
// CHECK: error: nf.gelu: approximate must be one of none, tanh, not 'fast'

// -----

func.func @no_broadcast(%x: tensor<?x16x8x8xf32>, %y: tensor<3x1x1xf32>) -> tensor<?x16x8x8xf32> {
  %z = nf.add %x, %y : (tensor<?x16x8x8xf32>, tensor<3x1x1xf32>) -> tensor<?x16x8x8xf32>
  func.return %z : tensor<?x16x8x8xf32>
}
// CHECK: error: nf.add: shapes ?x16x8x8, 3x1x1 do not broadcast

// -----

func.func @binary_result_shape(%x: tensor<4x1xf32>, %y: tensor<5xf32>) -> tensor<4x4xf32> {
  %z = nf.mul %x, %y : (tensor<4x1xf32>, tensor<5xf32>) -> tensor<4x4xf32>
  func.return %z : tensor<4x4xf32>
}
// CHECK: error: nf.mul: result shape 4x4 does not match the inferred shape 4x5

// -----

func.func @mixed_float_types(%x: tensor<4xf32>, %y: tensor<4xf64>) -> tensor<4xf32> {
  %z = nf.sub %x, %y : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  func.return %z : tensor<4xf32>
}
// CHECK: error: nf.sub: operands and results mix element types f32, f64

// -----

func.func @prelu_slope(%x: tensor<?x16x8x8xf32>, %a: tensor<8xf32>) -> tensor<?x16x8x8xf32> {
  %y = nf.prelu %x, %a : (tensor<?x16x8x8xf32>, tensor<8xf32>) -> tensor<?x16x8x8xf32>
  func.return %y : tensor<?x16x8x8xf32>
}
// CHECK: error: nf.prelu: slope has 8 entries but the input has 16 channels

// -----

func.func @conv_channels(%x: tensor<?x4x8x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32> {
  %y = nf.conv %x, %w : (tensor<?x4x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32>
  func.return %y : tensor<?x16x6x6xf32>
}
// CHECK: error: nf.conv: input has 4 channels but weight expects 3 per group x 1 groups = 3

// -----

func.func @conv_groups(%x: tensor<?x6x8x8xf32>, %w: tensor<10x2x3x3xf32>) -> tensor<?x10x6x6xf32> {
  %y = nf.conv %x, %w {groups = 3 : i64} : (tensor<?x6x8x8xf32>, tensor<10x2x3x3xf32>) -> tensor<?x10x6x6xf32>
  func.return %y : tensor<?x10x6x6xf32>
}
// CHECK: error: nf.conv: output channels 10 are not divisible by groups 3

// -----

func.func @conv_bias(%x: tensor<?x3x8x8xf32>, %w: tensor<16x3x3x3xf32>, %b: tensor<8xf32>) -> tensor<?x16x6x6xf32> {
  %y = nf.conv %x, %w, %b : (tensor<?x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<8xf32>) -> tensor<?x16x6x6xf32>
  func.return %y : tensor<?x16x6x6xf32>
}
// CHECK: error: nf.conv: bias shape 8 does not match the 16 output channels

// -----

func.func @conv_strides_rank(%x: tensor<?x3x8x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32> {
  %y = nf.conv %x, %w {strides = array<i64: 1, 1, 1>} : (tensor<?x3x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32>
  func.return %y : tensor<?x16x6x6xf32>
}
// CHECK: error: nf.conv: strides has 3 entries, expected 2 (one per spatial dim)

// -----

func.func @conv_negative_pad(%x: tensor<?x3x8x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32> {
  %y = nf.conv %x, %w {pads = array<i64: 0, -1, 0, 0>} : (tensor<?x3x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32>
  func.return %y : tensor<?x16x6x6xf32>
}
// CHECK: error: nf.conv: pads must be non-negative, got [0, -1, 0, 0]

// -----

func.func @conv_result(%x: tensor<?x3x8x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x8x8xf32> {
  %y = nf.conv %x, %w : (tensor<?x3x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x8x8xf32>
  func.return %y : tensor<?x16x8x8xf32>
}
// CHECK: error: nf.conv: result shape ?x16x8x8 does not match the inferred shape ?x16x6x6

// -----

func.func @conv_window_too_big(%x: tensor<?x3x2x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x1x6xf32> {
  %y = nf.conv %x, %w : (tensor<?x3x2x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x1x6xf32>
  func.return %y : tensor<?x16x1x6xf32>
}
// CHECK: error: nf.conv: window of span 3 does not fit input length 2 with pads (0, 0)

// -----

func.func @linear_features(%x: tensor<?x300xf32>, %w: tensor<120x400xf32>) -> tensor<?x120xf32> {
  %y = nf.linear %x, %w : (tensor<?x300xf32>, tensor<120x400xf32>) -> tensor<?x120xf32>
  func.return %y : tensor<?x120xf32>
}
// CHECK: error: nf.linear: input features 300 do not match weight [O, I] = 120x400

// -----

func.func @linear_bias(%x: tensor<?x400xf32>, %w: tensor<120x400xf32>, %b: tensor<400xf32>) -> tensor<?x120xf32> {
  %y = nf.linear %x, %w, %b : (tensor<?x400xf32>, tensor<120x400xf32>, tensor<400xf32>) -> tensor<?x120xf32>
  func.return %y : tensor<?x120xf32>
}
// CHECK: error: nf.linear: bias shape 400 does not match the 120 output features

// -----

func.func @matmul_inner(%a: tensor<?x4x8xf32>, %b: tensor<7x5xf32>) -> tensor<?x4x5xf32> {
  %y = nf.matmul %a, %b : (tensor<?x4x8xf32>, tensor<7x5xf32>) -> tensor<?x4x5xf32>
  func.return %y : tensor<?x4x5xf32>
}
// CHECK: error: nf.matmul: matmul inner dims differ: ?x4x8 @ 7x5

// -----

func.func @bn_channels(%x: tensor<?x16x8x8xf32>, %g: tensor<8xf32>, %b: tensor<16xf32>) -> tensor<?x16x8x8xf32> {
  %y = nf.batch_norm %x, %g, %b, %b, %b : (tensor<?x16x8x8xf32>, tensor<8xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16x8x8xf32>
  func.return %y : tensor<?x16x8x8xf32>
}
// CHECK: error: nf.batch_norm: scale shape 8 does not match the 16 channels of the input

// -----

func.func @bn_epsilon(%x: tensor<?x16xf32>, %b: tensor<16xf32>) -> tensor<?x16xf32> {
  %y = nf.batch_norm %x, %b, %b, %b, %b {epsilon = -1.0 : f64} : (tensor<?x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  func.return %y : tensor<?x16xf32>
}
// CHECK: error: nf.batch_norm: epsilon -1.0 is negative

// -----

func.func @pool_pads(%x: tensor<?x16x8x8xf32>) -> tensor<?x16x10x10xf32> {
  %y = nf.max_pool %x {kernel = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>} : tensor<?x16x8x8xf32> -> tensor<?x16x10x10xf32>
  func.return %y : tensor<?x16x10x10xf32>
}
// CHECK: error: nf.max_pool: pads [2, 2, 2, 2] exceed half the kernel [2, 2] (PyTorch's limit)

// -----

func.func @pool_kernel(%x: tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32> {
  %y = nf.avg_pool %x {kernel = array<i64: 0, 1>} : tensor<?x16x8x8xf32> -> tensor<?x16x8x8xf32>
  func.return %y : tensor<?x16x8x8xf32>
}
// CHECK: error: nf.avg_pool: kernel sizes must be positive, got [0, 1]

// -----

func.func @pool_result(%x: tensor<?x16x7x7xf32>) -> tensor<?x16x4x4xf32> {
  %y = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x16x7x7xf32> -> tensor<?x16x4x4xf32>
  func.return %y : tensor<?x16x4x4xf32>
}
// CHECK: error: nf.max_pool: result shape ?x16x4x4 does not match the inferred shape ?x16x3x3

// -----

func.func @avg_divisor(%x: tensor<?x16x8x8xf32>) -> tensor<?x16x7x7xf32> {
  %y = nf.avg_pool %x {kernel = array<i64: 2, 2>, divisor_override = 0 : i64} : tensor<?x16x8x8xf32> -> tensor<?x16x7x7xf32>
  func.return %y : tensor<?x16x7x7xf32>
}
// CHECK: error: nf.avg_pool: divisor_override 0 must be positive

// -----

func.func @adaptive_rank(%x: tensor<?x16x8x8xf32>) -> tensor<?x16x1xf32> {
  %y = nf.adaptive_avg_pool %x {output_size = array<i64: 1>} : tensor<?x16x8x8xf32> -> tensor<?x16x1xf32>
  func.return %y : tensor<?x16x1xf32>
}
// CHECK: error: nf.adaptive_avg_pool: output_size [1] needs one entry per spatial dim of ?x16x8x8

// -----

func.func @concat_dims(%a: tensor<?x8x4x4xf32>, %b: tensor<?x4x5x4xf32>) -> tensor<?x12x4x4xf32> {
  %y = nf.concat %a, %b {axis = 1 : i64} : (tensor<?x8x4x4xf32>, tensor<?x4x5x4xf32>) -> tensor<?x12x4x4xf32>
  func.return %y : tensor<?x12x4x4xf32>
}
// CHECK: error: nf.concat: inputs differ outside axis 1: ?x8x4x4 and ?x4x5x4

// -----

func.func @split_sizes(%x: tensor<?x12x4x4xf32>) -> tensor<?x5x4x4xf32> {
  %a, %b = nf.split %x {axis = 1 : i64, sizes = array<i64: 5, 5>} : (tensor<?x12x4x4xf32>) -> (tensor<?x5x4x4xf32>, tensor<?x5x4x4xf32>)
  func.return %a : tensor<?x5x4x4xf32>
}
// CHECK: error: nf.split: sizes [5, 5] add up to 10, but dim 1 of the input is 12

// -----

func.func @reshape_count(%x: tensor<2x12xf32>) -> tensor<5x5xf32> {
  %y = nf.reshape %x : tensor<2x12xf32> -> tensor<5x5xf32>
  func.return %y : tensor<5x5xf32>
}
// CHECK: error: nf.reshape: 2x12 has 24 elements but 5x5 has 25

// -----

func.func @reshape_two_dynamic(%x: tensor<?x12xf32>) -> tensor<?x?xf32> {
  %y = nf.reshape %x : tensor<?x12xf32> -> tensor<?x?xf32>
  func.return %y : tensor<?x?xf32>
}
// CHECK: error: nf.reshape: result ?x? has more than one dynamic dim

// -----

func.func @transpose_perm(%x: tensor<?x16x40xf32>) -> tensor<?x40x16xf32> {
  %y = nf.transpose %x {perm = array<i64: 0, 2, 2>} : tensor<?x16x40xf32> -> tensor<?x40x16xf32>
  func.return %y : tensor<?x40x16xf32>
}
// CHECK: error: nf.transpose: perm [0, 2, 2] is not a permutation of the 3 dims

// -----

func.func @pad_mode(%x: tensor<4xf32>) -> tensor<6xf32> {
  %y = nf.pad %x {pads = array<i64: 1, 1>, mode = "wrap"} : tensor<4xf32> -> tensor<6xf32>
  func.return %y : tensor<6xf32>
}
// CHECK: error: nf.pad: mode 'wrap' is not one of constant, reflect, edge

// -----

func.func @pad_count(%x: tensor<4x4xf32>) -> tensor<6x4xf32> {
  %y = nf.pad %x {pads = array<i64: 1, 1>} : tensor<4x4xf32> -> tensor<6x4xf32>
  func.return %y : tensor<6x4xf32>
}
// CHECK: error: nf.pad: pads has 2 entries, expected 4 for 4x4

// -----

func.func @pad_reflect_as_wide_as_the_dim(%x: tensor<?x3xf32>) -> tensor<?x6xf32> {
  %y = nf.pad %x {pads = array<i64: 0, 3, 0, 0>, mode = "reflect"} : tensor<?x3xf32> -> tensor<?x6xf32>
  func.return %y : tensor<?x6xf32>
}
// CHECK: error: nf.pad: reflect pads (3, 0) on dim 1 of size 3: at most 2 rows a side reflect

// -----

func.func @upsample_channels(%x: tensor<?x16x4x4xf32>) -> tensor<?x8x8x8xf32> {
  %y = nf.upsample_nearest %x : tensor<?x16x4x4xf32> -> tensor<?x8x8x8xf32>
  func.return %y : tensor<?x8x8x8xf32>
}
// CHECK: error: nf.upsample_nearest: batch and channels must not change: ?x16x4x4 -> ?x8x8x8

// -----

func.func @constant_type(%x: tensor<2xf32>) -> tensor<2xf32> {
  %w = nf.constant "w" dense<[1, 2]> : tensor<2xi32>
  func.return %x : tensor<2xf32>
}
// CHECK: error: 'nf.constant' op

// -----

func.func @conv_transpose_bias(%x: tensor<?x8x4x4xf32>, %w: tensor<8x4x4x4xf32>, %b: tensor<8xf32>) -> tensor<?x4x8x8xf32> {
  %0 = nf.conv_transpose %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<?x8x4x4xf32>, tensor<8x4x4x4xf32>, tensor<8xf32>) -> tensor<?x4x8x8xf32>
  func.return %0 : tensor<?x4x8x8xf32>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nf.conv_transpose: bias shape 8 does not match the 4 output channels

// -----

func.func @depth_to_space_channels(%x: tensor<?x6x4x4xf32>) -> tensor<?x1x8x8xf32> {
  %0 = nf.depth_to_space %x {block = 2 : i64} : tensor<?x6x4x4xf32> -> tensor<?x1x8x8xf32>
  func.return %0 : tensor<?x1x8x8xf32>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nf.depth_to_space:

// -----

func.func @block_mode(%x: tensor<?x8x4x4xf32>) -> tensor<?x2x8x8xf32> {
  %0 = nf.depth_to_space %x {block = 2 : i64, mode = "RCD"} : tensor<?x8x4x4xf32> -> tensor<?x2x8x8xf32>
  func.return %0 : tensor<?x2x8x8xf32>
}
// CHECK: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: error: nf.depth_to_space: mode 'RCD' is not CRD or DCR

// -----

func.func @expand_not_broadcast(%x: tensor<?x4x2xf32>) -> tensor<?x4x5xf32> {
  %y = nf.expand %x : tensor<?x4x2xf32> -> tensor<?x4x5xf32>
  func.return %y : tensor<?x4x5xf32>
}
// CHECK: error: nf.expand: expand: ?x4x2 does not broadcast to ?x4x5

// -----

func.func @gather_out_of_range(%x: tensor<?x4xf32>) -> tensor<?x2xf32> {
  %y = nf.gather %x {axis = 1 : i64, indices = array<i64: 0, 4>} : tensor<?x4xf32> -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}
// CHECK: error: nf.gather: gather: indices [4] are out of range for size 4 of dim 1
