"""Fused kernels of the whole-tensor nh executor: a product or a sum and the requant chain that
reads it, as one exact float computation.

Profiled on ResNet-18 (224x224, batch 1, one thread; ``benchmarks/nh_exec_results.md``), the
unfused nh program spends about a third of its time outside the BLAS products: converting
each product's float result to an int32 accumulator, adding the bias, requantizing in several
int32 passes, then ReLU; and an ``nh.add`` of a residual widens to int64 and is requantized
from int64. A *chain* is a producer (``nh.conv``, ``nh.linear``, ``nh.add``, ``nh.sub``)
followed by ``nh.requant`` and then any of ``nh.relu``, ``nh.clamp`` and ``nh.requant`` by a
left shift, each the only user of the value before it and none a program result. The
executor (``nanoir.runtime.interpreter``) asks :data:`NH_FUSIONS` for the producer's fuser,
which takes the longest prefix of the chain it computes exactly, or none; with ``observe``
the executor runs the ops one by one, as written.

Exactness. The producer's result ``v`` is an integer and so is every value the chain makes:

- ``requant``: ``round(v * 2**-s)``, then ``clip(lo, hi)``. ``v * 2**-s`` is a product by a
  power of two, exact in a float unless it under- or overflows (shifts are kept in
  ``-31..31``; the codes in 16 bits, so that ``lo, hi`` and every code are floats exactly).
  Each mode is one exact float rounding: ``trunc`` (the cast to integers truncates, so a
  trunc at the end of the chain needs no pass of its own), ``floor``, ``half_even``
  (``rint``) and ``half_up``: ``floor((v + 2**(s-1)) * 2**-s)``, the offset added while ``v``
  is still an integer. That is ``shift_round`` then ``saturate``, as :func:`requant_codes`.
- ``relu`` and ``clamp`` narrow the current ``clip``: ``clip(clip(r, a, b), c, d) =
  clip(r, max(a, c), min(b, d))`` when the two ranges overlap (chains where they do not, or
  a clamp whose bound is no code, are not fused).
- a later ``requant`` by a left shift (``s <= 0``, as a narrow code is widened before an add)
  multiplies by ``2**-s`` exactly and clips to its range.

A float sum of integer-valued terms is exact, in any order, while every partial sum stays
within ``2**24`` (float32). Partial sums of ``sum_k x[k] * w[o, k]`` are at most
``max|x| * sum_k |w[o, k]|`` (the static accumulator bound: the declared input width, the
constant weight's row sums), plus ``|bias + offset|``. Where that is at most ``2**24`` the
product is one float32 BLAS call with ``2**-s`` folded into the weight rows and the bias (a
power of two scales every partial sum without rounding); where it is not, the reduction is
split into chunks whose bound is (:func:`exact_chunks`), each chunk's exact float32 result
summed in float64. A fusion is taken only where the unfused kernels could not fail: the
worst case fits i32 (the conv's range check), the add's result fits its width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nh import code_range, width_of
from nanoir.runtime.base import Kernel
from nanoir.runtime.nh import F32_EXACT, ConvGeometry
from nanoir.runtime.numerics.accumulator import ACC_LIMIT
from nanoir.runtime.numerics.quant import RoundingMode, code_dtype
from numpy.typing import NDArray
from xdsl.ir import Operation

try:  # the clip ufunc itself: it takes casting= and an out of another dtype
    from numpy._core.umath import clip as _clip
except ImportError:  # pragma: no cover - numpy < 2
    from numpy.core.umath import clip as _clip  # type: ignore[no-redef]

__all__ = ["NH_FUSIONS", "Epilogue", "Fuser", "epilogue", "exact_chunks"]

Fuser = Callable[[list[Operation], list[Any]], "tuple[Kernel, int] | None"]
"""``fuser(chain, operands) -> (kernel, n) | None``: ``chain`` is the producer and its
candidate successors, ``operands`` the producer's operands known at compile time (constants;
``None`` for run-time values). ``kernel`` takes the producer's operands and returns the
results of ``chain[n - 1]``."""

NH_FUSIONS: dict[type[Operation], Fuser] = {}

_MAX_CODE_BITS = 16
"""Widest code a fused chain produces: every code and clip bound is then a float32."""
_MAX_SHIFT = 31

_ROUND = {
    RoundingMode.TRUNC: np.trunc,
    RoundingMode.FLOOR: np.floor,
    RoundingMode.HALF_UP: np.floor,  # after adding 2**(s-1)
    RoundingMode.HALF_EVEN: np.rint,
}


def _register(*op_types: type[Operation]) -> Callable[[Fuser], Fuser]:
    def register(fuser: Fuser) -> Fuser:
        for t in op_types:
            NH_FUSIONS[t] = fuser
        return fuser

    return register


# --------------------------------------------------------------------------------------------
# The requant chain
# --------------------------------------------------------------------------------------------


def _shifts(op: nh.RequantOp, axis: int, channels: int) -> NDArray[np.int64] | None:
    """The requant's shifts as a ``[channels]`` vector along ``axis`` (one repeated when per
    tensor), or ``None`` when they run along another axis."""
    shifts = np.asarray(array_values(op.shift) or (0,), dtype=np.int64)
    if len(shifts) == 1:
        return np.repeat(shifts, channels)
    fx, fy = nh.fixed_of(op.input), nh.fixed_of(op.result)
    if (fx if fx.is_per_channel else fy).channel_axis != axis or len(shifts) != channels:
        return None
    return shifts


@dataclass(frozen=True)
class Epilogue:
    """What a requant chain does to a producer's exact integers ``v`` (see the module
    docstring). The producer computes ``(v + offset) * scale`` (exact: ``scale`` is ``2**-s``
    per channel) in a float array it owns; :meth:`apply` rounds and clips it into codes."""

    count: int
    """Ops of the chain it covers (the first requant included)."""
    scale: NDArray[np.float64]
    """``2**-s`` per channel of the first requant."""
    offset: NDArray[np.int64]
    """``2**(s-1)`` per channel for ``half_up`` (``s >= 1``), else 0."""
    round: Any
    """The float rounding of the first requant, or ``None``: the cast to integer codes
    truncates (trunc ending the chain), or the values are integers already."""
    exact_round: Any
    """The first requant's float rounding (``None``: integers already), for float codes."""
    stages: tuple[tuple[int, int, NDArray[np.float32] | None], ...]
    """Per requant: its clip range (narrowed by relu/clamp), and the next requant's
    ``2**-s`` shaped as :attr:`channel_shape` (``None`` for the last; float32 holds these
    powers of two exactly)."""
    dtype: np.dtype[Any]
    """The dtype the unfused chain gives its last value."""
    channel_shape: tuple[int, ...]
    """How a per-channel vector broadcasts against the producer's float array."""

    def apply(self, y: NDArray[Any], out: NDArray[Any] | None = None) -> NDArray[Any]:
        """The codes of ``y`` (rounded in place), in :attr:`dtype`, or written to ``out`` (an
        array of ``y``'s shape: the codes as floats when it is ``y`` itself)."""
        rnd = self.exact_round if out is not None and out.dtype.kind == "f" else self.round
        if rnd is not None:
            rnd(y, out=y)
        for lo, hi, then in self.stages[:-1]:
            _clip(y, y.dtype.type(lo), y.dtype.type(hi), out=y)
            y *= then  # type: ignore[misc]
        lo, hi, _ = self.stages[-1]
        if out is None:
            out = np.empty(y.shape, dtype=self.dtype)
        _clip(y, y.dtype.type(lo), y.dtype.type(hi), out=out, casting="unsafe")
        return out


