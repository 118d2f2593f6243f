// init const tensor
let Net_0_conv_conv1_weight: Tensor<little_float_32> = {shape=[2, 2, 3, 3], data=0xa17c85bedf208fbd875d2a3f53fe863e3f1428bf846608bbe95e7fbe9484733daead24bf3d0fc63df5d2c03d1758213fa3b2013eb31e513e28e518bff1ad663f802944bf26a6e13ef32007be3d5bb4be3c6886beeca089beb7b91b3ef65134bdb7d0173ff9593bbf0288a1ba6ab1b6be08e69e3eace358bff7c60cbe752cac3d36fd17bfacc5c93eec66923d4b34ce3e} ;
let Net_0_conv_conv1_bias: Tensor<little_float_32> = {shape=[2], data=0xe970443e99ac48be} ;
let Net_0_conv_conv2_weight: Tensor<little_float_32> = {shape=[2, 2, 3, 3], data=0x7963a3beea91a6bda22e993e3247ae3eed5791be3db578bee664a3bed24d6fbe26e8c2bd3df757bd3cc0523f466c4fbee385ecbd5cd53b3e8830c3be5cfd16be6891ae3b8b8b9e3e8ac206bf40700c3fd55d10be33c98a3dd37bad3e9454873e42eed83e37e28d3dbf8900bc2ea1013e2aeccbbe63aaf83e92cc9ebe8a0c01bf8693523f288d5fbd1a7cf1be24ac3d3f} ;
let Net_0_conv_conv2_bias: Tensor<little_float_32> = {shape=[2], data=0xe00c87bd5c83593e} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[2, 1, 1, 1], data=0x0303} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[2], data=0x0505} ;
let Constant_n4_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n5_o0: Tensor<int8_t> = {shape=[2, 1, 1, 1], data=0x0303} ;
let Constant_n6_o0: Tensor<int8_t> = {shape=[2], data=0x0505} ;
let Constant_n7_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n8_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;

// init static tensor
let Q_n2_o0: Tensor<Any>  = {shape:CCDD=[2, 2, 3, 3]};
let Q_n3_o0: Tensor<Any>  = {shape:C=[2]};
let Q_n5_o0: Tensor<Any>  = {shape:CCDD=[2, 2, 3, 3]};
let Q_n6_o0: Tensor<Any>  = {shape:C=[2]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};
let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};
let Relu_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};
let Conv_n2_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};
let Q_n7_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};
let Add_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};
let output: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Conv_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 3, 8]};
let Q_n4_Conv_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 6]};
let Relu_n1_Q_n4_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 6]};
let Conv_n2_Relu_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 3, 6]};
let Q_n7_Conv_n2_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 4]};
let Add_n1_Q_n7_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 4]};
let Add_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 5, 8]};
let Q_n8_Add_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 4]};

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
    attr=[dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]],
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
    attr=[dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]],
    in_s=[Relu_n1_o0, Q_n5_o0, Q_n6_o0],
    mem_s=[Conv_n2_Relu_n1_o0],
    out_s=[Conv_n2_o0]
};
let Q_n7: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Conv_n2_o0, Constant_n7_o0],
    mem_s=[Q_n7_Conv_n2_o0],
    out_s=[Q_n7_o0]
};
let Add_n1: Node = {
    op_type=Add,
    attr=[],
    in_s=[Q_n7_o0, Q_n1_o0],
    mem_s=[Add_n1_Q_n7_o0, Add_n1_Q_n1_o0],
    out_s=[Add_n1_o0]
};
let Q_n8: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Add_n1_o0, Constant_n8_o0],
    mem_s=[Q_n8_Add_n1_o0],
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
    Add_n1.do();
    Q_n8.do();
}
