"""The per-layer quantization report, on cases computed by hand."""

from __future__ import annotations

import math

import numpy as np

import nanoir
from nanoir.quant_report import report, sqnr_db

PROGRAM = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x4xf32>
  %w = nf.constant "scale" dense<[0.75, 0.75, 0.75, 0.75]> : tensor<4xf32>
  %wq = nq.fake_quant %w {bits = 2 : i64, exp = dense<1> : tensor<1xi8>} : tensor<4xf32>
  %y = nf.mul %q, %wq : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}
"""


def test_figures_match_hand_computation() -> None:
    module = nanoir.parse(PROGRAM)
    x = np.array([[0.5, 1.5, 300.0, -200.0]])
    r = report(module, [x])
    by_name = {row.name: row for row in r.rows}
    act = by_name["x"]
    # trunc codes: 0, 1, 127 (saturated), -128 (saturated).
    assert act.kind == "act" and act.bits == 8 and act.exps == [0]
    assert act.saturation == 0.5
    q = np.array([0.0, 1.0, 127.0, -128.0])
    signal, noise = float((x**2).sum()), float(((q - x) ** 2).sum())
    assert math.isclose(act.sqnr, 10 * math.log10(signal / noise))
    # The input of the first fake-quant is the float tensor itself.
    assert math.isclose(act.sqnr_vs_float, act.sqnr)
    w = by_name["scale"]
    # 0.75 * 2 = 1.5 -> trunc 1 -> 0.5; 2-bit codes -2..1, nothing clipped.
    assert w.kind == "const" and w.bits == 2 and w.saturation == 0.0
    assert math.isclose(w.sqnr, sqnr_db(4 * 0.75**2, 4 * 0.25**2))
    # The output: q * 0.5 against the float program's x * 0.75.
    y_q, y_f = q * 0.5, x[0] * 0.75
    expected = 10 * math.log10((y_f**2).sum() / ((y_q - y_f) ** 2).sum())
    assert math.isclose(r.output_sqnr[0], expected)
    text = str(r)
    assert "scale" in text and "50.00%" in text and "output 0: SQNR" in text


def test_sqnr_edge_cases() -> None:
    assert sqnr_db(1.0, 0.0) == math.inf
    assert sqnr_db(0.0, 0.0) == math.inf
    assert sqnr_db(0.0, 1.0) == -math.inf
    assert math.isclose(sqnr_db(100.0, 1.0), 20.0)


def test_public_name_stays_the_function() -> None:
    """``nanoir.report`` is the function even after its module was imported."""
    import nanoir.quant_report  # noqa: F401

    assert callable(nanoir.report) and nanoir.report is report
