"""Fast paths of the streaming executor (``nanoir.runtime.stream``) for the common nh nodes.

A stream step at batch 1 gives each node one or a few rows, where the whole-tensor kernels
spend their time deciding (bounds, plans, padding, im2col loops) rather than computing. What
can be decided once is decided here, when the runner is built, and every fast path either
gives the general path's result bit for bit or is not taken:

- :class:`RowBuffer`: a cache as one preallocated array along the streamed dim (a sliding
  buffer: rows are appended at the tail, dropped by moving an offset, and the live rows moved
  to the front only when the tail is full), so a window is a view, never a concatenation.
- :func:`fast_conv`: an ``nh.conv`` over ``[N, C, L]`` streamed along ``L`` (one group), its
  weight matrix converted to the float dtype once. A window of ``count`` outputs is one
  ``[N * count, C * K] @ [C * K, O]`` product. Integer codes make every float sum exact when
  the worst case fits the float's exact range, so any summation order gives the same
  integers; the fast path is taken only when the worst case (declared input width, the
  weight's and bias's actual ``max |code|``) also fits i32, as the kernel's plan proves it.
- :func:`fast_requant`: ``requant_codes``'s int32 branch with the shift, mode and bounds
  resolved once (other cases call ``requant_codes``).
- :func:`fast_fake_quant`: ``quant.fake_quant``'s float operations for float inputs of more
  than one bit, the checks and dispatch done once (a NaN goes to the reference, which
  raises).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values
from nanoir.dialects.nh import code_range, width_of
from nanoir.dialects.nq import FakeQuantOp
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.nh import plan_exact_matmul
from nanoir.runtime.numerics.quant import (
    EXACT_EXP_LIMIT,
    RoundingMode,
    code_dtype,
    requant_codes,
)
from nanoir.runtime.numerics.quant import fake_quant as reference
from nanoir.runtime.numerics.shapes import window_params
from numpy.lib.stride_tricks import as_strided
from xdsl.ir import Operation, SSAValue

__all__ = ["ConvKernel", "RowBuffer", "fast_conv", "fast_fake_quant", "fast_requant"]


class RowBuffer:
    """A cache along the last dim of ``[N, C, L]`` tensors, as :class:`_Cache` counts it
    (``base``: first row held or next row wanted; ``end``: rows received), the rows stored
    in ``dtype`` in one array. Windows are views: valid until the next ``append``."""

    axis = 2

    def __init__(self, dtype: np.dtype[Any]):
        self.dtype = dtype
        self.buf: np.ndarray | None = None
        self.off = 0
        """Index in ``buf`` of row ``base``."""
        self.base = 0
        self.end = 0
        self.empty: np.ndarray | None = None

    def held(self) -> int:
        return max(0, self.end - self.base)

    def append(self, a: np.ndarray) -> None:
        n = a.shape[2]
        if self.end < self.base:  # rows a strided window skips
            skip = min(self.base - self.end, n)
            self.end += skip
            if skip == n:
                return
            a, n = a[:, :, skip:], n - skip
        live = self.end - self.base
        buf = self.buf
        if buf is None or self.off + live + n > buf.shape[2]:
            need = live + n
            if buf is None or need * 2 > buf.shape[2] or buf.shape[:2] != a.shape[:2]:
                new = np.empty((*a.shape[:2], max(4 * need, 16)), dtype=self.dtype)
                if live:
                    assert buf is not None
                    new[:, :, :live] = buf[:, :, self.off : self.off + live]
                self.buf = buf = new
            elif live:
                buf[:, :, :live] = buf[:, :, self.off : self.off + live].copy()
            self.off = 0
        start = self.off + live
        buf[:, :, start : start + n] = a
        self.end += n

    def take(self, start: int, stop: int) -> np.ndarray:
        if self.buf is None:
            assert start == stop
            if self.empty is None:
                raise ExecutionError(
                    "a window of padding only, before any row arrived, of a "
                    "tensor with a dynamic dim: cannot shape it"
                )
            return self.empty
        lo = self.off + start - self.base
        return self.buf[:, :, lo : lo + stop - start]

    def drop_before(self, row: int) -> None:
        if row > self.base:
            self.off += max(0, min(row, self.end) - self.base)
            self.base = row


ConvKernel = Callable[[np.ndarray, int, int, int], np.ndarray]
"""``(window, zeros_begin, zeros_end, count) -> [N, O, count]`` int32 codes."""


def _absmax(a: np.ndarray) -> int:
    return 0 if a.size == 0 else max(-int(a.min()), int(a.max()))


def fast_conv(
    op: Operation, dim: int, constants: dict[SSAValue, Any]
) -> tuple[ConvKernel, np.dtype[Any]] | None:
    """The fast kernel of an ``nh.conv`` streamed along the last dim of ``[N, C, L]`` and
    the dtype its cache stores, or ``None`` when it does not apply."""
    if not isinstance(op, nh.ConvOp) or op.groups.value.data != 1:
        return None
    shape = op.input.type.get_shape()  # type: ignore[union-attr]
    if len(shape) != 3 or dim != 2 or op.weight not in constants:
        return None
    bias_value = op.bias
    if bias_value is not None and bias_value not in constants:
        return None
    w = np.asarray(constants[op.weight])
    b = None if bias_value is None else np.asarray(constants[bias_value])
    out_channels, channels, k = w.shape
    (k,), (s,), pads, (d,) = window_params(
        1, (k,), array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    inner = channels * k
    lo, hi = code_range(width_of(op.input))
    plan = plan_exact_matmul(inner, max(-lo, hi), _absmax(w), 0 if b is None else _absmax(b))
    fdt = plan.float_dtype
    if not plan.fits_i32 or fdt.kind != "f" or plan.chunk < inner:
        return None
    w2 = np.ascontiguousarray(w.reshape(out_channels, inner).astype(fdt))
    wt = np.ascontiguousarray(w2.T)
    bias = None if b is None else b.astype(np.int32).reshape(out_channels, 1)
    span = (k - 1) * d + 1

    def run(x: np.ndarray, zb: int, ze: int, count: int) -> np.ndarray:
        batch = x.shape[0]
        if zb or ze:
            xp = np.zeros((batch, channels, zb + x.shape[2] + ze), dtype=fdt)
            xp[:, :, zb : zb + x.shape[2]] = x
        else:
            xp = x
        if count == 1:
            cols = xp[:, :, 0:span:d].reshape(batch, inner)
            y = (cols @ wt).astype(np.int32)[:, :, None]
        else:
            sb, sc, sl = xp.strides
            view = as_strided(
                xp, (batch, channels, k, count), (sb, sc, d * sl, s * sl), writeable=False
            )
            # [O, C * K] @ [N, C * K, count] -> [N, O, count], contiguous
            y = np.matmul(w2, view.reshape(batch, inner, count)).astype(np.int32)
        if bias is not None:
            y += bias
        return y

    return run, fdt


def fast_requant(op: Operation) -> Callable[[np.ndarray], tuple[np.ndarray]] | None:
    """``nh.requant``'s kernel with everything but the arithmetic done once (``None``: not
    an int32-branch case of ``requant_codes``, the general kernel applies)."""
    if not isinstance(op, nh.RequantOp):
        return None
    fx, fy = nh.fixed_of(op.input), nh.fixed_of(op.result)
    shifts = np.asarray(array_values(op.shift) or (0,), dtype=np.int64)
    rank = len(op.input.type.get_shape())  # type: ignore[union-attr]
    if fx.is_per_channel or fy.is_per_channel:
        axis = (fx if fx.is_per_channel else fy).channel_axis
        assert axis is not None
        shape = [1] * rank
        shape[axis] = len(shifts)
        shift: Any = shifts.reshape(shape) if len(shifts) > 1 else shifts.reshape(())
    else:
        shift = shifts.reshape(())
    bits, mode = width_of(op.result), RoundingMode(op.rounding.data)
    smin, smax = int(shifts.min()), int(shifts.max())
    if bits == 1 or not (0 <= smin and smax <= 30):
        return None
    if not (
        mode is RoundingMode.FLOOR
        or mode is RoundingMode.TRUNC
        or (mode is RoundingMode.HALF_UP and smin >= 2)
    ):
        return None
    s32: Any = smin if smin == smax else np.asarray(shift).astype(np.int32)
    mask: Any = (1 << s32) - 1
    s_half: Any = s32 - 1
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    cdt = code_dtype(bits)

    def run(a: np.ndarray) -> tuple[np.ndarray]:
        if a.dtype.kind != "i" or a.dtype.itemsize > 4:
            return (requant_codes(a, shift, bits, mode),)
        x = a.astype(np.int32, copy=False)
        if mode is RoundingMode.FLOOR:
            q = x >> s32
        elif mode is RoundingMode.TRUNC:
            q = x >> 31
            q &= mask
            q += x
            q >>= s32
        else:
            q = x >> s_half
            q += 1
            q >>= 1
        np.maximum(q, lo, out=q)
        np.minimum(q, hi, out=q)
        return (q.astype(cdt),)

    return run


def fast_fake_quant(op: Operation, dtype: np.dtype[Any]) -> Callable[..., tuple[Any]] | None:
    """``nq.fake_quant``'s kernel (``quant.fake_quant``) for float inputs of more than one
    bit, the same float operations with the checks and dispatch done once (a NaN input goes
    to the reference, which raises)."""
    if not isinstance(op, FakeQuantOp):
        return None
    bits, mode = op.bits.value.data, RoundingMode(op.rounding_mode)
    exp = dense_to_numpy(op.exp).astype(np.int64)
    if bits <= 1 or bits > 64 or (exp.size and int(np.abs(exp).max()) > EXACT_EXP_LIMIT):
        return None
    lo, hi = float(-(2 ** (bits - 1))), float(2 ** (bits - 1) - 1)
    neg = -exp
    rnd = {
        RoundingMode.TRUNC: np.trunc,
        RoundingMode.FLOOR: np.floor,
        RoundingMode.HALF_EVEN: np.rint,
    }.get(mode)

    def run(x: np.ndarray) -> tuple[Any]:
        if x.dtype.kind != "f":
            return (reference(x, bits, exp, mode).astype(dtype, copy=False),)
        v = x.astype(np.float64, copy=False)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            scaled = np.ldexp(v, exp)
            if rnd is not None:
                codes = rnd(scaled)
            else:  # half_up, as round_to_int has it
                f = np.floor(scaled)
                up = (scaled - f) >= 0.5
                codes = np.where(np.isfinite(scaled), f + up, scaled)
        if mode is RoundingMode.FLOOR:
            codes = np.where((v < 0) & (scaled == 0), -1.0, codes)
        codes = np.clip(codes, lo, hi)
        if np.isnan(codes).any():
            return (reference(x, bits, exp, mode).astype(dtype, copy=False),)
        codes += 0.0
        return (np.ldexp(codes, neg).astype(dtype, copy=False),)

    return run
