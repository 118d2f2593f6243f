"""The fast kernels the integer ONNX writer uses, checked exact before use (issue 33 §1), and the
static bounds that choose them.

- onnxruntime's ``QLinearConv`` / ``QLinearMatMul`` at extreme codes (uint8 255 beside int8 127
  or -128, where a pair of products leaves int16), uint8 x uint8, uint8 x int8 and int8 x int8,
  against their exact sums written here in Python integers, requantized by a power of two with
  round half to even. onnxruntime picks its x86 kernels from the CPU alone (MLAS's
  ``platform.cpp`` reads cpuid; no setting forces its AVX2 path on a VNNI machine), so the
  uint8 x int8 path's exactness is this machine's: the writer asks
  :func:`~nanoir.grammar.onnx.integer.session.fused_kernel_is_exact` per kernel (which must
  agree with this test) and a session on a machine where it fails refuses a graph that uses
  them.
- Programs whose accumulator passes ``2**24`` by one code, where float32 (in a float conv or in
  the fused kernel's requantization) would round it: the writer must use the integer kernels
  there, in half_even and trunc.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.integer import (
    FUSED_KERNELS,
    export_model,
    fused_kernel,
    fused_kernel_is_exact,
    make_session,
    run_model,
    u8s8_is_exact,
)
from onnx import TensorProto, helper

import nanoir
from nanoir.testing.oracles import requant_oracle
from nanoir.testing.programs import examples

ort = pytest.importorskip("onnxruntime")

DTYPES = {"u8": (np.uint8, TensorProto.UINT8, 0, 255), "s8": (np.int8, TensorProto.INT8, -128, 127)}


def _extremes(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    dtype, _, lo, hi = DTYPES[kind]
    a = rng.choice([lo, hi], size=shape)
    noise = rng.random(shape) < 0.15
    a[noise] = rng.integers(lo, hi + 1, size=int(noise.sum()))
    return a.astype(dtype)


def _run(node: onnx.NodeProto, x: np.ndarray, consts: dict[str, np.ndarray], xk: str, yk: str):
    graph = helper.make_graph(
        [node],
        "k",
        [helper.make_tensor_value_info("x", DTYPES[xk][1], list(x.shape))],
        [helper.make_tensor_value_info("y", DTYPES[yk][1], None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options)
    (y,) = session.run(None, {"x": x})
    return np.asarray(y, dtype=np.int64)


def _kernel_is_exact(op: str, xk: str, wk: str, seed: int) -> bool:
    """One op at extreme codes against Python's exact sums, requantized by ``2**-shift``."""
    rng = np.random.default_rng(seed)
    if op == "conv":
        x = _extremes(rng, (1, 32, 5, 5), xk)
        w = _extremes(rng, (16, 32, 3, 3), wk)
        xi = np.pad(x.astype(object), ((0, 0), (0, 0), (1, 1), (1, 1)))
        exact = np.array(
            [
                [
                    [(xi[0, :, i : i + 3, j : j + 3] * w[o].astype(object)).sum() for j in range(5)]
                    for i in range(5)
                ]
                for o in range(16)
            ],
            dtype=object,
        )[None]
    else:
        x = _extremes(rng, (8, 160), xk)
        w = _extremes(rng, (160, 12), wk)
        exact = x.astype(object) @ w.astype(object)
    shift = max(int(np.abs(exact).max()).bit_length() - 7, 0)
    zy = 128 if xk == "u8" else 0
    want = [
        min(max(round(v / 2**shift) + zy, DTYPES[xk][2]), DTYPES[xk][3])  # round(): half even
        for v in exact.reshape(-1).tolist()
    ]
    consts = {
        "sx": np.array(1.0, np.float32),
        "zx": np.array(0, DTYPES[xk][0]),
        "w": w,
        "sw": np.array(2.0**-shift, np.float32),
        "zw": np.array(0, DTYPES[wk][0]),
        "sy": np.array(1.0, np.float32),
        "zy": np.array(zy, DTYPES[xk][0]),
    }
    names = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"]
    node = (
        helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
        if op == "conv"
        else helper.make_node("QLinearMatMul", names, ["y"])
    )
    got = _run(node, x, consts, xk, xk)
    return got.reshape(-1).tolist() == want


