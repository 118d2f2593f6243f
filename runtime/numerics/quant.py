"""Shared power-of-two quantization math: the one definition used by passes, runtime and tests.

Everything here is a pure NumPy function; nothing depends on the IR. The integer functions
(`shift_round`, `saturate`, `requant`) use integer operations only, and the float functions
(`fake_quant`, `dequantize`) are exact in float64, so that the nq level (float) and the nh level
(integers) agree bit for bit (DESIGN.md, "The exactness contract").

Conventions
-----------
- A *code* is the integer stored by the hardware; an *exponent* `k` (`exp`) says where its
  binary point is: **real value = code * 2**-k**. `k` may be negative.
- `b` (`bits`) is the code width, 1 <= b <= 32. For b > 1 the codes are two's complement,
  `qmin(b) = -2**(b-1)` .. `qmax(b) = 2**(b-1) - 1`, and the step is `2**-k`.
- **1-bit** is different (NanoEngine's rule): the code is ±1 (there is no 0) and `2**k` is the
  *magnitude*, not the step: value = code * 2**k. In the fixed-point convention above that is a
  ±1 code at exponent `-k`. `qmin(1), qmax(1) = -1, +1` are the bounds of that code set.
- `exp` broadcasts against the data with NumPy rules: a Python int or shape `[1]` is per
  tensor, `[C, 1, 1, 1]` is per output channel of an OIHW weight, a `[C]` vector is per element
  of a `[C]` bias (NumPy aligns trailing axes, so a `[C]` exponent against NCHW data would apply
  along W), or `x`'s full shape. Exponents must have an integer dtype.
- **Unsigned** codes (`signed=False`, for tensors known non-negative, b > 1 only) are
  `0 .. 2**b - 1` at the same step `2**-k`: one more bit of resolution over `[0, max]`. The
  functions below take `signed` as a keyword; the default `True` is the signed code above.
  There is no unsigned 1-bit code (the ±1 code has no 0 and the sign is all it says).
- Rounding modes (`RoundingMode`): `trunc` toward zero (NanoEngine; the default everywhere),
  `floor` (arithmetic shift right), `half_up` (add `2**(s-1)` then floor-shift, as TVM VTA: ties
  go toward +inf), `half_even` (ties to even).
- Zero results are always `+0.0`, never `-0.0`, so that the float level matches the
  integer level bit for bit (an integer 0 converts to +0.0).

Special values and ranges
-------------------------
- NaN in `fake_quant`/`quantize_to_int` input raises `ValueError`: there is no integer code for
  it, so no nh program could reproduce it. `±inf` saturates to `qmax`/`qmin` (1-bit: sign rule).
- `fake_quant`, `quantize_to_int` and `dequantize` accept `|k| <= EXACT_EXP_LIMIT` (960) and
  raise `ValueError` beyond: up to there every `code * 2**-k` with a 32-bit code is a normal or
  exactly representable subnormal float64, so no result is ever rounded.
- Calibration (`exp_from_absmax`, `exp_mse_optimal`) chooses exponents in `CALIB_EXP_RANGE`
  (`-60 .. 60` by default): NanoEngine stores exponents as `int8_t`, and this range keeps the
  sum of two exponents (a product's accumulator exponent) inside int8 too.
- Integer functions compute in int64. `shift_round` raises `OverflowError` for a left shift
  whose result does not fit int64; `requant` never overflows, because such a value saturates.

Abbreviations: acc = accumulator (an integer at some exponent), absmax = max(|x|),
mse = mean squared error.

See QONNX's `IntQuant` (`qonnx/custom_op/general/intquant.py`) for the same idea with
arbitrary (non power-of-two) scales.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

# xDSL's StrEnum, so the nq/nh dialects can wrap this very enum in an EnumAttribute.
from xdsl.utils.str_enum import StrEnum as _StrEnum

__all__ = [
    "CALIB_EXP_RANGE",
    "EXACT_EXP_LIMIT",
    "ONE_BIT_MINUS_ONE_FIELD",
    "RoundingMode",
    "channel_absmax",
    "code_dtype",
    "dequantize",
    "div_round",
    "exp_from_absmax",
    "exp_mse_optimal",
    "fake_quant",
    "pack_bits",
    "power_of_two",
    "qmax",
    "qmin",
    "quantize_to_int",
    "requant",
    "requant_codes",
    "round_to_int",
    "saturate",
    "shift_round",
    "unpack_bits",
]

EXACT_EXP_LIMIT = 960
"""`|k|` above this is refused by the float functions (see the module docstring)."""

CALIB_EXP_RANGE: tuple[int, int] = (-60, 60)
"""Default `(lowest, highest)` exponent a calibration rule may choose."""

ONE_BIT_MINUS_ONE_FIELD = 1
"""The bit that stores the 1-bit code -1 in packed data (the other bit, 0, stores +1).

