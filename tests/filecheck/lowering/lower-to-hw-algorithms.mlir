// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// lower-to-hw of the ops defined by an integer algorithm (lowering/hw/softmax.py,
// normalization.py, recurrent.py): each becomes its nh op on the input codes, with the static
// tables or plan the nq kernel computes from the same grids (so nq == nh by construction). The
// numbers below are derived by hand from the formulas in the nh ops' docstrings.

// LowerSoftmax: 4-bit codes at exponent 0 (code differences 0..15, m = 2): exp_hi[i] =
// round(exp(-4 i) 2**30) = 2**30, 19666268, 360200, 6597; exp_lo[j] = round(exp(-j) 2**22) =
// 2**22, 1542998, 567637, 208822. The output fake-quants give bits and exponents (7 and 3) and
// lower to nothing.

// CHECK-LABEL: func.func @softmax
// CHECK-SAME:    %x: tensor<?x10xi4, #nh.fixed<0, BC>>
// CHECK-NEXT:  %[[S:.*]] = nh.softmax %x {axis = -1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>} : tensor<?x10xi4, #nh.fixed<0, BC>> -> tensor<?x10xi8, #nh.fixed<7, BC>>
// CHECK-NEXT:  %[[L:.*]] = nh.log_softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: 1073741824, 19666268, 360200, 6597>, exp_lo = array<i64: 4194304, 1542998, 567637, 208822>} : tensor<?x10xi4, #nh.fixed<0, BC>> -> tensor<?x10xi8, #nh.fixed<3, BC>>
// CHECK-NEXT:  func.return %[[S]], %[[L]]
// CHECK-NOT:   nf.

