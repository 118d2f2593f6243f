"""A quantized program's convolutions on float32 codes: exact, at float32 BLAS speed.

At the nq level a conv reads fake-quant outputs: a per-tensor input ``c_x * 2**-k_x`` and a
weight ``c_w[o] * 2**-k_w[o]``, the codes ``c`` integers. Every product of one output channel
is an integer times ``2**-(k_x + k_w[o])``; while ``max|c_x| * sum|c_w[o]| <= 2**24`` (the
row's codes summed over the products of one sum) every partial sum, in any order and with or
without FMA, is an integer that float32 holds exactly, and the float64 kernel's sum is exact
too. So the float32 conv of the codes, scaled by ``2**-(k_x + k_w[o])``, is the float64
result bit for bit (``runtime/nh.py`` argues the same for its integer convs). Where a row's
sum passes ``2**24`` (an 8-bit 3x3 conv of 128 channels can), the input channels are split
into chunks that each fit, one float32 conv per chunk, and the chunks' integer sums are added
in float64 (exact below ``2**53``), unless a chunk would be shorter than ``MIN_F32_CHUNK``
products (then float64 is faster). Quantize runs the quantized program on every calibration
batch (bias correction, its check), and there float64 im2col was most of the time: a 5x5
depthwise conv of 240x12x80 takes 4x longer in float64 than in float32.

The bounds are the codes' own, checked at run time (integers within their grid's range; the
largest input code and each weight row's sum); any other input, a single input channel's
taps past ``2**24`` (one chunk cannot be split further), a grouped conv whose rows do not fit
whole, an exponent sum outside ``±960`` (where a product could leave float64's normal range)
or a grid this does not cover (a per-channel input, a weight per channel along another dim)
runs the float64 kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import tensor_shape
from nanoir.dialects.traits import Quantized, source_quantized
from nanoir.runtime.base import Kernel
from nanoir.runtime.numerics.accumulator import F32_EXACT, F64_EXACT, MIN_F32_CHUNK
from nanoir.runtime.numerics.quant import EXACT_EXP_LIMIT, power_of_two, qmax, qmin
from xdsl.ir import Operation, SSAValue

__all__ = ["channel_chunks", "exact_conv"]


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


def _codes(
    values: np.ndarray, scale: np.ndarray | float, bound: int
) -> tuple[np.ndarray, int] | None:
    """``values * scale`` (float64) and their largest magnitude, when they are integers of
    magnitude at most ``bound``."""
    codes = np.multiply(values, scale, dtype=np.float64)
    largest = float(np.abs(codes).max()) if codes.size else 0.0
    if largest > bound or not np.array_equal(np.rint(codes), codes):
        return None
    return codes, int(largest)


def channel_chunks(row_sums: np.ndarray, x_max: int) -> list[tuple[int, int]] | None:
    """Input-channel spans ``[c0, c1)`` whose products sum within float32's exact integers for
    every output row: ``x_max * sum(row_sums[o, c0:c1]) <= 2**24`` (``row_sums[o, c]``: the
    row's ``|codes|`` summed over channel ``c``'s taps, int64); None when one channel alone
    does not fit. Greedy: each chunk as long as every row allows (integer arithmetic: the
    bound is checked exactly)."""
    rows, channels = row_sums.shape
    if rows == 0 or channels == 0:
        return [(0, channels)]
    if int(row_sums.max()) * x_max > F32_EXACT:
        return None
    running = np.concatenate([np.zeros((rows, 1), np.int64), np.cumsum(row_sums, axis=1)], axis=1)
    start, spans = 0, []
    while start < channels:
        fits = (running[:, start + 1 :] - running[:, start : start + 1]) * x_max <= F32_EXACT
        stop = start + int(fits.sum(axis=1).min())  # each row's sums grow with the span
        spans.append((start, stop))
        start = stop
    return spans


def exact_conv(
    op: Operation,
    conv: Callable[..., np.ndarray],
    plain: Kernel,
) -> Kernel | None:
    """``op``'s kernel on float32 codes (``conv(x, w, b)`` is the op's float kernel,
    ``plain`` its float64 kernel, which runs whatever this does not cover), or None when
    the grids around ``op`` are not all known or its sums could pass ``2**53``."""
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
    if int(np.prod(w_shape[1:])) * x_bound * w_bound > F64_EXACT:
        return None  # (the chunks' sum would not be exact in float64)
    if np.abs(q.exp + w_exps).max() > EXACT_EXP_LIMIT or abs(q.exp) > EXACT_EXP_LIMIT:
        return None
    spatial = (1,) * (len(w_shape) - 2)
    x_scale = float(power_of_two(q.exp))
    w_scale = power_of_two(w_exps).reshape(rows, 1, *spatial)
    unit = power_of_two(-(q.exp + w_exps)).reshape(rows, *spatial)
    grouped = op.groups.value.data > 1  # type: ignore[attr-defined]
    taps = int(np.prod(w_shape[2:]))

    def codes_conv(cx: np.ndarray, x_max: int, cw: np.ndarray) -> np.ndarray | None:
        """The integer sums (float64), or None when no chunking keeps them exact."""
        row_sums = np.abs(cw).reshape(rows, cw.shape[1], -1).sum(axis=2).astype(np.int64)
        if grouped:  # whole rows only: a grouped conv's channels are not split
            fits = x_max * int(row_sums.sum(axis=1).max(initial=0)) <= F32_EXACT
            spans = [(0, cw.shape[1])] if fits else None
        else:
            spans = channel_chunks(row_sums, x_max)
            # (short chunks cost more in BLAS calls than float64 saves; the last may be short)
            if spans is not None and len(spans) > 1:
                if min(c1 - c0 for c0, c1 in spans[:-1]) * taps < MIN_F32_CHUNK:
                    return None
        if spans is None:
            return None
        y: np.ndarray | None = None
        for c0, c1 in spans:
            whole = c1 - c0 == cw.shape[1]
            part = conv(
                (cx if whole else cx[:, c0:c1]).astype(np.float32),
                (cw if whole else cw[:, c0:c1]).astype(np.float32),
                None,
            ).astype(np.float64)
            y = part if y is None else np.add(y, part, out=y)
        return y

    def run(xv: Any, wv: Any, b: Any = None) -> tuple[Any, ...]:
        y = None
        if np.asarray(xv).dtype == np.float64 and np.asarray(wv).dtype == np.float64:
            cx, cw = _codes(xv, x_scale, x_bound), _codes(wv, w_scale, w_bound)
            if cx is not None and cw is not None:
                y = codes_conv(cx[0], cx[1], cw[0])
        if y is None:  # (the float64 kernel's result is float64 only then)
            return plain(xv, wv) if b is None else plain(xv, wv, b)
        y *= unit
        if b is not None:
            y += np.asarray(b, np.float64).reshape(rows, *spatial)
        return (y,)

    return run
