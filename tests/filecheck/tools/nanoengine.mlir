// NanoEngine text (.ne) in nanoir-opt: import, byte-exact export (also through MLIR text),
// export of IR that did not come from .ne, and located errors.

// RUN: nanoir-opt %S/inputs/small.ne 2>&1 | filecheck %s
// RUN: nanoir-opt %S/inputs/small.ne --emit=nanoengine | diff %S/inputs/small.ne -
// RUN: nanoir-opt %S/inputs/small.ne | nanoir-opt --emit=nanoengine | diff %S/inputs/small.ne -
// RUN: nanoir-opt %s --emit=nanoengine | filecheck %s --check-prefix=EXPORT
// RUN: not nanoir-opt %S/inputs/bad.ne -o %t.ne 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not test -e %t.ne

// CHECK: small.ne:46:5: warning: Gelu node 'Gelu_n1' is kept as nf.custom: attribute 'scale' is not one nanoir maps for Gelu
// CHECK-LABEL: func.func @main(%input: tensor<?x1x?x4xf32>
// CHECK-SAME: -> tensor<?x2x?x2xf32>
// CHECK: %[[W:.*]] = nf.constant "conv_w"
// CHECK: %[[WQ:.*]] = nq.fake_quant %[[W]] {ne.node = "Q_n2", ne.init, ne.exp_name = "Constant_n2_o0"
// CHECK-SAME: bits = 4 : i64, exp = dense<{{.*}}> : tensor<2x1x1x1xi8>}
// CHECK: %[[X:.*]] = nq.fake_quant %input {ne.node = "Q_n1"
// CHECK: %[[C:.*]] = nf.conv %[[X]], %[[WQ]], %conv_b
// CHECK: nf.custom %[[C]] {ne.node = "Gelu_n1", ne.const_in = {"1" = "shape_c"}
// CHECK-SAME: op_type = "Gelu", attrs = {approximate = "tanh", scale = "1e-05", shape = "shape_c"}}

// ERR: bad.ne:41:38: error: kernel_shape [3, 3] of Conv node 'Conv_n1' contradicts its weight of shape 2x1x1x3
// ERR-NEXT: attr=[dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[0, 0, 0, 0], strides=[1, 1]],
// ERR-NEXT: ^

func.func @main(%x: tensor<?x2x4x6xf32>) -> tensor<?x2x4x6xf32> {
  %w = nf.constant "layer.w" dense<0.5> : tensor<2x2x1x1xf32>
  %q = nq.fake_quant %w {bits = 4 : i64, exp = dense<3> : tensor<1xi8>} : tensor<2x2x1x1xf32>
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x2x4x6xf32>
  %y = nf.conv %xq, %q : (tensor<?x2x4x6xf32>, tensor<2x2x1x1xf32>) -> tensor<?x2x4x6xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x4x6xf32>
  func.return %yq : tensor<?x2x4x6xf32>
}

// EXPORT: // init const tensor
// EXPORT-NEXT: let layer_w: Tensor<little_float_32> = {shape=[2, 2, 1, 1], data=0x0000003f0000003f0000003f0000003f} ;
// EXPORT-NEXT: let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x03} ;
// EXPORT-NEXT: let Constant_n2_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
// EXPORT-NEXT: let Constant_n3_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
// EXPORT-EMPTY:
// EXPORT-NEXT: // init static tensor
// EXPORT-NEXT: let Q_n1_o0: Tensor<Any>  = {shape:CCDD=[2, 2, 1, 1]};
// EXPORT: let input: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};
// EXPORT: let output: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};
// EXPORT: // runtime memory
// EXPORT-NEXT: let Q_n2_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 6]};
// EXPORT: let Q_n1: init Node = {
// EXPORT: let Conv_n1: Node = {
// EXPORT-NEXT: op_type=Conv,
// EXPORT-NEXT: attr=[dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1]],
// EXPORT-NEXT: in_s=[Q_n2_o0, Q_n1_o0],
// EXPORT-NEXT: mem_s=[Conv_n1_Q_n2_o0],
// EXPORT-NEXT: out_s=[Conv_n1_o0]
// EXPORT: func init(){
// EXPORT-NEXT: Q_n1.do();
// EXPORT-NEXT: }
// EXPORT: func runtime(){
// EXPORT-NEXT: Q_n2.do();
// EXPORT-NEXT: Conv_n1.do();
// EXPORT-NEXT: Q_n3.do();
// EXPORT-NEXT: }
