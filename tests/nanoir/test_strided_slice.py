"""Strided slices (``x[..., a:b:s]``, YOLOv5's Focus): the frontend writes ``nf.gather`` of
those rows, data movement at every level (nq == nh bit for bit), and a slice to the end with
``a < s`` streams along its own dim (``step`` rows in, the one at ``a`` out)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import stream
from torch import nn

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.programs import examples

torch.set_num_threads(1)


class Focus(nn.Module):
    """YOLOv5's Focus: space-to-depth by four strided slices, then a 1x1 conv."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4 * c, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]]
        return self.conv(torch.cat(parts, 1))


def test_focus_equals_torch_and_streams_at_nh() -> None:
    """nf == torch (float64 reference of the same slices); nq == nh; the nh program streamed
    along rows equals its whole run. Mutant seen to fail it: the ``indices`` stand-in of
    ``runtime/stream.py`` keeping the op's full index list."""
    torch.manual_seed(0)
    net = Focus(3).eval()
    x = torch.randn(2, 3, 6, 8)
    module = from_torch(net, (x,))
    assert sum(op.name == "nf.gather" for op in module.walk()) == 8
    (y,) = run(module, x.numpy(), dtype=np.float64)
    xs = x.double().numpy()
    parts = [xs[..., ::2, ::2], xs[..., 1::2, ::2], xs[..., ::2, 1::2], xs[..., 1::2, 1::2]]
    w = net.conv.weight.double().detach().numpy()[:, :, 0, 0]
    want = np.einsum("oc,nchw->nohw", w, np.concatenate(parts, 1))
    want += net.conv.bias.double().detach().numpy()[None, :, None, None]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    nanoir.quantize(module, [x.numpy()], weight_bits=4, act_bits=8)
    (q,) = run(module, x.numpy(), dtype=np.float64)
    hw = lower_to_hw(module.clone())
    assert sum(isinstance(op, nh.GatherOp) for op in hw.walk()) == 8
    (h,) = run(hw, x.numpy())
    assert h.tobytes() == q.tobytes()
    (codes,) = run(hw, x.numpy(), raw=True)
    for step in (1, 3):
        (s,) = stream(hw, [x.numpy()], step=step, raw=True)
        assert s.tobytes() == codes.tobytes()


def _program(shape: tuple[int, ...], axis: int, indices: list[int]) -> str:
    dims = "x".join(str(d) for d in shape)
    out = list(shape)
    out[axis] = len(indices)
    odims = "x".join(str(d) for d in out)
    idx = ", ".join(str(i) for i in indices)
    return f"""func.func @main(%x: tensor<?x{dims}xf32>) -> tensor<?x{odims}xf32> {{
  %y = nf.gather %x {{axis = {axis + 1} : i64, indices = array<i64: {idx}>}}
      : tensor<?x{dims}xf32> -> tensor<?x{odims}xf32>
  func.return %y : tensor<?x{odims}xf32>
}}"""


@settings(max_examples=examples(12))
@given(
    st.integers(2, 4),
    st.integers(1, 9),
    st.integers(1, 3),
    st.data(),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    st.booleans(),
    st.sampled_from(("never", "auto")),
)
def test_strided_slice_nq_equals_nh_and_streams(
    c: int,
    h: int,
    step: int,
    data: st.DataObject,
    bits: int,
    rounding: str,
    per_channel: bool,
    unsigned: str,
) -> None:
    """``x[:, :, a:b:s]`` (dim 2, the streamed one) and ``x[:, a::s]`` (channels, per-channel
    exponents gathered with them): nq == NumPy's slice of the quantized input, nh == nq bit
    for bit, and streamed == whole along dim 2 (to the end with ``a < s``; a slice that stops
    early or starts past ``s`` takes the whole extent). Mutant seen to fail it: the
    ``indices`` stand-in of ``runtime/stream.py`` keeping the op's full index list."""
    axis = data.draw(st.sampled_from((1, 1, 0)), "axis")
    size = (c, h)[axis]
    s = data.draw(st.integers(1, max(1, size)), "s")
    if data.draw(st.booleans(), "streams"):  # to the end from a < s: streamed along dim 2
        a, b = data.draw(st.integers(0, min(s, size) - 1), "a"), size
    else:
        a = data.draw(st.integers(0, size - 1), "a")
        b = data.draw(st.integers(a + 1, size), "b")
    indices = list(range(a, b, s))
    rng = np.random.default_rng(h * 31 + s)
    x = rng.standard_normal((2, c, h, 3)) * 2
    options = dict(act_bits=bits, rounding=rounding, act_per_channel=per_channel)
    # the quantized input, from the program without the slice (same calibration)
    identity = nanoir.parse(_program((c, h, 3), 0, list(range(c))))
    nanoir.quantize(identity, [x.astype(np.float32)], unsigned=unsigned, **options)
    (xq,) = run(identity, x, dtype=np.float64)
    module = nanoir.parse(_program((c, h, 3), axis, indices))
    nanoir.quantize(module, [x.astype(np.float32)], unsigned=unsigned, **options)
    (q,) = run(module, x, dtype=np.float64)
    want = np.take(xq, indices, axis=axis + 1)
    assert np.array_equal(q, want)
    hw = lower_to_hw(module.clone())
    (got,) = run(hw, x)
    assert got.tobytes() == q.tobytes()
    (codes,) = run(hw, x, raw=True)
    (streamed,) = stream(hw, [x], step=step, raw=True)
    assert streamed.tobytes() == codes.tobytes()
    (streamed_q,) = stream(module, [x], step=step, dtype=np.float64)
    assert streamed_q.tobytes() == q.tobytes()


