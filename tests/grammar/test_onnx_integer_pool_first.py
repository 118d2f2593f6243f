"""A requant whose one reader is a max pool is written pool first (``pools.requant_or_pool_first``):
the pool over the wide codes, then the requant of the pooled codes. That equals the NumPy
executor's requant-then-pool only because every requant is non-decreasing (each rounding mode,
the saturation, an unsigned result's clip at 0): held here against the NumPy executor on nets
whose pool reads a requant no product wrote (a PReLU's, a residual sum's), for every rounding
mode, 4/8/16-bit activations, signed and unsigned codes, per-tensor and per-channel exponents,
and pools with padding, dilation, ceil mode and odd sizes."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh
from nanoir.grammar.onnx.integer import export_model
from nanoir.lowering.lower_to_hw import lower_to_hw
from torch import nn

import nanoir
from nanoir.testing.programs import examples
from tests.grammar.test_onnx_integer import check_equal, input_codes

torch.set_num_threads(1)


class _Net(nn.Module):
    """conv -> (PReLU | conv + conv) -> max pool -> conv: the pool reads the requant of a
    PReLU's codes or of a residual sum, not of a product."""

    def __init__(self, residual: bool, pool: nn.MaxPool2d) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.other = nn.Conv2d(3, 6, 1) if residual else None
        self.prelu = None if residual else nn.PReLU(6, init=0.25)
        if self.prelu is not None:
            with torch.no_grad():
                self.prelu.weight.uniform_(-0.5, 0.9)
        self.pool = pool
        self.head = nn.Conv2d(6, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = self.prelu(y) if self.prelu is not None else y + self.other(x)  # type: ignore[misc]
        return self.head(self.pool(y))


@functools.cache
def _program(residual: bool, pool: tuple[int, int, int, int, bool], size: tuple[int, int]):  # noqa: ANN202
    """The float program of a seeded ``_Net`` (exported once per structure)."""
    kernel, stride, pad, dilation, ceil = pool
    torch.manual_seed(kernel + 3 * stride + 7 * dilation + 11 * pad + 13 * size[0] + size[1])
    net = _Net(residual, nn.MaxPool2d(kernel, stride, pad, dilation, ceil_mode=ceil)).eval()
    return nanoir.from_torch(net, (torch.zeros(2, 3, *size),))


@settings(max_examples=examples(20), deadline=None)
@given(
    residual=st.booleans(),
    kernel=st.integers(2, 3),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 2),
    ceil=st.booleans(),
    pad=st.booleans(),
    size=st.sampled_from([(7, 7), (8, 11), (12, 9)]),
    bits=st.sampled_from([4, 8, 16]),
    mode=st.sampled_from(["trunc", "floor", "half_up", "half_even"]),
    unsigned=st.sampled_from(["never", "auto"]),
    per_channel=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_pool_first_equals_the_requant_first(
    residual: bool,
    kernel: int,
    stride: int,
    dilation: int,
    ceil: bool,
    pad: bool,
    size: tuple[int, int],
    bits: int,
    mode: str,
    unsigned: str,
    per_channel: bool,
    seed: int,
) -> None:
    """onnxruntime's codes are the NumPy executor's, and the graph pools before it
    requantizes (a ``MaxPool`` reads the wide codes: the path under test was taken)."""
    rng = np.random.default_rng(seed)
    module = _program(residual, (kernel, stride, kernel // 2 if pad else 0, dilation, ceil), size)
    module = module.clone()
    x = rng.standard_normal((2, 3, *size)).astype(np.float32)
    nanoir.quantize(
        module,
        [x],
        rounding=mode,
        unsigned=unsigned,
        act_bits=bits,
        act_per_channel=per_channel,
        bias_correction=False,
        progress=False,
    )
    hw = lower_to_hw(module)
    pools = [op for op in hw.walk() if isinstance(op, nh.MaxPoolOp)]
    assert len(pools) == 1 and isinstance(pools[0].input.owner, nh.RequantOp)
    check_equal(hw, input_codes(hw, rng.standard_normal(x.shape) * 3))
    model = export_model(hw, fused=None)
    pooled = [n for n in model.graph.node if n.op_type in ("MaxPool", "Slice")]
    assert any(n.output[0].endswith("_pre") for n in pooled)


@pytest.mark.parametrize(
    ("kernel", "stride", "pad", "dilation", "size"),
    [(2, 2, 1, 1, (7, 7)), (3, 2, 1, 2, (8, 9)), (3, 3, 1, 1, (10, 7)), (2, 2, 0, 1, (7, 8))],
)
@pytest.mark.parametrize("relu", [True, False])
def test_ceil_mode_drops_a_last_window_that_starts_in_the_padding(
    kernel: int, stride: int, pad: int, dilation: int, size: tuple[int, int], relu: bool
) -> None:
    """PyTorch's ceil mode (nh's) drops a last window that would start in the right
    padding, ONNX's keeps it: the writer slices it off (the 7x7, 2/2 pad 1 pool made a 5x5
    ``MaxPool`` for a 4x4 result, which onnx.checker refused), on the pool of bytes after a
    conv + ReLU and on a pool written before its requant; oracle: the NumPy executor."""
    torch.manual_seed(kernel + size[0])
    rng = np.random.default_rng(size[1])
    act = nn.ReLU() if relu else nn.PReLU(5)
    net = nn.Sequential(
        nn.Conv2d(3, 5, 3, padding=1),
        act,
        nn.MaxPool2d(kernel, stride, pad, dilation, ceil_mode=True),
        nn.Conv2d(5, 4, 1),
    ).eval()
    x = rng.standard_normal((2, 3, *size)).astype(np.float32)
    module = nanoir.from_torch(net, (torch.from_numpy(x),))
    nanoir.quantize(module, [x], rounding="half_even", progress=False)
    hw = lower_to_hw(module)
    check_equal(hw, input_codes(hw, rng.standard_normal(x.shape) * 2))
