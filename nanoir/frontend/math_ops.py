"""Handlers for the elementwise math of torch: every function of one tensor is one ``nf.unary``
(its name and parameters from the ATen call), so the whole family shares one op, one runtime
kernel and one lowering (a lookup table over the input codes).

| ATen | nf |
|---|---|
| ``abs``, ``neg``, ``sign``/``sgn``, ``floor``, ``ceil``, ``round``, ``trunc``/``fix``, ``frac``, ``exp``, ``exp2``, ``expm1``, ``log``, ``log2``, ``log10``, ``log1p``, ``sqrt``, ``rsqrt``, ``reciprocal``, ``sin`` ... ``atanh``, ``sinc``, ``erf``, ``erfc``, ``lgamma``, ``i0``, ``mish``, ``selu``, ``log_sigmoid`` | ``nf.unary`` of that name |
| ``round.decimals``, ``logit``, ``softplus``, ``elu``, ``celu``, ``hardshrink``, ``softshrink``, ``threshold``, ``fmod``/``remainder`` by a number, ``pow`` by a number, ``pow`` of a number | ``nf.unary`` with the numbers as ``params`` |
| ``square`` | ``nf.unary "pow"`` by 2 |
| ``positive`` | the input |
| ``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``; ``logical_and``/``or``/``xor`` (and ``bitwise_*`` of bools) | ``nf.compare``: torch's bool tensors are 0/1 values in the operands' float type |
| ``logical_not`` (``bitwise_not`` of bools), ``isnan``, ``isinf``, ``isposinf``, ``isneginf``, ``isfinite`` | ``nf.compare`` with 0, the value itself, or ``±inf`` |
| ``where``, ``masked_fill`` | ``nf.where`` (``masked_fill(x, m, v) = where(m, v, x)``) |
| ``clamp`` by tensors, ``clamp_min``/``clamp_max`` | ``nf.maximum``/``nf.minimum``, or ``nf.clamp`` by numbers |
| ``_to_copy`` to the same float type (``mask.float()``, ``type_as``), to bool | the input; ``nf.compare "ne"`` with 0 |

A parameter given as a tensor (``pow(x, y)`` of two tensors, ``fmod(x, y)``) has no table: it
is refused, naming the op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from xdsl.dialects.builtin import Float16Type, Float32Type, Float64Type, TensorType
from xdsl.ir import Attribute, SSAValue

from nanoir.dialects import nf
from nanoir.frontend.support import Unsupported, constant_of
from nanoir.runtime.numerics import unary as unary_numerics

__all__ = ["HANDLERS"]

Handler = Callable[[Any, fx.Node, dict[str, Any]], Any]


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"{what} given as {type(value).__name__} (a number is needed)")
    return float(value)


def unary(fn: str, *param_args: str) -> Handler:
    """The handler of an ATen op that is the table function ``fn`` with its numeric
    parameters read from the arguments named ``param_args``."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        params = tuple(_number(a[p], f"{node.target}'s {p}") for p in param_args)
        x = imp.tensor(a["self"], imp.element_type(node))
        reason = unary_numerics.check_params(fn, params)
        if reason is not None:
            raise Unsupported(reason)
        return imp.emit(nf.UnaryOp(x, fn, params)).result

    handle.__doc__ = f"``nf.unary {fn!r}``" + (
        f" with {', '.join(param_args)}" if param_args else ""
    )
    return handle


