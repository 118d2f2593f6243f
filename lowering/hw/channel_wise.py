"""lower-to-hw patterns for ops with constant per-channel parameters (trait ``ChannelWise``):
PReLU and batch norm.

- ``LowerPRelu``: ``x > 0 ? x : a * x`` with the quantized slope ``a = c_a 2**-e_a`` (per
  channel or one) is ``nh.prelu``: the slope's codes are re-expressed at one exponent
  ``s = max(max(e_a), 0)`` (exact left shifts), the positive side is shifted left by ``s``,
  so both sides are exact codes at ``exp(x) + s``.
- ``FuseBatchNormFakeQuant``: ``fake_quant(batch_norm(x))``, a BN that fold-bn could not
  fold (e.g. a quantizer sits between conv and BN). The nq program computes, in float64,
  ``q = fq(x * A + B)`` with ``A = g / sqrt(v + eps)``, ``B = b - m * A`` (the kernel's own
  rounding), and ``A`` is in general not dyadic, so no shift reproduces it. But ``x`` takes
  at most ``2**w`` codes per channel: the pattern computes ``q`` for every code with the nq
  kernel, then looks per channel for the integer affine ``requant(c * M + N, s)`` (``M ≈ A
  2**e``, ``N ≈ B 2**(exp(x) + e)``, the fake-quant's rounding) that gives exactly those codes
  for every input code (every code of the input's bits), with ``|c * M + N|`` within i32,
  trying ``e`` from coarse to fine. If no ``e`` works (a wide input leaves ``M`` too few
  bits, or the float64 rounding of a value next to a rounding boundary cannot be matched),
  the lowering says so. The result is ``nh.mul``, ``nh.add``, ``nh.requant``.
- ``LowerBatchNorm``: a BN not read only by fake-quants keeps a float result: diagnostic.

    %y = nf.prelu %xq, %aq                   ─▶   %y = nh.prelu %xq, %a {shift = 2 : i64} : i16 <7>
    %b = nf.batch_norm %xq, %g, %be, %m, %v        %p = nh.mul %xq, %M : (i8 <5>, i16 <[9, 8]>) -> i32 <[14, 13]>
    %bq = nq.fake_quant %b {bits = 8, exp = 3} ─▶  %s = nh.add %p, %N : i32 <[14, 13]>
                                                   %bq = nh.requant %s {shift = [11, 10]} : i8 <3>
"""

from __future__ import annotations

import math

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.hw.codes import (
    ACC_LIMIT,
    bits_of_bound,
    bits_of_codes,
    container_width,
    expand,
    float_constant_of,
)
from nanoir.lowering.hw.core import (
    HwLowering,
    HwPattern,
    HwValue,
    fused_into_fake_quant,
)
from nanoir.lowering.hw.elementwise import exact_sum, product
from nanoir.lowering.hw.fake_quant import fake_quant_params
from nanoir.runtime.numerics import kernels, quant
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern

EXHAUSTIVE_WIDTH = 16
"""Widest input whose every code the batch-norm search checks (65536 codes per channel)."""


