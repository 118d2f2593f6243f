"""L2 normalisation along one dim (torch's ``F.normalize(x, p=2, dim, eps)``): torch's float
kernel, and the integer algorithm that defines it at the quantized levels (pure NumPy).

Float (``nf``): ``y = x / max(||x||_2, eps)`` along ``axis``, float64 inside, rounded once to
``x``'s dtype.

Integer (``nq`` and ``nh``), the LayerNorm algorithm of :mod:`nanoir.runtime.numerics.norm`
without the mean and with ``eps`` as a floor, not a term. Input codes ``q`` at exponent ``k``
(``b`` signed bits), ``n`` codes per row along the axis, output codes at ``ko`` with ``bits``
and a rounding mode:

1. ``S2 = sum q**2`` (i64; ``<= n 4**(b-1)``, refused from ``2**60``).
2. Per row a scale shift ``h <= H``: ``W = max(S2 4**h, E_H >> 2 (H - h))`` where
   ``E_H = floor(eps**2 4**(k + H))`` is ``eps`` in codes, squared, at the largest shift
   ``H <= 30`` (static), and ``h`` the largest that keeps ``W`` below ``2**61``;
   ``sigma = isqrt(W)`` (exact floor square root) ``~ 2**h max(||q||, eps 2**k)``, at least
   ``2**29`` on every row that is not all zero (an all-zero row gives 0, as torch's does).
3. One rounding division per element, ``acc = round_half_up(q 2**(h + ko + P) / sigma)``:
   ``|q| 2**h <= sigma + 1 < 2**31``, so with ``ko + P <= 31`` every intermediate is below
   ``2**62``; ``P`` guard bits (at most 24).
4. The output requant by ``P`` with the output's rounding mode and saturation (``trunc`` and
   ``floor`` move ``acc`` first by the nudge, away from zero / up, as LayerNorm's does).

Error bound: with ``t`` torch's op in float64 on the dequantized codes, in output steps
(``|t| <= 2**ko``), ``|acc 2**-P - t| <= e = 2**(ko + 1) / (2**29 - 2) + 2**-(P+1)``
(``sigma`` is within 2 of ``2**h max(||q||, eps 2**k)``). The half modes are then within
``1/2 + e`` steps of ``t``, ``trunc`` and ``floor`` within one step; :func:`l2_plan` refuses
``e > 1/2`` (an output exponent past 26). nq converts its float64 values to codes (exact),
runs :func:`l2_normalize_codes` in int64 and scales back; nh runs it on its codes: nq == nh by
construction.

>>> plan = l2_plan(4, 8, 0, 1e-12, 7, 8, "half_even")
>>> l2_normalize_codes(np.array([[3, 0, -4, 0]]), 1, plan).tolist()  # torch: .6 0 -.8 0
[[77, 0, -102, 0]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from nanoir.runtime.numerics.norm import isqrt
from nanoir.runtime.numerics.quant import RoundingMode, div_round, requant

__all__ = ["L2BoundError", "L2Plan", "l2_normalize_codes", "l2_plan", "normalize"]

MAX_SHIFT = 30
MAX_GUARD = 24


class L2BoundError(ValueError):
    """The integer algorithm would leave i64, or err by more than half a step, here."""


def normalize(x: np.ndarray, axis: int, eps: float) -> np.ndarray:
    """``torch.nn.functional.normalize(x, p=2, dim=axis, eps=eps)``, float64 inside."""
    x64 = np.asarray(x, np.float64)
    norm = np.sqrt((x64 * x64).sum(axis=axis, keepdims=True))
    return (x64 / np.maximum(norm, eps)).astype(np.asarray(x).dtype, copy=False)


@dataclass(frozen=True)
class L2Plan:
    """The static integers of one L2 normalisation (see the module docstring)."""

    n: int
    max_shift: int
    """``H``: the largest per-row scale shift."""
    eps_term: int
    """``E_H = floor(eps**2 4**(k + H))``."""
    guard: int
    """``P``: fraction bits of the accumulator below the output step."""
    out_exp: int
    out_bits: int
    rounding: RoundingMode
    nudge: int
    """``ceil(e 2**P) + 1``: how far trunc and floor move the accumulator first."""
    out_signed: bool = True


def l2_plan(
    n: int,
    in_bits: int,
    in_exp: int,
    eps: float,
    out_exp: int,
    out_bits: int,
    rounding: RoundingMode | str,
    out_signed: bool = True,
) -> L2Plan:
    """The plan for rows of ``n`` codes of ``in_bits`` signed bits at ``in_exp``, into
    ``out_bits`` at ``out_exp``; :class:`L2BoundError` where none is exact and within half an
    output step."""
    if n < 1:
        raise L2BoundError(f"normalises over {n} elements")
    if out_bits < 2:
        raise L2BoundError(f"has a {out_bits}-bit output (2 to 32 bits take part)")
    if n * 4 ** (in_bits - 1) >= 2**60:
        raise L2BoundError(
            f"sums the squares of {n} {in_bits}-bit codes: past 2**60 (i64 with room)"
        )
    if out_exp > 26:
        raise L2BoundError(
            f"has output exponent {out_exp}: values of at most 1 on a grid that fine would "
            "err by more than half a step (26 at most)"
        )
    eps_codes = Fraction(eps) ** 2 * Fraction(4) ** in_exp
    h = MAX_SHIFT
    while h > 0 and eps_codes * 4**h >= 2**60:
        h -= 1
    if eps_codes * 4**h >= 2**60:
        raise L2BoundError(f"has eps {eps} at input exponent {in_exp}: eps term past i64")
    eps_term = math.floor(eps_codes * 4**h)
    guard = max(min(MAX_GUARD, 31 - out_exp), 0)
    if out_exp + guard < 0:
        guard = -out_exp  # (a coarse output: every code is 0 or saturates)
    err = Fraction(2) ** (out_exp + 1) / (2**29 - 2) + Fraction(1, 2 ** (guard + 1))
    nudge = math.ceil(err * 2**guard) + 1
    return L2Plan(
        n, h, eps_term, guard, out_exp, out_bits, RoundingMode(rounding), nudge, out_signed
    )


def _bit_length(v: np.ndarray) -> np.ndarray:
    """``v.bit_length()`` of non-negative int64 values, or one more where float64 rounds up."""
    return np.frexp(v.astype(np.float64))[1].astype(np.int64)


def l2_normalize_codes(q: np.ndarray, axis: int, plan: L2Plan) -> np.ndarray:
    """The output codes for input codes ``q`` (integers) normalised along ``axis``: int64
    operations only."""
    q = np.asarray(q).astype(np.int64)
    big = plan.max_shift
    s2 = (q * q).sum(axis=axis, keepdims=True)
    floor_eps = plan.eps_term >> 2 * big
    h = np.clip((61 - _bit_length(np.maximum(s2, floor_eps + 1) + 1)) // 2, 0, big)
    w = np.maximum(s2 << 2 * h, plan.eps_term >> 2 * (big - h))
    sigma = np.maximum(isqrt(w), 1)
    up = h + plan.out_exp + plan.guard
    acc = div_round(q << up, np.broadcast_to(sigma, q.shape), RoundingMode.HALF_UP)
    if plan.rounding is RoundingMode.FLOOR:
        acc = acc + plan.nudge
    elif plan.rounding is RoundingMode.TRUNC:
        acc = acc + np.sign(acc) * plan.nudge
    return requant(acc, plan.guard, plan.out_bits, plan.rounding, signed=plan.out_signed)
