"""LayerNorm and GroupNorm: torch's float kernels, and the integer algorithm that defines them
at the quantized levels (pure NumPy, no xDSL).

Float (``nf``): ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance,
over the last ``d`` dims (``layer_norm``) or over each group of ``C / G`` channels and every
spatial position (``group_norm``), computed in float64 and rounded once to ``x``'s dtype.

Integer (``nq`` and ``nh``; I-BERT's integer LayerNorm, Kim et al. 2021, section 3.4, made
exact and bounded). Input codes ``q`` at exponent ``k`` (``x = q 2**-k``), ``n`` codes per
normalised group, weight codes ``g`` at ``kg`` and bias codes ``c`` at ``kc`` (each a
fake-quantized constant), output codes at ``ko`` with ``bits`` and a rounding mode:

1. ``S1 = sum q``, ``S2 = sum q**2`` (i64) and, per element, ``D = n q - S1``; the variance
   times ``n**2`` is the integer ``V = n S2 - S1**2 <= n**2 4**(b-1)``.
2. Per row a scale shift ``h <= H``: ``W = V 4**h + floor(E_H / 4**(H-h))``, where
   ``E_H = round(n**2 eps 4**(k+H))`` is the eps term at the largest shift ``H <= 30``
   (static), and ``h`` the largest that keeps ``W`` below ``2**62`` (from the bit length of
   ``V + eps``, as CMSIS-NN normalises by a count of leading zeros); ``sigma = isqrt(W)``
   (exact floor square root) ``~ 2**h n sqrt(var + eps)`` then has about 30 bits for every
   row that is not constant, however small its variance.
3. One rounding division per element: ``z = round(D 2**(h+F) / sigma)``, the normalised
   value with ``F = ko + P - kg`` fraction bits (half up).
4. The affine, exact: ``acc = z g + c 2**(ko + P - kc)`` at exponent ``ko + P``; then the
   requant by ``P`` with the output's rounding mode and saturation.

Error bound: ``|D| / sqrt(V) <= sqrt(n - 1)`` and ``sigma >= 2**28`` for a row that is not
constant (a constant row has ``D = 0``: the output is the bias, exactly), so
``|acc 2**-P - t| <= e = max|g 2**(ko-kg)| (isqrt(n-1) + 1) 2**-27 + max|g| 2**(-P-1)``
output steps, where ``t`` is torch's op in float64 on the dequantized codes, in output steps.
For ``trunc`` and ``floor`` the accumulator is first moved by ``ceil(e 2**P) + 1`` away from
zero (``trunc``) or up (``floor``), so that the rounding's own error (< 1 step) and ``e`` do not
add: the output is then within ``max(1, 2e)`` steps of ``t``; the half modes are within
``1/2 + e``. :func:`norm_plan` keeps ``e <= 1/2``, so every output is within one step of torch
(before saturation). ``P <= 24`` is the largest that keeps every product below ``2**62``;
the sums need ``n**2 4**(b-1) < 2**60`` (:class:`NormBoundError` otherwise: at 8 bits ``n``
up to about ``2**23``, at 16 bits below ``2**15``).

The plan (``H``, ``E_H``, ``P``, the nudge) is computed once per op from static facts
(:func:`norm_plan`); :func:`normalize_codes` runs it on codes. nq converts its float64 values
to their codes (exact), runs it in int64 and scales back; nh runs it on its codes: the same
function, so nq == nh by construction. Measured worst error (the property tests, 4/8/16-bit
in, 8/16 out; 4,000 random cases): 0.50003 steps for the half modes, 0.999996 for trunc and
floor.

>>> q = np.array([[-3, 0, 3, 6]])
>>> plan = norm_plan(4, 8, 0, 1e-5, [0], [1], 4, 8, "half_even", 0, [0])
>>> normalize_codes(q, np.array([1]), np.array([0]), plan).tolist()  # torch: -1.34 -0.45 0.45 1.34
[[-21, -7, 7, 21]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
from nanoir.runtime.numerics.quant import RoundingMode, div_round, requant

__all__ = [
    "NormBoundError",
    "NormPlan",
    "group_norm",
    "group_norm_codes",
    "group_rows",
    "isqrt",
    "layer_norm",
    "layer_norm_codes",
    "norm_plan",
    "normalize_codes",
    "plan_for",
]

_LIMIT = 2**62
"""Every intermediate stays below this (i64 with a bit to spare for the rounding's doubling)."""
_MAX_GUARD = 24


class NormBoundError(ValueError):
    """The integer algorithm would leave i64 for this op's shape and exponents."""


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, dims: int, eps: float):
    """``torch.nn.functional.layer_norm`` over the last ``dims`` dims, float64 inside."""
    x64 = np.asarray(x, np.float64)
    axes = tuple(range(x64.ndim - dims, x64.ndim))
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps) * np.asarray(weight, np.float64)
    return (y + np.asarray(bias, np.float64)).astype(np.asarray(x).dtype, copy=False)


