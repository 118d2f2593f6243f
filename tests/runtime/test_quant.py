"""Tests for nanoir.runtime.numerics.quant: hand-computed cases, then properties against exact references.

Expected values are worked out by hand in the comments, or come from Python ints and
`fractions.Fraction`, never from the functions under test.
"""

from __future__ import annotations

import doctest
import math
from fractions import Fraction

import nanoir.runtime.numerics.quant as quant
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nanoir.runtime.numerics.quant import (
    RoundingMode,
    channel_absmax,
    dequantize,
    exp_from_absmax,
    exp_mse_optimal,
    fake_quant,
    pack_bits,
    qmax,
    qmin,
    quantize_to_int,
    requant,
    round_to_int,
    saturate,
    shift_round,
    unpack_bits,
)

MODES = [m.value for m in RoundingMode]
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def bits_of(a: np.ndarray) -> np.ndarray:
    """float64 bit patterns, so that comparisons tell -0.0 from +0.0."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def assert_bit_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float64
    assert actual.shape == np.shape(expected)
    np.testing.assert_array_equal(bits_of(actual), bits_of(np.asarray(expected, dtype=np.float64)))


# ---------------------------------------------------------------------------------------------
# Hand-computed cases.


def test_rounding_mode_values_are_the_ir_strings():
    assert [m.value for m in RoundingMode] == ["trunc", "floor", "half_up", "half_even"]
    assert RoundingMode("half_up") == "half_up"
    with pytest.raises(ValueError):
        RoundingMode("nearest")


def test_code_ranges():
    assert (qmin(8), qmax(8)) == (-128, 127)
    assert (qmin(4), qmax(4)) == (-8, 7)
    assert (qmin(2), qmax(2)) == (-2, 1)
    assert (qmin(16), qmax(16)) == (-32768, 32767)
    assert (qmin(32), qmax(32)) == (-(2**31), 2**31 - 1)
    assert (qmin(1), qmax(1)) == (-1, 1)  # the ±1 code set
    for bad in (0, 33):
        with pytest.raises(ValueError):
            qmin(bad)


def test_trunc_rounds_negative_values_toward_zero():
    # -1.7 * 2**0 = -1.7: trunc -> -1 (not -2 as floor or round would give).
    assert fake_quant(np.array([-1.7]), 8, 0).tolist() == [-1.0]
    assert fake_quant(np.array([-1.7]), 8, 0, "floor").tolist() == [-2.0]
    # -1.7 * 2**2 = -6.8: trunc -> -6 -> -6/4 = -1.5; floor -> -7 -> -1.75.
    assert fake_quant(np.array([-1.7]), 8, 2).tolist() == [-1.5]
    assert fake_quant(np.array([-1.7]), 8, 2, "floor").tolist() == [-1.75]


# Scaled values -2.5 .. 2.5 hit exact ties; expected codes by the definition of each mode.
TIE_SCALED = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]
TIE_CODES = {
    "trunc": [-2, -1, 0, 0, 1, 2],  # toward zero
    "floor": [-3, -2, -1, 0, 1, 2],  # toward -inf
    "half_up": [-2, -1, 0, 1, 2, 3],  # ties toward +inf
    "half_even": [-2, -2, 0, 0, 2, 2],  # ties to the even code
}


@pytest.mark.parametrize("mode", MODES)
def test_exact_ties(mode: str):
    expected = TIE_CODES[mode]
    assert round_to_int(np.array(TIE_SCALED), mode).tolist() == expected
    # At k = 1 the inputs x = scaled / 2 hit the same ties; the result is code / 2.
    x = np.array(TIE_SCALED) / 2
    assert quantize_to_int(x, 8, 1, mode).tolist() == expected
    assert_bit_equal(fake_quant(x, 8, 1, mode), np.array(expected) / 2)
    # The integer path: acc = 2 * scaled at shift 1 is the same tie.
    acc = np.array([-5, -3, -1, 1, 3, 5])
    assert shift_round(acc, 1, mode).tolist() == expected
    # shift 3 divides by 8: -20/8 = -2.5, ..., 20/8 = 2.5.
    assert shift_round(acc * 4, 3, mode).tolist() == expected


def test_zero_results_are_positive_zero():
    # trunc(-0.3) is -0.0 in float arithmetic; the integer level has only +0.
    out = fake_quant(np.array([-0.3, -0.0]), 8, 0)
    assert out.tolist() == [0.0, 0.0]
    assert not np.signbit(out).any()


@pytest.mark.parametrize(
    ("bits", "k", "x", "expected"),
    [
        # 8-bit, k=0, codes -128..127.
        (8, 0, [126.9, 127.0, 127.9, 128.0, 1e300, np.inf], [126, 127, 127, 127, 127, 127]),
        (
            8,
            0,
            [-127.9, -128.0, -128.9, -129.0, -1e300, -np.inf],
            [-127, -128, -128, -128, -128, -128],
        ),
        # 4-bit, k=1 (step 1/2), codes -8..7: 3.6*2=7.2 -> 7; 4.0*2=8 -> 7; -4.4*2=-8.8 -> -8; -5*2=-10 -> -8.
        (4, 1, [3.6, 4.0, -4.0, -4.4, -5.0], [7, 7, -8, -8, -8]),
        # 2-bit, k=0, codes -2..1: 1.9 -> 1; 5 -> 1; -2 -> -2; -2.9 -> -2; -5 -> -2.
        (2, 0, [1.9, 5.0, -2.0, -2.9, -5.0], [1, 1, -2, -2, -2]),
    ],
)
def test_saturation(bits: int, k: int, x: list[float], expected: list[int]):
    assert quantize_to_int(np.array(x), bits, k).tolist() == expected
    assert_bit_equal(fake_quant(np.array(x), bits, k), np.array(expected) / 2.0**k)


def test_half_up_saturates_after_rounding():
    # 127.5 -> half_up 128 -> clamp 127; -128.5 -> half_up -128 (tie toward +inf).
    assert quantize_to_int(np.array([127.5, -128.5, -128.6]), 8, 0, "half_up").tolist() == [
        127,
        -128,
        -128,
    ]


def test_one_bit():
    # b == 1: (x >= 0 ? +1 : -1) * 2**k; x = 0 (either sign) gives +2**k.
    x = np.array([0.0, -0.0, 3.0, -1e-300, -7.0])
    assert_bit_equal(fake_quant(x, 1, 2), [4.0, 4.0, 4.0, -4.0, -4.0])
    assert_bit_equal(fake_quant(x, 1, -3), [0.125, 0.125, 0.125, -0.125, -0.125])
    assert quantize_to_int(x, 1, -3).tolist() == [1, 1, 1, -1, -1]
    assert quantize_to_int(x, 1, -3).dtype == np.int8
    # The mode does not matter for the sign rule.
    assert_bit_equal(fake_quant(x, 1, 0, "floor"), [1.0, 1.0, 1.0, -1.0, -1.0])
    assert_bit_equal(fake_quant(np.array([np.inf, -np.inf]), 1, 0), [1.0, -1.0])


def test_per_channel_exponents_of_both_signs():
    x = np.array([[9.0, -9.0, 600.0], [1.7, -1.7, 200.0], [0.2, -0.2, 20.0]])
    k = np.array([[-2], [0], [3]])
    # row 0, k=-2 (step 4): 9/4=2.25 -> 2 -> 8; -2.25 -> -2 -> -8; 600/4=150 -> 127 -> 508.
    # row 1, k=0: 1.7 -> 1; -1.7 -> -1; 200 -> 127.
    # row 2, k=3 (step 1/8): 0.2*8=1.6 -> 1 -> 0.125; -0.125; 20*8=160 -> 127 -> 15.875.
    expected = [[8.0, -8.0, 508.0], [1.0, -1.0, 127.0], [0.125, -0.125, 15.875]]
    assert_bit_equal(fake_quant(x, 8, k), expected)
    assert quantize_to_int(x, 8, k).tolist() == [[2, -2, 127], [1, -1, 127], [1, -1, 127]]
    # OIHW-shaped [C,1,1,1] exponent on a [C,1,1,3] weight gives the same numbers.
    w = x.reshape(3, 1, 1, 3)
    assert_bit_equal(
        fake_quant(w, 8, k.reshape(3, 1, 1, 1)), np.array(expected).reshape(3, 1, 1, 3)
    )


def test_negative_exponent():
    # k = -3: step 8, 4-bit range -64..56: 30/8=3.75 -> 3 -> 24; 100/8=12.5 -> 7 -> 56; -12.5 -> -8 -> -64.
    assert_bit_equal(fake_quant(np.array([30.0, 100.0, -100.0]), 4, -3), [24.0, 56.0, -64.0])


def test_full_shape_and_vector_exponents():
    x = np.array([[1.3, 1.3], [1.3, 1.3]])
    # 1.3*1=1.3 -> 1 -> 1; 1.3*2=2.6 -> 2 -> 1; 1.3*4=5.2 -> 5 -> 1.25; 1.3*8=10.4 -> 10 -> 1.25.
    assert_bit_equal(fake_quant(x, 8, np.array([[0, 1], [2, 3]])), [[1.0, 1.0], [1.25, 1.25]])
    # A [C] bias with a [C] exponent: 0.3*4=1.2 -> 1 -> 0.25; 0.3*1 -> 0; 0.3/2=0.15 -> 0.
    assert_bit_equal(
        fake_quant(np.array([0.3, 0.3, 0.3]), 8, np.array([2, 0, -1])), [0.25, 0.0, 0.0]
    )
    # A [1] exponent broadcasts like a scalar: 2.6 -> 2.
    assert_bit_equal(fake_quant(np.array([[2.6]]), 8, np.array([0])), [[2.0]])


def test_extreme_exponents_stay_exact():
    # 3 * 2**-950 at k = 951 scales to 6 exactly, and comes back as 6 * 2**-951 = 3 * 2**-950.
    x = math.ldexp(3.0, -950)
    assert fake_quant(np.array([x]), 8, 951).tolist() == [x]
    # 5 * 2**900 at k = -899 -> 10 -> 10 * 2**899.
    assert fake_quant(np.array([math.ldexp(5.0, 900)]), 8, -899).tolist() == [math.ldexp(10.0, 899)]
    # The smallest subnormal times 2**-10 underflows to -0.0 in float64; its floor is still -1,
    # which at k = -10 is -1 * 2**10.
    tiny = -5e-324
    assert fake_quant(np.array([tiny]), 8, -10, "floor").tolist() == [-1024.0]
    assert fake_quant(np.array([tiny]), 8, -10, "trunc").tolist() == [0.0]
    with pytest.raises(ValueError, match="exp"):
        fake_quant(np.array([1.0]), 8, 961)


def test_float32_input_is_computed_in_float64():
    x32 = np.array([0.1, -2.7, 1e-3], dtype=np.float32)
    out = fake_quant(x32, 8, 7)
    assert out.dtype == np.float64
    assert_bit_equal(out, fake_quant(x32.astype(np.float64), 8, 7))


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="NaN"):
        fake_quant(np.array([1.0, np.nan]), 8, 0)
    with pytest.raises(ValueError, match="NaN"):
        quantize_to_int(np.array([np.nan]), 1, 0)
    with pytest.raises(TypeError):
        fake_quant(np.array([1.0]), 8, np.array([1.0]))  # exponents must be integers
    with pytest.raises(TypeError):
        shift_round(np.array([1.5]), 1)  # no silent float path in the integer functions
    with pytest.raises(ValueError):
        dequantize(np.array([8]), 4, 0)  # 8 is not a 4-bit code
    with pytest.raises(ValueError):
        dequantize(np.array([0]), 1, 0)  # 0 is not a 1-bit code
    with pytest.raises(ValueError, match="2\\*\\*53"):
        fake_quant(np.array([2**53 + 1]), 8, 0)  # would round on the way to float64
    with pytest.raises(OverflowError):
        shift_round(4, -61)  # 0-d operands name the offending value too
    with pytest.raises(ValueError):
        exp_from_absmax(np.array([1.0]), 8, exp_range=(5, -5))


def test_dequantize():
    # 4-bit codes at k=2: -6/4, 1/4, 7/4. 1-bit codes at k=-2: ±2**-2.
    assert_bit_equal(dequantize(np.array([-6, 1, 7], np.int8), 4, 2), [-1.5, 0.25, 1.75])
    assert_bit_equal(dequantize(np.array([1, -1], np.int8), 1, -2), [0.25, -0.25])


def test_shift_round_large_shifts():
    a = np.array([INT64_MIN, 2**62, -1, 5])
    # s = 63: -2**63/2**63 = -1 exactly in every mode; 2**62/2**63 = 0.5 (a tie); -1/2**63 tiny.
    assert shift_round(a, 63, "trunc").tolist() == [-1, 0, 0, 0]
    assert shift_round(a, 63, "floor").tolist() == [-1, 0, -1, 0]
    assert shift_round(a, 63, "half_up").tolist() == [-1, 1, 0, 0]
    assert shift_round(a, 63, "half_even").tolist() == [-1, 0, 0, 0]
    # s = 64: -2**63/2**64 = -0.5 (a tie), 2**62/2**64 = 0.25.
    assert shift_round(a, 64, "trunc").tolist() == [0, 0, 0, 0]
    assert shift_round(a, 64, "floor").tolist() == [-1, 0, -1, 0]
    assert shift_round(a, 64, "half_up").tolist() == [0, 0, 0, 0]  # floor(-0.5 + 0.5) = 0
    assert shift_round(a, 64, "half_even").tolist() == [0, 0, 0, 0]
    assert shift_round(a, 1000, "floor").tolist() == [-1, 0, -1, 0]


def test_shift_round_left_shifts_and_overflow():
    # 3 << 61 = 3 * 2**61 < 2**63 fits; -1 << 63 = -2**63 fits (the int64 minimum).
    assert shift_round(np.array([3, -1, 0]), np.array([-61, -63, -500])).tolist() == [
        3 * 2**61,
        INT64_MIN,
        0,
    ]
    with pytest.raises(OverflowError, match="does not fit int64"):
        shift_round(np.array([4]), -61)  # 2**63
    with pytest.raises(OverflowError):
        shift_round(np.array([1]), -64)
    with pytest.raises(OverflowError):
        shift_round(np.array([-2]), -63)  # -2**64


def test_requant_saturates_instead_of_overflowing():
    # 2**40 << 40 = 2**80 -> 127; -1 << 100 -> -128; 0 << 100 = 0; 1 << 3 = 8.
    acc = np.array([2**40, -1, 0, 1])
    assert requant(acc, np.array([-40, -100, -100, -3]), 8).tolist() == [127, -128, 0, 8]
    assert requant(acc, np.array([-40, -100, -100, -3]), 8).dtype == np.int8
    # 32-bit: -1 << 31 = -2**31 is exactly qmin(32); 1 << 31 = 2**31 saturates to 2**31 - 1.
    assert requant(np.array([-1, 1]), -31, 32).tolist() == [-(2**31), 2**31 - 1]


def test_requant_hand_cases():
    # shift 3 divides by 8: 1000/8 = 125; 37/8 = 4.625; -37/8 = -4.625.
    acc = np.array([1000, -1000, 37, -37])
    assert requant(acc, 3, 8, "trunc").tolist() == [125, -125, 4, -4]
    assert requant(acc, 3, 8, "floor").tolist() == [125, -125, 4, -5]
    assert requant(acc, 3, 8, "half_up").tolist() == [125, -125, 5, -5]
    # shift 2: 250 -> 127, -250 -> -128; 4-bit at shift 3: 125 -> 7, -125 -> -8.
    assert requant(acc, 2, 8).tolist() == [127, -128, 9, -9]
    assert requant(acc, 3, 4).tolist() == [7, -8, 4, -4]
    # 1-bit is the sign of acc whatever the shift: -1 >> 4 truncates to 0, but the code is -1.
    assert requant(np.array([-1, 0, 5]), 4, 1).tolist() == [-1, 1, 1]
    assert saturate(np.array([-1, 0, 5]), 1).tolist() == [-1, 1, 1]


def test_exp_from_absmax_hand_cases():
    # 8-bit: s = 128/absmax.  1.0 -> 128 -> 7;  0.75 -> 170.7 -> 7;  0.5 -> 256 -> 8;
    # 3 -> 42.7 -> 5;  200 -> 0.64 -> log2 = -0.64 -> -1.
    assert exp_from_absmax(np.array([1.0, 0.75, 0.5, 3.0, 200.0]), 8).tolist() == [7, 7, 8, 5, -1]
    # 4-bit: 8/0.3 = 26.7 -> 4.  1-bit: s = absmax: log2(0.3) = -1.74 -> -2; log2 4 = 2; log2 5 = 2.3 -> 2.
    assert exp_from_absmax(np.array([0.3]), 4).tolist() == [4]
    assert exp_from_absmax(np.array([0.3, 4.0, 5.0]), 1).tolist() == [-2, 2, 2]
    # The power-of-two case: absmax 1.0 at k=7 is 128, one past qmax, so it saturates to 127/128.
    assert fake_quant(np.array([1.0, -1.0]), 8, 7).tolist() == [127 / 128, -1.0]
    # absmax == 0 (and anything whose rule falls outside the range) clamps to the range:
    # 7 - ceil(log2 1e-30) = 7 + 99 = 106 -> 60.
    assert exp_from_absmax(np.array([0.0, 1e-30]), 8).tolist() == [60, 60]
    assert exp_from_absmax(np.array([0.0, 1e30]), 1).tolist() == [-60, 60]
    assert exp_from_absmax(np.array([0.0, 1.0]), 8, exp_range=(-8, 5)).tolist() == [5, 5]
    with pytest.raises(ValueError):
        exp_from_absmax(np.array([-1.0]), 8)


def test_channel_absmax_and_per_channel_rule():
    w = np.zeros((2, 1, 1, 3))
    w[0, 0, 0] = [0.1, -3.0, 2.0]
    w[1, 0, 0] = [0.0, 0.0, 0.0]
    assert channel_absmax(w).tolist() == [3.0]
    assert channel_absmax(w, axis=0).reshape(-1).tolist() == [3.0, 0.0]
    k = exp_from_absmax(channel_absmax(w, axis=0), 4)
    # 4-bit: 8/3 = 2.67 -> 1; the all-zero channel -> 60.
    assert k.shape == (2, 1, 1, 1)
    assert k.reshape(-1).tolist() == [1, 60]


def test_exp_mse_optimal_hand_case():
    # Channel 0 = [1.0, 0.3 x 10], 2-bit (codes -2..1), trunc. Absmax rule: floor(log2(2/1)) = 1.
    #   k=0: 1 -> 1 (err 0),        0.3 -> 0 (err .09 each)          total 0.9
    #   k=1: 2 -> 1 -> .5 (.25),    0.6 -> 0 (.09 each)              total 1.15
    #   k=2: 4 -> 1 -> .25 (.5625), 1.2 -> 1 -> .25 (.0025 each)     total 0.5875  <- best
    #   k=3: 8 -> 1 -> .125 (.765625), 2.4 -> 1 -> .125 (.030625)    total 1.071875
    # Channel 1 = [0.9 x 11]. Rule: 2/0.9 = 2.2 -> 1.
    #   k=1: 1.8 -> 1 -> .5 (.16 each) 1.76;  k=0: 0 (.81 each);  k=2: 3.6 -> 1 -> .25 (.4225 each).
    x = np.array([[1.0] + [0.3] * 10, [0.9] * 11])
    assert exp_from_absmax(channel_absmax(x, axis=0), 2).tolist() == [[1], [1]]
    assert exp_mse_optimal(x, 2, axis=0).tolist() == [[2], [1]]
    assert exp_mse_optimal(x[0], 2).tolist() == [2]
    # With no search window the rule's exponent is all there is.
    assert exp_mse_optimal(x, 2, axis=0, search=0).tolist() == [[1], [1]]


def test_pack_hand_cases():
    # 4-bit: 1 -> 0001, -1 -> 1111, -8 -> 1000, 7 -> 0111: bytes 0x1f, 0x87.
    assert pack_bits(np.array([1, -1, -8, 7]), 4) == bytes([0x1F, 0x87])
    # 2-bit: -2 -> 10, 1 -> 01, -1 -> 11, 0 -> 00 | 1 -> 01 + padding: 0b10011100, 0b01000000.
    assert pack_bits(np.array([-2, 1, -1, 0, 1]), 2) == bytes([0b10011100, 0b01000000])
    # 1-bit: -1 -> 1, +1 -> 0: [+1, -1, -1, +1, +1, +1, +1, -1, -1] -> 0b01100001, 0b10000000.
    assert pack_bits(np.array([1, -1, -1, 1, 1, 1, 1, -1, -1]), 1) == bytes(
        [0b01100001, 0b10000000]
    )
    assert pack_bits(np.array([-128, 127, -1]), 8) == bytes([0x80, 0x7F, 0xFF])
    assert unpack_bits(bytes([0x1F, 0x87]), 4, 3).tolist() == [1, -1, -8]
    with pytest.raises(ValueError):
        pack_bits(np.array([2]), 2)  # 2 is not a 2-bit code
    with pytest.raises(ValueError):
        pack_bits(np.array([0]), 1)
    with pytest.raises(ValueError):
        unpack_bits(bytes(3), 4, 3)  # 3 nibbles take exactly 2 bytes
    with pytest.raises(ValueError):
        unpack_bits(bytes(1), 4, 3)


def test_doctests():
    result = doctest.testmod(quant, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 20
    assert result.failed == 0


# ---------------------------------------------------------------------------------------------
# Properties.

modes = st.sampled_from(MODES)
widths = st.sampled_from([1, 2, 3, 4, 8, 16, 32])
# Accumulators exactly representable in float64, so the float side sees the same number.
accs = st.integers(-(2**53), 2**53)


@given(
    acc=st.lists(accs | st.integers(-(2**20), 2**20), min_size=1, max_size=6),
    e_in=st.integers(-40, 40),
    shift=st.integers(-40, 40),
    bits=widths,
    mode=modes,
)
def test_requant_matches_fake_quant_per_tensor(
    acc: list[int], e_in: int, shift: int, bits: int, mode: str
):
    # THE lowering property: an integer acc at exponent e_in, requantized by shift s, is the
    # code at exponent e_out = e_in - s that fake_quant gives for the real value acc * 2**-e_in.
    a = np.array(acc, dtype=np.int64)
    e_out = e_in - shift
    x = np.ldexp(a.astype(np.float64), -e_in)  # exact: |acc| <= 2**53
    codes = requant(a, shift, bits, mode)
    # real value of the code: code * 2**-e_out (1-bit: the code is ±1 with magnitude 2**e_out)
    real = np.ldexp(codes.astype(np.float64), e_out if bits == 1 else -e_out)
    assert_bit_equal(real, fake_quant(x, bits, e_out, mode))
    assert codes.tolist() == quantize_to_int(x, bits, e_out, mode).tolist()


@given(
    data=st.data(),
    channels=st.integers(1, 4),
    width=st.integers(1, 4),
    bits=widths,
    mode=modes,
)
def test_requant_matches_fake_quant_per_channel(
    data: st.DataObject, channels: int, width: int, bits: int, mode: str
):
    a = np.array(
        data.draw(st.lists(accs, min_size=channels * width, max_size=channels * width))
    ).reshape(channels, width)
    e_in = np.array(
        data.draw(st.lists(st.integers(-40, 40), min_size=channels, max_size=channels))
    ).reshape(channels, 1)
    s = np.array(
        data.draw(st.lists(st.integers(-40, 40), min_size=channels, max_size=channels))
    ).reshape(channels, 1)
    e_out = e_in - s
    x = np.ldexp(a.astype(np.float64), -e_in)
    codes = requant(a, s, bits, mode)
    real = np.ldexp(codes.astype(np.float64), e_out if bits == 1 else -e_out)
    assert_bit_equal(real, fake_quant(x, bits, e_out, mode))


def reference_shift_round(acc: int, shift: int, mode: str) -> int | None:
    """Exact acc * 2**-shift rounded by mode, with Python ints; None if a left shift overflows int64."""
    if shift <= 0:
        v = acc * 2**-shift
        return v if INT64_MIN <= v <= INT64_MAX else None
    q = Fraction(acc, 2**shift)
    if mode == "trunc":
        return int(q)  # int() of a Fraction truncates toward zero
    if mode == "floor":
        return math.floor(q)
    if mode == "half_up":
        return math.floor(q + Fraction(1, 2))
    return round(q)  # Python rounds a Fraction half to even


int64s = st.integers(INT64_MIN, INT64_MAX)
shifts = st.integers(-70, 130)


@given(acc=st.lists(int64s, min_size=1, max_size=5), shift=shifts, mode=modes)
def test_shift_round_against_exact_reference_per_tensor(acc: list[int], shift: int, mode: str):
    expected = [reference_shift_round(a, shift, mode) for a in acc]
    if None in expected:
        with pytest.raises(OverflowError):
            shift_round(np.array(acc, dtype=np.int64), shift, mode)
    else:
        out = shift_round(np.array(acc, dtype=np.int64), shift, mode)
        assert out.dtype == np.int64
        assert out.tolist() == expected


@given(
    pairs=st.lists(
        st.tuples(int64s | st.integers(-100, 100), shifts | st.integers(-3, 3)),
        min_size=1,
        max_size=6,
    ),
    mode=modes,
)
def test_shift_round_against_exact_reference_per_element(pairs: list[tuple[int, int]], mode: str):
    acc = np.array([a for a, _ in pairs], dtype=np.int64)
    s = np.array([b for _, b in pairs], dtype=np.int64)
    expected = [reference_shift_round(a, b, mode) for a, b in pairs]
    if None in expected:
        with pytest.raises(OverflowError):
            shift_round(acc, s, mode)
    else:
        assert shift_round(acc, s, mode).tolist() == expected


def reference_round(x: float, mode: str) -> int:
    q = Fraction(x)  # exact
    if mode == "trunc":
        return int(q)
    if mode == "floor":
        return math.floor(q)
    if mode == "half_up":
        return math.floor(q + Fraction(1, 2))
    return round(q)


finite_floats = st.floats(allow_nan=False, allow_infinity=False)
# Values near ties and near zero, where a naive floor(x + 0.5) goes wrong.
tricky_floats = st.sampled_from(
    [
        0.49999999999999994,
        -0.49999999999999994,
        2.0**52 + 1,
        -(2.0**52) - 1,
        -0.5 + 2**-55,
        5e-324,
        -5e-324,
    ]
)


@given(xs=st.lists(finite_floats | tricky_floats, min_size=1, max_size=8), mode=modes)
def test_round_to_int_against_exact_reference(xs: list[float], mode: str):
    out = round_to_int(np.array(xs), mode)
    assert [int(v) for v in out] == [reference_round(x, mode) for x in xs]


@given(
    u=st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=8),
    bits=st.sampled_from([2, 3, 4, 8, 16]),
    k=st.integers(-50, 50),
    mode=modes,
)
def test_fake_quant_error_inside_the_range(u: list[float], bits: int, k: int, mode: str):
    # x * 2**k in [qmin, qmax]: no saturation, so the error is the rounding error alone.
    scaled = np.array(u) * (qmax(bits) if bits > 1 else 1)
    x = np.ldexp(scaled, -k)
    q = fake_quant(x, bits, k, mode)
    step = 2.0**-k
    bound = step if mode in ("trunc", "floor") else step / 2
    assert np.all(np.abs(q - x) <= bound)
    if mode == "trunc":
        assert np.all(np.abs(q) <= np.abs(x))  # toward zero
    if mode == "floor":
        assert np.all(q <= x)


@given(
    x=st.lists(st.floats(allow_nan=False), min_size=1, max_size=8),
    bits=widths,
    k=st.integers(-60, 60),
    mode=modes,
)
def test_fake_quant_grid_idempotence_and_codes(x: list[float], bits: int, k: int, mode: str):
    v = np.array(x)
    q = fake_quant(v, bits, k, mode)
    # Idempotent: a value already on the grid stays put.
    assert_bit_equal(fake_quant(q, bits, k, mode), q)
    # On the grid: integer multiples of 2**-k within the code range (1-bit: exactly ±2**k).
    if bits == 1:
        assert np.all(np.abs(q) == 2.0**k)
    else:
        c = np.ldexp(q, k)
        assert np.all(c == np.trunc(c))
        assert np.all((qmin(bits) <= c) & (c <= qmax(bits)))
    # dequantize(quantize_to_int(x)) is fake_quant(x), bit for bit.
    codes = quantize_to_int(v, bits, k, mode)
    assert (
        codes.dtype
        == {1: np.int8, 2: np.int8, 3: np.int8, 4: np.int8, 8: np.int8, 16: np.int16, 32: np.int32}[
            bits
        ]
    )
    assert_bit_equal(dequantize(codes, bits, k), q)


def reference_fake_quant(x: float, bits: int, k: int, mode: str, signed: bool) -> float:
    """``fake_quant`` of one value in exact rational arithmetic (``Fraction``): the code of
    ``x * 2**k`` rounded as ``mode`` says and clamped, times ``2**-k``; 1-bit ``±2**k``."""
    if bits == 1:
        return math.ldexp(1.0 if x >= 0 else -1.0, k)
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if math.isinf(x):
        code = hi if x > 0 else lo
    else:
        code = min(max(reference_round(Fraction(x) * Fraction(2) ** k, mode), lo), hi)
    return float(Fraction(code) * Fraction(2) ** -k) + 0.0


@given(
    x=st.lists(st.floats(allow_nan=False), min_size=1, max_size=6),
    bits=widths,
    k=st.integers(-960, 960),
    mode=modes,
    signed=st.booleans(),
)
def test_fake_quant_equals_exact_rationals_at_every_exponent(
    x: list[float], bits: int, k: int, mode: str, signed: bool
):
    """Over the whole exponent range (|k| <= 960, where ``x * 2**k`` overflows or lands among
    the subnormals), every value equals the exact rational oracle bit for bit. Kills: the
    power ``2**k`` taken as a float32 (0 or inf beyond ±127), the scaling by ``2**-k``
    (the inverse) on the way in."""
    signed = signed or bits == 1
    out = fake_quant(np.array(x), bits, k, mode, signed=signed)
    assert_bit_equal(out, [reference_fake_quant(v, bits, k, mode, signed) for v in x])


@given(
    x=st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=6),
    bits=widths,
    k=st.integers(-60, 60),
    mode=modes,
)
def test_fake_quant_float32_equals_float64(x: list[float], bits: int, k: int, mode: str):
    v32 = np.array(x, dtype=np.float32)
    assert_bit_equal(
        fake_quant(v32, bits, k, mode), fake_quant(v32.astype(np.float64), bits, k, mode)
    )


def reference_pack(codes: list[int], bits: int) -> bytes:
    """Bit-string packing: two's complement fields, first code most significant, zero padding."""
    if bits == 1:
        fields = ["1" if c == -1 else "0" for c in codes]
    else:
        fields = [format(c % 2**bits, f"0{bits}b") for c in codes]
    s = "".join(fields)
    s += "0" * (-len(s) % 8)
    return bytes(int(s[i : i + 8], 2) for i in range(0, len(s), 8))