def _narrowed(lo: int, hi: int, a: int | None, b: int | None) -> tuple[int, int] | None:
    """``clip(a, b)`` after ``clip(lo, hi)`` as one clip, or ``None`` when it is not one."""
    new_lo = lo if a is None else max(lo, a)
    new_hi = hi if b is None else min(hi, b)
    return (new_lo, new_hi) if new_lo <= new_hi else None


def _clamp_bounds(op: nh.ClampOp) -> tuple[int | None, int | None] | None:
    """The clamp's effective bounds, ``None`` when one is not a code (the kernel checks)."""
    width, signed = width_of(op.input), not nh.is_unsigned(op.input)
    lo, hi = code_range(width, signed)
    mn = None if op.min is None else op.min.value.data
    mx = None if op.max is None else op.max.value.data
    lower = None if mn is None or mn <= lo else mn
    upper = None if mx is None or mx >= hi else mx
    for v in (lower, upper):
        if v is not None and not (lo <= v <= hi) or width == 1:
            return None
    return lower, upper


def epilogue(
    chain: Sequence[Operation], axis: int, channel_shape: tuple[int, ...]
) -> Epilogue | None:
    """The longest prefix of ``chain`` (``nh.requant`` first) that :class:`Epilogue`
    computes exactly, for a producer whose result has its channels along ``axis``
    (``channel_shape``: how a ``[C]`` vector broadcasts against the producer's float array,
    ``C`` its only entry above 1); ``None`` when not even the first requant is."""
    channels = max(channel_shape)
    first = chain[0] if chain else None
    if not isinstance(first, nh.RequantOp):
        return None
    bits, signed = width_of(first.result), not nh.is_unsigned(first.result)
    shifts = _shifts(first, axis, channels)
    if shifts is None or not 2 <= bits <= _MAX_CODE_BITS:
        return None
    if int(np.abs(shifts).max(initial=0)) > _MAX_SHIFT:
        return None
    mode = RoundingMode(first.rounding.data)
    dtype = code_dtype(bits, signed=signed)
    lo, hi = code_range(bits, signed)
    stages: list[tuple[int, int, NDArray[np.float32] | None]] = []
    count = 1
    for op in chain[1:]:
        if isinstance(op, nh.ReluOp):
            got = _narrowed(lo, hi, 0, None)
        elif isinstance(op, nh.ClampOp):
            bounds = _clamp_bounds(op)
            got = None if bounds is None else _narrowed(lo, hi, *bounds)
            storage = code_dtype(width_of(op.input), signed=not nh.is_unsigned(op.input))
            if got is not None and dtype.itemsize < storage.itemsize:
                dtype = storage
        elif isinstance(op, nh.RequantOp):
            nbits, nsigned = width_of(op.result), not nh.is_unsigned(op.result)
            more = _shifts(op, axis, channels)
            if more is None or not 2 <= nbits <= _MAX_CODE_BITS:
                break
            if int(more.max(initial=0)) > 0 or int(more.min(initial=0)) < -_MAX_CODE_BITS:
                break  # a right shift would round a second time: not in one float pass
            scale = np.ldexp(np.float32(1), -more).astype(np.float32).reshape(channel_shape)
            stages.append((lo, hi, scale))
            lo, hi = code_range(nbits, nsigned)
            dtype = code_dtype(nbits, signed=nsigned)
            got = (lo, hi)
        else:
            break
        if got is None:
            break
        lo, hi = got
        count += 1
    stages.append((lo, hi, None))
    half = mode is RoundingMode.HALF_UP
    offset = (
        np.where(shifts > 0, np.int64(1) << np.maximum(shifts - 1, 0), 0) if half else 0 * shifts
    )
    exact = _ROUND[mode] if int(shifts.max(initial=0)) > 0 else None  # else integers already
    rnd = None if mode is RoundingMode.TRUNC and len(stages) == 1 else exact
    return Epilogue(
        count,
        np.ldexp(1.0, -shifts),
        offset.astype(np.int64),
        rnd,
        exact,
        tuple(stages),
        dtype,
        channel_shape,
    )


