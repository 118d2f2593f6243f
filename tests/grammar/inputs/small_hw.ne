// init const tensor
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let layer_w: Tensor<uint8_t> = {shape=[3], data=0x4e3481} ;

// init static tensor
let Unpack_n1_o0: Tensor<int4_t>  = {shape:CCDD=[3, 2, 1, 1]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 4, 6]};
let Q_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 4, 6]};
let Conv_n1_o0: Tensor<int32_t> = {shape:BCMD=[-1, 3, 4, 6]};
let Requant_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 3, 4, 6]};
let output: Tensor<int8_t> = {shape:BCMD=[-1, 3, 4, 6]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 4, 6]};
let Conv_n1_Q_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 4, 6]};
let Requant_n1_Conv_n1_o0: mem Tensor = {type=int32_t, shape:BCMD=[-1, 3, 4, 6]};
let Relu_n1_Requant_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 3, 4, 6]};

// init node
let Unpack_n1: init Node = {
    op_type=Unpack,
    attr=[bit_len=4, exp=[3, 2, 3], name=[layer, w]],
    in_s=[layer_w],
    out_s=[Unpack_n1_o0]
};

// runtime_node
let Q_n1: Node = {
    op_type=Q,
    attr=[bit_len=8, exp=5],
    in_s=[input, Constant_n1_o0],
    mem_s=[Q_n1_input],
    out_s=[Q_n1_o0]
};
let Conv_n1: Node = {
    op_type=Conv,
    attr=[exp=[8, 7, 8], group=1, kernel_shape=[1, 1]],
    in_s=[Q_n1_o0, Unpack_n1_o0],
    mem_s=[Conv_n1_Q_n1_o0],
    out_s=[Conv_n1_o0]
};
let Requant_n1: Node = {
    op_type=Requant,
    attr=[bit_len=8, exp=4, rounding=trunc, shift=[4, 3, 4]],
    in_s=[Conv_n1_o0],
    mem_s=[Requant_n1_Conv_n1_o0],
    out_s=[Requant_n1_o0]
};
let Relu_n1: Node = {
    op_type=Relu,
    attr=[exp=4],
    in_s=[Requant_n1_o0],
    mem_s=[Relu_n1_Requant_n1_o0],
    out_s=[output]
};

// call init node
func init(){
    Unpack_n1.do();
}

// call runtime node
func runtime(){
    Q_n1.do();
    Conv_n1.do();
    Requant_n1.do();
    Relu_n1.do();
}