@given(data=st.data(), bits=st.sampled_from([1, 2, 4, 8]), count=st.integers(0, 41))
def test_pack_unpack_round_trip(data: st.DataObject, bits: int, count: int):
    if bits == 1:
        codes = data.draw(st.lists(st.sampled_from([-1, 1]), min_size=count, max_size=count))
    else:
        codes = data.draw(
            st.lists(st.integers(qmin(bits), qmax(bits)), min_size=count, max_size=count)
        )
    packed = pack_bits(np.array(codes, dtype=np.int64), bits)
    assert len(packed) == math.ceil(count * bits / 8)
    assert packed == reference_pack(codes, bits)
    out = unpack_bits(packed, bits, count)
    assert out.dtype == np.int8
    assert out.tolist() == codes


positive_absmax = st.floats(2.0**-40, 2.0**40)


@given(a=positive_absmax, bits=st.sampled_from([2, 3, 4, 8, 16]))
def test_exp_from_absmax_rule_guarantee(a: float, bits: int):
    (k,) = exp_from_absmax(np.array([a]), bits).tolist()
    # k = floor(log2(2**(b-1)/a)) means: the largest k with a * 2**k <= 2**(b-1). Fractions are exact.
    assert Fraction(a) * Fraction(2) ** k <= 2 ** (bits - 1)
    assert Fraction(a) * Fraction(2) ** (k + 1) > 2 ** (bits - 1)
    # Hence -a never clamps and +a clamps only when a*2**k == 2**(b-1): both within one step.
    q = fake_quant(np.array([a, -a]), bits, k)
    assert np.all(np.abs(q - np.array([a, -a])) <= 2.0**-k)
    assert quantize_to_int(np.array([-a]), bits, k).tolist() == [
        math.trunc(Fraction(-a) * Fraction(2) ** k)
    ]


