"""Softmax and log-softmax through every level: torch -> nf (float64, against torch) -> nq
(the integer algorithm in float64, against a NumPy float64 oracle written here: within one
output step) -> nh (bit for bit) -> `.ne` at both levels -> streaming -> ONNX (onnxruntime)
-> QAT (forward = nq, backward = torch's gradient).

Mutants checked (each made the tests named fail, in a private copy):
- the softmax division rounding down (no ``+ S/2``): test_measured_worst_error_at_8_bits;
- lower-to-hw building its tables for ``k_in + 1``: test_nq_equals_nh_and_is_within_one_step;
- the nh kernel ignoring the mask: test_nq_equals_nh_and_is_within_one_step;
- the float kernel ignoring the mask: test_masked_nf_matches_torch;
- the integer algorithm keeping masked positions' exps: test_nq_equals_nh_and_is_within_one_step;
- the integer max taken over masked positions too: test_masked_positions_take_no_part;
- the frontend dropping ``dim`` (always -1): test_nf_matches_torch;
- the integer log without its interpolation: test_measured_worst_error_at_8_bits;
- quantize calibrating the softmax output instead of the [0, 1] exponent:
  test_quantize_and_lower;
- the hw `.ne` row dropping the mask, the nq row dropping the axis:
  test_ne_round_trips_at_both_levels;
- the ONNX writer writing a quantized softmax: test_onnx_refuses_the_quantized_op_and_a_mask;
- the QAT forward left float (no grids): test_qat_trains_through_and_converts_bit_for_bit;
- the QAT gradient taken from ``exp``: test_qat_forward_is_nq_and_backward_is_torchs;
- the streaming rule going row by row along the axis, or ignoring a mask that varies along
  the streamed dim: test_streamed_is_whole;
- the row bound not checked: test_row_too_long_is_refused;
- the nh kernel saturating an unsigned result as signed: test_unsigned_output_nq_equals_nh.
(Dropping the ``den > 0`` guard of a fully masked row is no mutant: ``e = 0`` there already
rounds to 0.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType, f32, i1
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

KINDS = ("softmax", "log_softmax")
MODES = tuple(RoundingMode)


# ---------------------------------------------------------------------------------------
# Oracles, written here
# ---------------------------------------------------------------------------------------


def oracle(kind: str, x: np.ndarray, axis: int, mask: np.ndarray | None = None) -> np.ndarray:
    """torch's op in float64 (masked positions and fully masked rows: 0)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    if kind == "log_softmax":
        return torch.log_softmax(t, axis).numpy()
    if mask is not None:
        m = torch.from_numpy(np.broadcast_to(mask, x.shape).copy())
        t = t.masked_fill(~m, float("-inf"))
    return torch.nan_to_num(torch.softmax(t, axis), nan=0.0).numpy()


