// RUN: nanoir-opt %s -p lower-to-hw --split-input-file --verify-diagnostics 2>&1 | filecheck %s

// The lower-to-hw diagnostics: each names the op and the reason.

// LowerBatchNorm: a batch norm no fake-quant reads keeps a float result.

// CHECK: lower-to-hw: 'nf.batch_norm' (%y) has no integer lowering unless only fake-quants read it

func.func @unlowered_batch_norm(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x3xf32>
  %g = nf.constant dense<[1.0, 3.0]> : tensor<2xf32>
  %y = nf.batch_norm %xq, %g, %g, %g, %g : (tensor<?x2x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3xf32>
  func.return %y : tensor<?x2x3xf32>
}

// -----

// ReportUnlowered: a float-only op with no fake-quant after it.

// CHECK: lower-to-hw: 'nf.tanh' (%s) has no integer lowering (it is float-only: quantize its result with a fake-quant to get a lookup table)

func.func @unlowered_float_only(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  %s = nf.tanh %xq : tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}

// -----

// ReportUnlowered: an op nanoir does not know (kept losslessly as nf.custom).

// CHECK: lower-to-hw: 'nf.custom'{{.*}} (%g) has no integer lowering

func.func @unlowered_custom(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  %g = nf.custom %xq {op_type = "Gather", attrs = {axis = 0 : i64}} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %g : tensor<?x4xf32>
}