@pytest.mark.parametrize("op", ["conv", "matmul"])
def test_uint8_x_int8_kernels_agree_with_the_probe(op: str) -> None:
    """The writer's probe says what extreme codes show on this machine (exact with VNNI or
    AMX, not on AVX2 alone). Kills: the probe requantizing its reference with a floor instead
    of round half to even (it then answers False, unlike the extreme codes)."""
    exact = all(_kernel_is_exact(op, "u8", "s8", seed) for seed in range(3))
    assert exact == u8s8_is_exact() == fused_kernel_is_exact("u8s8")


@pytest.mark.parametrize("op", ["conv", "matmul"])
def test_uint8_x_uint8_and_int8_x_int8_kernels_at_the_extremes(op: str) -> None:
    """uint8 x uint8 (widened to 16 bits before the products on every x86 path) is exact, and
    the probe says so: the writer uses it where uint8 x int8 is not exact. int8 x int8 is
    where the uint8 x int8 kernels are (the writer does not use it: onnxruntime's slow path
    here)."""
    assert all(_kernel_is_exact(op, "u8", "u8", seed) for seed in range(3))
    assert fused_kernel_is_exact("u8u8")
    assert fused_kernel() == ("u8s8" if u8s8_is_exact() else "u8u8")
    if u8s8_is_exact():
        assert all(_kernel_is_exact(op, "s8", "s8", seed) for seed in range(3))


def test_unknown_kernels_are_not_exact() -> None:
    """A name outside FUSED_KERNELS (a file's metadata says what it likes) is never exact, and
    the writer refuses it."""
    assert not fused_kernel_is_exact("s8s8")
    module = nanoir.parse(_one_by_one(5, "half_even")[0])
    with pytest.raises(nanoir.Error, match="expected one of"):
        export_model(module, fused="s8s8")


def _one_by_one(target: int, mode: str) -> tuple[str, np.ndarray]:
    """A 1x1 conv over 1,100 channels and an input (most codes 127) whose ``sum x w`` is
    ``target``, requantized by 18 bits to i8 in ``mode``."""
    w = np.zeros(1100, dtype=np.int64)
    full, rest = divmod(target, 127 * 127)
    w[:full] = 127
    w[full], w[full + 1] = divmod(rest, 127)
    x = np.full((1, 1100, 1, 1), 127, np.int8)
    x[0, full + 1] = 1  # the second remainder weight's input
    assert (x.reshape(-1).astype(np.int64) * w).sum() == target
    codes = np.array2string(w.reshape(1, 1100, 1, 1), separator=", ", threshold=10**9)
    codes = codes.replace("\n", "")
    fx = "#nh.fixed<0, BCMD>"
    return (
        f"""func.func @main(%x: tensor<?x1100x1x1xi8, {fx}>) -> tensor<?x1x1x1xi8, #nh.fixed<-18, BCMD>> {{
  %w = nh.constant "w" dense<{codes}> : tensor<1x1100x1x1xi8>
      -> tensor<1x1100x1x1xi8, #nh.fixed<0, CCDD>>
  %acc = nh.conv %x, %w : (tensor<?x1100x1x1xi8, {fx}>, tensor<1x1100x1x1xi8, #nh.fixed<0, CCDD>>)
      -> tensor<?x1x1x1xi32, {fx}>
  %y = nh.requant %acc {{shift = array<i64: 18>, rounding = #nq.rounding<{mode}>}}
      : tensor<?x1x1x1xi32, {fx}> -> tensor<?x1x1x1xi8, #nh.fixed<-18, BCMD>>
  func.return %y : tensor<?x1x1x1xi8, #nh.fixed<-18, BCMD>>
}}""",
        x,
    )


