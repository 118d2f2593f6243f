// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// The nh ops that run an integer algorithm (runtime/numerics: softmax, norm, recurrent) with
// their static tables and plans as properties.

// The i-exp tables of a 4-bit input at exponent 0 (exp_tables(0, 4)): exp_hi[i] =
// round(exp(-4 i) 2**30), exp_lo[j] = round(exp(-j) 2**22).

// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<?x10xi8, #nh.fixed<0, BC>>) -> (tensor<?x10xi8, #nh.fixed<7, BC>>, tensor<?x10xi8, #nh.fixed<3, BC>>, tensor<?x10xi16, #nh.fixed<7, BC>>) {
  // CHECK-NEXT: %0 = nh.softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>} : tensor<?x10xi8, #nh.fixed<0, BC>> -> tensor<?x10xi8, #nh.fixed<7, BC>>
  // GENERIC: "nh.softmax"(%x) <{axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>}> : (tensor<?x10xi8, #nh.fixed<0, BC>>) -> tensor<?x10xi8, #nh.fixed<7, BC>>
  %0 = nh.softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>} : tensor<?x10xi8, #nh.fixed<0, BC>> -> tensor<?x10xi8, #nh.fixed<7, BC>>
  // CHECK-NEXT: %1 = nh.log_softmax %x {axis = -1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>} : tensor<?x10xi8, #nh.fixed<0, BC>> -> tensor<?x10xi8, #nh.fixed<3, BC>>
  // GENERIC: "nh.log_softmax"(%x) <{axis = -1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>}> : (tensor<?x10xi8, #nh.fixed<0, BC>>) -> tensor<?x10xi8, #nh.fixed<3, BC>>
  %1 = nh.log_softmax %x {axis = -1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>} : tensor<?x10xi8, #nh.fixed<0, BC>> -> tensor<?x10xi8, #nh.fixed<3, BC>>
  // A mask (i1, broadcast against the input; true = takes part) and a result wider than its bits.
  // CHECK-NEXT: %2 = nh.softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>, mask = dense<[true, true, true, false, true, true, true, true, true, false]> : tensor<10xi1>} : tensor<?x10xi8, #nh.fixed<0, BC>> -> tensor<?x10xi16, #nh.fixed<7, BC>>
  %2 = nh.softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>, mask = dense<[true, true, true, false, true, true, true, true, true, false]> : tensor<10xi1>} : tensor<?x10xi8, #nh.fixed<0, BC>> -> tensor<?x10xi16, #nh.fixed<7, BC>>
  func.return %0, %1, %2 : tensor<?x10xi8, #nh.fixed<7, BC>>, tensor<?x10xi8, #nh.fixed<3, BC>>, tensor<?x10xi16, #nh.fixed<7, BC>>
}

