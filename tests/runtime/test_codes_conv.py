"""A quantized conv on float32 codes (``nanoir.runtime.codes_conv``) against integer arithmetic.

The oracle is written here: the codes' convolution in int64 (a sliding window and a sum),
times ``2**-(k_x + k_w[o])``, plus the bias in float64. The float32 path (one conv, or one per
chunk of input channels whose sums stay within ``2**24``) and the float64 fallback must equal
it bit for bit; extreme codes (every code at its largest magnitude) put the sums at the bound,
and odd codes past it (sums that float32 would round) catch a chunk too long.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects.functions import find_function
from nanoir.dialects.nf import ConvOp
from nanoir.runtime.codes_conv import exact_conv
from nanoir.runtime.numerics import kernels

import nanoir
from nanoir.testing.programs import examples


def code_range(bits: int, signed: bool) -> tuple[int, int]:
    if bits == 1:
        return -1, 1
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)


def oracle(cx, cw, kx, kw, b, strides, pads, dilations, groups) -> np.ndarray:
    """int64 convolution of the codes, scaled exactly, plus the bias."""
    n, c, h, w = cx.shape
    o, cg, kh, kwid = cw.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), np.int64)
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + w] = cx
    oh = (xp.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dilations[1] * (kwid - 1) - 1) // strides[1] + 1
    acc = np.zeros((n, o, oh, ow), np.int64)
    per = o // groups
    for oc in range(o):
        g = oc // per
        for i in range(kh):
            for j in range(kwid):
                window = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * dilations[0] : i * dilations[0] + strides[0] * (oh - 1) + 1 : strides[0],
                    j * dilations[1] : j * dilations[1] + strides[1] * (ow - 1) + 1 : strides[1],
                ]
                acc[:, oc] += np.einsum("nchw,c->nhw", window, cw[oc, :, i, j].astype(np.int64))
    unit = np.array([2.0 ** -(kx + int(k)) for k in kw]).reshape(1, o, 1, 1)
    y = acc.astype(np.float64) * unit  # exact: |acc| <= 2**53
    return y + b.astype(np.float64).reshape(1, o, 1, 1)


def program(x_shape, w_shape, y_shape, bx, kx, sx, bw, kw, sw, strides, pads, dil, groups) -> str:
    def t(shape):
        return "tensor<" + "x".join(str(d) for d in shape) + "xf32>"

    kws = ", ".join(f"[[[{k}]]]" for k in kw)
    sign = lambda s: "" if s else ", signed = false"  # noqa: E731
    return (
        f"func.func @main(%x: {t(x_shape)}, %w: {t(w_shape)}, %b: {t(y_shape[1:2])}) -> {t(y_shape)} {{\n"
        f"  %xq = nq.fake_quant %x {{bits = {bx} : i64, exp = dense<{kx}> : tensor<1xi8>{sign(sx)}}} : {t(x_shape)}\n"
        f"  %wq = nq.fake_quant %w {{bits = {bw} : i64, exp = dense<[{kws}]> : tensor<{w_shape[0]}x1x1x1xi8>{sign(sw)}}} : {t(w_shape)}\n"
        f"  %y = nf.conv %xq, %wq, %b {{strides = array<i64: {strides[0]}, {strides[1]}>, "
        f"pads = array<i64: {', '.join(map(str, pads))}>, dilations = array<i64: {dil[0]}, {dil[1]}>, "
        f"groups = {groups} : i64}} : ({t(x_shape)}, {t(w_shape)}, {t(y_shape[1:2])}) -> {t(y_shape)}\n"
        f"  func.return %y : {t(y_shape)}\n}}\n"
    )


@st.composite
def cases(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, 4))
    per = draw(st.integers(1, 3))
    c, o = cg * groups, per * groups
    depthwise = draw(st.booleans())
    if depthwise:  # one input channel per group, as a depthwise conv
        groups, cg, c = o, 1, o
    kh, kwid = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(dil[0] * (kh - 1) + 1, 9))
    w = draw(st.integers(dil[1] * (kwid - 1) + 1, 9))
    n = draw(st.integers(1, 2))
    bx, bw = draw(st.sampled_from([1, 2, 4, 8, 16])), draw(st.sampled_from([1, 2, 4, 8, 16]))
    sx = bx == 1 or draw(st.booleans())
    sw = bw == 1 or draw(st.booleans())
    kx = draw(st.integers(-8, 12))
    kw = [draw(st.integers(-8, 12)) for _ in range(o)]
    extreme = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))

    def codes(bits, signed, shape):
        lo, hi = code_range(bits, signed)
        if extreme:  # every code at the largest magnitude (the sums at their bound)
            return np.full(shape, lo if signed else hi, np.int64)
        c = rng.integers(lo, hi + 1, size=shape)
        return np.where(c == 0, 1, c) if bits == 1 else c

    cx = codes(bx, sx, (n, c, h, w))
    cw = codes(bw, sw, (o, cg, kh, kwid))
    b = rng.standard_normal(o)  # float64: finer than float32
    return cx, cw, bx, kx, sx, bw, kw, sw, b, strides, pads, dil, groups


@settings(max_examples=examples(150), deadline=None)
@given(cases())
def test_a_quantized_conv_equals_integer_arithmetic(case) -> None:
    """nanoir.run at float64 (the nq level) equals the int64 oracle bit for bit, on both
    sides of the float32 bound. Kills: the bound check dropped (sums of extreme 8x16-bit codes
    lose bits in float32: the float64 kernel is no longer taken), chunks shorter than
    ``MIN_F32_CHUNK`` products taken (float32 where float64 is faster), the unit's exponent
    sign flipped, a 1-bit weight's exponent not
    negated (its codes then fail the run-time check: the float32 path is never taken), the
    bias rounded to float32."""
    cx, cw, bx, kx, sx, bw, kw, sw, b, strides, pads, dil, groups = case
    # value = code * 2**-k (1-bit: code * 2**k, k the fake-quant's exponent)
    x = (cx * 2.0 ** (-kx if bx > 1 else kx)).astype(np.float32)
    w = (cw * np.array([2.0 ** (-k if bw > 1 else k) for k in kw]).reshape(-1, 1, 1, 1)).astype(
        np.float32
    )
    want = oracle(
        cx,
        cw,
        kx if bx > 1 else -kx,
        [k if bw > 1 else -k for k in kw],
        b,
        strides,
        pads,
        dil,
        groups,
    )
    text = program(x.shape, w.shape, want.shape, bx, kx, sx, bw, kw, sw, strides, pads, dil, groups)
    module = nanoir.parse(text)
    (y,) = nanoir.run(module, x, w, b, dtype=np.float64)
    np.testing.assert_array_equal(y, want)
    # the float32 path is taken exactly where the codes' own sums allow it: each whole row
    # times the largest input code within 2**24, every partial sum a float32 integer (these
    # rows are shorter than 128 products, so no split into chunks is worth a BLAS call each)
    conv = next(op for op in find_function(module, None).walk() if isinstance(op, ConvOp))
    assert cw[0].size < 128
    within = (
        int(np.abs(cw).reshape(cw.shape[0], -1).sum(axis=1).max()) * int(np.abs(cx).max()) <= 2**24
    )
    fell_back = []
    kernel = exact_conv(conv, lambda *a: np.zeros(want.shape), lambda *a: fell_back.append(1))
    assert kernel is not None
    kernel(x.astype(np.float64), w.astype(np.float64))
    assert bool(fell_back) != within


def test_inputs_off_their_grid_take_the_float64_kernel() -> None:
    """A kernel called on values that are not codes on its grid (as a caller outside the
    plan might) computes the float64 conv, not a float32 rounding of it. Kills: the run-time
    check of the codes dropped."""
    text = program(
        (1, 2, 3, 3), (2, 2, 1, 1), (1, 2, 3, 3), 8, 4, True, 8, [3, 3], True, (1, 1),
        (0, 0, 0, 0), (1, 1), 1,
    )  # fmt: skip
    module = nanoir.parse(text)
    conv = next(op for op in find_function(module, None).walk() if isinstance(op, ConvOp))
    called = []
    kernel = exact_conv(conv, lambda *a: None, lambda *a: called.append(a) or ("plain",))
    assert kernel is not None
    x = np.full((1, 2, 3, 3), 0.1, np.float64)  # not a multiple of 2**-4
    w = np.full((2, 2, 1, 1), 0.125, np.float64)
    assert kernel(x, w) == ("plain",) and len(called) == 1


@pytest.mark.parametrize(("k", "c"), [(3, 256), (1, 2100)])
def test_long_sums_are_chunked_by_input_channel_and_stay_exact(k: int, c: int) -> None:
    """8-bit ``k x k`` convs of ``c`` channels whose sums pass ``2**24``: input codes 127 (125
    at random elsewhere, the first pixel all 127), weights ±127 or ±125 (one sign per row).
    Float32 rounds the odd sums past ``2**24``; the kernel splits the input channels into
    chunks that each fit by the codes' own sums (the 1x1 case: exactly 1040 channels of 127 x
    127 each, and 1041 would give an odd sum just past ``2**24``), runs each in float32 and adds
    in float64: equal to the int64 oracle, the float64 kernel never called. Kills: a chunk
    allowed up to ``2**25`` (``channel_chunks``'s bound), the chunks' sum taken in float32, a
    chunk one channel too long."""
    rng = np.random.default_rng(7)
    n, o, h = 1, 3, 3
    cx = rng.choice([125, 127], size=(n, c, h, h))
    cx[:, :, 0, 0] = 127
    cw = rng.choice([125, 127], size=(o, c, k, k)) * rng.choice([-1, 1], size=(o, 1, 1, 1))
    cw[0] = 127
    kx, kw = 4, [6, 6, 6]
    b = np.zeros(o)
    pad = k // 2
    strides, pads, dil = (1, 1), (pad,) * 4, (1, 1)
    want = oracle(cx, cw, kx, kw, b, strides, pads, dil, 1)
    assert np.abs(want).max() * 2.0 ** (kx + 6) > 2**24  # the sums do pass float32's integers
    x = (cx * 2.0**-kx).astype(np.float32)
    w = (cw * 2.0**-6).astype(np.float32)
    text = program(x.shape, w.shape, want.shape, 8, kx, True, 8, kw, True, strides, pads, dil, 1)
    module = nanoir.parse(text)
    (y,) = nanoir.run(module, x, w, b, dtype=np.float64)
    np.testing.assert_array_equal(y, want)
    conv = next(op for op in find_function(module, None).walk() if isinstance(op, ConvOp))
    chunks, fell_back = [], []

    def spy(xs, ws, b=None):
        chunks.append(xs.shape[1])
        return kernels.conv(xs, ws, None, pads=pads)

    kernel = exact_conv(conv, spy, lambda *a: fell_back.append(1))
    (got,) = kernel(x.astype(np.float64), w.astype(np.float64), b)
    np.testing.assert_array_equal(got, want)
    assert not fell_back and len(chunks) >= 2 and sum(chunks) == c


def test_short_chunks_take_the_float64_kernel() -> None:
    """16-bit input codes of 32767 times 8-bit weights of 127 in a 1x1 conv of 300 channels:
    each channel fits ``2**24`` alone (``2**22``-ish) but only 4 fit together, so chunks of 4
    products would each cost a BLAS call: the float64 kernel runs instead (and equals the
    oracle). Kills: the ``MIN_F32_CHUNK`` check dropped (75 float32 calls of 4 channels)."""
    c, o = 300, 2
    cx = np.full((1, c, 2, 2), 32767)
    cw = np.full((o, c, 1, 1), 127)
    kx, kw = 10, [5, 5]
    b = np.zeros(o)
    want = oracle(cx, cw, kx, kw, b, (1, 1), (0,) * 4, (1, 1), 1)
    x = (cx * 2.0**-kx).astype(np.float32)
    w = (cw * 2.0**-5).astype(np.float32)
    text = program(
        x.shape, w.shape, want.shape, 16, kx, True, 8, kw, True, (1, 1), (0,) * 4, (1, 1), 1
    )
    module = nanoir.parse(text)
    (y,) = nanoir.run(module, x, w, b, dtype=np.float64)
    np.testing.assert_array_equal(y, want)
    conv = next(op for op in find_function(module, None).walk() if isinstance(op, ConvOp))
    chunks, fell_back = [], []
    kernel = exact_conv(conv, lambda *a: chunks.append(a), lambda *a: fell_back.append(1))
    kernel(x.astype(np.float64), w.astype(np.float64), b)
    assert fell_back and not chunks