1 is the two's-complement sign bit, matching how wider fields are packed. This is the only
place the mapping is defined; `pack_bits` and `unpack_bits` both read it.
"""

_MAX_BITS = 32
# Largest integer magnitude a float64 holds exactly; integer input beyond it would be rounded.
_FLOAT64_EXACT_INT = 2**53


class RoundingMode(_StrEnum):
    """How a value between two codes is rounded. The values are the strings the IR stores.

    >>> RoundingMode("half_even") is RoundingMode.HALF_EVEN
    True
    >>> str(RoundingMode.TRUNC)
    'trunc'
    """

    TRUNC = "trunc"
    """Toward zero: NanoEngine's rule, the default."""
    FLOOR = "floor"
    """Toward -inf: a plain arithmetic shift right."""
    HALF_UP = "half_up"
    """To nearest, ties toward +inf: add 2**(s-1), then floor-shift (TVM VTA)."""
    HALF_EVEN = "half_even"
    """To nearest, ties to the even neighbour."""


# --------------------------------------------------------------------------------------------
# Argument checking shared by the functions below.


def _check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
        raise TypeError(f"bits must be an int, got {bits!r}")
    if not 1 <= bits <= _MAX_BITS:
        raise ValueError(f"bits must be in 1..{_MAX_BITS}, got {bits}")
    return int(bits)


def _check_signed(bits: int, signed: bool) -> None:
    if not signed and bits == 1:
        raise ValueError("1-bit codes are always signed (±1); an unsigned code needs bits > 1")


def _as_int_array(value: ArrayLike, what: str) -> NDArray[np.int64]:
    """`value` as int64, refusing floats and bools rather than silently converting them."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must have an integer dtype, got {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise OverflowError(f"{what} has a value above the int64 range: {int(arr.max())}")
    return arr.astype(np.int64)


def _as_exp(exp: ArrayLike) -> NDArray[np.int64]:
    k = _as_int_array(exp, "exp")
    if k.size and int(np.abs(k).max()) > EXACT_EXP_LIMIT:
        raise ValueError(f"exp must satisfy |exp| <= {EXACT_EXP_LIMIT}, got {int(np.abs(k).max())}")
    return k


def power_of_two(k: ArrayLike) -> NDArray[np.float64]:
    """``2.0**k`` for exponents within :data:`EXACT_EXP_LIMIT` (normal float64s, exact): a
    product by it rounds as ``np.ldexp`` would, once, and is a plain multiply (NumPy's ldexp
    runs 10-17x slower per element)."""
    return np.ldexp(1.0, np.asarray(k, dtype=np.int32))


def _checked_real(x: ArrayLike, what: str) -> NDArray[Any]:
    """`x` as an array whose every value float64 holds exactly (every float16/32/64, integers
    up to 2**53), not converted; NaN raises."""
    arr = np.asarray(x)
    if arr.dtype.kind in "iu":
        if arr.size and max(-int(arr.min()), int(arr.max())) > _FLOAT64_EXACT_INT:
            raise ValueError(f"{what}: integer input beyond 2**53 is not exact in float64")
    elif arr.dtype.kind != "f":
        raise TypeError(f"{what} must be a real float or integer array, got {arr.dtype}")
    elif arr.size and np.isnan(np.min(arr)):  # min propagates NaN, with no temporary
        raise ValueError(f"{what} contains NaN, which has no integer code")
    return arr


def _as_float64(x: ArrayLike, what: str) -> NDArray[np.float64]:
    """`x` as float64 (exact for every float16/32/64 and for integers up to 2**53)."""
    return _checked_real(x, what).astype(np.float64)


# --------------------------------------------------------------------------------------------
# Code ranges.


def qmin(bits: int, *, signed: bool = True) -> int:
    """Smallest code of a `bits`-wide signed code: -2**(bits-1); -1 for the 1-bit ±1 code; 0 unsigned.

    >>> qmin(8), qmin(4), qmin(2), qmin(1), qmin(8, signed=False)
    (-128, -8, -2, -1, 0)
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    if not signed:
        return 0
    return -1 if b == 1 else -(2 ** (b - 1))


def qmax(bits: int, *, signed: bool = True) -> int:
    """Largest code: 2**(bits-1) - 1; +1 for the 1-bit ±1 code; 2**bits - 1 unsigned.

    >>> qmax(8), qmax(4), qmax(2), qmax(1), qmax(8, signed=False)
    (127, 7, 1, 1, 255)
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    if not signed:
        return 2**b - 1
    return 1 if b == 1 else 2 ** (b - 1) - 1


def code_dtype(bits: int, *, signed: bool = True) -> np.dtype[Any]:
    """The narrowest NumPy integer dtype holding every `bits`-wide code.

    Unsigned codes get a *signed* dtype one size up (uint8 arithmetic wraps around, and every
    nh kernel mixes codes with signed values), so `ui8` codes are int16 and `ui16` int32.

    >>> [str(code_dtype(b)) for b in (1, 8, 9, 16, 32)]
    ['int8', 'int8', 'int16', 'int16', 'int32']
    >>> [str(code_dtype(b, signed=False)) for b in (2, 8, 16)]
    ['int16', 'int16', 'int32']
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    if not signed:
        return (
            np.dtype(np.int16) if b <= 8 else np.dtype(np.int32) if b <= 16 else np.dtype(np.int64)
        )
    if b <= 8:
        return np.dtype(np.int8)
    if b <= 16:
        return np.dtype(np.int16)
    return np.dtype(np.int32)