@pytest.mark.parametrize(
    ("mode", "target", "want"),
    [
        ("half_even", 2**24 + 2**17 + 1, 65),  # float32 rounds it to 64.5 * 2**18: gives 64
        ("trunc", 2**24 + 2**18 - 1, 64),  # float32 rounds it up to 65 * 2**18: gives 65
    ],
)
def test_an_accumulator_past_float32_uses_the_integer_kernels(
    mode: str, target: int, want: int
) -> None:
    """Kills: the fused kernel chosen without its ``2**24`` bound (half_even), the float32
    convolution chosen without it (trunc): float32 rounds the sum one code away."""
    text, x = _one_by_one(target, mode)
    module = nanoir.parse(text)
    (numpy_y,) = nanoir.run(module, x, raw=True)
    assert int(numpy_y.reshape(-1)[0]) == want
    for fused in (*FUSED_KERNELS, None):
        model = export_model(module, fused=fused)
        (y,) = run_model(make_session(model), [x])
        assert int(y.reshape(-1)[0]) == want


def test_extreme_codes_through_the_fused_and_float_kernels() -> None:
    """A 3x3 conv whose codes are all at the extremes (sums up to 288 * 128**2, within
    ``2**24``): each fused kernel and the float32 one give NumPy's codes in every rounding
    mode. Where the uint8 x int8 kernels saturate (no VNNI), a session of their model is
    refused, naming why."""
    rng = np.random.default_rng(5)
    w = rng.choice([127, -128], size=(8, 32, 3, 3))
    x = rng.choice([127, -128], size=(2, 32, 6, 6)).astype(np.int8)
    codes = np.array2string(w, separator=", ", threshold=10**9).replace("\n", "")
    fx, fw = "#nh.fixed<0, BCMD>", "#nh.fixed<0, CCDD>"
    for mode in ("half_even", "trunc", "floor", "half_up"):
        module = nanoir.parse(f"""func.func @main(%x: tensor<?x32x6x6xi8, {fx}>) -> tensor<?x8x6x6xi8, #nh.fixed<-15, BCMD>> {{
  %w = nh.constant "w" dense<{codes}> : tensor<8x32x3x3xi8> -> tensor<8x32x3x3xi8, {fw}>
  %acc = nh.conv %x, %w {{pads = array<i64: 1, 1, 1, 1>}} : (tensor<?x32x6x6xi8, {fx}>,
      tensor<8x32x3x3xi8, {fw}>) -> tensor<?x8x6x6xi32, {fx}>
  %y = nh.requant %acc {{shift = array<i64: 15>, rounding = #nq.rounding<{mode}>}}
      : tensor<?x8x6x6xi32, {fx}> -> tensor<?x8x6x6xi8, #nh.fixed<-15, BCMD>>
  func.return %y : tensor<?x8x6x6xi8, #nh.fixed<-15, BCMD>>
}}""")
        (want,) = nanoir.run(module, x, raw=True)
        for kernel in (*FUSED_KERNELS, None):
            model = export_model(module, fused=kernel)
            fused = any(n.op_type == "QLinearConv" for n in model.graph.node)
            assert fused == (kernel is not None and mode == "half_even")
            if fused and not fused_kernel_is_exact(kernel):  # (u8s8 without VNNI: refused)
                with pytest.raises(nanoir.Error, match="on this machine's CPU"):
                    make_session(model)
                continue
            (got,) = run_model(make_session(model), [x])
            assert np.array_equal(got, want)


