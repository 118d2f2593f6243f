"""Products of nf values that both frontends read as something else (issue 30 §7).

- A division by a constant is a product by its reciprocal (:func:`reciprocal_of_divisor`):
  quantize then gives the factor a weight's fake-quant, as it gives ``x * 0.25`` or a torch
  scalar, and lower-to-hw multiplies by its codes. Only a divisor whose reciprocal is a power
  of two stays a division: lower-to-hw multiplies by that reciprocal exactly, unquantized.
- ``x · clamp(x + 3, 0, 6) / 6`` (PaddleOCR writes it so; torch's own hardswish is this) and
  ``x · hardsigmoid(x)`` with torch's hardsigmoid (``alpha = 1/6, beta = 1/2``) are one
  ``nf.hardswish`` (:func:`hardswish_input`): one lookup table and one rounding, where the
  product would be a table, a truncated product and a quantized ``1/6``. Paddle's SE gate,
  ``hardsigmoid(s; alpha = 0.2)`` times another tensor, is not that product and stays.

The frontends ask after building the product (its ``nf.mul``/``nf.div``), on the nf values
themselves, so any association of the factors (``x * relu6(x + 3) / 6``,
``x * (relu6(x + 3) / 6)``, ``x * relu6(x + 3) * (1/6)``) is the same question.
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.runtime.numerics.kernels import HARDSIGMOID_TORCH
from xdsl.ir import OpResult, SSAValue

__all__ = ["factors", "float_constant", "hardswish_input", "reciprocal_of_divisor"]

FLOAT32_RELATIVE = 1e-7
"""How far a constant may be from ``1/6`` (or an ``alpha`` from torch's) and still be it: an
exporter writes ``float32(1/6)``, 3e-8 away."""


def float_constant(value: SSAValue) -> np.ndarray | None:
    """The values of ``value`` when an ``nf.constant`` computes it (float64), else None."""
    if not isinstance(value, OpResult) or not isinstance(value.op, nf.ConstantOp):
        return None
    return np.asarray(dense_to_numpy(value.op.value), dtype=np.float64)


def reciprocal_of_divisor(divisor: np.ndarray) -> np.ndarray | None:
    """``1 / divisor`` (float64) when a division by ``divisor`` is better read as a product by
    it, else None: None for a divisor whose every value is a power of two (its reciprocal is
    exact; lower-to-hw multiplies by it unquantized) and for one with a zero or a non-finite
    value (the division's own float semantics, infinities, stay as written)."""
    d = np.asarray(divisor, dtype=np.float64)
    if d.size == 0 or not np.all(np.isfinite(d)) or np.any(d == 0):
        return None
    mantissa, _ = np.frexp(d)
    if np.all(np.abs(mantissa) == 0.5):
        return None
    return 1.0 / d


def factors(value: SSAValue, depth: int = 3) -> tuple[list[SSAValue], float]:
    """``value`` as a product: its tensor factors and one scalar coefficient, through
    ``nf.mul`` and through ``nf.div`` by a one-value constant, ``depth`` ops deep."""
    op = value.owner if isinstance(value, OpResult) else None
    scalar = float_constant(value)
    if scalar is not None and scalar.size == 1:
        return [], float(scalar.reshape(-1)[0])
    if depth > 0 and isinstance(op, nf.MulOp):
        (a, ca), (b, cb) = factors(op.lhs, depth - 1), factors(op.rhs, depth - 1)
        return a + b, ca * cb
    if depth > 0 and isinstance(op, nf.DivOp):
        divisor = float_constant(op.rhs)
        if divisor is not None and divisor.size == 1 and divisor.reshape(-1)[0] != 0:
            a, ca = factors(op.lhs, depth - 1)
            return a, ca / float(divisor.reshape(-1)[0])
    return [value], 1.0


def _near(value: float, want: float) -> bool:
    return abs(value - want) <= FLOAT32_RELATIVE * abs(want)


def _is_hardsigmoid_of(gate: SSAValue, x: SSAValue) -> bool:
    """``gate`` is torch's ``hardsigmoid(x)`` as the product needs it (coefficient 1)."""
    op = gate.owner if isinstance(gate, OpResult) else None
    return (
        isinstance(op, nf.HardSigmoidOp)
        and op.input is x
        and _near(op.alpha.value.data, HARDSIGMOID_TORCH[0])
        and op.beta.value.data == HARDSIGMOID_TORCH[1]
    )


def _is_relu6_of_x_plus_3(gate: SSAValue, x: SSAValue) -> bool:
    """``gate`` is ``clamp(x + 3, 0, 6)`` (coefficient ``1/6``)."""
    clamp = gate.owner if isinstance(gate, OpResult) else None
    if not isinstance(clamp, nf.ClampOp) or clamp.min is None or clamp.max is None:
        return False
    if (clamp.min.value.data, clamp.max.value.data) != (0.0, 6.0):
        return False
    add = clamp.input.owner if isinstance(clamp.input, OpResult) else None
    if not isinstance(add, nf.AddOp):
        return False
    for a, b in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        three = float_constant(b)
        if a is x and three is not None and three.size == 1 and three.reshape(-1)[0] == 3.0:
            return nf.tensor_shape(add.result) == nf.tensor_shape(x)
    return False


def hardswish_input(value: SSAValue) -> SSAValue | None:
    """``x`` when ``value`` computes torch's ``hardswish(x)`` as a product
    (``x · clamp(x + 3, 0, 6) · 1/6`` or ``x · hardsigmoid(x)``, any association, see
    :func:`factors`) and has ``x``'s type; else None."""
    tensors, coefficient = factors(value)
    if len(tensors) != 2:
        return None
    for x, gate in (tensors, tensors[::-1]):
        if x.type != value.type:
            continue
        if _is_hardsigmoid_of(gate, x) and _near(coefficient, 1.0):
            return x
        if _is_relu6_of_x_plus_3(gate, x) and _near(coefficient, 1 / 6):
            return x
    return None
