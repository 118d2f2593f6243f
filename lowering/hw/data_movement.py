"""lower-to-hw patterns for ops that move codes and keep their exponents: max pool, concat,
reshape.

A max pool picks codes (one exponent per channel, unchanged); concat joins codes (along the
channel dim per-channel exponents concatenate, otherwise every part is first aligned to the
finest exponent by exact left shifts); reshape keeps codes in order (per-channel exponents
stay when the channels stay in dim 1, else they are aligned first).

    %p = nf.max_pool %xq {kernel = [2, 2]}   ─▶   %p = nh.max_pool %xq {kernel = [2, 2]} : i8 <[5, 4]>
    %c = nf.concat %aq, %bq {axis = 1}       ─▶   %c = nh.concat %aq, %bq {axis = 1} : i8 <[5, 4, 3]>
    %r = nf.reshape %c : -> tensor<?x48xf32> ─▶   %c2 = nh.requant %c {shift = [0, -1, -2]} : i16 <5>
                                                  %r = nh.reshape %c2 : tensor<?x48xi16, <5, "BC">>
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.functions import runtime_layout
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern

from nanoir.lowering.hw.core import HwPattern, HwValue


class LowerMaxPool(HwPattern):
    """``nf.max_pool`` → ``nh.max_pool`` with the same window."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MaxPoolOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        t = hw.result_type(nf.tensor_shape(op.result), a.exps, hw.declared(a), hw.layout_of(a))
        props = {k: v for k, v in op.properties.items()}
        new = nh.MaxPoolOp.create(operands=[a.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))


class LowerConcat(HwPattern):
    """``nf.concat`` → ``nh.concat``, parts aligned to one exponent unless per channel."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ConcatOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        parts = [hw.get(op, v) for v in op.inputs]
        axis = op.axis.value.data % len(nf.tensor_shape(op.result))
        rank = parts[0].rank
        layouts = {hw.layout_of(p) for p in parts if p.codes is None}
        layout = layouts.pop() if len(layouts) == 1 else runtime_layout(rank)
        per_channel_axis = layout.find("C") == axis and any(p.exps.size > 1 for p in parts)
        if per_channel_axis:
            full = [np.broadcast_to(p.exps.reshape((1,) * (rank - p.exps.ndim) + p.exps.shape),
                                    [1] * axis + [p.shape[axis]] + [1] * (rank - axis - 1))
                    for p in parts]
            exps = np.concatenate(full, axis=axis)
        else:
            target = parts[0].exps.reshape(-1).max()
            for p in parts:
                if p.exps.size != 1:
                    raise hw.fail(op, "joins per-channel exponents along a non-channel dim")
                target = max(target, p.exps.reshape(-1)[0])
            parts = [hw.shift_to(op, p, np.array(target).reshape((1,) * rank)) for p in parts]
            exps = np.array(target).reshape((1,) * rank)
        bits = max(p.bits for p in parts)
        width = max(hw.declared(p) for p in parts)
        t = hw.result_type(nf.tensor_shape(op.result), exps, width, layout)
        if len({hw.declared(p) for p in parts}) > 1:
            parts = [hw.widen(p, width) for p in parts]
        new = nh.ConcatOp.create(operands=[p.value for p in parts], result_types=[t],
                                 properties={"axis": IntegerAttr(axis, i64)})
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, bits))


class LowerReshape(HwPattern):
    """``nf.reshape`` → ``nh.reshape`` (per-channel exponents only when channels stay)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ReshapeOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        out_shape = nf.tensor_shape(op.result)
        if a.exps.size != 1:
            if a.rank >= 2 and len(out_shape) >= 2 and a.shape[1] == out_shape[1]:
                exps = a.exps  # channels stay in dim 1
            else:
                a = hw.shift_to(op, a, np.array(a.exps.max()).reshape((1,) * a.rank))
                exps = a.exps
        else:
            exps = a.exps
        exps = exps.reshape((1,) * len(out_shape)) if exps.size == 1 else exps.reshape(
            (1, -1) + (1,) * (len(out_shape) - 2))
        t = hw.result_type(out_shape, exps, hw.declared(a))
        new = nh.ReshapeOp.create(operands=[a.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, a.bits, None))
