"""lower-to-hw patterns for comparisons and selection: ``nf.compare`` → ``nh.compare`` (codes
0/1 at exponent 0), ``nf.where`` → ``nh.select``.

Codes compare as their values do once they share an exponent, so two runtime operands are
aligned to the finer one by exact left shifts (as ``nf.maximum``'s are). A constant operand
needs no alignment and no dyadic form: ``x > c`` on codes ``q`` at exponent ``e`` is
``q > floor(c 2**e)`` exactly (``q`` is an integer), and likewise ``ge``/``lt``/``le`` with
``ceil``/``ceil``/``floor``; ``eq`` holds only where ``c 2**e`` is an integer. Each threshold
is clipped to one code past the operand's range, so ``±inf`` and ``1e9`` need no wide
containers (NaN compares false, ``ne`` true). ``and``/``or``/``xor`` read non-zero codes.

``nf.where`` read by one fake-quant alone picks from its two values requantized onto that
fake-quant's grid first (a selection commutes with an elementwise rounding), so a constant it
picks (``masked_fill(x, m, -inf)``, ``-1e9``) needs no dyadic form: ``-inf`` becomes the
grid's lowest code. Otherwise both values are aligned, and a constant must be dyadic.

    %m = nf.compare "gt" %xq, %c            ─▶   %t = nh.constant dense<[12]> : i8 <5>
    (%xq exp 5, %c = 0.4 unquantized)            %m = nh.compare "gt" %xq, %t : -> i2 <0>
    %y = nf.where %m, %xq, %zq              ─▶   %z2 = nh.requant %zq {shift = [1]} : i8 <4>
    %yq = nq.fake_quant %y {exp = 4}             %x2 = nh.requant %xq {shift = [1]} : i8 <4>
                                                 %yq = nh.select %m, %x2, %z2 : i8 <4>
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.hw.codes import container_width, expand, float_constant_of
from nanoir.lowering.hw.core import HwLowering, HwPattern, HwValue
from nanoir.lowering.hw.elementwise import check_alignment
from nanoir.lowering.hw.embedding import index_input
from nanoir.lowering.hw.fake_quant import fake_quant_params
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.compare import LOGICAL, PREDICATES
from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern

MIRRORED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
"""``c < x`` is ``x > c``: the predicate with its operands swapped."""


def thresholds(predicate: str, c: np.ndarray, exps: np.ndarray, max_abs: int) -> np.ndarray:
    """Integer codes ``t`` at exponents ``exps`` with ``q <predicate> t`` equal to
    ``q 2**-exps <predicate> c`` for every code ``|q| <= max_abs``.

    >>> thresholds("gt", np.array(0.3), np.array([2]), 127).tolist()   # q/4 > 0.3: q > 1
    [1]
    >>> thresholds("ge", np.array(0.3), np.array([2]), 127).tolist()   # q >= 2
    [2]
    >>> thresholds("eq", np.array([0.25, 0.3]), np.array([2]), 127).tolist()  # 0.3: never
    [1, 128]
    >>> thresholds("lt", np.array(-np.inf), np.array([0]), 7).tolist()
    [-8]
    """
    s = np.ldexp(np.asarray(c, np.float64), np.asarray(exps, np.int64))
    bound = max_abs + 1
    with np.errstate(invalid="ignore"):
        if predicate in ("gt", "le"):
            t = np.floor(s)
        elif predicate in ("ge", "lt"):
            t = np.ceil(s)
        else:  # eq / ne: a value between codes equals none
            t = np.where(s == np.round(s), s, bound)
    nan = np.isnan(s)
    if nan.any():  # NaN: every ordering is false (ne true)
        t = np.where(nan, -bound if predicate in ("lt", "le") else bound, t)
    return np.clip(t, -bound, bound).astype(np.int64)


def aligned(hw: HwLowering, op: Operation, a: HwValue, b: HwValue) -> tuple[HwValue, HwValue]:
    """``a`` and ``b`` on one exponent (the finer, per element) by exact left shifts."""
    rank = len(nf.tensor_shape(op.results[0]))
    target = np.maximum(expand(a.exps, rank), expand(b.exps, rank))
    if any(
        t > 1 and d == 1
        for v in (a, b)
        for t, d in zip(target.shape, (1,) * (rank - v.rank) + tuple(v.shape))
    ):  # per-channel exponents against a broadcast operand: one exponent for both
        target = np.array(target.max()).reshape((1,) * rank)
    check_alignment(hw, op, [a, b], target)
    return hw.shift_to(op, a, target), hw.shift_to(op, b, target)


def truth_type(hw: HwLowering, op: Operation, *operands: HwValue) -> TensorType:
    """``i2`` codes 0/1 at exponent 0, in the layout of the first runtime operand."""
    shape = nf.tensor_shape(op.results[0])
    zero = np.zeros((1,) * len(shape), np.int64)
    return hw.result_type(shape, zero, 2, hw.runtime_layout_for(shape, *operands))


class LowerCompare(HwPattern):
    """``nf.compare`` → ``nh.compare``: orderings on aligned codes, or against integer
    thresholds for a constant operand; logical predicates on the codes as they are."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.CompareOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        predicate = op.predicate.data
        lc, rc = float_constant_of(op.lhs), float_constant_of(op.rhs)
        rank = len(nf.tensor_shape(op.result))
        zero = np.zeros((1,) * rank, np.int64)
        if lc is not None and rc is not None:  # both constant: the answer is a constant
            both = np.broadcast_to(_truth(predicate, lc, rc), nf.tensor_shape(op.result))
            hw.set(op.result, hw.make_constant(both.astype(np.int64), zero, "const", None, 2))
            return
        if predicate in LOGICAL:
            a, b = (
                hw.make_constant(
                    (c != 0).astype(np.int64).reshape(c.shape or (1,)), zero, "const", None, 2
                )
                if c is not None
                else hw.get(op, v)
                for v, c in ((op.lhs, lc), (op.rhs, rc))
            )
        else:
            runtime, const = (op.lhs, rc) if lc is None else (op.rhs, lc)
            if lc is not None:
                predicate = MIRRORED[predicate]
            a = _runtime_operand(hw, op, runtime, rewriter)
            if const is not None:
                t = thresholds(
                    predicate, const, expand(a.exps, max(const.ndim, a.exps.ndim)), a.max_abs
                )
                b = hw.make_constant(
                    t.reshape(t.shape or (1,)),
                    np.broadcast_to(expand(a.exps, t.ndim), t.shape),
                    "const",
                    None,
                )
            else:
                a, b = aligned(hw, op, a, hw.get(op, op.rhs))
        t = truth_type(hw, op, a, b)
        new = nh.CompareOp.create(
            operands=[a.value, b.value],
            result_types=[t],
            properties={"predicate": StringAttr(predicate)},
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, zero, 2))