# --------------------------------------------------------------------------------------------
# Products
# --------------------------------------------------------------------------------------------


def exact_chunks(
    w_abs: NDArray[np.int64], x_bound: int, limit: int = F32_EXACT
) -> list[tuple[int, int]] | None:
    """Split the reduction ``[0, K)`` of ``sum_k x[k] * w[o, k]`` into the fewest consecutive
    chunks (greedily) in which ``x_bound * sum_k |w[o, k]| <= limit`` for every row ``o``:
    every partial sum of a chunk is then exact in a float whose integers are exact up to
    ``limit``. ``None`` when a single term can exceed it.

    >>> w = np.array([[3, 3, 3, 3], [1, 1, 1, 5]])
    >>> exact_chunks(w, 2, 12)        # row sums within a chunk at most 6
    [(0, 2), (2, 4)]
    >>> exact_chunks(w, 2, 24)
    [(0, 4)]
    >>> exact_chunks(w, 2, 9) is None  # 2 * 5 > 9
    True
    """
    rows, inner = w_abs.shape
    if x_bound <= 0 or rows == 0:
        return [(0, inner)]
    budget = limit // x_bound
    if int(w_abs.max(initial=0)) > budget:
        return None
    prefix = np.zeros((rows, inner + 1), dtype=np.int64)
    np.cumsum(w_abs, axis=1, out=prefix[:, 1:])
    chunks: list[tuple[int, int]] = []
    start = 0
    while start < inner:
        reach = prefix[:, start] + budget
        end = int(((prefix <= reach[:, None]).sum(axis=1) - 1).min())
        chunks.append((start, end))
        start = end
    return chunks or [(0, 0)]


