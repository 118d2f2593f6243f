// init const tensor
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let c_weight: Tensor<int8_t> = {shape=[4, 4, 1, 1], data=0xbc499644ed64a47a2b1abacabfcbc5f6} ;
let c_bias: Tensor<int32_t> = {shape=[4], data=0x40f7ffff000f000080f4ffff000d0000} ;
let Constant_n2_o0: Tensor<uint8_t> = {shape=[1], data=0x40} ;

// init static tensor
let Unpack_n1_o0: Tensor<int8_t>  = {shape:CCDD=[4, 4, 1, 1]};
let Unpack_n2_o0: Tensor<int32_t>  = {shape:C=[4]};
let Unpack_n3_o0: Tensor<int2_t>  = {shape:C=[1]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 8, 8]};
let Q_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 8, 8]};
let Gather_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 4, 8]};
let Gather_n2_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 4, 4]};
let Gather_n3_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 4, 8]};
let Gather_n4_o0: Tensor<int8_t> = {shape:BCMD=[-1, 2, 4, 4]};
let Concat_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 4, 4, 4]};
let Conv_n1_o0: Tensor<int32_t> = {shape:BCMD=[-1, 4, 4, 4]};
let Requant_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 4, 4, 4]};
let Max_n1_o0: Tensor<int8_t> = {shape:BCMD=[-1, 4, 4, 4]};
let UpsampleBilinear_n1_o0: Tensor<int16_t> = {shape:BCMD=[-1, 4, 8, 8]};
let Requant_n2_o0: Tensor<int8_t> = {shape:BCMD=[-1, 4, 8, 8]};
let Mul_n1_o0: Tensor<int16_t> = {shape:BCMD=[-1, 4, 8, 8]};
let Requant_n3_o0: Tensor<int8_t> = {shape:BCMD=[-1, 4, 8, 8]};
let Requant_n4_o0: Tensor<int16_t> = {shape:BCMD=[-1, 4, 8, 8]};
let Min_n1_o0: Tensor<int16_t> = {shape:BCMD=[-1, 4, 8, 8]};
let Requant_n5_o0: Tensor<int8_t> = {shape:BCMD=[-1, 4, 8, 8]};
let output: Tensor<int8_t> = {shape:BCMD=[-1, 4, 16, 16]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 8, 8]};
let Gather_n1_Q_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 8, 8]};
let Gather_n2_Gather_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 4, 8]};
let Gather_n3_Q_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 8, 8]};
let Gather_n4_Gather_n3_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 4, 8]};
let Concat_n1_Gather_n2_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 4, 4]};
let Concat_n1_Gather_n4_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 2, 4, 4]};
let Conv_n1_Concat_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 4, 4]};
let Requant_n1_Conv_n1_o0: mem Tensor = {type=int32_t, shape:BCMD=[-1, 4, 4, 4]};
let Max_n1_Requant_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 4, 4]};
let Max_n1_Concat_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 4, 4]};
let UpsampleBilinear_n1_Max_n1_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 4, 4]};
let Requant_n2_UpsampleBilinear_n1_o0: mem Tensor = {type=int16_t, shape:BCMD=[-1, 4, 8, 8]};
let Mul_n1_Requant_n2_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 8, 8]};
let Requant_n3_Mul_n1_o0: mem Tensor = {type=int16_t, shape:BCMD=[-1, 4, 8, 8]};
let Requant_n4_Requant_n2_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 8, 8]};
let Min_n1_Requant_n4_o0: mem Tensor = {type=int16_t, shape:BCMD=[-1, 4, 8, 8]};
let Min_n1_Requant_n3_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 8, 8]};
let Requant_n5_Min_n1_o0: mem Tensor = {type=int16_t, shape:BCMD=[-1, 4, 8, 8]};
let UpsampleZero_n1_Requant_n5_o0: mem Tensor = {type=int8_t, shape:BCMD=[-1, 4, 8, 8]};

