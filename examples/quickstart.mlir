// A small quantized (nq-level) network: the NanoEngine "Q" form of
// conv 3->16 3x3 + ReLU + 2x2 max pool + linear, with 8-bit activations,
// 4-bit per-channel conv weights and 1-bit linear weights.
func.func @quickstart(%input: tensor<?x3x8x8xf32>) -> tensor<?x10xf32> {
  %x = nq.fake_quant %input {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x3x8x8xf32>
  %w = nf.constant "conv.weight" dense<0.125> : tensor<16x3x3x3xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<3> : tensor<16x1x1x1xi8>} : tensor<16x3x3x3xf32>
  %b = nf.constant "conv.bias" dense<-0.25> : tensor<16xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<16xf32>
  %c = nf.conv %x, %wq, %bq {pads = array<i64: 1, 1, 1, 1>} : (tensor<?x3x8x8xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<?x16x8x8xf32>
  %r = nf.relu %c : tensor<?x16x8x8xf32>
  %rq = nq.fake_quant %r {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x16x8x8xf32>
  %p = nf.max_pool %rq {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x16x8x8xf32> -> tensor<?x16x4x4xf32>
  %f = nf.reshape %p : tensor<?x16x4x4xf32> -> tensor<?x256xf32>
  %fw = nf.constant "fc.weight" dense<0.5> : tensor<10x256xf32>
  %fwq = nq.fake_quant %fw {bits = 1 : i64, exp = dense<-4> : tensor<1xi8>} : tensor<10x256xf32>
  %y = nf.linear %f, %fwq : (tensor<?x256xf32>, tensor<10x256xf32>) -> tensor<?x10xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x10xf32>
  func.return %yq : tensor<?x10xf32>
}
