"""Property tests of ``nanoir.runtime.numerics.kernels`` against PyTorch (skipped without torch).

Every reference value comes from torch: asymmetric pads go through ``F.pad`` before torch's
op (which only pads symmetrically), and ``count_include_pad=False`` over asymmetric pads
divides torch sums by torch's pooled count of ones. float32 results must match to 1e-5 of
the largest output magnitude, float64 to 1e-12, and the output dtype must be the input's.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.runtime.numerics import kernels as K

from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")
F = torch.nn.functional
torch.set_num_threads(1)

DTYPES = st.sampled_from([np.float32, np.float64])


TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def rand(shape: Sequence[int], dtype: type, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def assert_close(y: np.ndarray, ref: torch.Tensor | np.ndarray, dtype: type) -> None:
    """Same dtype and shape as the input's dtype / torch's shape, values within TOL * max|ref|."""
    ref = ref.numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert y.dtype == np.dtype(dtype), f"dtype {y.dtype}, expected {np.dtype(dtype)}"
    assert y.shape == ref.shape, f"shape {y.shape}, torch gives {ref.shape}"
    # NaN/inf (windows wholly in padding) must sit at the same places; they set no scale.
    scale = float(np.max(np.abs(ref[np.isfinite(ref)]), initial=0.0)) or 1.0
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL[np.dtype(dtype)] * scale)


def torch_pads(begins: Sequence[int], ends: Sequence[int]) -> list[int]:
    """ONNX begins/ends over the spatial dims -> F.pad's (last dim first) pairs."""
    out: list[int] = []
    for b, e in reversed(list(zip(begins, ends))):
        out += [b, e]
    return out


