let w: Tensor<int8_t> = {shape=[2], data=0x0102} ;
let e: Tensor<int8_t> = {shape=[1], data=0x07} ;
let q: Tensor<Any>  = {shape:C=[2]};
let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};
let y: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};
let m: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 3]};
let qn: init Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[w, e],
    out_s=[q]
};
let rn: Node = {
    op_type=Mul,
    attr=[],
    in_s=[x, q],
    mem_s=[m],
    out_s=[y]
};
func init(){
    qn.do();
}
func runtime(){
    rn.do();
}