// init node
let Unpack_n1: init Node = {
    op_type=Unpack,
    attr=[bit_len=8, exp=8, name=[c, weight]],
    in_s=[c_weight],
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
let Gather_n1: Node = {
    op_type=Gather,
    attr=[axis=2, exp=5, indices=[0, 2, 4, 6]],
    in_s=[Q_n1_o0],
    mem_s=[Gather_n1_Q_n1_o0],
    out_s=[Gather_n1_o0]
};
let Gather_n2: Node = {
    op_type=Gather,
    attr=[axis=3, exp=5, indices=[0, 2, 4, 6]],
    in_s=[Gather_n1_o0],
    mem_s=[Gather_n2_Gather_n1_o0],
    out_s=[Gather_n2_o0]
};
let Gather_n3: Node = {
    op_type=Gather,
    attr=[axis=2, exp=5, indices=[1, 3, 5, 7]],
    in_s=[Q_n1_o0],
    mem_s=[Gather_n3_Q_n1_o0],
    out_s=[Gather_n3_o0]
};
let Gather_n4: Node = {
    op_type=Gather,
    attr=[axis=3, exp=5, indices=[0, 2, 4, 6]],
    in_s=[Gather_n3_o0],
    mem_s=[Gather_n4_Gather_n3_o0],
    out_s=[Gather_n4_o0]
};
let Concat_n1: Node = {
    op_type=Concat,
    attr=[axis=1, exp=5],
    in_s=[Gather_n2_o0, Gather_n4_o0],
    mem_s=[Concat_n1_Gather_n2_o0, Concat_n1_Gather_n4_o0],
    out_s=[Concat_n1_o0]
};

// init node
let Unpack_n2: init Node = {
    op_type=Unpack,
    attr=[bit_len=32, exp=13, name=[c, bias]],
    in_s=[c_bias],
    out_s=[Unpack_n2_o0]
};

// runtime_node
let Conv_n1: Node = {
    op_type=Conv,
    attr=[exp=13, group=1, kernel_shape=[1, 1]],
    in_s=[Concat_n1_o0, Unpack_n1_o0, Unpack_n2_o0],
    mem_s=[Conv_n1_Concat_n1_o0],
    out_s=[Conv_n1_o0]
};
let Requant_n1: Node = {
    op_type=Requant,
    attr=[bit_len=8, exp=5, rounding=trunc, shift=[8]],
    in_s=[Conv_n1_o0],
    mem_s=[Requant_n1_Conv_n1_o0],
    out_s=[Requant_n1_o0]
};
let Max_n1: Node = {
    op_type=Max,
    attr=[exp=5],
    in_s=[Requant_n1_o0, Concat_n1_o0],
    mem_s=[Max_n1_Requant_n1_o0, Max_n1_Concat_n1_o0],
    out_s=[Max_n1_o0]
};
let UpsampleBilinear_n1: Node = {
    op_type=UpsampleBilinear,
    attr=[exp=9, pads=[1, 1, 1, 1]],
    in_s=[Max_n1_o0],
    mem_s=[UpsampleBilinear_n1_Max_n1_o0],
    out_s=[UpsampleBilinear_n1_o0]
};
let Requant_n2: Node = {
    op_type=Requant,
    attr=[bit_len=8, exp=6, rounding=trunc, shift=[3]],
    in_s=[UpsampleBilinear_n1_o0],
    mem_s=[Requant_n2_UpsampleBilinear_n1_o0],
    out_s=[Requant_n2_o0]
};

// init node
let Unpack_n3: init Node = {
    op_type=Unpack,
    attr=[bit_len=2, exp=1],
    in_s=[Constant_n2_o0],
    out_s=[Unpack_n3_o0]
};

// runtime_node
let Mul_n1: Node = {
    op_type=Mul,
    attr=[exp=7],
    in_s=[Requant_n2_o0, Unpack_n3_o0],
    mem_s=[Mul_n1_Requant_n2_o0],
    out_s=[Mul_n1_o0]
};
let Requant_n3: Node = {
    op_type=Requant,
    attr=[bit_len=8, exp=7, rounding=trunc, shift=[0]],
    in_s=[Mul_n1_o0],
    mem_s=[Requant_n3_Mul_n1_o0],
    out_s=[Requant_n3_o0]
};
let Requant_n4: Node = {
    op_type=Requant,
    attr=[bit_len=16, exp=7, rounding=trunc, shift=[-1]],
    in_s=[Requant_n2_o0],
    mem_s=[Requant_n4_Requant_n2_o0],
    out_s=[Requant_n4_o0]
};
let Min_n1: Node = {
    op_type=Min,
    attr=[exp=7],
    in_s=[Requant_n4_o0, Requant_n3_o0],
    mem_s=[Min_n1_Requant_n4_o0, Min_n1_Requant_n3_o0],
    out_s=[Min_n1_o0]
};
let Requant_n5: Node = {
    op_type=Requant,
    attr=[bit_len=8, exp=7, rounding=trunc, shift=[0]],
    in_s=[Min_n1_o0],
    mem_s=[Requant_n5_Min_n1_o0],
    out_s=[Requant_n5_o0]
};
let UpsampleZero_n1: Node = {
    op_type=UpsampleZero,
    attr=[exp=7, offsets=[0, 0]],
    in_s=[Requant_n5_o0],
    mem_s=[UpsampleZero_n1_Requant_n5_o0],
    out_s=[output]
};

// call init node
func init(){
    Unpack_n1.do();
    Unpack_n2.do();
    Unpack_n3.do();
}

// call runtime node
func runtime(){
    Q_n1.do();
    Gather_n1.do();
    Gather_n2.do();
    Gather_n3.do();
    Gather_n4.do();
    Concat_n1.do();
    Conv_n1.do();
    Requant_n1.do();
    Max_n1.do();
    UpsampleBilinear_n1.do();
    Requant_n2.do();
    Mul_n1.do();
    Requant_n3.do();
    Requant_n4.do();
    Min_n1.do();
    Requant_n5.do();
    UpsampleZero_n1.do();
}
