"""Lookup tables written as their function's float ops (:mod:`nanoir.grammar.onnx.integer.
table_forms`), against the NumPy nh executor at every input code, and where the writer must
keep the ``Gather``.

The programs are nq text (a fake-quant, the function, a fake-quant) lowered by lower-to-hw,
which writes the table and its ``function``; each run feeds every code of the input type.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.lowering.lower_to_hw import lower_to_hw

import nanoir
from nanoir.testing.programs import examples

pytest.importorskip("onnxruntime")

MODES = ("trunc", "floor", "half_up", "half_even")


def _program(fn: str, bits: int, e_in: int, out_bits: int, e_out: int, mode: str) -> str:
    q = "{bits = %d : i64, exp = dense<%d> : tensor<1xi8>, rounding = #nq.rounding<%s>}"
    t = "tensor<?x1xf32>"
    return f"""func.func @main(%x: {t}) -> {t} {{
  %xq = nq.fake_quant %x {q % (bits, e_in, mode)} : {t}
  %y = {fn.format("%xq")} : {t}
  %yq = nq.fake_quant %y {q % (out_bits, e_out, mode)} : {t}
  func.return %yq : {t}
}}"""


def _every_code(module: object, bits: int) -> tuple[bool, np.ndarray, np.ndarray]:
    """Whether the written graph has a ``Gather``, and its codes and NumPy's on every input
    code."""
    model = export_model(module)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    x = np.arange(lo, hi + 1).reshape(-1, 1).astype(np.int8 if bits <= 8 else np.int16)
    (want,) = nanoir.run(module, x, raw=True)
    (got,) = run_model(make_session(model), [x])
    gathers = any(n.op_type == "Gather" for n in model.graph.node)
    return gathers, np.asarray(got).astype(np.int64), np.asarray(want).astype(np.int64)


FUNCTIONS = {
    "hardswish": "nf.hardswish {}",
    "hardsigmoid": "nf.hardsigmoid {}",
    "hardsigmoid_onnx": "nf.hardsigmoid {} {{alpha = 2.0e-01 : f64}}",
    "leaky_relu": "nf.leaky_relu {} {{alpha = 1.000000e-01 : f64}}",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize(("bits", "e_in", "out_bits", "e_out"), [(8, 4, 8, 5), (16, 12, 8, 6)])
def test_the_float_form_replaces_the_gather(
    name: str, mode: str, bits: int, e_in: int, out_bits: int, e_out: int
) -> None:
    """At the exponents quantize picks for such layers, every rounding mode, 8- and 16-bit
    inputs: the graph has no ``Gather`` and gives NumPy's codes at every input code. Kills:
    the graph's half_up without its 1/2, an input scaled by ``2**e`` for ``2**-e``, the
    modes tried without float64 (16-bit inputs need it for some), the float form skipped."""
    text = _program(FUNCTIONS[name], bits, e_in, out_bits, e_out, mode)
    module = lower_to_hw(nanoir.parse(text))
    gathers, got, want = _every_code(module, bits)
    assert np.array_equal(got, want)
    assert not gathers


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["hardswish", "hardsigmoid"])
@pytest.mark.parametrize(("e_in", "e_out"), [(4, 5), (3, 3), (5, 7)])
def test_a_divide_by_six_is_a_multiply_where_that_gives_the_table(
    name: str, mode: str, e_in: int, e_out: int
) -> None:
    """At 8-bit exponents of trained networks (PP-LCNet's hardswishes), the form multiplies
    by 1/6 (onnxruntime's ``Div`` is about three times its ``Mul``), and still gives NumPy's
    codes at every input code. Kills: the reciprocal form tried after the divide."""
    module = lower_to_hw(nanoir.parse(_program(FUNCTIONS[name], 8, e_in, 8, e_out, mode)))
    gathers, got, want = _every_code(module, 8)
    assert np.array_equal(got, want) and not gathers
    assert not any(n.op_type == "Div" for n in export_model(module).graph.node)


@settings(max_examples=examples(60), deadline=None)
@given(
    name=st.sampled_from(sorted(FUNCTIONS)),
    mode=st.sampled_from(MODES),
    bits=st.sampled_from([2, 3, 4, 8, 16]),
    out_bits=st.sampled_from([2, 4, 8, 16]),
    e_in=st.integers(-6, 14),
    e_out=st.integers(-6, 14),
)
def test_lookup_tables_equal_numpy_at_every_code(
    name: str, mode: str, bits: int, out_bits: int, e_in: int, e_out: int
) -> None:
    """Any widths and exponents (saturating ones included): the written graph, with its float
    form or its ``Gather``, gives NumPy's codes at every input code."""
    text = _program(FUNCTIONS[name], bits, e_in, out_bits, e_out, mode)
    module = lower_to_hw(nanoir.parse(text))
    _, got, want = _every_code(module, bits)
    assert np.array_equal(got, want)


WRONG = """func.func @main(%x: tensor<?x1xi4, #nh.fixed<1, BC>>) -> tensor<?x1xi8, #nh.fixed<4, BC>> {
  %y = nh.lut %x {table = array<i64: TABLE>, function = "hardswish"}
      : tensor<?x1xi4, #nh.fixed<1, BC>> -> tensor<?x1xi8, #nh.fixed<4, BC>>
  func.return %y : tensor<?x1xi8, #nh.fixed<4, BC>>
}"""


def test_a_table_its_function_does_not_give_keeps_the_gather() -> None:
    """A hand-written table that says ``hardswish`` but holds hardswish's codes with one
    changed: the table is the semantics, so the writer keeps the ``Gather``; the exact
    hardswish table takes the float form. Kills: the form used without its check."""
    codes = np.arange(-8, 8) / 2.0
    table = np.rint(codes * np.clip(codes + 3, 0, 6) / 6 * 16).astype(int)
    exact = nanoir.parse(WRONG.replace("TABLE", ", ".join(map(str, table))))
    gathers, got, want = _every_code(exact, 4)
    assert not gathers and np.array_equal(got, want)
    table[3] += 1
    wrong = nanoir.parse(WRONG.replace("TABLE", ", ".join(map(str, table))))
    gathers, got, want = _every_code(wrong, 4)
    assert gathers and np.array_equal(got, want)
    assert want.reshape(-1).tolist() == table.tolist()


def test_params_need_their_function() -> None:
    text = WRONG.replace("TABLE", ", ".join(["0"] * 16)).replace(
        'function = "hardswish"', "params = array<f64: 1.0>"
    )
    with pytest.raises(nanoir.Error, match="params without the function"):
        nanoir.parse(text)


def test_params_must_be_finite() -> None:
    """Kills: a non-finite param accepted (the .ne writer then has no spelling for it)."""
    from xdsl.dialects.builtin import DenseArrayBase, f64

    module = nanoir.parse(WRONG.replace("TABLE", ", ".join(["0"] * 16)))
    (lut,) = [op for op in module.walk() if op.name == "nh.lut"]
    lut.properties["params"] = DenseArrayBase.from_list(f64, [float("inf")])
    with pytest.raises(Exception, match="params must be finite"):
        module.verify()
