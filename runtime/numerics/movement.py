"""Shape rules and NumPy kernels of ``expand`` and ``gather``, shared by nf and nh.

Both only move values, so the nf kernel (floats) and the nh kernel (codes) are the same
function, and per-channel exponents move by it too (``gather`` along the channel axis takes
the exponents of the channels it picks).

>>> expand_shape((DYNAMIC_INDEX, 3, 1), (DYNAMIC_INDEX, 3, 5)) == (DYNAMIC_INDEX, 3, 5)
True
>>> gather_shape((2, 4, 3), 1, 5)
(2, 5, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX, ShapeError, shape_str

__all__ = ["expand", "expand_shape", "expand_shape_operand", "gather", "gather_shape"]


def expand_shape(input_shape: Sequence[int], result_shape: Sequence[int]) -> tuple[int, ...]:
    """The result of broadcasting ``input_shape`` to ``result_shape`` (torch's ``expand``,
    ONNX's ``Expand``): the input is right-aligned; each of its dims equals the result's or is
    1; new leading dims are static."""
    x, y = tuple(input_shape), tuple(result_shape)
    if len(y) < len(x):
        raise ShapeError(f"expand cannot lower the rank: {shape_str(x)} -> {shape_str(y)}")
    lead = len(y) - len(x)
    if any(d == DYNAMIC_INDEX or d < 0 for d in y[:lead]):
        raise ShapeError(f"expand: new leading dims of {shape_str(y)} must be static")
    for i, d in enumerate(x):
        t = y[lead + i]
        if d == t or d == 1 and t != DYNAMIC_INDEX and t >= 0:
            continue
        raise ShapeError(f"expand: {shape_str(x)} does not broadcast to {shape_str(y)}")
    return y


def expand_shape_operand(input_shape: Sequence[int], result_shape: Sequence[int]) -> list[int]:
    """ONNX Expand's ``shape`` input for this expand: 1 where the input's dim is kept (so a
    dynamic batch needs no number), the result's size where it grows or is new."""
    lead = len(result_shape) - len(input_shape)
    return [
        int(t) if i < lead or input_shape[i - lead] != t else 1 for i, t in enumerate(result_shape)
    ]


def expand(x: Any, result_shape: Sequence[int]) -> Any:
    """``x`` broadcast to ``result_shape`` (a dynamic dim keeps ``x``'s size), as a copy."""
    lead = len(result_shape) - x.ndim
    target = [
        x.shape[i - lead] if d == DYNAMIC_INDEX or d < 0 else d for i, d in enumerate(result_shape)
    ]
    return np.array(np.broadcast_to(x, target))


def gather_shape(input_shape: Sequence[int], axis: int, count: int) -> tuple[int, ...]:
    """``input_shape`` with dim ``axis`` replaced by the number of indices."""
    x = list(input_shape)
    if not -len(x) <= axis < len(x):
        raise ShapeError(f"gather: axis {axis} is out of range for {shape_str(x)}")
    x[axis % len(x)] = count
    return tuple(x)


def check_indices(input_shape: Sequence[int], axis: int, indices: Sequence[int]) -> None:
    """Every index must be in ``[0, size)`` of a static dim (negative ones are normalized by
    whoever builds the op)."""
    size = input_shape[axis % len(input_shape)]
    if size == DYNAMIC_INDEX:
        raise ShapeError(f"gather along the dynamic dim {axis} of {shape_str(input_shape)}")
    bad = [i for i in indices if not 0 <= i < size]
    if bad:
        raise ShapeError(f"gather: indices {bad} are out of range for size {size} of dim {axis}")


def gather(x: Any, axis: int, indices: Sequence[int]) -> Any:
    """The slices ``indices`` of ``x`` along ``axis``, in that order (ONNX ``Gather`` with
    1-D indices; torch's ``x[:, idx]``)."""
    return np.take(x, np.asarray(indices, dtype=np.intp), axis=axis)
