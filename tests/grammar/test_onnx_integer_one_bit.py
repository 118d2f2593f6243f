"""1-bit codes in integer ONNX (issue 31 §5: two survivors no test saw). The sign rule of a
requant to ``i1`` sends an exact 0 to +1, and a lookup table read by ``i1`` codes (-1, +1)
takes its entries 0 and 1: each against NumPy's codes and an oracle written here, in
onnxruntime with the uint8 x int8 kernels and without. A host island's 1-bit quantizer
(``lower_to_hw{host=true}``) sends an exact 0 to +1 as well."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.lowering.lower_to_hw import lower_to_hw

import nanoir

pytest.importorskip("onnxruntime")

REQUANT = """\
func.func @main(%x: tensor<?x6xi8, #nh.fixed<0, BC>>) -> tensor<?x6xi1, #nh.fixed<-3, BC>> {
  %y = nh.requant %x {shift = array<i64: 3>} : tensor<?x6xi8, #nh.fixed<0, BC>>
      -> tensor<?x6xi1, #nh.fixed<-3, BC>>
  func.return %y : tensor<?x6xi1, #nh.fixed<-3, BC>>
}
"""
LUT = """\
func.func @main(%x: tensor<?x4xi1, #nh.fixed<0, BC>>) -> tensor<?x4xi8, #nh.fixed<0, BC>> {
  %y = nh.lut %x {table = array<i64: -7, 11>} : tensor<?x4xi1, #nh.fixed<0, BC>>
      -> tensor<?x4xi8, #nh.fixed<0, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<0, BC>>
}
"""


def _both_graphs(text: str, x: np.ndarray) -> list[np.ndarray]:
    module = nanoir.parse(text)
    (want,) = nanoir.run(module, x, raw=True)
    got = []
    for fused in ("auto", None):
        (y,) = run_model(make_session(export_model(module, fused=fused)), [x])
        assert np.array_equal(y, want)
        got.append(y)
    return got


def test_the_sign_rule_sends_zero_to_plus_one() -> None:
    """Kills: the 1-bit requant written ``x > 0`` (an exact 0 then gives -1)."""
    x = np.array([[0, 1, -1, 127, -128, 0]], np.int8)
    for y in _both_graphs(REQUANT, x):
        assert y.tolist() == [[1, 1, -1, 1, -1, 1]]


def test_a_one_bit_table_index() -> None:
    """Kills: the 1-bit index written as the code itself (-1 then reads the table's last
    entry, +1 its second: the entries swapped) or as ``x + 1`` (+1 past the table)."""
    x = np.array([[-1, 1, 1, -1], [1, -1, -1, -1]], np.int8)
    for y in _both_graphs(LUT, x):
        assert y.tolist() == np.where(x > 0, 11, -7).tolist()


T = "tensor<?x4xf32>"
HOST = f"""\
func.func @main(%x: {T}, %y: {T}) -> ({T}, {T}) {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<3> : tensor<1xi8>}} : {T}
  %yq = nq.fake_quant %y {{bits = 8 : i64, exp = dense<2> : tensor<1xi8>}} : {T}
  %d = nf.div %xq, %yq : ({T}, {T}) -> {T}
  %dq = nq.fake_quant %d {{bits = 1 : i64, exp = dense<0> : tensor<1xi8>}} : {T}
  %m = nf.div %dq, %yq : ({T}, {T}) -> {T}
  func.return %dq, %m : {T}, {T}
}}
"""


def test_a_one_bit_quantizer_on_the_host_sends_zero_to_plus_one() -> None:
    """A division on the host (``lower_to_hw{host=true}``: by a run-time value) whose quotient
    is exactly 0 in places, quantized to 1 bit: leaving the host (``nh.from_host``, an output)
    and read by another host op (the fake-quant written between host ops). The sign rule,
    written here, against NumPy's executor and onnxruntime.

    Kills: the host's 1-bit quantizer written ``x > 0`` (``host._quantize``: an exact 0 gives
    -1 in onnxruntime; it passed test_onnx_integer_host.py and the tests above)."""
    hw = lower_to_hw(nanoir.parse(HOST), host=True)
    x = np.array([[0.0, 0.5, -0.5, 0.0], [1.0, 0.0, -1.0, 0.125]])
    y = np.array([[1.0, 2.0, 0.5, 4.0], [1.0, 0.25, 2.0, 1.0]])
    sign = np.where(x / y >= 0, 1.0, -1.0)  # (x and y are on their grids, y > 0)
    want = [sign, sign / y]
    for backend in ("numpy", "onnxruntime"):
        got = nanoir.run(hw, x, y, backend=backend)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g, np.float64), w, err_msg=backend)
