// init const tensor
let r_weight_ih_l0: Tensor<little_float_32> = {shape=[12, 3], data=0x005475bb5e54893e16b3d2be8066bcbef43245beec4b093e404f22bccefaca3e70bf35bd4c7b073eacbb1abe7048c9bdb891f4be528ba9bee80e53be00bb973c60694a3e189b993e8c8dadbefcf45ebe98f7393e4e94d43e48bdd2bd5c91bf3e400da5bd10b5583d4acde73ece7bedbe6629a1bee09e01bedc9347be282fdd3e1aefa5bec0b06bbe1adab2be76c2efbe} ;
let r_weight_hh_l0: Tensor<little_float_32> = {shape=[12, 4], data=0x047095be9e0edc3ebc76643e0027783e406ad73c3a3f83bec03ead3d9e06efbe1afab8bec6f983be2685a13e2619963ec81163be20cb93bc40baa33e827ffe3e24344b3ec8558a3dfea4ab3ec0bb96bef8d0be3d6c7ac6be186eb1bed23e84be8caa673ef8e74d3e6aa497bec8ad1a3e6e898c3e203f81bd40649c3c0044ed3d00d19e3e48cff53e9647c5beeca13bbe9838493ed01bd43ee8c5de3e22e2e13e78cacb3df89cdebe90663c3dac27a0be8c94eebe3e74e33ef0a6c23efe5dffbe} ;
let r_bias_ih_l0: Tensor<little_float_32> = {shape=[12], data=0x08aabf3dc880acbdb882a8bd1c5f6abe8ce4443e34a197bedcb13b3e1676813e5c43b73e48713f3e4a5ffdbe0011a6be} ;
let r_bias_hh_l0: Tensor<little_float_32> = {shape=[12], data=0x38a67f3e1853d63d96b3c7bee86893bef2d4f03e547fac3eb03e5fbed4dc00be78ddf3be803e13bc78c8c0bea277c5be} ;
let l_weight_ih_l0: Tensor<little_float_32> = {shape=[8, 4], data=0xe4951fbdea6ed93d0b4494be5dd3d63e8f50dcbe6440243fe51af83e88a618bf253634be67b0023d8f49d33d86bb2b3eff128e3e4a7d2d3d2aa6b0be0e50ab3e81a42dbf2e95d6be184235be975ab0be714e7dbe0c5e14bfb0051abeb5c61a3e16dbebbe02a314bd3595013fe4de94bd5dfda03c86dc79bd2e8a123ecf32e63e} ;
let l_weight_hh_l0: Tensor<little_float_32> = {shape=[8, 2], data=0x4a782b3f30eae53eb9dc2b3f447751bd129d22bf61a2abbe9783f63ec23396bb33f3b3be9db70abf466829bf24c818bf97de12be4f8bc63ea4bbc33eb0942ebf} ;
let l_bias_ih_l0: Tensor<little_float_32> = {shape=[8], data=0x4ed5e13e3ba60dbfd01319bef9cb92bee6770bbed42a0ebe0c7022bf884c1cbf} ;
let l_bias_hh_l0: Tensor<little_float_32> = {shape=[8], data=0x439be2bd88d2153c0f77a4be3361883e8fed22bfc47643bd22311f3f34ac93be} ;
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;
let Constant_n2_o0: Tensor<int8_t> = {shape=[1], data=0x06} ;
let Constant_n3_o0: Tensor<int8_t> = {shape=[12, 1], data=0x080808090808080808080808} ;
let Constant_n4_o0: Tensor<int8_t> = {shape=[12, 1], data=0x080808080808080808080808} ;
let Constant_n5_o0: Tensor<int8_t> = {shape=[12], data=0x0a0a0a090908090808090808} ;
let Constant_n6_o0: Tensor<int8_t> = {shape=[12], data=0x080a080808080909080d0808} ;
let Constant_n7_o0: Tensor<int8_t> = {shape=[8, 1], data=0x0807090807070708} ;
let Constant_n8_o0: Tensor<int8_t> = {shape=[8, 1], data=0x0707070807070807} ;
let Constant_n9_o0: Tensor<int8_t> = {shape=[8], data=0x0807090809090707} ;
let Constant_n10_o0: Tensor<int8_t> = {shape=[8], data=0x0a0d0808070b0708} ;
let Constant_n11_o0: Tensor<int8_t> = {shape=[1], data=0x06} ;
let Constant_n12_o0: Tensor<int8_t> = {shape=[1], data=0x08} ;

// init static tensor
let Q_n3_o0: Tensor<Any>  = {shape:CC=[12, 3]};
let Q_n4_o0: Tensor<Any>  = {shape:CC=[12, 4]};
let Q_n5_o0: Tensor<Any>  = {shape:C=[12]};
let Q_n6_o0: Tensor<Any>  = {shape:C=[12]};
let Q_n7_o0: Tensor<Any>  = {shape:CC=[8, 4]};
let Q_n8_o0: Tensor<Any>  = {shape:CC=[8, 2]};
let Q_n9_o0: Tensor<Any>  = {shape:C=[8]};
let Q_n10_o0: Tensor<Any>  = {shape:C=[8]};

