"""A quantized program's convolutions on float32 codes: exact, at float32 BLAS speed.

At the nq level a conv reads fake-quant outputs: a per-tensor input ``c_x * 2**-k_x`` and a
weight ``c_w[o] * 2**-k_w[o]``, the codes ``c`` integers. Every product of one output channel
is an integer times ``2**-(k_x + k_w[o])``; with ``K * max|c_x| * max|c_w| <= 2**24`` (``K``
products a sum) every partial sum, in any order and with or without FMA, is an integer that
float32 holds exactly, and the float64 kernel's sum is exact too. So the float32 conv of the
codes, scaled by ``2**-(k_x + k_w[o])``, is the float64 result bit for bit (``runtime/nh.py``
argues the same for its integer convs). Quantize runs the quantized program on every
calibration batch (bias correction, its check), and there float64 im2col was most of the
time: a 5x5 depthwise conv of 240x12x80 takes 4x longer in float64 than in float32.

The codes are checked at run time (integers within their bound); any other input, an
exponent sum outside ``±960`` (where a product could leave float64's normal range) or a grid
this does not cover (a per-channel input, a weight per channel along another dim) runs the
float64 kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import tensor_shape
from nanoir.dialects.traits import Quantized, source_quantized
from nanoir.runtime.base import Kernel
from nanoir.runtime.numerics.accumulator import F32_EXACT
from nanoir.runtime.numerics.quant import EXACT_EXP_LIMIT, power_of_two, qmax, qmin
from xdsl.ir import Operation, SSAValue

__all__ = ["exact_conv"]


def _code_bound(bits: int, signed: bool) -> int:
    """The largest ``|code|`` a ``bits``-wide grid holds (the codes themselves, unlike
    lower-to-hw's bound, which counts unsigned codes one bit wider)."""
    return max(-qmin(bits, signed=signed), qmax(bits, signed=signed))


def _weight_grid(w: SSAValue, rows: int) -> tuple[np.ndarray, int] | None:
    """The weight's code exponent per output row (``value = code * 2**-exp``) and its code
    bound, when it comes straight from a fake-quant per tensor or per row."""
    fq = w.owner
    if not isinstance(fq, Operation) or fq.name != "nq.fake_quant":
        return None
    bits = int(fq.properties["bits"].value.data)  # type: ignore[attr-defined]
    signed = fq.properties.get("signed")
    is_signed = signed is None or bool(signed.value.data)  # type: ignore[attr-defined]
    exps = np.asarray(dense_to_numpy(fq.properties["exp"]), np.int64)  # type: ignore[arg-type]
    if exps.size != 1 and (exps.size != rows or exps.shape[0] != rows):
        return None
    exps = np.broadcast_to(exps.reshape(-1), (rows,))
    return (-exps if bits == 1 else exps), _code_bound(bits, is_signed)


def _codes(values: np.ndarray, scale: np.ndarray | float, bound: int) -> np.ndarray | None:
    """``values * scale`` as float32 when they are integers of magnitude at most ``bound``."""
    codes = np.multiply(values, scale, dtype=np.float64)
    if codes.size and (np.abs(codes).max() > bound or not np.array_equal(np.rint(codes), codes)):
        return None
    return codes.astype(np.float32)


def exact_conv(
    op: Operation,
    conv: Callable[..., np.ndarray],
    plain: Kernel,
) -> Kernel | None:
    """``op``'s kernel on float32 codes (``conv(x, w, b)`` is the op's float kernel,
    ``plain`` its float64 kernel, which runs whatever this does not cover), or None when
    the grids around ``op`` are not all known or the bound does not hold."""
    x, w = op.operands[0], op.operands[1]
    q = source_quantized(x)
    w_shape = tensor_shape(w)
    if not isinstance(q, Quantized) or any(d < 0 for d in w_shape):
        return None
    rows = w_shape[0]
    grid = _weight_grid(w, rows)
    if grid is None:
        return None
    w_exps, w_bound = grid
    x_bound = _code_bound(q.bits, q.signed)
    products = int(np.prod(w_shape[1:]))
    if products * x_bound * w_bound > F32_EXACT:
        return None
    if np.abs(q.exp + w_exps).max() > EXACT_EXP_LIMIT or abs(q.exp) > EXACT_EXP_LIMIT:
        return None
    spatial = (1,) * (len(w_shape) - 2)
    x_scale = float(power_of_two(q.exp))
    w_scale = power_of_two(w_exps).reshape(rows, 1, *spatial)
    unit = power_of_two(-(q.exp + w_exps)).reshape(rows, *spatial)

    def run(xv: Any, wv: Any, b: Any = None) -> tuple[Any, ...]:
        cx = cw = None
        if np.asarray(xv).dtype == np.float64 and np.asarray(wv).dtype == np.float64:
            cx, cw = _codes(xv, x_scale, x_bound), _codes(wv, w_scale, w_bound)
        if cx is None or cw is None:  # (the float64 kernel's result is float64 only then)
            return plain(xv, wv) if b is None else plain(xv, wv, b)
        y = conv(cx, cw, None).astype(np.float64)
        y *= unit
        if b is not None:
            y += np.asarray(b, np.float64).reshape(rows, *spatial)
        return (y,)

    return run
