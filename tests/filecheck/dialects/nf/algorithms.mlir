// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// The nf ops whose quantized meaning is an integer algorithm (runtime/numerics: norm,
// recurrent): LayerNorm, GroupNorm and the recurrent layers. Softmax and log-softmax are in
// ops.mlir.

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<?x8x6xf32>, %w: tensor<6xf32>, %b: tensor<6xf32>, %wc: tensor<8xf32>, %bc: tensor<8xf32>, %w2: tensor<8x6xf32>, %b2: tensor<8x6xf32>) -> (tensor<?x8x6xf32>, tensor<?x8x6xf32>, tensor<?x8x6xf32>) {
  // CHECK-NEXT: %0 = nf.layer_norm %x, %w, %b {normalized_dims = 1 : i64} : (tensor<?x8x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<?x8x6xf32>
  // GENERIC: "nf.layer_norm"(%x, %w, %b) <{normalized_dims = 1 : i64, epsilon = 1.000000e-05 : f64}> : (tensor<?x8x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<?x8x6xf32>
  %0 = nf.layer_norm %x, %w, %b {normalized_dims = 1 : i64} : (tensor<?x8x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<?x8x6xf32>
  // CHECK-NEXT: %1 = nf.layer_norm %x, %w2, %b2 {normalized_dims = 2 : i64, epsilon = 1.000000e-06 : f64} : (tensor<?x8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<?x8x6xf32>
  %1 = nf.layer_norm %x, %w2, %b2 {normalized_dims = 2 : i64, epsilon = 1.0e-06 : f64} : (tensor<?x8x6xf32>, tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<?x8x6xf32>
  // CHECK-NEXT: %2 = nf.group_norm %x, %wc, %bc {groups = 4 : i64} : (tensor<?x8x6xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8x6xf32>
  // GENERIC: "nf.group_norm"(%x, %wc, %bc) <{groups = 4 : i64, epsilon = 1.000000e-05 : f64}> : (tensor<?x8x6xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8x6xf32>
  %2 = nf.group_norm %x, %wc, %bc {groups = 4 : i64} : (tensor<?x8x6xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8x6xf32>
  func.return %0, %1, %2 : tensor<?x8x6xf32>, tensor<?x8x6xf32>, tensor<?x8x6xf32>
}

// -----

// A float LSTM with its initial states (zeros when absent), and a bidirectional GRU without
// biases, time first.

// CHECK-LABEL: func.func @recurrent_float
func.func @recurrent_float(%x: tensor<?x5x3xf32>, %h0: tensor<1x?x2xf32>, %c0: tensor<1x?x2xf32>, %wi: tensor<8x3xf32>, %wh: tensor<8x2xf32>, %bi: tensor<8xf32>, %bh: tensor<8xf32>, %t: tensor<7x4x3xf32>, %gi: tensor<6x3xf32>, %gh: tensor<6x2xf32>) -> (tensor<?x5x2xf32>, tensor<7x4x4xf32>) {
  // CHECK-NEXT: %y, %h, %c = nf.recurrent %x : tensor<?x5x3xf32> h0(%h0 : tensor<1x?x2xf32>) c0(%c0 : tensor<1x?x2xf32>) weights(%wi, %wh, %bi, %bh : tensor<8x3xf32>, tensor<8x2xf32>, tensor<8xf32>, tensor<8xf32>) {mode = "lstm", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true} -> tensor<?x5x2xf32>, tensor<1x?x2xf32>, tensor<1x?x2xf32>
  // GENERIC: "nf.recurrent"(%x, %h0, %c0, %wi, %wh, %bi, %bh) <{mode = "lstm", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true, operandSegmentSizes = array<i32: 1, 1, 1, 4>}> : (tensor<?x5x3xf32>, tensor<1x?x2xf32>, tensor<1x?x2xf32>, tensor<8x3xf32>, tensor<8x2xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<?x5x2xf32>, tensor<1x?x2xf32>, tensor<1x?x2xf32>)
  %y, %h, %c = nf.recurrent %x : tensor<?x5x3xf32> h0(%h0 : tensor<1x?x2xf32>) c0(%c0 : tensor<1x?x2xf32>) weights(%wi, %wh, %bi, %bh : tensor<8x3xf32>, tensor<8x2xf32>, tensor<8xf32>, tensor<8xf32>) {mode = "lstm", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true} -> tensor<?x5x2xf32>, tensor<1x?x2xf32>, tensor<1x?x2xf32>
  // CHECK-NEXT: %g, %gn = nf.recurrent %t : tensor<7x4x3xf32> weights(%gi, %gh, %gi, %gh : tensor<6x3xf32>, tensor<6x2xf32>, tensor<6x3xf32>, tensor<6x2xf32>) {mode = "gru", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = true, batch_first = false, has_biases = false} -> tensor<7x4x4xf32>, tensor<2x4x2xf32>
  %g, %gn = nf.recurrent %t : tensor<7x4x3xf32> weights(%gi, %gh, %gi, %gh : tensor<6x3xf32>, tensor<6x2xf32>, tensor<6x3xf32>, tensor<6x2xf32>) {mode = "gru", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = true, batch_first = false, has_biases = false} -> tensor<7x4x4xf32>, tensor<2x4x2xf32>
  func.return %y, %g : tensor<?x5x2xf32>, tensor<7x4x4xf32>
}

// -----

// A quantized RNN: quantize set its internal grids (gates, cell, hidden = [exp, bits]) and
// its rounding mode.

// CHECK-LABEL: func.func @recurrent_quantized
func.func @recurrent_quantized(%x: tensor<?x5x3xf32>, %wi: tensor<2x3xf32>, %wh: tensor<2x2xf32>) -> tensor<?x5x2xf32> {
  // CHECK-NEXT: %y, %h = nf.recurrent %x : tensor<?x5x3xf32> weights(%wi, %wh : tensor<2x3xf32>, tensor<2x2xf32>) {mode = "rnn_tanh", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = false, gates = array<i64: 5, 8>, cell = array<i64: 32, 16>, hidden = array<i64: 7, 8>, rounding = "half_even"} -> tensor<?x5x2xf32>, tensor<1x?x2xf32>
  // GENERIC: gates = array<i64: 5, 8>, cell = array<i64: 32, 16>, hidden = array<i64: 7, 8>, rounding = "half_even"
  %y, %h = nf.recurrent %x : tensor<?x5x3xf32> weights(%wi, %wh : tensor<2x3xf32>, tensor<2x2xf32>) {mode = "rnn_tanh", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = false, gates = array<i64: 5, 8>, cell = array<i64: 32, 16>, hidden = array<i64: 7, 8>, rounding = "half_even"} -> tensor<?x5x2xf32>, tensor<1x?x2xf32>
  func.return %y : tensor<?x5x2xf32>
}
