"""A conv of zero-inserted codes in integer ONNX (``polyphase``): one conv of the small input
per output phase, interleaved and cropped. Against an oracle written here (the zeros put in
with NumPy strides, the conv summed over sliding windows in int64, the requant in Python
integers) and the NumPy executor, on every kernel the writer picks (fused, float32, integer
bytes), every rounding mode, 1-D and 2-D, any ratio, offset, kernel, padding and groups."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.integer import export_model, make_session, run_model

import nanoir
from nanoir.testing.oracles import requant_oracle
from nanoir.testing.programs import examples

pytest.importorskip("onnxruntime")

MODES = ["trunc", "floor", "half_up", "half_even"]


def _dense(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a), separator=", ", threshold=10**9).replace("\n", "")


def _t(shape: list[int], dtype: str, enc: str) -> str:
    dims = "x".join(["?", *map(str, shape[1:])])
    return f"tensor<{dims}x{dtype}, {enc}>"


def _program(
    x_shape: list[int],
    dtype: str,
    ratios: list[int],
    offsets: list[int],
    w: np.ndarray,
    bias: np.ndarray | None,
    pads: list[int],
    groups: int,
    tail: tuple[str, list[int], str] | None,
) -> str:
    """``upsample_zero`` then ``conv`` (then ``requant`` by ``tail``: mode, per-channel
    shifts, result dtype), exponents 0."""
    n = len(ratios)
    lay = "BCMD"[: 2 + n] if n == 2 else "BCD"
    big = [*x_shape[:2], *(d * r for d, r in zip(x_shape[2:], ratios))]
    out = [
        x_shape[0],
        w.shape[0],
        *(b + p0 + p1 - k + 1 for b, p0, p1, k in zip(big[2:], pads[:n], pads[n:], w.shape[2:])),
    ]
    fx = f"#nh.fixed<0, {lay}>"
    tx, tu = _t(x_shape, dtype, fx), _t(big, dtype, fx)
    tw = f"tensor<{'x'.join(map(str, w.shape))}xi8, #nh.fixed<0, {'CCDD'[: 2 + n]}>>"
    tacc = _t(out, "i32", fx)
    lines = [
        f'  %w = nh.constant "w" dense<{_dense(w)}> : tensor<{"x".join(map(str, w.shape))}xi8>'
        f" -> {tw}",
        f"  %u = nh.upsample_zero %x {{offsets = array<i64: {', '.join(map(str, offsets))}>}}"
        f" : {tx} -> {tu}",
    ]
    attrs = f"pads = array<i64: {', '.join(map(str, pads))}>, groups = {groups} : i64"
    if bias is None:
        lines.append(f"  %acc = nh.conv %u, %w {{{attrs}}} : ({tu}, {tw}) -> {tacc}")
    else:
        tb = f"tensor<{w.shape[0]}xi32, #nh.fixed<0, C>>"
        lines.append(
            f'  %b = nh.constant "b" dense<{_dense(bias)}> : tensor<{w.shape[0]}xi32> -> {tb}'
        )
        lines.append(f"  %acc = nh.conv %u, %w, %b {{{attrs}}} : ({tu}, {tw}, {tb}) -> {tacc}")
    result, ty = "%acc", tacc
    if tail is not None:
        mode, shifts, rtype = tail
        ty = _t(out, rtype, f"#nh.fixed<[{', '.join(str(-s) for s in shifts)}], {lay}>")
        lines.append(
            f"  %y = nh.requant %acc {{shift = array<i64: {', '.join(map(str, shifts))}>, "
            f"rounding = #nq.rounding<{mode}>}} : {tacc} -> {ty}"
        )
        result = "%y"
    body = "\n".join(lines)
    return f"func.func @main(%x: {tx}) -> {ty} {{\n{body}\n  func.return {result} : {ty}\n}}\n"


def _oracle_sums(
    x: np.ndarray, ratios: list[int], offsets: list[int], w: np.ndarray, bias, pads, groups
) -> np.ndarray:
    """The conv of the zero-inserted ``x``, summed over NumPy sliding windows in int64."""
    n = len(ratios)
    up = np.zeros([*x.shape[:2], *(d * r for d, r in zip(x.shape[2:], ratios))], np.int64)
    up[(..., *(slice(o, None, r) for o, r in zip(offsets, ratios)))] = x
    up = np.pad(up, [(0, 0), (0, 0), *zip(pads[:n], pads[n:])])
    windows = np.lib.stride_tricks.sliding_window_view(up, w.shape[2:], axis=tuple(range(2, 2 + n)))
    per, outs = x.shape[1] // groups, w.shape[0] // groups
    parts = []
    for g in range(groups):
        win = windows[:, g * per : (g + 1) * per]  # [N, per, *out, *K]
        wg = w[g * outs : (g + 1) * outs].astype(np.int64)  # [outs, per, *K]
        k = "".join("klmn"[:n])
        o = "".join("pqrs"[:n])
        parts.append(np.einsum(f"nc{o}{k},dc{k}->nd{o}", win, wg))
    acc = np.concatenate(parts, axis=1)
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(1, -1, *(1,) * n)
    return acc


@settings(max_examples=examples(40), deadline=None)
@given(
    dtype=st.sampled_from(["i8", "ui8", "i4", "i16"]),
    n=st.sampled_from([1, 2, 2]),
    groups=st.sampled_from([1, 2]),
    tail=st.sampled_from(["acc", *MODES]),
    fused=st.sampled_from([None, "u8u8"]),
    data=st.data(),
)
def test_phase_convs_equal_the_conv_of_the_zeros(
    dtype: str, n: int, groups: int, tail: str, fused: str | None, data: st.DataObject
) -> None:
    """Codes equal the oracle's and the NumPy executor's, over a dynamic batch, pads past the
    kernel included. Kills: the phases interleaved DCR; a tap's phase read from ``a -
    offset``; the end crop left out; the end pad one short; a phase conv's shifts or biases
    taken per phase rather than per channel (``tile`` for ``repeat``)."""
    ratios = [data.draw(st.integers(1, 4)) for _ in range(n)]
    offsets = [data.draw(st.integers(0, r - 1)) for r in ratios]
    kernel = [data.draw(st.integers(1, 5)) for _ in range(n)]
    pads = [data.draw(st.integers(0, k + 2)) for k in kernel for _ in range(2)]
    pads = pads[0::2] + pads[1::2]
    small = [data.draw(st.integers(1, 5)) for _ in range(n)]
    big = [d * r for d, r in zip(small, ratios)]
    if any(b + p0 + p1 < k for b, p0, p1, k in zip(big, pads[:n], pads[n:], kernel)):
        pads = [*(k for k in kernel), *(0 for _ in kernel)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    c, o = 2 * groups, 2 * groups
    w = rng.integers(-128, 128, (o, c // groups, *kernel))
    bias = rng.integers(-3000, 3000, o) if data.draw(st.booleans()) else None
    bits = int(dtype.lstrip("ui"))
    lo, hi = (0, 2**bits) if dtype.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1))
    batch = data.draw(st.integers(1, 3))
    x = rng.integers(lo, hi, [batch, c, *small])
    x = x.astype(np.uint8 if dtype == "ui8" else np.int16 if bits > 8 else np.int8)
    shifts = [int(s) for s in rng.integers(6, 12, o)]
    rtype = "ui8" if tail != "acc" and data.draw(st.booleans()) else "i8"
    module = nanoir.parse(
        _program(
            [batch, c, *small],
            dtype,
            ratios,
            offsets,
            w,
            bias,
            pads,
            groups,
            None if tail == "acc" else (tail, shifts, rtype),
        )
    )
    want = _oracle_sums(x, ratios, offsets, w, bias, pads, groups)
    if tail != "acc":
        ylo, yhi = (0, 255) if rtype == "ui8" else (-128, 127)
        want = np.stack(
            [requant_oracle(want[:, j], shifts[j], tail, ylo, yhi) for j in range(o)], axis=1
        )
    (numpy_y,) = nanoir.run(module, x, raw=True)
    assert np.array_equal(np.asarray(numpy_y).astype(np.int64), want)
    (got,) = run_model(make_session(export_model(module, fused=fused)), [x])
    assert np.array_equal(np.asarray(got).astype(np.int64), want)


@pytest.mark.parametrize("fused", [None, "u8u8"])
@pytest.mark.parametrize("offsets", [[0, 0], [1, 0], [1, 1]])
def test_a_3x3_conv_of_a_x2_zero_unpooling_is_a_2x2_conv_of_the_small_map(
    fused: str | None, offsets: list[int]
) -> None:
    """The CRNN's pattern (x2 zeros, 3x3 conv padded by 1): no zeros are made (no ``Pad``),
    the conv is 2x2 with four times the channels on the small map, and the codes are the
    oracle's."""
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (3, 4, 3, 3))
    x = rng.integers(0, 256, (2, 4, 5, 6)).astype(np.uint8)
    module = nanoir.parse(
        _program(
            [2, 4, 5, 6],
            "ui8",
            [2, 2],
            offsets,
            w,
            None,
            [1, 1, 1, 1],
            1,
            ("half_even", [9, 8, 10], "ui8"),
        )
    )
    model = export_model(module, fused=fused)
    ops = [n.op_type for n in model.graph.node]
    assert "Pad" not in ops
    (conv,) = [n for n in model.graph.node if "Conv" in n.op_type]
    kernel = next(a.ints for a in conv.attribute if a.name == "kernel_shape")
    assert list(kernel) == [2, 2]
    weights = {t.name: t for t in model.graph.initializer}
    assert (
        next(weights[i].dims[0] for i in conv.input if i in weights and len(weights[i].dims) == 4)
        == 12
    )
    want = _oracle_sums(x, [2, 2], offsets, w, None, [1, 1, 1, 1], 1)
    want = np.stack(
        [requant_oracle(want[:, j], s, "half_even", 0, 255) for j, s in enumerate([9, 8, 10])],
        axis=1,
    )
    (got,) = run_model(make_session(model), [x])
    assert np.array_equal(np.asarray(got).astype(np.int64), want)