def group_rows(shape: tuple[int, ...], groups: int) -> tuple[int, int]:
    """``(N * groups, elements per group)`` of a ``[N, C, *spatial]`` group norm."""
    per = int(np.prod(shape[1:], dtype=np.int64)) // groups
    return shape[0] * groups, per


def group_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, groups: int, eps: float):
    """``torch.nn.functional.group_norm`` on ``[N, C, *spatial]``, float64 inside."""
    x64 = np.asarray(x, np.float64)
    rows = x64.reshape(group_rows(x64.shape, groups))
    mean = rows.mean(axis=1, keepdims=True)
    var = ((rows - mean) ** 2).mean(axis=1, keepdims=True)
    y = ((rows - mean) / np.sqrt(var + eps)).reshape(x64.shape)
    channel = (-1,) + (1,) * (x64.ndim - 2)
    y = y * np.asarray(weight, np.float64).reshape(channel)
    y = y + np.asarray(bias, np.float64).reshape(channel)
    return y.astype(np.asarray(x).dtype, copy=False)


def isqrt(v: np.ndarray) -> np.ndarray:
    """Exact ``floor(sqrt(v))`` of int64 values in ``[0, 2**62]``, elementwise.

    >>> isqrt(np.array([0, 1, 3, 4, 2**62, 2**62 - 1])).tolist()
    [0, 1, 1, 2, 2147483648, 2147483647]
    """
    v = np.asarray(v, np.int64)
    s = np.floor(np.sqrt(v.astype(np.float64))).astype(np.int64)  # within one of the root
    s = np.where(s * s > v, s - 1, s)
    return np.where((s + 1) * (s + 1) <= v, s + 1, s)


@dataclass(frozen=True)
class NormPlan:
    """The static integers of one normalisation op (see the module docstring)."""

    n: int
    """Codes per normalised group."""
    max_shift: int
    """``H``: the largest per-row scale shift ``h`` (``V`` is scaled by ``4**h``)."""
    eps_term: int
    """``E_H = round(n**2 eps 4**(k + H))``: the eps term at the largest scale."""
    guard: int
    """``P``: fraction bits of the accumulator below the output step."""
    out_exp: int
    out_bits: int
    rounding: RoundingMode
    nudge: int
    """``ceil(e 2**P) + 1``: how far trunc and floor move the accumulator first."""
    out_signed: bool = True


def _bit_length(v: np.ndarray) -> np.ndarray:
    """``v.bit_length()`` of positive int64 values, or one more where float64 rounds ``v`` up to
    a power of two (the shift it sets is then one smaller, still within the bounds)."""
    return np.frexp(v.astype(np.float64))[1].astype(np.int64)


