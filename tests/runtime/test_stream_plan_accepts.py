"""Whatever stream-plan accepts streams equal to the whole run (issue 32 §4).

``nanoir.stream_plan`` and the streaming executor share the analysis (``nanoir.lowering.
analysis``); a program the plan accepts must stream (``nanoir.stream``, ``nanoir.Streamer``)
bit for bit equal to ``nanoir.run``, and one it refuses is refused with a ``nanoir.Error``.
The programs: random ones from ``nanoir.testing.programs`` (every op kind), and detection
heads written in torch, whose channels are split by a view, permuted so that the streamed dim
moves, and merged again by a reshape, then read by elementwise ops (the issue's
``view(N, 3, 9, H, W).permute(0, 1, 3, 4, 2).reshape(N, -1, 9).sigmoid()``, accepted by the
plan and then failing at the sigmoid: "a streamed window gave 9 rows along dim 2, the plan
expects 1").
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from nanoir.lowering.analysis.rules import StreamPlanError
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import StreamRunner, stream
from torch import nn
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.errors import ArgumentError
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program


def streams_like_the_whole_run(module: ModuleOp, x: np.ndarray, step: int) -> bool:
    """``True`` when stream-plan accepts ``module`` along dim 2 and the stream then equals the
    whole run (every output, same dtype and bytes), also through a ``Streamer`` pushing
    ``step`` rows at a time; ``False`` when the plan refuses it (with a ``nanoir.Error``)."""
    try:
        nanoir.stream_plan(module, steps=[(2, step)])
    except nanoir.Error as e:
        _note(f"refused: {type(e).__name__}")
        return False
    want = run(module, x, raw=True)
    got = stream(module, [x], step=step, runner=StreamRunner(module, raw=True))
    pushed = nanoir.Streamer(module, raw=True)
    pieces: list[list[np.ndarray]] = [[] for _ in want]
    for start in range(0, x.shape[2], step):
        for k, y in enumerate(pushed.push(x[:, :, start : start + step])):
            if y is not None:
                pieces[k].append(y)
    for k, y in enumerate(pushed.flush()):
        if y is not None:
            pieces[k].append(y)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()
        axis = pushed.output_axes[k]
        p = pieces[k]
        joined = p[-1] if axis is None else np.concatenate(p, axis=axis)
        assert joined.dtype == w.dtype and joined.tobytes() == w.tobytes()
    _note("accepted and equal")
    return True


def _note(what: str) -> None:
    """Count accepted and refused programs in hypothesis's statistics."""
    if currently_in_test_context():
        event(what)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_the_plan_accepts_stream_equal(data: st.DataObject) -> None:
    """Random programs of every op kind, nq and nh, any step: accepted ones stream equal
    (the recurrent kind across a transpose, a bidirectional one, is among the refused)."""
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((2, *shape[1:]))
    step = data.draw(st.integers(1, 3), label="step")
    hw = lower_to_hw(module.clone())
    codes = nanoir.runtime.nh.quantize_inputs(  # type: ignore[attr-defined]
        hw.body.block.first_op, [x]
    )[0]
    streams_like_the_whole_run(module, x, step)
    streams_like_the_whole_run(hw, codes, step)


class DetectionHead(nn.Module):
    """A conv, its channels split as ``[groups, per]``, permuted, merged and read by
    elementwise ops (``tail``)."""

    def __init__(self, groups: int, per: int, perm: tuple[int, ...], tail: str):
        super().__init__()
        self.conv = nn.Conv2d(4, groups * per, 3, padding=1)
        self.groups, self.per, self.perm, self.tail = groups, per, perm, tail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        n, _, h, w = y.shape
        y = y.view(n, self.groups, self.per, h, w).permute(*self.perm)
        y = y.reshape(n, -1, y.shape[-1])
        if self.tail == "sigmoid":
            return y.sigmoid()
        if self.tail == "relu_add":
            return torch.relu(y) + y
        if self.tail == "tanh_mul":
            return torch.tanh(y) * 0.5
        return y