class LowerPRelu(HwPattern):
    """``nf.prelu`` with a constant slope → ``nh.prelu`` (a per-channel multiply on the
    negative side, a left shift on the positive side)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.PReluOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        x, a = hw.get(op, op.input), hw.get(op, op.slope)
        if a.codes is None:
            raise hw.fail(op, "has a runtime slope; only a constant slope lowers to hw")
        slope_exps = np.broadcast_to(a.exps.reshape(-1), a.codes.reshape(-1).shape)
        shift = max(int(slope_exps.max()), 0)
        codes = a.codes.reshape(-1).astype(np.int64) << (shift - slope_exps)
        bound = x.max_abs * max(2**shift, int(np.abs(codes).max(initial=0)))
        bits = bits_of_bound(np.array([bound]))
        if bits > 32:
            raise hw.fail(op, f"needs {bits}-bit results, more than i32")
        if (slope_exps == shift).all() and a.codes.ndim == 1:
            slope = a  # already codes at the shift: the quantized constant, with its name
        else:
            slope = hw.make_constant(codes, np.array([shift]), "const", None)
        exps = expand(x.exps, x.rank) + shift
        try:
            t = hw.result_type(x.shape, exps, container_width(bits), hw.layout_of(x))
        except ValueError as e:
            raise hw.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        new = nh.PReluOp.create(
            operands=[x.value, slope.value],
            result_types=[t],
            properties={"shift": IntegerAttr(shift, i64)},
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, bits))


def constant_reals(hw: HwLowering, op: Operation, value: SSAValue) -> np.ndarray:
    """The float64 values the nq program computes with for a constant operand: the float
    constant itself, or the exact dyadic values of its fake-quant."""
    data = float_constant_of(value)
    if data is not None:
        return data
    hv = hw.values.get(value)
    if hv is None or hv.codes is None:
        raise hw.fail(op, "has a runtime parameter; only constant parameters lower to hw")
    return np.ldexp(hv.codes.astype(np.float64), -np.broadcast_to(hv.exps, hv.codes.shape))


def affine_search(
    x_codes: np.ndarray,
    want: np.ndarray,
    a: float,
    b: float,
    x_exp: int,
    out_exp: int,
    bits: int,
    mode: quant.RoundingMode,
    x_bits: int,
) -> tuple[int, int, int] | None:
    """``(e, M, N)``: the coarsest ``e`` with ``requant(c * M + N, x_exp + e - out_exp) ==
    want`` for every code ``c`` (``M ~ a 2**e``, ``N ~ b 2**(x_exp + e)``), within i32; None
    if there is none. ``M`` and ``N`` are the nearest integers, or, when only a few codes
    disagree (values next to a rounding boundary, where the float64 rounding of the nq
    kernel decides), their neighbours."""
    c = x_codes.astype(np.int64)
    for e in range(-32, 63):
        m0, n0 = a * 2.0**e, b * 2.0 ** (x_exp + e)
        m, n = round(m0), round(n0)
        acc = c * m + n
        # |M| and |N| only grow with e: past the first that does not fit, none does.
        if (
            x_bits + bits_of_codes(np.array([m])) + 1 > 32
            or abs(n) > ACC_LIMIT
            or np.abs(acc).max(initial=0) > ACC_LIMIT
        ):
            return None
        shift = x_exp + e - out_exp
        wrong = np.count_nonzero(quant.requant(acc, shift, bits, mode) != want)
        if wrong == 0:
            return e, m, n
        if wrong > 4:
            continue
        for mm in sorted({math.floor(m0), math.ceil(m0)}, key=lambda v: abs(v - m0)):
            for nn in sorted(range(n - 2, n + 3), key=lambda v: abs(v - n0)):
                acc = c * mm + nn
                if np.abs(acc).max(initial=0) <= ACC_LIMIT and np.array_equal(
                    quant.requant(acc, shift, bits, mode), want
                ):
                    return e, mm, nn
    return None


class FuseBatchNormFakeQuant(HwPattern):
    """``fake_quant(batch_norm(x))`` → ``nh.mul``, ``nh.add``, ``nh.requant``: a per-channel
    integer affine checked against the nq kernel on every input code."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        bn = op.input.op if isinstance(op.input, OpResult) else None
        if not isinstance(bn, nf.BatchNormOp) or op.result in self.hw.values:
            return
        hw = self.begin(op, rewriter)
        bits, mode, _, nh_exp = fake_quant_params(op)
        # Channels along dim 1 (a linear's [B, M, C] result is renamed so, see channels_at).
        x = hw.channels_at(bn, hw.get(bn, bn.input), 1)
        # Every code the input can hold: its bits (what the accumulator bounds rely on too).
        width = x.bits
        if width > EXHAUSTIVE_WIDTH:
            raise hw.fail(
                bn,
                f"has {width}-bit input codes; its integer affine is checked on every "
                f"input code, at most {EXHAUSTIVE_WIDTH} bits",
            )
        params = [constant_reals(hw, bn, v) for v in (bn.scale, bn.bias, bn.mean, bn.var)]
        channels = x.shape[1]
        codes = (
            np.array([-1, 1]) if width == 1 else np.arange(quant.qmin(width), quant.qmax(width) + 1)
        )
        x_exps = np.broadcast_to(x.exps.reshape(-1), (channels,)).astype(np.int64)
        out_exps = np.broadcast_to(nh_exp.reshape(-1), (channels,)).astype(np.int64)
        # What the nq program computes for every code of every channel, with its own kernel.
        reals = np.ldexp(codes.astype(np.float64)[None, None, :], -x_exps[None, :, None])
        y = kernels.batch_norm(reals, *params, bn.epsilon.value.data)
        k = fake_quant_params(op)[2]
        k_c = np.broadcast_to(k.reshape(-1), (channels,)).reshape(1, channels, 1)
        want = quant.quantize_to_int(y, bits, k_c, mode).astype(np.int64)
        a = np.broadcast_to(params[0] / np.sqrt(params[3] + bn.epsilon.value.data), (channels,))
        b = np.broadcast_to(params[1] - params[2] * a, (channels,))
        found = []
        for c in range(channels):
            hit = affine_search(
                codes,
                want[0, c],
                float(a[c]),
                float(b[c]),
                int(x_exps[c]),
                int(out_exps[c]),
                bits,
                mode,
                x.bits,
            )
            if hit is None:
                raise hw.fail(
                    bn,
                    f"has no integer affine within i32 that reproduces the "
                    f"float64 rounding of its fake-quant on channel {c}",
                )
            found.append(hit)
        shape = (1, channels) + (1,) * (x.rank - 2)
        e = np.array([f[0] for f in found]).reshape(shape)
        m = hw.make_constant(np.array([f[1] for f in found]).reshape(shape), e, "const", None)
        acc = product(hw, bn, x, m)
        n = hw.make_constant(
            np.array([f[2] for f in found]).reshape(shape),
            expand(x.exps, x.rank) + e,
            "const",
            None,
        )
        acc = exact_sum(hw, bn, acc, n, nh.AddOp)
        hw.set(op.result, hw.requant(op, acc, bits, nh_exp, mode, op.result.name_hint))


class LowerBatchNorm(HwPattern):
    """A batch norm that no fake-quant reads has no exact integer form: say so."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.BatchNormOp, rewriter: PatternRewriter) -> None:
        if fused_into_fake_quant(op):
            return  # lowered with the fake-quant that reads it
        raise self.hw.fail(
            op,
            "has no integer lowering unless only fake-quants read it (its "
            "scale 1/sqrt(var + eps) is not dyadic): quantize its result, "
            "or fold it into a conv (fold-bn)",
        )
