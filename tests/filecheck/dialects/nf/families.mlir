// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// issue 32's op families: nf.unary (one table op for the elementwise functions of one input),
// nf.compare / nf.where, reductions, prefix sums, bicubic upsampling, L2 normalisation.

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  // CHECK-NEXT: %0 = nf.unary "exp" %x : tensor<?x16xf32>
  // CHECK-NEXT: %1 = nf.unary "pow" %0 {params = array<f64: 5.000000e-01>} : tensor<?x16xf32>
  // CHECK-NEXT: %2 = nf.unary "softplus" %1 {params = array<f64: 2.000000e+00, 2.000000e+01>} : tensor<?x16xf32>
  // GENERIC: "nf.unary"(%{{.*}}) <{fn = "exp"}> : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // GENERIC: "nf.unary"(%{{.*}}) <{fn = "pow", params = array<f64: 5.000000e-01>}> : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %0 = nf.unary "exp" %x : tensor<?x16xf32>
  %1 = nf.unary "pow" %0 {params = array<f64: 0.5>} : tensor<?x16xf32>
  %2 = nf.unary "softplus" %1 {params = array<f64: 2.0, 20.0>} : tensor<?x16xf32>
  func.return %2 : tensor<?x16xf32>
}

// -----

// CHECK-LABEL: func.func @select
func.func @select(%x: tensor<?x16xf32>, %t: tensor<f32>) -> tensor<?x16xf32> {
  // CHECK-NEXT: %m = nf.compare "lt" %x, %t : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  // CHECK-NEXT: %n = nf.compare "and" %m, %m : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK-NEXT: %y = nf.where %n, %x, %t : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  // GENERIC: "nf.compare"(%{{.*}}, %{{.*}}) <{predicate = "lt"}> : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  // GENERIC: "nf.where"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  %m = nf.compare "lt" %x, %t : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  %n = nf.compare "and" %m, %m : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %y = nf.where %n, %x, %t : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  func.return %y : tensor<?x16xf32>
}

// -----

// CHECK-LABEL: func.func @reduce
func.func @reduce(%x: tensor<?x16x8xf32>) -> (tensor<?x16x1xf32>, tensor<?x1x8xf32>, tensor<?x16x8xf32>) {
  // CHECK-NEXT: %s = nf.reduce "sum" %x {dims = array<i64: 2>} : tensor<?x16x8xf32> -> tensor<?x16x1xf32>
  // CHECK-NEXT: %i = nf.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<?x16x8xf32> -> tensor<?x1x8xf32>
  // CHECK-NEXT: %c = nf.cumsum %x {dims = array<i64: 2>} : tensor<?x16x8xf32>
  // GENERIC: "nf.reduce"(%{{.*}}) <{kind = "sum", dims = array<i64: 2>}> : (tensor<?x16x8xf32>) -> tensor<?x16x1xf32>
  %s = nf.reduce "sum" %x {dims = array<i64: 2>} : tensor<?x16x8xf32> -> tensor<?x16x1xf32>
  %i = nf.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<?x16x8xf32> -> tensor<?x1x8xf32>
  %c = nf.cumsum %x {dims = array<i64: 2>} : tensor<?x16x8xf32>
  func.return %s, %i, %c : tensor<?x16x1xf32>, tensor<?x1x8xf32>, tensor<?x16x8xf32>
}

// -----

// CHECK-LABEL: func.func @resize_and_normalize
func.func @resize_and_normalize(%x: tensor<?x16x4x4xf32>) -> (tensor<?x16x8x4xf32>, tensor<?x16x4x4xf32>) {
  // CHECK-NEXT: %b = nf.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x4xf32>
  // CHECK-NEXT: %n = nf.normalize %x {axis = 1 : i64, epsilon = 5.000000e-01 : f64} : tensor<?x16x4x4xf32>
  // GENERIC: "nf.normalize"(%{{.*}}) <{axis = 1 : i64, epsilon = 5.000000e-01 : f64}> : (tensor<?x16x4x4xf32>) -> tensor<?x16x4x4xf32>
  %b = nf.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x4xf32>
  %n = nf.normalize %x {axis = 1 : i64, epsilon = 0.5 : f64} : tensor<?x16x4x4xf32>
  func.return %b, %n : tensor<?x16x8x4xf32>, tensor<?x16x4x4xf32>
}
