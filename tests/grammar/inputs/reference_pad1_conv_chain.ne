// init const tensor
let Net_0_conv_conv1_weight: Tensor<little_float_32> = {shape=[3, 2, 3, 3], data=0x218d0d3e7444a83ed758073e7c7105bfb96ab93ec4d5363ea1ef5bbea6066e3e3054153e0ef4f03d9c443a3c03ef5f3e67d396beb17485bde07945be9449753e5229823ca094efbd8622a0be1fb1d2bd4071553b1ec6e1bd1b83043f592dce3ec0cf8abf596f41bf5d2c8fbde0ed2cbe2f04af3db607b23ddfdd583feabde3bec1aa1abe082e513fdd71843e9ecb873e798952be4dc328bfe72f893dd39b323d985cfbbec1ec8bbe9e12ecbc327cc1be690121bd7c701c3dcc37693c87604fbeff32733ed082b63e626b033ed492a7bea7d7953ecc634dbe} ;
let Net_0_conv_conv1_bias: Tensor<little_float_32> = {shape=[3], data=0x560d343e87805bbe6b483b3e} ;
let Net_0_conv_conv2_weight: Tensor<little_float_32> = {shape=[2, 3, 3, 3], data=0xe47c03bc68beffbebf9200be4848b13c7e78df3df226c9be3dcae2bee97fa33d3f2e3fbe1bedc03db28c9b3ef9d528bf0e65d03dc5cefa3ee7bbf3bd090ea6be3e0f9a3e969fcf3d137ab73e7e660dbefabc17bfdc3d34bd789c36be4cc99e3ec09f9e3dbcff26bff7c4f4be0000b53e44378b3e311f83bed6f2dbb9c681363ec1db3f3e5474b33eef1cd23de35d1bbd600cd4bd5437d83ecb7c66bf422c63bdfd44583cabf411bf0952083ee26185bef2a0b03e23c54dbde70a893e829ef93e14d91c3e0259b3bef4101bbfea8b333f545736bda2048dbe} ;
let Net_0_conv_conv2_bias: Tensor<little_float_32> = {shape=[2], data=0xcf59ec3cdecd1cbd} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[3, 1, 1, 1], data=0x030303} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[3], data=0x050505} ;
let Constant_n4_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n5_o0: Tensor<int8_t> = {shape=[2, 1, 1, 1], data=0x0303} ;
let Constant_n6_o0: Tensor<int8_t> = {shape=[2], data=0x0505} ;
let Constant_n7_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;

// init static tensor
let Q_n2_o0: Tensor<Any>  = {shape:CCDD=[3, 2, 3, 3]};
let Q_n3_o0: Tensor<Any>  = {shape:C=[3]};
let Q_n5_o0: Tensor<Any>  = {shape:CCDD=[2, 3, 3, 3]};
let Q_n6_o0: Tensor<Any>  = {shape:C=[2]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]};
let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]};
let Relu_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]};
let Conv_n2_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};
let output: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Conv_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 3, 8]};
let Q_n4_Conv_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 1, 6]};
let Relu_n1_Q_n4_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 1, 6]};
let Conv_n2_Relu_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 3, 6]};
let Q_n7_Conv_n2_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 4]};

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