def _runtime_operand(
    hw: HwLowering, op: Operation, value: SSAValue, rewriter: PatternRewriter
) -> HwValue:
    """A compared runtime value: token ids (``ids != pad``) are the program's ``i32`` input
    at exponent 0 (``nf.is_index_input``), which an embedding may read only later."""
    if isinstance(value, BlockArgument) and nf.is_index_input(value):
        return index_input(hw, op, value, rewriter)
    return hw.get(op, value)


def _truth(predicate: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.asarray(PREDICATES[predicate](a, b))


def _only_fake_quant(value: SSAValue) -> FakeQuantOp | None:
    uses = list(value.uses)
    if len(uses) == 1 and isinstance(uses[0].operation, FakeQuantOp):
        return uses[0].operation
    return None


class LowerWhere(HwPattern):
    """``nf.where`` → ``nh.select``. Read by one fake-quant alone, both values are first
    requantized onto its grid (a selection commutes with an elementwise rounding:
    ``fq(where(c, a, b)) = where(c, fq(a), fq(b))``), so the fake-quant is then the identity
    and no alignment can overflow (a ``-1e9`` fill beside 8-bit codes); otherwise the two
    values are aligned to one exponent."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.WhereOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        cond = hw.get(op, op.cond)
        reader = _only_fake_quant(op.result)
        values: list[HwValue] = []
        for v in (op.lhs, op.rhs):
            data = float_constant_of(v)
            if reader is None:
                values.append(hw.get(op, v))
                continue
            bits, mode, k, nh_exp = fake_quant_params(reader)
            if data is None:
                hv = hw.get(op, v)
            else:  # (a constant need not be dyadic: its rounding is)
                try:
                    rounded = quant.fake_quant(data, bits, k, mode, signed=reader.is_signed)
                except ValueError as e:
                    raise hw.fail(op, f"picks a constant with no code: {e}") from None
                hv = hw.float_constant(op, rounded)
            values.append(hw.requant(reader, hv, bits, nh_exp, mode, None, reader.is_signed))
        a, b = aligned(hw, op, *values)
        signed = hw.signed(a) or hw.signed(b)
        if signed:
            width = max(nh.signed_bits(a.value), nh.signed_bits(b.value))
        else:
            width = max(hw.declared(a), hw.declared(b))
        out_shape = nf.tensor_shape(op.result)
        rank = len(out_shape)
        exps = np.maximum(expand(a.exps, rank), expand(b.exps, rank))
        layout = hw.runtime_layout_for(out_shape, a, b, cond)
        try:
            t = hw.result_type(out_shape, exps, container_width(width), layout, signed)
        except ValueError as e:
            raise hw.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        new = nh.SelectOp.create(operands=[cond.value, a.value, b.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, max(a.bits, b.bits)))


__all__ = ["LowerCompare", "LowerWhere", "thresholds"]
