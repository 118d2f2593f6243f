// RUN: nanoir-opt %s -p lower-to-hw --split-input-file | filecheck %s

// One case per lower-to-hw pattern (lowering/hw/*.py); the diagnostics are in
// lower-to-hw-diagnostics.mlir.

// FoldConstantFakeQuant folds weights and biases into codes; QuantizeInput makes %x the codes
// of its fake-quant; LowerConv sums into i32 at exp(x) + exp(w) = [11, 10], the bias shifted
// onto it (0.5 at 2**4 -> 8 << 7 = 1024); RequantFakeQuant requantizes to exponent 3.

// CHECK-LABEL: func.func @fold_constant_fake_quant_and_conv
// CHECK-SAME:    %x: tensor<?x1x4xi8, #nh.fixed<5, BCM>> {nq.bits = 8 : i64, nq.exp = dense<5> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}
// CHECK-DAG:   %[[W:.*]] = nh.constant "conv.weight" dense<{{\[\[\[}}32, -16, 64]], {{\[\[}}24, 4, -48]]]> : tensor<2x1x3xi8> -> tensor<2x1x3xi8, #nh.fixed<[6, 5], CCD>>
// CHECK-DAG:   %[[B:.*]] = nh.constant "conv.bias" dense<[1024, -1024]> : tensor<2xi16> -> tensor<2xi32, #nh.fixed<[11, 10], C>>
// CHECK:       %[[C:.*]] = nh.conv %x, %[[W]], %[[B]] {pads = array<i64: 1, 1>} {{.*}} -> tensor<?x2x4xi32, #nh.fixed<[11, 10], BCM>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[C]] {shift = array<i64: 8, 7>} {{.*}} -> tensor<?x2x4xi8, #nh.fixed<3, BCM>>
// CHECK-NEXT:  func.return %[[Q]]
// CHECK-NOT:   nf.

func.func @fold_constant_fake_quant_and_conv(%x: tensor<?x1x4xf32>) -> tensor<?x2x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x1x4xf32>
  %w = nf.constant "conv.weight" dense<[[[0.5, -0.25, 1.0]], [[0.75, 0.125, -1.5]]]> : tensor<2x1x3xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<[[[6]], [[5]]]> : tensor<2x1x1xi8>} : tensor<2x1x3xf32>
  %b = nf.constant "conv.bias" dense<[0.5, -1.0]> : tensor<2xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<2xf32>
  %c = nf.conv %xq, %wq, %bq {pads = array<i64: 1, 1>} : (tensor<?x1x4xf32>, tensor<2x1x3xf32>, tensor<2xf32>) -> tensor<?x2x4xf32>
  %cq = nq.fake_quant %c {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x4xf32>
  func.return %cq : tensor<?x2x4xf32>
}

// -----

// LowerLinear: an i32 sum at exponent 2 + 2.

// CHECK-LABEL: func.func @linear
// CHECK:       %[[W:.*]] = nh.constant "fc.weight" dense<{{\[\[}}4, -4, 2], [1, 0, 7]]>
// CHECK-NEXT:  %[[Y:.*]] = nh.linear %x, %[[W]] {{.*}} -> tensor<?x2xi32, #nh.fixed<4, BC>>
// CHECK-NEXT:  func.return %[[Y]]

func.func @linear(%x: tensor<?x3xf32>) -> tensor<?x2xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x3xf32>
  %w = nf.constant "fc.weight" dense<[[1.0, -1.0, 0.5], [0.25, 0.0, 2.0]]> : tensor<2x3xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<2x3xf32>
  %y = nf.linear %xq, %wq : (tensor<?x3xf32>, tensor<2x3xf32>) -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}

// -----

// LowerMatmul: two runtime operands, exponents add.

// CHECK-LABEL: func.func @matmul
// CHECK:       %[[M:.*]] = nh.matmul %x, %y {{.*}} -> tensor<?x2x2xi32, #nh.fixed<3, BCM>>
// CHECK-NEXT:  func.return %[[M]]

func.func @matmul(%x: tensor<?x2x3xf32>, %y: tensor<?x3x2xf32>) -> tensor<?x2x2xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x2x3xf32>
  %yq = nq.fake_quant %y {bits = 4 : i64, exp = dense<1> : tensor<1xi8>} : tensor<?x3x2xf32>
  %m = nf.matmul %xq, %yq : (tensor<?x2x3xf32>, tensor<?x3x2xf32>) -> tensor<?x2x2xf32>
  func.return %m : tensor<?x2x2xf32>
}

// -----

