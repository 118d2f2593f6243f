"""``quantize(unsigned="auto")`` gives softmax outputs unsigned codes (issue 21: softmax is
non-negative, ``NonNegativeResult``): ``0..2**b - 1`` at a step of ``2**-b``, one bit more
resolution than signed codes over [0, 1]. The input stays signed (it can be negative), and so
do log-softmax's and the norms' outputs. nq == nh bit for bit, the codes within one output step
of the float softmax of the quantized input (NumPy here), ``.ne`` at both levels and integer
ONNX (onnxruntime) give the same codes; QAT's ``prepare(unsigned="auto")`` converts to the same
unsigned quantizer, bit for bit with the module.

Mutant seen to fail these tests in a private copy (/tmp/copy-defects): ``_unsigned_unlowered``
treating every ``IntegerAlgorithm`` result as signed again (the fake-quant stays signed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.runtime.numerics.quant import RoundingMode

import nanoir
from nanoir.testing.programs import examples

PROGRAM = """\
func.func @main(%x: tensor<?x3x6xf32>) -> (tensor<?x3x6xf32>, tensor<?x3x6xf32>) {
  %s = nf.softmax %x {axis = AXIS : i64} : (tensor<?x3x6xf32>) -> tensor<?x3x6xf32>
  %l = nf.log_softmax %x {axis = AXIS : i64} : (tensor<?x3x6xf32>) -> tensor<?x3x6xf32>
  func.return %s, %l : tensor<?x3x6xf32>, tensor<?x3x6xf32>
}
"""


def _fake_quants(module) -> dict[str, FakeQuantOp]:  # noqa: ANN001
    return {op.input.name_hint or "x": op for op in module.walk() if isinstance(op, FakeQuantOp)}


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@settings(max_examples=examples(8), deadline=None)
@given(
    bits=st.sampled_from((4, 8)),
    mode=st.sampled_from(list(RoundingMode)),
    axis=st.sampled_from((1, 2, -1)),
    scale=st.sampled_from((0.5, 3.0)),
    seed=st.integers(0, 2**16),
)
def test_auto_softmax_output_is_unsigned_and_lowers_exactly(
    bits: int, mode: RoundingMode, axis: int, scale: float, seed: int
) -> None:
    """The softmax output's fake-quant is unsigned at exponent ``bits`` (``2**b`` codes over
    [0, 1]: ``floor(log2(2**b / 1))``), the input's and log-softmax's stay signed; nh's codes
    equal nq's, lie in ``0..2**b - 1`` (some above ``2**(b-1) - 1`` where a row has a large
    probability) and are within one step of NumPy's float softmax of the quantized input."""
    module = nanoir.parse(PROGRAM.replace("AXIS", str(axis)))
    rng = np.random.default_rng(seed)
    calib = [rng.standard_normal((4, 3, 6)) * scale for _ in range(2)]
    nanoir.quantize(module, calib, act_bits=bits, rounding=mode.value, unsigned="auto")
    fqs = _fake_quants(module)
    assert not fqs["s"].is_signed
    assert int(fqs["s"].exp.get_values()[0]) == bits
    assert fqs["x"].is_signed and fqs["l"].is_signed
    x = rng.standard_normal((3, 3, 6)) * scale
    want_s, want_l = nanoir.run(module, x)
    hw = nanoir.lower_to_hw(module.clone())
    assert f"xui{bits}" in str(hw)
    got_s, got_l = nanoir.run(hw, x)
    np.testing.assert_array_equal(got_s, want_s)
    np.testing.assert_array_equal(got_l, want_l)
    codes = nanoir.run(hw, x, raw=True)[0]
    assert codes.min() >= 0 and codes.max() <= 2**bits - 1
    kx = int(fqs["x"].exp.get_values()[0])
    xq = _fake_quant(x, bits, kx, mode)
    ref = np.minimum(_softmax(xq, axis), (2**bits - 1) * 2.0**-bits)
    assert np.abs(want_s - ref).max() <= 2.0**-bits
    if (ref > 0.5 + 2.0**-bits).any():
        assert codes.max() > 2 ** (bits - 1) - 1


