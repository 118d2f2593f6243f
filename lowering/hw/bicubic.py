"""lower-to-hw pattern for x2 bicubic upsampling: ``nf.upsample_bicubic`` →
``nh.upsample_bicubic``, the exact integer sum with the cubic's dyadic weights (256ths), then
the output fake-quant's requant (the one rounding, as at nq).

    %b = nf.upsample_bicubic %xq      ─▶   %b = nh.upsample_bicubic %xq : i8 <5> -> i32 <21>
    %bq = nq.fake_quant %b {exp = 5}       %bq = nh.requant %b {shift = [16]} : i8 <5>

Each doubled dim adds 8 to the exponent and at most 9 bits to the codes (the weights'
magnitudes sum to 328 < 2**9): 8-bit codes doubled along two dims need 26 bits; wider inputs
are refused, naming the op, where the sum would pass i32.
"""

from __future__ import annotations

from nanoir.dialects import nf, nh
from nanoir.lowering.hw.codes import container_width
from nanoir.lowering.hw.core import HwPattern, HwValue
from nanoir.runtime.numerics.bicubic import EXP_STEP, GROWTH_BITS
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerUpsampleBicubic(HwPattern):
    """``nf.upsample_bicubic`` → ``nh.upsample_bicubic``: the integer sum (``9 n`` more
    bits, exponent ``+ 8 n`` over ``n`` doubled dims)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.UpsampleBicubicOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        x, y = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
        doubled = sum(s != t for s, t in zip(x[2:], y[2:]))
        bits = (2 if a.bits == 1 else a.bits) + GROWTH_BITS * doubled
        width = max(nh.signed_bits(a.value), 2) + GROWTH_BITS * doubled
        if width > 32:
            raise hw.fail(
                op,
                f"needs {width}-bit sums, more than i32 ({nh.signed_bits(a.value)}-bit codes, "
                f"{doubled} doubled dims; quantize its input to fewer bits)",
            )
        exps = a.exps + EXP_STEP * doubled
        t = hw.result_type(y, exps, container_width(width), hw.layout_of(a))
        new = nh.UpsampleBicubicOp.create(
            operands=[a.value], result_types=[t], properties={"pads": op.pads}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, bits))


__all__ = ["LowerUpsampleBicubic"]