func.func @softmax(%x: tensor<?x10xf32>) -> (tensor<?x10xf32>, tensor<?x10xf32>) {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x10xf32>
  %s = nf.softmax %xq {axis = -1 : i64} : (tensor<?x10xf32>) -> tensor<?x10xf32>
  %sq = nq.fake_quant %s {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x10xf32>
  %l = nf.log_softmax %xq {axis = 1 : i64} : (tensor<?x10xf32>) -> tensor<?x10xf32>
  %lq = nq.fake_quant %l {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x10xf32>
  func.return %sq, %lq : tensor<?x10xf32>, tensor<?x10xf32>
}

// -----

// LowerNorm (layer_norm): n = 4 codes per row at exponent k = 4, eps = 1e-5; weight codes at
// 2**6, bias codes at 2**7; output exponent 5. The plan: the largest scale shift H = 30
// (n**2 eps 4**(k+H) < 2**59), eps_term = round(16 eps 4**34) = 47223664828696456; guard P =
// 24; the error bound e = max|g| 2**(5-6) (isqrt(3) + 1) 2**-27 + max|g| 2**-25 with max|g| =
// 96, so the trunc nudge is ceil(e 2**24) + 1 = 60 + 1.

// CHECK-LABEL: func.func @layer_norm
// CHECK-DAG:   %[[W:.*]] = nh.constant "ln.weight" dense<[64, 32, -16, 96]> : tensor<4xi8> -> tensor<4xi8, #nh.fixed<6, C>>
// CHECK-DAG:   %[[B:.*]] = nh.constant "ln.bias" dense<[0, 32, -64, 16]> : tensor<4xi8> -> tensor<4xi8, #nh.fixed<7, C>>
// CHECK:       %[[Y:.*]] = nh.layer_norm %x, %[[W]], %[[B]] {bits = 8 : i64, max_shift = 30 : i64, eps_term = 47223664828696456 : i64, guard = 24 : i64, nudge = 61 : i64, normalized_dims = 1 : i64} : (tensor<?x3x4xi8, #nh.fixed<4, BCM>>, tensor<4xi8, #nh.fixed<6, C>>, tensor<4xi8, #nh.fixed<7, C>>) -> tensor<?x3x4xi8, #nh.fixed<5, BCM>>
// CHECK-NEXT:  func.return %[[Y]]
// CHECK-NOT:   nf.

func.func @layer_norm(%x: tensor<?x3x4xf32>) -> tensor<?x3x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x3x4xf32>
  %w = nf.constant "ln.weight" dense<[1.0, 0.5, -0.25, 1.5]> : tensor<4xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<4xf32>
  %b = nf.constant "ln.bias" dense<[0.0, 0.25, -0.5, 0.125]> : tensor<4xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<4xf32>
  %y = nf.layer_norm %xq, %wq, %bq {normalized_dims = 1 : i64} : (tensor<?x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<?x3x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x3x4xf32>
  func.return %yq : tensor<?x3x4xf32>
}

// -----

// LowerNorm (group_norm): 2 groups of 2 channels x 3 positions, n = 6, eps = 1e-3, a 16-bit
// half_even output at 2**9. H = 27 (36 eps 4**(4+28) would pass 2**59), eps_term =
// round(36 eps 4**31) = 166020696663385968; e = 96 2**3 (isqrt(5) + 1) 2**-27 + 96 2**-25, so
// nudge = 336 + 1 (unused by the half modes, kept in the plan).

// CHECK-LABEL: func.func @group_norm
// CHECK:       %[[Y:.*]] = nh.group_norm %x, %{{.*}}, %{{.*}} {bits = 16 : i64, max_shift = 27 : i64, eps_term = 166020696663385968 : i64, guard = 24 : i64, nudge = 337 : i64, rounding = #nq.rounding<half_even>, groups = 2 : i64} : (tensor<?x4x3xi8, #nh.fixed<4, BCM>>, tensor<4xi8, #nh.fixed<6, C>>, tensor<4xi8, #nh.fixed<7, C>>) -> tensor<?x4x3xi16, #nh.fixed<9, BCM>>
// CHECK-NEXT:  func.return %[[Y]]

func.func @group_norm(%x: tensor<?x4x3xf32>) -> tensor<?x4x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4x3xf32>
  %w = nf.constant "gn.weight" dense<[1.0, 0.5, -0.25, 1.5]> : tensor<4xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<4xf32>
  %b = nf.constant "gn.bias" dense<[0.0, 0.25, -0.5, 0.125]> : tensor<4xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<4xf32>
  %y = nf.group_norm %xq, %wq, %bq {groups = 2 : i64, epsilon = 1.0e-03 : f64} : (tensor<?x4x3xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<?x4x3xf32>
  %yq = nq.fake_quant %y {bits = 16 : i64, exp = dense<9> : tensor<1xi8>, rounding = #nq.rounding<half_even>} : tensor<?x4x3xf32>
  func.return %yq : tensor<?x4x3xf32>
}

// -----

// LowerRecurrent: the weights become codes at their per-row exponents; the gates grid [1, 3]
// (codes -4..3, x = -2..1.5) gives the tables, rounded by the op's mode (trunc):
// trunc(2**15 sigmoid(x)) and trunc(2**15 tanh(x)), qmin first. Results on the hidden grid
// (output BMC) and the cell grid (c_n, BDC); their fake-quants lower to nothing.

// CHECK-LABEL: func.func @lstm
// CHECK-DAG:   %[[WI:.*]] = nh.constant "lstm.weight_ih_l0" dense<{{\[\[}}64, -32], [64, 8], [-64, 96], [32, 32]]> : tensor<4x2xi8> -> tensor<4x2xi8, #nh.fixed<[7, 6, 7, 7], CD>>
// CHECK-DAG:   %[[WH:.*]] = nh.constant "lstm.weight_hh_l0" dense<{{\[\[}}32], [-64], [16], [48]]> : tensor<4x1xi8> -> tensor<4x1xi8, #nh.fixed<6, CD>>
// CHECK:       %[[Y:.*]], %{{.*}}, %[[C:.*]] = nh.recurrent %x : tensor<?x5x2xi8, #nh.fixed<5, BCM>> weights(%[[WI]], %[[WH]] : {{.*}}) {mode = "lstm", hidden_size = 1 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = false, gates = array<i64: 1, 3>, cell = array<i64: 12, 16>, hidden = array<i64: 7, 8>, rounding = "trunc", sigmoid_table = array<i64: 3906, 5977, 8812, 12371, 16384, 20396, 23955, 26790>, tanh_table = array<i64: -31589, -29659, -24955, -15142, 0, 15142, 24955, 29659>} -> tensor<?x5x1xi8, #nh.fixed<7, BMC>>, tensor<1x?x1xi8, #nh.fixed<7, BDC>>, tensor<1x?x1xi16, #nh.fixed<12, BDC>>
// CHECK-NEXT:  func.return %[[Y]], %[[C]]
// CHECK-NOT:   nf.

func.func @lstm(%x: tensor<?x5x2xf32>) -> (tensor<?x5x1xf32>, tensor<1x?x1xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x5x2xf32>
  %wi = nf.constant "lstm.weight_ih_l0" dense<[[0.5, -0.25], [1.0, 0.125], [-0.5, 0.75], [0.25, 0.25]]> : tensor<4x2xf32>
  %wiq = nq.fake_quant %wi {bits = 8 : i64, exp = dense<[[7], [6], [7], [7]]> : tensor<4x1xi8>} : tensor<4x2xf32>
  %wh = nf.constant "lstm.weight_hh_l0" dense<[[0.5], [-1.0], [0.25], [0.75]]> : tensor<4x1xf32>
  %whq = nq.fake_quant %wh {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<4x1xf32>
  %y, %h, %c = nf.recurrent %xq : tensor<?x5x2xf32> weights(%wiq, %whq : tensor<4x2xf32>, tensor<4x1xf32>) {mode = "lstm", hidden_size = 1 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = false, gates = array<i64: 1, 3>, cell = array<i64: 12, 16>, hidden = array<i64: 7, 8>, rounding = "trunc"} -> tensor<?x5x1xf32>, tensor<1x?x1xf32>, tensor<1x?x1xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x5x1xf32>
  %cq = nq.fake_quant %c {bits = 16 : i64, exp = dense<12> : tensor<1xi8>} : tensor<1x?x1xf32>
  func.return %yq, %cq : tensor<?x5x1xf32>, tensor<1x?x1xf32>
}

// -----

// The table ends: gates [-3, 3] (codes -4..3, x = -32..24 in steps of 8). Q0.15 holds
// -(2**15 - 1)..2**15 - 1: sigmoid(16) and tanh(8..24) round to 2**15 and saturate to 32767,
// tanh(-32..-8) to -32767 (half_even: sigmoid(-8) = 11, sigmoid(8) = 32757).

// CHECK-LABEL: func.func @rnn_table_ends
// CHECK:       nh.recurrent
// CHECK-SAME:  mode = "rnn_tanh"
// CHECK-SAME:  sigmoid_table = array<i64: 0, 0, 0, 11, 16384, 32757, 32767, 32767>, tanh_table = array<i64: -32767, -32767, -32767, -32767, 0, 32767, 32767, 32767>

func.func @rnn_table_ends(%x: tensor<?x5x2xf32>) -> tensor<?x5x1xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x5x2xf32>
  %wi = nf.constant dense<[[8.0, -4.0]]> : tensor<1x2xf32>
  %wiq = nq.fake_quant %wi {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<1x2xf32>
  %wh = nf.constant dense<[[0.5]]> : tensor<1x1xf32>
  %whq = nq.fake_quant %wh {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<1x1xf32>
  %y, %h = nf.recurrent %xq : tensor<?x5x2xf32> weights(%wiq, %whq : tensor<1x2xf32>, tensor<1x1xf32>) {mode = "rnn_tanh", hidden_size = 1 : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = false, gates = array<i64: -3, 3>, cell = array<i64: 12, 16>, hidden = array<i64: 7, 8>, rounding = "half_even"} -> tensor<?x5x1xf32>, tensor<1x?x1xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x5x1xf32>
  func.return %yq : tensor<?x5x1xf32>
}