def norm_plan(
    n: int,
    in_bits: int,
    in_exp: int,
    eps: float,
    weight_exps: list[int] | np.ndarray,
    weight_max: list[int] | np.ndarray,
    out_exp: int,
    out_bits: int,
    rounding: RoundingMode | str,
    bias_max_scaled: int,
    bias_exps: list[int] | np.ndarray,
    max_guard: int = _MAX_GUARD,
) -> NormPlan:
    """The plan for ``n`` codes of ``in_bits`` at ``in_exp``; the weight codes' exponents and
    their largest magnitude per exponent (``weight_max``), the bias exponents and
    ``bias_max_scaled`` = ``max |c| 2**(ko - kc)`` rounded up; :class:`NormBoundError` when no
    plan keeps every intermediate below ``2**62`` with the error within half an output step.
    ``max_guard`` caps ``P`` (tests use a coarse one, where the trunc/floor nudge matters)."""
    if n < 1:
        raise NormBoundError(f"normalises over {n} elements")
    if out_bits < 2:
        raise NormBoundError(f"has a {out_bits}-bit output (2 to 32 bits take part)")
    vmax = n * n * 4 ** (in_bits - 1)  # V = n S2 - S1**2 <= n S2
    if vmax >= 2**60:
        raise NormBoundError(
            f"sums the squares of {n} {in_bits}-bit codes: n**2 4**(b-1) = "
            f"2**{(vmax - 1).bit_length()} leaves i64 (at most 2**60)"
        )
    eps_0 = Fraction(eps) * n * n * Fraction(4) ** in_exp
    h = 30
    while h > 0 and eps_0 * 4**h >= 2**59:
        h -= 1
    if eps_0 * 4**h >= 2**59:
        raise NormBoundError(f"has eps {eps} at input exponent {in_exp}: eps term past i64")
    eps_term = round(eps_0 * 4**h)
    wexps = [int(k) for k in np.asarray(weight_exps).reshape(-1)]
    wmax = [int(m) for m in np.asarray(weight_max).reshape(-1)]
    if n == 1:  # D = 0: the output is the bias, whatever the weight and its exponent
        wexps, wmax = [], []
    bexps = [int(k) for k in np.asarray(bias_exps).reshape(-1)]
    min_guard = max([0] + [kc - out_exp for kc in bexps])
    root = math.isqrt(max(n - 1, 1)) + 1  # > sqrt(n - 1) >= |D| / sqrt(V)
    guard = max_guard
    while guard >= min_guard:
        frac = [out_exp + guard - kg for kg in wexps]
        fits = all(
            2 * root * 2 ** (31 + max(f, 0)) < _LIMIT  # 2 |D 2**(h+F)| (module docstring)
            and (2 * root * 2 ** max(f, 0) + 1) * m + bias_max_scaled * 2**guard < _LIMIT
            for f, m in zip(frac, wmax)
        )
        if fits:
            break
        guard -= 1
    else:
        raise NormBoundError(
            f"has no accumulator within i64 for {n} {in_bits}-bit codes, weight exponents "
            f"{sorted(set(wexps))} and output exponent {out_exp}"
        )
    err = Fraction(0)
    for kg, m in zip(wexps, wmax):
        err = max(err, m * Fraction(2) ** (out_exp - kg) * root / Fraction(2) ** 27)
    err += max(wmax + [0]) * Fraction(1, 2 ** (guard + 1))
    if err > Fraction(1, 2):
        raise NormBoundError(
            f"would err by up to {float(err):.3g} output steps (more than 1/2) with {n} "
            f"{in_bits}-bit codes, weight exponents {sorted(set(wexps))} and output "
            f"exponent {out_exp}"
        )
    nudge = math.ceil(err * 2**guard) + 1
    return NormPlan(n, h, eps_term, guard, out_exp, out_bits, RoundingMode(rounding), nudge)


