// init const tensor
let Net_0_conv_conv1_weight: Tensor<little_float_32> = {shape=[4, 2, 3, 3], data=0x78fd503f9dd982bfd7402b3ef58e68beb86739be019eb0bdb9d84ebfbfffbdbd1532b1be3823aa3fe2f6b83d057010be3f6ee6bdded088be4718d8be741220bea367453e516cc3bd2426c43e8bada3bdccfc1e3cc44a1e3f75465f3e13f14ebe1dc895bd2b665d3e2c27463f7bdfdcbdf585c7bd1946cd3e088cb5be2bfaeebd76beb43e1cb66d3ee3f0153dc43c893e4acd90bfe429d13e0689c4bededd2abfe176e23dba788f3e3f2d36beab72dcbe33362b3ca6d7acbceaee0f3fb411993e16c69e3d98a9e33e4f5da8bdce9fbdbef43a6f3e959b6e3ee3fcafbdb751a0be0fb9bb3df15f7fbf6a568d3eb243493ea8d127bf0e0bc93c9772c5be31149b3e794c50bfda49bbbe6d52913eb8d4ec3ed1fa5cbf43ff4bbe665b063ef18879be} ;
let Net_0_conv_conv1_bias: Tensor<little_float_32> = {shape=[4], data=0xaee1a23e96f673be5e37913da5b656be} ;
let Net_0_conv_conv2_weight: Tensor<little_float_32> = {shape=[2, 4, 1, 1], data=0x7af80f3fbce40dbc4d7918be30f12fbf0c382c3f472b9a3e73549a3ec009e93e} ;
let Net_0_conv_conv2_bias: Tensor<little_float_32> = {shape=[2], data=0x100b8f3defea02be} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[4, 1, 1, 1], data=0x03030303} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[4], data=0x05050505} ;
let Constant_n4_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n5_o0: Tensor<int8_t> = {shape=[2, 1, 1, 1], data=0x0303} ;
let Constant_n6_o0: Tensor<int8_t> = {shape=[2], data=0x0505} ;
let Constant_n7_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;

// init static tensor
let Q_n2_o0: Tensor<Any>  = {shape:CCDD=[4, 2, 3, 3]};
let Q_n3_o0: Tensor<Any>  = {shape:C=[4]};
let Q_n5_o0: Tensor<Any>  = {shape:CCDD=[2, 4, 1, 1]};
let Q_n6_o0: Tensor<Any>  = {shape:C=[2]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};
let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};
let Relu_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};
let Conv_n2_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};
let output: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Conv_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 3, 8]};
let Q_n4_Conv_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 3]};
let Relu_n1_Q_n4_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 3]};
let Conv_n2_Relu_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 3]};
let Q_n7_Conv_n2_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 3]};

// init node
let Q_n2: init Node = {
    op_type=Q,
    attr=[bit_len=4],
    in_s=[Net_0_conv_conv1_weight, Constant_n2_o0],
    out_s=[Q_n2_o0]
};
let Q_n3: init Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Net_0_conv_conv1_bias, Constant_n3_o0],
    out_s=[Q_n3_o0]
};
let Q_n5: init Node = {
    op_type=Q,
    attr=[bit_len=4],
    in_s=[Net_0_conv_conv2_weight, Constant_n5_o0],
    out_s=[Q_n5_o0]
};
let Q_n6: init Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Net_0_conv_conv2_bias, Constant_n6_o0],
    out_s=[Q_n6_o0]
};

// runtime_node
let Q_n1: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[input, Constant_n1_o0],
    mem_s=[Q_n1_input],
    out_s=[Q_n1_o0]
};
let Conv_n1: Node = {
    op_type=Conv,
    attr=[dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]],
    in_s=[Q_n1_o0, Q_n2_o0, Q_n3_o0],
    mem_s=[Conv_n1_Q_n1_o0],
    out_s=[Conv_n1_o0]
};
let Q_n4: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Conv_n1_o0, Constant_n4_o0],
    mem_s=[Q_n4_Conv_n1_o0],
    out_s=[Q_n4_o0]
};
let Relu_n1: Node = {
    op_type=Relu,
    attr=[],
    in_s=[Q_n4_o0],
    mem_s=[Relu_n1_Q_n4_o0],
    out_s=[Relu_n1_o0]
};
let Conv_n2: Node = {
    op_type=Conv,
    attr=[dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1]],
    in_s=[Relu_n1_o0, Q_n5_o0, Q_n6_o0],
    mem_s=[Conv_n2_Relu_n1_o0],
    out_s=[Conv_n2_o0]
};
let Q_n7: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Conv_n2_o0, Constant_n7_o0],
    mem_s=[Q_n7_Conv_n2_o0],
    out_s=[output]
};

// call init node
func init(){
    Q_n2.do();
    Q_n3.do();
    Q_n5.do();
    Q_n6.do();
}

// call runtime node
func runtime(){
    Q_n1.do();
    Conv_n1.do();
    Q_n4.do();
    Relu_n1.do();
    Conv_n2.do();
    Q_n7.do();
}
