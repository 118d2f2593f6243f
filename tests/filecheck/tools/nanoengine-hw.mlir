// nh programs in NanoEngine text: `--lower-to-hw --emit=nanoengine` writes the hw level
// (integer tensors, packed weights, Q/Unpack/Requant nodes) and `nanoir-opt FILE.ne` reads it
// back to the same nh IR; export -> import -> export is byte for byte.

// RUN: nanoir-opt %s --lower-to-hw --emit=nanoengine | filecheck %s
// RUN: nanoir-opt %s --lower-to-hw --emit=nanoengine -o %t.ne
// RUN: nanoir-opt %t.ne | filecheck %s --check-prefix=IR
// RUN: nanoir-opt %t.ne --emit=nanoengine | diff %t.ne -
// RUN: nanoir-opt %s -p lower-to-hw | nanoir-opt --emit=nanoengine | diff %t.ne -

func.func @main(%x: tensor<?x2x4x6xf32>) -> tensor<?x3xf32> {
  %w = nf.constant "layer.w" dense<[[[[0.5]], [[-0.25]]], [[[0.75]], [[1.0]]], [[[-1.0]], [[0.125]]]]> : tensor<3x2x1x1xf32>
  %q = nq.fake_quant %w {bits = 4 : i64, exp = dense<[[[[3]]], [[[2]]], [[[3]]]]> : tensor<3x1x1x1xi8>} : tensor<3x2x1x1xf32>
  %b = nf.constant "layer.b" dense<[0.5, -1.0, 2.0]> : tensor<3xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<3xf32>
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>, rounding = #nq.rounding<half_even>} : tensor<?x2x4x6xf32>
  %y = nf.conv %xq, %q, %bq : (tensor<?x2x4x6xf32>, tensor<3x2x1x1xf32>, tensor<3xf32>) -> tensor<?x3x4x6xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x3x4x6xf32>
  %r = nf.relu %yq : tensor<?x3x4x6xf32>
  %p = nf.max_pool %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<?x3x4x6xf32> -> tensor<?x3x2x3xf32>
  %f = nf.reshape %p : tensor<?x3x2x3xf32> -> tensor<?x18xf32>
  %fw = nf.constant "fc.weight" dense<0.5> : tensor<3x18xf32>
  %fwq = nq.fake_quant %fw {bits = 1 : i64, exp = dense<1> : tensor<1xi8>} : tensor<3x18xf32>
  %o = nf.linear %f, %fwq : (tensor<?x18xf32>, tensor<3x18xf32>) -> tensor<?x3xf32>
  %oq = nq.fake_quant %o {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x3xf32>
  func.return %oq : tensor<?x3xf32>
}

// 4-bit codes 4, -2 | 3, 4 | -8, 1 packed two to a byte; 54 1-bit codes of +1 in 7 bytes.
// CHECK: // init const tensor
// CHECK-NEXT: let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
// CHECK-NEXT: let layer_w: Tensor<uint8_t> = {shape=[3], data=0x4e3481} ;
// CHECK-NEXT: let layer_b: Tensor<int32_t> = {shape=[3], data=0x8000000080ffffff00020000} ;
// CHECK-NEXT: let Constant_n2_o0: Tensor<int64_t> = {shape=[2], data=0xffffffffffffffff1200000000000000} ;
// CHECK-NEXT: let fc_weight: Tensor<uint8_t> = {shape=[7], data=0x00000000000000} ;
// CHECK: let Unpack_n1_o0: Tensor<int4_t>  = {shape:CCDD=[3, 2, 1, 1]};
// CHECK: let input: Tensor<Any> = {shape:BCMD=[-1, 2, 4, 6]};
// CHECK-NEXT: let Q_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 4, 6]};
// CHECK-NEXT: let Conv_n1_o0: Tensor<int32_t> = {shape:BCMD=[-1, 3, 4, 6]};
// CHECK: let output: Tensor<int8_t> = {shape:BC=[-1, 3]};
// CHECK: let Unpack_n1: init Node = {
// CHECK-NEXT: op_type=Unpack,
// CHECK-NEXT: attr=[bit_len=4, exp=[3, 2, 3], name=[layer, w]],
// CHECK-NEXT: in_s=[layer_w],
// CHECK: let Q_n1: Node = {
// CHECK-NEXT: op_type=Q,
// CHECK-NEXT: attr=[bit_len=8, exp=5, rounding=half_even],
// CHECK-NEXT: in_s=[input, Constant_n1_o0],
// CHECK: let Requant_n1: Node = {
// CHECK-NEXT: op_type=Requant,
// CHECK-NEXT: attr=[bit_len=8, exp=4, rounding=trunc, shift=[4, 3, 4]],
// CHECK: // init node
// CHECK-NEXT: let Unpack_n3: init Node = {
// CHECK-NEXT: op_type=Unpack,
// CHECK-NEXT: attr=[bit_len=1, exp=-1, name=[fc, weight]],
// CHECK: func init(){
// CHECK-NEXT: Unpack_n1.do();
// CHECK-NEXT: Unpack_n2.do();
// CHECK-NEXT: Unpack_n3.do();

// IR-LABEL: func.func @main(%Q_n1_o0: tensor<?x2x4x6xi8, #nh.fixed<5, BCMD>> {nq.bits = 8 : i64, nq.exp = dense<5> : tensor<1xi8>, nq.rounding = #nq.rounding<half_even>}) -> tensor<?x3xi8, #nh.fixed<3, BC>>
// IR-NEXT: %[[W:.*]] = nh.constant "layer.w" dense<{{\[\[\[\[}}4]], {{\[\[}}-2]]], {{.*}} : tensor<3x2x1x1xi8> -> tensor<3x2x1x1xi4, #nh.fixed<[3, 2, 3], CCDD>>
// IR-NEXT: %[[B:.*]] = nh.constant "layer.b" dense<[128, -128, 512]> : tensor<3xi16> -> tensor<3xi32, #nh.fixed<[8, 7, 8], C>>
// IR-NEXT: %[[C:.*]] = nh.conv %Q_n1_o0, %[[W]], %[[B]]
// IR-NEXT: nh.requant %[[C]] {shift = array<i64: 4, 3, 4>}
// IR: nh.constant "fc.weight" dense<1> : tensor<3x18xi8> -> tensor<3x18xi1, #nh.fixed<-1, CC>>
// IR-NEXT: nh.linear
