"""The i32 accumulator: its limit and the static bounds of sums of products written into it, and
the magnitudes below which float32 and float64 sums of integer codes are exact.

lower-to-hw sums integer codes into i32 and refuses (unless told to allow overflow) an op whose
worst-case accumulator does not fit; quantize picks exponents so that it fits
(``nanoir.lowering.quantize.join_rules``). Both read the limit and the bounds from here, so
they agree on what fits.

>>> ACC_LIMIT == 2**31 - 1
True
>>> transposed_bound_terms(np.ones((1, 1, 3)), (2,), (1,)).tolist()  # taps 0, 2 | tap 1
[2]
"""

from __future__ import annotations

import numpy as np

__all__ = ["ACC_LIMIT", "F32_EXACT", "F64_EXACT", "MIN_F32_CHUNK", "transposed_bound_terms"]

ACC_LIMIT = 2**31 - 1
"""The largest ``|acc|`` an i32 accumulator holds (symmetric: ``-2**31`` is not used)."""
F32_EXACT = 2**24
"""Every integer of magnitude <= 2**24 is a float32: a float32 sum of integer codes is exact
while every partial sum stays within it (the float kernels of nh and of nq's codes)."""
F64_EXACT = 2**53
"""Every integer of magnitude <= 2**53 is a float64."""
MIN_F32_CHUNK = 128
"""Shortest float32 chunk (products per sum) worth a BLAS call; with shorter ones the float64
kernel is used.

Each chunk costs a BLAS call with a short reduction plus a pass over the output to convert
and accumulate it. Measured on a 64x576 @ 576x3136 product (one thread): 128-term float32
chunks took 0.6x the time of one float64 matmul, 64-term chunks 1.4x.
"""


def transposed_bound_terms(
    codes: np.ndarray, strides: tuple[int, ...], dils: tuple[int, ...]
) -> np.ndarray:
    """``max |sum|`` per output channel of a transposed conv with unit inputs, ``[O/g]``:
    an output row reads only the taps ``t`` with ``t*d`` in one residue class mod ``s`` (per
    dim), so the bound is the largest class sum of ``|w|``, not the sum over all taps.

    ``codes`` are one group's weight codes ``[C/g, O/g, *K]``:

    >>> w = np.array([[[1, -2, 3, 4]]])  # one input, one output channel, 4 taps
    >>> transposed_bound_terms(w, (2,), (1,)).tolist()  # |1| + |3| vs |-2| + |4|
    [6]
    >>> transposed_bound_terms(w, (1,), (1,)).tolist()  # stride 1: every tap
    [10]
    """
    mags = np.abs(codes).astype(np.int64).sum(axis=0)  # [O/g, *K], summed over input channels
    classes: dict[tuple[int, ...], np.ndarray] = {}
    for tap in np.ndindex(*codes.shape[2:]):
        key = tuple((t * d) % s for t, d, s in zip(tap, dils, strides))
        term = mags[(slice(None), *tap)]
        classes[key] = classes[key] + term if key in classes else term.copy()
    if not classes:
        return np.zeros(codes.shape[1], dtype=np.int64)
    return np.max(np.stack(list(classes.values())), axis=0)