# --------------------------------------------------------------------------------------------
# Float side: the nq semantics.


def round_to_int(
    x: ArrayLike, mode: RoundingMode | str = RoundingMode.TRUNC
) -> NDArray[np.float64]:
    """Round a float64 array to integer-valued floats by `mode`, exactly (no intermediate rounding).

    ±inf and NaN pass through unchanged. A result of zero may be `-0.0` (from a negative input).

    >>> x = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.7]
    >>> round_to_int(x, "trunc").tolist()
    [-2.0, -1.0, -0.0, 0.0, 1.0, 2.0, -1.0]
    >>> round_to_int(x, "floor").tolist()
    [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, -2.0]
    >>> round_to_int(x, "half_up").tolist()
    [-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, -2.0]
    >>> round_to_int(x, "half_even").tolist()
    [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, -2.0]
    """
    v = np.asarray(x, dtype=np.float64)
    m = RoundingMode(mode)
    if m is RoundingMode.TRUNC:
        return np.asarray(np.trunc(v))
    if m is RoundingMode.FLOOR:
        return np.asarray(np.floor(v))
    if m is RoundingMode.HALF_EVEN:
        # IEEE round-to-nearest-even is exactly this mode.
        return np.asarray(np.rint(v))
    # half_up: floor(v + 0.5) would round in the addition (0.49999999999999994 + 0.5 == 1.0, and
    # above 2**52 the sum may round to even). v - floor(v) is exact (Sterbenz) except for
    # -0.5 < v < 0, where it may round up towards 1 but stays >= 0.5, the only comparison used.
    with np.errstate(invalid="ignore"):  # inf - inf for infinite v; the where() keeps v then
        f = np.floor(v)
        up = (v - f) >= 0.5
    return np.asarray(np.where(np.isfinite(v), f + up, v))


def _codes_as_float(
    x: ArrayLike, bits: int, exp: ArrayLike, mode: RoundingMode | str, signed: bool = True
) -> tuple[NDArray[np.float64], NDArray[np.int32], int]:
    """The integer codes of `x`, as integer-valued float64, plus the checked `k` and `b`.

    The codes are computed in place in one float64 buffer (the product's), and
    scaled by a product with the exact power of two ``2**k`` (|k| <= 960: a normal float64),
    which rounds as ``ldexp`` does (once, to inf or to a subnormal alike) at a plain multiply's
    speed (NumPy's ldexp, even with int32 exponents, is 10-17x slower per element):
    calibration's checks, bias correction and quantize's check call this on every activation
    of every batch, and it was most of quantize's time."""
    b = _check_bits(bits)
    _check_signed(b, signed)
    k = _as_exp(exp).astype(np.int32)
    m = RoundingMode(mode)
    v = _checked_real(x, "fake_quant input")  # (converted to float64 by the product below)
    shape = np.broadcast_shapes(v.shape, k.shape)
    if b == 1:
        # -0.0 >= 0 is True: zero (of either sign) maps to +1, as NanoEngine's x >= 0 test does.
        return np.broadcast_to(np.where(v >= 0, 1.0, -1.0), shape).copy(), k, b
    lo, hi = float(qmin(b, signed=signed)), float(qmax(b, signed=signed))
    negative = v < 0 if m is RoundingMode.FLOOR else None
    # times 2**k into a fresh float64 buffer, rounded once; overflow to inf is harmless (it
    # saturates below) and underflow is only a problem for floor (patched below): no warning.
    with np.errstate(over="ignore", under="ignore"):
        codes = np.multiply(v, power_of_two(k), out=np.empty(shape), dtype=np.float64)
    if m is RoundingMode.HALF_UP:
        codes = round_to_int(codes, m)
    else:  # trunc, floor and half_even are one ufunc each (±inf stays ±inf, saturates below)
        _ROUNDING_UFUNC[m](codes, out=codes)
    if negative is not None:
        # A tiny negative x * 2**k can underflow to -0.0, whose floor is 0; the true floor is -1.
        codes[negative & (codes == 0)] = -1.0
    np.clip(codes, lo, hi, out=codes)
    codes += 0.0  # turns -0.0 into +0.0 (what an integer 0 converts to)
    return codes, k, b


_ROUNDING_UFUNC = {
    RoundingMode.TRUNC: np.trunc,
    RoundingMode.FLOOR: np.floor,
    RoundingMode.HALF_EVEN: np.rint,  # IEEE round-to-nearest-even is exactly this mode
}