PERMS = [(0, 1, 3, 4, 2), (0, 1, 2, 3, 4), (0, 3, 1, 2, 4), (0, 2, 4, 3, 1), (0, 1, 4, 3, 2)]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.sampled_from(PERMS),
    st.sampled_from(["sigmoid", "relu_add", "tanh_mul", "none"]),
    st.integers(3, 6),
    st.integers(1, 3),
    st.integers(0, 100),
)
def test_detection_heads_stream_equal_or_are_refused(
    groups: int, per: int, perm: tuple[int, ...], tail: str, h: int, step: int, seed: int
) -> None:
    """The issue's head and its neighbours (other splits, permutations and tails), at the
    nq and nh levels, streamed along H.

    kills (run): a node fed by whole units whose result takes the analysed dim as its axis
    (the plan counted one row per firing, the kernel gave the unit's whole extent)."""
    torch.manual_seed(seed)
    model = DetectionHead(groups, per, perm, tail).eval()
    x = torch.randn(2, 4, h, 5)
    module = nanoir.from_torch(model, (x,))
    nanoir.quantize(module, [x.numpy()])
    hw = lower_to_hw(module.clone())
    xs = x.numpy().astype(np.float64)
    streams_like_the_whole_run(module, xs, step)
    codes = nanoir.runtime.nh.quantize_inputs(hw.body.block.first_op, [xs])[0]  # type: ignore[attr-defined]
    streams_like_the_whole_run(hw, codes, step)


def test_the_issue_head_streams_equal() -> None:
    """The issue's own head (16 -> 27 channels, 3 x 9, sigmoid): accepted, and equal."""

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(16, 27, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            n, _, hh, ww = y.shape
            return y.view(n, 3, 9, hh, ww).permute(0, 1, 3, 4, 2).reshape(n, -1, 9).sigmoid()

    torch.manual_seed(0)
    x = torch.randn(2, 16, 6, 5)
    module = nanoir.from_torch(Head().eval(), (x,))
    nanoir.quantize(module, [x.numpy()])
    hw = lower_to_hw(module.clone())
    xs = x.numpy().astype(np.float64)
    assert streams_like_the_whole_run(module, xs, 1)
    codes = nanoir.runtime.nh.quantize_inputs(hw.body.block.first_op, [xs])[0]  # type: ignore[attr-defined]
    assert streams_like_the_whole_run(hw, codes, 2)


RANK2 = """\
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %y = nf.relu %x : tensor<?x8xf32>
  func.return %y : tensor<?x8xf32>
}
"""


def test_a_rank_2_input_is_refused_by_the_plan_as_by_the_stream() -> None:
    """``[N, T]`` with the default mem_dim 2: stream-plan accepted it (nothing had the dim,
    so every value moved as a unit) and ``nanoir.stream`` then refused it; now both refuse,
    with the same reason.

    kills (run): plan_function without the mem_dim check."""
    module = nanoir.parse(RANK2)
    with pytest.raises(StreamPlanError) as planned:
        nanoir.stream_plan(module)
    with pytest.raises(ArgumentError) as streamed:
        nanoir.stream(module, [np.zeros((1, 8), np.float32)])
    with pytest.raises(ArgumentError):
        nanoir.Streamer(module)
    assert str(planned.value) == f"stream-plan: {streamed.value}"
    assert "input ranks: 2), got 2" in str(streamed.value)


def _unverified_short_program() -> ModuleOp:
    """A conv with a 5-row window on a static 3-row input, built without the verifier (which
    refuses it): what the plan's simulation meets when a static stream is too short."""
    from nanoir.dialects import nf
    from xdsl.dialects.builtin import (
        BytesAttr,
        DenseIntOrFPElementsAttr,
        FunctionType,
        TensorType,
        f32,
    )
    from xdsl.dialects.func import FuncOp, ReturnOp
    from xdsl.ir import Block, Region

    block = Block(arg_types=[TensorType(f32, [-(2**63), 1, 3])])
    a = np.ones((1, 1, 5), dtype="<f4")
    w = nf.ConstantOp(
        DenseIntOrFPElementsAttr(TensorType(f32, a.shape), BytesAttr(a.tobytes())), "w"
    )
    conv = nf.ConvOp.create(
        operands=[block.args[0], w.results[0]],
        result_types=[TensorType(f32, [-(2**63), 1, 1])],
    )
    block.add_ops([w, conv, ReturnOp(conv.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [conv.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def test_a_too_short_static_stream_names_the_op() -> None:
    """The plan says which op's window the stream never fills, with its counts.

    kills (run): the old message, "the input is too short", naming no op."""
    with pytest.raises(StreamPlanError, match=r"the input is too short: .*nf\.conv.* needs 5 rows"):
        nanoir.stream_plan(_unverified_short_program())
