"""Constant folding for the ONNX reader: every node whose inputs are all constants
(initializers, ``Constant`` nodes, static shapes, earlier folds) is evaluated once at import, so
that only the input-dependent ops become nf ops. Exporters write such input-independent
subgraphs everywhere: shape arithmetic (``Shape -> Gather -> Mul -> Concat -> Reshape``), pads
(``ConstantOfShape -> Concat -> Slice -> Cast``), position ids (``Range``), masks (``Equal``,
``Where``), weights reshaped or transposed once.

The evaluation is ONNX's own reference implementation (``onnx.reference``, NumPy), one node at a
time in a one-node model at the file's opset, so that every op and every opset means what ONNX
says without a table of hand-written kernels here. Values keep their ONNX element types (int64
shape arithmetic exactly; a float32 computation in float32, as onnxruntime computes it). What
the reference implements at its newest semantics only (``REFERENCE_NEWEST_ONLY``: Softmax before
opset 13, Resize before 11) is not folded at those opsets, nor are random ops, ops with
subgraphs (If, Loop, Scan) and ops of other domains: `Unfoldable` says which.

A file of a few hundred bytes can ask for gigabytes (a Concat of one constant 2,000 times, a
Gather of many indices, a huge ConstantOfShape), so the work is bounded before it is done:
ONNX's shape inference of the node, given its constant inputs (``infer_node_outputs``; it
computes shapes, not values), says how large each result will be; an op whose result size
only its data decides (``DATA_SIZED``: NonZero, Unique, Compress) is bounded by its inputs.
All the folded results of one model together hold at most ``fold_budget(file bytes)`` bytes:
``FOLD_RATIO`` times what the file itself holds, and at least ``FOLD_FLOOR`` (a 1.2 M-element
weight written as a ``ConstantOfShape`` fill folds; a 600 KB file cannot ask for more than
32 MiB). Ops whose reference implementation loops in Python per element (``SLOW``) take at most
``SLOW_ELEMENTS`` result elements. A shape operand (of Reshape, Expand, Tile, ConstantOfShape)
has at most ``MAX_SHAPE_ENTRIES`` entries.

Needs the ``onnx`` extra (`pip install nanoir[onnx]`), imported on first use, as the reader does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DATA_SIZED",
    "FOLD_FLOOR",
    "FOLD_RATIO",
    "MAX_SHAPE_ENTRIES",
    "NOT_FOLDED",
    "REFERENCE_NEWEST_ONLY",
    "SHAPE_OPERAND",
    "SLOW",
    "SLOW_ELEMENTS",
    "FoldBudget",
    "Unfoldable",
    "evaluate",
    "fold_budget",
    "plain",
    "result_sizes",
]

FOLD_FLOOR = 32 << 20
"""The bytes all folded results of any model may hold, however small the file (32 MiB)."""

FOLD_RATIO = 16
"""A larger file may fold into this many times its own size."""

MAX_SHAPE_ENTRIES = 64
"""The most entries a shape operand may have (a tensor of rank 64 is already absurd)."""

SHAPE_OPERAND: dict[str, int] = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0}
"""Op type -> the index of its shape operand (Tile's repeats)."""

DATA_SIZED: dict[str, int] = {"NonZero": 0, "Unique": 0, "Compress": 0}
"""Ops whose result size their data decides -> the input that bounds it (NonZero's result has
at most rank x size elements, the others at most its size)."""

NOT_FOLDED: dict[str, str] = {
    name: "its values are random"
    for name in (
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    )
}
"""Op types never evaluated at import, and why."""

REFERENCE_NEWEST_ONLY: dict[str, int] = {
    "Softmax": 13,
    "LogSoftmax": 13,
    "Hardmax": 13,
    "Resize": 11,
}
"""Op type -> the opset from which ``onnx.reference`` computes it as defined: it implements
the newest definition only (Softmax's flattening to 2-D before 13, Resize-10's asymmetric
coordinates), so these ops are not folded below that opset."""

SLOW: frozenset[str] = frozenset(
    {
        "Resize",
        "Upsample",
        "RoiAlign",
        "MaxRoiPool",
        "GridSample",
        "Col2Im",
        "DeformConv",
        "NonMaxSuppression",
        "MaxUnpool",
        "LpPool",
        "AffineGrid",
        "CenterCropPad",
        "StringNormalizer",
        "TfIdfVectorizer",
    }
)
"""Ops whose reference implementation loops in Python over each result element."""

SLOW_ELEMENTS = 1 << 16
"""The most result elements a ``SLOW`` op is folded into."""

_DATA_FOR_INFERENCE = 1 << 12
"""Constant inputs up to this many elements are given to shape inference with their values
(shape operands, scales, sizes, Range's limits); larger ones by their type alone."""


class Unfoldable(Exception):
    """A node whose inputs are all constants that nanoir does not evaluate; the message says
    why (for the reader's error, which names the node)."""


def fold_budget(file_bytes: int) -> int:
    """The bytes all folded results of a model of ``file_bytes`` may hold together.

    >>> fold_budget(600_000) == FOLD_FLOOR
    True
    >>> fold_budget(10 << 20) == 160 << 20
    True
    """
    return max(FOLD_FLOOR, FOLD_RATIO * int(file_bytes))


@dataclass
class FoldBudget:
    """What a model's folds have used of its budget, in bytes."""

    limit: int
    used: int = 0

    def take(self, nbytes: int) -> None:
        """Count ``nbytes`` more, or `Unfoldable` (counting nothing) when that passes the limit."""
        if self.used + nbytes > self.limit:
            raise Unfoldable(
                f"its constant result ({nbytes} bytes) would bring the model's folded constants "
                f"to {self.used + nbytes} bytes; nanoir folds at most {self.limit} bytes for this "
                f"file (the larger of {FOLD_FLOOR} and {FOLD_RATIO} times the file's size)"
            )
        self.used += nbytes


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


def _onnx() -> Any:
    import onnx  # lazy: the optional onnx package, already loaded by the reader

    return onnx


def _check_foldable(node: Any, opset: int) -> None:
    op_type = node.op_type
    if node.domain not in ("", "ai.onnx"):
        raise Unfoldable(f"it is an op of the domain '{node.domain}', which nanoir cannot evaluate")
    if op_type in NOT_FOLDED:
        raise Unfoldable(NOT_FOLDED[op_type])
    for attr in node.attribute:
        if attr.HasField("g") or len(attr.graphs):
            raise Unfoldable("it has a subgraph (control flow), which nanoir does not evaluate")
    newest = REFERENCE_NEWEST_ONLY.get(op_type)
    if newest is not None and opset < newest:
        raise Unfoldable(
            f"ONNX's reference implementation computes {op_type} as opset {newest} defines it, "
            f"not as opset {opset} does"
        )


def _type_of(onnx: Any, array: NDArray[Any]) -> Any:
    elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    return onnx.helper.make_tensor_type_proto(elem, list(array.shape))


def result_sizes(
    node: Any, opset: int, args: Sequence[NDArray[Any] | None]
) -> list[tuple[tuple[int, ...], Any]]:
    """The shape and NumPy dtype of each of ``node``'s results on the constant inputs ``args``
    (None for an absent optional input), from ONNX's shape inference, before anything is
    computed; `Unfoldable` when they cannot be known (a bound for ``DATA_SIZED`` ops: a shape
    of one dim)."""
    onnx = _onnx()
    _check_foldable(node, opset)
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:
        raise Unfoldable(f"ONNX defines no {node.op_type} at opset {opset}") from None
    types: dict[str, Any] = {}
    data: dict[str, Any] = {}
    for name, array in zip(node.input, args):
        if not name or array is None:
            continue
        if array.dtype == object or array.dtype.kind not in "biuf":
            raise Unfoldable(f"its input '{name}' is no numeric tensor")
        types[name] = _type_of(onnx, array)
        if array.size <= _DATA_FOR_INFERENCE:
            data[name] = onnx.numpy_helper.from_array(array, name)
    try:
        inferred = onnx.shape_inference.infer_node_outputs(
            schema, node, types, data, opset_imports=[onnx.helper.make_opsetid("", opset)]
        )
    except Exception as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise Unfoldable(
            f"ONNX's shape inference refuses its constant inputs ({lines[0] if lines else e})"
        ) from None
    results = []
    for name in node.output:
        if not name:
            results.append(((0,), np.dtype(np.float32)))
            continue
        t = inferred.get(name)
        if t is None or not t.HasField("tensor_type"):
            raise Unfoldable(f"its result '{name}' is not a tensor ONNX's shape inference types")
        elem = t.tensor_type.elem_type
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        except Exception:
            raise Unfoldable(f"its result '{name}' has element type {elem}") from None
        known = t.tensor_type.HasField("shape") and all(
            d.HasField("dim_value") for d in t.tensor_type.shape.dim
        )
        if known:
            results.append((tuple(int(d.dim_value) for d in t.tensor_type.shape.dim), dtype))
        elif node.op_type in DATA_SIZED and args and args[DATA_SIZED[node.op_type]] is not None:
            source = args[DATA_SIZED[node.op_type]]
            assert source is not None
            bound = int(source.size) * (max(source.ndim, 1) if node.op_type == "NonZero" else 1)
            results.append(((bound,), dtype))
        else:
            raise Unfoldable(f"the size of its result '{name}' cannot be known before computing it")
    return results


def evaluate(
    node: Any, opset: int, args: Sequence[NDArray[Any] | None], budget: FoldBudget
) -> list[NDArray[Any]]:
    """``node``'s results on the constant inputs ``args`` (ONNX's reference implementation at
    ``opset``), after bounding them (`result_sizes`) and taking them from ``budget``;
    `Unfoldable` for what is not evaluated or would not fit."""
    onnx = _onnx()
    sizes = result_sizes(node, opset, args)
    elements = sum(math.prod(shape) for shape, _ in sizes)
    if node.op_type in SLOW and elements > SLOW_ELEMENTS:
        raise Unfoldable(
            f"its constant result would have {elements} elements; nanoir evaluates "
            f"{node.op_type} on constants up to {SLOW_ELEMENTS}"
        )
    budget.take(sum(math.prod(shape) * dtype.itemsize for shape, dtype in sizes))
    helper = onnx.helper
    inputs = []
    feeds: dict[str, NDArray[Any]] = {}
    for name, array in zip(node.input, args):
        if name and array is not None and name not in feeds:
            feeds[name] = array
            inputs.append(helper.make_tensor_value_info(name, *_elem_and_shape(onnx, array)))
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in node.output if name]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        from onnx.reference import ReferenceEvaluator  # lazy: the optional onnx package

        got = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise Unfoldable(
            f"ONNX's reference implementation fails on its constant inputs "
            f"({type(e).__name__}: {first[:200]})"
        ) from None
    results = []
    named = [name for name in node.output if name]
    for (shape, dtype), value in zip([s for s, n in zip(sizes, node.output) if n], got):
        array = np.asarray(value)
        if array.dtype != dtype and dtype.kind in "biuf":
            array = array.astype(dtype)
        if node.op_type not in DATA_SIZED and tuple(array.shape) != shape:
            raise Unfoldable(
                f"ONNX's reference implementation gives a result of shape {list(array.shape)} "
                f"where shape inference says {list(shape)}"
            )
        results.append(array)
    assert len(results) == len(named)
    return results


def _elem_and_shape(onnx: Any, array: NDArray[Any]) -> tuple[int, list[int]]:
    return onnx.helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)