def _logit(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``logit(x, eps)``: the input clamped to ``[eps, 1 - eps]`` first when ``eps`` is given."""
    x = imp.tensor(a["self"], imp.element_type(node))
    if a.get("eps") is None:
        return imp.emit(nf.UnaryOp(x, "logit")).result
    return imp.emit(nf.UnaryOp(x, "logit_eps", (_number(a["eps"], "logit's eps"),))).result


def _pow_tensor_scalar(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``x ** c``: the input itself for ``c = 1``, else ``nf.unary "pow"``."""
    exponent = _number(a["exponent"], "pow's exponent")
    x = imp.tensor(a["self"], imp.element_type(node))
    if exponent == 1:
        return x
    return imp.emit(nf.UnaryOp(x, "pow", (exponent,))).result


def _pow_scalar(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``c ** x`` (a number to a tensor power): ``nf.unary "scalar_pow"`` with base ``c``."""
    base = _number(a["self"], "pow's base")
    reason = unary_numerics.check_params("scalar_pow", (base,))
    if reason is not None:
        raise Unsupported(f"pow of {base} to a tensor power: {reason}")
    x = imp.tensor(a["exponent"], imp.element_type(node))
    return imp.emit(nf.UnaryOp(x, "scalar_pow", (base,))).result


def _round(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``round(x)`` (half to even), ``round(x, decimals=d)``."""
    x = imp.tensor(a["self"], imp.element_type(node))
    decimals = int(a.get("decimals") or 0)
    if decimals == 0:
        return imp.emit(nf.UnaryOp(x, "round")).result
    return imp.emit(nf.UnaryOp(x, "round_decimals", (float(decimals),))).result


def _positive(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``+x``: the input itself."""
    return imp.tensor(a["self"], imp.element_type(node))


def _by_tensor(what: str) -> Handler:
    def refuse(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        raise Unsupported(
            f"{what} of two tensors (a function of two runtime values has no lookup table; "
            "a number as the second operand maps to nf.unary)"
        )

    return refuse


# --------------------------------------------------------------------------------------------
# Comparisons, logic and selection
# --------------------------------------------------------------------------------------------

_FLOAT_DTYPES: dict[torch.dtype, Attribute] = {
    torch.float16: Float16Type(),
    torch.float32: Float32Type(),
    torch.float64: Float64Type(),
}


def _float_type(imp: Any, *args: Any) -> Attribute:
    """The float type the operands compute in: the first runtime operand's, else the first
    float constant's, else float32 (bool and integer constants become it)."""
    for arg in args:
        value = imp.values.get(arg) if isinstance(arg, fx.Node) else None
        if isinstance(value, SSAValue) and isinstance(value.type, TensorType):
            return value.type.get_element_type()
    for arg in args:
        tensor = constant_of(imp, arg)
        if tensor is not None and tensor.dtype in _FLOAT_DTYPES:
            return _FLOAT_DTYPES[tensor.dtype]
    return Float32Type()


def _dtype_of(arg: Any) -> torch.dtype | None:
    val = arg.meta.get("val") if isinstance(arg, fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _compare_values(imp: Any, lhs: Any, rhs: Any, predicate: str) -> SSAValue:
    elt = _float_type(imp, lhs, rhs)
    op = nf.CompareOp(imp.operand(lhs, elt), imp.operand(rhs, elt), predicate)
    return imp.emit(op).result


def compare(predicate: str, operands: tuple[str, str] = ("self", "other")) -> Handler:
    """``nf.compare`` of two arguments (tensors or numbers)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        return _compare_values(imp, a[operands[0]], a[operands[1]], predicate)

    handle.__doc__ = f"``nf.compare {predicate!r}``."
    return handle


def logical(predicate: str, bool_only: bool = False) -> Handler:
    """``logical_*`` (any dtype: non-zero is true), ``bitwise_*`` of bools (the same)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        if bool_only and _dtype_of(a["self"]) != torch.bool:
            raise Unsupported(
                f"bitwise {predicate} of {_dtype_of(a['self'])} tensors (of bools only)"
            )
        if predicate == "not":
            return _compare_values(imp, a["self"], 0.0, "eq")
        return _compare_values(imp, a["self"], a["other"], predicate)

    handle.__doc__ = f"``nf.compare`` for logical {predicate}."
    return handle


def _isinf(which: str) -> Handler:
    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        x = a["self"]
        if which == "nan":
            return _compare_values(imp, x, x, "ne")
        if which == "posinf":
            return _compare_values(imp, x, math.inf, "eq")
        if which == "neginf":
            return _compare_values(imp, x, -math.inf, "eq")
        pos = _compare_values(imp, x, math.inf, "eq")
        neg = _compare_values(imp, x, -math.inf, "eq")
        either = imp.emit(nf.CompareOp(pos, neg, "or")).result
        if which == "inf":
            return either
        nan = _compare_values(imp, x, x, "ne")  # finite: neither inf nor NaN
        bad = imp.emit(nf.CompareOp(either, nan, "or")).result
        zero = imp.scalar(0.0, _float_type(imp, x))
        return imp.emit(nf.CompareOp(bad, zero, "eq")).result

    handle.__doc__ = f"``is{which}`` as ``nf.compare`` ops."
    return handle


def _where(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``where(cond, x, y)`` (tensors or numbers): ``nf.where``."""
    if "self" not in a:
        raise Unsupported("where(cond) of one argument (nonzero: its shape depends on the data)")
    elt = imp.element_type(node)
    cond = imp.tensor(a["condition"], elt)
    return imp.emit(
        nf.WhereOp(cond, imp.operand(a["self"], elt), imp.operand(a["other"], elt))
    ).result


def _masked_fill(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``masked_fill(x, mask, v) = where(mask, v, x)``."""
    elt = imp.element_type(node)
    mask = imp.tensor(a["mask"], elt)
    return imp.emit(
        nf.WhereOp(mask, imp.operand(a["value"], elt), imp.tensor(a["self"], elt))
    ).result


def _clamp_by(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``clamp(x, lo, hi)`` with tensor (or number) bounds: ``nf.maximum`` / ``nf.minimum``;
    ``clamp_min`` / ``clamp_max`` the same with one bound (a number: ``nf.clamp``)."""
    elt = imp.element_type(node)
    y = imp.tensor(a["self"], elt)
    target = str(node.target)
    lo = a.get("min") if "clamp_max" not in target else None
    hi = a.get("max") if "clamp_min" not in target else None
    for bound, op_type, kw in ((lo, nf.MaximumOp, "min"), (hi, nf.MinimumOp, "max")):
        if bound is None:
            continue
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            y = imp.emit(nf.ClampOp(y, **{kw: float(bound)})).result
        else:
            y = imp.emit(op_type(y, imp.tensor(bound, elt))).result
    return y


def _to_copy(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``x.to(dtype)``, ``x.float()``, ``type_as``: the value itself where the float type
    stays (a bool tensor is already 0/1 in the program's float type); to bool, ``x != 0``.
    Other casts (to integers, between float widths) have no nf op."""
    dtype = a.get("dtype")
    source = a["self"]
    value = imp.values.get(source) if isinstance(source, fx.Node) else None
    if not isinstance(value, SSAValue):
        raise Unsupported("a cast of a value that is not computed at run time")
    if dtype == torch.bool:
        return _compare_values(imp, source, 0.0, "ne")
    if dtype is None or dtype in _FLOAT_DTYPES:
        target = _FLOAT_DTYPES.get(dtype) if dtype is not None else None
        assert isinstance(value.type, TensorType)
        if target is None or value.type.get_element_type() == target:
            return value
        raise Unsupported(
            f"a cast from {value.type.get_element_type()} to {dtype} (nf has no cast op)"
        )
    raise Unsupported(f"a cast to {dtype} (nf holds float tensors; bools as 0/1)")


_PLAIN = (
    "abs neg sign floor ceil trunc frac exp exp2 expm1 log log2 log10 log1p sqrt rsqrt "
    "reciprocal sin cos tan asin acos atan sinh cosh asinh acosh atanh sinc erf erfc lgamma "
    "i0 mish selu log_sigmoid"
).split()

HANDLERS: dict[str, Handler] = {
    **{f"aten.{name}.default": unary(name) for name in _PLAIN},
    "aten.sgn.default": unary("sign"),
    "aten.fix.default": unary("trunc"),
    "aten.special_i0.default": unary("i0"),
    "aten.round.default": _round,
    "aten.round.decimals": _round,
    "aten.logit.default": _logit,
    "aten.softplus.default": unary("softplus", "beta", "threshold"),
    "aten.elu.default": unary("elu", "alpha", "scale", "input_scale"),
    "aten.celu.default": unary("celu", "alpha"),
    "aten.hardshrink.default": unary("hardshrink", "lambd"),
    "aten.softshrink.default": unary("softshrink", "lambd"),
    "aten.threshold.default": unary("threshold", "threshold", "value"),
    "aten.fmod.Scalar": unary("fmod", "other"),
    "aten.remainder.Scalar": unary("remainder", "other"),
    "aten.fmod.Tensor": _by_tensor("fmod"),
    "aten.remainder.Tensor": _by_tensor("remainder"),
    "aten.pow.Tensor_Scalar": _pow_tensor_scalar,
    "aten.pow.Scalar": _pow_scalar,
    "aten.pow.Tensor_Tensor": _by_tensor("pow"),
    "aten.square.default": lambda imp, node, a: _pow_tensor_scalar(
        imp, node, {"self": a["self"], "exponent": 2}
    ),
    "aten.positive.default": _positive,
    **{
        f"aten.{name}.{overload}": compare(name)
        for name in ("eq", "ne", "lt", "le", "gt", "ge")
        for overload in ("Tensor", "Scalar")
    },
    "aten.logical_not.default": logical("not"),
    "aten.logical_and.default": logical("and"),
    "aten.logical_or.default": logical("or"),
    "aten.logical_xor.default": logical("xor"),
    "aten.bitwise_not.default": logical("not", bool_only=True),
    **{
        f"aten.bitwise_{p}.{overload}": logical(p, bool_only=True)
        for p in ("and", "or", "xor")
        for overload in ("Tensor", "Scalar")
    },
    **{
        f"aten.__{p}__.{overload}": logical(p, bool_only=True)
        for p in ("and", "or", "xor")
        for overload in ("Tensor", "Scalar")
    },
    "aten.__invert__.default": logical("not", bool_only=True),
    "aten.isnan.default": _isinf("nan"),
    "aten.isinf.default": _isinf("inf"),
    "aten.isposinf.default": _isinf("posinf"),
    "aten.isneginf.default": _isinf("neginf"),
    "aten.isfinite.default": _isinf("finite"),
    "aten.where.self": _where,
    "aten.where.ScalarSelf": _where,
    "aten.where.ScalarOther": _where,
    "aten.where.Scalar": _where,
    "aten.where.default": _where,
    "aten.masked_fill.Scalar": _masked_fill,
    "aten.masked_fill.Tensor": _masked_fill,
    "aten.clamp.Tensor": _clamp_by,
    "aten.clamp_min.default": _clamp_by,
    "aten.clamp_min.Tensor": _clamp_by,
    "aten.clamp_max.default": _clamp_by,
    "aten.clamp_max.Tensor": _clamp_by,
    "aten._to_copy.default": _to_copy,
}
"""The ATen ops of the elementwise math family, by overload name."""