// -----

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<?x4x16xi8, #nh.fixed<4, BCD>>, %w: tensor<16xi8, #nh.fixed<6, C>>, %b: tensor<16xi8, #nh.fixed<7, C>>, %wc: tensor<4xi8, #nh.fixed<6, C>>, %bc: tensor<4xi8, #nh.fixed<7, C>>) -> (tensor<?x4x16xi8, #nh.fixed<5, BCD>>, tensor<?x4x16xi16, #nh.fixed<5, BCD>>) {
  // CHECK-NEXT: %0 = nh.layer_norm %x, %w, %b {normalized_dims = 1 : i64, bits = 8 : i64, max_shift = 30 : i64, eps_term = 11258999 : i64, guard = 24 : i64, nudge = 3 : i64} : (tensor<?x4x16xi8, #nh.fixed<4, BCD>>, tensor<16xi8, #nh.fixed<6, C>>, tensor<16xi8, #nh.fixed<7, C>>) -> tensor<?x4x16xi8, #nh.fixed<5, BCD>>
  // GENERIC: "nh.layer_norm"(%x, %w, %b) <{normalized_dims = 1 : i64, bits = 8 : i64, max_shift = 30 : i64, eps_term = 11258999 : i64, guard = 24 : i64, nudge = 3 : i64, rounding = #nq.rounding<trunc>}>
  %0 = nh.layer_norm %x, %w, %b {normalized_dims = 1 : i64, bits = 8 : i64, max_shift = 30 : i64, eps_term = 11258999 : i64, guard = 24 : i64, nudge = 3 : i64} : (tensor<?x4x16xi8, #nh.fixed<4, BCD>>, tensor<16xi8, #nh.fixed<6, C>>, tensor<16xi8, #nh.fixed<7, C>>) -> tensor<?x4x16xi8, #nh.fixed<5, BCD>>
  // CHECK-NEXT: %1 = nh.group_norm %x, %wc, %bc {groups = 2 : i64, bits = 12 : i64, max_shift = 30 : i64, eps_term = 0 : i64, guard = 20 : i64, nudge = 1 : i64, rounding = #nq.rounding<half_even>} : (tensor<?x4x16xi8, #nh.fixed<4, BCD>>, tensor<4xi8, #nh.fixed<6, C>>, tensor<4xi8, #nh.fixed<7, C>>) -> tensor<?x4x16xi16, #nh.fixed<5, BCD>>
  // GENERIC: "nh.group_norm"(%x, %wc, %bc) <{groups = 2 : i64, bits = 12 : i64, max_shift = 30 : i64, eps_term = 0 : i64, guard = 20 : i64, nudge = 1 : i64, rounding = #nq.rounding<half_even>}>
  %1 = nh.group_norm %x, %wc, %bc {groups = 2 : i64, bits = 12 : i64, max_shift = 30 : i64, eps_term = 0 : i64, guard = 20 : i64, nudge = 1 : i64, rounding = #nq.rounding<half_even>} : (tensor<?x4x16xi8, #nh.fixed<4, BCD>>, tensor<4xi8, #nh.fixed<6, C>>, tensor<4xi8, #nh.fixed<7, C>>) -> tensor<?x4x16xi16, #nh.fixed<5, BCD>>
  func.return %0, %1 : tensor<?x4x16xi8, #nh.fixed<5, BCD>>, tensor<?x4x16xi16, #nh.fixed<5, BCD>>
}

// -----

// An integer LSTM with 3-bit gates at exponent 1 (8 codes, -2..1.5): its sigmoid and tanh
// tables have one Q0.15 entry per code, qmin first. Results on the hidden grid [7, 8] (output
// BMC, the final states BDC) and c_n on the cell grid [12, 16].

// CHECK-LABEL: func.func @recurrent_lstm
func.func @recurrent_lstm(%x: tensor<?x5x3xi8, #nh.fixed<5, BCM>>, %h0: tensor<1x?x2xi8, #nh.fixed<6, BDC>>, %c0: tensor<1x?x2xi16, #nh.fixed<12, BDC>>, %wi: tensor<8x3xi8, #nh.fixed<7, CD>>, %wh: tensor<8x2xi8, #nh.fixed<[7, 7, 7, 7, 6, 6, 6, 6], CD>>, %bi: tensor<8xi8, #nh.fixed<7, C>>, %bh: tensor<8xi8, #nh.fixed<7, C>>) -> (tensor<?x5x2xi8, #nh.fixed<7, BMC>>, tensor<1x?x2xi16, #nh.fixed<12, BDC>>) {
  // CHECK-NEXT: %y, %h, %c = nh.recurrent %x : tensor<?x5x3xi8, #nh.fixed<5, BCM>> h0(%h0 : tensor<1x?x2xi8, #nh.fixed<6, BDC>>) c0(%c0 : tensor<1x?x2xi16, #nh.fixed<12, BDC>>) weights(%wi, %wh, %bi, %bh : tensor<8x3xi8, #nh.fixed<7, CD>>, tensor<8x2xi8, #nh.fixed<[7, 7, 7, 7, 6, 6, 6, 6], CD>>, tensor<8xi8, #nh.fixed<7, C>>, tensor<8xi8, #nh.fixed<7, C>>) {mode = "lstm", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true, gates = array<i64: 1, 3>, cell = array<i64: 12, 16>, hidden = array<i64: 7, 8>, rounding = "trunc", sigmoid_table = array<i64: 3906, 5978, 8813, 12371, 16384, 20397, 23955, 26790>, tanh_table = array<i64: -31589, -29660, -24956, -15143, 0, 15143, 24956, 29660>} -> tensor<?x5x2xi8, #nh.fixed<7, BMC>>, tensor<1x?x2xi8, #nh.fixed<7, BDC>>, tensor<1x?x2xi16, #nh.fixed<12, BDC>>
  // GENERIC: "nh.recurrent"(%x, %h0, %c0, %wi, %wh, %bi, %bh) <{mode = "lstm", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true, gates = array<i64: 1, 3>, cell = array<i64: 12, 16>, hidden = array<i64: 7, 8>, rounding = "trunc", sigmoid_table = array<i64: 3906, 5978, 8813, 12371, 16384, 20397, 23955, 26790>, tanh_table = array<i64: -31589, -29660, -24956, -15143, 0, 15143, 24956, 29660>, operandSegmentSizes = array<i32: 1, 1, 1, 4>}>
  %y, %h, %c = nh.recurrent %x : tensor<?x5x3xi8, #nh.fixed<5, BCM>> h0(%h0 : tensor<1x?x2xi8, #nh.fixed<6, BDC>>) c0(%c0 : tensor<1x?x2xi16, #nh.fixed<12, BDC>>) weights(%wi, %wh, %bi, %bh : tensor<8x3xi8, #nh.fixed<7, CD>>, tensor<8x2xi8, #nh.fixed<[7, 7, 7, 7, 6, 6, 6, 6], CD>>, tensor<8xi8, #nh.fixed<7, C>>, tensor<8xi8, #nh.fixed<7, C>>) {mode = "lstm", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true, gates = array<i64: 1, 3>, cell = array<i64: 12, 16>, hidden = array<i64: 7, 8>, rounding = "trunc", sigmoid_table = array<i64: 3906, 5978, 8813, 12371, 16384, 20397, 23955, 26790>, tanh_table = array<i64: -31589, -29660, -24956, -15143, 0, 15143, 24956, 29660>} -> tensor<?x5x2xi8, #nh.fixed<7, BMC>>, tensor<1x?x2xi8, #nh.fixed<7, BDC>>, tensor<1x?x2xi16, #nh.fixed<12, BDC>>
  func.return %y, %c : tensor<?x5x2xi8, #nh.fixed<7, BMC>>, tensor<1x?x2xi16, #nh.fixed<12, BDC>>
}

// -----

// A time-first GRU without biases, 2-bit gates at exponent 0 (4 codes).

// CHECK-LABEL: func.func @recurrent_gru
func.func @recurrent_gru(%x: tensor<7x?x3xi8, #nh.fixed<5, BCM>>, %wi: tensor<6x3xi8, #nh.fixed<7, CD>>, %wh: tensor<6x2xi8, #nh.fixed<7, CD>>) -> tensor<7x?x2xi8, #nh.fixed<6, BDC>> {
  // CHECK-NEXT: %y, %h = nh.recurrent %x : tensor<7x?x3xi8, #nh.fixed<5, BCM>> weights(%wi, %wh : tensor<6x3xi8, #nh.fixed<7, CD>>, tensor<6x2xi8, #nh.fixed<7, CD>>) {mode = "gru", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = false, has_biases = false, gates = array<i64: 0, 2>, cell = array<i64: 32, 16>, hidden = array<i64: 6, 8>, rounding = "half_even", sigmoid_table = array<i64: 3906, 8813, 16384, 23955>, tanh_table = array<i64: -31589, -24956, 0, 24956>} -> tensor<7x?x2xi8, #nh.fixed<6, BDC>>, tensor<1x?x2xi8, #nh.fixed<6, BDC>>
  %y, %h = nh.recurrent %x : tensor<7x?x3xi8, #nh.fixed<5, BCM>> weights(%wi, %wh : tensor<6x3xi8, #nh.fixed<7, CD>>, tensor<6x2xi8, #nh.fixed<7, CD>>) {mode = "gru", hidden_size = 2 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = false, has_biases = false, gates = array<i64: 0, 2>, cell = array<i64: 32, 16>, hidden = array<i64: 6, 8>, rounding = "half_even", sigmoid_table = array<i64: 3906, 8813, 16384, 23955>, tanh_table = array<i64: -31589, -24956, 0, 24956>} -> tensor<7x?x2xi8, #nh.fixed<6, BDC>>, tensor<1x?x2xi8, #nh.fixed<6, BDC>>
  func.return %y : tensor<7x?x2xi8, #nh.fixed<6, BDC>>
}
