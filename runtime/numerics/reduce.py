"""Reductions over dims (``nf.reduce``/``nh.reduce``: sum, max, min, prod; ``nf.arg_reduce``/
``nh.arg_reduce``: argmax, argmin, any, all) and the prefix sum (``nf.cumsum``/``nh.cumsum``):
one kernel each for values and codes alike (pure NumPy).

Every reduction keeps the reduced dims with size 1 (torch's ``keepdim=True``; the frontend
reshapes after it otherwise), so a value keeps its rank and its layout at the hw level.

On codes at one exponent, sum, max, min and the arg-reductions are exact integer operations
with the same result as on the values: a sum of ``n`` codes of ``b`` signed bits needs
``b + ceil(log2 n)`` bits (:func:`sum_bits`, the accumulator bound lower-to-hw checks
against i32), a prefix sum the same; max and min pick a code. At nq the sums are float64
sums of dyadic values, exact while below ``2**53`` (so within the i32 bound).

>>> reduce(np.array([[1, -2], [3, 4]]), "sum", (1,)).tolist()
[[-1], [7]]
>>> arg_reduce(np.array([[1, 5, 5], [9, 0, 9]]), "argmax", 1).tolist()  # the first maximum
[[1], [0]]
>>> cumsum(np.array([[1, 2, 3]]), 1).tolist()
[[1, 3, 6]]
>>> sum_bits(8, 49)
14
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "ARG_KINDS",
    "KINDS",
    "arg_reduce",
    "cumsum",
    "reduce",
    "reduced_shape",
    "sum_bits",
]

KINDS = ("sum", "max", "min", "prod")
"""``nf.reduce``'s kinds (``nh.reduce`` has every one but ``prod``, whose codes grow by ``b``
bits per element)."""

ARG_KINDS = ("argmax", "argmin", "any", "all")
"""``nf.arg_reduce``'s kinds: the index of the first max / min along one dim, or whether any /
all elements along it are non-zero: integers (0/1 for any and all)."""


def reduced_shape(shape: Sequence[int], dims: Sequence[int]) -> tuple[int, ...]:
    """``shape`` with each of ``dims`` set to 1."""
    return tuple(1 if i in dims else d for i, d in enumerate(shape))


def reduce(x: np.ndarray, kind: str, dims: Sequence[int]) -> np.ndarray:
    """The reduction ``kind`` over ``dims`` (kept, size 1), in ``x``'s dtype: float sums in
    float64 first (one rounding), integer codes in int64."""
    x = np.asarray(x)
    axes = tuple(dims)
    wide = np.float64 if x.dtype.kind == "f" else np.int64
    if kind == "sum":
        y = np.sum(x, axis=axes, keepdims=True, dtype=wide)
    elif kind == "prod":
        y = np.prod(x, axis=axes, keepdims=True, dtype=wide)
    elif kind == "max":
        y = np.max(x, axis=axes, keepdims=True)
    elif kind == "min":
        y = np.min(x, axis=axes, keepdims=True)
    else:
        raise ValueError(f"reduce: kind {kind!r} is not one of {', '.join(KINDS)}")
    return y.astype(x.dtype if x.dtype.kind == "f" else np.int64, copy=False)


def arg_reduce(x: np.ndarray, kind: str, dim: int) -> np.ndarray:
    """Index of the first max (min) along ``dim``, or any / all non-zero along it; ``dim``
    kept (size 1). Integers (int64)."""
    x = np.asarray(x)
    if kind == "argmax":
        y = np.argmax(x, axis=dim)
    elif kind == "argmin":
        y = np.argmin(x, axis=dim)
    elif kind == "any":
        y = (x != 0).any(axis=dim)
    elif kind == "all":
        y = (x != 0).all(axis=dim)
    else:
        raise ValueError(f"arg_reduce: kind {kind!r} is not one of {', '.join(ARG_KINDS)}")
    return np.expand_dims(y.astype(np.int64), dim)


def cumsum(x: np.ndarray, axis: int) -> np.ndarray:
    """The prefix sums along ``axis`` in ``x``'s dtype (float: float64 inside)."""
    x = np.asarray(x)
    wide = np.float64 if x.dtype.kind == "f" else np.int64
    return np.cumsum(x, axis=axis, dtype=wide).astype(
        x.dtype if x.dtype.kind == "f" else np.int64, copy=False
    )


def sum_bits(bits: int, n: int) -> int:
    """Signed bits a sum of ``n`` codes of ``bits`` signed bits needs: ``bits + ceil(log2 n)``."""
    return bits + max(n - 1, 0).bit_length()
