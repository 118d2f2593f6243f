"""lower-to-hw patterns for ops defined by an integer algorithm (``IntegerAlgorithm``):
softmax and log-softmax become ``nh.softmax`` / ``nh.log_softmax`` carrying the i-exp tables
the nq kernel computes from the same input grid, so nq == nh by construction.

    %xq = nq.fake_quant %x {bits = 8, exp = 4}          %s = nh.softmax %xq {axis = 1, bits = 8,
    %s = nf.softmax %xq {axis = 1}               ─▶         exp_hi = [...], exp_lo = [...]}
    %sq = nq.fake_quant %s {bits = 8, exp = 7}              : i8 <4> -> i8 <7>

The output fake-quant then lowers to nothing (the codes are already on its grid). A softmax
whose input or output is not quantized per tensor (a rule skipped it), whose mask is not a
constant, or whose row could make the integer sum pass ``2**52`` is refused, naming the op.
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import constant_array, numpy_to_dense
from nanoir.dialects.nf import int_array
from nanoir.lowering.hw.codes import container_width
from nanoir.lowering.hw.core import HwPattern, HwValue
from nanoir.runtime.numerics.softmax import exp_tables
from xdsl.dialects.builtin import IntegerAttr, i1, i64
from xdsl.ir import Attribute
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerSoftmax(HwPattern):
    """``nf.softmax`` / ``nf.log_softmax`` between fake-quants → ``nh.softmax`` /
    ``nh.log_softmax`` on the input codes, with the tables of ``exp_tables(k_in, bits_in)``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: nf.SoftmaxOp | nf.LogSoftmaxOp, rewriter: PatternRewriter
    ) -> None:
        hw = self.begin(op, rewriter)
        qin, qout = hw.algorithm_grids(op)
        x = hw.get(op, op.input)
        if x.exps.size and not (x.exps == qin.exp).all():
            raise hw.fail(op, f"reads codes at exponents {sorted(set(x.exps.flat))}, not {qin.exp}")
        hi, lo = exp_tables(qin.exp, qin.bits)
        props: dict[str, Attribute] = {
            "axis": IntegerAttr(op.axis.value.data, i64),
            "bits": IntegerAttr(qout.bits, i64),
            "exp_hi": int_array(hi.tolist()),
            "exp_lo": int_array(lo.tolist()),
        }
        if isinstance(op, nf.SoftmaxOp) and op.mask is not None:
            mask = constant_array(op.mask)
            if mask is None:
                raise hw.fail(
                    op, "has a mask computed at run time; nh.softmax takes a constant mask"
                )
            props["mask"] = numpy_to_dense(np.asarray(mask, dtype=bool).astype(np.int8), i1)
        rank = x.rank
        out_exps = np.full((1,) * rank, qout.exp, dtype=np.int64)
        t = hw.result_type(
            x.shape, out_exps, container_width(qout.bits), hw.layout_of(x), qout.signed
        )
        cls = nh.SoftmaxOp if isinstance(op, nf.SoftmaxOp) else nh.LogSoftmaxOp
        new = cls.create(operands=[x.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        # ui<b> codes (an unsigned output fake-quant) count b + 1 signed bits downstream
        hw.set(op.result, HwValue(new.result, out_exps, qout.bits + (0 if qout.signed else 1)))
