"""The Magik manual's ``Unpool2D`` modes besides nearest, as NumPy kernels shared by the nf and
nh levels (pure functions, no xDSL).

- ``zero``: each value at one position (``offsets``) of its ``r x r`` output window, zeros
  elsewhere (what a one-hot depthwise transposed conv computes, moved instead of multiplied).
- ``bilinear`` x2 with ``align_corners=False`` (torch's ``F.interpolate``): along each scaled
  dim, output ``2i`` is ``(x[i-1] + 3 x[i]) / 4`` and ``2i + 1`` is ``(3 x[i] + x[i+1]) / 4``,
  the edge row repeated past the ends. :func:`bilinear_sum` computes the numerator with the
  integer weights 1 and 3 (so ``4**n`` times the value, ``n`` scaled dims): exact on codes
  (int64) and on quantized values (float64, dyadic), one rounding at the output's requant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bilinear_sum", "bilinear", "upsample_zero"]


def upsample_zero(x: Any, sizes: Sequence[int], offsets: Sequence[int]) -> Any:
    """``x`` spread onto the spatial ``sizes`` (integer multiples ``r`` of its own), each
    value at ``offsets`` inside its ``r``-window, zeros elsewhere.

    >>> upsample_zero(np.array([[[1, 2]]]), [4], [0]).tolist()
    [[[1, 0, 2, 0]]]
    """
    x = np.asarray(x)
    y = np.zeros((*x.shape[:2], *sizes), dtype=x.dtype)
    picks = tuple(
        slice(o, o + (s // n) * n, s // n) for s, n, o in zip(sizes, x.shape[2:], offsets)
    )
    y[(slice(None), slice(None), *picks)] = x
    return y


def _along(x: Any, axis: int, begin: int, end: int) -> Any:
    """``x`` along ``axis`` with ``begin`` / ``end`` copies of its edge rows (a streamed
    window's rows past the ends of the dim), weighted 1, 3 / 3, 1 into two output rows per
    three-row window."""
    if begin or end:
        pads = [(0, 0)] * x.ndim
        pads[axis] = (begin, end)
        x = np.pad(x, pads, mode="edge")
    n = x.shape[axis] - 2
    lo, mid, hi = (np.take(x, range(i, i + n), axis=axis) for i in range(3))
    even, odd = lo + 3 * mid, 3 * mid + hi
    stacked = np.stack([even, odd], axis=axis + 1)
    shape = list(x.shape)
    shape[axis] = 2 * n
    return stacked.reshape(shape)


def bilinear_sum(x: Any, scaled: Sequence[bool], pads: Sequence[int] | None = None) -> Any:
    """``4**n`` times the x2 bilinear upsampling of ``x`` along the spatial dims marked in
    ``scaled`` (``n`` of them), in ``x``'s dtype: integer weights only. ``pads`` (begin
    values of the spatial dims, then end values; default 1 each) are the edge rows the
    window is missing: a whole dim has one at each end.

    >>> bilinear_sum(np.array([[[1, 5]]]), [True]).tolist()
    [[[4, 8, 16, 20]]]
    """
    y = np.asarray(x)
    n = y.ndim - 2
    pads = list(pads) if pads is not None else [1] * (2 * n)
    for i, on in enumerate(scaled):
        if on:
            y = _along(y, 2 + i, pads[i], pads[n + i])
    return y


def bilinear(x: Any, scaled: Sequence[bool], pads: Sequence[int] | None = None) -> Any:
    """The float x2 bilinear upsampling (``align_corners=False``): :func:`bilinear_sum`
    divided by ``4**n`` (exact in binary floating point).

    >>> bilinear(np.array([[[1.0, 5.0]]]), [True]).tolist()
    [[[1.0, 2.0, 4.0, 5.0]]]
    """
    return bilinear_sum(x, scaled, pads) / float(4 ** sum(bool(s) for s in scaled))
