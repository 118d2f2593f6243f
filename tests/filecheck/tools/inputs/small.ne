// init const tensor
let conv_w: Tensor<little_float_32> = {shape=[2, 1, 1, 3], data=0x0000803f000000bf0000003e00000040000080be0000403f} ;
let conv_b: Tensor<little_float_32> = {shape=[2], data=0x0000003f000080bf} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[2, 1, 1, 1], data=0x0304} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;
let shape_c: Tensor<int64_t> = {shape=[2], data=0x0000000000000000FFFFFFFFFFFFFFFF} ;

// init static tensor
let Q_n2_o0: Tensor<Any>  = {shape:CCDD=[2, 1, 1, 3]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 1, 1, 4]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 1, 1, 4]};
let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 2]};
let Gelu_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 2]};
let output: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 2]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 1, 1, 4]};
let Conv_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 1, 1, 4]};

// init node
let Q_n2: init Node = {
    op_type=Q,
    attr=[bit_len=4],
    in_s=[conv_w, Constant_n2_o0],
    out_s=[Q_n2_o0]
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
    attr=[dilations=[1, 1], group=1, kernel_shape=[1, 3], pads=[0, 0, 0, 0], strides=[1, 1]],
    in_s=[Q_n1_o0, Q_n2_o0, conv_b],
    mem_s=[Conv_n1_Q_n1_o0],
    out_s=[Conv_n1_o0]
};
let Gelu_n1: Node = {
    op_type=Gelu,
    attr=[approximate=tanh, scale=1e-05, shape=shape_c],
    in_s=[Conv_n1_o0, shape_c],
    mem_s=[],
    out_s=[Gelu_n1_o0]
};
let Q_n3: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Gelu_n1_o0, Constant_n3_o0],
    mem_s=[],
    out_s=[output]
};

// call init node
func init(){
    Q_n2.do();
}

// call runtime node
func runtime(){
    Q_n1.do();
    Conv_n1.do();
    Gelu_n1.do();
    Q_n3.do();
}