def normalize_codes(
    rows: np.ndarray,
    weight: np.ndarray,
    weight_exp: np.ndarray,
    plan: NormPlan,
    bias: np.ndarray | None = None,
    bias_exp: np.ndarray | None = None,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """The output codes for input codes ``rows`` (``[groups, n]``, integers), reshaped to
    ``shape`` (default: as given) before the affine; ``weight``/``bias`` codes and their
    exponents broadcast against ``shape``. Integer operations only (int64)."""
    q = np.asarray(rows).astype(np.int64)
    n, big = plan.n, plan.max_shift
    s1 = q.sum(axis=1, keepdims=True)
    s2 = (q * q).sum(axis=1, keepdims=True)
    v = n * s2 - s1 * s1
    # Per row, the largest h <= H with (V + eps) 4**h below 2**61: sigma has ~30 bits.
    h = np.clip((61 - _bit_length(v + (plan.eps_term >> 2 * big) + 1)) // 2, 0, big)
    w = (v << 2 * h) + (plan.eps_term >> 2 * (big - h))
    sigma = np.maximum(isqrt(w), 1)
    d = n * q - s1
    shape = q.shape if shape is None else shape
    g = np.asarray(weight).astype(np.int64)
    kg = np.asarray(weight_exp).astype(np.int64)
    frac = plan.out_exp + plan.guard - kg  # per element of the affine's broadcast
    hh = np.broadcast_to(h, d.shape).reshape(shape)
    up = np.clip(hh + frac, 0, 62)  # (past 31 only where every D is 0: n == 1)
    num = d.reshape(shape) << up
    # A divisor shift past 31 leaves |z| < 1/2 either way (module docstring): capped, z = 0.
    den = np.broadcast_to(sigma, d.shape).reshape(shape) << np.clip(up - hh - frac, 0, 31)
    z = div_round(num, den, RoundingMode.HALF_UP)
    acc = z * g
    if bias is not None:
        kc = np.asarray(bias_exp).astype(np.int64)
        # (a shift below 0 only where the plan knew every bias code is 0)
        shift = np.maximum(plan.out_exp + plan.guard - kc, 0)
        acc = acc + (np.asarray(bias).astype(np.int64) << shift)
    if plan.rounding is RoundingMode.FLOOR:
        acc = acc + plan.nudge
    elif plan.rounding is RoundingMode.TRUNC:
        acc = acc + np.sign(acc) * plan.nudge
    return requant(acc, plan.guard, plan.out_bits, plan.rounding, signed=plan.out_signed)


def plan_for(
    n: int,
    in_bits: int,
    in_exp: int,
    eps: float,
    weight: np.ndarray,
    weight_exp: int,
    bias: np.ndarray,
    bias_exp: int,
    out_exp: int,
    out_bits: int,
    rounding: RoundingMode | str,
    out_signed: bool = True,
    max_guard: int = _MAX_GUARD,
) -> NormPlan:
    """:func:`norm_plan` for per-tensor weight and bias codes (``in_bits`` counts the sign)."""
    wmax = int(np.abs(np.asarray(weight, np.int64)).max(initial=0))
    cmax = int(np.abs(np.asarray(bias, np.int64)).max(initial=0))
    scaled = math.ceil(cmax * Fraction(2) ** (out_exp - bias_exp))
    plan = norm_plan(
        n,
        in_bits,
        in_exp,
        eps,
        [weight_exp],
        [wmax],
        out_exp,
        out_bits,
        rounding,
        scaled,
        [bias_exp] if cmax else [],
        max_guard,
    )
    return replace(plan, out_signed=out_signed)


def layer_norm_codes(
    q: np.ndarray, dims: int, g: np.ndarray, kg: int, c: np.ndarray, kc: int, plan: NormPlan
) -> np.ndarray:
    """LayerNorm over the last ``dims`` dims of the codes ``q``: :func:`normalize_codes`."""
    q = np.asarray(q)
    rows = q.reshape(-1, plan.n) if q.size else q.reshape(0, plan.n)
    return normalize_codes(rows, g, np.array(kg), plan, c, np.array(kc), q.shape)


def group_norm_codes(
    q: np.ndarray, groups: int, g: np.ndarray, kg: int, c: np.ndarray, kc: int, plan: NormPlan
) -> np.ndarray:
    """GroupNorm of ``[N, C, *spatial]`` codes, per-channel ``g`` and ``c``."""
    q = np.asarray(q)
    channel = (-1,) + (1,) * (q.ndim - 2)
    rows = q.reshape(q.shape[0] * groups, plan.n)
    g, c = np.asarray(g).reshape(channel), np.asarray(c).reshape(channel)
    return normalize_codes(rows, g, np.array(kg), plan, c, np.array(kc), q.shape)
