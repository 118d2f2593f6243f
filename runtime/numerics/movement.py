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

__all__ = [
    "expand",
    "expand_grown",
    "expand_shape",
    "expand_shape_operand",
    "expand_sizes",
    "gather",
    "gather_shape",
]


def expand_shape(
    input_shape: Sequence[int], result_shape: Sequence[int], like_rank: int | None = None
) -> tuple[int, ...]:
    """The result of broadcasting ``input_shape`` to ``result_shape`` (torch's ``expand``,
    ONNX's ``Expand``): the input is right-aligned; each of its dims equals the result's or is
    1; new leading dims are static. With a shape source of rank ``like_rank``, a dim grown
    from 1 (or new) may be dynamic: its size is the source's same dim at run time
    (:func:`expand_sizes`), so it must be one of the source's dims."""
    x, y = tuple(input_shape), tuple(result_shape)
    if len(y) < len(x):
        raise ShapeError(f"expand cannot lower the rank: {shape_str(x)} -> {shape_str(y)}")
    lead = len(y) - len(x)
    grown = expand_grown(x, y)
    if like_rank is None and grown:
        raise ShapeError(
            f"expand: {shape_str(x)} -> {shape_str(y)} grows dim {grown[0]} to a dynamic size, "
            "which needs a shape source (like)"
        )
    if like_rank is not None and not grown:
        raise ShapeError(
            f"expand: {shape_str(x)} -> {shape_str(y)} has a shape source but no dynamic dim "
            "grown from 1 to read from it"
        )
    if like_rank is not None and grown[-1] >= like_rank:
        raise ShapeError(
            f"expand: dim {grown[-1]} of {shape_str(y)} is read from the shape source, which has "
            f"rank {like_rank}"
        )
    if any(d < 0 and d != DYNAMIC_INDEX for d in y[:lead]):
        raise ShapeError(f"expand: new leading dims of {shape_str(y)} must be sizes")
    for i, d in enumerate(x):
        t = y[lead + i]
        if d == t or d == 1 and (t >= 0 or t == DYNAMIC_INDEX):
            continue
        raise ShapeError(f"expand: {shape_str(x)} does not broadcast to {shape_str(y)}")
    return y


def expand_grown(input_shape: Sequence[int], result_shape: Sequence[int]) -> tuple[int, ...]:
    """The result dims that are dynamic but not the input's own dynamic dim: new, or grown
    from 1 to a size known at run time (the class token's ``expand(B, -1, -1)``). Their size
    comes from the expand's shape source.

    >>> expand_grown((1, 1, 8), (DYNAMIC_INDEX, 1, 8)), expand_grown((DYNAMIC_INDEX, 4), (DYNAMIC_INDEX, 4))
    ((0,), ())
    """
    lead = len(result_shape) - len(input_shape)
    return tuple(
        i
        for i, d in enumerate(result_shape)
        if d == DYNAMIC_INDEX and (i < lead or input_shape[i - lead] != DYNAMIC_INDEX)
    )


def expand_sizes(
    input_shape: Sequence[int], result_shape: Sequence[int], like_shape: Sequence[int]
) -> tuple[int, ...]:
    """``result_shape`` with each grown dynamic dim (:func:`expand_grown`) set to the shape
    source's size there (``like_shape``, the source's run-time shape); other dynamic dims stay
    dynamic (they keep the input's size).

    >>> expand_sizes((1, 1, 8), (DYNAMIC_INDEX, 1, 8), (3, 2, 5, 5))
    (3, 1, 8)
    """
    sizes = list(result_shape)
    for i in expand_grown(input_shape, result_shape):
        sizes[i] = like_shape[i]
    return tuple(sizes)


def expand_shape_operand(input_shape: Sequence[int], result_shape: Sequence[int]) -> list[int]:
    """ONNX Expand's ``shape`` input for this expand: 1 where the input's dim is kept (so a
    dynamic batch needs no number), the result's size where it grows or is new (``-1`` where
    that size is dynamic: read from the shape source)."""
    lead = len(result_shape) - len(input_shape)
    return [
        (-1 if t == DYNAMIC_INDEX else int(t)) if i < lead or input_shape[i - lead] != t else 1
        for i, t in enumerate(result_shape)
    ]


def expand(x: Any, result_shape: Sequence[int]) -> Any:
    """``x`` broadcast to ``result_shape`` (a dynamic dim keeps ``x``'s size; a grown one is
    first set by :func:`expand_sizes`), as a copy."""
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
