"""Handlers for the elementwise math of torch: every function of one tensor is one ``nf.unary``
(its name and parameters from the ATen call), so the whole family shares one op, one runtime
kernel and one lowering (a lookup table over the input codes).

| ATen | nf |
|---|---|
| ``abs``, ``neg``, ``sign``/``sgn``, ``floor``, ``ceil``, ``round``, ``trunc``/``fix``, ``frac``, ``exp``, ``exp2``, ``expm1``, ``log``, ``log2``, ``log10``, ``log1p``, ``sqrt``, ``rsqrt``, ``reciprocal``, ``sin`` ... ``atanh``, ``sinc``, ``erf``, ``erfc``, ``lgamma``, ``i0``, ``mish``, ``selu``, ``log_sigmoid`` | ``nf.unary`` of that name |
| ``round.decimals``, ``logit``, ``softplus``, ``elu``, ``celu``, ``hardshrink``, ``softshrink``, ``threshold``, ``fmod``/``remainder`` by a number, ``pow`` by a number, ``pow`` of a number | ``nf.unary`` with the numbers as ``params`` |
| ``square`` | ``nf.unary "pow"`` by 2 |
| ``positive`` | the input |

A parameter given as a tensor (``pow(x, y)`` of two tensors, ``fmod(x, y)``) has no table: it
is refused, naming the op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import fx

from nanoir.dialects import nf
from nanoir.frontend.support import Unsupported
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
}
"""The ATen ops of the elementwise math family, by overload name."""
