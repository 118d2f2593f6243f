// RUN: nanoir-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

func.func @to_host_of_a_float(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nh.to_host %x : tensor<4xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
// CHECK: error: nh.to_host: input has element type f32; the nh level holds only integers

// -----

func.func @to_host_to_codes(%x: tensor<4xi8, #nh.fixed<3, C>>) -> tensor<4xi8> {
  %y = nh.to_host %x : tensor<4xi8, #nh.fixed<3, C>> -> tensor<4xi8>
  func.return %y : tensor<4xi8>
}
// CHECK: error: nh.to_host: the result must be a float tensor, got tensor<4xi8>

// -----

func.func @to_host_reshapes(%x: tensor<4xi8, #nh.fixed<3, C>>) -> tensor<2x2xf32> {
  %y = nh.to_host %x : tensor<4xi8, #nh.fixed<3, C>> -> tensor<2x2xf32>
  func.return %y : tensor<2x2xf32>
}
// CHECK: error: nh.to_host: the result has shape 2x2, the codes 4

// -----

func.func @from_host_too_narrow(%x: tensor<4xf32>) -> tensor<4xi4, #nh.fixed<3, C>> {
  %y = nh.from_host %x {bits = 8 : i64} : tensor<4xf32> -> tensor<4xi4, #nh.fixed<3, C>>
  func.return %y : tensor<4xi4, #nh.fixed<3, C>>
}
// CHECK: error: nh.from_host: 8-bit codes do not fit the result's element type i4

// -----

func.func @from_host_binary_in_i8(%x: tensor<4xf32>) -> tensor<4xi8, #nh.fixed<3, C>> {
  %y = nh.from_host %x {bits = 1 : i64} : tensor<4xf32> -> tensor<4xi8, #nh.fixed<3, C>>
  func.return %y : tensor<4xi8, #nh.fixed<3, C>>
}
// CHECK: error: nh.from_host: 1-bit codes do not fit the result's element type i8

// -----

func.func @from_host_of_codes(%x: tensor<4xi8, #nh.fixed<3, C>>) -> tensor<4xi8, #nh.fixed<3, C>> {
  %y = nh.from_host %x {bits = 8 : i64} : tensor<4xi8, #nh.fixed<3, C>> -> tensor<4xi8, #nh.fixed<3, C>>
  func.return %y : tensor<4xi8, #nh.fixed<3, C>>
}
// CHECK: error: nh.from_host: the input must be a float tensor, got tensor<4xi8, #nh.fixed<3, C>>

// -----

func.func @from_host_bits(%x: tensor<4xf32>) -> tensor<4xi32, #nh.fixed<3, C>> {
  %y = nh.from_host %x {bits = 20 : i64} : tensor<4xf32> -> tensor<4xi32, #nh.fixed<3, C>>
  func.return %y : tensor<4xi32, #nh.fixed<3, C>>
}
// CHECK: error: nh.from_host: bits = 20 is outside 1..16
