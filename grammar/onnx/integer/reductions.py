"""Reductions: sums, maxima and minima over dims, argmax / argmin / any / all along one dim, and
prefix sums, as the NumPy kernels compute them (:mod:`nanoir.runtime.nh`).

A sum runs in float32 where every partial sum is exact there (the input's bound times the
count within ``2**24``), else in int32, which the verifier proves holds it (a sum of ``n``
codes of ``b`` signed bits takes ``b + ceil(log2 n)`` bits, and every partial sum is smaller);
over a dynamic dim (the count unknown) it runs in int64 and is checked against its i32 result,
as the NumPy executor checks it. Maxima and minima keep the input's codes (float32 or int32,
never the offset uint8 form: ``any`` / ``all`` read codes as non-zero).
"""

from __future__ import annotations

import math

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.grammar.onnx.integer.common import Writer, out_name
from nanoir.grammar.onnx.integer.graph import F32_EXACT, I32_MAX, Graph
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

_REDUCE = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}


def _codes(g: Graph, v: SSAValue) -> tuple[str, str]:
    """``v`` as float32 codes where exact, else int32: (form, name)."""
    form = "f32" if g.float_exact(v) else "i32"
    return form, g.get(v, form)


def _summed(g: Graph, op: Operation, op_type: str, inputs: list[str], count: int | None) -> None:
    """A sum (``ReduceSum`` or ``CumSum``) of ``count`` codes per result (None: dynamic) in
    the form that holds every partial sum; dynamic: int64, checked against the result."""
    base = out_name(g, op)
    x = op.operands[0]
    if count is None:
        y = g.node(op_type, [g.get(x, "i64"), *inputs], base + "_w")
        lo, hi = nh.value_code_range(op.results[0])
        g.check(op, y, lo, hi, np.int64)
        g.put(op.results[0], "i32", g.node("Cast", [y], base, to=6))
        g.set_bound(op.results[0], I32_MAX)
        return
    bound = g.bound(x) * count
    if bound <= F32_EXACT and g.float_exact(x):
        form = "f32"
    elif bound <= I32_MAX:
        form = "i32"
    else:  # (the verifier bounds the result by its type: an i32 result fits; kept general)
        y = g.node(op_type, [g.get(x, "i64"), *inputs], base + "_w")
        g.put(op.results[0], "i32", g.node("Cast", [y], base, to=6))
        g.set_bound(op.results[0], I32_MAX)
        return
    g.put(op.results[0], form, g.node(op_type, [g.get(x, form), *inputs], base))
    g.set_bound(op.results[0], bound)


def reduce(g: Graph, op: nh.ReduceOp) -> None:
    base = out_name(g, op)
    kind = op.kind.data
    dims = [int(d) for d in array_values(op.dims) or ()]
    axes = g.const(np.asarray(dims, np.int64), np.int64, base + "_axes")
    if kind != "sum":
        form, x = _codes(g, op.input)
        g.put(op.result, form, g.node(_REDUCE[kind], [x, axes], base, keepdims=1))
        g.set_bound(op.result, g.bound(op.input))
        return
    counts = [tensor_shape(op.input)[d] for d in dims]
    count = None if DYNAMIC_INDEX in counts else math.prod(counts)
    _summed(g, op, "ReduceSum", [axes], count)


def cumsum(g: Graph, op: nh.CumsumOp) -> None:
    base = out_name(g, op)
    (dim,) = array_values(op.dims) or (0,)
    length = tensor_shape(op.input)[dim]
    axis = g.const(np.asarray(dim, np.int64), np.int64, base + "_axis")
    _summed(g, op, "CumSum", [axis], None if length == DYNAMIC_INDEX else length)


def arg_reduce(g: Graph, op: nh.ArgReduceOp) -> None:
    """ArgMax / ArgMin (the first index, ``select_last_index`` 0, as NumPy); any / all as the
    max / min of the codes' truth (non-zero: 1). Int32 codes."""
    base = out_name(g, op)
    kind = op.kind.data
    (dim,) = array_values(op.dims) or (0,)
    _, x = _codes(g, op.input)
    if kind in ("argmax", "argmin"):
        op_type = "ArgMax" if kind == "argmax" else "ArgMin"
        y = g.node(op_type, [x], base + "_i", axis=int(dim), keepdims=1, select_last_index=0)
    else:
        truth = g.node("Cast", [g.node("Cast", [x], base + "_b", to=9)], base + "_t", to=6)
        axes = g.const(np.asarray([dim], np.int64), np.int64, base + "_axes")
        y = g.node("ReduceMax" if kind == "any" else "ReduceMin", [truth, axes], base + "_r")
    g.put(op.result, "i32", g.node("Cast", [y], base, to=6))
    length = tensor_shape(op.input)[dim]
    if length != DYNAMIC_INDEX:
        g.set_bound(op.result, max(length - 1, 1))


WRITERS: dict[type[Operation], Writer] = {
    nh.ReduceOp: reduce,
    nh.CumsumOp: cumsum,
    nh.ArgReduceOp: arg_reduce,
}
