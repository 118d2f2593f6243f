"""lower-to-hw patterns for reductions and prefix sums: ``nf.reduce`` → ``nh.reduce``,
``nf.arg_reduce`` → ``nh.arg_reduce``, ``nf.cumsum`` → ``nh.cumsum``.

Codes at one exponent add and order as their values do, so each of these is exact on codes:
per-channel exponents along a reduced dim are first aligned to the finest by exact left
shifts, the result keeps the exponents. A sum of ``n`` codes of ``b`` signed bits is bounded
statically by ``b + ceil(log2 n)`` bits (``reduce.sum_bits``), the bound the contractions use
against i32: beyond it, or over a dynamic dim, the op is refused, naming it. A product of
codes grows by ``b`` bits per factor and has no integer form here.

    %s = nf.reduce "sum" %xq {dims = [2]}   ─▶   %s = nh.reduce "sum" %xq : i8 <5> -> i16 <5>
    %sq = nq.fake_quant %s {exp = 2}             %sq = nh.requant %s {shift = [3]} : i8 <2>
    %i = nf.arg_reduce "argmax" %xq         ─▶   %i = nh.arg_reduce "argmax" %xq : -> i32 <0>
"""

from __future__ import annotations

import math

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nf import array_values
from nanoir.lowering.hw.codes import container_width, expand
from nanoir.lowering.hw.core import HwLowering, HwPattern, HwValue
from nanoir.runtime.numerics.reduce import sum_bits
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


def one_exponent_along(
    hw: HwLowering, op: Operation, hv: HwValue, dims: tuple[int, ...]
) -> HwValue:
    """``hv`` with no exponents varying along ``dims`` (aligned to the finest by left shifts)."""
    exps = expand(hv.exps, hv.rank)
    if not any(d < exps.ndim and exps.shape[d] > 1 for d in dims):
        return hv
    return hw.shift_to(op, hv, np.array(exps.max()).reshape((1,) * hv.rank))


def sum_width(hw: HwLowering, op: Operation, hv: HwValue, dims: tuple[int, ...]) -> int:
    """Bits of a sum of ``hv``'s codes over ``dims``, or the refusal naming the op."""
    shape = nf.tensor_shape(op.operands[0])
    sizes = [shape[d] for d in dims]
    if DYNAMIC_INDEX in sizes:
        raise hw.fail(
            op,
            f"sums over a dynamic dim ({[d for d in dims if shape[d] == DYNAMIC_INDEX]}): the "
            "accumulator's bound is known only at run time (import with static shapes)",
        )
    n = math.prod(sizes)
    bits = sum_bits(max(hv.bits, 2), n)
    if bits > 32:
        raise hw.fail(
            op,
            f"sums {n} codes of {hv.bits} bits: the accumulator needs {bits} bits, more than "
            "i32 (quantize its input to fewer bits, or sum fewer elements)",
        )
    return bits


def declared_sum_width(op: Operation, hv: HwValue, dims: tuple[int, ...], bits: int) -> int:
    """The container of a sum of ``hv``'s codes over ``dims``: ``bits`` wide, and as wide as
    the nh verifier asks from the operand's declared width (a 3-bit value in ``i4`` counts
    4 bits there), up to i32 (which the verifier takes as the accumulator)."""
    shape = nf.tensor_shape(op.operands[0])
    n = math.prod(shape[d] for d in dims)
    declared = sum_bits(nh.signed_bits(hv.value), n)
    return container_width(min(max(bits, declared), 32))


class LowerReduce(HwPattern):
    """``nf.reduce`` (sum, max, min) → ``nh.reduce`` on codes at one exponent."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ReduceOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        kind = op.kind.data
        dims = tuple(array_values(op.dims) or ())
        if kind == "prod":
            raise hw.fail(
                op,
                "multiplies codes together: a product of n codes needs n times their bits, "
                "which no integer form holds",
            )
        a = one_exponent_along(hw, op, hw.get(op, op.input), dims)
        signed = hw.signed(a)
        if kind == "sum":
            a = hw.with_zero(a)  # (±1 codes can sum to 0)
            bits = sum_width(hw, op, a, dims)
            width, signed = declared_sum_width(op, a, dims, bits), True
        else:
            bits, width = a.bits, hw.declared(a)
        t = hw.result_type(nf.tensor_shape(op.result), a.exps, width, hw.layout_of(a), signed)
        new = nh.ReduceOp.create(
            operands=[a.value], result_types=[t], properties={"kind": op.kind, "dims": op.dims}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, bits))


class LowerArgReduce(HwPattern):
    """``nf.arg_reduce`` → ``nh.arg_reduce``: indices (``i32``) of codes at one exponent
    along the dim; any / all (``i2``) of the codes as they are."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ArgReduceOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        kind = op.kind.data
        dims = tuple(array_values(op.dims) or ())
        a = hw.get(op, op.input)
        if kind in ("argmax", "argmin"):
            a = one_exponent_along(hw, op, a, dims)
            bits = 32
        else:
            bits = 2
        zero = np.zeros((1,) * a.rank, np.int64)
        t = hw.result_type(nf.tensor_shape(op.result), zero, bits, hw.layout_of(a))
        new = nh.ArgReduceOp.create(
            operands=[a.value], result_types=[t], properties={"kind": op.kind, "dims": op.dims}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, zero, bits))


class LowerCumsum(HwPattern):
    """``nf.cumsum`` → ``nh.cumsum``: an exact prefix sum of codes at one exponent."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.CumsumOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        dims = tuple(array_values(op.dims) or ())
        a = hw.with_zero(one_exponent_along(hw, op, hw.get(op, op.input), dims))
        bits = sum_width(hw, op, a, dims) if a.rank else a.bits
        width = declared_sum_width(op, a, dims, bits)
        t = hw.result_type(nf.tensor_shape(op.result), a.exps, width, hw.layout_of(a))
        new = nh.CumsumOp.create(operands=[a.value], result_types=[t], properties={"dims": op.dims})
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, bits))


__all__ = ["LowerArgReduce", "LowerCumsum", "LowerReduce"]
