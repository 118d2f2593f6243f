// RUN: nanoir-opt %s -p fold-bn --split-input-file | filecheck %s

// A conv followed by bn: the bn disappears, the conv takes new constants under the conv's
// names: A = g / sqrt(v + eps) = [1, 3], B = be - A * m = [0.5, -3], so w * A = [2, -12] and
// b * A + B = [1.5, 6].

// CHECK-LABEL: func.func @conv_bn
func.func @conv_bn(%x: tensor<?x1x4x4xf32>) -> tensor<?x2x4x4xf32> {
  // CHECK-DAG:  %[[W:.*]] = nf.constant "conv1.weight" dense<{{\[\[\[\[}}2.000000e+00{{\]\]\]}}, {{\[\[\[}}-1.200000e+01{{\]\]\]\]}}> : tensor<2x1x1x1xf32>
  // CHECK-DAG:  %[[B:.*]] = nf.constant "conv1.bias" dense<[1.500000e+00, 6.000000e+00]> : tensor<2xf32>
  // CHECK-NOT:  nf.batch_norm
  // CHECK:      %[[Y:.*]] = nf.conv %x, %[[W]], %[[B]] {pads = array<i64: 0, 0, 0, 0>}
  // CHECK-NOT:  nf.batch_norm
  // CHECK:      func.return %[[Y]]
  %w = nf.constant "conv1.weight" dense<[[[[2.0]]], [[[-4.0]]]]> : tensor<2x1x1x1xf32>
  %b = nf.constant "conv1.bias" dense<[1.0, 3.0]> : tensor<2xf32>
  %g = nf.constant "bn1.weight" dense<[2.0, 3.0]> : tensor<2xf32>
  %be = nf.constant "bn1.bias" dense<[1.0, 0.0]> : tensor<2xf32>
  %m = nf.constant "bn1.running_mean" dense<[0.5, 1.0]> : tensor<2xf32>
  %v = nf.constant "bn1.running_var" dense<[3.0, 0.0]> : tensor<2xf32>
  %c = nf.conv %x, %w, %b {pads = array<i64: 0, 0, 0, 0>} : (tensor<?x1x4x4xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<?x2x4x4xf32>
  %y = nf.batch_norm %c, %g, %be, %m, %v {epsilon = 1.0 : f64} : (tensor<?x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x4x4xf32>
  func.return %y : tensor<?x2x4x4xf32>
}

// -----

// A bias-free depthwise conv gains a bias named after its weight.

// CHECK-LABEL: func.func @depthwise_conv_without_bias
func.func @depthwise_conv_without_bias(%x: tensor<?x2x5xf32>) -> tensor<?x2x5xf32> {
  // CHECK-DAG:  %[[W:.*]] = nf.constant "dw.weight"
  // CHECK-DAG:  %[[B:.*]] = nf.constant "dw.bias" dense<[-1.000000e+00, 5.000000e-01]> : tensor<2xf32>
  // CHECK:      nf.conv %x, %[[W]], %[[B]] {groups = 2 : i64, pads = array<i64: 1, 1>}
  // CHECK-NOT:  nf.batch_norm
  %w = nf.constant "dw.weight" dense<1.0> : tensor<2x1x3xf32>
  %g = nf.constant "bn.weight" dense<1.0> : tensor<2xf32>
  %be = nf.constant "bn.bias" dense<[0.0, 0.5]> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<[1.0, 0.0]> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<1.0> : tensor<2xf32>
  %c = nf.conv %x, %w {groups = 2 : i64, pads = array<i64: 1, 1>} : (tensor<?x2x5xf32>, tensor<2x1x3xf32>) -> tensor<?x2x5xf32>
  %y = nf.batch_norm %c, %g, %be, %m, %v {epsilon = 0.0 : f64} : (tensor<?x2x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x5xf32>
  func.return %y : tensor<?x2x5xf32>
}

// -----

// CHECK-LABEL: func.func @linear_bn
func.func @linear_bn(%x: tensor<?x3xf32>) -> tensor<?x2xf32> {
  // CHECK-DAG:  %[[W:.*]] = nf.constant "fc.weight" dense<{{\[\[}}2.000000e+00, 2.000000e+00, 2.000000e+00], [1.000000e+00, 1.000000e+00, 1.000000e+00]]> : tensor<2x3xf32>
  // CHECK-DAG:  %[[B:.*]] = nf.constant "fc.bias" dense<[2.000000e+00, 0.000000e+00]> : tensor<2xf32>
  // CHECK:      nf.linear %x, %[[W]], %[[B]]
  // CHECK-NOT:  nf.batch_norm
  %w = nf.constant "fc.weight" dense<1.0> : tensor<2x3xf32>
  %b = nf.constant "fc.bias" dense<1.0> : tensor<2xf32>
  %g = nf.constant "bn.weight" dense<[2.0, 1.0]> : tensor<2xf32>
  %be = nf.constant "bn.bias" dense<0.0> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<[0.0, 1.0]> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<1.0> : tensor<2xf32>
  %l = nf.linear %x, %w, %b : (tensor<?x3xf32>, tensor<2x3xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  %y = nf.batch_norm %l, %g, %be, %m, %v {epsilon = 0.0 : f64} : (tensor<?x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}

// -----

// A lone bn (after a relu) stays.

// CHECK-LABEL: func.func @lone_bn
func.func @lone_bn(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  // CHECK:      %[[R:.*]] = nf.relu %x
  // CHECK-NEXT: nf.batch_norm %[[R]], %g, %be, %m, %v
  %g = nf.constant "bn.weight" dense<1.0> : tensor<2xf32>
  %be = nf.constant "bn.bias" dense<0.0> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<0.0> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<1.0> : tensor<2xf32>
  %r = nf.relu %x : tensor<?x2x3xf32>
  %y = nf.batch_norm %r, %g, %be, %m, %v : (tensor<?x2x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3xf32>
  func.return %y : tensor<?x2x3xf32>
}

// -----

// The conv result is also returned: folding would change it, so the bn stays.

// CHECK-LABEL: func.func @conv_with_another_use
func.func @conv_with_another_use(%x: tensor<?x1x3xf32>) -> (tensor<?x2x3xf32>, tensor<?x2x3xf32>) {
  // CHECK:      %[[C:.*]] = nf.conv %x, %w
  // CHECK-NEXT: %[[Y:.*]] = nf.batch_norm %[[C]], %g, %be, %m, %v
  // CHECK-NEXT: func.return %[[Y]], %[[C]]
  %w = nf.constant "conv.weight" dense<1.0> : tensor<2x1x1xf32>
  %g = nf.constant "bn.weight" dense<1.0> : tensor<2xf32>
  %be = nf.constant "bn.bias" dense<0.0> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<0.0> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<1.0> : tensor<2xf32>
  %c = nf.conv %x, %w : (tensor<?x1x3xf32>, tensor<2x1x1xf32>) -> tensor<?x2x3xf32>
  %y = nf.batch_norm %c, %g, %be, %m, %v : (tensor<?x2x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3xf32>
  func.return %y, %c : tensor<?x2x3xf32>, tensor<?x2x3xf32>
}
