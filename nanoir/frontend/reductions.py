"""Handlers for torch's reductions: ``nf.reduce`` (sum, max, min, prod), ``nf.arg_reduce``
(argmax, argmin, any, all) and ``nf.cumsum``, each keeping the reduced dims, then one
``nf.reshape`` to torch's result shape when ``keepdim`` is false. The statistics built from
them are compositions of ops that each have an integer form:

| ATen | nf |
|---|---|
| ``sum``, ``amax``, ``amin``, ``max``/``min`` (all dims, or ``.dim``'s values), ``prod`` | ``nf.reduce`` |
| ``argmax``, ``argmin`` (``max.dim``/``min.dim``'s indices), ``any``, ``all`` | ``nf.arg_reduce`` (one dim at a time) |
| ``cumsum`` | ``nf.cumsum`` |
| ``mean.default`` | sum, times ``1/n`` |
| ``var``, ``std`` (any correction) | ``mean``, ``x - mean``, ``nf.unary "pow"`` 2, sum, times ``1/(n - c)`` (``sqrt``) |
| ``linalg_vector_norm`` | ``abs``/``pow`` tables, sum (or max/min for ``ord = ±inf``), ``pow 1/p`` |
| ``logsumexp`` | ``amax``, ``exp(x - max)``, sum, ``log``, ``+ max`` |
| ``F.normalize(x, p=2, dim)``: ``div(x, expand(clamp_min(linalg_vector_norm(x, 2, [dim], True), eps)))`` | ``nf.normalize`` (an integer algorithm like LayerNorm's); the division's own handler wraps this match |

A reduction to a dtype other than a float one (``sum(dtype=torch.int64)``, a sum of a bool
tensor, whose result is an integer) is refused, naming it: nf holds float values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from nanoir.dialects import nf
from nanoir.frontend.support import Unsupported, axes, axis
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX

__all__ = ["HANDLERS", "WRAPS", "mean_value"]

Handler = Callable[[Any, fx.Node, dict[str, Any]], Any]


def _meta_shape(val: Any) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else DYNAMIC_INDEX for d in val.shape)


def _result_shape(node: fx.Node, index: int | None = None) -> tuple[int, ...]:
    val = node.meta["val"]
    return _meta_shape(val if index is None else val[index])


def _reshape(imp: Any, value: SSAValue, shape: Sequence[int]) -> SSAValue:
    if tuple(nf.tensor_shape(value)) == tuple(shape):
        return value
    return imp.emit(nf.ReshapeOp(value, shape)).result


def _check_dtype(a: dict[str, Any], node: fx.Node) -> None:
    dtype = a.get("dtype")
    out = node.meta["val"]
    out = out[0] if isinstance(out, (tuple, list)) else out
    if (dtype is not None and not dtype.is_floating_point) or not out.dtype.is_floating_point:
        raise Unsupported(
            f"{node.target} into {out.dtype} (an integer result; nf holds float values: "
            "reduce a float tensor, e.g. mask.float().sum())"
        )


def _input(imp: Any, node: fx.Node, a: dict[str, Any]) -> SSAValue:
    x = imp.tensor(a["self"])
    if not isinstance(x.type, TensorType):
        raise Unsupported("a reduction of a value that is not a tensor")
    return x


def reduce_value(imp: Any, x: SSAValue, kind: str, dims: Sequence[int]) -> SSAValue:
    """``nf.reduce`` over ``dims`` (kept); a 0-d value, or no dims, is its own reduction."""
    if not dims or not nf.tensor_shape(x):
        return x
    return imp.emit(nf.ReduceOp(x, kind, dims)).result


def _dims(a: dict[str, Any], rank: int, key: str = "dim") -> list[int]:
    return axes(a.get(key), rank)


def reduction(kind: str) -> Handler:
    """``sum``/``amax``/``amin``/``prod``/``max``/``min`` over the given dims (all by default)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        _check_dtype(a, node)
        x = _input(imp, node, a)
        dims = _dims(a, len(nf.tensor_shape(x)))
        return _reshape(imp, reduce_value(imp, x, kind, dims), _result_shape(node))

    handle.__doc__ = f"``nf.reduce {kind!r}``, reshaped to torch's result."
    return handle


def _arg_value(imp: Any, x: SSAValue, kind: str, dims: Sequence[int]) -> SSAValue:
    """``nf.arg_reduce`` along each of ``dims`` in turn (any / all of several dims)."""
    for d in dims:
        x = imp.emit(nf.ArgReduceOp(x, kind, d)).result
    return x