def test_sessions_leave_the_writers_pools_alone() -> None:
    """``make_session`` turns off onnxruntime's QDQ rewrites: its propagation would move the
    requant's ``QuantizeLinear`` after a phase conv's interleave above the float32 ``MaxPool``
    the writer chose, into onnxruntime's scalar uint8 pool. Kills: the entry left out."""
    rng = np.random.default_rng(0)
    module = nanoir.parse(
        _program(
            [1, 2, 3, 3],
            "ui8",
            [2, 2],
            [0, 0],
            rng.integers(-9, 9, (2, 2, 3, 3)),
            None,
            [1, 1, 1, 1],
            1,
            ("half_even", [4, 4], "ui8"),
        )
    )
    options = make_session(export_model(module)).get_session_options()
    assert options.get_session_config_entry("session.disable_quant_qdq") == "1"


def test_sums_that_may_leave_int32_keep_the_zeros() -> None:
    """int32 codes, whose sums may leave int32: the writer checks them at run time, where a
    phase conv's cropped positions would count too, so it keeps the zero insertion (a
    ``Pad``) and its conv; the codes (small here) equal the oracle's. Kills: the phase form
    taken past int32."""
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (2, 2, 3, 3))
    x = rng.integers(-1000, 1000, (2, 2, 3, 4)).astype(np.int32)
    module = nanoir.parse(
        _program([2, 2, 3, 4], "i32", [2, 2], [1, 0], w, None, [1, 1, 1, 1], 1, None)
    )
    model = export_model(module)
    assert "Pad" in [n.op_type for n in model.graph.node]
    (got,) = run_model(make_session(model), [x])
    want = _oracle_sums(x, [2, 2], [1, 0], w, None, [1, 1, 1, 1], 1)
    assert np.array_equal(np.asarray(got).astype(np.int64), want)