def _fake_quant(x: np.ndarray, bits: int, k: int, mode: RoundingMode) -> np.ndarray:
    """Signed ``bits``-bit codes at exponent ``k`` in ``mode``, dequantized (NumPy)."""
    v = x * 2.0**k
    rounded = {
        RoundingMode.TRUNC: np.trunc,
        RoundingMode.FLOOR: np.floor,
        RoundingMode.HALF_UP: lambda a: np.floor(a + 0.5),
        RoundingMode.HALF_EVEN: np.round,
    }[mode](v)
    return np.clip(rounded, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1) * 2.0**-k


def _quantized(seed: int = 0):  # noqa: ANN202
    module = nanoir.parse(PROGRAM.replace("AXIS", "2"))
    rng = np.random.default_rng(seed)
    nanoir.quantize(module, [rng.standard_normal((4, 3, 6)) * 3], unsigned="auto")
    return module, rng.standard_normal((2, 3, 6)) * 3


def test_ne_round_trips_an_unsigned_softmax_at_both_levels() -> None:
    """nq level: the softmax's Q node has ``signed=0`` and the imported program computes the
    same numbers; hw level: the softmax output is declared ``uint8_t`` and the imported nh
    program gives the same codes."""
    module, x = _quantized()
    text = export_nanoengine(module)
    assert "signed=0" in text
    back = import_nanoengine(text, "s.ne")
    for got, want in zip(nanoir.run(back, x), nanoir.run(module, x), strict=True):
        np.testing.assert_array_equal(got, want)
    hw = nanoir.lower_to_hw(module.clone())
    hw_text = export_nanoengine(hw)
    assert "uint8_t" in hw_text
    hw_back = import_nanoengine(hw_text, "s_hw.ne")
    assert export_nanoengine(hw_back) == hw_text
    for got, want in zip(
        nanoir.run(hw_back, x, raw=True), nanoir.run(hw, x, raw=True), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_integer_onnx_gives_the_unsigned_codes() -> None:
    """The nh program as integer ONNX, run in onnxruntime: the same codes as the NumPy nh
    executor, the softmax's above 127 included."""
    onnx_int = pytest.importorskip("nanoir.grammar.onnx.integer")
    from nanoir.grammar.ne.schema import main_function
    from nanoir.runtime.nh import quantize_inputs

    module, x = _quantized(1)
    hw = nanoir.lower_to_hw(module.clone())
    codes = quantize_inputs(main_function(hw), [x])
    want = nanoir.run(hw, *codes, raw=True)
    got = onnx_int.run_model(onnx_int.export_model(hw), codes)
    assert want[0].max() > 127
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g).astype(np.int64), w.astype(np.int64))


def test_qat_prepare_auto_converts_to_the_unsigned_softmax() -> None:
    """``nanoir.qat.prepare(unsigned="auto")``: the converted program's softmax output is
    unsigned like quantize's, and it computes the module's eval-mode numbers bit for bit."""
    torch = pytest.importorskip("torch")
    from nanoir import qat

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(6, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc(x), dim=-1)

    torch.manual_seed(0)
    model = Net().eval()
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))
    q = qat.prepare(model, (x,), unsigned="auto")
    qat.calibrate(q, [rng.standard_normal((8, 6)).astype(np.float32)])
    module = qat.convert(q)
    out = [op for op in module.walk() if isinstance(op, FakeQuantOp)][-1]
    assert not out.is_signed
    q.eval()
    xs = rng.standard_normal((3, 6))
    with torch.no_grad():
        want = q(torch.from_numpy(xs)).double().numpy()
    (got,) = nanoir.run(module, xs)
    np.testing.assert_array_equal(got, want)
