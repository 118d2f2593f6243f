"""ConvTranspose (1-D, 2-D), PixelShuffle/PixelUnshuffle (DepthToSpace/SpaceToDepth, CRD),
channel shuffle (a reshape/transpose decomposition) and nearest upsampling by integer
scales, from torch to nf: the nf interpreter against torch eval (hypothesis over shapes,
strides, pads, output_padding, dilation, groups, odd sizes), with a dynamic batch; the
numerics kernels against torch and ONNX's reference formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import kernels
from torch import nn
from xdsl.dialects.builtin import DYNAMIC_INDEX

from nanoir.frontend import from_torch
from nanoir.testing.programs import examples

torch.set_num_threads(1)


def _close(module, model: nn.Module, x: torch.Tensor) -> None:  # noqa: ANN001
    with torch.no_grad():
        expected = model(x).numpy()
    (actual,) = run(module, x.numpy())
    assert actual.shape == expected.shape
    bound = 1e-4 * max(float(np.abs(expected).max(initial=0.0)), 1e-6)
    assert float(np.abs(actual - expected).max(initial=0.0)) <= bound


def _ops(module, cls):  # noqa: ANN001, ANN202
    return [op for op in module.walk() if isinstance(op, cls)]


@st.composite
def conv_transpose_case(draw):  # noqa: ANN001, ANN201
    n = draw(st.sampled_from((1, 2)))
    groups = draw(st.integers(1, 3))
    cin = groups * draw(st.integers(1, 3))
    cout = groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(n)]
    stride = [draw(st.integers(1, 3)) for _ in range(n)]
    dilation = [draw(st.integers(1, 2)) for _ in range(n)]
    padding = [draw(st.integers(0, d * (k - 1))) for k, d in zip(kernel, dilation)]
    outpad = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
    size = [draw(st.integers(1, 7)) for _ in range(n)]
    assume(
        all(
            (L - 1) * s - 2 * p + d * (k - 1) + o + 1 > 0
            for L, s, p, d, k, o in zip(size, stride, padding, dilation, kernel, outpad)
        )
    )
    bias = draw(st.booleans())
    cls = nn.ConvTranspose1d if n == 1 else nn.ConvTranspose2d
    model = cls(
        cin,
        cout,
        kernel,
        stride=stride,
        padding=padding,
        output_padding=outpad,
        groups=groups,
        bias=bias,
        dilation=dilation,
    ).eval()
    return model, (draw(st.integers(1, 3)), cin, *size)


@settings(max_examples=examples(25))
@given(conv_transpose_case(), st.integers(0, 2**16))
@pytest.mark.filterwarnings("ignore")
def test_conv_transpose_matches_torch(case, seed: int) -> None:  # noqa: ANN001
    model, shape = case
    torch.manual_seed(seed)
    for p in model.parameters():
        p.data.normal_()
    x = torch.randn(shape)
    module = from_torch(model, x)
    (op,) = _ops(module, nf.ConvTransposeOp)
    assert nf.tensor_shape(op.input)[0] == DYNAMIC_INDEX
    _close(module, model, x)
    _close(module, model, torch.randn(shape[0] + 1, *shape[1:]))  # another batch


def test_convolution_transposed_is_conv_transpose() -> None:
    """``aten.convolution`` with ``transposed=True`` imports as nf.conv_transpose too."""
    model = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2).eval()

    class Generic(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.convolution(
                x, model.weight, model.bias, [2, 2], [1, 1], [1, 1], True, [1, 1], 2
            )

    x = torch.randn(2, 4, 5, 3)
    module = from_torch(Generic().eval(), x)
    assert len(_ops(module, nf.ConvTransposeOp)) == 1
    _close(module, model, x)


@settings(max_examples=examples(12))
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(1, 5), st.booleans())
def test_pixel_shuffle_and_unshuffle_match_torch(
    r: int, c: int, h: int, w: int, unshuffle: bool
) -> None:
    spatial = [h, w]
    if unshuffle:
        model: nn.Module = nn.PixelUnshuffle(r)
        x = torch.randn(2, c, *(s * r for s in spatial))
        cls: type = nf.SpaceToDepthOp
    else:
        model = nn.PixelShuffle(r)
        x = torch.randn(2, c * r * r, *spatial)
        cls = nf.DepthToSpaceOp
    module = from_torch(model.eval(), x)
    (op,) = _ops(module, cls)
    assert op.mode.data == "CRD" and op.block.value.data == r
    _close(module, model, x)


@settings(max_examples=examples(8))
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 5))
def test_channel_shuffle_is_a_channel_permutation(g: int, per: int, h: int) -> None:
    model = nn.ChannelShuffle(g).eval()
    x = torch.randn(2, g * per, h, 3)
    module = from_torch(model, x)
    assert {op.name for op in module.walk() if op.name.startswith("nf.")} <= {
        "nf.reshape",
        "nf.transpose",
    }
    _close(module, model, x)


@settings(max_examples=examples(12))
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.integers(1, 6), st.data())
def test_upsample_integer_scales_match_torch(scales: list[int], size: int, data) -> None:  # noqa: ANN001
    n = len(scales)
    spatial = [data.draw(st.integers(1, size)) for _ in range(n)]
    model = nn.Upsample(scale_factor=tuple(float(s) for s in scales), mode="nearest").eval()
    x = torch.randn(2, 3, *spatial)
    module = from_torch(model, x)
    (op,) = _ops(module, nf.UpsampleNearestOp)
    assert nf.tensor_shape(op.result)[2:] == tuple(s * r for s, r in zip(spatial, scales))
    _close(module, model, x)


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from((1, 2, 3)),
    st.integers(1, 4),
    st.sampled_from(("CRD", "DCR")),
)
def test_depth_to_space_inverts_space_to_depth(
    r: int, c: int, n: int, size: int, mode: str
) -> None:
    x = np.random.default_rng(0).standard_normal((2, c, *(size * r,) * n))
    y = kernels.space_to_depth(x, r, mode)
    assert y.shape == (2, c * r**n, *(size,) * n)
    np.testing.assert_array_equal(kernels.depth_to_space(y, r, mode), x)


def test_block_modes_follow_onnx() -> None:
    """ONNX's DepthToSpace reference (DCR and CRD) and SpaceToDepth (DCR only)."""
    b, (n, c, h, w) = 2, (2, 12, 3, 4)
    x = np.arange(n * c * h * w, dtype=np.float64).reshape(n, c, h, w)
    dcr = (
        x.reshape(n, b, b, c // 4, h, w)
        .transpose(0, 3, 4, 1, 5, 2)
        .reshape(n, c // 4, h * b, w * b)
    )
    crd = (
        x.reshape(n, c // 4, b, b, h, w)
        .transpose(0, 1, 4, 2, 5, 3)
        .reshape(n, c // 4, h * b, w * b)
    )
    np.testing.assert_array_equal(kernels.depth_to_space(x, b, "DCR"), dcr)
    np.testing.assert_array_equal(kernels.depth_to_space(x, b, "CRD"), crd)
    y = dcr
    s2d = y.reshape(n, c // 4, h, b, w, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c, h, w)
    np.testing.assert_array_equal(kernels.space_to_depth(y, b, "DCR"), s2d)


def test_conv_transpose_kernel_is_exact_on_integers() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (2, 4, 5, 6))
    w = rng.integers(-8, 8, (4, 3, 3, 2))
    y = kernels.conv_transpose(
        x, w, strides=[2, 3], pads=[1, 0, 1, 1], output_padding=[1, 2], groups=2, dilations=[1, 1]
    )
    expected = F.conv_transpose2d(
        torch.tensor(x, dtype=torch.float64),
        torch.tensor(w, dtype=torch.float64),
        stride=(2, 3),
        padding=(1, 0),
        output_padding=(1, 2),
        groups=2,
    )
    # torch pads symmetrically: nf's extra end pad of 1 along W crops one more column.
    np.testing.assert_array_equal(y, expected.numpy()[..., :-1].astype(np.int64))
    assert y.dtype == np.int64