@settings(max_examples=examples(40), deadline=None)
@given(
    data=st.data(),
    mode=st.sampled_from(["trunc", "floor", "half_up", "half_even"]),
    shift=st.integers(-24, 33),
    width=st.sampled_from([8, 16, 32]),
)
def test_requant_of_int32_codes_is_exact(
    data: st.DataObject, mode: str, shift: int, width: int
) -> None:
    """A requant of i32 codes past ``2**24`` (written in float64) equals an exact oracle and
    the NumPy executor in every rounding mode, left and right shifts, ties at every shift and
    the i32 extremes included. (Mutants killed: float64 half_even by ``Floor``; half_up
    without its half in float64; a signed trunc floored before its cast.)"""
    shape = (2, 3, 2, 5)
    n = int(np.prod(shape))
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    edge = [-(2**31), 2**31 - 1, 0, 1, -1]
    if shift > 0:
        # a code of the result's range (and one past it) times 2**s, plus a remainder: 0, 1,
        # the tie 2**(s-1) and its neighbours, the largest, or any
        d = 2**shift
        top = min(hi + 1, (2**31 - 1) // d)
        rest = st.sampled_from(sorted({0, 1, d // 2 - 1, d // 2, d // 2 + 1, d - 1} - {-1, d}))
        near = st.builds(
            lambda y, r: y * d + r, st.integers(-top - 1, top), rest | st.integers(0, d - 1)
        )
    else:  # a left shift: values about the saturation bounds after it
        reach = min(2**31 - 1, (hi + 2) // 2**-shift + 2)
        near = st.integers(-reach, reach)
    values = data.draw(
        st.lists(
            st.one_of(near, st.integers(-(2**31), 2**31 - 1), st.sampled_from(edge)),
            min_size=n,
            max_size=n,
        )
    )
    x = np.clip(np.array(values, dtype=np.int64), -(2**31), 2**31 - 1).astype(np.int32)
    x = x.reshape(shape)
    fx, fy = "#nh.fixed<0, BCMD>", f"#nh.fixed<{-shift}, BCMD>"
    module = nanoir.parse(f"""func.func @main(%x: tensor<?x3x2x5xi32, {fx}>) -> tensor<?x3x2x5xi{width}, {fy}> {{
  %y = nh.requant %x {{shift = array<i64: {shift}>, rounding = #nq.rounding<{mode}>}}
      : tensor<?x3x2x5xi32, {fx}> -> tensor<?x3x2x5xi{width}, {fy}>
  func.return %y : tensor<?x3x2x5xi{width}, {fy}>
}}""")
    want = requant_oracle(x.astype(np.int64), shift, mode, lo, hi)
    (numpy_y,) = nanoir.run(module, x, raw=True)
    assert np.array_equal(np.asarray(numpy_y).astype(np.int64), want)
    (got,) = run_model(make_session(export_model(module)), [x])
    assert np.array_equal(np.asarray(got).astype(np.int64), want)


@pytest.mark.parametrize("signed", [True, False])
def test_a_16_bit_input_splits_into_bytes_exactly(signed: bool) -> None:
    """A conv reading 16-bit codes is written on its input's bytes (``ConvInteger`` per byte,
    the split in float32): at every byte boundary (``k * 256 - 1``, ``k * 256``), the type's
    ends and 0, NumPy's codes in every rounding mode. Kills: the low byte taken before the
    floor (``x - 256 * (x / 256)``), the top byte without its offset of 128."""
    lo, hi = (-(2**15), 2**15 - 1) if signed else (0, 2**16 - 1)
    edges = np.arange(-128, 129) * 256
    codes = np.unique(np.clip(np.concatenate([edges - 1, edges, edges + 1, [lo, hi, 0]]), lo, hi))
    # Eight channels (rolled copies): the sums' bound passes 2**24, so not a float32 conv.
    x = np.stack([np.roll(codes, k) for k in range(8)], 1).reshape(-1, 8, 1, 1)
    x = x.astype(np.int16 if signed else np.uint16)
    w = "[[[127]], [[-128]], [[1]], [[-1]], [[127]], [[0]], [[3]], [[127]]]"
    t = "i16" if signed else "ui16"
    fx = "#nh.fixed<0, BCMD>"
    for mode in ("half_even", "trunc", "floor", "half_up"):
        module = nanoir.parse(f"""func.func @main(%x: tensor<?x8x1x1x{t}, {fx}>) -> tensor<?x2x1x1xi16, #nh.fixed<-3, BCMD>> {{
  %w = nh.constant "w" dense<[{w}, {w}]> : tensor<2x8x1x1xi8> -> tensor<2x8x1x1xi8, #nh.fixed<0, CCDD>>
  %acc = nh.conv %x, %w : (tensor<?x8x1x1x{t}, {fx}>, tensor<2x8x1x1xi8, #nh.fixed<0, CCDD>>)
      -> tensor<?x2x1x1xi32, {fx}>
  %y = nh.requant %acc {{shift = array<i64: 3>, rounding = #nq.rounding<{mode}>}}
      : tensor<?x2x1x1xi32, {fx}> -> tensor<?x2x1x1xi16, #nh.fixed<-3, BCMD>>
  func.return %y : tensor<?x2x1x1xi16, #nh.fixed<-3, BCMD>>
}}""")
        (want,) = nanoir.run(module, x, raw=True)
        model = export_model(module)
        assert any(n.op_type == "ConvInteger" for n in model.graph.node)
        (got,) = run_model(make_session(model), [x])
        assert np.array_equal(np.asarray(got).astype(np.int64), np.asarray(want).astype(np.int64))


@pytest.mark.parametrize("relu", [False, True])
def test_a_dead_channel_with_a_wide_bias_keeps_the_fused_kernel(relu: bool) -> None:
    """A depthwise conv one of whose channels has all-zero weights and a 31-bit bias (a pruned
    channel: its weight exponent is free, so its bias codes are wide), requantized half to
    even to 8 bits, with and without a ReLU after: the fused kernel still writes it (that
    channel's code is a constant, put in its bias at shift 0) and gives NumPy's codes.
    Kills: its shift kept; dead channels never found (then ``ConvInteger``). (Its code left
    unsaturated is an equivalent mutant: the kernel saturates to uint8 and the ReLU's
    ``Clip`` follows.)"""
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (4, 1, 3, 3))
    w[2] = 0
    bias = [1000, -77, 2**30 + 2**22 + 5, 3]
    x = rng.integers(-128, 128, (2, 4, 5, 5)).astype(np.int8)
    fx, fw = "#nh.fixed<0, BCMD>", "#nh.fixed<0, CCDD>"
    codes = np.array2string(w, separator=", ", threshold=10**9).replace("\n", "")
    shift = "array<i64: 9, 9, 23, 9>"
    tail = (
        """  %r = nh.relu %y : tensor<?x4x5x5xi8, #nh.fixed<[-9, -9, -23, -9], BCMD>>
  func.return %r"""
        if relu
        else "  func.return %y"
    )
    for b in (bias, [1000, -77, -(2**30), 3]):
        module = nanoir.parse(f"""func.func @main(%x: tensor<?x4x5x5xi8, {fx}>) -> tensor<?x4x5x5xi8, #nh.fixed<[-9, -9, -23, -9], BCMD>> {{
  %w = nh.constant "w" dense<{codes}> : tensor<4x1x3x3xi8> -> tensor<4x1x3x3xi8, {fw}>
  %b = nh.constant "b" dense<{b}> : tensor<4xi32> -> tensor<4xi32, #nh.fixed<0, C>>
  %acc = nh.conv %x, %w, %b {{groups = 4 : i64, pads = array<i64: 1, 1, 1, 1>}}
      : (tensor<?x4x5x5xi8, {fx}>, tensor<4x1x3x3xi8, {fw}>, tensor<4xi32, #nh.fixed<0, C>>)
      -> tensor<?x4x5x5xi32, {fx}>
  %y = nh.requant %acc {{shift = {shift}, rounding = #nq.rounding<half_even>}}
      : tensor<?x4x5x5xi32, {fx}> -> tensor<?x4x5x5xi8, #nh.fixed<[-9, -9, -23, -9], BCMD>>
{tail} : tensor<?x4x5x5xi8, #nh.fixed<[-9, -9, -23, -9], BCMD>>
}}""")
        (want,) = nanoir.run(module, x, raw=True)
        model = export_model(module, fused="u8u8")
        assert any(n.op_type == "QLinearConv" for n in model.graph.node)
        (got,) = run_model(make_session(model), [x])
        assert np.array_equal(np.asarray(got).astype(np.int64), np.asarray(want).astype(np.int64))
        assert np.unique(np.asarray(want)[:, 2]).size == 1


def test_a_file_naming_an_unknown_kernel_is_refused_by_name() -> None:
    """A file whose ``nanoir.kernels`` metadata names no kernel nanoir writes: one
    ``nanoir.Error`` naming the key and what it expected (never a session on it)."""
    module = nanoir.parse(_one_by_one(5, "half_even")[0])
    model = export_model(module)
    helper.set_model_props(
        model,
        {**{p.key: p.value for p in model.metadata_props}, "nanoir.kernels": "s8s8"},
    )
    with pytest.raises(nanoir.Error, match=r"nanoir.kernels metadata is 's8s8': expected one of"):
        nanoir.grammar.onnx.integer.import_model(model)


def _conv_sums(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """``sum x w`` of a 3x3 conv padded by 1, in Python integers (no library conv)."""
    n, c, hh, ww = x.shape
    per = c // groups
    xi = np.pad(x.astype(object), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], hh, ww), dtype=object)
    for o in range(w.shape[0]):
        g = o // (w.shape[0] // groups)
        for i in range(hh):
            for j in range(ww):
                window = xi[:, g * per : (g + 1) * per, i : i + 3, j : j + 3]
                out[:, o, i, j] = (window * w[o].astype(object)).sum(axis=(1, 2, 3))
    return out


@settings(max_examples=examples(15), deadline=None)
@given(
    groups=st.sampled_from([1, 2, 4]),
    mode=st.sampled_from(["trunc", "floor", "half_up", "half_even"]),
    shift=st.integers(20, 23),
    seed=st.integers(0, 2**16),
)
def test_a_bias_past_float32_is_added_in_float64(
    groups: int, mode: str, shift: int, seed: int
) -> None:
    """A conv whose products fit float32 but whose biases do not (``k 2**s + 2**(s-1) + d``,
    ``d`` in -1..1: a requant tie and its neighbours, past ``2**24``; the first sample all
    zeros, so there the sums are the biases): grouped, a float32 ``Conv`` without the bias and
    the bias added in float64 (dense, ``ConvInteger``); codes equal an exact oracle (the sums
    and the requant in Python integers) and the NumPy executor in every rounding mode. Kills: the bias added in float32 (it rounds ``d`` away); the bias left out; the
    path taken past ``2**24``."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, size=(4, 4 // groups, 3, 3))
    k = rng.choice([-1, 1], size=4) * rng.integers(2 ** (25 - shift), 120, size=4)
    bias = k * 2**shift + 2 ** (shift - 1) + rng.integers(-1, 2, size=4)
    x = rng.integers(-128, 128, size=(2, 4, 5, 6)).astype(np.int8)
    x[0] = 0
    wc = np.array2string(w, separator=", ", threshold=10**9).replace("\n", "")
    bc = ", ".join(str(int(b)) for b in bias)
    fx, fw, fy = "#nh.fixed<0, BCMD>", "#nh.fixed<0, CCDD>", f"#nh.fixed<{-shift}, BCMD>"
    tw, tb = f"tensor<4x{4 // groups}x3x3xi8>", "tensor<4xi32, #nh.fixed<0, C>>"
    module = nanoir.parse(f"""func.func @main(%x: tensor<?x4x5x6xi8, {fx}>) -> tensor<?x4x5x6xi8, {fy}> {{
  %w = nh.constant "w" dense<{wc}> : {tw} -> tensor<4x{4 // groups}x3x3xi8, {fw}>
  %b = nh.constant "b" dense<[{bc}]> : tensor<4xi32> -> {tb}
  %acc = nh.conv %x, %w, %b {{pads = array<i64: 1, 1, 1, 1>, groups = {groups} : i64}}
      : (tensor<?x4x5x6xi8, {fx}>, tensor<4x{4 // groups}x3x3xi8, {fw}>, {tb})
      -> tensor<?x4x5x6xi32, {fx}>
  %y = nh.requant %acc {{shift = array<i64: {shift}>, rounding = #nq.rounding<{mode}>}}
      : tensor<?x4x5x6xi32, {fx}> -> tensor<?x4x5x6xi8, {fy}>
  func.return %y : tensor<?x4x5x6xi8, {fy}>
}}""")
    acc = _conv_sums(x, w, groups) + bias.astype(object).reshape(1, 4, 1, 1)
    want = requant_oracle(acc, shift, mode, -128, 127)
    (numpy_y,) = nanoir.run(module, x, raw=True)
    assert np.array_equal(np.asarray(numpy_y).astype(np.int64), want)
    model = export_model(module)
    ops = [n.op_type for n in model.graph.node]
    assert ("ConvInteger" in ops) == (groups == 1)  # a dense one keeps the integer kernel
    (got,) = run_model(make_session(model), [x])
    assert np.array_equal(np.asarray(got).astype(np.int64), want)


@pytest.mark.parametrize(
    ("mode", "target", "want"),
    [
        ("half_even", 2**24 + 2**17 + 1, -63),  # float32: -63.5 exactly, gives -64
        ("floor", 2**24 + 2**18 - 1, -64),  # float32: -63 exactly, gives -63
    ],
)
@pytest.mark.parametrize("groups", [1, 2])
def test_products_past_float32_with_a_wide_bias_stay_integer(
    mode: str, target: int, want: int, groups: int
) -> None:
    """Sums of products past ``2**24`` by one code plus a bias of ``-2**25`` (each group the
    1x1 conv of ``_one_by_one``): a float32 ``Conv`` (with the bias added in float64 or not)
    would round the sums one code away, so the writer keeps ``ConvInteger``, dense and
    grouped; codes equal the exact oracle and NumPy's. Kills: the wide-bias float path taken
    on a bound past ``2**24``."""
    _, x1 = _one_by_one(target, mode)
    w1 = np.zeros(1100, dtype=np.int64)
    full, rest = divmod(target, 127 * 127)
    w1[:full] = 127
    w1[full], w1[full + 1] = divmod(rest, 127)
    c = 1100 * groups
    w = np.tile(w1, (groups, 1)).reshape(groups, 1100, 1, 1)
    x = np.tile(x1, (1, groups, 1, 1))
    codes = np.array2string(w, separator=", ", threshold=10**9).replace("\n", "")
    fx, fw, fb = "#nh.fixed<0, BCMD>", "#nh.fixed<0, CCDD>", "#nh.fixed<0, C>"
    tw, tb = f"tensor<{groups}x1100x1x1xi8", f"tensor<{groups}xi32"
    bias = ", ".join([str(-(2**25))] * groups)
    module = nanoir.parse(f"""func.func @main(%x: tensor<?x{c}x1x1xi8, {fx}>) -> tensor<?x{groups}x1x1xi8, #nh.fixed<-18, BCMD>> {{
  %w = nh.constant "w" dense<{codes}> : {tw}> -> {tw}, {fw}>
  %b = nh.constant "b" dense<[{bias}]> : {tb}> -> {tb}, {fb}>
  %acc = nh.conv %x, %w, %b {{groups = {groups} : i64}}
      : (tensor<?x{c}x1x1xi8, {fx}>, {tw}, {fw}>, {tb}, {fb}>) -> tensor<?x{groups}x1x1xi32, {fx}>
  %y = nh.requant %acc {{shift = array<i64: 18>, rounding = #nq.rounding<{mode}>}}
      : tensor<?x{groups}x1x1xi32, {fx}> -> tensor<?x{groups}x1x1xi8, #nh.fixed<-18, BCMD>>
  func.return %y : tensor<?x{groups}x1x1xi8, #nh.fixed<-18, BCMD>>
}}""")
    oracle = requant_oracle(np.array([target - 2**25], dtype=object), 18, mode, -128, 127)
    assert int(oracle[0]) == want
    (numpy_y,) = nanoir.run(module, x, raw=True)
    assert numpy_y.reshape(-1).tolist() == [want] * groups
    model = export_model(module)
    assert "ConvInteger" in [n.op_type for n in model.graph.node]
    (y,) = run_model(make_session(model), [x])
    assert y.reshape(-1).tolist() == [want] * groups
