"""Softmax and log-softmax: torch's float math, and the integer algorithm that defines them on
codes at the quantized levels (DESIGN.md, "Ops with no dyadic form").

The float kernels (:func:`softmax`, :func:`log_softmax`) are torch's semantics in the dtype
they are given. An optional boolean ``mask`` broadcasts against ``x`` (NumPy rules; True = the
position takes part): masked positions contribute nothing and output exactly 0 (softmax); a
row with no position taking part outputs all 0.

The integer algorithm (:func:`softmax_codes`, :func:`log_softmax_codes`) reads input codes
``q`` (value ``q * 2**-k_in``) and returns output codes at ``k_out``. It is written once over
the array's dtype: float64 (the nq level: every intermediate is an integer below ``2**53``,
so float64 computes it exactly) or int64 (the nh level), and the two agree bit for bit. Its
steps, learnt from TFLite's / CMSIS-NN's int8 softmax and I-BERT's integer-only softmax:

1. ``d = max(q) - q >= 0`` over the row (masked positions excluded);
2. i-exp from two tables over the code difference (no ``2**16``-entry table for 16-bit
   codes): ``d = i * 2**m + j``, ``e = round(hi[i] * lo[j] / 2**LO_FRAC)``, where
   ``hi[i] = round(exp(-i * 2**m * 2**-k_in) * 2**EXP_FRAC)`` and
   ``lo[j] = round(exp(-j * 2**-k_in) * 2**LO_FRAC)`` (:func:`exp_tables`): ``e`` is
   ``exp(x - max)`` with ``EXP_FRAC = 30`` fraction bits, ``exp(0) = 2**30`` exactly;
3. an integer sum ``S = sum(e)`` (``<= N * 2**30``: refused beyond ``2**52``, :func:`bound_error`);
4. softmax: one rounding division per element, ``y = floor((e * 2**k_out + S / 2) / S)``
   (half up), saturated to the output codes;
   log-softmax: ``y = round(d' * 2**(k_out - k_in) - ln(S / 2**30) * 2**k_out)`` with
   ``d' = q - max``, the integer log from the bit length of ``S`` and a 1025-entry table of
   ``ln(1 + f)`` (30 fraction bits) linearly interpolated (:func:`ln_fixed`).

Rounding inside the algorithm is always half up (the output fake-quant's mode does not apply:
the result is already on its grid, which the fake-quant keeps).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EXP_FRAC",
    "LN_FRAC",
    "LO_FRAC",
    "bound_error",
    "exp_tables",
    "ln_fixed",
    "log_softmax",
    "log_softmax_codes",
    "softmax",
    "softmax_codes",
]

EXP_FRAC = 30
"""Fraction bits of the integer exponential ``e``: ``exp(0) = 2**30``."""
LO_FRAC = 22
"""Fraction bits of the low table, so that ``hi * lo <= 2**52`` stays exact in float64."""
LN_FRAC = 30
"""Fraction bits of the integer natural log."""
LN_TABLE_BITS = 10
"""``ln(1 + f)`` is tabulated at ``2**10 + 1`` points and interpolated linearly (error
``<= 2**-23``)."""
_MANTISSA = 43
"""Bits ``S`` is normalised to before the log: ``(t[i+1] - t[i]) * rest < 2**52``."""
EXACT = 2**52
"""Every intermediate stays below this, so float64 holds it exactly."""

LN_TABLE = np.round(
    np.log1p(np.arange(2**LN_TABLE_BITS + 1) / 2**LN_TABLE_BITS) * 2**LN_FRAC
).astype(np.int64)
LN2 = round(math.log(2) * 2**LN_FRAC)
_POW2 = 2 ** np.arange(63, dtype=np.int64)


def _broadcast_mask(mask: NDArray[Any] | None, shape: tuple[int, ...]) -> NDArray[np.bool_] | None:
    return None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), shape)


def softmax(x: NDArray[Any], axis: int, mask: NDArray[Any] | None = None) -> NDArray[Any]:
    """torch's ``softmax(x, axis)`` in ``x``'s dtype; masked positions (False) output 0.

    >>> softmax(np.array([0.0, np.log(3.0)]), 0).round(6).tolist()
    [0.25, 0.75]
    >>> softmax(np.array([1.0, 5.0, 2.0]), 0, np.array([True, False, True])).round(4).tolist()
    [0.2689, 0.0, 0.7311]
    """
    m = _broadcast_mask(mask, x.shape)
    lowest = np.asarray(-np.inf, dtype=x.dtype)
    xm = x if m is None else np.where(m, x, lowest)
    top = np.max(xm, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, np.zeros_like(top))  # a fully masked row
    e = np.exp(xm - top)
    s = np.sum(e, axis=axis, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1), 0).astype(x.dtype, copy=False)


def log_softmax(x: NDArray[Any], axis: int) -> NDArray[Any]:
    """torch's ``log_softmax(x, axis)``: ``x - max - log(sum(exp(x - max)))``.

    >>> log_softmax(np.array([0.0, 0.0]), 0).round(6).tolist()
    [-0.693147, -0.693147]
    """
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _span(bits: int) -> int:
    """Largest code difference ``max - q`` of ``bits``-bit codes (1-bit codes are ``±1``)."""
    return 2 if bits == 1 else 2**bits - 1


def exp_tables(in_exp: int, in_bits: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The high and low i-exp tables of an input at exponent ``in_exp``: ``len(lo) = 2**m``
    with ``m = ceil(bit_length(span) / 2)``, ``len(hi) = span // 2**m + 1``.

    >>> hi, lo = exp_tables(0, 4)
    >>> len(hi), len(lo), int(hi[0]), int(lo[0]), int(lo[1])
    (4, 4, 1073741824, 4194304, 1542998)
    """
    span = _span(in_bits)
    m = (span.bit_length() + 1) // 2
    step = 2.0**-in_exp
    lo = np.round(np.exp(-np.arange(2**m) * step) * 2.0**LO_FRAC).astype(np.int64)
    hi_index = np.arange(span // 2**m + 1) * float(2**m)
    hi = np.round(np.exp(-hi_index * step) * 2.0**EXP_FRAC).astype(np.int64)
    return hi, lo


def bound_error(kind: str, row: int, in_bits: int, in_exp: int, out_exp: int) -> str | None:
    """Why the algorithm cannot run exactly for rows of ``row`` elements, or None.

    ``kind`` is ``softmax`` or ``log_softmax``; every intermediate must stay below ``2**52``
    (exact in float64 and in int64). A dynamic ``row`` (negative) is taken at its largest,
    ``2**21`` elements (the kernels check the actual row).

    >>> bound_error("softmax", 10, 8, 4, 7) is None
    True
    >>> bound_error("softmax", 2**23, 8, 4, 7)
    'a row of 8388608 elements is too long: the sum of its exp values needs 8388608 * 2**31 <= 2**52'
    """
    n = max(row, 1)  # a dynamic row (negative) is checked at run time; bound its log here
    if row < 0:
        n = EXACT // 2 ** (EXP_FRAC + 1)
    total = n * 2**EXP_FRAC
    if 2 * total > EXACT:
        return f"a row of {n} elements is too long: the sum of its exp values needs {n} * 2**31 <= 2**52"
    if kind == "softmax":
        num = 2 ** (EXP_FRAC + 1 + max(out_exp, 0))
        den = total * 2 ** max(-out_exp, 0)
        if num + den > EXACT:
            return f"output exponent {out_exp} needs intermediates beyond 2**52"
        return None
    c = max(in_exp - out_exp, LN_FRAC - out_exp, 0)
    a, b = out_exp - in_exp + c, out_exp - LN_FRAC + c
    log_max = (math.log(n) + 1) * 2**LN_FRAC
    if _span(in_bits) * 2**a + log_max * 2**b + 2**c > EXACT:
        return (
            f"input exponent {in_exp} and output exponent {out_exp} need intermediates beyond 2**52"
        )
    return None


def _const(value: int, dtype: np.dtype[Any]) -> Any:
    return np.asarray(value, dtype=dtype)


def exp_values(neg: NDArray[Any], hi: NDArray[np.int64], lo: NDArray[np.int64]) -> NDArray[Any]:
    """``exp`` at ``EXP_FRAC`` bits of code distances ``0 <= neg < len(hi) * len(lo)`` (int64
    or float64, kept): ``hi[neg // len(lo)] * lo[neg % len(lo)]`` rounded to ``EXP_FRAC``
    bits (every intermediate below ``2**52``: exact in either).

    >>> hi, lo = exp_tables(0, 4)
    >>> exp_values(np.arange(3), hi, lo).tolist()  # 2**30 exp(-[0, 1, 2]), to 2**8 or so
    [1073741824, 395007488, 145315072]
    """
    dt = neg.dtype
    m = _const(len(lo), dt)
    i = np.floor_divide(neg, m)
    j = neg - i * m
    prod = hi.astype(dt)[i.astype(np.int64)] * lo.astype(dt)[j.astype(np.int64)]
    return np.floor_divide(prod + _const(2 ** (LO_FRAC - 1), dt), _const(2**LO_FRAC, dt))


def _exp_codes(
    q: NDArray[Any],
    axis: int,
    hi: NDArray[np.int64],
    lo: NDArray[np.int64],
    mask: NDArray[np.bool_] | None,
) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
    """``(d, e, S)``: code differences to the row max (<= 0), ``exp`` at ``EXP_FRAC`` bits
    (0 where masked) and the row sums."""
    dt = q.dtype
    row = q.shape[axis] if q.ndim else 1
    if 2 * row * 2**EXP_FRAC > EXACT:
        raise ValueError(bound_error("softmax", row, 1, 0, 0))
    if mask is None:
        top = np.max(q, axis=axis, keepdims=True)
    else:
        lowest = _const(np.iinfo(np.int64).min // 4, dt)
        top = np.max(np.where(mask, q, lowest), axis=axis, keepdims=True)
        top = np.where(top == lowest, q.max(initial=0), top)  # fully masked rows
    d = q - top
    neg = np.clip(-d, 0, (len(hi) * len(lo)) - 1)  # masked positions may lie above the max
    e = exp_values(neg, hi, lo)
    if mask is not None:
        e = np.where(mask, e, _const(0, dt))
    return d, e, np.sum(e, axis=axis, keepdims=True, dtype=dt)


def _saturate(y: NDArray[Any], bits: int, signed: bool = True) -> NDArray[Any]:
    if not signed:
        lo, hi = 0, 2**bits - 1
    else:
        lo, hi = (-1, 1) if bits == 1 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return np.clip(y, lo, hi).astype(y.dtype, copy=False)


def softmax_codes(
    q: NDArray[Any],
    axis: int,
    in_exp: int,
    in_bits: int,
    out_exp: int,
    out_bits: int,
    mask: NDArray[Any] | None = None,
    tables: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None,
    signed: bool = True,
) -> NDArray[Any]:
    """Integer softmax of codes ``q`` (float64 or int64) into ``out_bits`` codes at
    ``out_exp`` (``signed`` or unsigned); ``tables`` default to :func:`exp_tables` of the
    input.

    >>> softmax_codes(np.array([0, 16]), 0, 4, 8, 7, 8).tolist()  # x = [0, 1]
    [34, 94]
    >>> softmax_codes(np.array([0.0, 16.0]), 0, 4, 8, 7, 8).tolist()
    [34.0, 94.0]
    """
    hi, lo = tables if tables is not None else exp_tables(in_exp, in_bits)
    dt = q.dtype
    _, e, s = _exp_codes(q, axis, hi, lo, _broadcast_mask(mask, q.shape))
    num = e * _const(2 ** max(out_exp, 0), dt)
    den = s * _const(2 ** max(-out_exp, 0), dt)
    safe = np.where(den > 0, den, _const(1, dt))
    y = np.floor_divide(num * _const(2, dt) + safe, safe * _const(2, dt))
    return _saturate(np.where(den > 0, y, _const(0, dt)), out_bits, signed)


def ln_fixed(s: NDArray[Any]) -> NDArray[Any]:
    """``ln(s / 2**EXP_FRAC) * 2**LN_FRAC``, rounded, for integer-valued ``s >= 1`` (float64 or
    int64, below ``2**53``): bit length, then ``ln(1 + f)`` from the table, interpolated.

    >>> ln_fixed(np.array([2**30, 2**31, 3 * 2**30])).tolist()
    [0, 744261118, 1179625963]
    """
    dt = s.dtype
    pow2 = _POW2.astype(dt)
    n = np.searchsorted(pow2, s, side="right")  # bit length
    up = np.clip(_MANTISSA - n, 0, None)
    down = np.clip(n - _MANTISSA, 0, None)
    mant = np.floor_divide(s * pow2[up], pow2[down])  # in [2**42, 2**43)
    rest_bits = _MANTISSA - 1 - LN_TABLE_BITS
    f = mant - pow2[_MANTISSA - 1]
    i = np.floor_divide(f, pow2[rest_bits])
    r = f - i * pow2[rest_bits]
    table = LN_TABLE.astype(dt)
    ii = i.astype(np.int64)
    t0, t1 = table[ii], table[np.minimum(ii + 1, len(LN_TABLE) - 1)]
    interp = np.floor_divide((t1 - t0) * r + pow2[rest_bits - 1], pow2[rest_bits])
    return (n.astype(dt) - _const(1 + EXP_FRAC, dt)) * _const(LN2, dt) + t0 + interp


def log_softmax_codes(
    q: NDArray[Any],
    axis: int,
    in_exp: int,
    in_bits: int,
    out_exp: int,
    out_bits: int,
    tables: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None,
    signed: bool = True,
) -> NDArray[Any]:
    """Integer log-softmax of codes ``q`` (float64 or int64) into ``out_bits`` codes at
    ``out_exp``: ``round((q - max) * 2**(out_exp - in_exp) - ln(S / 2**30) * 2**out_exp)``.

    >>> log_softmax_codes(np.array([0, 0]), 0, 4, 8, 4, 8).tolist()  # -ln 2 = -0.69 * 16
    [-11, -11]
    """
    hi, lo = tables if tables is not None else exp_tables(in_exp, in_bits)
    dt = q.dtype
    d, _, s = _exp_codes(q, axis, hi, lo, None)
    c = max(in_exp - out_exp, LN_FRAC - out_exp, 0)
    a, b = out_exp - in_exp + c, out_exp - LN_FRAC + c
    big = d * _const(2**a, dt) - ln_fixed(s) * _const(2**b, dt)
    y = np.floor_divide(big + _const(2**c // 2, dt), _const(2**c, dt))
    return _saturate(y, out_bits, signed)
