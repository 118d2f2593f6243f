"""Elementwise ops take NumPy broadcasting at every level (lowering/hw/elementwise.py): a
runtime operand of lower rank, or with 1s where the other has a dim, lowers to nh, and the
nh program equals the nq one bit for bit.

Random broadcast shapes (ranks 1 to 5, either operand of lower rank, dims of 1 on either
side), every broadcasting op (add, sub, mul, maximum, minimum), per-tensor or per-channel
exponents at 2, 4 and 8 bits, signed or unsigned, every rounding mode: nf against torch in
float64 (the float oracle), then nq == nh. Then: the nh program streamed along a dim the
lower-rank operand spans equals its whole run, and the integer writers (.ne, integer ONNX
run by onnxruntime) carry the broadcast.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

OPS = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}


class Binary(nn.Module):
    """``op(relu(x), y)``: relu makes x's codes unsigned under ``unsigned="auto"``."""

    def __init__(self, op: str):
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return OPS[self.op](torch.relu(x), y)


@st.composite
def broadcast_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast: the result's trailing dims, a quarter of them set to 1, one
    of them usually of lower rank (most often by one dim, so that its own channel axis
    falls on the result's axis 2 while its axis 0 meets the result's channels)."""
    out = draw(st.lists(st.integers(2, 4), min_size=1, max_size=5))

    def operand(full: bool) -> tuple[int, ...]:
        fewer = 0 if full else draw(st.sampled_from([1, 1, 2, 0, 3, 4]))
        rank = max(1, len(out) - fewer)
        ones = draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank))
        return tuple(1 if one == 0 else d for one, d in zip(ones, out[len(out) - rank :]))

    x, y = operand(draw(st.booleans())), operand(False)
    return (x, y) if draw(st.booleans()) else (y, x)


def _arrays(shapes: tuple[tuple[int, ...], ...], seed: int) -> list[np.ndarray]:
    """Normal values, each channel (dim 1) on its own scale so that per-channel exponents
    differ (with one scale they mostly agree, and no alignment across channels is tried)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape in shapes:
        a = rng.standard_normal(shape)
        if len(shape) >= 2:
            a *= (4.0 ** np.arange(shape[1])).reshape((1, -1) + (1,) * (len(shape) - 2))
        arrays.append(a.astype(np.float32))
    return arrays


@settings(max_examples=examples(30), deadline=None)
@example("add", ((2, 3, 4), (3, 4)), True, 8, "never", "trunc", 0)
@given(
    st.sampled_from(sorted(OPS)),
    broadcast_shapes(),
    st.booleans(),
    st.sampled_from([2, 4, 8]),
    st.sampled_from(["never", "auto"]),
    st.sampled_from([m.value for m in RoundingMode]),
    st.integers(0, 2**16),
)
def test_broadcast_nq_equals_nh(
    op: str,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    per_channel: bool,
    bits: int,
    unsigned: str,
    rounding: str,
    seed: int,
) -> None:
    """nf run in float64 equals torch in float64 exactly; nq == nh bit for bit. Kills: a lower-rank runtime
    operand shifted with the result's rank (``broadcasts a runtime value of lower rank``, the
    refusal this replaces); the alignment keeping exponents that vary along the result's
    channel axis where a lower-rank operand has its axis 0, not its channels (``channel_axis``
    not right-aligned: the example); a product's lower-rank operand left per channel off the
    result's channel axis."""
    model = Binary(op)
    example = _arrays(shapes, seed)
    module = nanoir.from_torch(
        model, tuple(torch.from_numpy(a) for a in example), dynamic_batch=False
    )
    (nf_out,) = nanoir.run(module, *example, dtype=np.float64)
    expected = model(*(torch.from_numpy(a).double() for a in example)).numpy()
    np.testing.assert_array_equal(nf_out, expected)
    calibration = [tuple(_arrays(shapes, seed + k)) for k in (1, 2)]
    nanoir.quantize(
        module,
        calibration,
        act_bits=bits,
        act_per_channel=per_channel,
        unsigned=unsigned,
        rounding=rounding,
    )
    hw = nanoir.lower_to_hw(module.clone())
    inputs = _arrays(shapes, seed + 3)
    (q,) = nanoir.run(module, *inputs)
    (h,) = nanoir.run(hw, *inputs)
    np.testing.assert_array_equal(h, q)


class ConvPlusRow(nn.Module):
    """A conv's ``[N, C, H, W]`` plus a runtime ``[H, W]`` (its dim 0 is the result's dim 2)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + y


def _conv_plus_row() -> tuple[object, list[np.ndarray]]:
    torch.manual_seed(0)
    inputs = _arrays(((2, 3, 6, 5), (6, 5)), 0)
    module = nanoir.from_torch(
        ConvPlusRow(), tuple(torch.from_numpy(a) for a in inputs), dynamic_batch=False
    )
    nanoir.quantize(module, [tuple(inputs)], act_bits=8, act_per_channel=True)
    return nanoir.lower_to_hw(module), _arrays(((2, 3, 6, 5), (6, 5)), 1)


def test_streamed_along_a_dim_the_lower_rank_operand_spans() -> None:
    """Streamed along dim 2 (the lower-rank operand's dim 0, NumPy right-aligns it) the add
    waits for the whole extent and equals the whole run. Kills: the Elementwise streaming
    rule stepping row by row there (the streamer then gives the add a whole ``[H, W]`` against
    one row: 'a streamed window gave 6 rows along dim 2')."""
    hw, inputs = _conv_plus_row()
    (whole,) = nanoir.run(hw, *inputs)
    (streamed,) = nanoir.stream(hw, inputs, mem_dim=2, step=1)
    np.testing.assert_array_equal(streamed, whole)


def test_integer_writers_carry_the_broadcast() -> None:
    """The hw program written as .ne and as integer ONNX reads back and runs equal, and
    onnxruntime runs it equal (ONNX's Add broadcasts as NumPy does)."""
    hw, inputs = _conv_plus_row()
    (whole,) = nanoir.run(hw, *inputs)
    (ort,) = nanoir.run(hw, *inputs, backend="onnxruntime")
    np.testing.assert_array_equal(ort, whole)
    with tempfile.TemporaryDirectory() as folder:
        for name in ("h.ne", "h.onnx"):
            path = os.path.join(folder, name)
            nanoir.save(hw, path)
            (back,) = nanoir.run(nanoir.load(path), *inputs)
            np.testing.assert_array_equal(back, whole)
