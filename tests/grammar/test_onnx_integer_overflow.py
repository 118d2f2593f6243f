"""The onnxruntime backend never returns a wrapped code (issue 31 §1.3). Programs whose static
bounds do not fit their types (a hand-written nh ``.mlir``, a hw ``.ne``,
``lower-to-hw{allow_overflow=true}``, an ``nh.add`` of two ``i32`` values) are written with an
overflow check (computed in int64, counted, the count a graph output): an input that overflows
is an ``ExecutionError`` in onnxruntime as in NumPy (``nanoir.run`` gives NumPy's own message),
also for the integer ``.onnx`` file read back from disk, and an input that does not gives NumPy's
codes. Oracle: the exact sums written here in Python integers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.runtime.base import ExecutionError
from xdsl.dialects.builtin import ModuleOp

import nanoir

pytest.importorskip("onnxruntime")

I16 = "#nh.fixed<0, BC>"
LINEAR = f"""\
func.func @main(%x: tensor<?x4xi16, {I16}>) -> tensor<?x1xi32, {I16}> {{
  %w = nh.constant "w" dense<32767> : tensor<1x4xi16> -> tensor<1x4xi16, #nh.fixed<0, CC>>
  %y = nh.linear %x, %w : (tensor<?x4xi16, {I16}>, tensor<1x4xi16, #nh.fixed<0, CC>>)
      -> tensor<?x1xi32, {I16}>
  func.return %y : tensor<?x1xi32, {I16}>
}}
"""
F = "#nh.fixed<0, BCMD>"
CONV = f"""\
func.func @main(%x: tensor<?x4x2x2xi16, {F}>) -> tensor<?x1x2x2xi32, {F}> {{
  %w = nh.constant "w" dense<-32768> : tensor<1x4x1x1xi16> -> tensor<1x4x1x1xi16, #nh.fixed<0, CCDD>>
  %y = nh.conv %x, %w : (tensor<?x4x2x2xi16, {F}>, tensor<1x4x1x1xi16, #nh.fixed<0, CCDD>>)
      -> tensor<?x1x2x2xi32, {F}>
  func.return %y : tensor<?x1x2x2xi32, {F}>
}}
"""
ADD = f"""\
func.func @main(%a: tensor<?x3xi32, {I16}>, %b: tensor<?x3xi32, {I16}>) -> tensor<?x3xi32, {I16}> {{
  %y = nh.add %a, %b : (tensor<?x3xi32, {I16}>, tensor<?x3xi32, {I16}>) -> tensor<?x3xi32, {I16}>
  func.return %y : tensor<?x3xi32, {I16}>
}}
"""
TOP = 2**31 - 1


def _cases(name: str) -> tuple[str, list[np.ndarray], list[np.ndarray], list[int]]:
    """(program, overflowing inputs, fitting inputs, exact sums of the fitting inputs)."""
    if name == "linear":
        big = [np.full((1, 4), 32767, np.int16)]
        fit = [np.array([[32767, -32767, 32767, 1]], np.int16)]
        return LINEAR, big, fit, [32767 * (32767 - 32767 + 32767 + 1)]
    if name == "conv":
        big = [np.full((1, 4, 2, 2), -32768, np.int16)]
        x = np.zeros((1, 4, 2, 2), np.int16)
        x[0, :, 0, 0] = [32767, -32768, 5, 0]
        return CONV, big, [x], [-32768 * (32767 - 32768 + 5), 0, 0, 0]
    big = [np.array([[TOP, 1, -5]], np.int32), np.array([[TOP, 0, 5]], np.int32)]
    fit = [np.array([[TOP, -(2**31), 7]], np.int32), np.array([[-1, TOP, -7]], np.int32)]
    return ADD, big, fit, [TOP - 1, -1, 0]


@pytest.mark.parametrize("name", ["linear", "conv", "add"])
def test_overflow_is_an_error_and_fitting_inputs_run(name: str, tmp_path: Path) -> None:
    """Kills (one each): the wide product summed in int32 again (no check: the four products
    of 32767**2 wrap to a code); the add's check dropped (``i32 + i32`` wraps)."""
    text, big, fit, want = _cases(name)
    module = nanoir.parse(text)
    with pytest.raises(ExecutionError):
        nanoir.run(module, *big, raw=True)
    with pytest.raises(ExecutionError) as ort_error:
        nanoir.run(module, *big, raw=True, backend="onnxruntime")
    with pytest.raises(ExecutionError) as numpy_error:
        nanoir.run(module, *big, raw=True)
    assert str(ort_error.value) == str(numpy_error.value)  # the executor's own message
    (got,) = nanoir.run(module, *fit, raw=True, backend="onnxruntime")
    assert got.reshape(-1).tolist() == want
    # The integer .onnx read back from disk runs the check too.
    path = tmp_path / "p.onnx"
    nanoir.save(module, path)
    data = path.read_bytes()
    with pytest.raises(ExecutionError, match=r"do not fit its type"):
        run_model(make_session(data), big)
    assert run_model(make_session(data), fit)[0].reshape(-1).tolist() == want


def test_a_hw_ne_file_is_checked(tmp_path: Path) -> None:
    """The hand-written product as a hw ``.ne`` file, read back and run by onnxruntime."""
    path = tmp_path / "p.ne"
    quantized = (
        "{nq.bits = 16 : i64, nq.exp = dense<0> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}"
    )
    text = CONV.replace(
        f"%x: tensor<?x4x2x2xi16, {F}>)", f"%x: tensor<?x4x2x2xi16, {F}> {quantized})"
    )
    nanoir.save(nanoir.parse(text), path)
    module = nanoir.load(path)
    _, big, fit, want = _cases("conv")
    with pytest.raises(ExecutionError):  # float inputs at exponent 0: the codes themselves
        nanoir.run(module, big[0].astype(np.float64), raw=True, backend="onnxruntime")
    (got,) = nanoir.run(module, fit[0].astype(np.float64), raw=True, backend="onnxruntime")
    assert got.reshape(-1).tolist() == want


def _allow_overflow_program() -> ModuleOp:
    """A 16-bit linear of 256 terms whose worst case passes i32: lower-to-hw refuses it unless
    ``allow_overflow=true``."""
    rng = np.random.default_rng(0)
    w = rng.choice([-1.0, 1.0], (2, 256)) * rng.uniform(0.9, 1.0, (2, 256))
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in r) + "]" for r in w)
    module = nanoir.parse(f"""func.func @main(%x: tensor<?x256xf32>) -> tensor<?x2xf32> {{
  %w = nf.constant "w" dense<[{rows}]> : tensor<2x256xf32>
  %y = nf.linear %x, %w : (tensor<?x256xf32>, tensor<2x256xf32>) -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}}""")
    nanoir.quantize(
        module,
        [rng.standard_normal((4, 256))],
        act_bits=16,
        weight_bits=16,
        bias_correction=False,
    )
    # quantize keeps the accumulator within i32 (a coarser weight grid): take the fine one.
    for op in module.walk():
        if isinstance(op, FakeQuantOp) and isinstance(op.input.owner, nf.ConstantOp):
            op.properties["exp"] = exp_attr(14)
    return module


