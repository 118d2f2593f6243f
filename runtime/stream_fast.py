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
- :func:`fused_requant`: such a conv and its requant chain as one exact float kernel, with
  a kernel of its own for one window of rows held in the buffer (a stream of one row a push
  fires one window at a time): one product, the bias, and the epilogue with its per-call
  decisions made once (``_finisher``).
- :func:`fast_requant`: ``requant_codes``'s int32 branch with the shift, mode and bounds
  resolved once (other cases call ``requant_codes``).
- :func:`fast_avg_pool`: an ``nh.avg_pool`` over ``[N, C, L]`` whose windows tile the rows
  (kernel = stride), on windows without zero rows: the exact int64 window sums as one
  ``sum`` and ``div_round`` by the same divisors (the general kernel sums tap by tap).
- :func:`fast_fake_quant`: ``quant.fake_quant``'s float operations for float inputs of more
  than one bit, the checks and dispatch done once (a NaN goes to the reference, which
  raises).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values
from nanoir.dialects.nh import code_range, width_of
from nanoir.dialects.nq import FakeQuantOp
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.fused import Epilogue, epilogue
from nanoir.runtime.nh import plan_exact_matmul
from nanoir.runtime.numerics.quant import (
    EXACT_EXP_LIMIT,
    RoundingMode,
    code_dtype,
    div_round,
    requant_codes,
)
from nanoir.runtime.numerics.quant import fake_quant as reference
from nanoir.runtime.numerics.shapes import window_params
from numpy.lib.stride_tricks import as_strided
from xdsl.ir import Operation, SSAValue

try:  # the clip ufunc itself: one call, without np.clip's Python-level dispatch
    from numpy._core.umath import clip as _clip
except ImportError:  # pragma: no cover - numpy < 2

    def _clip(a: np.ndarray, lo: Any, hi: Any, out: np.ndarray) -> np.ndarray:
        np.maximum(a, lo, out=out)
        return np.minimum(out, hi, out=out)


__all__ = [
    "ConvKernel",
    "RowBuffer",
    "fast_avg_pool",
    "fast_conv",
    "fast_fake_quant",
    "fast_float_conv",
    "fast_requant",
    "fused_requant",
    "padded_rows",
]