def fake_quant(
    x: ArrayLike,
    bits: int,
    exp: ArrayLike,
    mode: RoundingMode | str = RoundingMode.TRUNC,
    *,
    signed: bool = True,
) -> NDArray[np.float64]:
    """`nq.fake_quant`: round `x` onto the power-of-two grid and saturate, in float64.

    With `k = exp` broadcast against `x`:
    b > 1: `clamp(round(x * 2**k), qmin, qmax) / 2**k`; b == 1: `(x >= 0 ? +1 : -1) * 2**k`.
    `signed=False` clamps to `0 .. 2**b - 1` instead (b > 1).
    float32 input is computed in float64 (exactly) and the result is float64, shaped as the
    broadcast of `x` and `exp`. NaN raises ValueError, ±inf saturates.

    >>> fake_quant([-1.7, 0.3, 1.0, -1.0], 4, 2).tolist()       # step 1/4, codes -8..7
    [-1.5, 0.25, 1.0, -1.0]
    >>> fake_quant([300.0, -300.0], 8, 0).tolist()               # saturation at both ends
    [127.0, -128.0]
    >>> fake_quant([0.0, -3.0], 1, -1).tolist()                  # 1-bit: magnitude 2**-1
    [0.5, -0.5]
    >>> fake_quant([[5.0], [5.0]], 8, np.array([[0], [-1]])).tolist()  # per channel, k = -1: step 2
    [[5.0], [4.0]]
    >>> fake_quant([-1.0, 0.3, 70.0], 4, 2, signed=False).tolist()  # codes 0..15
    [0.0, 0.25, 3.75]
    """
    codes, k, b = _codes_as_float(x, bits, exp, mode, signed)
    return np.multiply(codes, power_of_two(k if b == 1 else -k), out=codes)  # exact: codes


def quantize_to_int(
    x: ArrayLike,
    bits: int,
    exp: ArrayLike,
    mode: RoundingMode | str = RoundingMode.TRUNC,
    *,
    signed: bool = True,
) -> NDArray[np.signedinteger[Any]]:
    """The codes of `fake_quant(x, bits, exp, mode)`, in `code_dtype(bits, signed=)` (1-bit: ±1).

    `dequantize(quantize_to_int(x, b, k, m), b, k)` equals `fake_quant(x, b, k, m)` bit for bit.

    >>> quantize_to_int([-1.7, 0.3, 1.0, 9.0], 4, 2).tolist()
    [-6, 1, 4, 7]
    >>> quantize_to_int([0.0, -0.1], 1, 3).tolist()
    [1, -1]
    """
    codes, _, b = _codes_as_float(x, bits, exp, mode, signed)
    return codes.astype(code_dtype(b, signed=signed))


def dequantize(
    codes: ArrayLike, bits: int, exp: ArrayLike, *, signed: bool = True
) -> NDArray[np.float64]:
    """Real values of integer codes: `codes * 2**-exp` for b > 1, `codes * 2**exp` for b == 1.

    Exact in float64 (codes are at most 32 bits wide). Codes outside `qmin..qmax` (1-bit: other
    than ±1) raise ValueError, since they cannot come from a `bits`-wide tensor.

    >>> dequantize(np.array([-6, 1, 7], np.int8), 4, 2).tolist()
    [-1.5, 0.25, 1.75]
    >>> dequantize(np.array([1, -1], np.int8), 1, -2).tolist()
    [0.25, -0.25]
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    c = _as_int_array(codes, "codes")
    k = _as_exp(exp)
    if b == 1:
        if not np.isin(c, (-1, 1)).all():
            raise ValueError("1-bit codes must be -1 or +1")
        return np.asarray(c.astype(np.float64) * power_of_two(k))
    lo, hi = qmin(b, signed=signed), qmax(b, signed=signed)
    if c.size and (int(c.min()) < lo or int(c.max()) > hi):
        raise ValueError(
            f"codes out of the {b}-bit range {lo}..{hi}: min {int(c.min())}, max {int(c.max())}"
        )
    return np.asarray(c.astype(np.float64) * power_of_two(-k))


# --------------------------------------------------------------------------------------------
# Integer side: the nh semantics.


def shift_round(
    acc: ArrayLike, shift: ArrayLike, mode: RoundingMode | str = RoundingMode.TRUNC
) -> NDArray[np.int64]:
    """`acc * 2**-shift` rounded by `mode`, with integer operations only; the result is int64.

    `shift` broadcasts against `acc` like an exponent (per tensor or per channel). A positive
    shift divides (rounding); a negative one is an exact left shift, and raises OverflowError if
    the result does not fit int64. Any shift amount works: shifting right by 64 or more leaves
    0 (or -1 for a negative `acc` under `floor`).

    >>> acc = np.array([-7, -6, -5, -2, 2, 5, 6, 7], np.int32)   # shift 2 divides by 4
    >>> shift_round(acc, 2, "trunc").tolist()      # -7/4 = -1.75 -> -1
    [-1, -1, -1, 0, 0, 1, 1, 1]
    >>> shift_round(acc, 2, "floor").tolist()      # -1.75 -> -2
    [-2, -2, -2, -1, 0, 1, 1, 1]
    >>> shift_round(acc, 2, "half_up").tolist()    # -1.5 -> -1, 1.5 -> 2, -0.5 -> 0
    [-2, -1, -1, 0, 1, 1, 2, 2]
    >>> shift_round(acc, 2, "half_even").tolist()  # -1.5 -> -2, 1.5 -> 2, -0.5 -> 0
    [-2, -2, -1, 0, 0, 1, 2, 2]
    >>> shift_round(np.array([3, -3]), np.array([-4, 1]), "trunc").tolist()
    [48, -1]
    """
    a = _as_int_array(acc, "acc")
    s = _as_int_array(shift, "shift")
    a, s = np.broadcast_arrays(a, s)
    m = RoundingMode(mode)

    # Right shifts. NumPy (like C) leaves shifts by >= 64 undefined, so amounts are capped at
    # 63, which is exact for s <= 63; larger s are patched at the end.
    right = np.clip(s, 0, 63)
    floor_q = a >> right
    # Where s <= 0 these values are garbage (half = 1 at right = 0) but unused: see the end.
    rem = a & ~(np.int64(-1) << right)  # a mod 2**right, always >= 0
    half = np.int64(1) << np.maximum(right - 1, 0)  # the remainder of an exact tie
    if m is RoundingMode.FLOOR:
        q = floor_q
    elif m is RoundingMode.TRUNC:
        q = floor_q + ((a < 0) & (rem != 0))
    elif m is RoundingMode.HALF_UP:
        q = floor_q + (rem >= half)
    else:
        tie_to_odd = (rem == half) & ((floor_q & 1) == 1)
        q = floor_q + ((rem > half) | tie_to_odd)
    # For s >= 64, |acc * 2**-s| <= 2**63 / 2**64 = 1/2 and -1/2 only as a tie at s == 64, so
    # every mode gives 0 except floor, which gives -1 for negatives (= a >> 63).
    if m is not RoundingMode.FLOOR:
        q = np.where(s >= 64, 0, q)

    # Left shifts: shift, shift back, and compare to detect int64 overflow.
    left = np.clip(-s, 0, 63)
    shifted = a << left
    overflow = (s < 0) & (((shifted >> left) != a) | ((-s > 63) & (a != 0)))
    if overflow.any():
        i = tuple(int(j) for j in np.argwhere(overflow)[0])
        raise OverflowError(
            f"shift_round: {int(a[i])} << {int(-s[i])} does not fit int64 (at index {i})"
        )
    return np.asarray(np.where(s > 0, q, np.where(s < 0, shifted, a)), dtype=np.int64)


def saturate(v: ArrayLike, bits: int, *, signed: bool = True) -> NDArray[np.signedinteger[Any]]:
    """Clamp integers to the `bits`-wide code range, as `code_dtype(bits)`; 1-bit: `v >= 0 ? +1 : -1`.

    >>> saturate(np.array([-300, -128, 5, 127, 300]), 8).tolist()
    [-128, -128, 5, 127, 127]
    >>> saturate(np.array([-3, 0, 3]), 1).tolist()
    [-1, 1, 1]
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    a = _as_int_array(v, "v")
    if b == 1:
        return np.where(a >= 0, 1, -1).astype(np.int8)
    lo, hi = qmin(b, signed=signed), qmax(b, signed=signed)
    return np.clip(a, lo, hi).astype(code_dtype(b, signed=signed))


