"""``nh.lut`` as the float ops of the function its table evaluates, where those ops give the table
at every code (issue 33 §1).

Why: onnxruntime's ``Gather`` costs about 5 ns an element whatever the dtypes, and PP-LCNet's
hardswish tables took half of the PP-OCRv4 recognizer's time (its half_even graph: 91 ms with
them as ``Gather``, 56 ms as float ops, best of 7). Why it is exact: a form is written once
(``_FORMS``) against two back ends, NumPy and the graph, which apply the same IEEE float ops
one at a time (an add, a multiply, a divide, a clip: correctly rounded and deterministic
wherever they run, unlike ``Sigmoid`` or ``Tanh``, which have no form here). The writer runs
the NumPy back end over every code the input can take (its static bound), scaled and rounded in
each rounding mode (the table does not say which made it), in float32 and then float64, and
uses the graph back end only where a run gives the table at every one of those codes; else the
``Gather``.

``nh.lut``'s ``function``/``params`` (what lower-to-hw records) say which form to try; the
table stays the semantics, so a hand-written program with a wrong ``function`` still runs
exactly (on the ``Gather``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.common import out_name
from nanoir.grammar.onnx.integer.graph import Graph, zero_point
from nanoir.grammar.onnx.integer.requant import byte_form, float_round, quantize_to
from nanoir.runtime.numerics.kernels import HARDSIGMOID_TORCH

MAX_EXP = 60
"""Largest ``|exponent|`` a form scales by: ``2**-60`` times a 16-bit code is a normal float32,
so no back end meets a subnormal (which some flush to zero)."""


class _NumpyOps:
    """The form's ops on NumPy arrays of ``dtype``, one rounding per op."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype

    def _c(self, v: Any) -> Any:
        return v if isinstance(v, np.ndarray) else self.dtype(v)

    def add(self, a: Any, b: Any) -> Any:
        return np.add(a, self._c(b), dtype=self.dtype)

    def mul(self, a: Any, b: Any) -> Any:
        return np.multiply(a, self._c(b), dtype=self.dtype)

    def div(self, a: Any, b: Any) -> Any:
        return np.divide(a, self._c(b), dtype=self.dtype)

    def clip(self, a: Any, lo: float, hi: float) -> Any:
        return np.minimum(np.maximum(a, self._c(lo)), self._c(hi))

    def max(self, a: Any, b: float) -> Any:
        return np.maximum(a, self._c(b))

    def min(self, a: Any, b: float) -> Any:
        return np.minimum(a, self._c(b))


class _GraphOps:
    """The same ops as graph nodes on float tensors of ``dtype``."""

    def __init__(self, g: Graph, dtype: Any, base: str) -> None:
        self.g, self.dtype, self.base = g, dtype, base

    def _node(self, op_type: str, inputs: list[str]) -> str:
        return self.g.node(op_type, inputs, f"{self.base}_{op_type.lower()}")

    def _c(self, v: Any) -> str:
        return v if isinstance(v, str) else self.g.const(v, self.dtype)

    def add(self, a: str, b: Any) -> str:
        return self._node("Add", [a, self._c(b)])

    def mul(self, a: str, b: Any) -> str:
        return self._node("Mul", [a, self._c(b)])

    def div(self, a: str, b: Any) -> str:
        return self._node("Div", [a, self._c(b)])

    def clip(self, a: str, lo: float, hi: float) -> str:
        return self._node("Clip", [a, self._c(lo), self._c(hi)])

    def max(self, a: str, b: float) -> str:
        return self._node("Max", [a, self._c(b)])

    def min(self, a: str, b: float) -> str:
        return self._node("Min", [a, self._c(b)])


def _sixth(o: Any, y: Any, reciprocal: bool) -> Any:
    """``y / 6``, or ``y * (1/6)`` (``reciprocal``): onnxruntime's float32 ``Div`` is about
    three times its ``Mul`` on a large tensor (PP-LCNet's 28 hardswishes: 2 ms of the
    recognizer's 39), but the rounded reciprocal may miss a code the divide gives."""
    return o.mul(y, 1.0 / 6.0) if reciprocal else o.div(y, 6.0)


def _hardswish(o: Any, x: Any, *, reciprocal: bool = False) -> Any:
    """``x * clip(x + 3, 0, 6) / 6``, multiplied before dividing (as the kernel)."""
    return _sixth(o, o.mul(x, o.clip(o.add(x, 3.0), 0.0, 6.0)), reciprocal)


def _hardsigmoid(o: Any, x: Any, alpha: float, beta: float, *, reciprocal: bool = False) -> Any:
    """``clip(x + 3, 0, 6) / 6`` at torch's constants, else ``clip(alpha x + beta, 0, 1)``."""
    if (alpha, beta) == HARDSIGMOID_TORCH:
        return _sixth(o, o.clip(o.add(x, 3.0), 0.0, 6.0), reciprocal)
    return o.clip(o.add(o.mul(x, alpha), beta), 0.0, 1.0)


