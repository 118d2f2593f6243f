"""Shape vectors with dynamic entries, for the ONNX reader: ``Shape`` of a tensor whose batch is
dynamic (``?x3x48x320``) is a vector whose first entry is not a number but "dim 0 of that
tensor". Exporters move such vectors around before a Reshape reads them (PaddleOCR's
``Reshape(x, Concat(Slice(Shape(x), 0, 2), [-1]))``, torch's ``Gather(Shape(x), 0)``); a
Reshape or Expand that puts the batch back where it was keeps it dynamic (the reader's job).

``SymbolicShape`` holds the entries as a NumPy object array of ints and ``DynamicDim`` s;
``MOVEMENT`` evaluates the ops that only move entries (Identity, Cast to an integer type,
Slice, Gather, Concat, Squeeze, Unsqueeze, Reshape), by hand because ONNX's reference
implementation checks that its results are numeric tensors. Any other op on a dynamic entry
(arithmetic: ``N * heads``) is refused by the reader, naming the dim. Pure NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["MOVEMENT", "DynamicDim", "SymbolicShape", "first_dynamic", "static_or_symbolic"]


@dataclass(frozen=True)
class DynamicDim:
    """Dim ``axis`` of the tensor ``tensor`` (of shape ``dims``, -1 for dynamic dims), whose
    size is known only at run time. (No ``shape`` attribute: NumPy would take it for the
    shape of an array holding this object.)"""

    tensor: str
    axis: int
    dims: tuple[int, ...]

    def describe(self) -> str:
        dims = ", ".join("?" if d < 0 else str(d) for d in self.dims)
        return f"dim {self.axis} of '{self.tensor}' [{dims}]"


@dataclass(frozen=True)
class SymbolicShape:
    """An integer tensor (a shape vector or one of its entries) with dynamic entries."""

    entries: NDArray[Any]
    """An object array of ints and `DynamicDim` s."""
    dtype: np.dtype[Any]
    """The ONNX element type it has (int64, int32)."""


def first_dynamic(value: SymbolicShape) -> DynamicDim:
    """The first dynamic entry (for messages)."""
    return next(e for e in value.entries.reshape(-1) if isinstance(e, DynamicDim))


def static_or_symbolic(entries: NDArray[Any], dtype: np.dtype[Any]) -> NDArray[Any] | SymbolicShape:
    """A plain integer array once no dynamic entry is left, else a `SymbolicShape`."""
    if any(isinstance(e, DynamicDim) for e in entries.reshape(-1)):
        return SymbolicShape(entries, dtype)
    return np.asarray(entries.astype(np.int64), dtype=dtype)


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _axes(args: Sequence[Any], attrs: dict[str, Any], index: int = 1) -> list[int] | None:
    if len(args) > index and args[index] is not None:
        return _ints(args[index])
    axes = attrs.get("axes")
    return None if axes is None else [int(a) for a in axes]


def _slice(args: Sequence[Any], attrs: dict[str, Any]) -> NDArray[Any]:
    data = args[0]
    if len(args) > 2:
        starts, ends = _ints(args[1]), _ints(args[2])
        axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else None
        steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else None
    else:  # opset < 10: attributes
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes, steps = attrs.get("axes"), None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * data.ndim
    for a, b, e, s in zip(axes, starts, ends, steps):
        index[a % data.ndim] = slice(b, e, s)
    return data[tuple(index)]


def _gather(args: Sequence[Any], attrs: dict[str, Any]) -> NDArray[Any]:
    indices = np.asarray(args[1]).astype(np.int64)
    axis = int(attrs.get("axis", 0))
    out = np.take(args[0], indices, axis=axis)
    return np.asarray(out, dtype=object).reshape(np.shape(out))


def _squeeze(args: Sequence[Any], attrs: dict[str, Any]) -> NDArray[Any]:
    axes = _axes(args, attrs)
    data = args[0]
    if axes is None:
        axes = [i for i, d in enumerate(data.shape) if d == 1]
    return data.reshape(
        [d for i, d in enumerate(data.shape) if i not in {a % data.ndim for a in axes}]
    )


def _unsqueeze(args: Sequence[Any], attrs: dict[str, Any]) -> NDArray[Any]:
    axes = _axes(args, attrs) or []
    out = args[0]
    rank = out.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _reshape(args: Sequence[Any], attrs: dict[str, Any]) -> NDArray[Any]:
    shape = _ints(args[1])
    if not attrs.get("allowzero", 0):
        shape = [args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return args[0].reshape(shape)


MOVEMENT: dict[str, Callable[[Sequence[Any], dict[str, Any]], NDArray[Any]]] = {
    "Identity": lambda args, attrs: args[0],
    "Cast": lambda args, attrs: args[0],  # to an integer type only (the reader checks)
    "Slice": _slice,
    "Gather": _gather,
    "Concat": lambda args, attrs: np.concatenate(
        [np.asarray(a, dtype=object).reshape(np.shape(a)) for a in args], axis=int(attrs["axis"])
    ),
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Reshape": _reshape,
}
"""Ops that only move the entries of an integer tensor: evaluated on dynamic entries too
(the first argument holds them; the others are static: indices, starts, shapes)."""
