// init const tensor
let c_weight: Tensor<little_float_32> = {shape=[4, 4, 1, 1], data=0x0cd788be7865913e1ed0d3be2652883e089898bd60f3c73e3ce6b8bee011f33e2cd22d3ee086d33d38148cbe98f157bec02681be3c2c53bea83a6abe50b722bd} ;
let c_bias: Tensor<little_float_32> = {shape=[4], data=0xa1f38cbedb59f03eb633b8bedb9ccf3e} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[4, 1, 1, 1], data=0x08080808} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[4], data=0x08080808} ;
let Constant_n4_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let Constant_n5_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let Constant_n6_o0: Tensor<int8_t> = {shape=[1], data=0x06} ;
let Constant_n7_o0: Tensor<little_float_32> = {shape=[], data=0x0000003f} ;
let Constant_n8_o0: Tensor<int8_t> = {shape=[1], data=0x07} ;
let Constant_n9_o0: Tensor<int8_t> = {shape=[1], data=0x07} ;

// init static tensor
let Q_n2_o0: Tensor<Any>  = {shape:CCDD=[4, 4, 1, 1]};
let Q_n3_o0: Tensor<Any>  = {shape:C=[4]};

// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Gather_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Gather_n2_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};
let Gather_n3_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]};
let Gather_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]};
let Concat_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 4]};
let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 4]};
let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 4]};
let Max_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 4]};
let Q_n5_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 4]};
let Resize_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 8]};
let Q_n6_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 8]};
let Mul_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 8]};
let Q_n7_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 8]};
let Min_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 8]};
let Q_n8_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 8]};
let output: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 16]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Gather_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Gather_n2_Gather_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Gather_n3_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Gather_n4_Gather_n3_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 8]};
let Concat_n1_Gather_n2_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 4]};
let Concat_n1_Gather_n4_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 4]};
let Conv_n1_Concat_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 4]};
let Q_n4_Conv_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 4]};
let Max_n1_Q_n4_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 4]};
let Max_n1_Concat_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 4]};
let Q_n5_Max_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 4]};
let Resize_n1_Q_n5_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 4]};
let Q_n6_Resize_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};
let Mul_n1_Q_n6_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};
let Q_n7_Mul_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};
let Min_n1_Q_n6_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};
let Min_n1_Q_n7_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};
let Q_n8_Min_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};
let UpsampleZero_n1_Q_n8_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 8]};

// init node
let Q_n2: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[c_weight, Constant_n2_o0],
    out_s=[Q_n2_o0]
};
let Q_n3: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[c_bias, Constant_n3_o0],
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
let Gather_n1: Node = {
    op_type=Gather,
    attr=[axis=2, indices=[0, 2, 4, 6]],
    in_s=[Q_n1_o0],
    mem_s=[Gather_n1_Q_n1_o0],
    out_s=[Gather_n1_o0]
};
let Gather_n2: Node = {
    op_type=Gather,
    attr=[axis=3, indices=[0, 2, 4, 6]],
    in_s=[Gather_n1_o0],
    mem_s=[Gather_n2_Gather_n1_o0],
    out_s=[Gather_n2_o0]
};
let Gather_n3: Node = {
    op_type=Gather,
    attr=[axis=2, indices=[1, 3, 5, 7]],
    in_s=[Q_n1_o0],
    mem_s=[Gather_n3_Q_n1_o0],
    out_s=[Gather_n3_o0]
};
let Gather_n4: Node = {
    op_type=Gather,
    attr=[axis=3, indices=[0, 2, 4, 6]],
    in_s=[Gather_n3_o0],
    mem_s=[Gather_n4_Gather_n3_o0],
    out_s=[Gather_n4_o0]
};
let Concat_n1: Node = {
    op_type=Concat,
    attr=[axis=1],
    in_s=[Gather_n2_o0, Gather_n4_o0],
    mem_s=[Concat_n1_Gather_n2_o0, Concat_n1_Gather_n4_o0],
    out_s=[Concat_n1_o0]
};
let Conv_n1: Node = {
    op_type=Conv,
    attr=[dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1]],
    in_s=[Concat_n1_o0, Q_n2_o0, Q_n3_o0],
    mem_s=[Conv_n1_Concat_n1_o0],
    out_s=[Conv_n1_o0]
};
let Q_n4: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Conv_n1_o0, Constant_n4_o0],
    mem_s=[Q_n4_Conv_n1_o0],
    out_s=[Q_n4_o0]
};
let Max_n1: Node = {
    op_type=Max,
    attr=[],
    in_s=[Q_n4_o0, Concat_n1_o0],
    mem_s=[Max_n1_Q_n4_o0, Max_n1_Concat_n1_o0],
    out_s=[Max_n1_o0]
};
let Q_n5: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Max_n1_o0, Constant_n5_o0],
    mem_s=[Q_n5_Max_n1_o0],
    out_s=[Q_n5_o0]
};
let Resize_n1: Node = {
    op_type=Resize,
    attr=[axes=[2, 3], coordinate_transformation_mode=half_pixel, mode=linear, sizes=[8, 8]],
    in_s=[Q_n5_o0],
    mem_s=[Resize_n1_Q_n5_o0],
    out_s=[Resize_n1_o0]
};
let Q_n6: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Resize_n1_o0, Constant_n6_o0],
    mem_s=[Q_n6_Resize_n1_o0],
    out_s=[Q_n6_o0]
};
let Mul_n1: Node = {
    op_type=Mul,
    attr=[],
    in_s=[Q_n6_o0, Constant_n7_o0],
    mem_s=[Mul_n1_Q_n6_o0],
    out_s=[Mul_n1_o0]
};
let Q_n7: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Mul_n1_o0, Constant_n8_o0],
    mem_s=[Q_n7_Mul_n1_o0],
    out_s=[Q_n7_o0]
};
let Min_n1: Node = {
    op_type=Min,
    attr=[],
    in_s=[Q_n6_o0, Q_n7_o0],
    mem_s=[Min_n1_Q_n6_o0, Min_n1_Q_n7_o0],
    out_s=[Min_n1_o0]
};
let Q_n8: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[Min_n1_o0, Constant_n9_o0],
    mem_s=[Q_n8_Min_n1_o0],
    out_s=[Q_n8_o0]
};
let UpsampleZero_n1: Node = {
    op_type=UpsampleZero,
    attr=[offsets=[0, 0], sizes=[16, 16]],
    in_s=[Q_n8_o0],
    mem_s=[UpsampleZero_n1_Q_n8_o0],
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
    Gather_n1.do();
    Gather_n2.do();
    Gather_n3.do();
    Gather_n4.do();
    Concat_n1.do();
    Conv_n1.do();
    Q_n4.do();
    Max_n1.do();
    Q_n5.do();
    Resize_n1.do();
    Q_n6.do();
    Mul_n1.do();
    Q_n7.do();
    Min_n1.do();
    Q_n8.do();
    UpsampleZero_n1.do();
}
