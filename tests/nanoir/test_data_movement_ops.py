"""The ATen data movement issue 21 unblocks: ``expand``, ``index.Tensor`` with constant
indices (``nf.gather``), ``unbind`` (split + reshapes) and ``slice_scatter`` / ``copy`` (the
in-place slice update ``x[:, a:b] += y`` of GhostNet-style blocks, split + concat) at every
level: nf against torch in float64, nq == nh bit for bit after quantize + lower-to-hw (bits,
rounding, per-channel activations drawn), `.ne` round trips at both levels, streamed == whole,
ONNX nf against onnxruntime and read back; the refusals name the node.

Mutants seen to fail in a private copy (``/tmp/copy-datamove``), each named at its test.
"""

from __future__ import annotations

import functools
import operator
import os
import tempfile

import numpy as np
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.nf import strided_indices
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn

import nanoir
from nanoir import qat
from nanoir.testing.programs import examples

torch.set_num_threads(1)

KINDS = ("gather", "gather2d", "expand", "unbind", "scatter_add", "scatter_set", "copy")


class Moves(nn.Module):
    """A 1x1 conv (so the moved value is a quantized computed one), one data movement along
    ``dim`` (1 = channels, 3 = the last dim; never the streamed dim 2), and an add after it
    so the result is requantized."""

    def __init__(
        self, kind: str, c: int, dim: int, idx: list[int], lo: int, hi: int, full: bool = False
    ):
        super().__init__()
        self.kind, self.dim, self.lo, self.hi, self.full = kind, dim, lo, hi, full
        self.conv = nn.Conv2d(c, c, 1)
        # full: every piece a split makes is read (NanoEngine's hw level has no dead
        # outputs), so the side value is exactly the slice (or the 1-channel piece) it fills.
        side = (1 if kind in ("expand", "copy") else hi - lo) if full else c
        self.side = nn.Conv2d(c, side, 1)
        shape = (2, len(idx) // 2) if kind == "gather2d" else (len(idx),)
        self.register_buffer("idx", torch.tensor(idx[: int(np.prod(shape))]).reshape(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, s = self.conv(x), self.side(x)
        d, lo, hi = self.dim, self.lo, self.hi
        if self.full:
            return self._full(y, s)
        if self.kind in ("gather", "gather2d"):
            g = y[:, self.idx] if d == 1 else y[..., self.idx]
            g = g.flatten(1, 2) if self.kind == "gather2d" and d == 1 else g
            g = g.flatten(3, 4) if self.kind == "gather2d" and d == 3 else g
            return g + g.narrow(d, 0, 1)
        if self.kind == "expand":
            piece = y.narrow(d, lo, 1)
            shape = [-1, -1, -1, -1]
            shape[d] = y.shape[d]
            return piece.expand(*shape) + s
        if self.kind == "unbind":
            parts = y.unbind(d)
            return (parts[0] - parts[-1] * 0.5).unsqueeze(d) + s.narrow(d, 0, 1)
        y = y.clone()
        if self.kind == "scatter_add":
            if d == 1:
                y[:, lo:hi] += s[:, lo:hi]
            else:
                y[..., lo:hi] += s[..., lo:hi]
        elif self.kind == "scatter_set":
            if d == 1:
                y[:, lo:hi] = s[:, lo:hi]
            else:
                y[..., lo:hi] = s[..., lo:hi]
        else:  # copy: a broadcast assignment
            if d == 1:
                y[:, lo:hi] = s[:, :1]
            else:
                y[..., lo:hi] = s[..., :1]
        return y + s

    def _full(self, y: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """Along channels, reading every piece."""
        lo, hi = self.lo, self.hi
        if self.kind in ("gather", "gather2d"):
            g = y[:, self.idx]
            return g.flatten(1, 2) if self.kind == "gather2d" else g
        if self.kind == "expand":
            return s.expand(-1, y.shape[1], -1, -1) + y
        if self.kind == "unbind":
            return functools.reduce(operator.add, y.unbind(1)).unsqueeze(1)
        y = y.clone()
        if self.kind == "scatter_add":
            y[:, lo:hi] += s
        elif self.kind == "scatter_set":
            y[:, lo:hi] = s
        else:
            y[:, lo:hi] = s
        return y


@st.composite
def cases(draw, full: bool = False):  # noqa: ANN001, ANN201
    # full: no slice assignment (its overwritten slice is a split piece nothing reads).
    kind = draw(st.sampled_from(KINDS[:5] if full else KINDS))
    c = draw(st.integers(2, 5))
    dim = 1 if full else draw(st.sampled_from((1, 3)))
    size = {1: c, 3: draw(st.integers(2, 5))}[dim]
    m = draw(st.integers(2, 4))
    count = draw(st.integers(2, 6))
    idx = [draw(st.integers(-size, size - 1)) for _ in range(count)]
    lo = draw(st.integers(0, size - 1))
    hi = draw(st.integers(lo + 1, size))
    shape = (draw(st.integers(1, 3)), c, m, size if dim == 3 else draw(st.integers(2, 5)))
    return Moves(kind, c, dim, idx, lo, hi, full).eval(), shape


def _inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@settings(max_examples=examples(10), deadline=None)
@given(cases(), st.integers(0, 2**16))
def test_nf_matches_torch_in_float64(case, seed: int) -> None:  # noqa: ANN001
    """nf against torch, both in float64, within 1e-5 * max(1, max |torch|). Mutants: the
    gather kernel taking its indices sorted; slice_scatter returning its input unchanged."""
    model, shape = case
    torch.manual_seed(seed)
    model = model.double()
    x = torch.from_numpy(_inputs(shape, seed)).double()
    module = nanoir.from_torch(model, (x,))
    with torch.no_grad():
        expected = model(x).numpy()
    (actual,) = nanoir.run(module, x.numpy())
    assert actual.shape == expected.shape
    bound = 1e-5 * max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(actual - expected).max()) <= bound


def _moving_ops(module) -> set[str]:  # noqa: ANN001
    return {op.name for op in module.walk()}


def _quantized(model: nn.Module, shape, seed: int, bits: int, rounding: str, pc: bool):  # noqa: ANN001, ANN202
    x = _inputs(shape, seed)
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    calib = [_inputs(shape, seed + k) for k in range(1, 3)]
    nanoir.quantize(
        module,
        calib,
        weight_bits=8,
        act_bits=bits,
        rounding=rounding,
        act_per_channel=pc,
        weight_per_channel=pc,
    )
    return module, x


@settings(max_examples=examples(10), deadline=None)
@given(
    cases(),
    st.integers(0, 2**16),
    st.sampled_from((4, 8, 16)),
    st.sampled_from([m.value for m in RoundingMode]),
    st.booleans(),
)
def test_nq_equals_nh_bit_for_bit(case, seed, bits, rounding, pc) -> None:  # noqa: ANN001
    """quantize + lower-to-hw: the nh run (reals) equals the nq run element for element, and
    the moves are nh.gather / nh.expand / nh.split + nh.concat. Mutant: LowerGather keeping
    the input's per-channel exponents instead of gathering them with their channels. A slice
    update along a non-channel dim of per-channel activations joins per-channel exponents
    along that dim, which nh.concat cannot: lower-to-hw refuses it, naming the concat."""
    model, shape = case
    torch.manual_seed(seed)
    module, x = _quantized(model, shape, seed, bits, rounding, pc)
    (q,) = nanoir.run(module, x)
    try:
        hw = nanoir.lower_to_hw(module.clone())
    except nanoir.Error as e:
        assert pc and model.dim != 1, e
        assert "'nf.concat'" in str(e) and "per-channel exponents along a non-channel" in str(e)
        return
    (h,) = nanoir.run(hw, x)
    np.testing.assert_array_equal(h, q)
    names = _moving_ops(hw)
    if model.kind.startswith("gather"):
        assert "nh.gather" in names
    if model.kind == "expand":
        assert "nh.expand" in names
    if model.kind.startswith("scatter") or model.kind == "copy":
        assert "nh.concat" in names or model.hi - model.lo == shape[model.dim]


ONE_CHANNEL_ADDED = """
func.func @main(%x: tensor<?x2x1x3xf32>) -> tensor<?x2x1x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[[3]], [[4]]]> : tensor<2x1x1xi8>}
      : tensor<?x2x1x3xf32>
  %s, %t = nf.split %xq {axis = 1 : i64, sizes = array<i64: 1, 1>}
      : (tensor<?x2x1x3xf32>) -> (tensor<?x1x1x3xf32>, tensor<?x1x1x3xf32>)
  %a = nf.add %xq, %s : (tensor<?x2x1x3xf32>, tensor<?x1x1x3xf32>) -> tensor<?x2x1x3xf32>
  %aq = nq.fake_quant %a {bits = 8 : i64, exp = dense<[[[2]], [[3]]]> : tensor<2x1x1xi8>}
      : tensor<?x2x1x3xf32>
  func.return %aq : tensor<?x2x1x3xf32>
}
"""


def test_one_channel_added_to_per_channel_exponents() -> None:
    """``x + x[:, :1]`` with x per channel at exponents [3, 4]: the one-channel operand is
    broadcast along channels, where the sum's exponents differed, and lower-to-hw shifted it
    by a per-channel shift it has no channels for (an ``nh.requant`` of shift [1, 0] on one
    channel: "non-broadcastable output operand (1,1,4,5) vs (1,2,4,5)", the thorough profile's
    failure of test_nq_equals_nh_bit_for_bit, there after gather2d's ``g + g.narrow(1, 0, 1)``).
    Expected values: the fake-quant semantics written here in NumPy (trunc, saturating).
    Mutant seen to fail it: ``exact_sum`` without the finest exponent along broadcast dims."""
    module = nanoir.parse(ONE_CHANNEL_ADDED)
    x = np.random.default_rng(0).standard_normal((2, 2, 1, 3)) * 4

    def fq(v: np.ndarray, k: np.ndarray) -> np.ndarray:
        return np.clip(np.trunc(v * 2.0**k), -128, 127) * 2.0**-k

    xq = fq(x, np.array([3, 4]).reshape(1, 2, 1, 1))
    want = fq(xq + xq[:, :1], np.array([2, 3]).reshape(1, 2, 1, 1))
    (q,) = nanoir.run(module, x)
    (h,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)
    np.testing.assert_array_equal(q, want)
    np.testing.assert_array_equal(h, want)


def _named_outputs(module, outputs) -> dict[str, np.ndarray]:  # noqa: ANN001
    ret = list(module.walk())[-1]
    return {v.name_hint: o for v, o in zip(ret.operands, outputs)}


@settings(max_examples=examples(10), deadline=None)
@given(cases(full=True), st.integers(0, 2**16), st.sampled_from((4, 8)))
def test_ne_round_trip_both_levels(case, seed: int, bits: int) -> None:  # noqa: ANN001
    """Write `.ne` at the nq and the hw level, read it back: the program's output (named
    `output`) is the same array. Slice assignments are not drawn: their overwritten slice is
    a split piece nothing reads, which the hw level refuses to write (NanoEngine takes
    unread tensors for outputs). Mutant: the nq Gather row writing its indices sorted."""
    model, shape = case
    torch.manual_seed(seed)
    module, x = _quantized(model, shape, seed, bits, "trunc", False)
    hw = nanoir.lower_to_hw(module.clone())
    with tempfile.TemporaryDirectory() as tmp:
        for name, program in (("q.ne", module), ("h.ne", hw)):
            path = os.path.join(tmp, name)
            nanoir.save(program, path)
            text = open(path).read()
            if model.kind.startswith("gather"):
                assert "Gather" in text
            if model.kind == "expand":
                assert "Expand" in text
            back = nanoir.load(path)
            (want,) = nanoir.run(program, x)
            got = _named_outputs(back, nanoir.run(back, x))["output"]
            np.testing.assert_array_equal(got, want)


@settings(max_examples=examples(10), deadline=None)
@given(cases(), st.integers(0, 2**16), st.sampled_from((1, 2)))
def test_streamed_equals_whole(case, seed: int, step: int) -> None:  # noqa: ANN001
    """The nh program streamed along dim 2 (M) in steps of 1 or 2 rows equals its whole run
    (the moves act along C or the last dim, row by row). Mutant: expand_rows emitting 2
    rows per row along a kept dim."""
    model, shape = case
    torch.manual_seed(seed)
    module, x = _quantized(model, shape, seed, 8, "trunc", False)
    hw = nanoir.lower_to_hw(module.clone())
    (whole,) = nanoir.run(hw, x)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=step)
    np.testing.assert_array_equal(streamed, whole)


class AlongM(nn.Module):
    """Gather and expand along the streamed dim 2 itself."""

    def __init__(self, c: int, idx: list[int]):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1)
        self.register_buffer("idx", torch.tensor(idx))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[:, :, self.idx] + y[:, :, :1].expand(-1, -1, len(self.idx), -1)


@settings(max_examples=examples(5), deadline=None)
@given(st.integers(2, 5), st.lists(st.integers(0, 4), min_size=1, max_size=6), st.integers(0, 99))
def test_along_the_streamed_dim(m: int, idx: list[int], seed: int) -> None:
    """Along M a gather needs the whole extent (an index may point anywhere; unless it is
    a strided slice to the end, test_strided_slice.py) and the plan says so: the gather
    waits for every row; an expand of a 1-row dim emits its rows at
    once. Streamed still equals whole. Mutant: gather_rows returning a row step along its
    own axis (caught by the row-step check)."""
    idx = [i % m for i in idx]
    torch.manual_seed(seed)
    model = AlongM(3, idx).eval()
    shape = (2, 3, m, 4)
    module, x = _quantized(model, shape, seed, 8, "trunc", False)
    hw = nanoir.lower_to_hw(module.clone())
    gather = next(op for op in hw.walk() if isinstance(op, nh.GatherOp))
    rows = gather.get_trait(nh.DataMovement).row_step(gather, 2, [gather.input])
    if strided_indices(idx, m) is None:
        assert rows is None
    else:  # a strided slice to the end ([0] of 2 rows, [1, 3] of 4) streams, step rows at a time
        assert rows is not None and rows.adjust == "indices"
    (whole,) = nanoir.run(hw, x)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=1)
    np.testing.assert_array_equal(streamed, whole)