def requant(
    acc: ArrayLike,
    shift: ArrayLike,
    bits: int,
    mode: RoundingMode | str = RoundingMode.TRUNC,
    *,
    signed: bool = True,
) -> NDArray[np.signedinteger[Any]]:
    """`nh.requant`: `saturate_b(shift_round(acc, shift, mode))`; 1-bit: `acc >= 0 ? +1 : -1`.

    An integer `acc` at exponent `e_in` requantized by `shift = e_in - e_out` is the code at
    exponent `e_out` that `fake_quant(acc * 2**-e_in, bits, e_out, mode)` gives (for b == 1 the
    sign is unchanged by scaling, so `shift` and `mode` do not matter). Exact for every int64
    `acc` and every shift: a left shift that would leave int64 saturates, so it never raises.

    >>> requant(np.array([1000, -1000, 37, -37]), 3, 8, "trunc").tolist()  # 125, -125, 4.6, -4.6
    [125, -125, 4, -4]
    >>> requant(np.array([1000, -1000]), np.array([2, -1]), 8).tolist()   # 250 -> 127, -2000 -> -128
    [127, -128]
    >>> requant(np.array([0, -5]), 7, 1).tolist()
    [1, -1]
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    a = _as_int_array(acc, "acc")
    s = _as_int_array(shift, "shift")
    a, s = np.broadcast_arrays(a, s)
    if b == 1:
        return saturate(a, 1)
    # |code| <= 2**31 for b <= 32, so beyond |acc| = 2**31 or a left shift by 31 the result is
    # saturated whatever the exact value; clamping both keeps the shift inside int64 (<= 2**62).
    left = s < 0
    a = np.where(left, np.clip(a, -(2**31), 2**31), a)
    s = np.where(left, np.maximum(s, -31), s)
    return saturate(shift_round(a, s, mode), b, signed=signed)


def div_round(
    num: ArrayLike, den: ArrayLike, mode: RoundingMode | str = RoundingMode.TRUNC
) -> NDArray[np.int64]:
    """``num / den`` rounded by ``mode`` with integer operations only (``den > 0``), as int64.

    The modes mean what they mean in :func:`shift_round`, which is this
    function for ``den = 2**shift``: ``trunc`` toward zero, ``floor`` toward -inf,
    ``half_up`` to nearest with ties toward +inf, ``half_even`` to nearest with ties to even.
    ``nh.avg_pool`` divides its exact window sums with it.

    >>> num = np.array([-7, -6, -5, -3, 3, 5, 6, 7])    # divided by 2: ties everywhere odd
    >>> div_round(num, 2, "trunc").tolist(), div_round(num, 2, "floor").tolist()
    ([-3, -3, -2, -1, 1, 2, 3, 3], [-4, -3, -3, -2, 1, 2, 3, 3])
    >>> div_round(num, 2, "half_up").tolist(), div_round(num, 2, "half_even").tolist()
    ([-3, -3, -2, -1, 2, 3, 3, 4], [-4, -3, -2, -2, 2, 2, 3, 4])
    >>> div_round(np.array([10, -10, 11]), 3, "half_even").tolist()   # 3.33, -3.33, 3.67
    [3, -3, 4]
    """
    n = np.asarray(num).astype(np.int64, copy=False)
    d = np.asarray(den).astype(np.int64, copy=False)
    if d.size and int(d.min()) <= 0:
        raise ValueError(f"div_round: divisors must be positive, got {int(d.min())}")
    m = RoundingMode(mode)
    q = n // d  # NumPy's integer // is floor division
    r = n - q * d  # 0 <= r < d
    if m is RoundingMode.FLOOR:
        return q
    if m is RoundingMode.TRUNC:
        return q + ((n < 0) & (r != 0))
    twice = 2 * r  # compare r with d/2 without leaving the integers
    if m is RoundingMode.HALF_UP:
        return q + (twice >= d)
    return q + ((twice > d) | ((twice == d) & ((q & 1) == 1)))


def requant_codes(
    acc: ArrayLike,
    shift: ArrayLike,
    bits: int,
    mode: RoundingMode | str = RoundingMode.TRUNC,
    *,
    signed: bool = True,
) -> NDArray[np.signedinteger[Any]]:
    """:func:`nanoir.runtime.numerics.requant` for codes of at most 32 bits, in a few array passes.

    ``requant`` is the definition and handles any int64 and any shift; being general it
    is 10-30x slower. Here ``|acc| <= 2**31`` (an nh value is at most i32) and the shifts are
    all right shifts in ``0..32`` or all left shifts in ``-31..0``; anything else is delegated
    to ``requant``. A right shift by ``s`` rounds by adding a mode-dependent offset
    below ``2**s`` and then shifting arithmetically (which floors). The common accumulator
    cases (trunc, floor, half_up) stay in int32, where they provably cannot overflow: trunc
    adds ``2**s - 1`` to negative values only, and half_up is ``((x >> (s-1)) + 1) >> 1``.
    The tests compare this with ``requant`` bit for bit.

    >>> requant_codes(np.array([1000, -1000, 37, -37]), 3, 8).tolist()
    [125, -125, 4, -4]
    >>> requant_codes(np.array([12, -12, 20, -20]), 3, 8, "half_even").tolist()  # 1.5, -1.5, 2.5, -2.5
    [2, -2, 2, -2]
    """
    s = np.asarray(shift, dtype=np.int64)
    b = int(bits)
    a = np.asarray(acc)
    if b == 1:
        return saturate(a, 1)
    m = RoundingMode(mode)
    smin, smax = (int(s.min()), int(s.max())) if s.size else (0, 0)
    lo, hi = qmin(b, signed=signed), qmax(b, signed=signed)
    narrow = a.dtype.kind == "i" and a.dtype.itemsize <= 4
    if not narrow and (
        a.dtype.kind != "i" or a.size and (int(a.min()) < -(2**31) or int(a.max()) > 2**31)
    ):
        return requant(a, s, b, mode, signed=signed)
    int32_modes = (
        m is RoundingMode.FLOOR
        or m is RoundingMode.TRUNC
        or (m is RoundingMode.HALF_UP and smin >= 2)
    )
    if narrow and int32_modes and 0 <= smin and smax <= 30:
        x = a.astype(np.int32, copy=False)
        # A Python int or an int32 array: an int64 shift array would promote x to int64.
        s32: Any = smin if smin == smax else s.astype(np.int32)
        if m is RoundingMode.FLOOR:
            q = x >> s32
        elif m is RoundingMode.TRUNC:
            q = x >> 31  # -1 for negative x, else 0
            q &= (1 << s32) - 1
            q += x
            q >>= s32
        else:
            q = x >> (s32 - 1)  # floor(x / 2**(s-1)) <= 2**29: the +1 cannot overflow
            q += 1
            q >>= 1
        np.clip(q, lo, hi, out=q)
        return q.astype(code_dtype(b, signed=signed))
    x64 = a.astype(np.int64)
    if 0 <= smin and smax <= 32:
        one = np.int64(1)
        if m is RoundingMode.TRUNC:
            x64 += (x64 >> 63) & ((one << s) - 1)
        elif m is RoundingMode.HALF_UP:
            x64 += np.where(s > 0, one << np.maximum(s - 1, 0), 0)
        elif m is RoundingMode.HALF_EVEN:
            # Add 2**(s-1) - 1, plus 1 when the floor quotient is odd: a tie then goes up
            # exactly when that makes the quotient even.
            x64 += np.where(s > 0, (one << np.maximum(s - 1, 0)) - 1 + ((x64 >> s) & 1), 0)
        x64 >>= s
    elif -31 <= smin and smax <= 0:
        x64 <<= -s
    else:
        return requant(a, s, b, mode, signed=signed)
    return np.clip(x64, lo, hi).astype(code_dtype(b, signed=signed))


# --------------------------------------------------------------------------------------------
# Calibration: choosing exponents.


def _reduced_axes(ndim: int, axis: int | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-d tensor")
    keep = axis % ndim
    return tuple(d for d in range(ndim) if d != keep)


def _per_channel(values: NDArray[np.float64], axis: int | None) -> NDArray[np.float64]:
    """Per-tensor results as shape [1]; per-channel ones keep the reduced dims (e.g. [C,1,1,1])."""
    return values.reshape(1) if axis is None else values


def channel_absmax(x: ArrayLike, axis: int | None = None) -> NDArray[np.float64]:
    """max(|x|) per tensor (shape [1]) or per channel along `axis` (reduced dims kept as 1).

    >>> w = np.array([[1.0, -3.0], [0.5, 0.25]])
    >>> channel_absmax(w).tolist(), channel_absmax(w, axis=0).tolist()
    ([3.0], [[3.0], [0.5]])
    """
    v = _as_float64(x, "absmax input")
    if v.size == 0:
        raise ValueError("absmax of an empty tensor")
    axes = _reduced_axes(v.ndim, axis)
    return _per_channel(np.max(np.abs(v), axis=axes, keepdims=True), axis)


def exp_from_absmax(
    absmax: ArrayLike,
    bits: int,
    exp_range: tuple[int, int] = CALIB_EXP_RANGE,
    *,
    signed: bool = True,
) -> NDArray[np.int32]:
    """NanoEngine's rule, elementwise: `k = floor(log2(s))`, `s = 2**(b-1)/absmax` (b == 1: `s = absmax`).

    Computed exactly from the binary exponent (not with a float log2), then clamped to
    `exp_range`. For b > 1 it guarantees `absmax * 2**k <= 2**(b-1)`: `-absmax` never saturates
    and `+absmax` saturates only when `absmax * 2**k == 2**(b-1)` exactly (a power of two),
    losing less than one step; `k` is the largest such exponent. For b == 1 it gives
    `2**k <= absmax < 2**(k+1)`. `absmax == 0` (an all-zero channel) takes the rule's limit:
    the highest exponent in range for b > 1 (the finest step), the lowest for b == 1 (the
    smallest magnitude), so that zeros quantize with the least error.

    >>> exp_from_absmax([3.0, 1.0, 0.0], 8).tolist()   # 128/3 = 42.7 -> 5; 128 -> 7; 0 -> max
    [5, 7, 60]
    >>> exp_from_absmax([3.0, 1.0, 0.0], 1).tolist()   # log2 3 = 1.58 -> 1; 0 -> min
    [1, 0, -60]

    `signed=False` (codes `0 .. 2**b - 1` over `[0, absmax]`): `s = 2**b/absmax`, one
    exponent finer than signed.

    >>> exp_from_absmax([3.0, 1.0], 8, signed=False).tolist()
    [6, 8]
    """
    b = _check_bits(bits)
    _check_signed(b, signed)
    lo, hi = exp_range
    if lo > hi:
        raise ValueError(f"exp_range must be (lowest, highest), got {exp_range}")
    a = _as_float64(absmax, "absmax")
    if (a < 0).any() or np.isinf(a).any():
        raise ValueError("absmax must be finite and >= 0")
    # a = mant * 2**e with 0.5 <= mant < 1, so floor(log2 a) = e - 1, and ceil(log2 a) = e
    # unless a is a power of two (mant == 0.5), where it is e - 1.
    mant, e = np.frexp(a)
    floor_log2 = e.astype(np.int64) - 1
    ceil_log2 = np.where(mant == 0.5, floor_log2, floor_log2 + 1)
    if b == 1:
        k = np.where(a == 0, lo, floor_log2)
    else:
        # floor(log2(2**(b-1) / a)) = (b - 1) - ceil(log2 a), an integer identity.
        top = b if not signed else b - 1
        k = np.where(a == 0, hi, top - ceil_log2)
    return np.clip(k, lo, hi).astype(np.int32)


def _squared_error(
    v: NDArray[np.float64],
    bits: int,
    k: NDArray[np.int32],
    mode: RoundingMode,
    axis: int | None,
    signed: bool = True,
) -> NDArray[np.float64]:
    err = fake_quant(v, bits, k, mode, signed=signed) - v
    return _per_channel(np.sum(err * err, axis=_reduced_axes(v.ndim, axis), keepdims=True), axis)


def exp_mse_optimal(
    x: ArrayLike,
    bits: int,
    axis: int | None = None,
    mode: RoundingMode | str = RoundingMode.TRUNC,
    search: int = 3,
    exp_range: tuple[int, int] = CALIB_EXP_RANGE,
    *,
    signed: bool = True,
) -> NDArray[np.int32]:
    """The power-of-two exponent minimising the squared `fake_quant` error, per tensor or channel.

    Candidates are `k0 - search .. k0 + search` around the absmax rule's `k0`
    (`exp_from_absmax`), within `exp_range`. A candidate replaces the current best only if its
    error is strictly smaller, and candidates are tried nearest to `k0` first, so ties keep the
    exponent closest to the absmax rule (and the error never exceeds the rule's). The result
    has the shape of `channel_absmax(x, axis)`. `signed=False` measures the error of unsigned
    codes (negative values then cost their whole magnitude, whatever the exponent).

    >>> x = np.array([1.0] + [0.3] * 10)   # absmax rule, 2-bit: k0 = floor(log2(2/1)) = 1
    >>> exp_from_absmax(channel_absmax(x), 2).tolist(), exp_mse_optimal(x, 2).tolist()
    ([1], [2])
    """
    b = _check_bits(bits)
    m = RoundingMode(mode)
    if search < 0:
        raise ValueError(f"search must be >= 0, got {search}")
    v = _as_float64(x, "exp_mse_optimal input")
    if np.isinf(v).any():
        raise ValueError("exp_mse_optimal input contains inf")
    lo, hi = exp_range
    _check_signed(b, signed)
    k0 = exp_from_absmax(channel_absmax(v, axis), b, exp_range, signed=signed)
    best_k = k0
    best_err = _squared_error(v, b, k0, m, axis, signed)
    for distance in range(1, search + 1):
        for step in (-distance, distance):
            k = np.clip(k0 + step, lo, hi).astype(np.int32)
            err = _squared_error(v, b, k, m, axis, signed)
            better = err < best_err
            best_k = np.where(better, k, best_k).astype(np.int32)
            best_err = np.where(better, err, best_err)
    return best_k


# --------------------------------------------------------------------------------------------
# Packed storage of narrow codes.


def _check_pack_bits(bits: int) -> int:
    b = _check_bits(bits)
    if b not in (1, 2, 4, 8):
        raise ValueError(f"packed widths are 1, 2, 4 and 8 bits, got {b}")
    return b


def pack_bits(codes: ArrayLike, bits: int) -> bytes:
    """Pack codes (flattened in C order) `8 // bits` to a byte, first code in the most significant field.

    Fields are two's complement; the 1-bit code -1 is stored as `ONE_BIT_MINUS_ONE_FIELD` (1)
    and +1 as the other bit. The last byte is padded with zero bits. 8-bit codes are plain
    int8 bytes.

    >>> pack_bits(np.array([1, -1, -8, 7]), 4).hex()      # 0x1, 0xf | 0x8, 0x7
    '1f87'
    >>> pack_bits(np.array([1, -1, 1, 1, -1]), 1).hex()   # 0 1 0 0 1 + 3 zero bits = 01001000
    '48'
    """
    b = _check_pack_bits(bits)
    c = _as_int_array(codes, "codes").reshape(-1)
    if b == 1:
        if not np.isin(c, (-1, 1)).all():
            raise ValueError("1-bit codes must be -1 or +1")
        fields = np.where(c == -1, ONE_BIT_MINUS_ONE_FIELD, 1 - ONE_BIT_MINUS_ONE_FIELD)
    else:
        if c.size and (int(c.min()) < qmin(b) or int(c.max()) > qmax(b)):
            raise ValueError(f"codes out of the {b}-bit range {qmin(b)}..{qmax(b)}")
        fields = c & (2**b - 1)  # two's complement of the low b bits
    per_byte = 8 // b
    padded = np.zeros(-(-c.size // per_byte) * per_byte, dtype=np.int64)
    padded[: c.size] = fields
    positions = b * np.arange(per_byte - 1, -1, -1)  # first field -> most significant bits
    packed = np.sum(padded.reshape(-1, per_byte) << positions, axis=1)
    return packed.astype(np.uint8).tobytes()


def unpack_bits(data: bytes | bytearray | memoryview, bits: int, count: int) -> NDArray[np.int8]:
    """Inverse of `pack_bits`: the first `count` codes of `data`, as a flat int8 array.

    `data` must be exactly `ceil(count * bits / 8)` bytes; padding bits are ignored.

    >>> unpack_bits(bytes.fromhex('1f87'), 4, 4).tolist()
    [1, -1, -8, 7]
    >>> unpack_bits(bytes.fromhex('48'), 1, 5).tolist()
    [1, -1, 1, 1, -1]
    """
    b = _check_pack_bits(bits)
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    expected = math.ceil(count * b / 8)
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if raw.size != expected:
        raise ValueError(f"{count} {b}-bit codes take {expected} bytes, got {raw.size}")
    per_byte = 8 // b
    positions = b * np.arange(per_byte - 1, -1, -1)
    fields = ((raw.astype(np.int64)[:, None] >> positions) & (2**b - 1)).reshape(-1)[:count]
    if b == 1:
        return np.where(fields == ONE_BIT_MINUS_ONE_FIELD, -1, 1).astype(np.int8)
    return np.where(fields >= 2 ** (b - 1), fields - 2**b, fields).astype(np.int8)
