"""Elementwise ``torch.maximum`` / ``torch.minimum`` (the Magik manual's ``Max``): nf equals
torch, nq is the max of the quantized operands on the output's grid, nh == nq bit for bit
(operands aligned by exact shifts, as add's), streamed == whole, and the ``.ne`` rows (nq
``Max``/``Min``, hw ``Max``/``Min``) read back what they wrote."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh, nq
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import stream
from torch import nn

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.programs import examples

torch.set_num_threads(1)


class MaxMin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv1d(3, 4, 3, padding=1), nn.Conv1d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.a(x), self.b(x)
        return torch.maximum(a, b), torch.minimum(a, b[:, :1])


def test_torch_maximum_and_minimum_equal_torch() -> None:
    """nf (float64) == torch (float64) on the same network, broadcasting included."""
    torch.manual_seed(0)
    net = MaxMin().eval()
    x = torch.randn(2, 3, 7)
    module = from_torch(net, (x,))
    names = [op.name for op in module.walk()]
    assert "nf.maximum" in names and "nf.minimum" in names
    got = run(module, x.numpy(), dtype=np.float64)
    want = net.double()(x.double())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-12, atol=1e-12)


def _program(op: str, relu: bool, scale: float, broadcast: bool) -> str:
    """``x`` split in two halves ``a`` (through a ReLU or not) and ``b``; ``c = b * scale``
    (its own exponent), its first channel only when ``broadcast``; returns ``op(a, c)``,
    ``a`` and ``c``."""
    o = 1 if broadcast else 2
    t, tc = "tensor<?x2x6xf32>", f"tensor<?x{o}x6xf32>"
    a = f"nf.relu %a0 : {t}" if relu else f"nf.reshape %a0 : {t} -> {t}"
    c1 = (
        f"nf.split %c {{axis = 1 : i64, sizes = array<i64: 1, 1>}} : ({t}) -> ({tc}, {tc})"
        if broadcast
        else f"nf.reshape %c : {t} -> {t}"
    )
    lhs = "%c1, %unused" if broadcast else "%c1"
    return f"""func.func @main(%x: tensor<?x4x6xf32>) -> ({t}, {t}, {tc}) {{
  %a0, %b = nf.split %x {{axis = 1 : i64, sizes = array<i64: 2, 2>}}
      : (tensor<?x4x6xf32>) -> ({t}, {t})
  %a = {a}
  %s = nf.constant "s" dense<{scale}> : tensor<1xf32>
  %c = nf.mul %b, %s : ({t}, tensor<1xf32>) -> {t}
  {lhs} = {c1}
  %m = nf.{op} %a, %c1 : ({t}, {tc}) -> {t}
  func.return %m, %a, %c1 : {t}, {t}, {tc}
}}"""


def _fake_quant(v: np.ndarray, fq: nq.FakeQuantOp) -> np.ndarray:
    """NumPy's own fake-quant of ``v`` at the op's exponent, bits, signedness and rounding."""
    k = np.array([int(e) for e in fq.exp.get_values()], dtype=np.int64)
    k = k.reshape((1, -1, 1) if k.size > 1 else ())
    bits = fq.bits.value.data
    signed = fq.signed is None or bool(fq.signed.value.data)
    if bits == 1:
        return np.ldexp(np.where(v >= 0, 1.0, -1.0), k)  # (1-bit: magnitude 2**k)
    rounding = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_even": np.rint,
        "half_up": lambda s: np.floor(s + 0.5),
    }[str(fq.rounding.data)]
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return np.ldexp(np.clip(rounding(np.ldexp(v, k)), lo, hi), -k)


@settings(max_examples=examples(12))
@given(
    st.sampled_from(("maximum", "minimum")),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    st.booleans(),
    st.sampled_from(("never", "auto")),
    st.booleans(),
    st.sampled_from((0.3, 1.0, 6.0, 0.01)),
    st.booleans(),
    st.integers(1, 3),
)
def test_nq_equals_nh_and_streams(
    op: str,
    bits: int,
    rounding: str,
    per_channel: bool,
    unsigned: str,
    relu: bool,
    scale: float,
    broadcast: bool,
    step: int,
) -> None:
    """nq's result == NumPy's max/min of the program's own quantized operands, fake-quantized
    in the test at the output's exponent; nh == nq bit for bit; the nh program streamed along
    dim 2 == its whole run. Mutants seen to fail it: ``LowerMaxMin`` not shifting the coarser
    operand (max of misaligned codes), and ``nh.maximum``'s kernel as ``np.minimum``."""
    module = nanoir.parse(_program(op, relu, scale, broadcast))
    x = np.random.default_rng(bits * 7 + step).standard_normal((3, 4, 6)) * 2
    nanoir.quantize(
        module,
        [x.astype(np.float32)],
        act_bits=bits,
        weight_bits=8,
        rounding=rounding,
        act_per_channel=per_channel,
        unsigned=unsigned,
    )
    m, a, c = run(module, x, dtype=np.float64)
    (fq,) = [
        o
        for o in module.walk()
        if isinstance(o, nq.FakeQuantOp) and getattr(o.operands[0].owner, "name", "") == f"nf.{op}"
    ]
    want = _fake_quant((np.maximum if op == "maximum" else np.minimum)(a, c), fq)
    assert np.array_equal(m, want)
    hw = lower_to_hw(module.clone())
    assert any(isinstance(o, nh.MaximumOp | nh.MinimumOp) for o in hw.walk())
    got = run(hw, x)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, (m, a, c)))
    codes = run(hw, x, raw=True)
    streamed = stream(hw, [x], step=step, raw=True)
    assert all(s.tobytes() == w.tobytes() for s, w in zip(streamed, codes))


def test_ne_rows_round_trip(tmp_path: object) -> None:
    """The nq and hw ``.ne`` files of a quantized max program read back to programs that
    print the same ``.ne`` bytes and compute the same results. Mutant seen to fail it: the hw
    row ``HwOp(nh.MaximumOp, "Min")``."""
    import pathlib

    path = pathlib.Path(str(tmp_path))
    module = nanoir.parse(_program("maximum", True, 0.3, False))
    x = np.random.default_rng(0).standard_normal((3, 4, 6))
    nanoir.quantize(module, [x.astype(np.float32)], act_bits=8)
    hw = lower_to_hw(module.clone())
    for level, program in (("nq", module), ("hw", hw)):
        first = path / f"{level}.ne"
        nanoir.save(program, str(first))
        back = nanoir.load(str(first))
        second = path / f"{level}2.ne"
        nanoir.save(back, str(second))
        assert first.read_bytes() == second.read_bytes()
        assert b"Max" in first.read_bytes()
        want = run(program, x)
        got = run(back, x)
        # (.ne lists outputs in its own order)
        assert sorted(g.tobytes() for g in got) == sorted(w.tobytes() for w in want)


def test_onnx_writes_max_and_min_and_reads_them_back(tmp_path: object) -> None:
    """The float program written to ONNX (``Max`` / ``Min``) gives onnxruntime's results equal
    to nanoir's, and reads back as nf.maximum / nf.minimum."""
    import pathlib

    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((3, 4, 6)).astype(np.float32)
    for op in ("maximum", "minimum"):
        module = nanoir.parse(_program(op, True, 0.3, False))
        path = str(pathlib.Path(str(tmp_path)) / f"{op}.onnx")
        nanoir.save(module, path)
        session = ort.InferenceSession(path)
        got = session.run(None, {session.get_inputs()[0].name: x})
        want = run(module, x)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
        assert f"nf.{op}" in [o.name for o in nanoir.load(path).walk()]
