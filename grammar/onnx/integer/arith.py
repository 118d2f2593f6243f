"""Integer rounding division and saturation as standard ONNX nodes.

ONNX's integer ``Div`` truncates toward zero and ``Mod`` (``fmod=0``) takes the divisor's sign,
so for a positive divisor ``d`` (a constant, per tensor or per channel):

- ``trunc``: ``Div(x, d)``, one pass;
- ``floor``: ``r = Mod(x, d)``, ``Div(x - r, d)`` (an exact division);
- ``half_up``: the floor of ``t = x + d // 2`` (``r >= ceil(d/2)`` rounds up, for odd ``d`` too);
- ``half_even``: the same ``q``, minus one where it is odd and ``x`` lay exactly half way,
  which is ``Mod(t, d) == 0`` for even ``d`` (a tie cannot happen for odd ``d``: there the
  compared constant is -1, which no remainder equals).

This is :func:`nanoir.runtime.numerics.quant.div_round`, which the tests compare with
onnxruntime bit for bit (a requant, a division by ``2**s``, is written in float instead:
:mod:`.requant`). The arithmetic is int32 when the bound of ``|x|`` plus ``d`` provably fits,
else int64.
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.graph import I32_MAX, Graph


def int_dtype(bound: int) -> type:
    """int32 when values of magnitude ``bound`` fit it, else int64."""
    return np.int32 if bound <= I32_MAX else np.int64


def cast_to(g: Graph, x: str, have: type, want: type, base: str) -> str:
    if have is want:
        return x
    return g.node("Cast", [x], base, to=6 if want is np.int32 else 7)


def div_round(g: Graph, x: str, d: np.ndarray, mode: RoundingMode, dtype: type, base: str) -> str:
    """``x / d`` rounded by ``mode`` (``d`` > 0, broadcasting against ``x``), in ``dtype``
    (the caller checked that ``|x| + max(d)`` fits it)."""
    d = np.asarray(d, dtype=np.int64)
    if (d == 1).all():
        return x
    dn = g.const(d, dtype, base + "_d")
    if mode is RoundingMode.TRUNC:
        return g.node("Div", [x, dn], base)
    t = x
    if mode in (RoundingMode.HALF_UP, RoundingMode.HALF_EVEN) and (d // 2).any():
        t = g.node("Add", [x, g.const(d // 2, dtype, base + "_h")], base + "_t")
    r = g.node("Mod", [t, dn], base + "_r")
    q = g.node("Div", [g.node("Sub", [t, r], base + "_f"), dn], base + "_q")
    if mode is not RoundingMode.HALF_EVEN or not (d % 2 == 0).any():
        return q
    z = np.where(d % 2 == 0, 0, -1)
    tie = g.node("Equal", [r, g.const(z, dtype, base + "_z")], base + "_tie")
    odd = g.node("Mod", [q, g.const(2, dtype)], base + "_odd")
    fix = g.node(
        "Mul",
        [g.node("Cast", [tie], base + "_tc", to=6 if dtype is np.int32 else 7), odd],
        base + "_fix",
    )
    return g.node("Sub", [q, fix], base)


def clip(g: Graph, x: str, lo: int, hi: int, dtype: type, base: str) -> str:
    return g.node("Clip", [x, g.const(lo, dtype), g.const(hi, dtype)], base)
