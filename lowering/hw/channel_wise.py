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
  the lowering says so. The result is ``nh.mul``, ``nh.add``, ``nh.requant``. The search runs
  once per kind of channel (same parameters and exponents) and for all of them at once as
  array operations (``affine_search_channels``; DenseNet-121 has 34,000 BN channels on
  16-bit codes). A BN whose ``A`` and ``B`` are dyadic enough that the float64 kernel rounds
  nowhere (``exact_affine``; quantize gives lone BNs that form, ``lowering/quantize/batch_norm.py``)
  takes its affine as it is, without the search and at any input width.
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
from nanoir.runtime.numerics.accumulator import ACC_LIMIT
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


AFFINE_EXPONENTS = range(-32, 63)
"""The exponents ``e`` of ``M ~ a 2**e`` the batch-norm search tries, coarse to fine."""


def _neighbours(
    c: np.ndarray,
    want: np.ndarray,
    m0: float,
    n0: float,
    n: int,
    shift: int,
    bits: int,
    mode: quant.RoundingMode,
) -> tuple[int, int] | None:
    """``(M, N)`` next to the nearest integers of ``m0`` and ``n0`` that give ``want``: the
    first in this order (``M`` then ``N`` by distance) that fits i32 and matches, all tried in
    one array operation."""
    pairs = [
        (mm, nn)
        for mm in sorted({math.floor(m0), math.ceil(m0)}, key=lambda v: abs(v - m0))
        for nn in sorted(range(n - 2, n + 3), key=lambda v: abs(v - n0))
    ]
    mm_nn = np.array(pairs, dtype=np.int64)
    acc = c[None, :] * mm_nn[:, :1] + mm_nn[:, 1:]
    fits = np.abs(acc).max(axis=1, initial=0) <= ACC_LIMIT
    good = fits & (quant.requant(acc, shift, bits, mode) == want[None, :]).all(axis=1)
    hits = np.flatnonzero(good)
    return pairs[int(hits[0])] if hits.size else None


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
    kernel decides), their neighbours. One channel, one exponent at a time: the definition
    that :func:`affine_search_channels` computes for all channels at once."""
    c = x_codes.astype(np.int64)
    for e in AFFINE_EXPONENTS:
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
        hit = _neighbours(c, want, m0, n0, n, shift, bits, mode)
        if hit is not None:
            return e, *hit
    return None


SEARCH_SIZE = 1 << 18
"""Codes checked per array operation in the batch-norm search (bounds its memory)."""


def affine_search_channels(
    x_codes: np.ndarray,
    want: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    x_exps: np.ndarray,
    out_exps: np.ndarray,
    bits: int,
    mode: quant.RoundingMode,
    x_bits: int,
) -> list[tuple[int, int, int] | None]:
    """:func:`affine_search` of every channel (``want`` is ``[channels, codes]``), with the
    same answers, as array operations over channels and exponents rather than one small
    requant per channel and exponent (DenseNet-121 has 34,000 BN channels: that loop took
    minutes). The exponents that cannot be the answer are ruled out first on a sample of the
    codes (more than 4 wrong among them is more than 4 wrong in all); then each channel's
    remaining exponents are checked on every code, coarsest first, all channels in step."""
    c = x_codes.astype(np.int64)
    channels = want.shape[0]
    found: list[tuple[int, int, int] | None] = [None] * channels
    es = np.arange(AFFINE_EXPONENTS.start, AFFINE_EXPONENTS.stop)
    with np.errstate(over="ignore", invalid="ignore"):
        # The same float64 products as affine_search's a * 2.0**e and b * 2.0**(x_exp + e).
        m0 = a[:, None] * np.ldexp(1.0, es)[None, :]
        n0 = b[:, None] * np.ldexp(1.0, x_exps[:, None] + es[None, :])
        mf, nf_ = np.rint(m0), np.rint(n0)  # Python's round: to nearest, ties to even
        # bits_of_codes of one code m: bit_length(m or -m - 1) + 1, at least 2 (exact below
        # 2**53; beyond, both are over 32).
        mbits = np.maximum(np.frexp(np.where(mf >= 0, mf, -mf - 1))[1] + 1, 2)
        ok = (x_bits + mbits + 1 <= 32) & (np.abs(nf_) <= ACC_LIMIT) & np.isfinite(m0)
    # Outside float64's range (or NaN parameters) the one-channel search decides.
    odd = ~(np.isfinite(m0).all(1) & np.isfinite(n0).all(1) & (np.abs(x_exps) < 900))
    m = np.where(ok, mf, 0).astype(np.int64)
    n = np.where(ok, nf_, 0).astype(np.int64)
    lo, hi = int(c.min()), int(c.max())
    ok &= np.maximum(np.abs(lo * m + n), np.abs(hi * m + n)) <= ACC_LIMIT  # |acc| is max at an end
    # affine_search returns None at the first exponent that does not fit.
    first_bad = np.where(ok.all(1), len(es), np.argmin(ok, axis=1))
    valid = (np.arange(len(es))[None, :] < first_bad[:, None]) & ~odd[:, None]
    shift = x_exps[:, None] + es[None, :] - out_exps[:, None]

    def wrong_at(rows_c: np.ndarray, rows_e: np.ndarray, pick: np.ndarray) -> np.ndarray:
        out = np.empty(len(rows_c), dtype=np.int64)
        step = max(1, SEARCH_SIZE // len(pick))
        for i in range(0, len(rows_c), step):
            rc, re_ = rows_c[i : i + step], rows_e[i : i + step]
            acc = c[pick][None, :] * m[rc, re_][:, None] + n[rc, re_][:, None]
            got = quant.requant(acc, shift[rc, re_][:, None], bits, mode)
            out[i : i + step] = np.count_nonzero(got != want[rc[:, None], pick[None, :]], axis=1)
        return out

    # A lower bound on the wrong codes of every (channel, exponent), from a sample of codes.
    sample = np.unique(np.linspace(0, len(c) - 1, min(len(c), 33)).round().astype(np.int64))
    rows_c, rows_e = np.nonzero(valid)
    bound = np.full(valid.shape, len(c) + 1, dtype=np.int64)
    bound[rows_c, rows_e] = wrong_at(rows_c, rows_e, sample)
    candidate = valid & (bound <= 4)
    everything = np.arange(len(c))
    # Each round checks every unsettled channel's next candidate exponent on every code.
    after = np.zeros(channels, dtype=np.int64)
    active = np.nonzero(~odd)[0]
    while len(active):
        left = candidate[active] & (np.arange(len(es))[None, :] >= after[active][:, None])
        has = left.any(1)
        active = active[has]
        e_idx = np.argmax(left[has], axis=1)
        wrong = wrong_at(active, e_idx, everything)
        keep = np.ones(len(active), dtype=bool)
        for i in np.nonzero(wrong <= 4)[0]:
            ch, k = int(active[i]), int(e_idx[i])
            if wrong[i] == 0:
                found[ch] = (int(es[k]), int(m[ch, k]), int(n[ch, k]))
            else:
                hit = _neighbours(
                    c,
                    want[ch],
                    float(m0[ch, k]),
                    float(n0[ch, k]),
                    int(n[ch, k]),
                    int(shift[ch, k]),
                    bits,
                    mode,
                )
                if hit is None:
                    continue
                found[ch] = (int(es[k]), *hit)
            keep[i] = False
        after[active] = e_idx + 1
        active = active[keep]
    for ch in np.nonzero(odd)[0]:
        found[ch] = affine_search(
            x_codes,
            want[ch],
            float(a[ch]),
            float(b[ch]),
            int(x_exps[ch]),
            int(out_exps[ch]),
            bits,
            mode,
            x_bits,
        )
    return found


def _lowest_bit(v: float) -> int | None:
    """The exponent of the lowest set bit of a finite float (``v = n 2**that`` with ``n``
    odd), None for 0."""
    if v == 0:
        return None
    mant, ex = math.frexp(v)
    n = int(mant * 2**53)  # exact: a float64 mantissa has 53 bits
    return ex - 53 + (n & -n).bit_length() - 1


def exact_affine(
    a: np.ndarray, b: np.ndarray, x_exps: np.ndarray, x_bits: int
) -> list[tuple[int, int, int]] | None:
    """Per channel ``(e, M, N)`` with ``a == M 2**-e`` and ``b == N 2**-(x + e)`` exactly (the
    coarsest such ``e`` in :data:`AFFINE_EXPONENTS`), ``bits(x) + bits(M) + 1 <= 32`` and ``|c M
    + N|`` within i32 for every code; None unless every channel has one.

    Then the nq kernel's float64 ``x * a + b`` rounds nowhere: ``x * a`` is ``c M`` (at most
    31 bits) times a power of two, and the sum is the integer ``c M + N`` times
    ``2**-(x + e)``, below 2**31 of them; so the fake-quant of it is ``requant(c M + N, x + e -
    out)`` for every code, and no search over the codes is needed (nor a bound on the input's
    width). This is the form quantize gives a lone batch norm
    (``lowering/quantize/batch_norm.py``)."""
    found: list[tuple[int, int, int]] = []
    lo, hi = quant.qmin(x_bits), quant.qmax(x_bits)
    for av, bv, xe in zip(a.tolist(), b.tolist(), x_exps.tolist()):
        if not (math.isfinite(av) and math.isfinite(bv)):
            return None
        need = [-low for low in (_lowest_bit(av),) if low is not None]
        need += [-low - xe for low in (_lowest_bit(bv),) if low is not None]
        e = max(need, default=0)
        if e not in AFFINE_EXPONENTS:
            return None
        m, n = int(av * 2.0**e), int(bv * 2.0 ** (xe + e))
        if m != av * 2.0**e or n != bv * 2.0 ** (xe + e):
            return None
        if x_bits + bits_of_codes(np.array([m])) + 1 > 32:
            return None
        if max(abs(lo * m + n), abs(hi * m + n)) > ACC_LIMIT:
            return None
        found.append((e, m, n))
    return found


class FuseBatchNormFakeQuant(HwPattern):
    """``fake_quant(batch_norm(x))`` → ``nh.mul``, ``nh.add``, ``nh.requant``: a per-channel
    integer affine, exact by construction (``exact_affine``) or checked against the nq kernel
    on every input code."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        bn = op.input.op if isinstance(op.input, OpResult) else None
        if not isinstance(bn, nf.BatchNormOp) or op.result in self.hw.values:
            return
        hw = self.begin(op, rewriter)
        bits, mode, _, nh_exp = fake_quant_params(op)
        if not op.is_signed:
            raise hw.fail(
                bn,
                "is fake-quantized to unsigned codes (signed = false); its integer affine is "
                "searched for signed codes only: quantize its output signed",
            )
        # Channels along dim 1 (a linear's [B, M, C] result is renamed so, see channels_at).
        x = hw.channels_at(bn, hw.get(bn, bn.input), 1)
        # Every code the input can hold: its bits (what the accumulator bounds rely on too).
        width = x.bits
        params = [constant_reals(hw, bn, v) for v in (bn.scale, bn.bias, bn.mean, bn.var)]
        channels = x.shape[1]
        x_exps = np.broadcast_to(x.exps.reshape(-1), (channels,)).astype(np.int64)
        out_exps = np.broadcast_to(nh_exp.reshape(-1), (channels,)).astype(np.int64)
        k = np.broadcast_to(fake_quant_params(op)[2].reshape(-1), (channels,))
        eps = bn.epsilon.value.data
        with np.errstate(all="ignore"):
            a = np.broadcast_to(params[0] / np.sqrt(params[3] + eps), (channels,))
            b = np.broadcast_to(params[1] - params[2] * a, (channels,))
        found = exact_affine(a, b, x_exps, width) if width > 1 else None
        if found is None:
            found = self._search(hw, bn, params, a, b, x_exps, out_exps, k, eps, bits, mode, x)
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

    @staticmethod
    def _search(
        hw: HwLowering,
        bn: nf.BatchNormOp,
        params: list[np.ndarray],
        a: np.ndarray,
        b: np.ndarray,
        x_exps: np.ndarray,
        out_exps: np.ndarray,
        k: np.ndarray,
        eps: float,
        bits: int,
        mode: quant.RoundingMode,
        x: HwValue,
    ) -> list[tuple[int, int, int]]:
        """Per channel ``(e, M, N)`` found by :func:`affine_search_channels` against the nq
        kernel run on every input code."""
        width, channels = x.bits, x.shape[1]
        if width > EXHAUSTIVE_WIDTH:
            raise hw.fail(
                bn,
                f"has {width}-bit input codes; its integer affine is checked on every "
                f"input code, at most {EXHAUSTIVE_WIDTH} bits",
            )
        codes = (
            np.array([-1, 1]) if width == 1 else np.arange(quant.qmin(width), quant.qmax(width) + 1)
        )
        # Channels with the same parameters and exponents (bit for bit) have the same answer:
        # search each once (a BN with the initial statistics has one kind of channel).
        per_channel = [np.broadcast_to(v.reshape(-1), (channels,)) for v in params]
        key = np.stack(
            [v.astype(np.float64).view(np.int64) for v in per_channel]
            + [x_exps, out_exps, k.astype(np.int64)],
            axis=1,
        )
        _, first, kind = np.unique(key, axis=0, return_index=True, return_inverse=True)
        # What the nq program computes for every code of every kind of channel, with its own
        # kernel.
        reals = np.ldexp(codes.astype(np.float64)[None, None, :], -x_exps[first][None, :, None])
        y = kernels.batch_norm(reals, *(v[first] for v in per_channel), eps)
        want = quant.quantize_to_int(y, bits, k[first].reshape(1, -1, 1), mode).astype(np.int64)
        found_kinds = affine_search_channels(
            codes,
            want[0],
            np.asarray(a[first], dtype=np.float64),
            np.asarray(b[first], dtype=np.float64),
            x_exps[first],
            out_exps[first],
            bits,
            mode,
            width,
        )
        found: list[tuple[int, int, int]] = []
        for c, i in enumerate(kind.reshape(-1)):
            hit = found_kinds[i]
            if hit is None:
                raise hw.fail(
                    bn,
                    f"has no integer affine within i32 that reproduces the "
                    f"float64 rounding of its fake-quant on channel {c}",
                )
            found.append(hit)
        return found


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
