"""Hostile programs (round 7): an unpooling by indices the program is given."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects import nq

import nanoir

_UNPOOL = """
func.func @main(%x: tensor<?x1x8x8xf32>, %i: tensor<?x1x8x8xf32>) -> tensor<?x1x32x32xf32> {
  %y = nf.max_unpool %x, %i : (tensor<?x1x8x8xf32>, tensor<?x1x8x8xf32>)
      -> tensor<?x1x32x32xf32>
  func.return %y : tensor<?x1x32x32xf32>
}"""


def test_unpooling_indices_given_to_the_program_get_no_fake_quant() -> None:
    """torch's ``F.max_unpool2d(x, indices)`` with the indices a program input: quantize gave
    them an 8-bit activation fake-quant (exp -3 for positions up to 1023: steps of 8), so the
    values landed on other positions, colliding (53 of 64 kept, a silently wrong result).
    Now the indices, like an embedding's, get none: nq scatters at the given positions (the
    oracle: NumPy's scatter of x, whose values are on the grid, written here); lower-to-hw
    still refuses such an unpool, naming it.

    Mutant seen to fail it (private copy): _unpool_indices returning False."""
    rng = np.random.default_rng(0)
    x = rng.integers(-60, 60, (2, 1, 8, 8)) / 16  # on a 4-fractional-bit grid, |x| < 4
    x[x == 0] = 1 / 16
    i = np.stack([rng.permutation(1024)[:64] for _ in range(2)]).reshape(2, 1, 8, 8)
    module = nanoir.parse(_UNPOOL)
    nanoir.quantize(module, [(x, i.astype(np.float64))], bias_correction=False)
    quantized = [op.input for op in module.walk() if isinstance(op, nq.FakeQuantOp)]
    assert [v.name_hint for v in quantized] == ["x"]
    want = np.zeros((2, 1, 1024))
    np.put_along_axis(want, i.reshape(2, 1, 64), x.reshape(2, 1, 64), axis=2)
    (got,) = nanoir.run(module, x, i.astype(np.float64))
    assert np.array_equal(got.reshape(2, 1, 1024), want)
    with pytest.raises(nanoir.Error, match=r"lower-to-hw: 'nf.max_unpool' \(%y\)"):
        nanoir.lower_to_hw(module)