def test_lower_to_hw_allow_overflow_is_checked() -> None:
    """An input with every code at the top overflows the accumulator: an error in both
    executors; ordinary inputs give NumPy's codes."""
    from nanoir.lowering.lower_to_hw import lower_to_hw

    module = _allow_overflow_program()
    with pytest.raises(nanoir.Error):
        lower_to_hw(module.clone())
    hw = lower_to_hw(module.clone(), allow_overflow=True)
    model = export_model(hw)
    assert model.graph.output[-1].name == "nanoir_checks"
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 256)) * 0.05
    want = nanoir.run(hw, x, raw=True)
    got = nanoir.run(hw, x, raw=True, backend="onnxruntime")
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    (w,) = [op for op in hw.walk() if op.name == "nh.constant"]
    top = np.sign(w.codes()[0]).reshape(1, -1) * 1e6  # type: ignore[attr-defined]
    with pytest.raises(ExecutionError):
        nanoir.run(hw, top, raw=True)
    with pytest.raises(ExecutionError):
        nanoir.run(hw, top, raw=True, backend="onnxruntime")


def test_programs_whose_bounds_fit_have_no_check() -> None:
    """What lower-to-hw writes by default carries no check output (no cost)."""
    module = nanoir.parse(LINEAR.replace("32767", "3"))
    model = export_model(module)
    assert [o.name for o in model.graph.output] == ["output"]
