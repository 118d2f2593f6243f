"""lower-to-hw patterns for the Magik manual's ``Unpool2D`` modes beyond nearest: zero
upsampling (data movement) and x2 bilinear upsampling (an exact integer sum, then the output
fake-quant's requant); and max unpooling by max pooling's indices (``i32`` at exponent 0).

    %z = nf.upsample_zero %xq {offsets = [0, 0]}  ─▶  %z = nh.upsample_zero %xq : i8 <5>
    %b = nf.upsample_bilinear %xq                  ─▶  %b = nh.upsample_bilinear %xq : i8 <5> -> i16 <9>
    %bq = nq.fake_quant %b {exp = 5}                   %bq = nh.requant %b {shift = [4]} : i8 <5>

The bilinear weights 1/4 and 3/4 per doubled dim are dyadic, so ``4**n`` times the result
is an integer sum of codes (weights 1, 3, 3, 9 in 2-D): exact in ``bits + 2n`` bits at the
input's exponent ``+ 2n``, and the fake-quant after it rounds once, as at nq.
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.lowering.hw.codes import container_width
from nanoir.lowering.hw.core import HwPattern, HwValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerUpsampleZero(HwPattern):
    """``nf.upsample_zero`` → ``nh.upsample_zero``: codes moved, code 0 elsewhere; exponents
    kept (``i1`` codes, which have no 0, widened to ``i2`` first)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.UpsampleZeroOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.with_zero(hw.get(op, op.input))
        t = hw.result_type(
            nf.tensor_shape(op.result), a.exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        new = nh.UpsampleZeroOp.create(
            operands=[a.value], result_types=[t], properties={"offsets": op.offsets}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))


class LowerUpsampleBilinear(HwPattern):
    """``nf.upsample_bilinear`` → ``nh.upsample_bilinear``: the integer sum (``2n`` more
    bits, exponent ``+ 2n``); the output fake-quant then requantizes it."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.UpsampleBilinearOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        x, y = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
        growth = 2 * sum(s != t for s, t in zip(x[2:], y[2:]))
        bits = (2 if a.bits == 1 else a.bits) + growth
        width = max(nh.signed_bits(a.value), 2) + growth  # (i1: +-1 sums to +-16)
        if width > 32:
            raise hw.fail(op, f"needs {width}-bit sums, more than i32")
        exps = a.exps + growth
        t = hw.result_type(y, exps, container_width(width), hw.layout_of(a))
        new = nh.UpsampleBilinearOp.create(
            operands=[a.value], result_types=[t], properties={"pads": op.pads}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, bits))


class LowerMaxPoolIndices(HwPattern):
    """``nf.max_pool_indices`` → ``nh.max_pool_indices`` on the codes (their order is the
    values' order, per channel: per-channel exponents change nothing within a plane):
    ``i32`` indices at exponent 0."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MaxPoolIndicesOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        exps = np.zeros((1,) * a.rank, dtype=np.int64)
        t = hw.result_type(nf.tensor_shape(op.result), exps, 32, hw.layout_of(a))
        props = {"kernel": op.kernel, "strides": op.strides}
        new = nh.MaxPoolIndicesOp.create(operands=[a.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, 32))


class LowerMaxUnpool(HwPattern):
    """``nf.max_unpool`` → ``nh.max_unpool``: codes moved to their indices, code 0 elsewhere,
    exponents kept (``i1`` codes, which have no 0, widened to ``i2`` first)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MaxUnpoolOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        if not isinstance(op.indices.owner, nf.MaxPoolIndicesOp):
            raise hw.fail(
                op,
                "unpools by indices that are not nf.max_pool_indices' result (indices given to "
                "the program have no integer form: unpool by a max pool's indices in the program)",
            )
        a = hw.with_zero(hw.get(op, op.input))
        i = hw.get(op, op.indices)
        t = hw.result_type(
            nf.tensor_shape(op.result), a.exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        new = nh.MaxUnpoolOp.create(operands=[a.value, i.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))
