"""x2 bicubic upsampling as a fixed kernel (torch's ``F.interpolate(mode="bicubic",
align_corners=False)``), shared by the nf and nh levels (pure NumPy).

torch's bicubic is Keys' cubic convolution with ``A = -0.75``, reading its input with the
index clamped to the edges. Doubling a dim, output ``2i`` sits at source position ``i - 1/4``
and ``2i + 1`` at ``i + 1/4``, so every output row weighs four input rows with the cubic's
values at fractions ``3/4`` and ``1/4``, which are dyadic:

    out[2i]     = (-9 x[i-2] + 67 x[i-1] + 225 x[i]   - 27 x[i+1]) / 256
    out[2i + 1] = (-27 x[i-1] + 225 x[i] + 67 x[i+1]   - 9 x[i+2]) / 256

(each set sums to 256). :func:`bicubic_sum` computes the numerators with these integer
weights (``256**n`` times the value over ``n`` doubled dims): exact on codes (int64) and on
quantized values (float64, dyadic); the one rounding is the output's requant, as for
bilinear. The magnitudes sum to 328 < 2**9, so each doubled dim adds 9 bits to the codes
(:data:`GROWTH_BITS`) and 8 to the exponent (:data:`EXP_STEP`).
A window of five rows (two edge copies past each end: ``pads``) gives two output rows.

>>> bicubic_sum(np.array([[[0, 256]]]), [True]).tolist()  # a step: the cubic overshoots
[[[-6912, 14848, 50688, 72448]]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["EVEN", "EXP_STEP", "GROWTH_BITS", "ODD", "bicubic", "bicubic_sum"]

EVEN = (-9, 67, 225, -27, 0)
"""Weights of rows ``i-2 .. i+2`` for output ``2i`` (times 256)."""
ODD = (0, -27, 225, 67, -9)
"""Weights of rows ``i-2 .. i+2`` for output ``2i + 1`` (times 256)."""
EXP_STEP = 8
"""Exponent gained per doubled dim (the weights are 256ths)."""
GROWTH_BITS = 9
"""Bits gained per doubled dim: ``sum |w| = 328 <= 2**9``."""


def _along(x: Any, axis: int, begin: int, end: int) -> Any:
    """Two output rows per five-row window along ``axis`` (``begin``/``end`` edge copies
    added first: the rows past the ends that the window is missing)."""
    if begin or end:
        pads = [(0, 0)] * x.ndim
        pads[axis] = (begin, end)
        x = np.pad(x, pads, mode="edge")
    n = x.shape[axis] - 4
    rows = [np.take(x, range(i, i + n), axis=axis) for i in range(5)]
    even = sum(w * r for w, r in zip(EVEN, rows) if w)
    odd = sum(w * r for w, r in zip(ODD, rows) if w)
    stacked = np.stack([even, odd], axis=axis + 1)
    shape = list(x.shape)
    shape[axis] = 2 * n
    return stacked.reshape(shape)


def bicubic_sum(x: Any, scaled: Sequence[bool], pads: Sequence[int] | None = None) -> Any:
    """``256**n`` times the x2 bicubic upsampling of ``x`` along the spatial dims marked in
    ``scaled`` (``n`` of them), in ``x``'s dtype: integer weights only. ``pads`` (begin
    values of the spatial dims, then end values; default 2 each) are the edge rows the
    window is missing."""
    y = np.asarray(x)
    n = y.ndim - 2
    pads = list(pads) if pads is not None else [2] * (2 * n)
    for i, on in enumerate(scaled):
        if on:
            y = _along(y, 2 + i, pads[i], pads[n + i])
    return y


def bicubic(x: Any, scaled: Sequence[bool], pads: Sequence[int] | None = None) -> Any:
    """The float x2 bicubic upsampling: :func:`bicubic_sum` in float64 divided by
    ``256**n`` (exact), in ``x``'s dtype."""
    x = np.asarray(x)
    total = bicubic_sum(x.astype(np.float64), scaled, pads)
    return (total / float(256 ** sum(bool(s) for s in scaled))).astype(x.dtype, copy=False)