def numpy_oracle(kind: str, x: np.ndarray, axis: int, mask: np.ndarray | None) -> np.ndarray:
    """The same in plain NumPy float64 (the error bound's reference)."""
    m = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    top = np.max(np.where(m, x, -np.inf), axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(m, np.exp(np.where(m, x, top) - top), 0.0)
    s = np.sum(e, axis=axis, keepdims=True)
    if kind == "log_softmax":
        return x - top - np.log(s)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def fake_quant_np(x: np.ndarray, bits: int, k: int, mode: RoundingMode) -> np.ndarray:
    """NumPy's fake-quant (the input grid), every rounding mode."""
    s = np.ldexp(x, k)
    c = {
        RoundingMode.TRUNC: np.trunc,
        RoundingMode.FLOOR: np.floor,
        RoundingMode.HALF_UP: lambda v: np.floor(v + 0.5),
        RoundingMode.HALF_EVEN: np.round,
    }[mode](s)
    return np.ldexp(np.clip(c, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1), -k)


def nf_op(kind: str, x, axis: int, mask=None):  # noqa: ANN001, ANN201
    if kind == "softmax":
        return nf.SoftmaxOp(x, axis, mask)
    return nf.LogSoftmaxOp(x, axis)


def program(
    kind: str,
    shape: tuple[int, ...],
    axis: int,
    bits_in: int,
    k_in: int,
    bits_out: int,
    k_out: int,
    mode_in: RoundingMode,
    mode_out: RoundingMode,
    mask: np.ndarray | None = None,
    signed_out: bool = True,
) -> ModuleOp:
    """``fake_quant(op(fake_quant(x)))`` on ``[?, *shape]``; a constant ``mask``; unsigned
    output codes unless ``signed_out``."""
    block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, *shape))])
    q = FakeQuantOp(block.args[0], bits_in, exp_attr(k_in), mode_in)
    ops: list = [q]
    m = None
    if mask is not None:
        from nanoir.dialects.dense import numpy_to_dense

        c = nf.ConstantOp(numpy_to_dense(mask.astype(np.int8), i1))
        ops.append(c)
        m = c.result
    y = nf_op(kind, q.results[0], axis, m)
    out = FakeQuantOp(y.results[0], bits_out, exp_attr(k_out), mode_out, signed=signed_out)
    ops += [y, out, ReturnOp(out.results[0])]
    block.add_ops(ops)
    ftype = FunctionType.from_lists([block.args[0].type], [out.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


# ---------------------------------------------------------------------------------------
# torch -> nf
# ---------------------------------------------------------------------------------------


class _Op(nn.Module):
    def __init__(self, kind: str, axis: int, spelling: str):
        super().__init__()
        self.kind, self.axis, self.spelling = kind, axis, spelling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.spelling == "module":
            return (nn.Softmax if self.kind == "softmax" else nn.LogSoftmax)(self.axis)(x)
        if self.spelling == "method":
            return getattr(x, self.kind)(self.axis)
        return getattr(torch, self.kind)(x, self.axis, dtype=torch.float64)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=examples(10), deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    data=st.data(),
    scale=st.sampled_from((0.1, 1.0, 10.0, 100.0)),
    spelling=st.sampled_from(("module", "method", "dtype")),
    seed=st.integers(0, 2**16),
)
def test_nf_matches_torch(
    kind: str, shape: list[int], data, scale: float, spelling: str, seed: int
) -> None:  # noqa: ANN001
    """The frontend's op (any axis, negative too; ``aten.softmax.int`` with and without a
    dtype), run in float64, is torch's within 1e-5 * max(1, max |torch|), at two batch sizes
    of a dynamic batch."""
    rank = len(shape) + 1
    axis = data.draw(st.integers(-rank, rank - 1))
    model = _Op(kind, axis, spelling).double().eval()
    gen = torch.Generator().manual_seed(seed)
    module = nanoir.from_torch(
        model, (torch.randn([2, *shape], generator=gen, dtype=torch.float64),)
    )
    names = [op.name for op in module.walk() if op.name.startswith("nf.")]
    assert names == [f"nf.{kind}"]
    for batch in (1, 3):
        x = torch.randn([batch, *shape], generator=gen, dtype=torch.float64) * scale
        with torch.no_grad():
            want = model(x).numpy()
        (got,) = run(module, x.numpy(), dtype=np.float64)
        assert float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))


