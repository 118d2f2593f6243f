"""Constant folding for the ONNX reader: the shape computations an exporter writes between
constants (torch builds ``F.pad``'s pads from Shape, Slice, Concat, Cast, ...), evaluated with
NumPy when every input is a constant, so that the ops reading them see plain attributes.

``FOLDABLE`` maps an ONNX op type to its evaluation (ONNX semantics); ``Shape`` and
``ConstantOfShape`` are evaluated by the reader itself (they read a value's type or a tensor
attribute). ``Cast`` needs the ``onnx`` extra (`pip install nanoir[onnx]`), imported on first
use, as the reader does.

A file of a few hundred bytes can ask for gigabytes (a Concat of one constant 2,000 times, a
Gather of many indices, a huge ConstantOfShape), so the reader bounds the work before computing:
``folded_size`` is a result's element count from its operands' shapes alone; a result may have
at most ``MAX_FOLDED`` elements, all the folded results of one model ``MAX_FOLDED_TOTAL``
together, and a shape operand (of Reshape, Expand, Tile, ConstantOfShape) ``MAX_SHAPE_ENTRIES``
entries.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from nanoir.grammar.ne.syntax_tree import AttrValue
from numpy.typing import NDArray

__all__ = [
    "FOLDABLE",
    "MAX_FOLDED",
    "MAX_FOLDED_TOTAL",
    "MAX_SHAPE_ENTRIES",
    "SHAPE_OPERAND",
    "folded_size",
    "plain",
]


def _onnx_dtype(code: int) -> Any:
    from onnx import helper  # lazy: the optional onnx package, already loaded by the reader

    return helper.tensor_dtype_to_np_dtype(code)


def _slice(args: list[Any], attrs: dict[str, AttrValue]) -> Any:
    data, starts, ends = args[0], args[1], args[2]
    axes = args[3] if len(args) > 3 and args[3] is not None else range(len(starts))
    steps = args[4] if len(args) > 4 and args[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for a, b, e, st in zip(axes, starts, ends, steps):
        index[int(a)] = slice(int(b), int(e), int(st))
    return data[tuple(index)]


def _reshape_static(args: list[Any], attrs: dict[str, AttrValue]) -> Any:
    shape = [int(d) for d in args[1]]
    if not attrs.get("allowzero", 0):
        shape = [args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return args[0].reshape(shape)


def _axes(args: list[Any], attrs: dict[str, AttrValue]) -> tuple[int, ...]:
    if len(args) > 1 and args[1] is not None:
        return tuple(int(a) for a in args[1])
    return tuple(attrs.get("axes", ()))  # type: ignore[arg-type]


def _unsqueeze(args: list[Any], attrs: dict[str, AttrValue]) -> Any:
    out = args[0]
    rank = out.ndim + len(_axes(args, attrs))
    for a in sorted(a % rank for a in _axes(args, attrs)):
        out = np.expand_dims(out, a)
    return out


MAX_FOLDED = 1 << 20
"""The most elements one folded constant may have (shape computations are small; 8 MiB of int64)."""

MAX_FOLDED_TOTAL = 1 << 24
"""The most elements all the folded constants of one model may have together."""

MAX_SHAPE_ENTRIES = 64
"""The most entries a shape operand may have (a tensor of rank 64 is already absurd)."""

SHAPE_OPERAND: dict[str, int] = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0}
"""Op type -> the index of its shape operand (Tile's repeats)."""


def folded_size(op_type: str, args: list[Any], attrs: dict[str, AttrValue]) -> int:
    """The element count of the folded result, from the operands' shapes alone (an upper
    bound for Slice), computed with Python ints before anything is allocated."""
    if op_type == "ConstantOfShape":
        return math.prod(int(d) for d in args[0].reshape(-1))
    if op_type == "Concat":
        return sum(int(a.size) for a in args if a is not None)
    if op_type == "Gather":
        data, indices = args[0], args[1]
        axis = int(attrs.get("axis", 0))  # type: ignore[arg-type]
        if not -data.ndim <= axis < data.ndim:
            return 0  # NumPy refuses it without allocating
        rest = math.prod(d for i, d in enumerate(data.shape) if i != axis % data.ndim)
        return rest * int(indices.size)
    return int(args[0].size)  # Reshape, Transpose, Cast, Squeeze, Unsqueeze keep it; Slice cuts


FOLDABLE: dict[str, Any] = {
    "Shape": None,  # from the SSA value's type (see _Reader._fold)
    "ConstantOfShape": None,  # its value attribute is a tensor (see _Reader._fold)
    "Concat": lambda args, attrs: np.concatenate(args, axis=int(attrs.get("axis", 0))),  # type: ignore[arg-type]
    "Reshape": _reshape_static,
    "Transpose": lambda args, attrs: np.transpose(args[0], attrs.get("perm")),
    "Cast": lambda args, attrs: args[0].astype(_onnx_dtype(int(attrs["to"]))),  # type: ignore[arg-type]
    "Slice": _slice,
    "Unsqueeze": _unsqueeze,
    "Squeeze": lambda args, attrs: np.squeeze(args[0], _axes(args, attrs) or None),
    "Gather": lambda args, attrs: np.take(args[0], args[1], axis=int(attrs.get("axis", 0))),  # type: ignore[arg-type]
}
"""Shape computations evaluated when every input is a constant (NumPy, ONNX semantics)."""


def plain(array: Any) -> NDArray[Any]:
    """A NumPy array of a standard dtype: ml_dtypes' int4/uint4/int2/uint2 (ONNX's INT4, ...)
    as int8/uint8 values."""
    array = np.asarray(array)
    name = str(array.dtype)
    if name in ("int4", "int2"):
        return array.astype(np.int8)
    if name in ("uint4", "uint2"):
        return array.astype(np.uint8)
    return array