def arg_reduction(kind: str) -> Handler:
    """``argmax``/``argmin`` (one dim, or the flattened tensor), ``any``/``all``."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        x = _input(imp, node, a)
        rank = len(nf.tensor_shape(x))
        dim = a.get("dim")
        if rank == 0:
            y = imp.emit(nf.ArgReduceOp(_reshape(imp, x, [1]), kind, 0)).result
        elif kind in ("argmax", "argmin") and dim is None:
            shape = nf.tensor_shape(x)
            flat = [DYNAMIC_INDEX if DYNAMIC_INDEX in shape else math.prod(shape)]
            y = imp.emit(nf.ArgReduceOp(_reshape(imp, x, flat), kind, 0)).result
        else:
            y = _arg_value(imp, x, kind, axes(dim, rank))
        return _reshape(imp, y, _result_shape(node))

    handle.__doc__ = f"``nf.arg_reduce {kind!r}``, reshaped to torch's result."
    return handle


def _max_dim(kind: str, arg: str) -> Handler:
    """``max.dim``/``min.dim``: (values, indices) along one dim."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        x = _input(imp, node, a)
        rank = len(nf.tensor_shape(x))
        if rank == 0:
            x = _reshape(imp, x, [1])
        d = axis(int(a["dim"]), rank)
        values = imp.emit(nf.ReduceOp(x, kind, [d])).result
        indices = imp.emit(nf.ArgReduceOp(x, arg, d)).result
        return [
            _reshape(imp, values, _result_shape(node, 0)),
            _reshape(imp, indices, _result_shape(node, 1)),
        ]

    handle.__doc__ = f"``{kind}.dim``: ``nf.reduce {kind!r}`` and ``nf.arg_reduce {arg!r}``."
    return handle


def _count(x: SSAValue, dims: Sequence[int]) -> int:
    shape = nf.tensor_shape(x)
    sizes = [shape[d] for d in dims]
    if DYNAMIC_INDEX in sizes:
        raise Unsupported(f"a mean over the dynamic dims {list(dims)} (its count is not static)")
    return math.prod(sizes)


def _scaled(imp: Any, x: SSAValue, factor: float) -> SSAValue:
    if factor == 1:
        return x
    elt = x.type.get_element_type()  # type: ignore[attr-defined]
    return imp.emit(nf.MulOp(x, imp.scalar(factor, elt))).result


def mean_value(imp: Any, x: SSAValue, dims: Sequence[int]) -> SSAValue:
    """The mean over ``dims`` (kept): their sum times ``1/n``."""
    return _scaled(imp, reduce_value(imp, x, "sum", dims), 1.0 / max(_count(x, dims), 1))


