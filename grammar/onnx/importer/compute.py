"""ONNX ops whose `.ne` row takes one spelling only, read in every spelling ONNX allows:
``Gemm`` with any ``transA``/``transB``/``alpha``/``beta``, ``Pow`` by a constant, and the
reductions ``ReduceMean``/``ReduceSum`` over any axes.

- ``Gemm``: ``Y = alpha * A' B' + beta * C``. A constant ``B`` is ``nf.linear``'s weight
  ``[N, K]`` (``B`` for ``transB = 1``, ``B^T`` otherwise; times ``alpha``), folded once; a
  ``C`` that is one value per column is its bias (times ``beta``), another ``C`` an ``nf.add``
  after it. A constant ``A`` with a runtime ``B`` is the transposed product ``(B'^T A'^T)^T``
  (``nf.linear`` of ``B'^T`` by the weight ``A'``); two runtime operands are ``nf.matmul``.
- ``Pow(x, e)`` with a constant scalar ``e``: 1 is ``x``, 2 is ``x * x``, 0.5 ``nf.unary
  "sqrt"``, any other ``nf.unary "pow"`` (a table once quantized).
- ``ReduceMean``: the reduced dims moved last and merged (``nf.transpose``, ``nf.reshape``),
  one global average pool (``nf.adaptive_avg_pool`` to 1, the exact integer average at nh, as
  the torch frontend reads ``mean``), and the result shape (``keepdims``). The batch dim 0 is
  reduced only when static.
- ``ReduceSum``/``ReduceMax``/``ReduceMin``/``ReduceProd``, ``ArgMax``/``ArgMin``,
  ``CumSum``: their `.ne` rows (``nf.reduce``, ``nf.arg_reduce``, ``nf.cumsum``) with the axes
  read from the attribute or the input (by opset), and a reshape for ``keepdims = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.onnx.importer.state import Node, ReaderState, dims_text
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import SSAValue

__all__ = ["COMPUTE"]


def _shape(value: SSAValue) -> tuple[int, ...]:
    return nf.tensor_shape(value)


def _np_type(value: SSAValue) -> type:
    elt = str(value.type.get_element_type())  # type: ignore[attr-defined]
    return {"f16": np.float16, "f32": np.float32, "f64": np.float64}[elt]


def _float_attr(n: Node, key: str, default: float) -> float:
    value = n.attrs.get(key)
    return default if value is None else float(value.value)  # type: ignore[union-attr]


def _gemm(r: ReaderState, n: Node) -> None:
    if len(n.inputs) < 2 or len(n.outputs) != 1:
        raise r.error("a Gemm takes (A, B[, C]) and has 1 output")
    a_name, b_name, c_name = n.inputs[0], n.inputs[1], n.input(2)
    trans_a, trans_b = int(n.attrs.get("transA", 0)), int(n.attrs.get("transB", 0))  # type: ignore[arg-type]
    alpha, beta = _float_attr(n, "alpha", 1.0), _float_attr(n, "beta", 1.0)
    if beta == 0:
        c_name = ""
    a_static = a_name in r.static and r.static[a_name].dtype.kind == "f"
    b_static = b_name in r.static and r.static[b_name].dtype.kind == "f"
    if b_static or not a_static:
        a = r.ssa(a_name)
        if len(_shape(a)) != 2:
            raise r.error(f"its A '{a_name}' has shape {dims_text(_shape(a))}; a Gemm's is 2-D")
        if trans_a:
            a = r.emit(nf.TransposeOp(a, [1, 0])).results[0]
    if b_static:
        b = r.static[b_name]
        if b.ndim != 2:
            raise r.error(f"its B '{b_name}' has shape {list(b.shape)}; a Gemm's is 2-D")
        weight_array = (b if trans_b else b.T) * np.asarray(alpha, b.dtype)
        if trans_b and alpha == 1:
            weight = r.ssa(b_name)
        else:
            weight = r.fresh_constant(f"{b_name}_weight", np.ascontiguousarray(weight_array))
        _linear_and_bias(r, n, a, weight, c_name, beta, alpha_done=True)
        return
    b = r.ssa(b_name)
    if len(_shape(b)) != 2:
        raise r.error(f"its B '{b_name}' has shape {dims_text(_shape(b))}; a Gemm's is 2-D")
    if a_static:
        a_array = r.static[a_name]
        if a_array.ndim != 2:
            raise r.error(f"its A '{a_name}' has shape {list(a_array.shape)}; a Gemm's is 2-D")
        weight_array = (a_array.T if trans_a else a_array) * np.asarray(alpha, a_array.dtype)
        weight = r.fresh_constant(f"{a_name}_weight", np.ascontiguousarray(weight_array))
        rows = b if trans_b else r.emit(nf.TransposeOp(b, [1, 0])).results[0]
        product = r.emit(nf.LinearOp(rows, weight)).results[0]  # [N, M]
        flipped = nf.TransposeOp(product, [1, 0])
        if not c_name:
            r.add(n, flipped, n.outputs)
            return
        _add_c(r, n, r.emit(flipped).results[0], c_name, beta)
        return
    if trans_b:
        b = r.emit(nf.TransposeOp(b, [1, 0])).results[0]
    product_op = nf.MatmulOp(a, b)
    if alpha == 1 and not c_name:
        r.add(n, product_op, n.outputs)
        return
    product = r.emit(product_op).results[0]
    if alpha != 1:
        scale = r.fresh_constant(f"{n.name}_alpha", np.asarray(alpha, _np_type(product)))
        op = nf.MulOp(product, scale)
        if not c_name:
            r.add(n, op, n.outputs)
            return
        product = r.emit(op).results[0]
    _add_c(r, n, product, c_name, beta)


def _linear_and_bias(
    r: ReaderState,
    n: Node,
    a: SSAValue,
    weight: SSAValue,
    c_name: str,
    beta: float,
    alpha_done: bool,
) -> None:
    """``nf.linear`` of ``a`` by ``weight``, with C as its bias where C is one value per
    output column, else added after it."""
    columns = _shape(weight)[0]
    if not c_name:
        r.add(n, nf.LinearOp(a, weight), n.outputs)
        return
    if c_name in r.static and r.static[c_name].dtype.kind == "f":
        c = r.static[c_name]
        if c.size in (1, columns) and (c.ndim < 2 or c.shape[0] == 1) and c.ndim <= 2:
            values = np.broadcast_to(c.reshape(-1), (columns,)) * np.asarray(beta, c.dtype)
            if beta == 1 and c.shape == (columns,):
                bias = r.ssa(c_name)
            else:
                bias = r.fresh_constant(f"{c_name}_bias", np.ascontiguousarray(values))
            r.add(n, nf.LinearOp(a, weight, bias), n.outputs)
            return
    product = r.emit(nf.LinearOp(a, weight)).results[0]
    _add_c(r, n, product, c_name, beta)


def _add_c(r: ReaderState, n: Node, product: SSAValue, c_name: str, beta: float) -> None:
    """``product + beta * C`` (C broadcast unidirectionally, as Gemm's)."""
    if c_name in r.static and r.static[c_name].dtype.kind == "f":
        c = r.static[c_name]
        term = (
            r.fresh_constant(f"{c_name}_scaled", c * np.asarray(beta, c.dtype))
            if beta != 1
            else r.ssa(c_name)
        )
    else:
        term = r.ssa(c_name)
        if beta != 1:
            scale = r.fresh_constant(f"{n.name}_beta", np.asarray(beta, _np_type(term)))
            term = r.emit(nf.MulOp(term, scale)).results[0]
    r.add(n, nf.AddOp(product, term), n.outputs)


def _pow(r: ReaderState, n: Node) -> None:
    if len(n.inputs) != 2:
        raise r.error("a Pow takes (X, Y)")
    x = r.ssa(n.inputs[0])
    exponent = r.static_array(n.inputs[1], "exponent")
    if exponent.size != 1 or exponent.ndim > len(_shape(x)):
        raise r.error(
            f"its exponent '{n.inputs[1]}' has shape {list(exponent.shape)}; nanoir reads Pow "
            "by one constant value"
        )
    e = float(exponent.reshape(-1)[0])
    if e == 1:
        r.alias(n.outputs[0], x)
    elif e == 2:
        r.add(n, nf.MulOp(x, x), n.outputs)
    elif e == 0.5:
        r.add(n, nf.UnaryOp(x, "sqrt"), n.outputs)
    else:
        r.add(n, nf.UnaryOp(x, "pow", (e,)), n.outputs)


def _reduce_axes(r: ReaderState, n: Node, rank: int) -> list[int] | None:
    """The reduced axes (sorted, non-negative), or None for no reduction at all
    (``noop_with_empty_axes``)."""
    input_from = 13 if n.op_type == "ReduceSum" else 18
    if n.opset >= input_from:
        given = r.static_ints(n.inputs[1], "axes") if n.input(1) else ()
    else:
        given = tuple(int(a) for a in n.attrs.get("axes", ()))  # type: ignore[union-attr]
    if not given:
        return None if n.attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    if any(not -rank <= a < rank for a in given) or len({a % rank for a in given}) != len(given):
        raise r.error(f"its axes {list(given)} are out of range or repeated for rank {rank}")
    return sorted(a % rank for a in given)


def _reduce_by_row(r: ReaderState, n: Node) -> None:
    """ReduceSum / Max / Min / Prod: the `.ne` row (``nf.reduce``, reduced dims kept), axes
    from the attribute or the input, then a reshape when ``keepdims = 0``."""
    x = r.ssa(n.inputs[0])
    shape = _shape(x)
    axes = _reduce_axes(r, n, len(shape))
    if axes is None:
        r.alias(n.outputs[0], x)
        return
    if n.op_type in ("ReduceMax", "ReduceMin") and any(shape[a] == 0 for a in axes):
        raise r.error(
            f"it reduces the empty dim(s) of {dims_text(shape)} (ONNX's {n.op_type} of nothing "
            "is an infinity); nanoir reduces non-empty dims"
        )
    _then_drop_dims(r, n, x, {"axes": tuple(axes), "keepdims": 1}, axes)


def _arg_reduce(r: ReaderState, n: Node) -> None:
    """ArgMax / ArgMin: the `.ne` row (``nf.arg_reduce``, the reduced dim kept; indices as
    exact float values), then a reshape when ``keepdims = 0``."""
    x = r.ssa(n.inputs[0])
    rank = len(_shape(x))
    axis = int(n.attrs.get("axis", 0))  # type: ignore[arg-type]
    if not -rank <= axis < rank:
        raise r.error(f"its axis {axis} is out of range for rank {rank}")
    attrs = {k: v for k, v in n.attrs.items() if k != "keepdims"}
    _then_drop_dims(r, n, x, {**attrs, "axis": axis % rank, "keepdims": 1}, [axis % rank])


def _then_drop_dims(
    r: ReaderState,
    n: Node,
    x: SSAValue,
    attrs: dict,
    axes: list[int],  # type: ignore[type-arg]
) -> None:
    if n.attrs.get("keepdims", 1):
        r.row(n, n.op_type, attrs, [x], n.outputs)
        return
    kept = r.row(n, n.op_type, attrs, [x], [""]).results[0]
    shape = _shape(kept)
    r.add(n, nf.ReshapeOp(kept, [d for i, d in enumerate(shape) if i not in axes]), n.outputs)


def _cumsum(r: ReaderState, n: Node) -> None:
    """CumSum: the axis is an input in ONNX, an attribute in the `.ne` row."""
    if len(n.inputs) != 2:
        raise r.error("a CumSum takes (x, axis)")
    axis = r.static_array(n.inputs[1], "axis")
    if axis.size != 1 or axis.dtype.kind not in "iu":
        raise r.error(f"its axis '{n.inputs[1]}' must be one integer")
    r.row(n, "CumSum", {**n.attrs, "axis": int(axis.reshape(-1)[0])}, n.inputs[:1], n.outputs)


def _reduce(r: ReaderState, n: Node) -> None:
    x = r.ssa(n.inputs[0])
    shape = _shape(x)
    rank = len(shape)
    axes = _reduce_axes(r, n, rank)
    if axes is None:
        r.alias(n.outputs[0], x)
        return
    keep = bool(n.attrs.get("keepdims", 1))
    out = [1 if i in axes else d for i, d in enumerate(shape)]
    if not keep:
        out = [d for i, d in enumerate(shape) if i not in axes]
    reduced = [a for a in axes if shape[a] != 1]
    if not reduced:
        if list(out) == list(shape):
            r.alias(n.outputs[0], x)
        else:
            r.add(n, nf.ReshapeOp(x, out), n.outputs)
        return
    dynamic = [a for a, d in enumerate(shape) if d == DYNAMIC_INDEX and (a in reduced or a != 0)]
    if dynamic:
        raise r.error(
            f"it reduces dims {reduced} of {dims_text(shape)}, whose dim {dynamic[0]} is "
            "dynamic" + r.shapes_hint()
        )
    count = math.prod(shape[a] for a in reduced)
    if rank >= 3 and reduced == list(range(2, rank)):
        y = r.emit(nf.AdaptiveAvgPoolOp(x, [1] * (rank - 2))).results[0]
    else:
        lead = [] if 0 in reduced else [0]
        kept = [a for a in range(rank) if a not in reduced and a not in lead]
        perm = [*lead, *kept, *reduced]
        if perm != list(range(rank)):
            x = r.emit(nf.TransposeOp(x, perm)).results[0]
        batch = shape[0] if lead else 1
        merged = [batch, math.prod(shape[a] for a in kept), count]
        x = r.emit(nf.ReshapeOp(x, merged)).results[0]
        y = r.emit(nf.AdaptiveAvgPoolOp(x, [1])).results[0]
    if tuple(_shape(y)) == tuple(out):
        r.alias(n.outputs[0], y)
        return
    r.add(n, nf.ReshapeOp(y, out), n.outputs)


COMPUTE: dict[str, Callable[[ReaderState, Node], None]] = {
    "Gemm": _gemm,
    "Pow": _pow,
    "ReduceMean": _reduce,
    "ReduceSum": _reduce_by_row,
    "ReduceMax": _reduce_by_row,
    "ReduceMin": _reduce_by_row,
    "ReduceProd": _reduce_by_row,
    "ArgMax": _arg_reduce,
    "ArgMin": _arg_reduce,
    "CumSum": _cumsum,
}
"""ONNX op type -> how the reader builds its nf ops."""