def _constant_conv_1d(
    op: nh.ConvOp | nf.ConvOp, dim: int, constants: dict[SSAValue, Any]
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The constant weight and bias of a 1-D conv streamed along its last dim (``[N, C, L]``,
    dim 2), or ``None`` when the conv is not that."""
    shape = op.input.type.get_shape()  # type: ignore[union-attr]
    if len(shape) != 3 or dim != 2 or op.weight not in constants:
        return None
    if op.bias is not None and op.bias not in constants:
        return None
    b = None if op.bias is None else np.asarray(constants[op.bias])
    return np.asarray(constants[op.weight]), b


class RowBuffer:
    """A cache along the last dim of ``[N, C, L]`` tensors, as :class:`_Cache` counts it
    (``base``: first row held or next row wanted; ``end``: rows received), the rows stored
    in ``dtype`` in one ``[N, rows, C]`` array (a row's channels contiguous, so a window of
    consecutive rows is one contiguous block per batch item). ``take`` returns ``[N, rows,
    C]`` views, valid until the next ``append``."""

    axis = 2

    def __init__(self, dtype: np.dtype[Any], spare: np.ndarray | None = None):
        self.dtype = dtype
        self.buf: np.ndarray | None = None
        self.spare = spare
        """A buffer of an earlier stream to fill instead of allocating (its rows unread)."""
        self.off = 0
        """Index in ``buf`` of row ``base``."""
        self.base = 0
        self.end = 0
        self.empty: np.ndarray | None = None

    def held(self) -> int:
        return max(0, self.end - self.base)

    def append(self, a: np.ndarray) -> None:
        n = a.shape[2]
        if self.empty is None:
            self.empty = a[:, :, :0]
        if self.end < self.base:  # rows a strided window skips
            skip = min(self.base - self.end, n)
            self.end += skip
            if skip == n:
                return
            a, n = a[:, :, skip:], n - skip
        live = self.end - self.base
        buf = self.buf
        if buf is None or self.off + live + n > buf.shape[1]:
            need = live + n
            shape = (a.shape[0], a.shape[1])
            if buf is None or need * 2 > buf.shape[1] or (buf.shape[0], buf.shape[2]) != shape:
                new = self.spare
                self.spare = None
                if new is None or new.shape[0] != shape[0] or new.shape[2] != shape[1]:
                    new = np.empty((a.shape[0], max(4 * need, 16), a.shape[1]), dtype=self.dtype)
                elif need * 2 > new.shape[1]:
                    new = np.empty((a.shape[0], max(4 * need, 16), a.shape[1]), dtype=self.dtype)
                if live:
                    assert buf is not None
                    new[:, :live] = buf[:, self.off : self.off + live]
                self.buf = buf = new
            elif live:
                buf[:, :live] = buf[:, self.off : self.off + live].copy()
            self.off = 0
        start = self.off + live
        buf[:, start : start + n] = a.transpose(0, 2, 1)
        self.end += n

    def take(self, start: int, stop: int) -> np.ndarray:
        """The held rows within ``[start, stop)`` (as ``_Cache.take`` gives them)."""
        lo, hi = max(start, self.base), min(stop, self.end)
        if self.buf is not None and hi <= lo:
            return self.buf[:, :0]
        if self.buf is None:
            if self.empty is None:
                raise ExecutionError(
                    "a window of padding only, before any row arrived, of a "
                    "tensor with a dynamic dim: cannot shape it"
                )
            return self.empty.transpose(0, 2, 1)
        lo += self.off - self.base
        return self.buf[:, lo : lo + hi - max(start, self.base)]

    def drop_before(self, row: int) -> None:
        if row > self.base:
            self.off += max(0, min(row, self.end) - self.base)
            self.base = row


ConvKernel = Callable[[np.ndarray, int, int, int], np.ndarray]
"""``(window [N, rows, C], zeros_begin, zeros_end, count) -> [N, O, count]``."""


def padded_rows(x: np.ndarray, zb: int, ze: int, dtype: np.dtype[Any]) -> np.ndarray:
    """The ``[N, rows, C]`` window with ``zb`` zero rows before and ``ze`` after (a new
    C-contiguous array, unless there are none)."""
    if not zb and not ze:
        return x
    xp = np.zeros((x.shape[0], zb + x.shape[1] + ze, x.shape[2]), dtype=dtype)
    xp[:, zb : zb + x.shape[1]] = x
    return xp


def _absmax(a: np.ndarray) -> int:
    return 0 if a.size == 0 else max(-int(a.min()), int(a.max()))


def fast_conv(
    op: Operation, dim: int, constants: dict[SSAValue, Any]
) -> tuple[ConvKernel, np.dtype[Any]] | None:
    """The fast kernel of an ``nh.conv`` streamed along the last dim of ``[N, C, L]`` and
    the dtype its cache stores, or ``None`` when it does not apply."""
    if not isinstance(op, nh.ConvOp) or op.groups.value.data != 1:
        return None
    found = _constant_conv_1d(op, dim, constants)
    if found is None:
        return None
    w, b = found
    out_channels, channels, k = w.shape
    (k,), (s,), pads, (d,) = window_params(
        1, (k,), array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    inner = channels * k
    lo, hi = nh.value_code_range(op.input)  # ui8 inputs: |code| up to 255
    plan = plan_exact_matmul(inner, max(-lo, hi), _absmax(w), 0 if b is None else _absmax(b))
    fdt = plan.float_dtype
    if not plan.fits_i32 or fdt.kind != "f" or plan.chunk < inner:
        return None
    product_bound = inner * max(-lo, hi) * _absmax(w)
    # wt[k * C + c, o] = w[o, c, k]: the [K, C] order of a window's rows
    wt = np.ascontiguousarray(w.transpose(2, 1, 0).reshape(inner, out_channels).astype(fdt))
    bias = None if b is None else b.astype(np.int32).reshape(out_channels, 1)
    span = (k - 1) * d + 1

    bias_last = None if bias is None else bias.reshape(out_channels)

    def channel_last(x: np.ndarray, zb: int, ze: int, count: int) -> np.ndarray:
        """The rows as ``[N, count, O]`` int32 (what the product gives: no transpose)."""
        batch = x.shape[0]
        xp = padded_rows(x, zb, ze, fdt)
        if count == 1:
            cols = xp[:, 0:span:d].reshape(batch, inner)
        else:
            sb, sr, sc = xp.strides
            view = as_strided(
                xp, (batch, count, k, channels), (sb, s * sr, d * sr, sc), writeable=False
            )
            cols = view.reshape(batch * count, inner)
        # [N * count, K * C] @ [K * C, O]: one product for the whole window
        y = (cols @ wt).astype(np.int32).reshape(batch, count, out_channels)
        if bias_last is not None:
            y += bias_last
        return y

    def run(x: np.ndarray, zb: int, ze: int, count: int) -> np.ndarray:
        return np.ascontiguousarray(channel_last(x, zb, ze, count).transpose(0, 2, 1))

    def columns(x: np.ndarray, zb: int, ze: int, count: int) -> np.ndarray:
        """The window's ``[N * count, K * C]`` column matrix in ``fdt``."""
        batch = x.shape[0]
        xp = padded_rows(x, zb, ze, fdt)
        if count == 1:
            return xp[:, 0:span:d].reshape(batch, inner)
        sb, sr, sc = xp.strides
        view = as_strided(
            xp, (batch, count, k, channels), (sb, s * sr, d * sr, sc), writeable=False
        )
        return view.reshape(batch * count, inner)

    def columns_at(buf: np.ndarray, row: int, rows: int, count: int) -> np.ndarray:
        """``columns`` of the window ``buf[:, row : row + rows]`` with no zero rows, the
        strided view made by the array constructor from the buffer and the row's offset
        (the same values and layout as ``as_strided`` gives, without its set-up)."""
        batch = buf.shape[0]
        sb, sr, sc = buf.strides
        if count == 1:
            return buf[:, row : row + span : d].reshape(batch, inner)
        view = np.ndarray(
            (batch, count, k, channels),
            buf.dtype,
            buffer=buf,
            offset=row * sr,
            strides=(sb, s * sr, d * sr, sc),
        )
        return view.reshape(batch * count, inner)

    run.span, run.dilation = span, d  # type: ignore[attr-defined]
    run.channel_last = channel_last  # type: ignore[attr-defined]
    run.columns_at = columns_at  # type: ignore[attr-defined]
    run.bound = product_bound  # type: ignore[attr-defined]
    run.parts = (columns, w.transpose(2, 1, 0).reshape(inner, out_channels), b, plan)  # type: ignore[attr-defined]
    return run, fdt


def fused_requant(conv: ConvKernel, ops: list[Operation]) -> ConvKernel | None:
    """A fast nh conv followed by its chain (``nh.requant``, then relu, clamp and widening
    requants) as one kernel: the accumulators stay floats and the chain is
    :class:`nanoir.runtime.fused.Epilogue`'s exact float computation (a right shift by ``s``
    an exact product by ``2**-s``, each rounding mode one exact float rounding, saturation,
    relu and clamp one clip). ``None`` unless the epilogue covers the whole chain."""
    parts = getattr(conv, "parts", None)
    if parts is None or not ops:
        return None
    columns, w, b, plan = parts
    out_channels = w.shape[1]
    epi = epilogue(ops, 1, (out_channels,))
    if epi is None or epi.count != len(ops):
        return None
    # acc * 2**-s is a product by a power of two: folded into the weights and the bias (with
    # half_up's 2**(s-1), the offset added before flooring). Every partial sum of the
    # product is then a multiple of 2**-s below the plan's bound times 2**-s, exact in the
    # plan's float; the bias is added where the whole sum is exact too: in float32 when
    # the worst case (with the offset) is below 2**24, else in float64.
    bias_bound = 0 if b is None else _absmax(b)
    fdt = plan.float_dtype
    wt = np.ascontiguousarray((w.astype(np.float64) * epi.scale).astype(fdt))
    add = (np.zeros(out_channels, np.int64) if b is None else b.astype(np.int64)) + epi.offset
    total_bound = conv.bound + bias_bound + int(epi.offset.max(initial=0))  # type: ignore[attr-defined]
    pdt = (
        np.dtype(np.float32) if fdt == np.float32 and total_bound <= 2**24 else np.dtype(np.float64)
    )
    addf = (add.astype(np.float64) * epi.scale).astype(pdt)
    has_add = bool(np.any(addf != 0))

    def floats(cols: np.ndarray, batch: int, count: int) -> np.ndarray:
        """The codes as ``pdt`` floats, ``[N, O, count]`` (a view of ``[N, count, O]``)."""
        y = cols @ wt
        if y.dtype != pdt:
            y = y.astype(pdt)
        if has_add:
            y += addf
        epi.apply(y, out=y)
        return y.reshape(batch, count, out_channels).transpose(0, 2, 1)

    def codes(cols: np.ndarray, batch: int, count: int) -> np.ndarray:
        y = cols @ wt
        if y.dtype != pdt:
            y = y.astype(pdt)
        if has_add:
            y += addf
        # [N, O, count] as a view of the [N, count, O] codes: a consumer that is a fast conv
        # stores rows channel-last anyway, and the values are the same in any layout
        return epi.apply(y).reshape(batch, count, out_channels).transpose(0, 2, 1)

    def run(x: np.ndarray, zb: int, ze: int, count: int) -> np.ndarray:
        return codes(columns(x, zb, ze, count), x.shape[0], count)

    columns_at = getattr(conv, "columns_at", None)
    span, dilation = conv.span, conv.dilation  # type: ignore[attr-defined]
    inner = w.shape[0]
    finish_floats = _finisher(epi, pdt, floats=True)
    finish_codes = _finisher(epi, pdt, floats=False)
    dot, add = np.dot, np.add

    def window_sums(buf: np.ndarray, row: int) -> np.ndarray:
        """The ``[N, O]`` sums (``pdt``, the bias added) of the one window at ``row``."""
        y = dot(buf[:, row : row + span : dilation].reshape(buf.shape[0], inner), wt)
        if y.dtype != pdt:
            y = y.astype(pdt)
        if has_add:
            add(y, addf, out=y)
        return y

    def one(buf: np.ndarray, row: int) -> np.ndarray:
        """``run_at(buf, row, span, 1)``: one window of real rows, one output row (a stream
        of one row a push fires so), in as few NumPy calls as it takes; ``[N, O, 1]``."""
        return finish_codes(window_sums(buf, row))[:, :, None]

    def one_float(buf: np.ndarray, row: int) -> np.ndarray:
        """``one`` with the codes left as ``pdt`` floats (as ``run_at_float``)."""
        return finish_floats(window_sums(buf, row))[:, :, None]

    if columns_at is not None:

        def run_at(buf: np.ndarray, row: int, rows: int, count: int) -> np.ndarray:
            """``run`` on the window ``buf[:, row : row + rows]`` with no zero rows."""
            return codes(columns_at(buf, row, rows, count), buf.shape[0], count)

        def run_at_float(buf: np.ndarray, row: int, rows: int, count: int) -> np.ndarray:
            """``run_at`` with the codes left as ``pdt`` floats (the same integer values): for
            a consumer that stores them in a ``pdt`` buffer anyway."""
            return floats(columns_at(buf, row, rows, count), buf.shape[0], count)

        run.at = run_at  # type: ignore[attr-defined]
        run.at_float = run_at_float  # type: ignore[attr-defined]
        run.at_one = one  # type: ignore[attr-defined]
        run.at_one_float = one_float  # type: ignore[attr-defined]
        one.finish, one_float.finish = finish_codes, finish_floats  # type: ignore[attr-defined]
        run.float_dtype = pdt  # type: ignore[attr-defined]
    return run


def _finisher(epi: Epilogue, pdt: np.dtype[Any], floats: bool) -> Callable[[np.ndarray], Any]:
    """``Epilogue.apply`` for ``[N, O]`` ``pdt`` arrays as a function with what ``apply``
    decides per call decided once: ``floats`` gives ``apply(y, out=y)`` (the codes as
    floats, in place), else ``apply(y)`` (the codes in ``epi.dtype``). The same NumPy
    operations on the same values, except that a last clip that cannot change a value (the
    range before it, clipped and scaled by powers of two, lies within its own) is left out:
    the codes are then cast as they are (integers already, rounded by the chain's first
    requant; else ``apply`` itself serves)."""
    kind = pdt.type
    stages = [(kind(lo), kind(hi), then) for lo, hi, then in epi.stages]
    *middle, (lo, hi, _) = stages
    last_needed = True
    if middle:
        before_lo, before_hi, then = epi.stages[-2]
        scales = np.asarray(then, dtype=np.float64)
        low = min(before_lo * float(scales.min()), before_lo * float(scales.max()))
        high = max(before_hi * float(scales.min()), before_hi * float(scales.max()))
        last_needed = not (epi.stages[-1][0] <= low and high <= epi.stages[-1][1])
    rnd = epi.exact_round if floats else epi.round
    if not floats and (last_needed or rnd is None):
        return epi.apply
    dtype = epi.dtype

    def finish(y: np.ndarray) -> np.ndarray:
        if rnd is not None:
            rnd(y, out=y)
        for a, b, then in middle:
            _clip(y, a, b, out=y)
            y *= then
        if not floats:
            return y.astype(dtype)
        if last_needed:
            _clip(y, lo, hi, out=y)
        return y

    finish.last_clip = last_needed  # type: ignore[attr-defined]
    return finish


def fast_requant(
    op: Operation, channel_last: bool = False
) -> Callable[[np.ndarray], tuple[np.ndarray]] | None:
    """``nh.requant``'s kernel with everything but the arithmetic done once (``None``: not
    an int32-branch case of ``requant_codes``, the general kernel applies). With
    ``channel_last``, for ``[N, C, L]`` tensors whose shifts run along C: the kernel of the
    ``[N, L, C]`` transpose (what a fast conv's product gives), per-channel shifts along the
    last, contiguous dim."""
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
    if channel_last:
        if rank != 3 or (np.ndim(shift) and np.shape(shift) != (1, len(shifts), 1)):
            return None
        shift = shift.reshape(-1) if np.ndim(shift) else shift
    s32: Any = smin if smin == smax else np.asarray(shift).astype(np.int32)
    mask: Any = (1 << s32) - 1
    s_half: Any = s32 - 1
    signed = not nh.is_unsigned(op.result)
    lo, hi = code_range(bits, signed)
    cdt = code_dtype(bits, signed=signed)

    def run(a: np.ndarray) -> tuple[np.ndarray]:
        if a.dtype.kind != "i" or a.dtype.itemsize > 4:
            return (requant_codes(a, shift, bits, mode, signed=signed),)
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
        _clip(q, lo, hi, out=q)
        return (q.astype(cdt),)

    return run


def fast_fake_quant(op: Operation, dtype: np.dtype[Any]) -> Callable[..., tuple[Any]] | None:
    """``nq.fake_quant``'s kernel (``quant.fake_quant``) for float inputs of more than one
    bit, the same float operations with the checks and dispatch done once (a NaN input goes
    to the reference, which raises)."""
    if not isinstance(op, FakeQuantOp):
        return None
    bits, mode, signed = op.bits.value.data, RoundingMode(op.rounding_mode), op.is_signed
    exp = dense_to_numpy(op.exp).astype(np.int64)
    if bits <= 1 or bits > 64 or (exp.size and int(np.abs(exp).max()) > EXACT_EXP_LIMIT):
        return None
    lo, hi = (float(v) for v in code_range(bits, signed))  # signed = false: 0..2**b-1
    # ldexp by k is a product by 2**k, both rounded once (to inf or to a subnormal alike):
    # |k| <= 960 makes 2**k and 2**-k normal floats.
    scale, unscale = np.ldexp(1.0, exp), np.ldexp(1.0, -exp)
    rnd = {
        RoundingMode.TRUNC: np.trunc,
        RoundingMode.FLOOR: np.floor,
        RoundingMode.HALF_EVEN: np.rint,
    }.get(mode)

    def run(x: np.ndarray) -> tuple[Any]:
        if x.dtype.kind != "f":
            return (reference(x, bits, exp, mode, signed=signed).astype(dtype, copy=False),)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            scaled = x * scale if x.dtype == np.float64 else x.astype(np.float64) * scale
            if rnd is not None and mode is not RoundingMode.FLOOR:
                codes = rnd(scaled, out=scaled)
            elif rnd is not None:
                codes = rnd(scaled)
                # A tiny negative x * 2**k can underflow to -0.0, whose floor is 0; it is -1.
                codes = np.where((x < 0) & (scaled == 0), -1.0, codes)
            else:  # half_up, as round_to_int has it
                f = np.floor(scaled)
                up = (scaled - f) >= 0.5
                codes = np.where(np.isfinite(scaled), f + up, scaled)
        np.maximum(codes, lo, out=codes)
        np.minimum(codes, hi, out=codes)
        total = codes.sum()
        if total != total:  # NaN: the reference raises
            return (reference(x, bits, exp, mode, signed=signed).astype(dtype, copy=False),)
        codes *= unscale
        codes += 0.0  # -0.0 -> +0.0
        return (codes.astype(dtype, copy=False),)

    return run


def fast_float_conv(
    op: Operation, dim: int, constants: dict[SSAValue, Any], dtype: np.dtype[Any]
) -> tuple[ConvKernel, np.dtype[Any]] | None:
    """The fast kernel of an ``nf.conv`` streamed along the last dim of ``[N, C, L]``: the
    very computation of ``kernels.conv`` on the window (the same C-contiguous column matrix
    ``[N, G, C/G * K, count]``, the same ``matmul`` with the same shapes, the bias added
    after), without its per-call checks, padding copy and window-view set-up. Floats are not
    exact, so it mirrors the kernel rather than computing the rows another way."""
    if not isinstance(op, nf.ConvOp):
        return None
    found = _constant_conv_1d(op, dim, constants)
    if found is None:
        return None
    w, b = found
    groups = op.groups.value.data
    out_channels, group_channels, k = w.shape
    channels = group_channels * groups
    if w.dtype.kind != "f" or (b is not None and b.dtype.kind != "f"):
        return None
    (k,), (s,), _, (d,) = window_params(
        1, (k,), array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    fdt = np.result_type(dtype, w) if b is None else np.result_type(dtype, w, b)
    wg = w.astype(fdt, copy=False).reshape(groups, out_channels // groups, group_channels * k)
    bias = None if b is None else b.astype(fdt, copy=False).reshape(out_channels, 1)
    inner = group_channels * k
    span = (k - 1) * d + 1

    def run(x: np.ndarray, zb: int, ze: int, count: int) -> np.ndarray:
        batch = x.shape[0]
        xp = padded_rows(x, zb, ze, fdt)
        if count == 1:  # the same [N, C, K] values, without a strided view's set-up
            view = xp[:, 0:span:d].transpose(0, 2, 1)
        else:
            sb, sr, sc = xp.strides
            view = as_strided(
                xp, (batch, channels, k, count), (sb, sc, d * sr, s * sr), writeable=False
            )
        cols = np.ascontiguousarray(view).reshape(batch, groups, inner, count)
        y = np.matmul(wg, cols).reshape(batch, out_channels, count)
        if bias is not None:
            y += bias
        return y

    return run, fdt


def fast_avg_pool(op: Operation, dim: int) -> Callable[[np.ndarray], tuple[Any]] | None:
    """``nh.avg_pool``'s kernel on a window of whole rows (no zero rows of padding) of a
    ``[N, C, L]`` tensor streamed along ``L``, for windows that tile the rows (kernel =
    stride, no ceil_mode, no divisor_override, more than one bit): the window sums are exact
    int64 sums (any order gives them), each divided by its window size (times ``2**shift``)
    with ``div_round``, as the general kernel does. ``None`` when it does not apply; the
    kernel returns ``None`` for a window that is not ``count * kernel`` rows."""
    if not isinstance(op, nh.AvgPoolOp) or dim != 2:
        return None
    if len(op.input.type.get_shape()) != 3:  # type: ignore[union-attr]
        return None
    kernel = array_values(op.kernel) or ()
    if len(kernel) != 1:
        return None
    (k,), (s,), _, _ = window_params(1, kernel, array_values(op.strides), (0, 0), None)
    if s != k or op.ceil_mode.value.data or op.divisor_override is not None:
        return None
    width = width_of(op.result)
    if width == 1:
        return None
    mode = op.rounding.data
    shifts = array_values(op.shift)
    scale: np.ndarray | None = None
    if shifts is not None and any(shifts):
        fx = nh.fixed_of(op.input)
        per_channel = fx if fx.is_per_channel else nh.fixed_of(op.result)
        shape = [1, 1, 1]
        if len(shifts) > 1 and per_channel.channel_axis is not None:
            shape[per_channel.channel_axis] = len(shifts)
        scale = (np.int64(1) << np.asarray(shifts, dtype=np.int64)).reshape(shape)
    storage = code_dtype(width, signed=not nh.is_unsigned(op.result))

    def run(x: np.ndarray) -> tuple[Any] | None:
        batch, channels, rows = x.shape
        count, rest = divmod(rows, k)
        if rest or not count:
            return None
        total = x.reshape(batch, channels, count, k).sum(axis=3, dtype=np.int64)
        divisor = np.full(count, k, dtype=np.int64)
        if scale is not None:
            divisor = divisor * scale
        return (div_round(total, divisor, mode).astype(storage),)

    return run
