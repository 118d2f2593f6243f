"""lower-to-hw pattern for L2 normalisation (``IntegerAlgorithm``): ``nf.normalize`` between
fake-quants becomes ``nh.normalize`` carrying the plan the nq kernel computes from the same
grids (``nanoir.dialects.nf.l2_plan_of``), so nq == nh by construction.

    %xq = nq.fake_quant %x {bits = 8, exp = 4}         %y = nh.normalize %xq {axis = 1,
    %y = nf.normalize %xq {axis = 1}             ─▶        bits = 8, max_shift = 30,
    %yq = nq.fake_quant %y {bits = 8, exp = 7}              eps_term = 0, guard = 24, nudge = 3}

The output fake-quant then lowers to nothing. Refused, naming the op: an input or output not
quantized per tensor, a dynamic normalised dim, and sizes or exponents the algorithm cannot
take exactly (``nanoir.runtime.numerics.l2norm.L2BoundError``).
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import RoundingModeAttr
from nanoir.lowering.hw.codes import container_width
from nanoir.lowering.hw.core import HwPattern, HwValue
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, i64
from xdsl.ir import Attribute
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerNormalize(HwPattern):
    """``nf.normalize`` between fake-quants → ``nh.normalize`` on the input codes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.NormalizeOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        qin, qout = hw.algorithm_grids(op)
        shape = nf.tensor_shape(op.input)
        if shape and shape[op.axis.value.data % len(shape)] == DYNAMIC_INDEX:
            raise hw.fail(op, "normalises over a dynamic dim; nh needs its size")
        if not shape:
            raise hw.fail(op, "normalises a 0-d value (nh values have a rank)")
        x = hw.get(op, op.input)
        if x.exps.size and not (x.exps == qin.exp).all():
            raise hw.fail(op, f"reads codes at exponents {sorted(set(x.exps.flat))}, not {qin.exp}")
        plan = nf.l2_plan_of(op, qin, qout)
        props: dict[str, Attribute] = {
            "axis": IntegerAttr(op.axis.value.data, i64),
            "bits": IntegerAttr(qout.bits, i64),
            "max_shift": IntegerAttr(plan.max_shift, i64),
            "eps_term": IntegerAttr(plan.eps_term, i64),
            "guard": IntegerAttr(plan.guard, i64),
            "nudge": IntegerAttr(plan.nudge, i64),
            "rounding": RoundingModeAttr(plan.rounding),
        }
        out_exps = np.full((1,) * x.rank, qout.exp, dtype=np.int64)
        t = hw.result_type(
            x.shape, out_exps, container_width(qout.bits), hw.layout_of(x), qout.signed
        )
        new = nh.NormalizeOp.create(operands=[x.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, out_exps, qout.bits + (0 if qout.signed else 1)))


__all__ = ["LowerNormalize"]
