"""lower-to-hw patterns for elementwise arithmetic: add/sub, max/min, mul, div, relu, clamp.

- add / sub align both operands to the finer exponent by exact left shifts (one bit of
  growth; max / min align the same way and pick a code, no growth); mul adds exponents; a
  float constant operand (``x + 2``) is used at the exponent where it is an integer;
  division by a constant whose reciprocal is dyadic is a product;
- operands broadcast as NumPy does, at any rank: a runtime operand of lower rank (an
  attention bias ``[H, T, T]`` added to ``[N, H, T, T]`` scores, a ``[C]`` vector to
  ``[N, T, C]`` tokens) is shifted in its own rank and layout, and nh broadcasts it. Exponents
  may vary along one axis only (the result's channel axis, where every runtime operand has
  its own channels too): along any other axis the aligned exponent is the finest there
  (``alignment_target``), and a product's operand is first made one exponent
  (``on_channel_axis``);
- relu keeps codes and exponents; clamp compares codes on a grid fine enough that both bounds
  are whole codes. Both can make a 0 from binary ``i1`` codes (±1, no 0), so they read such
  codes widened to ``i2`` (``HwLowering.with_zero``).

    %a = nf.add %xq, %yq          ─▶   %y2 = nh.requant %yq {shift = [-2]} : i16 <5>
    (%xq exp 5, %yq exp 3)             %a = nh.add %xq, %y2 : (i8 <5>, i16 <5>) -> i16 <5>
    %c = nf.clamp %a {max = 6.0}  ─▶   %c = nh.clamp %a {max = 192} : i16 <5>
"""

from __future__ import annotations

import functools

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.hw.codes import (
    container_width,
    dyadic_exponent,
    expand,
    float_constant_of,
)
from nanoir.lowering.hw.core import (
    HwLowering,
    HwPattern,
    HwValue,
    value_label,
)
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Attribute, Operation
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


def check_alignment(
    hw: HwLowering, op: Operation, parts: list[HwValue], target: np.ndarray
) -> None:
    """Refuse, naming the finest operand and the exponent it needs, when shifting another
    operand onto ``target`` (as ``shift_to`` will) needs more than i32."""
    finest = max(parts, key=lambda p: int(p.exps.max()))
    for p in parts:
        if p is finest or p.codes is not None:
            continue
        rank = max(p.rank, target.ndim)
        shift = int((expand(target, rank) - expand(p.exps, rank)).max())
        bits = p.bits + shift + (1 if p.bits == 1 else 0)
        if bits > 32:
            top = int(finest.exps.max())
            raise hw.fail(
                op,
                f"aligning operands needs {bits}-bit codes, more than i32: "
                f"{value_label(p)} ({p.bits}-bit codes) would shift {shift} places onto "
                f"{value_label(finest)} at exponent {top}; give {value_label(finest)} an "
                f"exponent of at most {top - (bits - 32)}",
            )


def channel_axis(hw: HwLowering, hv: HwValue, rank: int) -> int | None:
    """The axis of a rank-``rank`` result that a runtime operand's channel axis (its
    layout's ``C``, NumPy broadcasting right-aligns it) falls on; None when it has none."""
    axis = hw.layout_of(hv).find("C")
    return None if axis < 0 else rank - hv.rank + axis


def alignment_target(hw: HwLowering, parts: list[HwValue], rank: int, layout: str) -> np.ndarray:
    """The exponents both operands of an aligned op (add, sub, max, min) move onto: the
    finer of the two, per element, except along an axis where exponents cannot vary; there
    the finest along it. An axis keeps varying exponents only if it is the result's channel
    axis (``layout``'s ``C``) and every runtime operand has its own channels there (not a
    broadcast 1, not a lower-rank operand's other axis: one nh value has one shift per
    channel of its own); constants are shifted at compile time, element by element."""
    target = functools.reduce(np.maximum, [expand(p.exps, rank) for p in parts])
    result_axis = layout.find("C")
    for d in range(rank):
        if target.shape[d] == 1:
            continue
        varies = d == result_axis and all(
            p.codes is not None
            or (p.rank > rank - 1 - d and p.shape[d - rank] != 1 and channel_axis(hw, p, rank) == d)
            for p in parts
        )
        if not varies:
            target = target.max(axis=d, keepdims=True)
    return target


def shift_onto(hw: HwLowering, op: Operation, hv: HwValue, target: np.ndarray) -> HwValue:
    """``hw.shift_to`` for an operand NumPy broadcasts: a runtime operand of lower rank is
    shifted in its own rank (``target`` is one exponent along the axes it lacks, as
    :func:`alignment_target` and :func:`on_channel_axis` make it)."""
    lead = target.ndim - hv.rank
    if hv.codes is None and lead > 0:
        assert all(n == 1 for n in target.shape[:lead]), "exponents vary along a missing axis"
        target = target.reshape(target.shape[lead:])
    return hw.shift_to(op, hv, target)