@st.composite
def windows(draw: st.DrawFn, n: int, *, pool: bool = False, dilate: bool = True) -> dict:
    """Per-dim kernel, stride, dilation, pads and an input length the padded window fits.

    Conv windows get independent begin/end pads up to 3; pool windows get torch's symmetric
    pads of at most half the kernel.
    """
    kernel = [draw(st.integers(1, 4)) for _ in range(n)]
    strides = [draw(st.integers(1, 4)) for _ in range(n)]
    dil = [draw(st.integers(1, 3)) if dilate else 1 for _ in range(n)]
    if pool:  # torch: symmetric, at most half the kernel
        begins = [draw(st.integers(0, k // 2)) for k in kernel]
        ends = list(begins)
    else:
        begins = [draw(st.integers(0, 3)) for _ in range(n)]
        ends = [draw(st.integers(0, 3)) for _ in range(n)]
    sizes = []
    for k, d, b, e in zip(kernel, dil, begins, ends):
        span = d * (k - 1) + 1
        sizes.append(max(1, span - b - e + draw(st.integers(0, 6))))
    return dict(kernel=kernel, strides=strides, dil=dil, begins=begins, ends=ends, sizes=sizes)


# --------------------------------------------------------------------------------------------
# Output sizes
# --------------------------------------------------------------------------------------------


@settings(max_examples=examples(150))
@given(
    size=st.integers(1, 12),
    kernel=st.integers(1, 6),
    stride=st.integers(1, 4),
    dilation=st.integers(1, 3),
    pad_begin=st.integers(0, 4),
    pad_end=st.integers(0, 4),
)
def test_conv_output_size_matches_torch(size, kernel, stride, dilation, pad_begin, pad_end):
    x = torch.zeros(1, 1, size)
    w = torch.zeros(1, 1, kernel)
    args = dict(
        size=size,
        kernel=kernel,
        stride=stride,
        pad_begin=pad_begin,
        pad_end=pad_end,
        dilation=dilation,
    )
    try:
        expected = F.conv1d(
            F.pad(x, (pad_begin, pad_end)), w, stride=stride, dilation=dilation
        ).shape[-1]
    except RuntimeError:
        with pytest.raises(ValueError, match="does not fit"):
            K.conv_output_size(**args)
        return
    assert K.conv_output_size(**args) == expected


@settings(max_examples=examples(150))
@given(
    size=st.integers(1, 12),
    kernel=st.integers(1, 6),
    stride=st.integers(1, 4),
    dilation=st.integers(1, 3),
    data=st.data(),
    ceil_mode=st.booleans(),
)
def test_pool_output_size_matches_torch(size, kernel, stride, dilation, data, ceil_mode):
    pad = data.draw(st.integers(0, kernel // 2))
    x = torch.zeros(1, 1, size)
    args = dict(
        size=size,
        kernel=kernel,
        stride=stride,
        pad_begin=pad,
        pad_end=pad,
        dilation=dilation,
        ceil_mode=ceil_mode,
    )
    try:
        expected = F.max_pool1d(x, kernel, stride, pad, dilation, ceil_mode=ceil_mode).shape[-1]
    except RuntimeError:
        with pytest.raises(ValueError, match="does not fit"):
            K.pool_output_size(**args)
        return
    assert K.pool_output_size(**args) == expected


def test_ceil_mode_window_may_be_longer_than_the_input():
    """torch's ceil_mode keeps one window longer than the input (length 1, kernel 2, stride 2)."""
    x = rand((1, 1, 1), np.float32, 0)
    ref = F.max_pool1d(t(x), 2, 2, ceil_mode=True)
    assert K.pool_output_size(1, kernel=2, stride=2, pad_begin=0, pad_end=0, ceil_mode=True) == 1
    assert_close(K.max_pool(x, kernel=[2], ceil_mode=True), ref, np.float32)
    assert_close(
        K.avg_pool(x, kernel=[2], ceil_mode=True), F.avg_pool1d(t(x), 2, ceil_mode=True), np.float32
    )


@settings(max_examples=examples(60))
@given(size=st.integers(1, 20), out=st.integers(1, 20))
def test_adaptive_pool_ranges_match_torch(size, out):
    x = torch.arange(size, dtype=torch.float64).reshape(1, 1, size)
    lo = -F.adaptive_max_pool1d(-x, out).flatten().numpy()
    hi = F.adaptive_max_pool1d(x, out).flatten().numpy()
    assert K.adaptive_pool_ranges(size, out) == [(int(a), int(b) + 1) for a, b in zip(lo, hi)]


# --------------------------------------------------------------------------------------------
# Convolution and dense layers
# --------------------------------------------------------------------------------------------


@settings(max_examples=examples(300))
@given(
    n=st.sampled_from([1, 2, 2, 3]),
    batch=st.sampled_from([1, 3]),
    groups=st.integers(1, 3),
    group_in=st.integers(1, 3),
    group_out=st.integers(1, 3),
    bias=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_conv_matches_torch(n, batch, groups, group_in, group_out, bias, dtype, seed, data):
    """Grouped (incl. depthwise: group_in == 1), strided, dilated, asymmetrically padded."""
    win = data.draw(windows(n))
    x = rand((batch, groups * group_in, *win["sizes"]), dtype, seed)
    w = rand((groups * group_out, group_in, *win["kernel"]), dtype, seed + 1)
    b = rand((groups * group_out,), dtype, seed + 2) if bias else None
    y = K.conv(
        x,
        w,
        b,
        strides=win["strides"],
        pads=win["begins"] + win["ends"],
        dilations=win["dil"],
        groups=groups,
    )
    torch_conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    ref = torch_conv(
        F.pad(t(x), torch_pads(win["begins"], win["ends"])),
        t(w),
        None if b is None else t(b),
        stride=win["strides"],
        dilation=win["dil"],
        groups=groups,
    )
    assert_close(y, ref, dtype)


@pytest.mark.parametrize("batch", [0, 1, 2])
def test_conv_resnet_like_and_empty_batch(batch):
    """A 7x7/2 stem conv, a 1x1 conv (the no-copy path) and a zero-size batch."""
    x = rand((batch, 3, 17, 16), np.float32, 0)
    for w, stride, pad in [
        (rand((8, 3, 7, 7), np.float32, 1), 2, 3),
        (rand((8, 3, 1, 1), np.float32, 2), 1, 0),
    ]:
        y = K.conv(x, w, strides=(stride, stride), pads=(pad,) * 4)
        assert_close(y, F.conv2d(t(x), t(w), stride=stride, padding=pad), np.float32)


def test_conv_integer_inputs_are_exact():
    """Integer arrays stay integer and give torch's float64 result exactly."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (2, 4, 9, 7)).astype(np.int64)
    w = rng.integers(-8, 8, (6, 2, 3, 3)).astype(np.int64)
    y = K.conv(x, w, strides=(2, 1), pads=(1, 0, 0, 2), groups=2)
    ref = F.conv2d(
        F.pad(t(x.astype(np.float64)), (0, 2, 1, 0)),
        t(w.astype(np.float64)),
        stride=(2, 1),
        groups=2,
    )
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, ref.numpy().astype(np.int64))


def test_conv_rejects_bad_channels():
    with pytest.raises(ValueError, match="groups=2"):
        K.conv(np.zeros((1, 3, 4, 4)), np.zeros((4, 1, 1, 1)), groups=2)


@settings(max_examples=examples(40))
@given(
    lead=st.lists(st.integers(0, 3), max_size=2),
    fin=st.integers(1, 6),
    fout=st.integers(1, 6),
    bias=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
)
def test_linear_matches_torch(lead, fin, fout, bias, dtype, seed):
    x = rand((*lead, fin), dtype, seed)
    w = rand((fout, fin), dtype, seed + 1)
    b = rand((fout,), dtype, seed + 2) if bias else None
    ref = F.linear(t(x), t(w), None if b is None else t(b))
    assert_close(K.linear(x, w, b), ref, dtype)


@settings(max_examples=examples(60))
@given(
    a_batch=st.lists(st.sampled_from([1, 2, 3]), max_size=2),
    b_batch=st.lists(st.sampled_from([1, 2, 3]), max_size=2),
    m=st.integers(1, 4),
    k=st.integers(1, 4),
    n=st.integers(1, 4),
    a_vec=st.booleans(),
    b_vec=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
)
def test_matmul_matches_torch(a_batch, b_batch, m, k, n, a_vec, b_vec, dtype, seed):
    a_shape = (k,) if a_vec else (*a_batch, m, k)
    b_shape = (k,) if b_vec else (*b_batch, k, n)
    a, b = rand(a_shape, dtype, seed), rand(b_shape, dtype, seed + 1)
    try:
        ref = torch.matmul(t(a), t(b))
    except RuntimeError:
        with pytest.raises(ValueError):
            K.matmul(a, b)
        return
    assert_close(K.matmul(a, b), ref, dtype)


@settings(max_examples=examples(40))
@given(
    rank=st.integers(2, 4),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    eps=st.sampled_from([1e-5, 1e-3, 0.1]),
)
def test_batch_norm_matches_torch(rank, dtype, seed, eps):
    shape = (2, 3, 4, 5)[:rank]
    x = rand(shape, dtype, seed)
    scale, bias, mean = (rand((3,), dtype, seed + i) for i in (1, 2, 3))
    var = np.abs(rand((3,), dtype, seed + 4)) + dtype(0.1)
    ref = F.batch_norm(t(x), t(mean), t(var), t(scale), t(bias), training=False, eps=eps)
    assert_close(K.batch_norm(x, scale, bias, mean, var, eps), ref, dtype)


# --------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------

ELEMENTWISE = {
    "relu": (K.relu, F.relu),
    "relu6": (lambda x: K.clamp(x, 0.0, 6.0), F.relu6),
    "clamp_lo": (lambda x: K.clamp(x, lo=-0.5), lambda x: torch.clamp(x, min=-0.5)),
    "clamp_hi": (lambda x: K.clamp(x, hi=0.25), lambda x: torch.clamp(x, max=0.25)),
    "hardtanh": (lambda x: K.clamp(x, -1.0, 1.0), F.hardtanh),
    "leaky_relu": (lambda x: K.leaky_relu(x, 0.1), lambda x: F.leaky_relu(x, 0.1)),
    "prelu_scalar": (
        lambda x: K.prelu(x, np.array([0.25])),
        lambda x: F.prelu(x, torch.tensor([0.25], dtype=x.dtype)),
    ),
    "sigmoid": (K.sigmoid, torch.sigmoid),
    "tanh": (K.tanh, torch.tanh),
    "hardsigmoid": (K.hardsigmoid, F.hardsigmoid),
    "hardswish": (K.hardswish, F.hardswish),
}


@settings(max_examples=examples(150))
@given(
    name=st.sampled_from(sorted(ELEMENTWISE)),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([1.0, 4.0, 1e3, 1e5]),
    rank=st.integers(1, 4),
)
def test_elementwise_matches_torch(name, dtype, seed, scale, rank):
    """Also at magnitudes where a naive sigmoid overflows: no warning may be raised."""
    ours, theirs = ELEMENTWISE[name]
    x = rand((3, 4, 2, 5)[:rank], dtype, seed, scale)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        y = ours(x)
    assert_close(y, theirs(t(x)), dtype)


@settings(max_examples=examples(30))
@given(rank=st.integers(2, 4), dtype=DTYPES, seed=st.integers(0, 2**16))
def test_prelu_per_channel_matches_torch(rank, dtype, seed):
    x = rand((3, 4, 2, 5)[:rank], dtype, seed)
    slope = rand((4,), dtype, seed + 1)
    assert_close(K.prelu(x, slope), F.prelu(t(x), t(slope)), dtype)


def test_prelu_rank1_has_one_channel():
    x, slope = rand((4,), np.float32, 0), rand((4,), np.float32, 1)
    with pytest.raises(RuntimeError):
        F.prelu(t(x), t(slope))
    with pytest.raises(ValueError, match="1 channels"):
        K.prelu(x, slope)


def test_python_scalars_keep_float32():
    x = rand((2, 3), np.float32, 0)
    bn = K.batch_norm(
        x, *(np.ones(3, np.float32),) * 2, np.zeros(3, np.float32), np.ones(3, np.float32), 1e-5
    )
    for y in [
        K.clamp(x, 0.0, 6.0),
        K.leaky_relu(x, 0.01),
        K.hardswish(x),
        K.hardsigmoid(x),
        K.sigmoid(x),
        x + 0.5,
        bn,
    ]:
        assert y.dtype == np.float32


# --------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------


@settings(max_examples=examples(200))
@given(
    n=st.sampled_from([1, 2, 2, 3]),
    batch=st.sampled_from([1, 3]),
    ceil_mode=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_max_pool_matches_torch(n, batch, ceil_mode, dtype, seed, data):
    """torch's symmetric padding, dilation and ceil_mode (windows over the right padding)."""
    win = data.draw(windows(n, pool=True))
    x = rand((batch, 2, *win["sizes"]), dtype, seed)
    y = K.max_pool(
        x,
        kernel=win["kernel"],
        strides=win["strides"],
        pads=win["begins"] + win["ends"],
        dilations=win["dil"],
        ceil_mode=ceil_mode,
    )
    torch_pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
    ref = torch_pool(
        t(x), win["kernel"], win["strides"], win["begins"], win["dil"], ceil_mode=ceil_mode
    )
    assert_close(y, ref, dtype)


@settings(max_examples=examples(50))
@given(n=st.sampled_from([1, 2]), dtype=DTYPES, seed=st.integers(0, 2**16), data=st.data())
def test_max_pool_asymmetric_pads_match_torch(n, dtype, seed, data):
    win = data.draw(windows(n))
    x = rand((2, 3, *win["sizes"]), dtype, seed)
    y = K.max_pool(
        x,
        kernel=win["kernel"],
        strides=win["strides"],
        pads=win["begins"] + win["ends"],
        dilations=win["dil"],
    )
    padded = F.pad(t(x), torch_pads(win["begins"], win["ends"]), value=-math.inf)
    torch_pool = F.max_pool1d if n == 1 else F.max_pool2d
    assert_close(y, torch_pool(padded, win["kernel"], win["strides"], 0, win["dil"]), dtype)


def torch_avg_pool(
    x: torch.Tensor,
    kernel: list[int],
    strides: list[int],
    pad: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """avg_pool1d has no divisor_override: run 1-D pools as 2-D over a unit dim."""
    if x.ndim == 3:
        y = F.avg_pool2d(
            x[:, :, None],
            (1, *kernel),
            (1, *strides),
            (0, *pad),
            ceil_mode,
            count_include_pad,
            divisor_override,
        )
        return y[:, :, 0]
    pool = F.avg_pool2d if x.ndim == 4 else F.avg_pool3d
    return pool(x, kernel, strides, pad, ceil_mode, count_include_pad, divisor_override)


@settings(max_examples=examples(300))
@given(
    n=st.sampled_from([1, 2, 2, 3]),
    batch=st.sampled_from([1, 3]),
    ceil_mode=st.booleans(),
    count_include_pad=st.booleans(),
    divisor=st.sampled_from([None, None, 1, 3, 7]),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_avg_pool_matches_torch(n, batch, ceil_mode, count_include_pad, divisor, dtype, seed, data):
    """torch's divisor rules, including ceil_mode windows that hang over the right padding."""
    win = data.draw(windows(n, pool=True, dilate=False))
    if n == 3:  # avg_pool3d (alone) also wants the unpadded input to hold a kernel
        win["sizes"] = [max(s, k) for s, k in zip(win["sizes"], win["kernel"])]
    x = rand((batch, 2, *win["sizes"]), dtype, seed)
    y = K.avg_pool(
        x,
        kernel=win["kernel"],
        strides=win["strides"],
        pads=win["begins"] + win["ends"],
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor,
    )
    ref = torch_avg_pool(
        t(x), win["kernel"], win["strides"], win["begins"], ceil_mode, count_include_pad, divisor
    )
    assert_close(y, ref, dtype)


@settings(max_examples=examples(50))
@given(
    n=st.sampled_from([1, 2]),
    count_include_pad=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_avg_pool_asymmetric_pads_match_torch(n, count_include_pad, dtype, seed, data):
    """Reference: torch's window sums of the zero-padded input over torch's window counts."""
    win = data.draw(windows(n, dilate=False))
    x = rand((2, 3, *win["sizes"]), dtype, seed)
    y = K.avg_pool(
        x,
        kernel=win["kernel"],
        strides=win["strides"],
        pads=win["begins"] + win["ends"],
        count_include_pad=count_include_pad,
    )
    pads = torch_pads(win["begins"], win["ends"])
    zeros = (0,) * n

    def window_sum(v: torch.Tensor) -> torch.Tensor:
        return torch_avg_pool(F.pad(v, pads), win["kernel"], win["strides"], zeros, False, True, 1)

    count = math.prod(win["kernel"]) if count_include_pad else window_sum(torch.ones_like(t(x)))
    assert_close(y, window_sum(t(x)) / count, dtype)


@settings(max_examples=examples(60))
@given(
    n=st.sampled_from([1, 2]),
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=2),
    outs=st.lists(st.integers(1, 9), min_size=2, max_size=2),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
)
def test_adaptive_pools_match_torch(n, sizes, outs, dtype, seed):
    x = rand((2, 3, *sizes[:n]), dtype, seed)
    avg, mx = (
        (F.adaptive_avg_pool1d, F.adaptive_max_pool1d)
        if n == 1
        else (F.adaptive_avg_pool2d, F.adaptive_max_pool2d)
    )
    assert_close(K.adaptive_avg_pool(x, outs[:n]), avg(t(x), outs[:n]), dtype)
    assert_close(K.adaptive_max_pool(x, outs[:n]), mx(t(x), outs[:n]), dtype)


def test_global_and_partial_adaptive_pool():
    x = rand((0, 3, 5, 4), np.float32, 0)
    assert K.adaptive_avg_pool(x, 1).shape == (0, 3, 1, 1)
    x = rand((2, 3, 5, 4), np.float32, 1)
    assert_close(K.adaptive_avg_pool(x, 1), F.adaptive_avg_pool2d(t(x), 1), np.float32)
    assert_close(
        K.adaptive_avg_pool(x, (None, 3)), F.adaptive_avg_pool2d(t(x), (None, 3)), np.float32
    )


def test_pools_on_empty_batch_and_integers():
    x = np.random.default_rng(0).integers(-100, 100, (2, 3, 7, 6)).astype(np.int8)
    y = K.max_pool(x, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), ceil_mode=True)
    ref = F.max_pool2d(t(x.astype(np.float32)), 3, 2, 1, ceil_mode=True).numpy()
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, ref.astype(np.int8))
    empty = np.zeros((0, 3, 7, 6), np.float32)
    assert K.max_pool(empty, kernel=(2, 2)).shape == (0, 3, 3, 3)
    assert K.avg_pool(empty, kernel=(2, 2), ceil_mode=True).shape == (0, 3, 4, 3)


# --------------------------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------------------------


@settings(max_examples=examples(80))
@given(
    mode=st.sampled_from(["constant", "reflect", "replicate", "circular"]),
    n=st.sampled_from([1, 2]),
    dtype=DTYPES,
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_pad_matches_torch(mode, n, dtype, seed, data):
    sizes = [data.draw(st.integers(1, 5)) for _ in range(n)]
    if mode == "constant":  # every dim, negative pads crop
        full = [2, 3, *sizes]
        begins = [data.draw(st.integers(-(s // 2), 3)) for s in full]
        ends = [data.draw(st.integers(-((s - 1) // 2), 3)) for s in full]
        x = rand(full, dtype, seed)
        y = K.pad(x, begins + ends, mode, value=0.5)
        ref = F.pad(
            t(x), [p for b, e in reversed(list(zip(begins, ends))) for p in (b, e)], value=0.5
        )
    else:  # spatial dims only, as torch; reflect needs pads below the length
        limit = {"reflect": lambda s: s - 1, "replicate": lambda s: 4, "circular": lambda s: s}[
            mode
        ]
        begins = [data.draw(st.integers(0, limit(s))) for s in sizes]
        ends = [data.draw(st.integers(0, limit(s))) for s in sizes]
        x = rand((2, 3, *sizes), dtype, seed)
        y = K.pad(x, [0, 0, *begins, 0, 0, *ends], mode)
        ref = F.pad(t(x), torch_pads(begins, ends), mode=mode)
    assert_close(y, ref, dtype)


def assert_same_pixels(y: np.ndarray, x: np.ndarray, **interpolate: Sequence[float]) -> None:
    """Compare against torch's 2-D kernel on float32 (the level users check against).

    x holds distinct integers, so equal values mean equal source pixels whatever x's dtype.
    1-D inputs run as 2-D over a unit dim: the kernel follows ``upsample_nearest2d``.
    """
    xt = t(x.astype(np.float32))
    if x.ndim == 3:
        xt = xt[:, :, None]
        interpolate = {k: (1, *v) if k == "size" else (1.0, *v) for k, v in interpolate.items()}
    ref = F.interpolate(xt, mode="nearest", **interpolate).numpy().reshape(y.shape)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(np.float32), ref)


@settings(max_examples=examples(100))
@given(
    n=st.sampled_from([1, 2]),
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=2),
    by_size=st.booleans(),
    data=st.data(),
    dtype=DTYPES,
)
def test_upsample_nearest_matches_torch(n, sizes, by_size, data, dtype):
    x = np.arange(2 * 3 * math.prod(sizes[:n]), dtype=dtype).reshape(2, 3, *sizes[:n])
    if by_size:
        size = [data.draw(st.integers(1, 100)) for _ in range(n)]
        assert_same_pixels(K.upsample_nearest(x, size=size), x, size=size)
    else:
        scales = [
            data.draw(st.sampled_from([0.5, 0.7, 1.0, 1.1, 4 / 3, 1.5, 2.0, 2.5, 3.0]))
            for _ in range(n)
        ]
        if any(math.floor(s * l) < 1 for s, l in zip(scales, sizes)):
            scales = [max(s, 1.0) for s in scales]
        assert_same_pixels(K.upsample_nearest(x, scales=scales), x, scale_factor=scales)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("length", "out"), [(2, 82), (3, 7), (31, 34)])
def test_upsample_nearest_picks_float32_pixels(dtype, length, out):
    """Where float32 rounding moves torch's choice (2 -> 82), both dtypes follow float32."""
    x = np.arange(length, dtype=dtype).reshape(1, 1, length)
    assert_same_pixels(K.upsample_nearest(x, size=[out]), x, size=[out])
    assert_same_pixels(K.upsample_nearest(x, scales=[out / length]), x, scale_factor=[out / length])


def test_upsample_nearest_keeps_same_and_double_lengths():
    """An output of length L or 2 L ignores an inexact scale, as torch's 2-D kernel does."""
    x = np.arange(5.0).reshape(1, 1, 1, 5)
    assert_same_pixels(K.upsample_nearest(x, scales=(1.1, 1.1)), x, scale_factor=(1.1, 1.1))
    assert_same_pixels(K.upsample_nearest(x, scales=(1.0, 2.1)), x, scale_factor=(1.0, 2.1))


@settings(max_examples=examples(30))
@given(axis=st.integers(-3, 2), seed=st.integers(0, 2**16), data=st.data())
def test_concat_split_transpose_reshape_match_torch(axis, seed, data):
    x = rand((3, 5, 4), np.float32, seed)
    length = x.shape[axis]
    sizes = data.draw(
        st.one_of(
            st.integers(1, length + 1),
            st.lists(st.integers(0, length), min_size=1, max_size=3)
            .filter(lambda s: sum(s) <= length)
            .map(lambda s: [*s, length - sum(s)]),
        )
    )
    parts = K.split(x, sizes, axis)
    ref_parts = torch.split(t(x), sizes, axis)
    assert len(parts) == len(ref_parts)
    for p, r in zip(parts, ref_parts):
        np.testing.assert_array_equal(p, r.numpy())
    np.testing.assert_array_equal(K.concat(parts, axis), torch.cat(ref_parts, axis).numpy())
    perm = data.draw(st.permutations([0, 1, 2]))
    np.testing.assert_array_equal(K.transpose(x, perm), t(x).permute(*perm).numpy())
    shape = data.draw(st.sampled_from([(-1,), (5, -1), (2, -1, 3), (4, 15), (-1, 1, 2)]))
    np.testing.assert_array_equal(K.reshape(x, shape), t(x).reshape(shape).numpy())
