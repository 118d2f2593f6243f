// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s
// RUN: nanoir-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// The nf ops that read or write positions given as values: embedding (rows of a table by
// token id), max pooling's indices and max unpooling (values back at those indices).

// CHECK-LABEL: func.func @embedding
func.func @embedding(%ids: tensor<?x8xf32>, %table: tensor<100x16xf32>, %one: tensor<f32>) -> (tensor<?x8x16xf32>, tensor<16xf32>) {
  // CHECK-NEXT: %0 = nf.embedding %ids, %table : (tensor<?x8xf32>, tensor<100x16xf32>) -> tensor<?x8x16xf32>
  // GENERIC: "nf.embedding"(%ids, %table) : (tensor<?x8xf32>, tensor<100x16xf32>) -> tensor<?x8x16xf32>
  %0 = nf.embedding %ids, %table : (tensor<?x8xf32>, tensor<100x16xf32>) -> tensor<?x8x16xf32>
  // A 0-d index gives one row.
  // CHECK-NEXT: %1 = nf.embedding %one, %table : (tensor<f32>, tensor<100x16xf32>) -> tensor<16xf32>
  %1 = nf.embedding %one, %table : (tensor<f32>, tensor<100x16xf32>) -> tensor<16xf32>
  func.return %0, %1 : tensor<?x8x16xf32>, tensor<16xf32>
}

// -----

// CHECK-LABEL: func.func @pool_and_unpool
func.func @pool_and_unpool(%x: tensor<?x4x8x6xf32>) -> tensor<?x4x8x6xf32> {
  // CHECK-NEXT: %p = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x4x8x6xf32> -> tensor<?x4x4x3xf32>
  // CHECK-NEXT: %i = nf.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x4x8x6xf32> -> tensor<?x4x4x3xf32>
  // GENERIC: "nf.max_pool_indices"(%x) <{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}> : (tensor<?x4x8x6xf32>) -> tensor<?x4x4x3xf32>
  // CHECK-NEXT: %u = nf.max_unpool %p, %i : (tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32>) -> tensor<?x4x8x6xf32>
  // GENERIC: "nf.max_unpool"(%p, %i) : (tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32>) -> tensor<?x4x8x6xf32>
  %p = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x4x8x6xf32> -> tensor<?x4x4x3xf32>
  %i = nf.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x4x8x6xf32> -> tensor<?x4x4x3xf32>
  %u = nf.max_unpool %p, %i : (tensor<?x4x4x3xf32>, tensor<?x4x4x3xf32>) -> tensor<?x4x8x6xf32>
  func.return %u : tensor<?x4x8x6xf32>
}

// -----

// Overlapping windows (kernel 3, stride 2) into a result larger than the pooled input's plane
// (torch's output_size).

// CHECK-LABEL: func.func @unpool_to_size
func.func @unpool_to_size(%x: tensor<2x1x7x7xf32>) -> tensor<2x1x8x8xf32> {
  // CHECK-NEXT: %i = nf.max_pool_indices %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>} : tensor<2x1x7x7xf32> -> tensor<2x1x3x3xf32>
  // CHECK-NEXT: %u = nf.max_unpool %i, %i : (tensor<2x1x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x1x8x8xf32>
  %i = nf.max_pool_indices %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>} : tensor<2x1x7x7xf32> -> tensor<2x1x3x3xf32>
  %u = nf.max_unpool %i, %i : (tensor<2x1x3x3xf32>, tensor<2x1x3x3xf32>) -> tensor<2x1x8x8xf32>
  func.return %u : tensor<2x1x8x8xf32>
}