// LowerAddSub shifts %y left onto the finer exponent; LowerMul uses 0.75 as the code 3 at
// exponent 2; LowerDiv divides by 2 as a product by the code 1 at exponent 1.

// CHECK-LABEL: func.func @add_mul_div
// CHECK:       %[[Y:.*]] = nh.requant %y {shift = array<i64: -2>} {{.*}} -> tensor<?x4xi16, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[A:.*]] = nh.add %x, %[[Y]] {{.*}} -> tensor<?x4xi32, #nh.fixed<5, BC>>
// CHECK-NEXT:  %[[S:.*]] = nh.constant dense<3> : tensor<1xi8> -> tensor<1xi4, #nh.fixed<2, C>>
// CHECK-NEXT:  %[[M:.*]] = nh.mul %[[A]], %[[S]] {{.*}} -> tensor<?x4xi32, #nh.fixed<7, BC>>
// CHECK-NEXT:  %[[H:.*]] = nh.constant dense<1> : tensor<1xi8> -> tensor<1xi2, #nh.fixed<1, C>>
// CHECK-NEXT:  %[[D:.*]] = nh.mul %[[M]], %[[H]] {{.*}} -> tensor<?x4xi32, #nh.fixed<8, BC>>
// CHECK-NEXT:  nh.requant %[[D]] {shift = array<i64: 4>}

