"""The elementwise functions of one input that ``nf.unary`` names: one table, float64, torch's
semantics, and the rule that makes each one a lookup table over input codes.

Any elementwise function of one quantized input is exact as a lookup table: lower-to-hw
evaluates the function on every code the input can take and quantizes it as the output's
fake-quant does (``nh.lut``), so nq == nh by construction. One op family (``nf.unary`` with
``fn`` and ``params``) therefore covers the unary math instead of one op per function; this
module is its single source of truth: :data:`FUNCTIONS` maps each name to its NumPy function
(float64 in, float64 out, torch's formula and edge cases, NaN where torch gives NaN), its
parameter names and its domain.

**Domains.** An integer code has no NaN. Outside its domain (``log`` and ``sqrt`` of a negative
value, ``asin`` beyond ±1) a function is given the value at the nearest point of the domain
(:func:`quantized_values`): ``log(x < 0) = log(0) = -inf`` and ``sqrt(x < 0) = 0``; an infinite
value then saturates to the output grid's end code, as a fake-quant saturates ±inf. This is
the quantized semantics only (nq and nh agree on it); the float (nf) semantics stays torch's,
NaN included. Parameters that would leave NaN inside the domain (``fmod`` by 0, a negative
base of ``scalar_pow``) are refused by :func:`check_params`.

>>> float(evaluate("rsqrt", np.array(4.0)))
0.5
>>> quantized_values("log", np.array([-1.0, 0.0, 1.0])).tolist()
[-inf, -inf, 0.0]
>>> evaluate("softplus", np.array([30.0, 0.0]), (1.0, 20.0)).round(4).tolist()
[30.0, 0.6931]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "FUNCTIONS",
    "UnaryFunction",
    "check_params",
    "evaluate",
    "quantized_values",
]

Array = NDArray[np.float64]
INF = math.inf

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _libm(fn: Callable[[float], float], pole: float = math.nan) -> Callable[[Array], Array]:
    """A libm function per element (NumPy has no erf, erfc or lgamma); ``pole`` where libm
    raises (lgamma at 0, -1, ...: torch gives inf there)."""

    def one(v: float) -> float:
        try:
            return fn(v)
        except (ValueError, OverflowError):
            return pole

    vectorised = np.frompyfunc(one, 1, 1)
    return lambda x: np.asarray(vectorised(np.asarray(x, np.float64)), np.float64)


def _softplus(x: Array, beta: float = 1.0, threshold: float = 20.0) -> Array:
    """torch's softplus: ``x`` where ``beta x > threshold``, else ``log1p(exp(beta x)) / beta``."""
    bx = x * beta
    return np.where(bx > threshold, x, np.logaddexp(0.0, bx) / beta)