@settings(max_examples=examples(8), deadline=None)
@given(cases(), st.integers(0, 2**16))
def test_onnx_nf_matches_onnxruntime_and_reads_back(case, seed: int) -> None:  # noqa: ANN001
    """The nf program written as ONNX (Gather / Expand with int64 initializers, Split +
    Concat) runs in onnxruntime like nanoir's nf run, and reads back to the same program
    outputs. Mutant: the writer passing Expand's result shape (-1 for the batch) as its
    shape input."""
    model, shape = case
    torch.manual_seed(seed)
    x = _inputs(shape, seed)
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    (want,) = nanoir.run(module, x)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        nanoir.save(module, path)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (got,) = session.run(None, {session.get_inputs()[0].name: x})
        bound = 1e-5 * max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got - want).max()) <= bound
        (back,) = nanoir.run(nanoir.load(path), x)
    np.testing.assert_array_equal(back, want)


def test_runtime_indices_are_refused_naming_the_node() -> None:
    """An index tensor given at run time: one FrontendError naming aten.index.Tensor, the
    index and why. Mutant: the pre-check removed (the message is then about an int64 input)."""

    class RuntimeIndex(nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            return x[:, i]

    with pytest.raises(nanoir.Error) as info:
        nanoir.from_torch(RuntimeIndex(), (torch.randn(2, 3), torch.tensor([0, 2])))
    text = str(info.value)
    assert "aten.index.Tensor" in text and "index tensor 'i'" in text
    assert "computed at run time" in text and "Traceback" not in text


def test_expand_to_a_computed_batch_size_is_refused_with_the_reason() -> None:
    """A token expanded to ``x.shape[0]`` imports with a dynamic batch (the size is read from
    ``x``: tests/nanoir/test_expand_dynamic.py); a size computed from it (``2 * x.shape[0]``)
    exists only at run time: the refusal says so and names the way out."""

    class Token(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.token = nn.Parameter(torch.randn(1, 1, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.token.expand(2 * x.shape[0], -1, -1)

    with pytest.raises(nanoir.Error, match="aten.expand.default(.|\n)*dynamic_batch=False"):
        nanoir.from_torch(Token(), (torch.randn(2, 3, 4),))


def test_constant_indexing_folds_and_unbind_splits() -> None:
    """LeViT-style ``biases[:, idx]`` on a parameter folds to a constant (no gather left);
    unbind of dim 1 is one nf.split with pieces of 1. A sum of the indexed constant folds
    too (the frontend folds every input-independent subgraph)."""

    class Bias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.biases = nn.Parameter(torch.randn(2, 5))
            self.register_buffer("idx", torch.tensor([[4, 0], [1, 1]]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b, c = x.unbind(1)
            return a + b * c + self.biases[:, self.idx].sum()

    x, summed = torch.randn(2, 3, 2, 2), Bias()
    (got,) = nanoir.run(nanoir.from_torch(summed, (x,)), x.numpy())
    np.testing.assert_allclose(got, summed(x).detach().numpy(), rtol=1e-6, atol=1e-6)

    class Bias2(Bias):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b, c = x.unbind(1)
            return a + b * c + self.biases[:, self.idx][:1, :, :1]

    model = Bias2().eval()
    x = torch.randn(2, 3, 2, 1)
    module = nanoir.from_torch(model, (x,))
    assert not any(isinstance(op, nf.GatherOp) for op in module.walk())
    splits = [op for op in module.walk() if isinstance(op, nf.SplitOp)]
    assert any(list(nf.array_values(op.sizes) or ()) == [1, 1, 1] for op in splits)
    with torch.no_grad():
        want = model(x).numpy()
    (got,) = nanoir.run(module, x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@settings(max_examples=examples(5), deadline=None)
@given(cases(), st.integers(0, 2**16))
def test_qat_forward_is_the_nq_program(case, seed: int) -> None:  # noqa: ANN001
    """nanoir.qat trains through the moves: the prepared module's forward (float64, eval)
    equals the nq program ``convert`` gives, element for element. Mutant: nf.expand and
    nf.gather left out of the QAT gather step (prepare refuses them)."""
    model, shape = case
    torch.manual_seed(seed)
    x = torch.from_numpy(_inputs(shape, seed))
    prepared = qat.prepare(model, (x,))
    qat.calibrate(prepared, [_inputs(shape, seed + 1)])
    prepared.eval()
    with torch.no_grad():
        got = prepared(x.double())
    got = got[0] if isinstance(got, (tuple, list)) else got
    (want,) = nanoir.run(qat.convert(prepared), x.numpy().astype(np.float64))
    np.testing.assert_array_equal(got.numpy(), want)
