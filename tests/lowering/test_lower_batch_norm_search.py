"""The batch-norm affine search of lower-to-hw, all channels at once (``affine_search_channels``)
against its definition written here: per channel, the coarsest exponent ``e`` (from -32 up)
whose nearest integers ``M ~ a 2**e``, ``N ~ b 2**(x_exp + e)`` (or, with at most 4 codes
wrong, a neighbour pair) requantize every input code to ``want``, stopping at the first ``e``
that does not fit i32.

Mutants of ``affine_search_channels`` the tests here caught (run in a private copy):
``bound <= 4`` -> ``bound < 4`` (a candidate with 4 wrong sampled codes dropped),
``np.rint`` -> ``np.floor`` (M and N no longer the nearest integers), ``first_bad`` one
exponent late, the neighbour step skipped (only ``wrong == 0`` settles a channel) or its
pairs taken in reverse order, the rounds resuming at ``e_idx + 2`` (a candidate exponent
skipped), the accumulator end-point bound ``<= ACC_LIMIT`` -> ``< 2**30``, and, in the
pattern, either exponent left out of the kind of channel.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.hw.channel_wise import affine_search, affine_search_channels
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode

from nanoir.testing.programs import examples

LIMIT = 2**31 - 1


def definition(codes, want, a, b, x_exp, out_exp, bits, mode, x_bits):
    """The search for one channel, one exponent at a time, with Python integers."""
    c = [int(v) for v in codes]
    for e in range(-32, 63):
        m0, n0 = a * 2.0**e, b * 2.0 ** (x_exp + e)
        m, n = round(m0), round(n0)
        m_bits = max((m if m >= 0 else -m - 1).bit_length() + 1, 2)
        if x_bits + m_bits + 1 > 32 or abs(n) > LIMIT or max(abs(v * m + n) for v in c) > LIMIT:
            return None
        shift = x_exp + e - out_exp

        def wrong(mm: int, nn: int) -> int:
            acc = np.array([v * mm + nn for v in c], dtype=np.int64)
            return int(np.count_nonzero(quant.requant(acc, shift, bits, mode) != want))

        w = wrong(m, n)
        if w == 0:
            return e, m, n
        if w > 4:
            continue
        for mm in sorted({math.floor(m0), math.ceil(m0)}, key=lambda v: abs(v - m0)):
            for nn in sorted(range(n - 2, n + 3), key=lambda v: abs(v - n0)):
                if max(abs(v * mm + nn) for v in c) <= LIMIT and wrong(mm, nn) == 0:
                    return e, mm, nn
    return None


@st.composite
def channels(draw):
    """Channels of a batch norm read by a fake-quant: what the nq kernel gives for every
    input code, sometimes with a few codes moved by one (as float64 rounding next to a
    boundary does), or many (no affine at all)."""
    x_bits = draw(st.sampled_from((1, 2, 4, 8)))
    bits = draw(st.sampled_from((2, 4, 8)))
    mode = draw(st.sampled_from(list(RoundingMode)))
    n_ch = draw(st.integers(1, 6))
    codes = (
        np.array([-1, 1]) if x_bits == 1 else np.arange(quant.qmin(x_bits), quant.qmax(x_bits) + 1)
    )
    x_exps = np.array([draw(st.integers(-4, 8)) for _ in range(n_ch)])
    out_exps = np.array([draw(st.integers(-4, 8)) for _ in range(n_ch)])
    a = np.array(
        [
            draw(st.sampled_from((-1.0, 1.0)))
            * 2.0 ** draw(st.floats(-12, 12))
            * draw(st.sampled_from((1.0, 1.0, 0.0)))
            for _ in range(n_ch)
        ]
    )
    b = np.array([draw(st.floats(-4, 4)) for _ in range(n_ch)])
    reals = np.ldexp(codes[None, :].astype(np.float64), -x_exps[:, None])
    want = quant.quantize_to_int(reals * a[:, None] + b[:, None], bits, out_exps[:, None], mode)
    want = want.astype(np.int64)
    for ch in range(n_ch):
        moved = draw(st.sampled_from((0, 0, 1, 2, 4, 5, 40)))
        for i in draw(st.lists(st.integers(0, len(codes) - 1), min_size=moved, max_size=moved)):
            want[ch, i] = quant.requant(np.array([want[ch, i] + 1]), 0, bits)[0]
    return codes, want, a, b, x_exps, out_exps, bits, mode, x_bits


@settings(max_examples=examples(60), deadline=None)
@given(channels())
def test_all_channels_at_once_equal_the_definition(case) -> None:
    codes, want, a, b, x_exps, out_exps, bits, mode, x_bits = case
    expected = [
        definition(codes, want[c], a[c], b[c], int(x_exps[c]), int(out_exps[c]), bits, mode, x_bits)
        for c in range(len(a))
    ]
    got = affine_search_channels(codes, want, a, b, x_exps, out_exps, bits, mode, x_bits)
    assert got == expected
    # The one-channel search (the non-finite fallback) is the same definition.
    for c in range(len(a)):
        one = affine_search(
            codes, want[c], a[c], b[c], int(x_exps[c]), int(out_exps[c]), bits, mode, x_bits
        )
        assert one == expected[c]


def test_channels_found_by_neighbours_and_none() -> None:
    """The three outcomes, pinned: a channel found at its nearest integers, one found only by
    a neighbour pair (its last code moved up by one), and one with no affine (alternating
    codes), side by side."""
    codes = np.arange(-8, 8)
    mode = RoundingMode.TRUNC
    a = np.array([0.75, 1.8018840002969372, 1.0])
    b = np.array([0.1, 0.6447476550861408, 0.0])
    x_exps, out_exps = np.array([2, 2, 2]), np.array([1, 1, 1])
    reals = np.ldexp(codes[None, :].astype(np.float64), -2)
    want = quant.quantize_to_int(reals * a[:, None] + b[:, None], 4, 1, mode).astype(np.int64)
    want[1, 15] = 7
    want[2] = np.where(codes % 2 == 0, 7, -8)
    expected = [definition(codes, want[c], a[c], b[c], 2, 1, 4, mode, 4) for c in range(3)]
    assert expected == [(3, 6, 3), (5, 58, 81), None]
    assert (round(a[1] * 2.0**5), round(b[1] * 2.0**7)) == (58, 83)  # a neighbour's N
    assert affine_search_channels(codes, want, a, b, x_exps, out_exps, 4, mode, 4) == expected


def test_channels_with_the_same_parameters_keep_their_own_exponents() -> None:
    """A lone batch norm whose channels repeat the same parameters but not the same exponents:
    each channel gets its own affine, nq == nh bit for bit on every input code. The pattern
    searches each kind of channel once; the kind must include both exponents. Channels 0 and
    1: the same output exponent (the bias dominates), input exponents 3 apart; channels 2 and
    3: the same input exponent, output exponents apart (mutants caught: the input exponents,
    or the output ones, left out of the kind)."""
    import torch
    from nanoir.lowering.fold_bn import FoldBnPass
    from nanoir.lowering.lower_to_hw import lower_to_hw
    from nanoir.runtime.interpreter import run
    from torch import nn

    import nanoir

    bn = nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.1, 0.1, 3.0, 3.0]))
        bn.bias.copy_(torch.tensor([4.0, 4.0, 0.3, 0.3]))
        bn.running_mean.zero_()
        bn.running_var.fill_(1.0)
    # Calibration: channel c spans exactly [-absmax[c], absmax[c]].
    absmax = torch.tensor([1.0, 8.0, 1.0, 0.55]).reshape(1, 4, 1, 1)
    x = torch.linspace(-1.0, 1.0, 16).reshape(1, 1, 4, 4) * absmax
    module = nanoir.from_torch(bn, (x,))
    FoldBnPass().apply(nanoir.make_context(), module)
    nanoir.quantize(module, [x.numpy()], act_per_channel=True)
    hw = lower_to_hw(module.clone())
    func = next(iter(hw.body.block.ops))
    k_in = [e.data for e in func.args[0].type.encoding.exps.data]
    k_out = [e.data for e in func.function_type.outputs.data[0].encoding.exps.data]
    assert k_in[0] != k_in[1] and k_out[0] == k_out[1]
    assert k_in[2] == k_in[3] and k_out[2] != k_out[3]
    # Every 8-bit input code of every channel, at each channel's own exponent.
    codes = np.arange(-128, 128, dtype=np.float64).reshape(16, 1, 4, 4)
    inputs = np.ldexp(np.broadcast_to(codes, (16, 4, 4, 4)), -np.reshape(k_in, (1, 4, 1, 1)))
    want = run(module, inputs, dtype=np.float64)[0]
    got = run(hw, inputs)[0]
    assert np.array_equal(got, want)


def test_no_affine_once_the_first_exponent_overflows() -> None:
    """A scale so large that ``M`` overflows i32 at the coarsest exponent: no affine, even for
    codes that ``M = N = 0`` would give (mutant caught: the search going one exponent past
    the first that does not fit)."""
    codes = np.arange(-128, 128)
    want = np.zeros((2, 256), dtype=np.int64)
    a, b = np.array([2.0**60, 0.5]), np.array([0.0, 0.0])
    exps = np.array([0, 0])
    args = (codes, want, a, b, exps, exps, 8, RoundingMode.TRUNC, 8)
    expected = [
        definition(codes, want[c], a[c], b[c], 0, 0, 8, RoundingMode.TRUNC, 8) for c in (0, 1)
    ]
    assert expected == [None, (-32, 0, 0)]
    assert affine_search_channels(*args) == expected


def test_an_accumulator_just_within_i32() -> None:
    """A bias 2**-24 below 100 needs ``e = 24``, where ``|c * M + N|`` reaches 1.85e9, above
    2**30 and within i32: found (mutant caught: the i32 bound on the accumulator's end points
    tightened to 2**30)."""
    codes = np.arange(-8, 8)
    a, b = np.array([1.5]), np.array([100 - 2.0**-24])
    want = quant.quantize_to_int(codes * a[0] + b[0], 8, 0, RoundingMode.TRUNC)
    want = want.astype(np.int64).reshape(1, -1)
    zero = np.array([0])
    expected = definition(codes, want[0], a[0], b[0], 0, 0, 8, RoundingMode.TRUNC, 4)
    assert expected == (24, 25165824, 1677721599)
    found = affine_search_channels(codes, want, a, b, zero, zero, 8, RoundingMode.TRUNC, 4)
    assert found == [expected]
