"""A reshape of a constant lowers to a constant (issue 31 §6): paddle2onnx writes each conv
bias as ``Reshape(offset, [1, C, 1, 1])`` + ``Add``, and a NanoEngine ``.ne`` file keeps such a
Reshape as an init node. lower-to-hw made it an ``nh.reshape`` with a runtime (``BCMD``)
layout, which the ``.ne`` writer refuses ("init tensor ... has layout 'BCMD'"), so a program
read from ``.ne`` could not be written back after lowering. The oracle is the nq program run
in float64 (the exactness contract): the hw program, and the hw program read back from its
``.ne`` text, give its values bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nanoir.dialects import nh

import nanoir

BIAS = {
    "per_tensor": "dense<5> : tensor<1xi8>",
    "per_channel": "dense<[5, 6, 4, 7]> : tensor<4xi8>",
}


def nq_program(bias_exp: str) -> str:
    """A 1x1 conv whose bias is added after it as a reshaped constant (the paddle2onnx form)."""
    x, y = "tensor<?x3x6x6xf32>", "tensor<?x4x6x6xf32>"
    w = "[[[[0.5]], [[-0.25]], [[0.125]]], [[[0.25]], [[0.5]], [[-0.5]]], " + (
        "[[[-0.125]], [[0.25]], [[0.5]]], [[[0.5]], [[0.5]], [[0.25]]]]"
    )
    return f"""
func.func @main(%x: {x}) -> {y} {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : {x}
  %w = nf.constant "conv.weight" dense<{w}> : tensor<4x3x1x1xf32>
  %wq = nq.fake_quant %w {{bits = 8 : i64, exp = dense<6> : tensor<1xi8>}} : tensor<4x3x1x1xf32>
  %c = nf.conv %xq, %wq : ({x}, tensor<4x3x1x1xf32>) -> {y}
  %cq = nq.fake_quant %c {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : {y}
  %off = nf.constant "conv.offset" dense<[3.0e-01, -7.0e-01, 1.1, -5.0e-02]> : tensor<4xf32>
  %offq = nq.fake_quant %off {{bits = 8 : i64, exp = {bias_exp}}} : tensor<4xf32>
  %r = nf.reshape %offq : tensor<4xf32> -> tensor<1x4x1x1xf32>
  %s = nf.add %cq, %r : ({y}, tensor<1x4x1x1xf32>) -> {y}
  %sq = nq.fake_quant %s {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : {y}
  func.return %sq : {y}
}}
"""


def inputs(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-4, 4, (2, 3, 6, 6)).astype(np.float32)


@pytest.mark.parametrize("bias", list(BIAS))
def test_the_reshaped_constant_is_a_constant_and_writes_to_ne(bias: str, tmp_path: Path) -> None:
    """kills: LowerReshape without the constant fold (an nh.reshape of the constant, BCMD:
    the .ne writer's ExportError)."""
    q = nanoir.parse(nq_program(BIAS[bias]))
    x = inputs()
    (want,) = nanoir.run(q, x)
    hw = nanoir.lower_to_hw(q.clone())
    ops = list(hw.walk())
    assert not any(isinstance(op, nh.ReshapeOp) for op in ops)
    (offset,) = [op for op in ops if isinstance(op, nh.ConstantOp) and op.sym_name is not None
                 and op.sym_name.data == "conv.offset"]  # fmt: skip
    assert offset.result.type.get_shape() == (1, 4, 1, 1)
    assert not offset.result.type.encoding.layout.data.startswith("B")
    (got,) = nanoir.run(hw, x)
    assert np.array_equal(got, want)
    nanoir.save(hw, tmp_path / "hw.ne")
    (back,) = nanoir.run(nanoir.load(tmp_path / "hw.ne"), x)
    assert np.array_equal(back, want)


def test_a_ne_program_with_an_init_reshape_lowers_and_writes_back(tmp_path: Path) -> None:
    """The issue's case: the nq `.ne` writer keeps the Reshape as an init node; read back,
    lowered, the hw `.ne` writer now takes the program. kills: as above."""
    q = nanoir.parse(nq_program(BIAS["per_tensor"]))
    nanoir.save(q, tmp_path / "q.ne")
    assert "op_type=Reshape" in (tmp_path / "q.ne").read_text()
    read = nanoir.load(tmp_path / "q.ne")
    hw = nanoir.lower_to_hw(read.clone())
    nanoir.save(hw, tmp_path / "hw.ne")
    x = inputs(1)
    (want,) = nanoir.run(read, x)
    (got,) = nanoir.run(nanoir.load(tmp_path / "hw.ne"), x)
    assert np.array_equal(got, want)


def test_exponents_that_would_vary_along_two_dims_are_aligned(tmp_path: Path) -> None:
    """Four per-element exponents reshaped to 2x2 vary along both dims, which no nh layout
    carries: the codes shift to the finest exponent first (exact). kills: the fold keeping
    exponents along two dims (fixed(): "exponents vary along dims [0, 1]")."""
    t = "tensor<?x2x2xf32>"
    q = nanoir.parse(f"""
func.func @main(%x: {t}) -> {t} {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : {t}
  %c = nf.constant "c" dense<[3.0e-01, -7.0e-01, 1.1, -5.0e-02]> : tensor<4xf32>
  %cq = nq.fake_quant %c {{bits = 8 : i64, exp = dense<[3, 4, 5, 6]> : tensor<4xi8>}} : tensor<4xf32>
  %r = nf.reshape %cq : tensor<4xf32> -> tensor<2x2xf32>
  %s = nf.add %xq, %r : ({t}, tensor<2x2xf32>) -> {t}
  %sq = nq.fake_quant %s {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : {t}
  func.return %sq : {t}
}}
""")
    x = np.random.default_rng(2).uniform(-4, 4, (3, 2, 2)).astype(np.float32)
    (want,) = nanoir.run(q, x)
    hw = nanoir.lower_to_hw(q.clone())
    assert not any(isinstance(op, nh.ReshapeOp) for op in hw.walk())
    (got,) = nanoir.run(hw, x)
    assert np.array_equal(got, want)