@dataclass(frozen=True)
class _ExactProduct:
    """``sum_k x[k] * w[o, k] * scale[o] + add[o]`` exactly, from float32 BLAS products.

    The reduction is given as *views*: column matrices ``[N, G, K_v, P]`` whose products with
    the weight's matching columns ``[G, O/G, K_v]`` sum to the result (one view: the im2col
    matrix; or one per kernel row, :func:`fuse_conv`). Each piece is one product of a view's
    rows ``k0:k1``, the epilogue's ``2**-s`` folded into its weight rows. When the whole
    bound is within ``2**24`` the pieces are the views, summed in float32; else each view is
    split by :func:`exact_chunks` and the pieces are summed in float64."""

    pieces: tuple[tuple[int, int, int, NDArray[np.float32]], ...]
    """``(view, k0, k1, weight [G, O/G, k1 - k0])``."""
    wide: bool
    """Sum the pieces in float64 (the whole bound exceeds float32's exact range)."""
    add: NDArray[Any] | None
    """``(bias + offset) * scale`` per row, in the dtype of the sum, or ``None``."""

    @classmethod
    def make(
        cls,
        views: Sequence[NDArray[Any]],
        b: NDArray[Any] | None,
        x_bound: int,
        epi: Epilogue,
        groups: int,
    ) -> _ExactProduct | None:
        """From each view's integer weight columns ``[O, K_v]``; ``None`` where the unfused
        kernel could fail (the worst case past i32) or no split is exact."""
        mats = [np.asarray(v, dtype=np.int64) for v in views]
        rows = mats[0].shape[0]
        if rows == 0 or rows % groups or not any(m.shape[1] for m in mats):
            return None
        absolute = [np.abs(m) for m in mats]
        bias = np.zeros(rows, np.int64) if b is None else np.asarray(b, np.int64).reshape(rows)
        worst = x_bound * sum(a.sum(axis=1) for a in absolute)
        if int((worst + np.abs(bias)).max()) > ACC_LIMIT:
            return None  # the unfused product checks its accumulator at run time
        add = bias + epi.offset
        wide = int((worst + np.abs(add)).max()) > F32_EXACT
        spans: list[tuple[int, int, int]] = []
        for v, a in enumerate(absolute):
            found = exact_chunks(a, x_bound) if wide else [(0, a.shape[1])]
            if found is None:
                return None
            spans.extend((v, k0, k1) for k0, k1 in found if k1 > k0)
        pieces = tuple(
            (
                v,
                k0,
                k1,
                # exact: codes times 2**-s, a power of two
                np.ascontiguousarray(
                    (mats[v][:, k0:k1] * epi.scale[:, None])
                    .astype(np.float32)
                    .reshape(groups, rows // groups, k1 - k0)
                ),
            )
            for v, k0, k1 in spans
        )
        addf: NDArray[Any] | None = None
        if bool(np.any(add)):
            addf = (add.astype(np.float64) * epi.scale).astype(np.float64 if wide else np.float32)
        return cls(pieces, wide, addf)

    def __call__(self, views: Sequence[NDArray[np.float32]], batch: int, rows: int) -> NDArray[Any]:
        """The ``[N, O, P]`` sums (float32, or float64 when wide) of the views' products."""
        y: NDArray[Any] | None = None
        for v, k0, k1, wc in self.pieces:
            view = views[v]
            part = np.matmul(wc, view if k1 - k0 == view.shape[2] else view[:, :, k0:k1])
            if y is None:
                y = part.astype(np.float64) if self.wide else part
            else:
                y += part
        assert y is not None
        y = y.reshape(batch, rows, views[0].shape[-1])
        if self.add is not None:
            y += self.add.reshape(rows, 1)
        return y


def _kernel_rows(geometry: ConvGeometry, group_channels: int) -> bool:
    """Whether a conv computes from kernel-row views (:func:`_row_views`): 2-D, stride 1
    along H with more than one kernel row, and enough columns per product to keep BLAS busy."""
    return (
        len(geometry.kernel) == 2
        and geometry.strides[0] == 1
        and geometry.kernel[0] > 1
        and group_channels * geometry.kernel[1] >= 32
    )


def _row_views(
    geometry: ConvGeometry, xp: NDArray[np.float32], out: tuple[int, ...]
) -> list[NDArray[np.float32]]:
    """Per kernel row ``r``, the ``[N, G, C/G * KW, OH * OW]`` column matrix of that row's
    taps, as views of one copy: ``cols[n, c, t, y, j] = xp[n, c, y, j * s + t * d]`` (every
    row ``y`` of the padded input ``xp``, the taps of W copied), and row ``r``'s matrix
    starts ``r * dh`` rows into each ``[Hp, OW]`` block, where its ``OH * OW`` positions
    lie contiguous. A third of im2col's copy for a 3x3 kernel; BLAS reads the views in place
    (their rows are strided)."""
    (kh, kw), (_, sw), (_, dw) = geometry.kernel, geometry.strides, geometry.dilations
    g = geometry.groups
    batch, channels, hp, _ = xp.shape
    oh, ow = out
    cols = np.empty((batch, channels, kw, hp, ow), dtype=np.float32)
    for t in range(kw):
        cols[:, :, t] = xp[:, :, :, t * dw : t * dw + sw * (ow - 1) + 1 : sw]
    item = cols.itemsize
    block = hp * ow * item
    k = channels // g * kw
    shape = (batch, g, k, oh * ow)
    strides = (channels * kw * block, k * block, block, item)
    dh = geometry.dilations[0]
    return [
        np.ndarray(shape, np.float32, buffer=cols, offset=r * dh * ow * item, strides=strides)
        for r in range(kh)
    ]


@_register(nh.ConvOp)
def fuse_conv(chain: list[Operation], operands: list[Any]) -> tuple[Kernel, int] | None:
    """``nh.conv`` with constant weights (and bias) and its requant chain: the column matrix
    (im2col, :meth:`ConvGeometry.columns`, or kernel-row views, :func:`_row_views`), the
    :class:`_ExactProduct`, the :class:`Epilogue`."""
    op = chain[0]
    assert isinstance(op, nh.ConvOp)
    w, b = operands[1], operands[2] if len(operands) > 2 else None
    if w is None or (op.bias is not None and b is None):
        return None
    rows, group_channels = w.shape[:2]
    epi = epilogue(chain[1:], 1, (rows, 1))
    if epi is None:
        return None
    geometry = ConvGeometry.of(op)
    lo, hi = nh.value_code_range(op.input)
    by_rows = _kernel_rows(geometry, group_channels)
    # the weight columns in each view's order: [C/G, KH, KW] flattened, or per kernel row
    views = (
        [w[:, :, r].reshape(rows, -1) for r in range(w.shape[2])]
        if by_rows
        else [w.reshape(rows, -1)]
    )
    product = _ExactProduct.make(views, b, max(-lo, hi), epi, geometry.groups)
    if product is None:
        return None

    def run(x: NDArray[Any], *_: Any) -> tuple[Any, ...]:
        out = geometry.out_sizes(op, x.shape)
        xp = geometry.padded(x, np.dtype(np.float32))
        if by_rows:
            cols = _row_views(geometry, xp, out)
        else:
            cols = [geometry.columns_of_padded(xp, out)]
        y = product(cols, x.shape[0], rows)
        return (epi.apply(y).reshape(x.shape[0], rows, *out),)

    return run, 1 + epi.count


@_register(nh.LinearOp)
def fuse_linear(chain: list[Operation], operands: list[Any]) -> tuple[Kernel, int] | None:
    """``nh.linear`` with a constant weight (and bias) and its requant chain."""
    op = chain[0]
    assert isinstance(op, nh.LinearOp)
    w, b = operands[1], operands[2] if len(operands) > 2 else None
    if w is None or (op.bias is not None and b is None):
        return None
    rank = len(tensor_shape(op.result))
    rows = w.shape[0]
    epi = epilogue(chain[1:], rank - 1, (rows, 1))
    if epi is None:
        return None
    lo, hi = nh.value_code_range(op.input)
    product = _ExactProduct.make([w], b, max(-lo, hi), epi, 1)
    if product is None:
        return None

    def run(x: NDArray[Any], *_: Any) -> tuple[Any, ...]:
        lead = x.shape[:-1]
        # [O, K] @ [K, M]: the rows of x as columns (one product for every leading index)
        cols = np.asarray(x, dtype=np.float32).reshape(-1, x.shape[-1]).T[None, None]
        codes = epi.apply(product([cols], 1, rows)[0])  # [O, M]
        return (codes.T.reshape(*lead, rows),)

    return run, 1 + epi.count


def _static_range(op: Operation) -> tuple[int, int]:
    a, b = (nh.value_code_range(v) for v in op.operands)
    if isinstance(op, nh.AddOp):
        return a[0] + b[0], a[1] + b[1]
    return a[0] - b[1], a[1] - b[0]


def _layout(op: Operation, first: Operation | None) -> tuple[int, tuple[int, ...]] | None:
    """The channel axis of ``first`` (a requant of ``op``'s result) and the shape a
    ``[C]`` vector of its shifts takes against that result; ``None`` when not a requant or
    its channels are not a static dim of the result."""
    if not isinstance(first, nh.RequantOp):
        return None
    shape = tensor_shape(op.results[0])
    rank = len(shape)
    fx, fy = nh.fixed_of(first.input), nh.fixed_of(first.result)
    per = fx if fx.is_per_channel else fy
    axis = per.channel_axis if per.is_per_channel and per.channel_axis is not None else 0
    channels = len(array_values(first.shift) or (0,))
    if channels > 1 and (axis >= rank or shape[axis] != channels):
        return None
    if rank == 0:
        return (0, ()) if channels == 1 else None
    return axis, tuple(channels if d == axis else 1 for d in range(rank))


def _scaled(
    x: NDArray[Any], offset: NDArray[Any] | None, scale: NDArray[Any] | None
) -> NDArray[Any]:
    """``(x + offset) * scale`` as a new float32 array (exact: see the callers' bounds)."""
    if offset is not None:
        y = np.add(x, offset, dtype=np.float32)
        if scale is not None:
            y *= scale
        return y
    if scale is not None:
        return np.multiply(x, scale, dtype=np.float32)
    return np.asarray(x, dtype=np.float32).copy() if x.dtype == np.float32 else x.astype(np.float32)


def _offset_scale(
    epi: Epilogue, channel_shape: tuple[int, ...]
) -> tuple[NDArray[Any] | None, NDArray[Any] | None]:
    offset = epi.offset.astype(np.float32).reshape(channel_shape) if np.any(epi.offset) else None
    scale = epi.scale.astype(np.float32).reshape(channel_shape) if np.any(epi.scale != 1) else None
    return offset, scale


@_register(nh.RequantOp)
def fuse_requant(chain: list[Operation], operands: list[Any]) -> tuple[Kernel, int] | None:
    """``nh.requant`` of codes of at most 16 bits (and the relu/clamp/requant after it): the
    codes to float32, ``(x + offset) * 2**-s``, rounded and clipped there (exact: ``|x|`` and
    the half_up offset within ``2**24``)."""
    op = chain[0]
    assert isinstance(op, nh.RequantOp)
    lo, hi = nh.value_code_range(op.input)
    layout = _layout(op, op) if max(-lo, hi) <= 2**_MAX_CODE_BITS else None
    if layout is None:
        return None
    # the requant reads op.input: its shape is the result's
    epi = epilogue(chain, *layout)
    if epi is None or max(-lo, hi) + int(epi.offset.max(initial=0)) > F32_EXACT:
        return None
    offset, scale = _offset_scale(epi, layout[1])

    def run(x: NDArray[Any]) -> tuple[Any, ...]:
        return (epi.apply(_scaled(x, offset, scale)),)

    return run, epi.count


@_register(nh.AddOp, nh.SubOp)
def fuse_add(chain: list[Operation], operands: list[Any]) -> tuple[Kernel, int] | None:
    """``nh.add``/``nh.sub`` and its requant chain: the sum in float32 (exact: both operands'
    declared ranges and the half_up offset within ``2**24``), scaled and rounded there."""
    op = chain[0]
    layout = _layout(op, chain[1] if len(chain) > 1 else None)
    if layout is None:
        return None
    epi = epilogue(chain[1:], *layout)
    if epi is None:
        return None
    smin, smax = _static_range(op)
    width = width_of(op.results[0])
    rlo, rhi = code_range(width)
    if not (rlo <= smin and smax <= rhi and width > 1):
        return None  # the unfused add checks its result at run time
    if max(-smin, smax) + int(epi.offset.max(initial=0)) > F32_EXACT:
        return None
    add = np.add if isinstance(op, nh.AddOp) else np.subtract
    offset, scale = _offset_scale(epi, layout[1])

    def run(a: NDArray[Any], b: NDArray[Any]) -> tuple[Any, ...]:
        y = add(a, b, dtype=np.float32)
        if offset is not None:
            y += offset
        if scale is not None:
            y *= scale
        return (epi.apply(y),)

    return run, 1 + epi.count