def exact_sum(
    hw: HwLowering, op: Operation, a: HwValue, b: HwValue, cls: type[nh.AddOp] | type[nh.SubOp]
) -> HwValue:
    """``a + b`` (or ``a - b``) on the finer exponent of the two: exact, one bit of growth.
    A runtime operand broadcast along a dim (one channel added to several) moves by one
    shift there: the sum takes the finest exponent along that dim."""
    out_shape = nf.tensor_shape(op.results[0])
    rank = len(out_shape)
    target = alignment_target(hw, [a, b], rank, hw.runtime_layout_for(out_shape, a, b))
    check_alignment(hw, op, [a, b], target)
    a2, b2 = shift_onto(hw, op, a, target), shift_onto(hw, op, b, target)
    bits = max(a2.bits, b2.bits, 2) + 1
    # (a ui<b> operand counts b + 1 signed bits)
    width = min(max(nh.signed_bits(a2.value), nh.signed_bits(b2.value), 2) + 1, 32)
    layout = hw.runtime_layout_for(out_shape, a2, b2)
    try:
        t = hw.result_type(out_shape, target, container_width(width), layout)
    except ValueError as e:
        raise hw.fail(op, f"has exponents the hw level cannot carry: {e}") from None
    new = cls.create(operands=[a2.value, b2.value], result_types=[t])
    hw.emit(new, op.results[0].name_hint)
    return HwValue(new.result, target, bits)


