"""Max pooling's indices and max unpooling (torch's ``MaxPool2d(return_indices=True)`` and
``MaxUnpool2d``), as NumPy kernels shared by the nf and nh levels (pure functions, no xDSL).

An index is the flat position ``h * W + w`` of a window's maximum in its ``[H, W]`` plane (per
batch and channel, as torch counts: absolute positions in the whole plane, so a window of
rows cannot be told where its rows sit; these ops take the whole extent along the spatial
dims when streamed). Ties go to the first maximum in the window's row-major order, as torch's
CPU kernel picks. Indices are integers below ``2**24``: exact in float32 and float64. They are
not values of the input: integer codes (nh) get int64 indices, whatever the codes' width (an
int8 plane of more than 128 elements has indices int8 cannot hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["max_pool_indices", "max_unpool"]


def max_pool_indices(x: Any, kernel: Sequence[int], strides: Sequence[int]) -> Any:
    """The flat in-plane index of each window's maximum (no padding, no dilation): in ``x``'s
    dtype for floats, int64 for integer codes.

    >>> max_pool_indices(np.array([[[[1, 5, 2, 2], [0, 3, 9, 2]]]]), [2, 2], [2, 2]).tolist()
    [[[[1, 6]]]]
    """
    x = np.asarray(x)
    kh, kw = kernel
    sh, sw = strides
    windows = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    arg = windows.reshape(*windows.shape[:4], kh * kw).argmax(axis=-1)
    rows = np.arange(windows.shape[2])[:, None] * sh + arg // kw
    cols = np.arange(windows.shape[3])[None, :] * sw + arg % kw
    flat = rows * x.shape[3] + cols  # int64
    return flat.astype(x.dtype) if np.issubdtype(x.dtype, np.floating) else flat


def max_unpool(x: Any, indices: Any, size: Sequence[int]) -> Any:
    """``x``'s values at their ``indices`` in planes of ``size`` (``[H, W]``), zeros
    elsewhere; a later value wins where two indices are equal. IndexError for an index
    outside the plane.

    >>> max_unpool(np.array([[[[7, 8]]]]), np.array([[[[1, 6]]]]), [2, 4]).tolist()
    [[[[0, 7, 0, 0], [0, 0, 8, 0]]]]
    """
    x = np.asarray(x)
    n, c = x.shape[:2]
    plane = int(np.prod(size))
    per_plane = int(np.prod(x.shape[2:]))  # not -1: a batch of 0 leaves it undetermined
    flat = np.asarray(indices).reshape(n, c, per_plane)
    if flat.size and (flat.min() < 0 or flat.max() >= plane):
        bad = flat[(flat < 0) | (flat >= plane)].reshape(-1)[0]
        raise IndexError(f"max_unpool: index {int(bad)} is outside the {plane}-element plane")
    y = np.zeros((n, c, plane), dtype=x.dtype)
    np.put_along_axis(y, flat.astype(np.int64), x.reshape(n, c, per_plane), axis=2)
    return y.reshape(n, c, *size)