def _leaky_relu(o: Any, x: Any, alpha: float) -> Any:
    """``max(x, 0) + alpha min(x, 0)``: ``x`` where positive (``x + 0``), else ``alpha x``
    (``0 + alpha x``), the kernel's ``where(x > 0, x, alpha x)`` without onnxruntime's slow
    ``Where``."""
    return o.add(o.max(x, 0.0), o.mul(o.min(x, 0.0), alpha))


_FORMS: dict[str, tuple[Callable[..., Any], ...]] = {
    "hardswish": (partial(_hardswish, reciprocal=True), _hardswish),
    "hardsigmoid": (partial(_hardsigmoid, reciprocal=True), _hardsigmoid),
    "leaky_relu": (_leaky_relu,),
}
"""The forms, by the names ``nh.lut.function`` records, cheapest first (the first that gives
the table is written: a multiply by a rounded reciprocal may miss a code a divide gives);
each takes its ``params`` after ``x``."""


_MODES = (RoundingMode.HALF_EVEN, RoundingMode.FLOOR, RoundingMode.HALF_UP, RoundingMode.TRUNC)
"""The modes tried, cheapest graph first (half_even: one ``QuantizeLinear``)."""


def _round(y: np.ndarray, mode: RoundingMode) -> np.ndarray:
    """NumPy's run of the graph's rounding (:func:`.requant.float_round`): half_up adds 1/2 in
    the float type first, as the graph does."""
    if mode is RoundingMode.HALF_EVEN:
        return np.rint(y)
    if mode is RoundingMode.FLOOR:
        return np.floor(y)
    if mode is RoundingMode.HALF_UP:
        return np.floor(np.add(y, y.dtype.type(0.5), dtype=y.dtype))
    return np.trunc(y)


def _matching(
    form: Callable[..., Any],
    params: list[float],
    codes: np.ndarray,
    want: np.ndarray,
    e_in: int,
    e_out: int,
    lo: int,
    hi: int,
) -> tuple[Any, RoundingMode] | None:
    """The first float type and rounding mode whose NumPy run of the form gives ``want`` at
    every one of ``codes``, or None."""
    for dtype in (np.float32, np.float64):
        o = _NumpyOps(dtype)
        x = o.mul(codes.astype(dtype), np.ldexp(1.0, -e_in))
        with np.errstate(all="ignore"):
            y = o.mul(form(o, x, *params), np.ldexp(1.0, e_out))
        if not np.isfinite(y).all():
            continue
        for mode in _MODES:
            if np.array_equal(np.clip(_round(y, mode), lo, hi), want):
                return dtype, mode
    return None


def write_float_form(g: Graph, op: nh.LutOp, table: np.ndarray) -> bool:
    """Write ``op`` as its function's float ops when they give ``table`` (its dense form, one
    sub-table) at every code the input can take; False (nothing written) otherwise."""
    forms = _FORMS.get(op.function.data, ()) if op.function is not None else ()
    if not forms or op.channels is not None:
        return False
    params = [float(p) for p in op.params.get_values()] if op.params is not None else []
    fx, fy = nh.fixed_of(op.input), nh.fixed_of(op.result)
    e_in, e_out = int(fx.exp_array().reshape(-1)[0]), int(fy.exp_array().reshape(-1)[0])
    width, out_width = nh.width_of(op.input), nh.width_of(op.result)
    if width == 1 or out_width == 1 or max(abs(e_in), abs(e_out)) > MAX_EXP:
        return False
    lo, hi = nh.value_code_range(op.input)
    olo, ohi = nh.value_code_range(op.result)
    bound = g.bound(op.input)
    first, last = max(lo, -bound), min(hi, bound)
    codes = np.arange(first, last + 1)
    want = table[first - lo : last - lo + 1]
    found = None
    for form in forms:
        try:
            found = _matching(form, params, codes, want, e_in, e_out, olo, ohi)
        except TypeError:  # params that do not fit the form (a hand-written program)
            return False
        if found is not None:
            break
    if found is None:
        return False
    dtype, mode = found
    base = out_name(g, op)
    o = _GraphOps(g, dtype, base)
    form_name = "f32" if dtype is np.float32 else "f64"
    x = o.mul(g.get(op.input, form_name), np.ldexp(1.0, -e_in))
    v = form(o, x, *params)
    if mode is RoundingMode.HALF_EVEN and dtype is np.float32 and out_width <= 8:
        # QuantizeLinear: v / 2**-e_out (exact: the same y), round half to even, saturate
        scale = np.ldexp(1.0, -e_out)
        form = byte_form(op.result)
        y = quantize_to(g, v, scale, olo, ohi, zero_point(op.result), base, signed=form == "i8")
        g.put(op.result, form, y)
    else:
        y = o.mul(v, np.ldexp(1.0, e_out))
        if mode is RoundingMode.HALF_UP:
            y = o.add(y, 0.5)
        name, kind = float_round(g, y, mode, olo, ohi, base, None, dtype)
        g.put(op.result, kind, name)
    g.set_bound(op.result, int(np.abs(table).max(initial=0)))
    return True
