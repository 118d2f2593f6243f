"""lower-to-hw pattern for LayerNorm and GroupNorm (``IntegerAlgorithm``): the nf op between
fake-quants becomes ``nh.layer_norm`` / ``nh.group_norm`` carrying the plan the nq kernel
computes from the same grids and constants (``nanoir.dialects.nf.norm_plan_of``), so nq == nh
by construction.

    %xq = nq.fake_quant %x {bits = 8, exp = 4}         %y = nh.layer_norm %xq, %w, %b
    %y = nf.layer_norm %xq, %wq, %bq             ─▶        {normalized_dims = 1, bits = 8,
        {normalized_dims = 1}                               max_shift = 30, eps_term = ...,
    %yq = nq.fake_quant %y {bits = 8, exp = 5}              guard = 24, nudge = 3}

The output fake-quant then lowers to nothing. Refused, naming the op: an input or output not
quantized per tensor, a weight or bias that is not a per-tensor fake-quantized constant, a
dynamic normalised dim, and sizes or exponents whose sums would leave i64
(``nanoir.runtime.numerics.norm.NormBoundError``: ``n**2 4**(b-1)`` at most ``2**60``).
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import RoundingModeAttr
from nanoir.dialects.traits import normalised_dims
from nanoir.lowering.hw.codes import container_width
from nanoir.lowering.hw.core import HwPattern, HwValue
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, i64
from xdsl.ir import Attribute
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerNorm(HwPattern):
    """``nf.layer_norm`` / ``nf.group_norm`` between fake-quants → ``nh.layer_norm`` /
    ``nh.group_norm`` on the input, weight and bias codes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: nf.LayerNormOp | nf.GroupNormOp, rewriter: PatternRewriter
    ) -> None:
        hw = self.begin(op, rewriter)
        qin, qout = hw.algorithm_grids(op)
        shape = nf.tensor_shape(op.input)
        if any(shape[d] == DYNAMIC_INDEX for d in normalised_dims(op)):
            raise hw.fail(op, "normalises over a dynamic dim; nh needs its size")
        if not qout.signed or not qin.signed:
            raise hw.fail(op, "has unsigned codes, which lower-to-hw does not carry yet")
        x, w, b = (hw.get(op, v) for v in (op.input, op.weight, op.bias))
        if x.exps.size and not (x.exps == qin.exp).all():
            raise hw.fail(op, f"reads codes at exponents {sorted(set(x.exps.flat))}, not {qin.exp}")
        assert w.codes is not None and b.codes is not None  # (bound_error checked constants)
        kg, kc = int(w.exps.reshape(-1)[0]), int(b.exps.reshape(-1)[0])
        plan = nf.norm_plan_of(op, qin, qout, w.codes, kg, b.codes, kc)
        props: dict[str, Attribute] = {
            "bits": IntegerAttr(qout.bits, i64),
            "max_shift": IntegerAttr(plan.max_shift, i64),
            "eps_term": IntegerAttr(plan.eps_term, i64),
            "guard": IntegerAttr(plan.guard, i64),
            "nudge": IntegerAttr(plan.nudge, i64),
            "rounding": RoundingModeAttr(plan.rounding),
        }
        if isinstance(op, nf.LayerNormOp):
            props["normalized_dims"] = IntegerAttr(op.normalized_dims.value.data, i64)
            cls: type[nh.LayerNormOp | nh.GroupNormOp] = nh.LayerNormOp
        else:
            props["groups"] = IntegerAttr(op.groups.value.data, i64)
            cls = nh.GroupNormOp
        out_exps = np.full((1,) * x.rank, qout.exp, dtype=np.int64)
        t = hw.result_type(x.shape, out_exps, container_width(qout.bits), hw.layout_of(x))
        new = cls.create(operands=[x.value, w.value, b.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, out_exps, qout.bits))
