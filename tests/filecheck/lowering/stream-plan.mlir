// RUN: nanoir-opt %s -p 'stream-plan{steps="2:1,3:5"}' --split-input-file | filecheck %s
// RUN: nanoir-opt %s -p 'stream-plan{steps="2:1,3:5" report=true}' --split-input-file | filecheck %s --check-prefix=REPORT

// The sample's shape: a 3x3 conv on 5-wide rows, one row per step. The conv's cache holds
// its 3 rows of the whole width; every tensor is one row (M) of the full width (D).

// CHECK-LABEL: func.func @sample_like
// CHECK-SAME:    %x: tensor<?x3x?x5xf32> {stream.shape = array<i64: -1, 3, 1, 5>}
// CHECK-SAME:    stream.plan = {mem_dim = 2 : i64, steps = array<i64: 2, 1, 3, 5>}
// CHECK:       nf.conv %x, %w {stream.out_s = [array<i64: -1, 4, 1, 3>], stream.mem_s = [array<i64: -1, 3, 3, 5>]}
// CHECK:       nf.add %r, %c {stream.out_s = [array<i64: -1, 4, 1, 3>], stream.mem_s = [array<i64: -1, 4, 1, 3>, array<i64: -1, 4, 1, 3>]}

// REPORT:      Tensor Name  Max-Len-D2  Sum-Len-D2  Max-Len-D3  Sum-Len-D3
// REPORT-NEXT:           x           1           3           5           5
// REPORT:      Node Name Tensor Name  Max Len D2  Sum Len D2  Max Len D3  Sum Len D3
// REPORT-NEXT:    conv_c           x           3           3           5           5
func.func @sample_like(%x: tensor<?x3x?x5xf32>) -> tensor<?x4x?x3xf32> {
  %w = nf.constant "w" dense<0.5> : tensor<4x3x3x3xf32>
  %c = nf.conv %x, %w : (tensor<?x3x?x5xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x3xf32>
  %r = nf.relu %c : tensor<?x4x?x3xf32>
  %a = nf.add %r, %c : (tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>) -> tensor<?x4x?x3xf32>
  func.return %a : tensor<?x4x?x3xf32>
}

// -----

// Padding along M is a warm-up: 2 zero rows before the stream, 1 after it. A 1-D program has
// no dim 3, so only M is declared.

// CHECK-LABEL: func.func @padded
// CHECK:       nf.conv %x, %w {stream.out_s = [array<i64: -1, 2, 1>], stream.mem_s = [array<i64: -1, 1, 5>], stream.warmup = array<i64: 2, 1>

// REPORT:      zero rows along dim 2 (causal warm-up)
// REPORT-NEXT: Node Name  Begin  End
// REPORT-NEXT:    conv_c      2    1
func.func @padded(%x: tensor<?x1x?xf32>) -> tensor<?x2x?xf32> {
  %w = nf.constant "w" dense<1.0> : tensor<2x1x3xf32>
  %c = nf.conv %x, %w {pads = array<i64: 2, 1>, dilations = array<i64: 2>} : (tensor<?x1x?xf32>, tensor<2x1x3xf32>) -> tensor<?x2x?xf32>
  func.return %c : tensor<?x2x?xf32>
}

// -----

// Flattening the streamed dim buffers its whole (static) extent; what follows moves one
// sample at a time and has no M dim.

// CHECK-LABEL: func.func @flatten_then_linear
// CHECK:       nf.reshape %c {stream.out_s = [array<i64: -1, 8>], stream.mem_s = [array<i64: -1, 2, 4>]}
// CHECK:       nf.linear %f, %fw {stream.out_s = [array<i64: -1, 3>], stream.mem_s = [array<i64: -1, 8>]}
func.func @flatten_then_linear(%x: tensor<?x2x6xf32>) -> tensor<?x3xf32> {
  %w = nf.constant "w" dense<0.5> : tensor<2x2x3xf32>
  %c = nf.conv %x, %w : (tensor<?x2x6xf32>, tensor<2x2x3xf32>) -> tensor<?x2x4xf32>
  %f = nf.reshape %c : tensor<?x2x4xf32> -> tensor<?x8xf32>
  %fw = nf.constant "fc" dense<1.0> : tensor<3x8xf32>
  %y = nf.linear %f, %fw : (tensor<?x8xf32>, tensor<3x8xf32>) -> tensor<?x3xf32>
  func.return %y : tensor<?x3xf32>
}