def _elu(x: Array, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Array:
    """torch's elu: ``scale x`` for ``x > 0``, else ``scale alpha (exp(input_scale x) - 1)``."""
    return np.where(x > 0, x * scale, np.expm1(np.minimum(x, 0) * input_scale) * alpha * scale)


def _pow(x: Array, exponent: float) -> Array:
    return np.power(x, exponent)


def _pow_domain(exponent: float) -> tuple[float, float]:
    """Real powers of negative values exist for integer exponents only."""
    return (-INF, INF) if float(exponent).is_integer() else (0.0, INF)


def _round_decimals(x: Array, decimals: float) -> Array:
    """torch's ``round(x, decimals=d)``: half to even at ``10**-d``."""
    d = int(decimals)
    if d >= 0:
        return np.round(x * 10.0**d) / 10.0**d
    return np.round(x / 10.0**-d) * 10.0**-d


@dataclass(frozen=True)
class UnaryFunction:
    """One function of the table: ``fn(x, *params)`` on float64, torch's semantics."""

    fn: Callable[..., Array]
    params: tuple[str, ...] = ()
    domain: tuple[float, float] | Callable[..., tuple[float, float]] = (-INF, INF)
    """Where the function is real (closed); a callable of the params when they decide it."""
    non_negative: bool = False
    """The result is ``>= 0`` for every input (quantize may give it unsigned codes)."""
    check: Callable[..., str | None] | None = None
    """Why these params are refused (they would give NaN inside the domain), or None."""

    def interval(self, params: Sequence[float]) -> tuple[float, float]:
        return self.domain(*params) if callable(self.domain) else self.domain


def _nonzero(name: str) -> Callable[[float], str | None]:
    return lambda v: None if v != 0 else f"{name} must not be 0 (the result would be NaN)"


FUNCTIONS: dict[str, UnaryFunction] = {
    # exact on codes (sign, magnitude, rounding to integers)
    "abs": UnaryFunction(np.abs, non_negative=True),
    "neg": UnaryFunction(np.negative),
    "sign": UnaryFunction(np.sign),
    "floor": UnaryFunction(np.floor),
    "ceil": UnaryFunction(np.ceil),
    "round": UnaryFunction(np.round),
    "round_decimals": UnaryFunction(_round_decimals, ("decimals",)),
    "trunc": UnaryFunction(np.trunc),
    "frac": UnaryFunction(lambda x: x - np.trunc(x)),
    "fmod": UnaryFunction(np.fmod, ("divisor",), check=_nonzero("fmod's divisor")),
    "remainder": UnaryFunction(np.mod, ("divisor",), check=_nonzero("remainder's divisor")),
    # exponentials, logarithms, powers
    "exp": UnaryFunction(np.exp, non_negative=True),
    "exp2": UnaryFunction(np.exp2, non_negative=True),
    "expm1": UnaryFunction(np.expm1),
    "log": UnaryFunction(np.log, domain=(0.0, INF)),
    "log2": UnaryFunction(np.log2, domain=(0.0, INF)),
    "log10": UnaryFunction(np.log10, domain=(0.0, INF)),
    "log1p": UnaryFunction(np.log1p, domain=(-1.0, INF)),
    "sqrt": UnaryFunction(np.sqrt, domain=(0.0, INF), non_negative=True),
    "rsqrt": UnaryFunction(lambda x: 1.0 / np.sqrt(x), domain=(0.0, INF), non_negative=True),
    "reciprocal": UnaryFunction(lambda x: 1.0 / x),
    "pow": UnaryFunction(_pow, ("exponent",), domain=_pow_domain),
    "scalar_pow": UnaryFunction(
        lambda x, base: np.power(base, x),
        ("base",),
        non_negative=True,
        check=lambda base: None if base >= 0 else "a negative base (real only at integer powers)",
    ),
    # trigonometric and hyperbolic
    "sin": UnaryFunction(np.sin),
    "cos": UnaryFunction(np.cos),
    "tan": UnaryFunction(np.tan),
    "asin": UnaryFunction(np.arcsin, domain=(-1.0, 1.0)),
    "acos": UnaryFunction(np.arccos, domain=(-1.0, 1.0), non_negative=True),
    "atan": UnaryFunction(np.arctan),
    "sinh": UnaryFunction(np.sinh),
    "cosh": UnaryFunction(np.cosh, non_negative=True),
    "asinh": UnaryFunction(np.arcsinh),
    "acosh": UnaryFunction(np.arccosh, domain=(1.0, INF), non_negative=True),
    "atanh": UnaryFunction(np.arctanh, domain=(-1.0, 1.0)),
    "sinc": UnaryFunction(np.sinc),
    # special functions (libm's)
    "erf": UnaryFunction(_libm(math.erf)),
    "erfc": UnaryFunction(_libm(math.erfc), non_negative=True),
    "lgamma": UnaryFunction(_libm(math.lgamma, INF)),
    "i0": UnaryFunction(np.i0, non_negative=True),
    "logit": UnaryFunction(lambda x: np.log(x / (1.0 - x)), domain=(0.0, 1.0)),
    "logit_eps": UnaryFunction(
        lambda x, eps: np.log(np.clip(x, eps, 1 - eps) / (1.0 - np.clip(x, eps, 1 - eps))),
        ("eps",),
    ),
    # activations
    "mish": UnaryFunction(lambda x: x * np.tanh(np.logaddexp(0.0, x))),
    "softplus": UnaryFunction(_softplus, ("beta", "threshold")),
    "elu": UnaryFunction(_elu, ("alpha", "scale", "input_scale")),
    "selu": UnaryFunction(lambda x: _elu(x, SELU_ALPHA, SELU_SCALE)),
    "celu": UnaryFunction(
        lambda x, alpha: _elu(x, alpha, 1.0, 1.0 / alpha),
        ("alpha",),
        check=_nonzero("celu's alpha"),
    ),
    "log_sigmoid": UnaryFunction(lambda x: -np.logaddexp(0.0, -x)),
    "hardshrink": UnaryFunction(
        lambda x, lambd: np.where((x >= -lambd) & (x <= lambd), 0.0, x), ("lambd",)
    ),
    "softshrink": UnaryFunction(
        lambda x, lambd: np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0.0)),
        ("lambd",),
    ),
    "tanhshrink": UnaryFunction(lambda x: x - np.tanh(x)),
    "softsign": UnaryFunction(lambda x: x / (1.0 + np.abs(x))),
    "threshold": UnaryFunction(
        lambda x, threshold, value: np.where(x > threshold, x, value), ("threshold", "value")
    ),
}
"""Every function ``nf.unary`` computes, by its ``fn`` name."""


def check_params(name: str, params: Sequence[float]) -> str | None:
    """Why ``nf.unary`` cannot compute ``name`` with ``params``, or None."""
    spec = FUNCTIONS.get(name)
    if spec is None:
        return f"unknown function {name!r} (known: {', '.join(sorted(FUNCTIONS))})"
    if len(params) != len(spec.params):
        names = ", ".join(spec.params) or "none"
        return f"{name} takes {len(spec.params)} parameter(s) ({names}), got {len(params)}"
    if any(math.isnan(p) for p in params):
        return f"{name}: a parameter is NaN"
    return None if spec.check is None else spec.check(*params)


def evaluate(name: str, x: NDArray[np.floating], params: Sequence[float] = ()) -> np.ndarray:
    """The float semantics (torch's): ``name`` on ``x`` in float64, back in ``x``'s dtype."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        y = FUNCTIONS[name].fn(np.asarray(x, np.float64), *params)
    return np.asarray(y).astype(x.dtype if x.dtype.kind == "f" else np.float64, copy=False)


def quantized_values(name: str, x: NDArray[np.floating], params: Sequence[float] = ()) -> Array:
    """The quantized semantics on float64 ``x``: the function at the nearest point of its
    domain, so never NaN (what ``nh.lut`` tabulates and what nq computes before its output
    fake-quant rounds and saturates)."""
    spec = FUNCTIONS[name]
    lo, hi = spec.interval(params)
    x64 = np.clip(np.asarray(x, np.float64), lo, hi)
    with np.errstate(all="ignore"):
        y = np.asarray(spec.fn(x64, *params), np.float64)
    if np.isnan(y).any():  # check_params and the domains rule this out
        at = float(x64[np.isnan(y)].reshape(-1)[0])
        raise ValueError(f"unary {name}{tuple(params)} is NaN at {at}")
    return y