@given(a=positive_absmax)
def test_exp_from_absmax_one_bit(a: float):
    (k,) = exp_from_absmax(np.array([a]), 1).tolist()
    # k = floor(log2 a): 2**k <= a < 2**(k+1).
    assert Fraction(2) ** k <= Fraction(a) < Fraction(2) ** (k + 1)


@given(
    data=st.data(),
    channels=st.integers(1, 3),
    width=st.integers(1, 6),
    bits=st.sampled_from([1, 2, 4, 8]),
    mode=modes,
    per_channel=st.booleans(),
)
def test_exp_mse_optimal_is_no_worse_than_the_absmax_rule(
    data: st.DataObject, channels: int, width: int, bits: int, mode: str, per_channel: bool
):
    n = channels * width
    x = np.array(data.draw(st.lists(st.floats(-1e6, 1e6), min_size=n, max_size=n))).reshape(
        channels, width
    )
    axis = 0 if per_channel else None
    k_rule = exp_from_absmax(channel_absmax(x, axis=axis), bits)
    k_mse = exp_mse_optimal(x, bits, axis=axis, mode=mode)
    assert k_mse.shape == k_rule.shape
    assert np.all(np.abs(k_mse.astype(np.int64) - k_rule) <= 3)  # inside the default window

    def sq_error(k: np.ndarray) -> np.ndarray:
        err = fake_quant(x, bits, k, mode) - x
        return np.sum(err * err, axis=1 if per_channel else None)

    # Relative slack only for float summation order; the comparison itself is the property.
    assert np.all(sq_error(k_mse) <= sq_error(k_rule) * (1 + 1e-12))
