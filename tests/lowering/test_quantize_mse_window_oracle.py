"""The ``mse`` calibrator's candidate window at every width, against the rule written here
(issue 31, section 5). test_quantize_mse_choice.py sees the window's ``b + 1`` steps through
quantize's choice at 2 and 4 bits; from 7 bits the window is capped at 8 steps, and no data of
a test's size can show that cap through the choice (a candidate 8 or 9 steps finer than the
absmax rule's wins only over about 2**30 values), so the candidates are checked themselves.

The rule (``lowering/quantize/calibration.py``): for ``b > 1`` bits, ``k0 = floor(log2(
2**(b-1) / absmax))`` (unsigned: ``2**b``), then ``k0 + 1 .. k0 + min(b + 1, 8)``, then
``k0 - 1``; for 1 bit (codes ``sign * 2**k``), ``k0 = floor(log2(mean |x|))``, then ``k0 + 1``
(the two powers of two around the mean), ``k0 - 1``, ``k0 + 2``. Each row in that order, the
preferred first (a tie keeps the earlier).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from nanoir.lowering.quantize import mse_candidates

ABSMAX = [0.3, 1.7, 37.0, 1e-3, 5000.0]


def floor_log2(v: float) -> int:
    """``floor(log2(v))`` exactly (``frexp``: no float log rounding up just below 2**k)."""
    _, e = math.frexp(v)
    return e - 1


WIDTHS = [(b, s) for b in range(1, 17) for s in (True, False) if b > 1 or s]
"""Every width, signed and unsigned (1-bit codes are signed only)."""


@pytest.mark.parametrize(("bits", "signed"), WIDTHS)
def test_candidates_are_the_window_of_the_rule(bits: int, signed: bool):
    """Every width 1..16, signed and unsigned codes, five channels of different ranges.

    kills: the window capped at 7 steps (``min(b + 1, 7)``: 7-bit and wider lose
    ``k0 + 8``) or at 9 (``min(b + 1, 9)``: 8-bit and wider gain ``k0 + 9``), which the
    choice tests cannot see; one step shorter or longer at any width; ``k0 - 1`` dropped."""
    absmax = np.array(ABSMAX)
    mean_abs = absmax / 3
    got = mse_candidates(absmax, mean_abs, bits, signed=signed)
    for c, (top, mean) in enumerate(zip(ABSMAX, mean_abs)):
        if bits == 1:
            k0 = floor_log2(float(mean))
            want = [k0, k0 + 1, k0 - 1, k0 + 2]
        else:
            k0 = floor_log2(2 ** (bits - 1 if signed else bits) / top)
            want = [k0 + d for d in range(min(bits + 1, 8) + 1)] + [k0 - 1]
        assert got[:, c].tolist() == want, (bits, signed, top)