class LowerAddSub(HwPattern):
    """Exact sum: both operands shifted left onto the finer exponent, one bit of growth."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.AddOp | nf.SubOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a, b = hw.get(op, op.lhs), hw.get(op, op.rhs)
        cls = nh.AddOp if isinstance(op, nf.AddOp) else nh.SubOp
        hw.set(op.result, exact_sum(hw, op, a, b, cls))


class LowerMaxMin(HwPattern):
    """``nf.maximum`` / ``nf.minimum`` → ``nh.maximum`` / ``nh.minimum``: both operands
    shifted left onto the finer exponent (exact, as add's), then the larger (smaller) code
    picked: no growth; unsigned only when both operands are."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MaximumOp | nf.MinimumOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a, b = hw.get(op, op.lhs), hw.get(op, op.rhs)
        out_shape = nf.tensor_shape(op.result)
        rank = len(out_shape)
        target = alignment_target(hw, [a, b], rank, hw.runtime_layout_for(out_shape, a, b))
        check_alignment(hw, op, [a, b], target)
        a2, b2 = shift_onto(hw, op, a, target), shift_onto(hw, op, b, target)
        signed = hw.signed(a2) or hw.signed(b2)
        if signed:
            width = max(nh.signed_bits(a2.value), nh.signed_bits(b2.value))
        else:
            width = max(hw.declared(a2), hw.declared(b2))
        layout = hw.runtime_layout_for(out_shape, a2, b2)
        try:
            t = hw.result_type(out_shape, target, container_width(width), layout, signed)
        except ValueError as e:
            raise hw.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        cls = nh.MaximumOp if isinstance(op, nf.MaximumOp) else nh.MinimumOp
        new = cls.create(operands=[a2.value, b2.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, target, max(a2.bits, b2.bits)))


def on_channel_axis(hw: HwLowering, op: Operation, hv: HwValue, rank: int, axis: int) -> HwValue:
    """``hv`` with exponents that vary, broadcast to rank ``rank``, along ``axis`` at most:
    else moved onto its finest one by an exact left shift (a product's exponents add, and
    the result's may vary along its channel axis only)."""
    exps = expand(hv.exps, rank)
    if all(n == 1 or d == axis for d, n in enumerate(exps.shape)):
        return hv
    return shift_onto(hw, op, hv, np.full((1,) * rank, int(exps.max()), np.int64))


def product(hw: HwLowering, op: Operation, a: HwValue, b: HwValue) -> HwValue:
    """Exact product of codes; exponents add."""
    out_shape = nf.tensor_shape(op.results[0])
    rank = len(out_shape)
    axis = hw.runtime_layout_for(out_shape, a, b).find("C")
    a, b = on_channel_axis(hw, op, a, rank, axis), on_channel_axis(hw, op, b, rank, axis)
    exps = expand(a.exps, rank) + expand(b.exps, rank)
    bits = (1 if a.bits == 1 else a.bits) + (1 if b.bits == 1 else b.bits)
    if a.bits == 1 and b.bits == 1:
        bits = 2
    if bits > 32:
        raise hw.fail(op, f"needs {bits}-bit products, more than i32")
    width = min(nh.signed_bits(a.value) + nh.signed_bits(b.value), 32)
    layout = hw.runtime_layout_for(out_shape, a, b)
    try:
        t = hw.result_type(out_shape, exps, container_width(width), layout)
    except ValueError as e:
        raise hw.fail(op, f"has exponents the hw level cannot carry: {e}") from None
    new = nh.MulOp.create(operands=[a.value, b.value], result_types=[t])
    hw.emit(new, op.results[0].name_hint)
    return HwValue(new.result, exps, bits)


class LowerMul(HwPattern):
    """``nf.mul`` → ``nh.mul``: codes multiply, exponents add."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MulOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        hw.set(op.result, product(hw, op, hw.get(op, op.lhs), hw.get(op, op.rhs)))


class LowerDiv(HwPattern):
    """Division by a constant whose reciprocal is dyadic (a power of two): a product."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.DivOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        divisor = float_constant_of(op.rhs)
        if divisor is None:
            raise hw.fail(
                op,
                "divides by a runtime value; only division by a constant "
                "with a dyadic reciprocal (a power of two) lowers to hw",
            )
        inverse = 1.0 / divisor
        if dyadic_exponent(inverse) is None or not np.array_equal(
            divisor * inverse, np.ones_like(inverse)
        ):
            raise hw.fail(
                op,
                f"divides by {divisor.reshape(-1)[:4].tolist()}, "
                "whose reciprocal is not a dyadic rational",
            )
        a = hw.get(op, op.lhs)
        b = hw.float_constant(op, inverse)
        hw.set(op.result, product(hw, op, a, b))


class LowerRelu(HwPattern):
    """``nf.relu`` → ``nh.relu`` on the codes (``i1`` codes first widened to ``i2``: the
    relu of -1 is 0, which ``i1`` cannot hold)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ReluOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.with_zero(hw.get(op, op.input))
        new = nh.ReluOp.create(operands=[a.value], result_types=[a.value.type])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))


def clamp_reader(op: nf.ClampOp) -> FakeQuantOp | None:
    """The fake-quant that alone reads ``op`` (several equal ones count as one), or None."""
    readers = [u.operation for u in op.result.uses]
    first = readers[0] if readers else None
    if not isinstance(first, FakeQuantOp):
        return None
    if any(
        not isinstance(r, FakeQuantOp)
        or r.properties != first.properties
        or r.attributes != first.attributes
        for r in readers
    ):
        return None
    return first


def clamp_after_fake_quant(
    hw: HwLowering, op: nf.ClampOp, a: HwValue, fq: FakeQuantOp, bounds: list[float]
) -> HwValue:
    """``fq(clamp(x, lo, hi))`` as ``clamp(fq(x), fq(lo), fq(hi))``: a fake-quant is
    monotone (any rounding, saturation included), and a monotone ``g`` has
    ``g(max(x, lo)) == max(g(x), g(lo))`` and ``g(min(x, hi)) == min(g(x), g(hi))``; the
    bounds' codes come from the same float64 values and the same quantizer as nq's."""
    bits, mode = fq.bits.value.data, fq.rounding_mode
    k = np.asarray(dense_to_numpy(fq.exp), np.int64)
    if bits == 1 or (k != k.reshape(-1)[0]).any():
        raise hw.fail(
            op,
            f"clamps at {bounds}, which are not dyadic rationals, and its fake-quant is "
            + ("1-bit" if bits == 1 else "per channel")
            + " (a per-tensor one of 2 bits or more takes the bounds' codes)",
        )
    y = hw.requant(op, a, bits, k.reshape(-1)[:1], mode, None, fq.is_signed)
    props: dict[str, Attribute] = {}
    for key, bound in (("min", op.min), ("max", op.max)):
        if bound is not None:
            code = quant.quantize_to_int(
                np.float64(bound.value.data),
                bits,
                int(k.reshape(-1)[0]),
                mode,
                signed=fq.is_signed,
            )
            props[key] = IntegerAttr(int(code), i64)
    new = nh.ClampOp.create(operands=[y.value], result_types=[y.value.type], properties=props)
    hw.emit(new, op.result.name_hint)
    return HwValue(new.result, y.exps, y.bits)


class LowerClamp(HwPattern):
    """Clamp on codes, on a grid fine enough that both bounds are whole codes (``i1`` codes
    first widened to ``i2``: a bound between -1 and +1 makes a 0). Bounds that are no
    dyadic rational (``x.clamp(min=1e-6)`` before a ``log``) are on no grid: read by a
    fake-quant, the clamp moves after it onto the bounds' codes (``clamp_after_fake_quant``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ClampOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.with_zero(hw.get(op, op.input))
        bounds = [b.value.data for b in (op.min, op.max) if b is not None]
        needed = dyadic_exponent(np.array(bounds)) if bounds else None
        if bounds and needed is None:
            fq = clamp_reader(op)
            if fq is None:
                raise hw.fail(
                    op,
                    f"clamps at {bounds}, which are not dyadic rationals (read by fake-quants "
                    "alone of 2 bits or more, it would clamp at the bounds' codes)",
                )
            hw.set(op.result, clamp_after_fake_quant(hw, op, a, fq, bounds))
            return
        common = int(a.exps.max()) if needed is None else max(int(a.exps.max()), needed)
        if a.exps.size > 1 or common != int(a.exps.max()) or bounds and (a.exps != common).any():
            a = hw.shift_to(op, a, np.array(common).reshape((1,) * a.rank))
        props: dict[str, Attribute] = {}
        for key, bound in (("min", op.min), ("max", op.max)):
            if bound is not None:
                props[key] = IntegerAttr(int(np.ldexp(bound.value.data, common)), i64)
        new = nh.ClampOp.create(operands=[a.value], result_types=[a.value.type], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))
