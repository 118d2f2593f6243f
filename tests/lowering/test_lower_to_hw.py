"""lower-to-hw keeps every number: run(nq, float64) == run(nh) * 2**-exp, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp

import nanoir
from nanoir.dialects.nh import FixedAttr
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime import quant
from nanoir.runtime.interpreter import find_function, run
from nanoir.runtime.nf import dense_to_numpy
from nanoir.testing_programs import random_nq_program


def quantize_inputs(func: FuncOp, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The codes an nh function takes, from the fake-quant recorded on each argument."""
    assert func.arg_attrs is not None
    codes = []
    for x, attrs in zip(inputs, func.arg_attrs.data):
        d = attrs.data
        bits = d["nq.bits"].value.data
        exp = dense_to_numpy(d["nq.exp"]).astype(np.int64)
        codes.append(quant.quantize_to_int(x, bits, exp, d["nq.rounding"].data).astype(np.int64))
    return codes


def dequantize(func: FuncOp, outputs: list[np.ndarray]) -> list[np.ndarray]:
    """code * 2**-exp for each result, per channel where the type says so."""
    reals = []
    for y, t in zip(outputs, func.function_type.outputs.data):
        assert isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr)
        exps = t.encoding.exp_array(len(t.get_shape()))
        reals.append(np.ldexp(np.asarray(y, dtype=np.float64), -exps))
    return reals


def check_exact(nq_module: ModuleOp, inputs: list[np.ndarray]) -> ModuleOp:
    want = run(nq_module, *inputs, dtype=np.float64)
    hw = lower_to_hw(nq_module.clone())
    hw.verify()
    func = find_function(hw)
    got = dequantize(func, run(hw, *quantize_inputs(func, inputs)))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        mismatch = np.flatnonzero(g != w)
        assert mismatch.size == 0, (
            f"{mismatch.size} mismatches; first at {mismatch[0]}: nh {g.flat[mismatch[0]]} "
            f"vs nq {w.flat[mismatch[0]]}"
        )
    return hw


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), batch=st.sampled_from((1, 3)))
def test_random_programs_lower_exactly(data: st.DataObject, batch: int) -> None:
    module, shape = random_nq_program(data.draw)
    module.verify()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    check_exact(module, [x])


SAMPLE_LIKE = """\
func.func @main(%x: tensor<?x3x?x5xf32>) -> tensor<?x4x?x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x3x?x5xf32>
  %w = nf.constant "w" dense<[[[[0.5, -0.25, 0.125], [0.75, 0.5, -1.0], [0.3, 0.2, 0.1]]], [[[1.5, -0.25, 0.125], [0.75, 0.5, -1.0], [0.3, 0.2, 0.1]]], [[[0.5, -0.25, 0.125], [0.75, 0.5, -1.0], [0.3, 0.2, 0.1]]], [[[0.5, -0.25, 0.125], [0.75, 0.5, -1.0], [0.3, 0.2, 0.1]]]]> : tensor<4x1x3x3xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<[[[[3]]], [[[2]]], [[[3]]], [[[3]]]]> : tensor<4x1x1x1xi8>} : tensor<4x1x3x3xf32>
  %b = nf.constant "b" dense<[0.1, -0.2, 0.3, -0.4]> : tensor<4xf32>
  %bq = nq.fake_quant %b {bits = 8 : i64, exp = dense<[7, 7, 7, 7]> : tensor<4xi8>} : tensor<4xf32>
  %c = nf.conv %xq, %wq, %bq {groups = 1 : i64} : (tensor<?x3x?x5xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<?x4x?x3xf32>
  func.return %c : tensor<?x4x?x3xf32>
}
"""


def test_constructed_overflow_is_caught() -> None:
    # 8-bit inputs (|code| <= 128) times 300 weights of code 127 overflow i32 only when the
    # sum is long enough: 128 * 127 * 300 * 512 > 2**31.
    text = f"""\
func.func @main(%x: tensor<?x512x300xf32>) -> tensor<?x4x300xf32> {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<0> : tensor<1xi8>}} : tensor<?x512x300xf32>
  %w = nf.constant "w" dense<127.0> : tensor<4x512x300xf32>
  %wq = nq.fake_quant %w {{bits = 8 : i64, exp = dense<0> : tensor<1xi8>}} : tensor<4x512x300xf32>
  %c = nf.conv %xq, %wq {{pads = array<i64: 150, 149>}} : (tensor<?x512x300xf32>, tensor<4x512x300xf32>) -> tensor<?x4x300xf32>
  func.return %c : tensor<?x4x300xf32>
}}
"""
    module = nanoir.parse(text)
    with pytest.raises(LowerToHwError, match=r"'nf.conv' \(%c\) may overflow its i32 "
                                             r"accumulator: worst case \|acc\| = 2496921600"):
        lower_to_hw(module)


def test_unsupported_ops_are_named() -> None:
    text = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  %s = nf.sigmoid %xq : tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}
"""
    with pytest.raises(LowerToHwError, match=r"'nf.sigmoid' \(%s\) has no integer lowering "
                                             r"\(it is float-only"):
        lower_to_hw(nanoir.parse(text))
    unquantized = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %r = nf.relu %x : tensor<?x4xf32>
  func.return %r : tensor<?x4xf32>
}
"""
    with pytest.raises(LowerToHwError, match=r"'nf.relu' \(%r\) reads a float value from "
                                             r"a function argument that is not quantized"):
        lower_to_hw(nanoir.parse(unquantized))
