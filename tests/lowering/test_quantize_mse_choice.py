"""The ``mse`` calibrator's choice (issue 31, section 5: its tie rule and candidate window
survived every test) against the rule written out here, on data built to sit on its edges.

The rule, for ``b > 1`` bits (``lowering/quantize/calibration.py``'s docstring): the candidates
are the absmax rule's ``k0 = floor(log2(2**(b-1) / max|x|))``, then ``k0 + 1`` ..
``k0 + min(b + 1, 8)`` (finer grids: resolution for saturation), then ``k0 - 1`` (a coarser grid:
a positive maximum that saturates at ``2**(b-1) - 1``); the one with the least summed squared
error of ``fake_quant(x)`` wins, the earliest in that order on a tie. The squared error is
computed here with the trunc rounding written out (``clip(trunc(x 2**k)) 2**-k``).

Both paths are checked: an activation (a program input, calibrated over batches) and a weight
(its values), each through ``nanoir.quantize``.
"""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects.dense import dense_to_numpy
from nanoir.lowering.quantize import quantize

import nanoir


def sse(v: np.ndarray, bits: int, k: int) -> float:
    top = 2 ** (bits - 1)
    q = np.clip(np.trunc(v * 2.0**k), -top, top - 1) * 2.0**-k
    return float(np.sum((q - v) ** 2))


def candidates(v: np.ndarray, bits: int) -> list[int]:
    k0 = int(np.floor(np.log2(2 ** (bits - 1) / np.abs(v).max())))
    return [k0 + d for d in range(min(bits + 1, 8) + 1)] + [k0 - 1]


def choice(v: np.ndarray, bits: int) -> int:
    """The least error, the earliest candidate on a tie."""
    best, best_err = None, None
    for k in candidates(v, bits):
        err = sse(v, bits, k)
        if best_err is None or err < best_err:
            best, best_err = k, err
    assert best is not None
    return best


def chosen(v: np.ndarray, bits: int) -> tuple[int, int]:
    """What quantize chose for ``v`` as an activation (the input of a linear layer, over two
    batches) and as a weight (per tensor), in that order."""
    n = v.size
    w = v.reshape(1, n)
    text = f"""func.func @main(%x: tensor<?x{n}xf32>) -> tensor<?x1xf32> {{
  %w = nf.constant "fc.weight" dense<{np.array2string(w, separator=", ", threshold=10**7, floatmode="unique").replace(chr(10), "")}> : tensor<1x{n}xf32>
  %l = nf.linear %x, %w : (tensor<?x{n}xf32>, tensor<1x{n}xf32>) -> tensor<?x1xf32>
  func.return %l : tensor<?x1xf32>
}}"""
    module = nanoir.parse(text)
    half = np.zeros((2, n), np.float64)
    half[0, : n // 2], half[1, n // 2 :] = v[: n // 2], v[n // 2 :]  # zeros add no error
    batches = [half[:1].astype(np.float32), half[1:].astype(np.float32)]
    quantize(
        module,
        batches,
        act_bits=bits,
        weight_bits=bits,
        weight_per_channel=False,
        calibrator="mse",
        bias_correction=False,
    )
    exps = {
        op.input.name_hint: int(np.asarray(dense_to_numpy(op.exp)).reshape(-1)[0])
        for op in module.walk()
        if op.name == "nq.fake_quant"
    }
    return exps["x"], exps["w"]


def test_a_tie_keeps_the_absmax_exponent():
    """Every value on the grid of both ``k0`` and ``k0 - 1`` and none saturating at ``k0``
    (the maximum is -0.5, the code -128 at 2**-8): zero error at both, and ``k0`` = 8 comes
    first.

    kills: a tie going to the later candidate (``err <= best_err``: ``k0 - 1``)."""
    v = np.array([-0.5, 0.25, -0.125, 0.0078125 * 3, 0.375, -0.0078125 * 5], np.float32)
    assert sse(v, 8, 8) == sse(v, 8, 7) == 0.0
    assert choice(v, 8) == 8
    assert chosen(v, 8) == (8, 8)


def test_a_saturating_positive_maximum_takes_the_coarser_step():
    """A positive maximum 0.5 saturates at ``k0`` = 8 (127/256) and every value is on the
    2**-7 grid: ``k0 - 1`` has no error and wins.

    kills: the candidate window without ``k0 - 1``."""
    v = np.array([0.5, 0.25, -0.125, 0.0078125 * 3, 0.375, -0.0078125 * 5], np.float32)
    assert sse(v, 8, 7) == 0.0 < sse(v, 8, 8)
    assert choice(v, 8) == 7
    assert chosen(v, 8) == (7, 7)


@pytest.mark.parametrize("bits", [2, 4])
def test_the_window_ends_at_k0_plus_min_b_plus_1_and_8(bits: int):
    """One outlier of 1 and 20000 small values on the grid one step past the window: there
    the error is least (the small values' resolution outweighs the outlier's saturation), so
    the window's last candidate, ``k0 + b + 1``, wins over every other candidate. (From 7 bits
    the window is capped at 8 steps, where no such data is small: the outlier's saturation
    would need millions of values to outweigh.)

    kills: the window one candidate shorter (``min(b, 8)`` steps) or one longer
    (``min(b + 2, 8)``)."""
    k0 = bits - 1  # absmax 1
    end = k0 + min(bits + 1, 8)
    rng = np.random.default_rng(bits)
    top = 2 ** (bits - 1)
    small = rng.integers(-top, top, 20000) * 2.0 ** -(end + 1)  # codes of the grid past it
    v = np.concatenate([[1.0], small]).astype(np.float32).astype(np.float64)
    errs = {k: sse(v, bits, k) for k in [*candidates(v, bits), end + 1]}
    assert min(errs, key=errs.get) == end + 1  # the premise: past the window is best
    assert choice(v, bits) == end
    assert chosen(v.astype(np.float32), bits) == (end, end)