@settings(max_examples=examples(30), deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 7),
    mask_shape=st.sampled_from(("full", "row", "col", "scalar")),
    seed=st.integers(0, 2**16),
)
def test_masked_nf_matches_torch(rows: int, cols: int, mask_shape: str, seed: int) -> None:
    """A boolean mask broadcast against the input (NumPy rules): torch's softmax of the input
    with masked positions at -inf; masked positions are exactly 0, a fully masked row all 0."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, rows, cols)) * 3
    full = rng.random((2, rows, cols)) < 0.6
    full[0, 0] = False  # a fully masked row
    mask = {"full": full, "row": full[0, 0], "col": full[0, :, :1], "scalar": full[0, 0, :1]}[
        mask_shape
    ]
    block = Block(arg_types=[TensorType(f32, x.shape), TensorType(i1, mask.shape)])
    y = nf.SoftmaxOp(block.args[0], -1, block.args[1])
    block.add_ops([y, ReturnOp(y.result)])
    ftype = FunctionType.from_lists(block.arg_types, [y.result.type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    module.verify()
    (got,) = run(module, x, mask, dtype=np.float64)
    want = oracle("softmax", x, -1, mask)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert (got[~np.broadcast_to(mask, x.shape)] == 0).all()


def test_mask_that_does_not_broadcast_is_refused() -> None:
    """The verifier names the op and both shapes."""
    block = Block(arg_types=[TensorType(f32, (2, 3)), TensorType(i1, (4,))])
    y = nf.SoftmaxOp(block.args[0], 1, block.args[1])
    with pytest.raises(Exception, match=r"nf.softmax: .*2x3.*4|nf.softmax: .*4.*2x3"):
        y.verify()


# ---------------------------------------------------------------------------------------
# nq == nh, and the error bound
# ---------------------------------------------------------------------------------------


@st.composite
def cases(draw):  # noqa: ANN001, ANN201
    kind = draw(st.sampled_from(KINDS))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    rank = len(shape) + 1
    axis = draw(st.integers(-rank, rank - 1))
    bits_in = draw(st.sampled_from((4, 8, 16)))
    bits_out = draw(st.sampled_from((8, 16)))
    k_in = draw(st.integers(-1, bits_in + 2))
    modes = (draw(st.sampled_from(MODES)), draw(st.sampled_from(MODES)))
    masked = kind == "softmax" and draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return kind, shape, axis, bits_in, bits_out, k_in, modes, masked, seed


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_nq_equals_nh_and_is_within_one_step(case) -> None:  # noqa: ANN001
    """nq (the algorithm in float64) == nh (in int64) bit for bit, over shapes, axes, input
    bits 4/8/16, output bits 8/16, every rounding mode of the fake-quants and masks; and each
    output is within one output step of the NumPy float64 oracle on the quantized input
    (softmax: exponent ``bits - 1``, as quantize gives it; log-softmax: the largest exponent
    whose range holds the oracle's most negative output)."""
    kind, shape, axis, bits_in, bits_out, k_in, (mode_in, mode_out), masked, seed = case
    rng = np.random.default_rng(seed)
    batch = 3
    x = (
        rng.normal(size=(batch, *shape))
        * rng.choice([0.5, 2.0, 8.0])
        * 2.0 ** (bits_in - 1 - k_in)
        / 4
    )
    mask = rng.random(shape) < 0.7 if masked else None
    xq = fake_quant_np(x, bits_in, k_in, mode_in)
    want = numpy_oracle(kind, xq, axis, mask)
    if kind == "softmax":
        k_out = bits_out - 1
    else:
        low = float(-want.min()) if want.size else 1.0
        k_out = int(np.floor(np.log2(2 ** (bits_out - 1) / max(low, 2.0**-20))))
    module = program(kind, shape, axis, bits_in, k_in, bits_out, k_out, mode_in, mode_out, mask)
    (got,) = run(module, x, dtype=np.float64)
    hw = lower_to_hw(module.clone())
    (codes,) = run(hw, x, raw=True)
    (got_hw,) = run(hw, x)
    np.testing.assert_array_equal(got_hw, got)
    assert codes.dtype.kind == "i"
    np.testing.assert_array_equal(np.ldexp(codes.astype(np.float64), -k_out), got)
    assert np.abs(got - want).max() <= 2.0**-k_out
    if mask is not None:
        assert (got[:, ~mask] == 0).all()


@settings(max_examples=examples(20), deadline=None)
@given(case=cases())
def test_unsigned_output_nq_equals_nh(case) -> None:  # noqa: ANN001
    """Unsigned output codes (0..2**b-1 at exponent ``bits``, one bit finer than signed):
    nq == nh bit for bit, within one output step of the oracle."""
    _, shape, axis, bits_in, bits_out, k_in, (mode_in, mode_out), masked, seed = case
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, *shape)) * 2.0 ** (bits_in - 3 - k_in)
    mask = rng.random(shape) < 0.7 if masked else None
    module = program(
        "softmax", shape, axis, bits_in, k_in, bits_out, bits_out, mode_in, mode_out, mask, False
    )
    (got,) = run(module, x, dtype=np.float64)
    hw = lower_to_hw(module.clone())
    np.testing.assert_array_equal(run(hw, x)[0], got)
    want = numpy_oracle("softmax", fake_quant_np(x, bits_in, k_in, mode_in), axis, mask)
    assert np.abs(got - want).max() <= 2.0**-bits_out


