"""Hostile use of the Streamer with integer (nh) programs (round 6): every array it returns for
an output, with rows or without, has one dtype that holds that output's codes."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.runtime.streamer import Streamer

import nanoir

SMALL = """\
func.func @main(%x: tensor<?x2x4x4xf32>) -> tensor<?x3x4x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x4x4xf32>
  %w = nf.constant "w" dense<[[[[0.5]], [[-1.0]]], [[[0.25]], [[0.75]]], [[[-0.5]], [[1.0]]]]>
      : tensor<3x2x1x1xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<3x2x1x1xf32>
  %y = nf.conv %xq, %wq : (tensor<?x2x4x4xf32>, tensor<3x2x1x1xf32>) -> tensor<?x3x4x4xf32>
  %r = nf.relu %y : tensor<?x3x4x4xf32>
  %yq = nq.fake_quant %r {bits = BITS : i64, exp = dense<[[[3]], [[4]], [[5]]]> : tensor<3x1x1xi8>,
      rounding = #nq.rounding<half_up>, signed = false} : tensor<?x3x4x4xf32>
  func.return %yq : tensor<?x3x4x4xf32>
}
"""


@pytest.mark.parametrize("bits", [4, 8, 12])
def test_raw_rows_of_an_unsigned_output_have_one_dtype_that_holds_them(bits: int) -> None:
    """An unsigned 8-bit output's codes (0..255) came out of push() as int16, but a push
    without rows and flush() gave int8 arrays (which cannot hold 255; 12 bits: int16 against
    int32). Now every array has the same dtype, one that holds 0..2**bits - 1, and the rows
    are a NumPy reference's (relu(conv) of the input codes, half_up onto 2**-[3, 4, 5]).

    Mutant seen to fail it (private copy): _result_dtype back to int{max(8, width)}."""
    hw = nanoir.lower_to_hw(nanoir.parse(SMALL.replace("BITS", str(bits))))
    codes = np.random.default_rng(bits).integers(-128, 128, (2, 2, 4, 4)).astype(np.int8)
    s = Streamer(hw, 2, raw=True)
    got = [s.push(codes[:, :, :0])[0]]
    got += [s.push(codes[:, :, t : t + 1])[0] for t in range(4)]
    got.append(s.flush()[0])
    dtypes = {a.dtype for a in got}
    assert len(dtypes) == 1
    assert np.iinfo(dtypes.pop()).max >= 2**bits - 1
    w = np.array([[0.5, -1.0], [0.25, 0.75], [-0.5, 1.0]])
    acc = np.maximum(np.einsum("nchw,oc->nohw", codes / 16, w), 0)
    e = np.array([3, 4, 5]).reshape(3, 1, 1)
    want = np.clip(np.floor(acc * 2.0**e + 0.5), 0, 2**bits - 1)
    assert np.array_equal(np.concatenate(got, 2), want)
