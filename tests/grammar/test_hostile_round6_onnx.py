"""Hostile inputs to integer ONNX (round 6): the onnxruntime backend and the file reader.

Bad input gets one clear nanoir.Error naming the input and what was expected, never
onnxruntime's own exception (a traceback through its bindings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nanoir.grammar.onnx.integer import PROGRAM_KEY, export_model

import nanoir

pytest.importorskip("onnxruntime")

SMALL = """\
func.func @main(%x: tensor<?x2x4x4xf32>) -> tensor<?x3x4x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x4x4xf32>
  %w = nf.constant "w" dense<[[[[0.5]], [[-1.0]]], [[[0.25]], [[0.75]]], [[[-0.5]], [[1.0]]]]>
      : tensor<3x2x1x1xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<3x2x1x1xf32>
  %y = nf.conv %xq, %wq : (tensor<?x2x4x4xf32>, tensor<3x2x1x1xf32>) -> tensor<?x3x4x4xf32>
  %r = nf.relu %y : tensor<?x3x4x4xf32>
  %yq = nq.fake_quant %r {bits = 8 : i64, exp = dense<[[[3]], [[4]], [[5]]]> : tensor<3x1x1xi8>,
      rounding = #nq.rounding<half_up>, signed = false} : tensor<?x3x4x4xf32>
  func.return %yq : tensor<?x3x4x4xf32>
}
"""


@pytest.fixture(scope="module")
def hw():  # noqa: ANN201
    return nanoir.lower_to_hw(nanoir.parse(SMALL))


@pytest.mark.parametrize(
    "shape", [(1, 3, 4, 4), (2, 4, 4), (1, 2, 5, 4), (1,), (1, 2, 4, 4, 1)], ids=str
)
def test_a_wrong_shape_to_the_onnxruntime_backend_is_one_error(hw, shape) -> None:  # noqa: ANN001
    """The NumPy executor refuses a wrong shape with an ExecutionError; onnxruntime raised its
    own InvalidArgument ('Got invalid dimensions for input: x'), a traceback. Now the backend
    names the input and the expected shape (the batch dynamic), like the NumPy executor.

    Mutant seen to fail it (private copy): the shape check in session.run_model removed
    (onnxruntime's InvalidArgument escapes)."""
    x = np.zeros(shape)
    with pytest.raises(nanoir.Error, match=r"has shape"):
        nanoir.run(hw, x)
    with pytest.raises(nanoir.Error, match=r"input 0 \(x\) has shape .*expected \?x2x4x4"):
        nanoir.run(hw, x, backend="onnxruntime")


def test_odd_but_valid_inputs_equal_the_numpy_executor(hw) -> None:  # noqa: ANN001
    """Batch 0, +-inf (saturates), a non-contiguous view and a batch the export never saw: the
    onnxruntime backend gives NumPy's codes (an independent oracle: a NumPy reference of
    relu(conv) onto the output grid, written here)."""
    rng = np.random.default_rng(0)
    xs = [
        np.zeros((0, 2, 4, 4)),
        np.full((1, 2, 4, 4), np.inf) * np.array([1, -1]).reshape(1, 2, 1, 1),
        (rng.normal(size=(4, 4, 2, 3)) * 4).transpose(3, 2, 0, 1),
        rng.normal(size=(7, 2, 4, 4)) * 4,
    ]
    w = np.array([[0.5, -1.0], [0.25, 0.75], [-0.5, 1.0]])
    for x in xs:
        (got,) = nanoir.run(hw, x, backend="onnxruntime", raw=True)
        xq = np.clip(np.trunc(np.clip(x, -1e6, 1e6) * 16), -128, 127)
        acc = np.maximum(np.einsum("nchw,oc->nohw", xq / 16, w), 0)
        e = np.array([3, 4, 5]).reshape(3, 1, 1)
        want = np.clip(np.floor(acc * 2.0**e + 0.5), 0, 255)
        assert got.shape == want.shape and np.array_equal(got, want)


def test_a_splat_edited_into_the_program_is_refused_before_it_is_written(
    hw, tmp_path: Path
) -> None:  # noqa: ANN001
    """The program text in the metadata edited: an unused constant, a splat of 10**7 codes
    (a 100-byte edit), added. The reader wrote the whole program again (~2 s, ~400 MB; 10**8
    codes: 40 s and 3.2 GB) before finding that the graphs differ. Now the constant count is
    checked against what a file of this size can hold, before writing: one error, quickly.

    Mutant seen to fail it (private copy): the _check_constant_size call removed (the error
    is then 'its graph is not the one ...', reached after the write)."""
    model = export_model(hw)
    text = str(hw)
    big = (
        '%big = nh.constant "b" dense<1> : tensor<10000000xi8> '
        "-> tensor<10000000xi8, #nh.fixed<0, C>>"
    )
    edited = text.replace("    %w = nh.constant", f"    {big}\n    %w = nh.constant", 1)
    assert edited != text
    for p in model.metadata_props:
        if p.key == PROGRAM_KEY:
            p.value = edited
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(nanoir.Error, match=r"10000006 constant codes, more than a file of"):
        nanoir.load(path)
