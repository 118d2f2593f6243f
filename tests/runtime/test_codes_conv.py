"""A quantized conv on float32 codes (``nanoir.runtime.codes_conv``) against integer arithmetic.

The oracle is written here: the codes' convolution in int64 (a sliding window and a sum),
times ``2**-(k_x + k_w[o])``, plus the bias in float64. Both the float32 path (where the
bound ``K * max|c_x| * max|c_w| <= 2**24`` holds) and the float64 fallback must equal it bit
for bit; extreme codes (every code at its largest magnitude) put the sums at the bound.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects.functions import find_function
from nanoir.dialects.nf import ConvOp
from nanoir.runtime.codes_conv import exact_conv

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
    lose bits in float32), the unit's exponent sign flipped, a 1-bit weight's exponent not
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
    # the float32 path is taken exactly where the bound holds
    conv = next(op for op in find_function(module, None).walk() if isinstance(op, ConvOp))
    x_bound = max(abs(v) for v in code_range(bx, sx))
    w_bound = max(abs(v) for v in code_range(bw, sw))
    within = cw[0].size * x_bound * w_bound <= 2**24  # every partial sum a float32 integer
    fell_back = []
    kernel = exact_conv(conv, lambda *a: np.zeros(want.shape), lambda *a: fell_back.append(1))
    assert (kernel is not None) == within
    if kernel is not None:  # and the codes on their grid pass its run-time check
        kernel(x.astype(np.float64), w.astype(np.float64))
        assert not fell_back


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
