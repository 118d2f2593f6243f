// RUN: NANOIR_ROUNDTRIP | filecheck %s
// RUN: NANOIR_GENERIC_ROUNDTRIP | filecheck %s

// nh.lut's optional function and params (the float function its table evaluates, which
// lower-to-hw records) print and parse back unchanged, params at full float64 precision.

// CHECK-LABEL: func.func @lut_function
// CHECK-NEXT:  %y = nh.lut %x {table = array<i64: 0, 0, 1, 1>, function = "hardsigmoid", params = array<f64: 0.16666666666666666, 5.000000e-01>} : tensor<?x4xi2, #nh.fixed<0, BC>> -> tensor<?x4xi4, #nh.fixed<3, BC>>
// CHECK-NEXT:  %z = nh.lut %x {table = array<i64: -2, -2, 0, 5>, function = "hardswish"} : tensor<?x4xi2, #nh.fixed<0, BC>> -> tensor<?x4xi4, #nh.fixed<3, BC>>

func.func @lut_function(%x: tensor<?x4xi2, #nh.fixed<0, BC>>) -> (tensor<?x4xi4, #nh.fixed<3, BC>>, tensor<?x4xi4, #nh.fixed<3, BC>>) {
  %y = nh.lut %x {table = array<i64: 0, 0, 1, 1>, function = "hardsigmoid", params = array<f64: 0.16666666666666666, 0.5>} : tensor<?x4xi2, #nh.fixed<0, BC>> -> tensor<?x4xi4, #nh.fixed<3, BC>>
  %z = nh.lut %x {table = array<i64: -2, -2, 0, 5>, function = "hardswish"} : tensor<?x4xi2, #nh.fixed<0, BC>> -> tensor<?x4xi4, #nh.fixed<3, BC>>
  func.return %y, %z : tensor<?x4xi4, #nh.fixed<3, BC>>, tensor<?x4xi4, #nh.fixed<3, BC>>
}