@pytest.mark.parametrize("dtype", (np.float64, np.int64))
def test_masked_positions_take_no_part(dtype: type) -> None:
    """Masked positions neither set the row's max nor add to its sum, in both dtypes: a row
    whose masked codes are far above the rest (exp of the rest underflows against them) gives
    the softmax of the unmasked codes alone; a fully masked row gives 0."""
    from nanoir.runtime.numerics import softmax as sm

    q = np.array([[127, -128, -120, -125], [127, 100, 5, -3]], dtype=dtype)
    mask = np.array([[False, True, True, True], [False, False, False, False]])
    got = sm.softmax_codes(q, 1, 0, 8, 7, 8, mask)
    want = numpy_oracle("softmax", q.astype(np.float64), 1, mask)
    assert np.abs(got / 128 - want).max() <= 0.5 / 128
    assert (got[~mask] == 0).all() and got[0, 1:].sum() > 0


def test_measured_worst_error_at_8_bits() -> None:
    """The docstrings' measurement: over 2,000 random rows of 8-bit codes at every input
    exponent 0..7, the worst error against the NumPy oracle is one output step for softmax
    (only where the oracle is 1.0 and saturates to 127/128; half a step elsewhere) and
    half a step (+ < 1e-6) for log-softmax."""
    from nanoir.runtime.numerics import softmax as sm

    rng = np.random.default_rng(1)
    worst = {"softmax": 0.0, "softmax_below_1": 0.0, "log_softmax": 0.0}
    for _ in range(2000):
        n, k_in = int(rng.integers(1, 40)), int(rng.integers(0, 8))
        q = rng.integers(-128, 128, size=n).astype(np.float64)
        want = numpy_oracle("softmax", q * 2.0**-k_in, 0, None)
        got = sm.softmax_codes(q, 0, k_in, 8, 7, 8) / 128
        err = np.abs(got - want) * 128
        worst["softmax"] = max(worst["softmax"], err.max())
        below = want < 127.5 / 128
        if below.any():
            worst["softmax_below_1"] = max(worst["softmax_below_1"], err[below].max())
        want = numpy_oracle("log_softmax", q * 2.0**-k_in, 0, None)
        k_out = int(np.floor(np.log2(128 / max(-want.min(), 2.0**-20))))
        got = sm.log_softmax_codes(q, 0, k_in, 8, k_out, 8) * 2.0**-k_out
        worst["log_softmax"] = max(worst["log_softmax"], np.abs(got - want).max() * 2**k_out)
    assert worst["softmax"] <= 1.0
    assert worst["softmax_below_1"] <= 0.5 + 1e-6
    assert worst["log_softmax"] <= 0.5 + 1e-6


# ---------------------------------------------------------------------------------------
# The pipeline: quantize's exponent, refusals
# ---------------------------------------------------------------------------------------


class _Head(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.fc, self.kind = nn.Linear(6, 10), kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(torch, self.kind)(self.fc(x), -1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("act_bits", (8, 16))
def test_quantize_and_lower(kind: str, act_bits: int) -> None:
    """torch -> nq: a softmax's output exponent is that of the range [0, 1] (``bits - 1``),
    log-softmax's is calibrated; nq == nh on held-out inputs; nh holds the integer op."""
    torch.manual_seed(0)
    model = _Head(kind).eval()
    rng = np.random.default_rng(0)
    calib = rng.normal(size=(16, 6)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.from_numpy(calib),))
    nanoir.quantize(module, [calib], act_bits=act_bits)
    op = next(o for o in module.walk() if o.name == f"nf.{kind}")
    (fq,) = [u.operation for u in op.results[0].uses]
    if kind == "softmax":
        assert [int(v) for v in fq.exp.get_values()] == [act_bits - 1]
    x = rng.normal(size=(32, 6))
    (yq,) = run(module, x, dtype=np.float64)
    hw = lower_to_hw(module.clone())
    assert any(o.name == f"nh.{kind}" for o in hw.walk())
    (yh,) = run(hw, x, dtype=np.float64)
    np.testing.assert_array_equal(yh, yq)
    with torch.no_grad():
        ref = model(torch.from_numpy(x).float()).double().numpy()
    k = int(next(iter(fq.exp.get_values())))
    inside = ref > -(2.0 ** (act_bits - 1 - k))  # held-out values past calibration saturate
    assert np.abs(yq - ref)[inside].max() < 0.1


def test_unquantized_output_is_refused_by_lower_to_hw() -> None:
    """A rule that skips the softmax's output leaves it float at nq (torch's math) and
    lower-to-hw refuses it, naming the op and why."""
    torch.manual_seed(0)
    model = _Head("softmax").eval()
    calib = np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.from_numpy(calib),))
    nanoir.quantize(module, [calib], rules=("softmax=skip",))
    (y,) = run(module, calib.astype(np.float64), dtype=np.float64)
    (yf,) = run(nanoir.from_torch(model, (torch.from_numpy(calib),)), calib, dtype=np.float64)
    assert np.abs(y - yf).max() < 0.05  # float softmax of the quantized linear
    with pytest.raises(LowerToHwError, match=r"nf.softmax.*not read by one fake-quant"):
        lower_to_hw(module)