func.func @add_mul_div(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %a = nf.add %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %s = nf.constant dense<0.75> : tensor<f32>
  %m = nf.mul %a, %s : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %two = nf.constant dense<2.0> : tensor<f32>
  %d = nf.div %m, %two : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %dq = nq.fake_quant %d {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %dq : tensor<?x4xf32>
}

// -----

// LowerRelu and LowerClamp work on codes: 6.0 at exponent 4 is the code 96.

// CHECK-LABEL: func.func @relu_clamp
// CHECK:       %[[R:.*]] = nh.relu %x : tensor<?x4xi8, #nh.fixed<4, BC>>
// CHECK-NEXT:  %[[C:.*]] = nh.clamp %[[R]] {max = 96 : i64} : tensor<?x4xi8, #nh.fixed<4, BC>>

func.func @relu_clamp(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  %r = nf.relu %xq : tensor<?x4xf32>
  %c = nf.clamp %r {max = 6.0 : f64} : tensor<?x4xf32>
  func.return %c : tensor<?x4xf32>
}

// -----

// FuseAvgPoolFakeQuant: one exact division, then the requant of the fake-quant.

// CHECK-LABEL: func.func @avg_pool_fake_quant
// CHECK:       %[[P:.*]] = nh.avg_pool %x {kernel = array<i64: 2>, strides = array<i64: 2>} {{.*}} -> tensor<?x2x2xi8, #nh.fixed<4, BCM>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[P]] {shift = array<i64: 1>} {{.*}} -> tensor<?x2x2xi8, #nh.fixed<3, BCM>>
// CHECK-NOT:   nf.avg_pool

func.func @avg_pool_fake_quant(%x: tensor<?x2x4xf32>) -> tensor<?x2x2xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x4xf32>
  %p = nf.avg_pool %xq {kernel = array<i64: 2>, strides = array<i64: 2>} : tensor<?x2x4xf32> -> tensor<?x2x2xf32>
  %pq = nq.fake_quant %p {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x2xf32>
  func.return %pq : tensor<?x2x2xf32>
}

// -----

// FuseLookupTableFakeQuant: sigmoid of the 2-bit codes -2..1 at exponent 0, quantized to 4 bits
// at exponent 3: trunc(8 * [0.119, 0.269, 0.5, 0.731]) = [0, 2, 4, 5].

// CHECK-LABEL: func.func @lookup_table_fake_quant
// CHECK:       %[[S:.*]] = nh.lut %x {table = array<i64: 0, 2, 4, 5>, function = "sigmoid"} {{.*}} -> tensor<?x4xi4, #nh.fixed<3, BC>>
// CHECK-NEXT:  func.return %[[S]]

func.func @lookup_table_fake_quant(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 2 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x4xf32>
  %s = nf.sigmoid %xq : tensor<?x4xf32>
  %sq = nq.fake_quant %s {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %sq : tensor<?x4xf32>
}

// -----

// FuseBatchNormFakeQuant: A = [1, 3] / sqrt(2 + 1e-5), B = 0.5. Per channel the coarsest
// exact affine: M = 45 at 2**6 and 543 at 2**8, N = B at exponent 2 + e; the requant's shift
// brings exponent 2 + e to 4.

// CHECK-LABEL: func.func @batch_norm_fake_quant
// CHECK:       %[[M:.*]] = nh.constant dense<{{\[\[\[}}45], [543]]]> : tensor<1x2x1xi16> -> tensor<1x2x1xi16, #nh.fixed<[6, 8], DCD>>
// CHECK-NEXT:  %[[P:.*]] = nh.mul %x, %[[M]] {{.*}} -> tensor<?x2x3xi32, #nh.fixed<[8, 10], BCM>>
// CHECK-NEXT:  %[[N:.*]] = nh.constant dense<{{\[\[\[}}128], [512]]]>
// CHECK-NEXT:  %[[S:.*]] = nh.add %[[P]], %[[N]]
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[S]] {shift = array<i64: 4, 6>} {{.*}} -> tensor<?x2x3xi8, #nh.fixed<4, BCM>>
// CHECK-NOT:   nf.batch_norm

func.func @batch_norm_fake_quant(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x2x3xf32>
  %g = nf.constant "bn.weight" dense<[1.0, 3.0]> : tensor<2xf32>
  %be = nf.constant "bn.bias" dense<0.5> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<0.0> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<2.0> : tensor<2xf32>
  %y = nf.batch_norm %xq, %g, %be, %m, %v : (tensor<?x2x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x3xf32>
  func.return %yq : tensor<?x2x3xf32>
}

// -----

// LowerPRelu: the slope [0.25, -0.5] is the codes [1, -2] at exponent 2 (its fake-quant's
// constant, used as it is); the positive side is shifted left by 2 so that both sides are
// codes at 5 + 2.

// CHECK-LABEL: func.func @prelu
// CHECK:       %[[A:.*]] = nh.constant "prelu.weight" dense<[1, -2]> : tensor<2xi8> -> tensor<2xi8, #nh.fixed<2, C>>
// CHECK-NEXT:  %[[P:.*]] = nh.prelu %x, %[[A]] {shift = 2 : i64} {{.*}} -> tensor<?x2x3xi16, #nh.fixed<7, BCM>>

func.func @prelu(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x2x3xf32>
  %a = nf.constant "prelu.weight" dense<[0.25, -0.5]> : tensor<2xf32>
  %aq = nq.fake_quant %a {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<2xf32>
  %p = nf.prelu %xq, %aq : (tensor<?x2x3xf32>, tensor<2xf32>) -> tensor<?x2x3xf32>
  func.return %p : tensor<?x2x3xf32>
}

// -----

// LowerMaxPool, LowerUpsampleNearest, LowerConcat and LowerSplit keep per-channel exponents;
// LowerReshape (channels change) and LowerPad (a non-zero value: 0.5 is the code 8 at
// exponent 4) first align them to one; LowerTranspose moves codes.

// CHECK-LABEL: func.func @data_movement
// CHECK:       %[[MP:.*]] = nh.max_pool %x {{.*}} -> tensor<?x2x2xi8, #nh.fixed<[3, 4], BCM>>
// CHECK-NEXT:  %[[U:.*]] = nh.upsample_nearest %[[MP]] : {{.*}} -> tensor<?x2x4xi8, #nh.fixed<[3, 4], BCM>>
// CHECK-NEXT:  %[[CAT:.*]] = nh.concat %[[U]], %x {axis = 1 : i64} {{.*}} -> tensor<?x4x4xi8, #nh.fixed<[3, 4, 3, 4], BCM>>
// CHECK-NEXT:  %[[A:.*]], %[[B:.*]] = nh.split %[[CAT]] {axis = 1 : i64, sizes = array<i64: 2, 2>} {{.*}} -> (tensor<?x2x4xi8, #nh.fixed<[3, 4], BCM>>, tensor<?x2x4xi8, #nh.fixed<[3, 4], BCM>>)
// CHECK-NEXT:  %[[A1:.*]] = nh.requant %[[A]] {shift = array<i64: -1, 0>}
// CHECK-NEXT:  %[[R:.*]] = nh.reshape %[[A1]] : {{.*}} -> tensor<?x1x8xi16, #nh.fixed<4, BCM>>
// CHECK-NEXT:  %[[B1:.*]] = nh.requant %[[B]] {shift = array<i64: -1, 0>}
// CHECK-NEXT:  %[[PD:.*]] = nh.pad %[[B1]] {pads = array<i64: 0, 0, 1, 0, 0, 0>, value = 8 : i64} {{.*}} -> tensor<?x2x5xi16, #nh.fixed<4, BCM>>
// CHECK-NEXT:  %[[T:.*]] = nh.transpose %[[PD]] {perm = array<i64: 0, 2, 1>} {{.*}} -> tensor<?x5x2xi16, #nh.fixed<4, BCM>>
// CHECK-NEXT:  func.return %[[R]], %[[T]]

func.func @data_movement(%x: tensor<?x2x4xf32>) -> (tensor<?x1x8xf32>, tensor<?x5x2xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[3], [4]]> : tensor<2x1xi8>} : tensor<?x2x4xf32>
  %mp = nf.max_pool %xq {kernel = array<i64: 2>, strides = array<i64: 2>} : tensor<?x2x4xf32> -> tensor<?x2x2xf32>
  %u = nf.upsample_nearest %mp : tensor<?x2x2xf32> -> tensor<?x2x4xf32>
  %cat = nf.concat %u, %xq {axis = 1 : i64} : (tensor<?x2x4xf32>, tensor<?x2x4xf32>) -> tensor<?x4x4xf32>
  %a, %b = nf.split %cat {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<?x4x4xf32>) -> (tensor<?x2x4xf32>, tensor<?x2x4xf32>)
  %r = nf.reshape %a : tensor<?x2x4xf32> -> tensor<?x1x8xf32>
  %pd = nf.pad %b {pads = array<i64: 0, 0, 1, 0, 0, 0>, mode = "constant", value = 0.5 : f64} : tensor<?x2x4xf32> -> tensor<?x2x5xf32>
  %t = nf.transpose %pd {perm = array<i64: 0, 2, 1>} : tensor<?x2x5xf32> -> tensor<?x5x2xf32>
  func.return %r, %t : tensor<?x1x8xf32>, tensor<?x5x2xf32>
}

// -----

// LowerConvTranspose: the weight [C, O/g, K] keeps its exponents along dim 1 (layout DCD):
// codes 0.5 * 2**3 = 4, 1.0 * 2**2 = 4, ...; the i32 sums are at exp(x) + exp(w) = 2 + [3, 2];
// the fake-quant at 3 requantizes by [2, 1].

// CHECK-LABEL: func.func @conv_transpose
// CHECK:       %[[W:.*]] = nh.constant "up.weight" dense<{{\[\[\[}}4, -2], [4, 2]], {{\[\[}}1, 2], [-2, 6]]]> : tensor<2x2x2xi8> -> tensor<2x2x2xi8, #nh.fixed<[3, 2], DCD>>
// CHECK-NEXT:  %[[Y:.*]] = nh.conv_transpose %x, %[[W]] {strides = array<i64: 2>} {{.*}} -> tensor<?x2x6xi32, #nh.fixed<[5, 4], BCM>>
// CHECK-NEXT:  %[[Q:.*]] = nh.requant %[[Y]] {shift = array<i64: 2, 1>} {{.*}} -> tensor<?x2x6xi8, #nh.fixed<3, BCM>>
// CHECK-NEXT:  func.return %[[Q]]

func.func @conv_transpose(%x: tensor<?x2x3xf32>) -> tensor<?x2x6xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x2x3xf32>
  %w = nf.constant "up.weight" dense<[[[0.5, -0.25], [1.0, 0.5]], [[0.125, 0.25], [-0.5, 1.5]]]> : tensor<2x2x2xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<[[[3], [2]]]> : tensor<1x2x1xi8>} : tensor<2x2x2xf32>
  %y = nf.conv_transpose %xq, %wq {strides = array<i64: 2>} : (tensor<?x2x3xf32>, tensor<2x2x2xf32>) -> tensor<?x2x6xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x6xf32>
  func.return %yq : tensor<?x2x6xf32>
}

// -----

// LowerBlock: depth_to_space merges input channels {0, 1} and {2, 3} into one output channel
// each, so they must share an exponent: channel 0 (exp 3) moves to 4 by a left shift (4-bit
// codes become 5-bit, in i8); the op keeps the exponent.

// CHECK-LABEL: func.func @depth_to_space
// CHECK:       %[[A:.*]] = nh.requant %x {shift = array<i64: -1, 0, 0, 0>} {{.*}} -> tensor<?x4x2xi8, #nh.fixed<4, BCM>>
// CHECK-NEXT:  %[[Y:.*]] = nh.depth_to_space %[[A]] {block = 2 : i64} {{.*}} -> tensor<?x2x4xi8, #nh.fixed<4, BCM>>
// CHECK-NEXT:  func.return %[[Y]]

func.func @depth_to_space(%x: tensor<?x4x2xf32>) -> tensor<?x2x4xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<[[[3], [4], [4], [4]]]> : tensor<1x4x1xi8>} : tensor<?x4x2xf32>
  %y = nf.depth_to_space %xq {block = 2 : i64} : tensor<?x4x2xf32> -> tensor<?x2x4xf32>
  func.return %y : tensor<?x2x4xf32>
}