def _mean_all(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``mean(x)`` over every dim: the sum times ``1/n``."""
    _check_dtype(a, node)
    x = _input(imp, node, a)
    y = mean_value(imp, x, list(range(len(nf.tensor_shape(x)))))
    return _reshape(imp, y, _result_shape(node))


def _variance(sqrt: bool) -> Handler:
    """``var``/``std``: ``sum((x - mean)**2) / (n - correction)`` over the dims."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        _check_dtype(a, node)
        x = _input(imp, node, a)
        dims = _dims(a, len(nf.tensor_shape(x)))
        if "correction" in a:
            correction = 1.0 if a["correction"] is None else float(a["correction"])
        else:
            correction = 1.0 if a.get("unbiased", True) else 0.0
        n = _count(x, dims)
        if n - correction <= 0:
            raise Unsupported(
                f"a variance of {n} element(s) with correction {correction} (torch's is inf/NaN)"
            )
        centred = imp.emit(nf.SubOp(x, mean_value(imp, x, dims))).result
        squares = imp.emit(nf.UnaryOp(centred, "pow", (2.0,))).result
        y = _scaled(imp, reduce_value(imp, squares, "sum", dims), 1.0 / (n - correction))
        if sqrt:
            y = imp.emit(nf.UnaryOp(y, "sqrt")).result
        return _reshape(imp, y, _result_shape(node))

    handle.__doc__ = "``std``" if sqrt else "``var``"
    return handle


def _vector_norm(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``linalg_vector_norm(x, ord, dim)``: ``sum(|x|**p)**(1/p)`` (``ord=2``: squares and a
    square root; ``1``: a sum of magnitudes; ``±inf``: the max / min magnitude; ``0``: the
    count of non-zero elements)."""
    _check_dtype(a, node)
    x = _input(imp, node, a)
    dims = _dims(a, len(nf.tensor_shape(x)))
    p = float(a.get("ord", 2))
    magnitude = imp.emit(nf.UnaryOp(x, "abs")).result
    if math.isinf(p):
        y = reduce_value(imp, magnitude, "max" if p > 0 else "min", dims)
    elif p == 0:
        zero = imp.scalar(0.0, x.type.get_element_type())  # type: ignore[attr-defined]
        nonzero = imp.emit(nf.CompareOp(x, zero, "ne")).result
        y = reduce_value(imp, nonzero, "sum", dims)
    elif p == 1:
        y = reduce_value(imp, magnitude, "sum", dims)
    else:
        powers = imp.emit(nf.UnaryOp(x if p == 2 else magnitude, "pow", (p,))).result
        y = reduce_value(imp, powers, "sum", dims)
        y = imp.emit(nf.UnaryOp(y, "sqrt") if p == 2 else nf.UnaryOp(y, "pow", (1.0 / p,))).result
    return _reshape(imp, y, _result_shape(node))


def _logsumexp(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``log(sum(exp(x)))`` as ``max + log(sum(exp(x - max)))`` (torch's stable form)."""
    x = _input(imp, node, a)
    dims = _dims(a, len(nf.tensor_shape(x)))
    top = reduce_value(imp, x, "max", dims)
    shifted = imp.emit(nf.SubOp(x, top)).result
    total = reduce_value(imp, imp.emit(nf.UnaryOp(shifted, "exp")).result, "sum", dims)
    y = imp.emit(nf.AddOp(imp.emit(nf.UnaryOp(total, "log")).result, top)).result
    return _reshape(imp, y, _result_shape(node))


def _cumsum(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``cumsum(x, dim)``: ``nf.cumsum`` (a 0-d tensor is its own prefix sum)."""
    _check_dtype(a, node)
    x = _input(imp, node, a)
    rank = len(nf.tensor_shape(x))
    if rank == 0:
        return x
    return imp.emit(nf.CumsumOp(x, axis(int(a["dim"]), rank))).result


HANDLERS: dict[str, Handler] = {
    "aten.sum.dim_IntList": reduction("sum"),
    "aten.sum.default": reduction("sum"),
    "aten.amax.default": reduction("max"),
    "aten.amin.default": reduction("min"),
    "aten.max.default": reduction("max"),
    "aten.min.default": reduction("min"),
    "aten.prod.dim_int": reduction("prod"),
    "aten.prod.default": reduction("prod"),
    "aten.max.dim": _max_dim("max", "argmax"),
    "aten.min.dim": _max_dim("min", "argmin"),
    "aten.argmax.default": arg_reduction("argmax"),
    "aten.argmin.default": arg_reduction("argmin"),
    **{
        f"aten.{kind}.{overload}": arg_reduction(kind)
        for kind in ("any", "all")
        for overload in ("default", "dim", "dims")
    },
    "aten.mean.default": _mean_all,
    "aten.var.correction": _variance(sqrt=False),
    "aten.var.dim": _variance(sqrt=False),
    "aten.var.default": _variance(sqrt=False),
    "aten.std.correction": _variance(sqrt=True),
    "aten.std.dim": _variance(sqrt=True),
    "aten.std.default": _variance(sqrt=True),
    "aten.linalg_vector_norm.default": _vector_norm,
    "aten.logsumexp.default": _logsumexp,
    "aten.cumsum.default": _cumsum,
}
"""The ATen reductions, by overload name."""


def _l2_pattern(node: fx.Node) -> tuple[fx.Node, int, float] | None:
    """``(x, dim, eps)`` when ``node`` is ``F.normalize(x, p=2, dim, eps)`` as torch.export
    writes it: ``div(x, expand(clamp_min(linalg_vector_norm(x, 2, [dim], True), eps)))``
    (the expand may be missing: the division broadcasts)."""
    x, rhs = node.args[0], node.args[1]
    if isinstance(rhs, fx.Node) and str(rhs.target) == "aten.expand.default":
        rhs = rhs.args[0]
    if not isinstance(rhs, fx.Node) or str(rhs.target) != "aten.clamp_min.default":
        return None
    norm, eps = rhs.args[0], rhs.args[1]
    if not isinstance(norm, fx.Node) or str(norm.target) != "aten.linalg_vector_norm.default":
        return None
    args = list(norm.args) + [None] * 4
    ord_, dims, keepdim = args[1] if args[1] is not None else 2, args[2], args[3]
    ord_ = norm.kwargs.get("ord", ord_)
    dims = norm.kwargs.get("dim", dims)
    keepdim = norm.kwargs.get("keepdim", keepdim)
    if norm.args[0] is not x or float(ord_) != 2 or not keepdim or norm.kwargs.get("dtype"):
        return None
    if not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        return None
    return x, int(dims[0]), float(eps)


def _normalize_or(previous: Handler) -> Handler:
    """The division's handler, but ``F.normalize``'s division (:func:`_l2_pattern`) becomes
    one ``nf.normalize`` (its norm, clamp and expand are then read by nothing and dropped)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        match = _l2_pattern(node)
        if match is None or a.get("rounding_mode") is not None:
            return previous(imp, node, a)
        x_node, dim, eps = match
        x = imp.tensor(x_node, imp.element_type(node))
        return imp.emit(nf.NormalizeOp(x, axis(dim, len(nf.tensor_shape(x))), eps)).result

    handle.__doc__ = "``F.normalize``'s division as ``nf.normalize``; any other division as before."
    return handle


WRAPS: dict[str, Callable[[Handler], Handler]] = {
    "aten.div.Tensor": _normalize_or,
}
"""Handlers of the core importer this family extends: each wraps the one it replaces."""
