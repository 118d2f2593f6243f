"""Integer ONNX of a program with host islands (lower-to-hw{host=true}): the boundary ops
exactly, the host's nf ops as float ONNX ops; onnxruntime runs the whole file.

The oracle is nanoir's NumPy executor on the same program (itself equal to the nq program
bit for bit, tests/lowering/test_lower_to_hw_host.py). Host ops run in float32 in the file
and in float64 in NumPy: where the host computes exactly in both (products and sums of a few
short dyadics), the codes are equal; otherwise within one code of the from_host after it.

kills: nh.to_host written with 2**exp instead of 2**-exp, nh.from_host rounding half to even
where the fake-quant truncates, a spliced host node reading its own model's input names (not
the to_host output), a result computed on the host written as codes, an nf op the float
writer cannot write passing silently.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.dialects.functions import find_function
from nanoir.lowering.lower_to_hw import lower_to_hw

import nanoir
from nanoir.target import Target, engine_op_names
from nanoir.testing import make_test_model

pytest.importorskip("onnxruntime")

DIVISION = """
func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x4xf32>
  %a = nf.relu %xq : tensor<?x4xf32>
  %d = nf.div %a, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %dq = nq.fake_quant %d {bits = 6 : i64, exp = dense<1> : tensor<1xi8>} : tensor<?x4xf32>
  %r = nf.relu %dq : tensor<?x4xf32>
  %m = nf.div %r, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %r, %m : tensor<?x4xf32>, tensor<?x4xf32>
}
"""


@pytest.mark.parametrize("mode", ["trunc", "floor", "half_up", "half_even"])
def test_exact_host_islands_run_bit_for_bit(mode: str) -> None:
    """Divisions by powers of two on the host (exact in float32 and float64 alike), every
    rounding mode of the from_host after them, and a result computed on the host."""
    rounding = f"bits = 6 : i64, rounding = #nq.rounding<{mode}>,"
    module = nanoir.parse(DIVISION.replace("bits = 6 : i64,", rounding))
    hw = lower_to_hw(module, host=True)
    rng = np.random.default_rng(0)
    x = rng.integers(-60, 60, (5, 4)) / 8.0
    y = 2.0 ** rng.integers(-2, 3, (5, 4))
    want = nanoir.run(hw, x, y)
    got = nanoir.run(hw, x, y, backend="onnxruntime")
    assert [w.dtype for w in want] == [np.float64, np.float64]
    for w, o in zip(want, got):
        assert np.array_equal(np.asarray(o, np.float64), w)
    assert got[1].dtype == np.float32  # the host's result, as a float output


def test_a_network_with_its_convs_on_the_host(tmp_path) -> None:
    """Every conv and add on the host: the file runs, reads back as the same program, and its
    outputs are within one output step of NumPy's (the host's float32 against float64)."""
    model = make_test_model("SampleNet")
    x = model.make_example_input(3).numpy()  # type: ignore[operator]
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    nanoir.quantize(module, [x])
    target = Target(name="t").with_ops(engine_op_names() - {"conv", "add"})
    hw = lower_to_hw(module.clone(), target=target, host=True)
    path = tmp_path / "mixed.onnx"
    nanoir.save(hw, path)
    assert str(nanoir.load(path)) == str(hw)
    (want,) = nanoir.run(hw, x)
    (got,) = nanoir.run(hw, x, backend="onnxruntime")
    step = 2.0 ** -int(
        find_function(hw, None).function_type.outputs.data[0].encoding.exp_list[0]  # type: ignore[union-attr]
    )
    assert np.abs(np.asarray(got, np.float64) - want).max() <= step


def test_a_host_op_without_a_float_form_is_refused_by_name() -> None:
    module = nanoir.parse(
        """
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %g = nf.custom %xq {op_type = "Erf", attrs = {}} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %gq = nq.fake_quant %g {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %gq : tensor<?x4xf32>
}
"""
    )
    hw = lower_to_hw(module, host=True)
    with pytest.raises(
        nanoir.Error, match=r"nf.custom .*runs on the host, and has no float ONNX form"
    ):
        nanoir.save(hw, "/dev/null.onnx")
