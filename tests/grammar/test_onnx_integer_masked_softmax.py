"""Masked integer softmax (``nh.softmax`` with its constant boolean mask: attention's boolean
mask or ``is_causal``) through the integer ONNX path: onnxruntime running the exported file
gives the NumPy executor's codes bit for bit, over shapes, axes, broadcast masks, rows masked
entirely, input and output widths, signed and unsigned output codes and every rounding mode;
masked positions are exactly 0, and every output is within one step of a float64 softmax
over the unmasked positions written here. End to end, torch attention with ``is_causal`` and
with a boolean mask, quantized and lowered, runs in onnxruntime bit for bit like NumPy.

Mutants seen to fail it (private copy): the writer's ``Where`` for the exp values dropped (the
masked positions then count in the sum); the masked row maximum taken over every position
(``ReduceMax`` of ``q`` instead of the masked ``qm``: the algorithm barely depends on the
maximum while code distances stay within its exp tables, so only a wide input whose masked
positions hold the largest values shows it, the explicit example).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.dense import numpy_to_dense
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType, f32, i1
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.testing.programs import examples

pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

MODES = [m for m in RoundingMode]


def _program(
    shape: tuple[int, ...],
    axis: int,
    bits_in: int,
    k_in: int,
    bits_out: int,
    k_out: int,
    modes: tuple[RoundingMode, RoundingMode],
    mask: np.ndarray,
    signed_out: bool,
) -> ModuleOp:
    """``fake_quant(softmax(fake_quant(x), mask))`` on ``[?, *shape]``, the mask a constant."""
    block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, *shape))])
    q = FakeQuantOp(block.args[0], bits_in, exp_attr(k_in), modes[0])
    m = nf.ConstantOp(numpy_to_dense(mask.astype(np.int8), i1))
    y = nf.SoftmaxOp(q.results[0], axis, m.result)
    out = FakeQuantOp(y.results[0], bits_out, exp_attr(k_out), modes[1], signed=signed_out)
    block.add_ops([q, m, y, out, ReturnOp(out.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [out.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def _fake_quant(x: np.ndarray, bits: int, k: int, mode: RoundingMode) -> np.ndarray:
    """Signed codes at step ``2**-k``, rounded by ``mode``: written here."""
    r = {
        RoundingMode.TRUNC: np.trunc,
        RoundingMode.FLOOR: np.floor,
        RoundingMode.HALF_UP: lambda v: np.floor(v + 0.5),
        RoundingMode.HALF_EVEN: np.round,
    }[mode](np.ldexp(x, k))
    return np.ldexp(np.clip(r, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1), -k)


def _masked_softmax(x: np.ndarray, axis: int, mask: np.ndarray) -> np.ndarray:
    """Softmax over the positions the mask keeps, 0 elsewhere and on rows with none kept."""
    m = np.broadcast_to(mask, x.shape)
    top = np.max(np.where(m, x, -np.inf), axis=axis, keepdims=True)
    e = np.exp(np.where(m, x - np.where(np.isfinite(top), top, 0.0), -np.inf))
    s = np.sum(e, axis=axis, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


@st.composite
def cases(draw):  # noqa: ANN001, ANN201
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    rank = len(shape) + 1
    axis = draw(st.integers(-rank, rank - 1))
    # The mask's own shape: the input's (without the batch), some dims broadcast (1), or
    # trailing dims only; a batch dim of 1 in front sometimes.
    mshape = tuple(d if draw(st.booleans()) else 1 for d in shape)
    mshape = mshape[draw(st.integers(0, len(mshape) - 1)) :]
    if draw(st.booleans()) and len(mshape) == len(shape):
        mshape = (1, *mshape)
    return (
        shape,
        axis,
        mshape,
        draw(st.sampled_from((4, 8, 16))),
        draw(st.sampled_from((8, 16))),
        draw(st.booleans()),
        (draw(st.sampled_from(MODES)), draw(st.sampled_from(MODES))),
        draw(st.sampled_from((0.0, 0.3, 0.7, 1.0))),  # 0.0, 0.3: rows masked entirely
        draw(st.booleans()),  # masked positions hold the largest inputs
        draw(st.integers(0, 2**16)),
    )


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # 16-bit input codes: distances past the exp tables when the max is a masked one
    case=((2, 6), -1, (2, 6), 16, 8, True, (RoundingMode.TRUNC,) * 2, 0.7, True, 5)
)
@given(case=cases())
def test_masked_softmax_integer_onnx_equals_numpy(case) -> None:  # noqa: ANN001
    """nh codes: NumPy executor == onnxruntime on the integer ONNX file, bit for bit; both
    0 at masked positions and within one output step of the float oracle."""
    shape, axis, mshape, bits_in, bits_out, signed_out, modes, keep, high, seed = case
    rng = np.random.default_rng(seed)
    mask = rng.random(mshape) < keep
    k_in = int(rng.integers(0, bits_in))
    k_out = bits_out - (1 if signed_out else 0)
    module = _program(shape, axis, bits_in, k_in, bits_out, k_out, modes, mask, signed_out)
    hw = lower_to_hw(module.clone())
    assert any(op.name == "nh.softmax" and op.mask is not None for op in hw.walk())
    x = rng.normal(size=(3, *shape)) * 2.0 ** (bits_in - 1 - k_in) / rng.choice([1.0, 4.0])
    if high:  # masked positions far above the others: the row maximum must skip them
        x = np.where(np.broadcast_to(mask, x.shape), x, np.abs(x) + 2.0 ** (bits_in - 2 - k_in))
    x = x.astype(np.float32)
    (codes,) = nanoir.run(hw, x, raw=True)
    (codes_ort,) = nanoir.run(hw, x, raw=True, backend="onnxruntime")
    # (Unsigned 8-bit codes come back as uint8 from onnxruntime, int16 from NumPy: values.)
    assert codes_ort.dtype.kind in "iu" and codes.dtype.kind in "iu"
    np.testing.assert_array_equal(codes_ort.astype(np.int64), codes.astype(np.int64))
    got = np.ldexp(codes.astype(np.float64), -k_out)
    full = np.broadcast_to(mask, got.shape)
    assert (got[~full] == 0).all()
    want = _masked_softmax(_fake_quant(x.astype(np.float64), bits_in, k_in, modes[0]), axis, mask)
    assert np.abs(got - want).max() <= 2.0**-k_out


class _Attention(torch.nn.Module):
    """Single-head attention on ``[N, L, 8]``: causal, or a boolean mask buffer."""

    def __init__(self, mask: torch.Tensor | None):
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=self.mask, is_causal=self.mask is None
        )
        return self.proj(y.squeeze(1))


@pytest.mark.parametrize("kind", ["causal", "bool"])
def test_attention_with_a_mask_integer_onnx_equals_numpy(kind: str) -> None:
    """torch attention with ``is_causal`` or a boolean mask, quantized at 8 bits and lowered:
    the whole nh program (matmuls, the masked softmax) in onnxruntime gives the NumPy
    executor's codes bit for bit."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    mask = None if kind == "causal" else torch.from_numpy(rng.random((5, 5)) < 0.6)
    model = _Attention(mask).eval()
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    nanoir.quantize(module, [rng.standard_normal((4, 5, 8)).astype(np.float32)])
    hw = lower_to_hw(module.clone())
    assert any(op.name == "nh.softmax" and op.mask is not None for op in hw.walk())
    x = rng.standard_normal((3, 5, 8)).astype(np.float32) * 1.5
    (codes,) = nanoir.run(hw, x, raw=True)
    (codes_ort,) = nanoir.run(hw, x, raw=True, backend="onnxruntime")
    np.testing.assert_array_equal(codes_ort.astype(np.int64), codes.astype(np.int64))
    np.testing.assert_array_equal(nanoir.run(hw, x)[0], nanoir.run(module, x)[0])
