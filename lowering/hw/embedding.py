"""lower-to-hw pattern for an embedding lookup: the table's codes (a constant, one exponent)
indexed by the program's integer input, which becomes an ``i32`` input at exponent 0 (no
fake-quant: the runtime passes the indices through as they are).

    %y = nf.embedding %ids, %tq   ─▶   %y = nh.embedding %ids, %t : (i32 <0>, i8 <5>) -> i8 <5>
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.lowering.hw.core import HwLowering, HwPattern, HwValue
from xdsl.dialects.builtin import DictionaryAttr
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern

__all__ = ["LowerEmbedding"]


def index_input(hw: HwLowering, op: Operation, arg: SSAValue, rewriter: PatternRewriter) -> HwValue:
    """The nh ``i32`` input (exponent 0) for a function input read only as indices, made
    the first time an embedding reads it."""
    if arg in hw.values:
        return hw.values[arg]
    if not isinstance(arg, BlockArgument) or not nf.is_index_input(arg):
        raise hw.fail(
            op,
            "reads indices that are not a function input read only as indices (computed or "
            "fake-quantized indices have no integer form)",
        )
    shape = nf.tensor_shape(arg)
    exps = np.zeros((1,) * len(shape), dtype=np.int64)
    t = hw.result_type(shape, exps, 32)
    block = arg.block
    new_arg = rewriter.insert_block_argument(block, len(block.args), t)
    if arg.name_hint:
        new_arg.name_hint = arg.name_hint
    hw.new_args.append(new_arg)
    hw.arg_attrs.append(DictionaryAttr({}))  # no nq.bits: the runtime takes the integers as codes
    hw.input_index[arg] = len(hw.new_args) - 1
    hv = HwValue(new_arg, exps, 32)
    hw.set(arg, hv)
    return hv


class LowerEmbedding(HwPattern):
    """``nf.embedding`` → ``nh.embedding``: rows of the table's codes, its one exponent kept."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.EmbeddingOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        i = index_input(hw, op, op.indices, rewriter)
        w = hw.get(op, op.table)
        if w.exps.size != 1 and not (w.exps == w.exps.reshape(-1)[0]).all():
            raise hw.fail(op, "has a table with per-channel exponents (quantize it per tensor)")
        shape = nf.tensor_shape(op.result)
        exps = np.full((1,) * len(shape), int(w.exps.reshape(-1)[0]), dtype=np.int64)
        t = hw.result_type(shape, exps, hw.declared(w), None, hw.signed(w))
        new = nh.EmbeddingOp.create(operands=[i.value, w.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, w.bits))
