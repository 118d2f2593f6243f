// init const tensor
let Net_0_conv_conv1_weight: Tensor<little_float_32> = {shape=[3, 2, 3, 3], data=0x5edf9a3d261e56beda3029be9a017abf404a383f3e53ea3e0f4b05bec0799e3e275ee63d89d862beb034c83e6e68febdafaf06be4e3ba2bed0593a3eae8622bdaa595f3e09b478be74cb4f3ddbbcb6be0055ac3ed1099a3de266073e7524283ece00cfbe3d65a03e3b9b523fcac627bf7c1731bf41181abfae54ac3e42e3523d33d8dc3e2ff4933e1c80ac3d1eafe83d5b118bbd54dcb13ea75de7be1bcb2cbef803c73d2b77383ff08f9cbed8fddcbef2b866bec781c63e3a84c0bdf69c073f3dbf3fbf1d1fe73eccf0d33e784511bfe9a07b3db7fcf83e} ;
let Net_0_conv_conv1_bias: Tensor<little_float_32> = {shape=[3], data=0xeb0b903c25bd4c3e3c30f33e} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[3, 1, 1, 1], data=0x030303} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[3], data=0x050505} ;
let Constant_n4_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n5_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let Constant_n6_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;

// init static tensor
let Q_n2_o0: Tensor<Any>  = {shape:CCDD=[3, 2, 3, 3]};
let Q_n3_o0: Tensor<Any>  = {shape:C=[3]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 10]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 10]};
let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 8]};
let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 8]};
let MaxPool_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 3]};
let Q_n5_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 3]};
let AveragePool_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 2]};
let output: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 2]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 10]};
let Conv_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 3, 10]};
let Q_n4_Conv_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 1, 8]};
let MaxPool_n1_Q_n4_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 3, 8]};
let Q_n5_MaxPool_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 1, 3]};
let AveragePool_n1_Q_n5_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 2, 3]};
let Q_n6_AveragePool_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 1, 2]};

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
    attr=[dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[0, 0, 0, 0], strides=[1, 1]],
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
let MaxPool_n1: Node = {
    op_type=MaxPool,
    attr=[ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]],
    in_s=[Q_n4_o0],
    mem_s=[MaxPool_n1_Q_n4_o0],
    out_s=[MaxPool_n1_o0]
};
let Q_n5: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[MaxPool_n1_o0, Constant_n5_o0],
    mem_s=[Q_n5_MaxPool_n1_o0],
    out_s=[Q_n5_o0]
};
let AveragePool_n1: Node = {
    op_type=AveragePool,
    attr=[ceil_mode=0, count_include_pad=1, kernel_shape=[2, 2], pads=[1, 1, 1, 1], strides=[1, 1]],
    in_s=[Q_n5_o0],
    mem_s=[AveragePool_n1_Q_n5_o0],
    out_s=[AveragePool_n1_o0]
};
let Q_n6: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[AveragePool_n1_o0, Constant_n6_o0],
    mem_s=[Q_n6_AveragePool_n1_o0],
    out_s=[output]
};

// call init node
func init(){
    Q_n2.do();
    Q_n3.do();
}

// call runtime node
func runtime(){
    Q_n1.do();
    Conv_n1.do();
    Q_n4.do();
    MaxPool_n1.do();
    Q_n5.do();
    AveragePool_n1.do();
    Q_n6.do();
}