// runtime tensor
let input: Tensor<Any> = {shape:BCD=[-1, 5, 3]};
let input_1: Tensor<Any> = {shape:BCD=[-1, 2, 4]};
let Q_n1_o0: Tensor<Any> = {shape:BCD=[-1, 5, 3]};
let Q_n2_o0: Tensor<Any> = {shape:BCD=[-1, 2, 4]};
let GRU_n1_o0: Tensor<Any> = {shape:BCD=[-1, 5, 4]};
let Q_n11_o0: Tensor<Any> = {shape:BCD=[-1, 5, 4]};
let LSTM_n1_o0: Tensor<Any> = {shape:BCD=[-1, 5, 2]};
let output: Tensor<Any> = {shape:BCD=[-1, 5, 2]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCD=[-1, 5, 3]};
let Q_n2_input_1: mem Tensor = {type=Any, shape:BCD=[-1, 2, 4]};
let GRU_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCD=[-1, 5, 3]};
let GRU_n1_Q_n2_o0: mem Tensor = {type=Any, shape:BCD=[-1, 2, 4]};
let Q_n11_GRU_n1_o0: mem Tensor = {type=Any, shape:BCD=[-1, 5, 4]};
let LSTM_n1_Q_n11_o0: mem Tensor = {type=Any, shape:BCD=[-1, 5, 4]};
let Q_n12_LSTM_n1_o0: mem Tensor = {type=Any, shape:BCD=[-1, 5, 2]};

// init node
let Q_n3: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[r_weight_ih_l0, Constant_n3_o0],
    out_s=[Q_n3_o0]
};
let Q_n4: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[r_weight_hh_l0, Constant_n4_o0],
    out_s=[Q_n4_o0]
};
let Q_n5: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[r_bias_ih_l0, Constant_n5_o0],
    out_s=[Q_n5_o0]
};
let Q_n6: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[r_bias_hh_l0, Constant_n6_o0],
    out_s=[Q_n6_o0]
};
let Q_n7: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[l_weight_ih_l0, Constant_n7_o0],
    out_s=[Q_n7_o0]
};
let Q_n8: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[l_weight_hh_l0, Constant_n8_o0],
    out_s=[Q_n8_o0]
};
let Q_n9: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[l_bias_ih_l0, Constant_n9_o0],
    out_s=[Q_n9_o0]
};
let Q_n10: init Node = {
    op_type=Q,
    attr=[bit_len=8, rounding=half_even],
    in_s=[l_bias_hh_l0, Constant_n10_o0],
    out_s=[Q_n10_o0]
};

// runtime_node
let Q_n1: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[input, Constant_n1_o0],
    mem_s=[Q_n1_input],
    out_s=[Q_n1_o0]
};
let Q_n2: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[input_1, Constant_n2_o0],
    mem_s=[Q_n2_input_1],
    out_s=[Q_n2_o0]
};
let GRU_n1: Node = {
    op_type=GRU,
    attr=[direction=forward, cell=[32, 16], gates=[6, 8], has_biases=1, hidden=[6, 8], hidden_size=4, initial_states=1, layout=1, num_layers=1, rounding=trunc],
    in_s=[Q_n1_o0, Q_n2_o0, Q_n3_o0, Q_n4_o0, Q_n5_o0, Q_n6_o0],
    mem_s=[GRU_n1_Q_n1_o0, GRU_n1_Q_n2_o0],
    out_s=[GRU_n1_o0]
};
let Q_n11: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[GRU_n1_o0, Constant_n11_o0],
    mem_s=[Q_n11_GRU_n1_o0],
    out_s=[Q_n11_o0]
};
let LSTM_n1: Node = {
    op_type=LSTM,
    attr=[direction=forward, cell=[15, 16], gates=[6, 8], has_biases=1, hidden=[8, 8], hidden_size=2, initial_states=0, layout=1, num_layers=1, rounding=trunc],
    in_s=[Q_n11_o0, Q_n7_o0, Q_n8_o0, Q_n9_o0, Q_n10_o0],
    mem_s=[LSTM_n1_Q_n11_o0],
    out_s=[LSTM_n1_o0]
};
let Q_n12: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[LSTM_n1_o0, Constant_n12_o0],
    mem_s=[Q_n12_LSTM_n1_o0],
    out_s=[output]
};

// call init node
func init(){
    Q_n3.do();
    Q_n4.do();
    Q_n5.do();
    Q_n6.do();
    Q_n7.do();
    Q_n8.do();
    Q_n9.do();
    Q_n10.do();
}

// call runtime node
func runtime(){
    Q_n1.do();
    Q_n2.do();
    GRU_n1.do();
    Q_n11.do();
    LSTM_n1.do();
    Q_n12.do();
}