@pytest.mark.parametrize(
    "length, start, step", [(5, 1, 2), (5, 0, 2), (7, 2, 3), (7, 0, 3), (4, 1, 2)]
)
def test_partial_last_window(length: int, start: int, step: int) -> None:
    """A slice to the end whose last window is partial: it fires only when it holds the row
    at ``start`` (x[1::2] of 5 rows has 2, x[::2] 3). Streamed == NumPy's slice, every step.
    Mutant seen to fail it: ``gather_rows`` setting ``ceil_mode`` for every partial window."""
    indices = list(range(start, length, step))
    module = nanoir.parse(_program((2, length, 3), 1, indices))
    x = np.random.default_rng(length).standard_normal((2, 2, length, 3))
    for s in (1, 2, 3):
        (got,) = stream(module, [x], step=s, dtype=np.float64)
        assert np.array_equal(got, x[:, :, start::step])


def _onnx_slice(
    path: str, starts: list[int], ends: list[int], axes: list[int], steps: list[int]
) -> None:
    from onnx import TensorProto, helper, numpy_helper, save

    names = ("starts", "ends", "axes", "steps")
    values = (starts, ends, axes, steps)
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in zip(names, values)]
    node = helper.make_node("Slice", ["x", *names], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 7, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", [x], [y], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [([1], [2**63 - 1], [2], [2]), ([0], [6], [3], [2]), ([-1], [-8], [2], [-2])],
)
def test_onnx_slice_with_steps_reads_as_a_gather(
    starts: list[int], ends: list[int], axes: list[int], steps: list[int], tmp_path: object
) -> None:
    """ONNX Slice (constant starts/ends/axes/steps, negative steps too) reads as nf.gather,
    equal to onnxruntime's result; a Slice along two axes reads too.
    Mutant seen to fail it: the nq row's ``_slice`` ignoring ``steps``."""
    import onnxruntime as ort

    path = f"{tmp_path}/s.onnx"
    _onnx_slice(path, starts, ends, axes, steps)
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6)).astype(np.float32)
    (want,) = ort.InferenceSession(path).run(None, {"x": x})
    module = nanoir.load(path)
    assert [op.name for op in module.walk()][2:] == ["nf.gather", "func.return"]
    (got,) = run(module, x)
    assert np.array_equal(got, want)
    _onnx_slice(path, [0, 5], [2, 0], [2, 3], [1, -2])  # two axes, one step negative
    (want,) = ort.InferenceSession(path).run(None, {"x": x})
    (got,) = run(nanoir.load(path), x)
    assert np.array_equal(got, want)


class EmptySlices(nn.Module):
    """Empty ranges of a slice: ``x[:, :0]`` joined to the rest, and ``x[:, 2:1]`` returned."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([x[:, :0], x[:, 1:]], 1) * 2, x[:, 2:1]


def test_an_empty_slice_is_a_piece_of_length_zero() -> None:
    """``x[:, :0]`` was "internal error importing aten.slice.Tensor" (its empty piece dropped
    from the split, the whole dim taken instead). The shapes and values equal torch's, and the
    program quantizes and lowers with nq == nh. Kills: ``_take_range`` dropping a piece of
    length 0."""
    torch.manual_seed(0)
    x = torch.randn(2, 3)
    module = from_torch(EmptySlices(), (x,))
    got = run(module, x.numpy(), dtype=np.float64)
    want = EmptySlices()(x.double())
    assert [g.shape for g in got] == [tuple(w.shape) for w in want] == [(2, 2), (2, 0)]
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-6)
    nanoir.quantize(module, [torch.randn(2, 3).numpy()], progress=False)
    q = run(module, x.numpy(), dtype=np.float64)
    h = run(lower_to_hw(module.clone()), x.numpy())
    assert [a.tobytes() for a in q] == [b.tobytes() for b in h]