def test_row_too_long_is_refused() -> None:
    """A row whose integer sum could pass 2**52 is refused by lower-to-hw and by the nq
    kernel, naming the op."""
    module = program("softmax", (2**22,), -1, 8, 4, 8, 7, RoundingMode.TRUNC, RoundingMode.TRUNC)
    with pytest.raises(LowerToHwError, match=r"nf.softmax.*row of 4194304 elements"):
        lower_to_hw(module.clone())
    with pytest.raises(nanoir.Error, match=r"nf.softmax.*a row of 4194304"):
        run(module, np.zeros((1, 2**22)), dtype=np.float64)


def test_runtime_mask_is_refused_by_lower_to_hw() -> None:
    """A mask computed at run time (a function argument) runs at nq, and lower-to-hw refuses
    it naming the op (nh.softmax takes a constant mask)."""
    block = Block(arg_types=[TensorType(f32, (2, 5)), TensorType(i1, (5,))])
    q = FakeQuantOp(block.args[0], 8, exp_attr(4))
    y = nf.SoftmaxOp(q.result, -1, block.args[1])
    out = FakeQuantOp(y.result, 8, exp_attr(7))
    block.add_ops([q, y, out, ReturnOp(out.result)])
    ftype = FunctionType.from_lists(block.arg_types, [out.result.type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    mask = np.array([True, False, True, True, False])
    (got,) = run(module, np.ones((2, 5)), mask, dtype=np.float64)
    np.testing.assert_array_equal(got[0], [43 / 128, 0, 43 / 128, 43 / 128, 0])
    with pytest.raises(LowerToHwError, match=r"nf.softmax.*mask computed at run time"):
        lower_to_hw(module)


def test_nh_verifier_messages() -> None:
    """nh.softmax's verifier names the op: a per-channel exponent, bad tables, a bad mask."""
    module = program("softmax", (5,), -1, 8, 4, 8, 7, RoundingMode.TRUNC, RoundingMode.TRUNC)
    hw = lower_to_hw(module)
    op = next(o for o in hw.walk() if isinstance(o, nh.SoftmaxOp))
    op.verify()
    bad = op.clone()
    bad.properties["exp_lo"] = nf.int_array([1, 2, 3])
    with pytest.raises(Exception, match="nh.softmax: exp tables"):
        bad.verify()
    bad = op.clone()
    bad.properties["bits"] = nf.IntegerAttr(9, nf.i64)
    with pytest.raises(Exception, match="nh.softmax: bits 9"):
        bad.verify()


# ---------------------------------------------------------------------------------------
# .ne at both levels
# ---------------------------------------------------------------------------------------


@settings(max_examples=examples(12), deadline=None)
@given(case=cases())
def test_ne_round_trips_at_both_levels(case) -> None:  # noqa: ANN001
    """nq and nh `.ne`: text -> IR -> text byte for byte and the IR read back computes the
    same codes; rows Softmax/LogSoftmax with the axis, the hw row with the tables, output bits
    and the mask; a masked nf.softmax (its i1 constant) is refused at the nq level."""
    from nanoir.grammar.ne.errors import ExportError
    from nanoir.grammar.ne.exporter import export_nanoengine
    from nanoir.grammar.ne.importer import import_nanoengine

    kind, shape, axis, bits_in, bits_out, k_in, (mode_in, mode_out), masked, seed = case
    mask = np.random.default_rng(seed).random(shape) < 0.7 if masked else None
    k_out = bits_out - 1 if kind == "softmax" else bits_out - 5
    module = program(kind, shape, axis, bits_in, k_in, bits_out, k_out, mode_in, mode_out, mask)
    x = np.random.default_rng(seed).normal(size=(2, *shape)) * 2.0 ** (bits_in - 3 - k_in)
    op_type = "Softmax" if kind == "softmax" else "LogSoftmax"
    if mask is None:
        text = export_nanoengine(module)
        assert f"op_type={op_type},\n    attr=[axis={axis}]" in text
        back = import_nanoengine(text)
        assert export_nanoengine(back) == text
        np.testing.assert_array_equal(run(back, x)[0], run(module, x)[0])
    else:
        with pytest.raises(ExportError, match="i1"):
            export_nanoengine(module)
    hw = lower_to_hw(module.clone())
    hw_text = export_nanoengine(hw)
    assert f"op_type={op_type}," in hw_text and "exp_hi=[" in hw_text
    assert ("mask=[[" in hw_text) == (mask is not None)
    hw_back = import_nanoengine(hw_text)
    assert export_nanoengine(hw_back) == hw_text
    np.testing.assert_array_equal(run(hw_back, x, raw=True)[0], run(hw, x, raw=True)[0])


# ---------------------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------------------


class _Both(nn.Module):
    def __init__(self, a: int, b: int):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, self.a) * 3 + torch.log_softmax(x, self.b)


@settings(max_examples=examples(8), deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    data=st.data(),
    flavor=st.sampled_from(("qdq", "nanoengine")),
    seed=st.integers(0, 2**16),
)
def test_onnx_nf_program_matches_onnxruntime(shape, data, flavor: str, seed: int) -> None:  # noqa: ANN001
    """An nf program is written as ONNX Softmax/LogSoftmax (opset 13's one-axis semantics):
    onnxruntime equals nanoir within 1e-6 relative, and the reader gives back the same ops."""
    import onnxruntime as ort
    from nanoir.grammar.onnx.exporter import export_onnx_bytes
    from nanoir.grammar.onnx.importer import import_onnx_bytes

    rank = len(shape) + 1
    a, b = data.draw(st.integers(-rank, rank - 1)), data.draw(st.integers(-rank, rank - 1))
    x = np.random.default_rng(seed).normal(size=(2, *shape)).astype(np.float32) * 4
    module = nanoir.from_torch(_Both(a, b), (torch.from_numpy(x),))
    raw = export_onnx_bytes(module, flavor)
    session = ort.InferenceSession(raw)
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    (want,) = run(module, x)
    assert np.abs(got - want).max() <= 1e-6 * max(1.0, float(np.abs(want).max()))
    back = import_onnx_bytes(raw)
    kinds = [(o.name, o.axis.value.data) for o in back.walk() if o.name.endswith("softmax")]
    assert kinds == [("nf.softmax", a), ("nf.log_softmax", b)]
    np.testing.assert_allclose(run(back, x)[0], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_onnx_refuses_the_quantized_op_and_a_mask(kind: str) -> None:
    """Between fake-quants the op is the integer algorithm: the writer refuses, naming it;
    a masked nf.softmax has no ONNX Softmax form either (its boolean mask is refused)."""
    from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_bytes

    module = program(kind, (4,), -1, 8, 4, 8, 5, RoundingMode.HALF_EVEN, RoundingMode.HALF_EVEN)
    with pytest.raises(OnnxExportError, match=rf"nf.{kind} between fake-quants"):
        export_onnx_bytes(module, "qdq")
    block = Block(arg_types=[TensorType(f32, (2, 4)), TensorType(i1, (4,))])
    y = nf.SoftmaxOp(block.args[0], -1, block.args[1])
    block.add_ops([y, ReturnOp(y.result)])
    ftype = FunctionType.from_lists(block.arg_types, [y.result.type])
    with pytest.raises(OnnxExportError, match=r"tensor<4xi1> is not a float|with a mask"):
        export_onnx_bytes(ModuleOp([FuncOp("main", ftype, Region(block))]), "qdq")


# ---------------------------------------------------------------------------------------
# QAT
# ---------------------------------------------------------------------------------------


class _Net(nn.Module):
    def __init__(self, kind: str, axis: int):
        super().__init__()
        self.fc, self.kind, self.axis = nn.Linear(6, 10), kind, axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(torch, self.kind)(self.fc(x).reshape(-1, 2, 5), self.axis)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("axis", (-1, 1))
def test_qat_trains_through_and_converts_bit_for_bit(kind: str, axis: int) -> None:
    """A few QAT steps through the op, then convert: nanoir.run of the nq program equals the
    module in eval mode bit for bit (the forward is the integer algorithm), and lowers to nh
    with the same numbers."""
    torch.manual_seed(1)
    model = _Net(kind, axis)
    x = torch.randn(16, 6)
    q = nanoir.qat.prepare(model, (x,))
    nanoir.qat.calibrate(q, [x.numpy()])
    opt = torch.optim.SGD(q.parameters(), lr=0.05)
    for _ in range(3):
        loss = q(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    q.eval()
    module = nanoir.qat.convert(q)
    xe = torch.randn(8, 6, dtype=torch.float64)
    with torch.no_grad():
        want = q(xe).numpy()
    (got,) = run(module, xe.numpy())
    np.testing.assert_array_equal(got, want)
    (hw,) = run(lower_to_hw(module.clone()), xe.numpy())
    np.testing.assert_array_equal(hw, want)


@pytest.mark.parametrize(
    ("kind", "masked"), [("softmax", False), ("softmax", True), ("log_softmax", False)]
)
def test_qat_forward_is_nq_and_backward_is_torchs(kind: str, masked: bool) -> None:
    """The step's forward is the nq program's value, and within the integer algorithm's
    bound of torch's float64 op (half an output step plus ``(N + 1) 130 2**(k_out - 30)`` for
    softmax, ``(N 130 2**-30 + 2**-22) 2**k_out`` for log-softmax: see
    tests/runtime/test_softmax_oracle.py); its gradient is torch's float op's on the same input
    (straight-through), with and without a mask.

    kills: the softmax division rounding down (no ``+ S/2``), which the QAT forward and this
    test's former oracle (the numerics function the forward calls) shared, so it passed."""
    from nanoir.dialects.traits import Quantized

    from nanoir.qat.steps import IntegerAlgorithmStep, build_step

    rng = np.random.default_rng(3)
    codes = rng.integers(-128, 128, size=(3, 7)).astype(np.float64)
    x = torch.tensor(codes / 16, requires_grad=True)
    mask = torch.from_numpy(rng.random(7) < 0.6) if masked else None
    block = Block(arg_types=[TensorType(f32, (3, 7)), TensorType(i1, (7,))])
    op = nf_op(kind, block.args[0], 1, block.args[1] if mask is not None else None)
    step = build_step(op)
    assert isinstance(step, IntegerAlgorithmStep)
    k_out = 7 if kind == "softmax" else 4
    step.grids = lambda: (Quantized(8, 4), Quantized(8, k_out))
    (y,) = step(x, *([] if mask is None else [mask]))
    m = None if mask is None else mask.numpy()
    trunc = RoundingMode.TRUNC
    nq = program(kind, (7,), 1, 8, 4, 8, k_out, trunc, trunc, m)
    np.testing.assert_array_equal(y.detach().numpy(), run(nq, codes / 16, dtype=np.float64)[0])
    exact = oracle(kind, codes / 16, 1, m) * 2.0**k_out  # float64, in output steps
    n = 7 if m is None else int(m.sum())
    if kind == "softmax":
        bound = 0.5 + (n + 1) * 130 * 2.0 ** (k_out - 30)
    else:
        bound = 0.5 + (n * 130 * 2.0**-30 + 2.0**-22) * 2.0**k_out
    got = y.detach().numpy() * 2.0**k_out
    assert np.abs(got - np.clip(exact, -128, 127)).max() <= bound
    g = torch.from_numpy(rng.normal(size=(3, 7)))
    (grad,) = torch.autograd.grad(y, x, g)
    xr = x.detach().clone().requires_grad_(True)
    if kind == "log_softmax":
        ref = torch.log_softmax(xr, 1)
    elif mask is None:
        ref = torch.softmax(xr, 1)
    else:
        ref = torch.nan_to_num(torch.softmax(xr.masked_fill(~mask, float("-inf")), 1), nan=0.0)
    (grad_ref,) = torch.autograd.grad(ref, xr, g)
    np.testing.assert_allclose(grad.numpy(), grad_ref.numpy(), rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------


@settings(max_examples=examples(12), deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    axis=st.sampled_from((1, 2, -1, -2)),
    step=st.integers(1, 4),
    masked=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_streamed_is_whole(kind: str, axis: int, step: int, masked: bool, seed: int) -> None:
    """Streamed along dim 2 (M): along another axis the op goes row by row; along M itself it
    waits for the whole extent. Either way nh streamed == whole == nq, and nq streamed too."""
    rng = np.random.default_rng(seed)
    mask = rng.random((3, 8)) < 0.7 if masked and kind == "softmax" else None
    k_out = 7 if kind == "softmax" else 4
    module = program(
        kind, (3, 8), axis, 8, 4, 8, k_out, RoundingMode.TRUNC, RoundingMode.TRUNC, mask
    )
    x = rng.normal(size=(2, 3, 8)) * 2
    hw = lower_to_hw(module.clone())
    (whole,) = run(hw, x)
    np.testing.assert_array_equal(whole, run(module, x)[0])
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=step)
    np.testing.assert_array_equal(streamed, whole)
    (streamed_nq,) = nanoir.stream(module, [x], mem_dim=2, step=step)
    np.testing.assert_array_equal(streamed_nq, whole)


def test_dynamic_streamed_axis_is_refused_with_the_reason() -> None:
    """Softmax along a dynamic streamed dim needs its whole extent at once: stream-plan
    refuses it, naming the op and the dim; along another dim it streams."""
    from nanoir.lowering.analysis.rules import StreamPlanError

    module = program(
        "softmax", (3, DYNAMIC_INDEX), 2, 8, 4, 8, 7, RoundingMode.TRUNC, RoundingMode.TRUNC
    )
    hw = lower_to_hw(module.clone())
    x = np.random.default_rng(0).normal(size=(1, 3, 6))
    with pytest.raises(StreamPlanError, match=r"nh.softmax.*whole of dim 2.*dynamic"):
        nanoir.stream(hw, [x], mem_dim=2, step=1)
    module = program(
        "softmax", (3, DYNAMIC_INDEX), 1, 8, 4, 8, 7, RoundingMode.TRUNC, RoundingMode.TRUNC
    )
    hw = lower_to_hw(module.clone())
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=1)
    np.testing.assert_array_equal(streamed, run(hw, x)[0])


def test_unsigned_output_lowers_with_nq_equal_to_nh() -> None:
    """A rule asking unsigned codes for the softmax (``softmax=8u``) gives its output the
    exponent ``bits`` (the range [0, 1] on 0..255); nq runs the algorithm into codes 0..255,
    within one step of the NumPy oracle, and lower-to-hw gives a ``ui8`` nh.softmax with the
    same numbers. (``unsigned="auto"`` leaves it signed, see tests/lowering/test_unsigned.py.)"""
    torch.manual_seed(0)
    model = _Head("softmax").eval()
    calib = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.from_numpy(calib),))
    nanoir.quantize(module, [calib], rules=("softmax=8u",))
    op = next(o for o in module.walk() if o.name == "nf.softmax")
    (fq,) = [u.operation for u in op.results[0].uses]
    assert not fq.is_signed and [int(v) for v in fq.exp.get_values()] == [8]
    x = np.random.default_rng(1).normal(size=(32, 6))
    (got,) = run(module, x, dtype=np.float64)
    codes = got * 256
    assert (codes == np.round(codes)).all() and codes.min() >= 0 and codes.max() <= 255
    xq = run_until(module, op.input, x)
    assert np.abs(got - numpy_oracle("softmax", xq, -1, None)).max() <= 2.0**-8
    hw = lower_to_hw(module)
    (soft,) = [o for o in hw.walk() if isinstance(o, nh.SoftmaxOp)]
    assert "ui8" in str(soft.result.type)
    np.testing.assert_array_equal(run(hw, x)[0], got)


def run_until(module: ModuleOp, value, x: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """The nq value ``value`` on input ``x`` (by observing the run)."""
    seen: dict = {}

    def observe(op, results) -> None:  # noqa: ANN001
        for r, v in zip(op.results, results):
            if r is value:
                seen["v"] = v

    from nanoir.runtime.interpreter import compile_module

    compile_module(module, dtype=np.float64)(x, observe=observe)
    return seen["v"]
