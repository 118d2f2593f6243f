"""Shape inference (``nanoir.runtime.numerics.shapes``) against what PyTorch actually produces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.runtime.numerics.shapes import (
    DYNAMIC_INDEX,
    ShapeError,
    broadcast_shapes,
    infer_concat_shape,
    infer_conv_shape,
    infer_matmul_shape,
    infer_pool_shape,
)
from xdsl.dialects.builtin import DYNAMIC_INDEX as XDSL_DYNAMIC_INDEX

from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")
F = torch.nn.functional


@st.composite
def conv_cases(draw: st.DrawFn):
    n = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 2, 3]))
    cin = groups * draw(st.integers(1, 3))
    cout = groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(n)]
    dil = [draw(st.integers(1, 3)) for _ in range(n)]
    stride = [draw(st.integers(1, 3)) for _ in range(n)]
    pads = [draw(st.integers(0, 3)) for _ in range(2 * n)]
    size = [draw(st.integers(1, 12)) for _ in range(n)]
    return n, groups, cin, cout, kernel, dil, stride, pads, size


@settings(max_examples=examples(150))
@given(conv_cases())
def test_conv_shape_matches_torch(case) -> None:
    n, groups, cin, cout, kernel, dil, stride, pads, size = case
    x = torch.zeros(2, cin, *size)
    w = torch.zeros(cout, cin // groups, *kernel)
    # torch pads symmetric only; apply ONNX-style (begin..., end...) pads explicitly.
    torch_pad = []
    for i in reversed(range(n)):
        torch_pad += [pads[i], pads[n + i]]
    xp = F.pad(x, torch_pad)
    conv = F.conv1d if n == 1 else F.conv2d
    try:
        expected = tuple(conv(xp, w, stride=stride, dilation=dil, groups=groups).shape)
    except RuntimeError:
        with pytest.raises(ShapeError):
            infer_conv_shape(
                x.shape, w.shape, strides=stride, pads=pads, dilations=dil, groups=groups
            )
        return
    got = infer_conv_shape(
        tuple(x.shape), tuple(w.shape), strides=stride, pads=pads, dilations=dil, groups=groups
    )
    assert got == expected
    dynamic = infer_conv_shape(
        (DYNAMIC_INDEX, *x.shape[1:]),
        tuple(w.shape),
        strides=stride,
        pads=pads,
        dilations=dil,
        groups=groups,
    )
    assert dynamic == (DYNAMIC_INDEX, *expected[1:])


@settings(max_examples=examples(150))
@given(
    n=st.integers(1, 2),
    data=st.data(),
    ceil_mode=st.booleans(),
    use_max=st.booleans(),
)
def test_pool_shape_matches_torch(
    n: int, data: st.DataObject, ceil_mode: bool, use_max: bool
) -> None:
    kernel = [data.draw(st.integers(1, 4)) for _ in range(n)]
    stride = [data.draw(st.integers(1, 3)) for _ in range(n)]
    pad = [data.draw(st.integers(0, k // 2)) for k in kernel]
    dil = [data.draw(st.integers(1, 2)) if use_max else 1 for _ in range(n)]
    size = [data.draw(st.integers(1, 12)) for _ in range(n)]
    x = torch.zeros(1, 2, *size)
    if use_max:
        pool = F.max_pool1d if n == 1 else F.max_pool2d
        kwargs = {"dilation": dil}
    else:
        pool = F.avg_pool1d if n == 1 else F.avg_pool2d
        kwargs = {}
    try:
        expected = tuple(pool(x, kernel, stride, pad, ceil_mode=ceil_mode, **kwargs).shape)
    except RuntimeError:
        with pytest.raises(ShapeError):
            infer_pool_shape(
                tuple(x.shape),
                kernel,
                strides=stride,
                pads=pad + pad,
                dilations=dil,
                ceil_mode=ceil_mode,
            )
        return
    got = infer_pool_shape(
        tuple(x.shape), kernel, strides=stride, pads=pad + pad, dilations=dil, ceil_mode=ceil_mode
    )
    assert got == expected


shape_st = st.lists(st.integers(1, 3), min_size=0, max_size=4)


@settings(max_examples=examples(150))
@given(a=shape_st, b=shape_st)
def test_broadcast_matches_torch(a: list[int], b: list[int]) -> None:
    try:
        expected = tuple(torch.broadcast_shapes(tuple(a), tuple(b)))
    except RuntimeError:
        with pytest.raises(ShapeError):
            broadcast_shapes(a, b)
        return
    assert broadcast_shapes(a, b) == expected


@settings(max_examples=examples(150))
@given(
    a=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    b=st.lists(st.integers(1, 3), min_size=1, max_size=4),
)
def test_matmul_shape_matches_torch(a: list[int], b: list[int]) -> None:
    try:
        expected = tuple(torch.matmul(torch.zeros(a), torch.zeros(b)).shape)
    except RuntimeError:
        with pytest.raises(ShapeError):
            infer_matmul_shape(a, b)
        return
    assert infer_matmul_shape(a, b) == expected


def test_dynamic_dims_propagate() -> None:
    assert broadcast_shapes((DYNAMIC_INDEX, 16, 1, 1), (1, 16, 8, 8)) == (DYNAMIC_INDEX, 16, 8, 8)
    assert infer_concat_shape([(DYNAMIC_INDEX, 8, 4), (DYNAMIC_INDEX, 4, 4)], 1) == (
        DYNAMIC_INDEX,
        12,
        4,
    )
    assert infer_concat_shape([(2, DYNAMIC_INDEX), (2, 3)], 1) == (2, DYNAMIC_INDEX)
    with pytest.raises(ShapeError, match="differ outside axis 1"):
        infer_concat_shape([(2, 3), (3, 3)], 1)


def test_dynamic_index_is_xdsls() -> None:
    assert DYNAMIC_INDEX == XDSL_DYNAMIC_INDEX
