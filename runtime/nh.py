"""Kernels of the nh dialect: integer-exact NumPy execution of hardware-level programs.

One builder per nh op (``NH_BUILDERS``), in the table format of
:mod:`nanoir.runtime.interpreter`: ``builder(op, dtype) -> kernel(*arrays) -> tuple``. The
plan's ``dtype`` is ignored: every nh value is an integer array. The op docstrings in
:mod:`nanoir.dialects.nh` are the specification; these kernels are its executable form.

Integer conventions
-------------------
- A value is a NumPy array of codes in a *signed integer dtype wide enough for its declared
  width*: constants and i32 accumulators are int32, requant and lut results the narrowest
  dtype of their width (:func:`nanoir.runtime.numerics.quant.code_dtype`: i1..i8 -> int8), exact
  elementwise arithmetic int64, and data-movement ops keep their input's dtype. A kernel
  never computes in its inputs' dtype where the result could be wider.
- Every value's codes fit its declared width: function inputs are range-checked on entry
  (``interpreter.check_input``), constants by the verifier, and each kernel either proves
  statically that its result fits (e.g. ``nh.add`` of two i8 into i16) or checks the actual
  values and raises :class:`ExecutionError` naming the op and the offending value. ``i1``
  codes are -1 and +1, never 0.
- Nothing goes through floats except the exact BLAS products below; real values
  (``code * 2**-exp``) appear only in :func:`dequantize_outputs`.

Exact BLAS
----------
``nh.conv``, ``nh.linear`` and ``nh.matmul`` are integer sums of products, but NumPy's integer
matmul does not use BLAS and is ~50x slower. Floats are exact on integers up to ``2**24``
(float32) and ``2**53`` (float64), and a BLAS sum of integer-valued floats is exact, in any
summation order and with or without FMA, as long as every partial sum stays in that range.
With ``A`` and ``B`` bounds on the operands' ``|code|``, a partial sum over ``L`` terms is at
most ``L * A * B``. :func:`plan_exact_matmul` therefore splits the reduction dim into chunks of
``L <= 2**24 / (A * B)`` (int8 x int8: ``A * B <= 2**14``, 1024 terms per chunk), runs one
float32 matmul per chunk, converts each chunk's result (an exact integer) to an integer
array and accumulates there. When that chunk would be too short to be worth a BLAS call
it uses float64 chunks (``L <= 2**53 / (A * B)``), and for operands so wide that a single
product is not exact in float64 it falls back to Python integers (``dtype=object``), slow but
exact. The bounds come from the declared widths, from the actual codes of a constant operand
(computed once, cached with its float copy) and, for a wide (> i8) run-time operand, from its
actual min and max. The accumulator is int32 when the worst case ``K * A * B + max|bias|``
provably fits i32; otherwise int64 (or Python ints), followed by a range check of the result
against i32.

Abbreviations: acc = accumulator, im2col = the column matrix of a convolution (one column of
window taps per output position), lut = lookup table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nh import FixedAttr, code_range, width_of
from nanoir.runtime.base import Builder, ExecutionError, Kernel, as_array
from nanoir.runtime.numerics import bicubic as bicubic_numerics
from nanoir.runtime.numerics import compare as compare_numerics
from nanoir.runtime.numerics import embedding, kernels, movement, norm, quant, unpool, upsample
from nanoir.runtime.numerics import l2norm as l2_numerics
from nanoir.runtime.numerics import recurrent as recurrent_numerics
from nanoir.runtime.numerics import reduce as reduce_numerics
from nanoir.runtime.numerics import softmax as softmax_numerics
from nanoir.runtime.numerics.accumulator import F32_EXACT, F64_EXACT, MIN_F32_CHUNK
from nanoir.runtime.numerics.quant import div_round, requant_codes
from nanoir.runtime.numerics.shapes import pool_output_size, window_params
from numpy.typing import DTypeLike, NDArray
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

__all__ = [
    "F32_EXACT",
    "F64_EXACT",
    "ConvGeometry",
    "MIN_F32_CHUNK",
    "NH_BUILDERS",
    "MatmulPlan",
    "dequantize",
    "dequantize_outputs",
    "exact_matmul",
    "output_exponents",
    "plan_exact_matmul",
]

IntArray = NDArray[np.signedinteger[Any]]
ArrayLikeInt = Any
"""An int or an integer array (NumPy's ArrayLike also admits floats, which are refused)."""

_I32_MAX = code_range(32)[1]

NH_BUILDERS: dict[type[Operation], Builder] = {}


def impl(op_type: type[Operation]) -> Callable[[Builder], Builder]:
    """Register the builder of ``op_type``'s kernel."""

    def register(builder: Builder) -> Builder:
        NH_BUILDERS[op_type] = builder
        return builder

    return register


# --------------------------------------------------------------------------------------------
# Pure integer helpers
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Exact matrix products through BLAS
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulPlan:
    """How to compute an exact integer product with a reduction of ``inner`` terms."""

    float_dtype: np.dtype[Any]
    """float32, float64, or object (Python ints) for operands too wide for float64."""
    chunk: int
    """Reduction terms per BLAS call: every partial sum of a chunk is exact in float_dtype."""
    acc_dtype: np.dtype[Any]
    """Where the chunk results are summed: int32 when the worst case fits i32, else wider."""
    fits_i32: bool
    """True when the worst case ``inner * A * B + max|bias|`` proves the result fits i32."""


def _balanced(inner: int, longest: int) -> int:
    """The chunk length that splits ``inner`` terms into equal chunks of at most ``longest``."""
    inner = max(inner, 1)
    pieces = -(-inner // max(longest, 1))
    return -(-inner // pieces)


def plan_exact_matmul(inner: int, a_bound: int, b_bound: int, bias_bound: int = 0) -> MatmulPlan:
    """Choose float dtype, chunk length and accumulator for ``sum_k a[k] * b[k]`` (+ bias).

    ``a_bound``/``b_bound`` bound ``|a|``/``|b|``; see the module docstring for why the
    chosen chunk keeps every partial sum exact.

    >>> p = plan_exact_matmul(4608, 128, 128)     # ResNet-18 layer4: 9 * 512 int8 terms
    >>> str(p.float_dtype), p.chunk, str(p.acc_dtype), p.fits_i32
    ('float32', 922, 'int32', True)
    >>> str(plan_exact_matmul(100, 2**20, 2**20).float_dtype)    # 2**24 / 2**40 < 1 term
    'float64'
    >>> str(plan_exact_matmul(100, 2**31, 2**31).float_dtype)    # one product > 2**53
    'object'
    """
    product = a_bound * b_bound
    worst = inner * product + bias_bound
    if product <= F32_EXACT // max(min(inner, MIN_F32_CHUNK), 1):
        dtype, longest = np.dtype(np.float32), F32_EXACT // max(product, 1)
    elif product <= F64_EXACT:
        dtype, longest = np.dtype(np.float64), F64_EXACT // product
    else:
        dtype, longest = np.dtype(object), inner
    if worst <= _I32_MAX:
        acc = np.dtype(np.int32)
    elif worst < 2**63:
        acc = np.dtype(np.int64)
    else:
        acc = np.dtype(object)
    return MatmulPlan(dtype, _balanced(inner, longest), acc, worst <= _I32_MAX)


def _as_operand(a: IntArray, dtype: np.dtype[Any]) -> NDArray[Any]:
    """Codes as the plan's float dtype (exact: they are within its exact range)."""
    if dtype.kind == "O":
        return a.astype(np.int64).astype(object)
    return a.astype(dtype)


def _chunked_matmul(a: NDArray[Any], b: NDArray[Any], plan: MatmulPlan) -> NDArray[Any]:
    """``a @ b`` (NumPy matmul broadcasting; both at least 2-D) summed chunk by chunk along the
    reduction dim, each chunk's exact result converted to ``plan.acc_dtype``."""
    inner = a.shape[-1]
    acc: NDArray[Any] | None = None
    for k0 in range(0, max(inner, 1), plan.chunk):
        part = np.matmul(a[..., k0 : k0 + plan.chunk], b[..., k0 : k0 + plan.chunk, :])
        part = part.astype(plan.acc_dtype)  # exact: integer-valued, within the float's range
        if acc is None:
            acc = part
        else:
            acc += part
    assert acc is not None
    return acc


def exact_matmul(
    a: IntArray, b: IntArray, a_bound: int | None = None, b_bound: int | None = None
) -> NDArray[np.int64]:
    """``np.matmul(a, b)`` of integer arrays, exactly, through BLAS; the result is int64.

    The bounds default to the actual ``max |a|`` and ``max |b|``. The nh product kernels use
    the same plan with their operands' bounds; the tests check it against int64 products.

    >>> a = np.full((1, 3000), -128, np.int8); b = np.full((3000, 1), -128, np.int8)
    >>> int(exact_matmul(a, b)[0, 0]) == 3000 * 2**14     # 2**24 is passed 3 times over
    True
    """
    a_bound = _absmax(a) if a_bound is None else a_bound
    b_bound = _absmax(b) if b_bound is None else b_bound
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    plan = plan_exact_matmul(a2.shape[-1], a_bound, b_bound)
    y = _chunked_matmul(_as_operand(a2, plan.float_dtype), _as_operand(b2, plan.float_dtype), plan)
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return np.asarray(y).astype(np.int64)


def _absmax(a: NDArray[Any]) -> int:
    """``max |a|`` as a Python int (``np.abs`` would overflow on the dtype's minimum)."""
    if a.size == 0:
        return 0
    return max(-int(a.min()), int(a.max()))


class _Operand:
    """What a product kernel knows about one operand: a bound on its codes, and for a
    constant (an ``nh.constant`` result, the same read-only array on every call) its actual
    ``max |code|`` and float copies, computed once."""

    def __init__(self, value: SSAValue):
        self.width = width_of(value)
        lo, hi = nh.value_code_range(value)  # ui8: up to 255
        self.declared = max(-lo, hi)
        self.constant = isinstance(value.owner, nh.ConstantOp)
        self._source: NDArray[Any] | None = None
        self._absmax = 0
        self._floats: dict[tuple[np.dtype[Any], tuple[int, ...]], NDArray[Any]] = {}

    def _is_cached(self, a: NDArray[Any]) -> bool:
        if not self.constant:
            return False
        if a is not self._source:
            self._source, self._absmax, self._floats = a, _absmax(a), {}
        return True

    def bound(self, a: NDArray[Any]) -> int:
        if self._is_cached(a):
            return self._absmax
        # The declared width is free; a wide run-time operand is worth two reductions.
        return self.declared if self.width <= 8 else min(self.declared, _absmax(a))

    def floats(self, a: NDArray[Any], dtype: np.dtype[Any], shape: tuple[int, ...]) -> NDArray[Any]:
        """``a`` reshaped to ``shape`` in ``dtype`` (cached for constants)."""
        if not self._is_cached(a):
            return _as_operand(a.reshape(shape), dtype)
        key = (dtype, shape)
        if key not in self._floats:
            self._floats[key] = _as_operand(a.reshape(shape), dtype)
        return self._floats[key]


def _name(op: Operation) -> str:
    """The op and, when it has one, its result's SSA name: ``nh.conv (%acc)``."""
    hints = [r.name_hint for r in op.results if r.name_hint]
    return f"{op.name} (%{hints[0]})" if hints else op.name


def _first_outside(y: NDArray[Any], lo: int, hi: int) -> tuple[int, tuple[int, ...]] | None:
    bad = (y < lo) | (y > hi)
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return int(y[index]), index


def _check_fits(
    op: Operation, y: NDArray[Any], width: int, what: str = "result", signed: bool = True
) -> None:
    """Raise unless every code of ``y`` is a valid ``i<width>`` code (``i1``: -1 or +1;
    ``signed=False``: a ``ui<width>`` code)."""
    if y.size == 0:
        return
    lo, hi = code_range(width, signed)
    found = _first_outside(y, lo, hi)
    if found is None and width == 1:
        zeros = np.argwhere(y == 0)
        found = (0, tuple(int(i) for i in zeros[0])) if zeros.size else None
    if found is not None:
        value, index = found
        allowed = "-1 or +1" if width == 1 else f"{lo}..{hi}"
        raise ExecutionError(
            f"{_name(op)}: {what} value {value} at index {index} (shape {tuple(y.shape)}) "
            f"does not fit {'' if signed else 'u'}i{width} ({allowed}); the program's types "
            "are wrong for this input"
        )


def _finish_accumulator(op: Operation, acc: NDArray[Any], plan: MatmulPlan) -> NDArray[np.int32]:
    """The i32 result: range-checked unless the plan proved it fits."""
    if not plan.fits_i32:
        _check_fits(op, acc, 32, "accumulator")
    return acc.astype(np.int32, copy=False)


# --------------------------------------------------------------------------------------------
# Constants and products into i32
# --------------------------------------------------------------------------------------------


@impl(nh.ConstantOp)
def constant(op: nh.ConstantOp, dtype: np.dtype[Any]) -> Kernel:
    """The stored codes as a read-only int32 array (every nh width fits i32)."""
    codes = op.codes().astype(np.int32)
    codes.flags.writeable = False
    return lambda: (codes,)


def _padded(
    x: IntArray, begins: Sequence[int], ends: Sequence[int], dtype: DTypeLike, fill: Any
) -> NDArray[Any]:
    """``x`` converted to ``dtype`` and padded over its trailing dims with ``fill``."""
    n = len(begins)
    if not any(begins) and not any(ends):
        return np.asarray(x, dtype=dtype)
    spatial = x.shape[x.ndim - n :]
    shape = (*x.shape[: x.ndim - n], *(s + b + e for s, b, e in zip(spatial, begins, ends)))
    out = np.full(shape, fill, dtype=dtype)
    out[(Ellipsis, *(slice(b, b + s) for b, s in zip(begins, spatial)))] = x
    return out


def _tap_views(
    xp: NDArray[Any],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> Iterator[tuple[tuple[int, ...], NDArray[Any]]]:
    """Yield ``(tap, view)`` per kernel position: ``view[..., o] = xp[..., o * s + tap * d]``."""
    for tap in itertools.product(*(range(k) for k in kernel)):
        yield (
            tap,
            xp[
                (
                    Ellipsis,
                    *(
                        slice(t * d, t * d + s * (o - 1) + 1, s)
                        for t, d, s, o in zip(tap, dilations, strides, out)
                    ),
                )
            ],
        )


@dataclass(frozen=True)
class ConvGeometry:
    """An ``nh.conv``'s window over its ``n`` spatial dims, defaults filled in, and the im2col
    both the conv kernel and its fused form (:mod:`nanoir.runtime.fused`) compute with."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    begins: tuple[int, ...]
    ends: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int

    @classmethod
    def of(cls, op: nh.ConvOp) -> ConvGeometry:
        kernel_shape = op.weight.type.get_shape()[2:]  # type: ignore[union-attr]
        n = len(kernel_shape)
        kernel, strides, pads, dilations = window_params(
            n,
            kernel_shape,
            array_values(op.strides),
            array_values(op.pads),
            array_values(op.dilations),
        )
        return cls(kernel, strides, pads[:n], pads[n:], dilations, op.groups.value.data)

    def out_sizes(self, op: Operation, x_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The output's spatial sizes for an input of ``x_shape``; a padded input shorter
        than the window is an :class:`ExecutionError` naming the op and the dim, as torch's
        conv (and the float kernel, ``conv_output_size``) refuses it."""
        out = []
        for i, size in enumerate(x_shape[2:]):
            span = self.dilations[i] * (self.kernel[i] - 1) + 1
            padded = size + self.begins[i] + self.ends[i]
            n = (padded - span) // self.strides[i] + 1
            if padded < span:
                raise ExecutionError(
                    f"{_name(op)}: the input is too short along dim {2 + i}: {size} rows "
                    f"(padded to {padded}) for a window of {span} rows (input shape "
                    f"{tuple(x_shape)})"
                )
            out.append(n)
        return tuple(out)

    def padded(self, x: IntArray, dtype: np.dtype[Any]) -> NDArray[Any]:
        """``x`` in ``dtype``, zero-padded over its spatial dims."""
        return _padded(x, self.begins, self.ends, dtype, 0)

    def columns(self, x: IntArray, out: Sequence[int], dtype: np.dtype[Any]) -> NDArray[Any]:
        """The column matrix ``[N, G, C/G * prod(K), prod(out)]`` of the zero-padded input in
        ``dtype``: ``cols[n, c, *tap, *o] = xp[n, c, o * s + tap * d]``, one strided copy
        per tap; ``[C, *K]`` flattens in the weight's ``[O, C * K]`` order."""
        return self.columns_of_padded(self.padded(x, dtype), out)

    def columns_of_padded(self, xp: NDArray[Any], out: Sequence[int]) -> NDArray[Any]:
        """:meth:`columns` of an input already padded (or a slice of one), in its dtype."""
        batch, channels = xp.shape[:2]
        positions = math.prod(out)
        inner = channels // self.groups * math.prod(self.kernel)
        if math.prod(self.kernel) == 1 and all(s == 1 for s in self.strides):
            # A 1x1 stride-1 conv needs no im2col: the (converted) input is the column matrix.
            return np.ascontiguousarray(xp).reshape(batch, self.groups, inner, positions)
        cols = np.empty((batch, channels, *self.kernel, *out), dtype=xp.dtype)
        if math.prod(self.kernel) >= 4 * math.prod(self.strides) > 4:
            # Strided taps read every s-th element; split the input into its prod(s) phases
            # once (xp[..., p + s * i] = phase p, row i), and every tap is a stride-1 window of
            # one phase. Measured on ResNet-18's 7x7/2 conv: 0.6 ms instead of 0.87 (a 3x3/2
            # kernel reuses a phase too little to gain).
            phases = _phases(xp, self.strides)
            for tap in itertools.product(*(range(k) for k in self.kernel)):
                offsets = [t * d for t, d in zip(tap, self.dilations)]
                cols[(slice(None), slice(None), *tap)] = phases[
                    (
                        slice(None),
                        slice(None),
                        *(o % s for o, s in zip(offsets, self.strides)),
                        *(slice(o // s, o // s + n) for o, s, n in zip(offsets, self.strides, out)),
                    )
                ]
        else:
            for tap, view in _tap_views(xp, self.kernel, self.strides, self.dilations, out):
                cols[(slice(None), slice(None), *tap)] = view
        return cols.reshape(batch, self.groups, inner, positions)


def _phases(xp: NDArray[Any], strides: Sequence[int]) -> NDArray[Any]:
    """``ph[n, c, *p, *i] = xp[n, c, *(p + s * i)]`` (zeros past the end): the input's
    ``prod(s)`` phases, each contiguous."""
    n = len(strides)
    lead, spatial = xp.shape[:-n], xp.shape[-n:]
    rows = [-(-size // s) for size, s in zip(spatial, strides)]
    if any(r * s != size for r, s, size in zip(rows, strides, spatial)):
        grown = np.zeros((*lead, *(r * s for r, s in zip(rows, strides))), dtype=xp.dtype)
        grown[(Ellipsis, *(slice(0, size) for size in spatial))] = xp
        xp = grown
    split = xp.reshape(*lead, *(v for r, s in zip(rows, strides) for v in (r, s)))
    k = len(lead)
    order = [*range(k), *(k + 2 * i + 1 for i in range(n)), *(k + 2 * i for i in range(n))]
    return np.ascontiguousarray(split.transpose(order))


@impl(nh.ConvOp)
def conv(op: nh.ConvOp, dtype: np.dtype[Any]) -> Kernel:
    """Grouped N-d convolution: im2col of the zero-padded input, then an exact chunked matmul."""
    geometry = ConvGeometry.of(op)
    groups, taps = geometry.groups, math.prod(geometry.kernel)
    xin, win = _Operand(op.input), _Operand(op.weight)
    bin_ = _Operand(op.bias) if op.bias is not None else None

    def run(x: IntArray, w: IntArray, b: IntArray | None = None) -> tuple[Any, ...]:
        batch = x.shape[0]
        out_channels, group_channels = w.shape[:2]
        out = geometry.out_sizes(op, x.shape)
        inner = group_channels * taps
        bias_bound = 0 if b is None or bin_ is None else bin_.bound(b)
        plan = plan_exact_matmul(inner, xin.bound(x), win.bound(w), bias_bound)
        cols = geometry.columns(x, out, plan.float_dtype)
        wg = win.floats(w, plan.float_dtype, (groups, out_channels // groups, inner))
        # [G, O/G, K] @ [N, G, K, P] -> [N, G, O/G, P] = [N, O, P]: groups are a batch dim.
        acc = _chunked_matmul(wg, cols, plan).reshape(batch, out_channels, math.prod(out))
        if b is not None:
            acc += b.reshape(out_channels, 1).astype(acc.dtype, copy=False)
        return (_finish_accumulator(op, acc, plan).reshape(batch, out_channels, *out),)

    return run


@impl(nh.ConvTransposeOp)
def conv_transpose(op: nh.ConvTransposeOp, dtype: np.dtype[Any]) -> Kernel:
    """Grouped N-d transposed convolution, exactly: ``kernels.conv_transpose`` (zero insertion,
    then a conv) in the narrowest dtype whose whole sums are exact (float32 up to ``2**24``,
    float64 up to ``2**53``, else int64 or Python ints), from the operands' bounds."""
    props = {
        "strides": array_values(op.strides),
        "pads": array_values(op.pads),
        "dilations": array_values(op.dilations),
        "output_padding": array_values(op.output_padding),
        "groups": op.groups.value.data,
    }
    xin, win = _Operand(op.input), _Operand(op.weight)
    bin_ = _Operand(op.bias) if op.bias is not None else None

    def run(x: IntArray, w: IntArray, b: IntArray | None = None) -> tuple[Any, ...]:
        # Each output sums at most (C/g) * prod(K) products.
        inner = max(math.prod(w.shape[2:]) * x.shape[1] // props["groups"], 1)  # type: ignore[operator]
        bias_bound = 0 if b is None or bin_ is None else bin_.bound(b)
        plan = plan_exact_matmul(inner, xin.bound(x), win.bound(w), bias_bound)
        worst = inner * xin.bound(x) * win.bound(w) + bias_bound
        if worst <= F32_EXACT:
            cdt: np.dtype[Any] = np.dtype(np.float32)
        elif worst <= F64_EXACT:
            cdt = np.dtype(np.float64)
        else:
            cdt = np.dtype(np.int64) if worst < 2**63 else np.dtype(object)
        y = kernels.conv_transpose(_as_operand(x, cdt), win.floats(w, cdt, tuple(w.shape)), **props)
        acc = y.astype(plan.acc_dtype)  # exact: integer-valued, within cdt's exact range
        if b is not None:
            acc += b.reshape(-1, *(1,) * (acc.ndim - 2)).astype(acc.dtype, copy=False)
        return (_finish_accumulator(op, acc, plan),)

    return run


@impl(nh.LinearOp)
def linear(op: nh.LinearOp, dtype: np.dtype[Any]) -> Kernel:
    """``x @ w.T + b`` over any leading dims, as an exact chunked matmul."""
    xin, win = _Operand(op.input), _Operand(op.weight)
    bin_ = _Operand(op.bias) if op.bias is not None else None

    def run(x: IntArray, w: IntArray, b: IntArray | None = None) -> tuple[Any, ...]:
        bias_bound = 0 if b is None or bin_ is None else bin_.bound(b)
        plan = plan_exact_matmul(x.shape[-1], xin.bound(x), win.bound(w), bias_bound)
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        wt = win.floats(w, plan.float_dtype, tuple(w.shape)).T
        acc = _chunked_matmul(_as_operand(x2, plan.float_dtype), wt, plan)
        if b is not None:
            acc += b.astype(acc.dtype, copy=False)
        y = _finish_accumulator(op, acc, plan)
        return (y.reshape(w.shape[0]) if x.ndim == 1 else y,)

    return run


@impl(nh.MatmulOp)
def matmul(op: nh.MatmulOp, dtype: np.dtype[Any]) -> Kernel:
    """``torch.matmul(lhs, rhs)`` (1-D operands promoted, then dropped), exactly."""
    lin, rin = _Operand(op.lhs), _Operand(op.rhs)

    def run(a: IntArray, b: IntArray) -> tuple[Any, ...]:
        plan = plan_exact_matmul(a.shape[-1], lin.bound(a), rin.bound(b))
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        b2 = b.reshape(-1, 1) if b.ndim == 1 else b
        acc = _chunked_matmul(
            lin.floats(a2, plan.float_dtype, tuple(a2.shape)),
            rin.floats(b2, plan.float_dtype, tuple(b2.shape)),
            plan,
        )
        if a.ndim == 1:
            acc = acc[..., 0, :]
        if b.ndim == 1:
            acc = acc[..., 0]
        return (_finish_accumulator(op, np.asarray(acc), plan),)

    return run


# --------------------------------------------------------------------------------------------
# Exact elementwise arithmetic
# --------------------------------------------------------------------------------------------


def _static_range(op: Operation, fn: Callable[[int, int], int]) -> tuple[int, int]:
    """The result range of ``fn`` over the operands' declared code ranges (its extremes lie at
    the ranges' corners for +, - and *)."""
    a = nh.value_code_range(op.operands[0])
    b = nh.value_code_range(op.operands[1])
    corners = [fn(x, y) for x in a for y in b]
    return min(corners), max(corners)


def _elementwise(
    fn: Callable[[NDArray[np.int64], IntArray], NDArray[np.int64]],
    scalar: Callable[[int, int], int],
) -> Builder:
    def build(op: Operation, dtype: np.dtype[Any]) -> Kernel:
        width = width_of(op.results[0])
        lo, hi = code_range(width)
        smin, smax = _static_range(op, scalar)
        # The verifier proves fit only up to i32; e.g. i32 + i32 needs 33 bits.
        proven = lo <= smin and smax <= hi and width > 1

        def run(a: IntArray, b: IntArray) -> tuple[Any, ...]:
            y = fn(a.astype(np.int64), b)
            if not proven:
                _check_fits(op, y, width)
            return (y,)

        return run

    return build


NH_BUILDERS[nh.AddOp] = _elementwise(np.add, lambda x, y: x + y)
NH_BUILDERS[nh.SubOp] = _elementwise(np.subtract, lambda x, y: x - y)
NH_BUILDERS[nh.MulOp] = _elementwise(np.multiply, lambda x, y: x * y)


def _select(fn: Callable[[NDArray[np.int64], IntArray], NDArray[np.int64]]) -> Builder:
    """max/min pick one operand's code: the verifier's range check is the whole proof."""
    return lambda op, dtype: lambda a, b: (fn(a.astype(np.int64), b),)


NH_BUILDERS[nh.MaximumOp] = _select(np.maximum)
NH_BUILDERS[nh.MinimumOp] = _select(np.minimum)


# --------------------------------------------------------------------------------------------
# Requantization and tables
# --------------------------------------------------------------------------------------------


@impl(nh.RequantOp)
def requant(op: nh.RequantOp, dtype: np.dtype[Any]) -> Kernel:
    """``saturate(shift_round(x, shift, rounding))`` with shifts along the channel axis."""
    fx, fy = nh.fixed_of(op.input), nh.fixed_of(op.result)
    shifts = np.asarray(array_values(op.shift) or (0,), dtype=np.int64)
    rank = len(op.input.type.get_shape())  # type: ignore[union-attr]
    if fx.is_per_channel or fy.is_per_channel:
        # The verifier's rule: per-channel shifts run along the per-channel encoding's C.
        axis = (fx if fx.is_per_channel else fy).channel_axis
        assert axis is not None
        shape = [1] * rank
        shape[axis] = len(shifts)
        shift: NDArray[np.int64] = shifts.reshape(shape) if len(shifts) > 1 else shifts.reshape(())
    else:
        shift = shifts.reshape(())
    bits, mode, signed = width_of(op.result), op.rounding.data, not nh.is_unsigned(op.result)
    return lambda x: (requant_codes(x, shift, bits, mode, signed=signed),)


@impl(nh.LutOp)
def lut(op: nh.LutOp, dtype: np.dtype[Any]) -> Kernel:
    """``table[x - lo]`` (an i1 input indexes with -1 -> 0 and +1 -> 1), offset by the
    channel's sub-table; segmented tables (``starts``) find each code's entry by one binary
    search over keys ``sub-table * 2**width + (start - lo)``, increasing across sub-tables."""
    width = width_of(op.input)
    out_dtype = quant.code_dtype(width_of(op.result), signed=not nh.is_unsigned(op.result))
    table = np.asarray(array_values(op.table) or (), dtype=out_dtype)
    lo, _ = nh.value_code_range(op.input)  # 0 for ui<b> codes
    rank = len(op.input.type.get_shape())  # type: ignore[union-attr]
    span = 2 if width == 1 else 2**width
    sub: NDArray[np.int64] | None = None
    if op.channels is not None:
        axis = op.channel_axis()
        assert axis is not None
        shape = [1] * rank
        shape[axis] = -1
        sub = np.asarray(array_values(op.channels), dtype=np.int64).reshape(shape)
    keys: NDArray[np.int64] | None = None
    if op.starts is not None:
        starts = np.asarray(array_values(op.starts), dtype=np.int64)
        keys = (np.cumsum(starts == lo) - 1) * span + (starts - lo)

    def run(x: IntArray) -> tuple[Any, ...]:
        index = x.astype(np.int64)
        if width == 1:
            index = (index + 1) >> 1
        else:
            index -= lo
        if sub is not None:
            index = index + sub * span
        if keys is not None:
            index = np.searchsorted(keys, index, side="right") - 1
        return (table[index],)

    return run


# --------------------------------------------------------------------------------------------
# Exponent-preserving ops
# --------------------------------------------------------------------------------------------


def _is_code(v: int, width: int, signed: bool = True) -> bool:
    lo, hi = code_range(width, signed)
    return lo <= v <= hi and not (width == 1 and v == 0)


@impl(nh.ReluOp)
def relu(op: nh.ReluOp, dtype: np.dtype[Any]) -> Kernel:
    """``max(x, 0)``; on i1 codes that would make a 0, so -1 codes are an error there."""
    width = width_of(op.input)

    def run(x: IntArray) -> tuple[Any, ...]:
        y = np.maximum(x, x.dtype.type(0))
        if width == 1:
            _check_fits(op, y, 1)
        return (y,)

    return run


@impl(nh.ClampOp)
def clamp(op: nh.ClampOp, dtype: np.dtype[Any]) -> Kernel:
    """``min(max(x, min), max)`` on codes. A bound beyond the width's codes never applies
    (below the lowest or above the highest code); one that is not itself a code (e.g. above the
    highest) makes every clamped element an error."""
    width, signed = width_of(op.input), not nh.is_unsigned(op.input)
    lo, hi = code_range(width, signed)
    mn = None if op.min is None else op.min.value.data
    mx = None if op.max is None else op.max.value.data
    lower = None if mn is None or mn <= lo else mn
    upper = None if mx is None or mx >= hi else mx
    checked = (lower is not None and not _is_code(lower, width, signed)) or (
        upper is not None and not _is_code(upper, width, signed)
    )
    storage = quant.code_dtype(width, signed=signed)

    def run(x: IntArray) -> tuple[Any, ...]:
        y = x if x.dtype.itemsize >= storage.itemsize else x.astype(storage)
        if checked:
            y = y.astype(np.int64)  # the bounds may not fit the storage dtype
        if lower is not None:
            y = np.maximum(y, lower)
        if upper is not None:
            y = np.minimum(y, upper)
        if checked:
            _check_fits(op, y, width, signed=signed)
        return (y,)

    return run


PoolGeometry = tuple[
    tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], bool
]


def _pool_geometry(
    op: nh.MaxPoolOp | nh.AvgPoolOp, dilations: Sequence[int] | None
) -> PoolGeometry:
    """Kernel, strides, pad begins, pad ends, dilations and ceil_mode, defaults filled in."""
    kernel = array_values(op.kernel) or ()
    n = len(kernel)
    kernel_t, strides, pads, dil = window_params(
        n, kernel, array_values(op.strides), array_values(op.pads), dilations
    )
    return kernel_t, strides, pads[:n], pads[n:], dil, bool(op.ceil_mode.value.data)


def _window_counts(
    size: int, kernel: int, stride: int, begin: int, end: int, dilation: int, out: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per output position along one dim: how many taps fall in the input ``[0, size)``, and
    how many in the padded input ``[-begin, size + end)`` (a ceil_mode window may hang past
    the right padding)."""
    pos = (np.arange(out) * stride - begin)[:, None] + np.arange(kernel)[None, :] * dilation
    inside = ((pos >= 0) & (pos < size)).sum(axis=1)
    padded = (pos < size + end).sum(axis=1)  # pos >= -begin always holds
    return inside.astype(np.int64), padded.astype(np.int64)


def _pool_setup(
    x: IntArray,
    kernel: Sequence[int],
    strides: Sequence[int],
    begins: Sequence[int],
    ends: Sequence[int],
    dil: Sequence[int],
    ceil_mode: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Output sizes, and right pads extended to reach every (ceil_mode) window's last tap."""
    n = len(kernel)
    size = x.shape[2:]
    out = tuple(
        pool_output_size(
            size[i],
            kernel=kernel[i],
            stride=strides[i],
            pad_begin=begins[i],
            pad_end=ends[i],
            dilation=dil[i],
            ceil_mode=ceil_mode,
        )
        for i in range(n)
    )
    reach = tuple(
        max(ends[i], (out[i] - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - size[i] - begins[i])
        for i in range(n)
    )
    return out, reach


@impl(nh.MaxPoolOp)
def max_pool(op: nh.MaxPoolOp, dtype: np.dtype[Any]) -> Kernel:
    """Max over each window of codes; padding (the dtype's minimum) never wins."""
    kernel, strides, begins, ends, dil, ceil_mode = _pool_geometry(op, array_values(op.dilations))

    def run(x: IntArray) -> tuple[Any, ...]:
        out, reach = _pool_setup(x, kernel, strides, begins, ends, dil, ceil_mode)
        for i in range(len(kernel)):
            inside, _ = _window_counts(
                x.shape[2 + i], kernel[i], strides[i], begins[i], ends[i], dil[i], out[i]
            )
            if (inside == 0).any():
                # Only padding under this window: the padding value would win.
                raise ExecutionError(
                    f"{_name(op)}: window {int(np.argmin(inside))} along spatial dim {i} "
                    f"covers only padding (input shape {tuple(x.shape)})"
                )
        # The dtype's minimum is <= every code, so it cannot beat a real element of a window.
        y = _padded(x, begins, reach, x.dtype, np.iinfo(x.dtype).min)
        # A window is a product of ranges, so its max is the max along one dim at a time:
        # sum(K) - n passes, not prod(K) - 1. The first dim first: its views keep whole rows
        # contiguous (measured 2x faster than the last first on ResNet-18's 3x3/2 pool).
        for i in range(len(kernel)):
            axis = y.ndim - len(kernel) + i
            index: list[slice] = [slice(None)] * y.ndim
            reduced: NDArray[Any] | None = None
            for t in range(kernel[i]):
                index[axis] = slice(
                    t * dil[i], t * dil[i] + strides[i] * (out[i] - 1) + 1, strides[i]
                )
                view = y[tuple(index)]
                if reduced is None:
                    reduced = view.copy()
                else:
                    np.maximum(reduced, view, out=reduced)
            assert reduced is not None
            y = reduced
        return (y,)

    return run


@impl(nh.AvgPoolOp)
def avg_pool(op: nh.AvgPoolOp, dtype: np.dtype[Any]) -> Kernel:
    """Exact int64 window sums, divided by the window's divisor with :func:`div_round`."""
    kernel, strides, begins, ends, dil, ceil_mode = _pool_geometry(op, None)
    include_pad = bool(op.count_include_pad.value.data)
    override = None if op.divisor_override is None else op.divisor_override.value.data
    mode = op.rounding.data
    shifts = array_values(op.shift)
    scale: NDArray[np.int64] | None = None
    if shifts is not None and any(shifts):
        # The mean rounded onto a grid 2**shift coarser: one division by n * 2**shift.
        fx = nh.fixed_of(op.input)
        per_channel = fx if fx.is_per_channel else nh.fixed_of(op.result)
        shape = [1] * len(op.input.type.get_shape())  # type: ignore[union-attr]
        if len(shifts) > 1 and per_channel.channel_axis is not None:
            shape[per_channel.channel_axis] = len(shifts)
        scale = (np.int64(1) << np.asarray(shifts, dtype=np.int64)).reshape(shape)
    width, signed = width_of(op.result), not nh.is_unsigned(op.result)
    storage = quant.code_dtype(width, signed=signed)
    # The mean of codes lies between the lowest and highest code; only a divisor_override
    # smaller than the window, or i1's missing 0, can leave the code set.
    checked = width == 1 or (override is not None and override < math.prod(kernel))

    # Non-overlapping unpadded windows (kernel = stride, the usual downsampling and global
    # pools): each window is a block of a reshape, summed in one call.
    tiled = (
        tuple(kernel) == tuple(strides)
        and not any(begins)
        and not any(ends)
        and all(d == 1 for d in dil)
    )

    def run(x: IntArray) -> tuple[Any, ...]:
        out, reach = _pool_setup(x, kernel, strides, begins, ends, dil, ceil_mode)
        if tiled and all(o * k <= s for o, k, s in zip(out, kernel, x.shape[2:])):
            crop = x[(Ellipsis, *(slice(0, o * k) for o, k in zip(out, kernel)))]
            blocks = crop.reshape(*x.shape[:2], *(v for o, k in zip(out, kernel) for v in (o, k)))
            total = blocks.sum(axis=tuple(3 + 2 * i for i in range(len(kernel))), dtype=np.int64)
        else:
            xp = _padded(x, begins, reach, np.int64, 0)
            total = np.zeros((*x.shape[:2], *out), dtype=np.int64)
            for _, view in _tap_views(xp, kernel, strides, dil, out):
                total += view
        if override is not None:
            divisor: NDArray[np.int64] = np.asarray(override, dtype=np.int64)
        else:
            divisor = np.ones((), dtype=np.int64)
            for i in range(len(kernel)):
                inside, padded = _window_counts(
                    x.shape[2 + i], kernel[i], strides[i], begins[i], ends[i], dil[i], out[i]
                )
                divisor = np.multiply.outer(divisor, padded if include_pad else inside)
            if divisor.size and int(divisor.min()) == 0:
                raise ExecutionError(
                    f"{_name(op)}: a window covers only padding and count_include_pad is "
                    f"false, so its mean divides by 0 (input shape {tuple(x.shape)})"
                )
        if scale is not None:
            divisor = divisor * scale
        y = div_round(total, divisor, mode)
        if checked:
            _check_fits(op, y, width, signed=signed)
        return (y.astype(storage),)

    return run


@impl(nh.ConcatOp)
def concat(op: nh.ConcatOp, dtype: np.dtype[Any]) -> Kernel:
    """Concatenate codes along ``axis`` (exponents were aligned by the compiler)."""
    axis = op.axis.value.data
    return lambda *xs: (np.concatenate(xs, axis=axis),)


@impl(nh.ReshapeOp)
def reshape(op: nh.ReshapeOp, dtype: np.dtype[Any]) -> Kernel:
    """Reshape to the result type's shape (``?`` becomes -1)."""
    t = op.result.type
    assert isinstance(t, TensorType)
    shape = tuple(-1 if d == DYNAMIC_INDEX else d for d in t.get_shape())
    return lambda x: (np.reshape(x, shape),)


@impl(nh.PReluOp)
def prelu(op: nh.PReluOp, dtype: np.dtype[Any]) -> Kernel:
    """``x > 0 ? x << shift : x * slope`` (slope per channel along dim 1, or one), in int64."""
    shift = op.shift.value.data
    width = width_of(op.result)
    rank = len(op.input.type.get_shape())  # type: ignore[union-attr]

    def run(x: IntArray, slope: IntArray) -> tuple[Any, ...]:
        s = np.asarray(slope, dtype=np.int64)
        s = s.reshape(()) if s.size == 1 else s.reshape((-1,) + (1,) * (rank - 2))
        x64 = x.astype(np.int64)
        y = np.where(x64 > 0, x64 << shift, x64 * s)
        _check_fits(op, y, width)
        return (y,)

    return run


@impl(nh.TransposeOp)
def transpose(op: nh.TransposeOp, dtype: np.dtype[Any]) -> Kernel:
    """Permute the dims of the codes."""
    perm = list(array_values(op.perm) or ())
    return lambda x: (np.transpose(x, perm),)


@impl(nh.PadOp)
def pad(op: nh.PadOp, dtype: np.dtype[Any]) -> Kernel:
    """Pad (or crop) the codes; ``constant`` pads with the code ``value``."""
    pads, mode, value = list(array_values(op.pads) or ()), op.mode.data, op.value.value.data
    return lambda x: (kernels.pad(x, pads, mode, value),)


@impl(nh.SplitOp)
def split(op: nh.SplitOp, dtype: np.dtype[Any]) -> Kernel:
    """Split the codes along ``axis``."""
    axis, sizes = op.axis.value.data, list(array_values(op.sizes) or ())
    return lambda x: tuple(kernels.split(x, sizes, axis))


@impl(nh.UpsampleNearestOp)
def upsample_nearest(op: nh.UpsampleNearestOp, dtype: np.dtype[Any]) -> Kernel:
    """Nearest resize of the codes, picking the pixels ``nf.upsample_nearest`` picks."""
    t = op.result.type
    assert isinstance(t, TensorType)
    size = list(t.get_shape()[2:])
    return lambda x: (kernels.upsample_nearest(x, size=size),)


@impl(nh.MaxPoolIndicesOp)
def max_pool_indices(op: nh.MaxPoolIndicesOp, dtype: np.dtype[Any]) -> Kernel:
    """The window positions of the largest codes (int32 indices)."""
    kernel, strides = array_values(op.kernel) or (), array_values(op.strides) or ()
    return lambda x: (unpool.max_pool_indices(x, kernel, strides).astype(np.int32),)


@impl(nh.EmbeddingOp)
def embedding_lookup(op: nh.EmbeddingOp, dtype: np.dtype[Any]) -> Kernel:
    """Rows of the table's codes by int64 indices."""
    return lambda i, w: (embedding.embed(i, w),)


@impl(nh.MaxUnpoolOp)
def max_unpool(op: nh.MaxUnpoolOp, dtype: np.dtype[Any]) -> Kernel:
    """Codes to their indices, code 0 elsewhere."""
    size = tensor_shape(op.result)[2:]
    return lambda x, i: (unpool.max_unpool(x, i, size),)


@impl(nh.UpsampleZeroOp)
def upsample_zero(op: nh.UpsampleZeroOp, dtype: np.dtype[Any]) -> Kernel:
    """Codes spread onto the result's sizes, code 0 elsewhere."""
    size, offsets = tensor_shape(op.result)[2:], array_values(op.offsets) or ()
    return lambda x: (upsample.upsample_zero(x, size, offsets),)


@impl(nh.UpsampleBilinearOp)
def upsample_bilinear(op: nh.UpsampleBilinearOp, dtype: np.dtype[Any]) -> Kernel:
    """The integer sum with weights 1 and 3 (int64; the verifier bounds it by the type)."""
    x, y = tensor_shape(op.input), tensor_shape(op.result)
    scaled = [a != b for a, b in zip(x[2:], y[2:])]
    pads = array_values(op.pads) or ()
    return lambda v: (upsample.bilinear_sum(np.asarray(v, dtype=np.int64), scaled, pads),)


@impl(nh.DepthToSpaceOp)
def depth_to_space(op: nh.DepthToSpaceOp, dtype: np.dtype[Any]) -> Kernel:
    block, mode = op.block.value.data, op.mode.data
    return lambda x: (kernels.depth_to_space(x, block, mode),)


@impl(nh.SpaceToDepthOp)
def space_to_depth(op: nh.SpaceToDepthOp, dtype: np.dtype[Any]) -> Kernel:
    block, mode = op.block.value.data, op.mode.data
    return lambda x: (kernels.space_to_depth(x, block, mode),)


@impl(nh.ExpandOp)
def expand(op: nh.ExpandOp, dtype: np.dtype[Any]) -> Kernel:
    """Broadcast the codes to the result type's shape (``?`` keeps the input's size, or takes
    the shape source's where it grows)."""
    x_shape, shape = tensor_shape(op.input), tensor_shape(op.result)
    if op.like is None:
        return lambda x: (movement.expand(x, shape),)
    return lambda x, like: (movement.expand(x, movement.expand_sizes(x_shape, shape, like.shape)),)


@impl(nh.GatherOp)
def gather(op: nh.GatherOp, dtype: np.dtype[Any]) -> Kernel:
    """The code slices ``indices`` along ``axis``."""
    axis, indices = op.axis.value.data, list(array_values(op.indices) or ())
    return lambda x: (movement.gather(x, axis, indices),)


def _norm_plan(op: nh.LayerNormOp | nh.GroupNormOp) -> norm.NormPlan:
    return norm.NormPlan(
        op.reduced(),
        op.max_shift.value.data,
        op.eps_term.value.data,
        op.guard.value.data,
        nh.fixed_of(op.result).exp_list[0],
        op.bits.value.data,
        op.rounding.data,
        op.nudge.value.data,
    )


@impl(nh.LayerNormOp)
def layer_norm(op: nh.LayerNormOp, dtype: np.dtype[Any]) -> Kernel:
    """``nanoir.runtime.numerics.norm.layer_norm_codes``: the same function nq runs."""
    plan, dims = _norm_plan(op), op.normalized_dims.value.data
    kg, kc = nh.fixed_of(op.weight).exp_list[0], nh.fixed_of(op.bias).exp_list[0]
    return lambda x, w, b: (norm.layer_norm_codes(x, dims, w, kg, b, kc, plan),)


@impl(nh.GroupNormOp)
def group_norm(op: nh.GroupNormOp, dtype: np.dtype[Any]) -> Kernel:
    """``nanoir.runtime.numerics.norm.group_norm_codes``: the same function nq runs."""
    plan, groups = _norm_plan(op), op.groups.value.data
    kg, kc = nh.fixed_of(op.weight).exp_list[0], nh.fixed_of(op.bias).exp_list[0]
    return lambda x, w, b: (norm.group_norm_codes(x, groups, w, kg, b, kc, plan),)


# --------------------------------------------------------------------------------------------
# Real values of nh results
# --------------------------------------------------------------------------------------------


def dequantize(codes: IntArray, t: TensorType) -> NDArray[np.float64]:
    """Real values ``code * 2**-exp`` of an nh value of type ``t``, exactly, in float64.

    Per-channel exponents apply along the encoding's channel axis; ``i1`` codes (±1) are scaled
    the same way (an nq 1-bit value of magnitude ``2**k`` is the code ±1 at nh exponent ``-k``).
    Codes that do not fit the type's width raise ``ValueError``.
    """
    enc = t.encoding
    assert isinstance(enc, FixedAttr)
    width = t.get_element_type().width.data  # type: ignore[union-attr]
    exp = enc.exp_array(codes.ndim)
    if width == 1:
        return quant.dequantize(codes, 1, -exp)  # quant's 1-bit rule: code * 2**k
    return quant.dequantize(codes, width, exp, signed=not nh.is_unsigned(t))


def output_exponents(func: FuncOp) -> list[NDArray[np.int64] | None]:
    """Each result's exponents, shaped to broadcast against it (None for a non-nh result)."""
    exps: list[NDArray[np.int64] | None] = []
    for t in func.function_type.outputs.data:
        if isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr):
            exps.append(t.encoding.exp_array(len(t.get_shape())))
        else:
            exps.append(None)
    return exps


def dequantize_outputs(func: FuncOp, outputs: Sequence[Any]) -> list[Any]:
    """The real values of ``func``'s results from their raw codes; non-nh results pass as is."""
    types = func.function_type.outputs.data
    if len(types) != len(outputs):
        raise ValueError(f"@{func.sym_name.data} has {len(types)} results, got {len(outputs)}")
    return [
        dequantize(np.asarray(v), t)
        if isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr)
        else v
        for t, v in zip(types, outputs)
    ]


def quantize_inputs(func: FuncOp, inputs: Sequence[Any]) -> list[Any]:
    """Float inputs to codes, as each argument's ``nq.bits``/``nq.exp``/``nq.rounding`` say.

    Integer arrays (and arguments without those attributes) pass through unchanged.
    """

    attrs = func.arg_attrs.data if func.arg_attrs is not None else ()
    out: list[Any] = []
    for i, x in enumerate(inputs):
        if x is None:  # a streamed input with no rows this step
            out.append(None)
            continue
        a = as_array(i, x)
        d = attrs[i].data if i < len(attrs) else {}
        if np.issubdtype(a.dtype, np.floating) and "nq.bits" in d:
            if np.isnan(a).any():
                at = tuple(int(j) for j in np.argwhere(np.isnan(a))[0])
                raise ExecutionError(
                    f"input {i} has NaN at index {at}, which has no integer code "
                    "(an nh program quantizes its float inputs; +-inf saturates)"
                )
            exp = np.frombuffer(d["nq.exp"].data.data, dtype=_exp_dtype(d["nq.exp"]))
            exp = exp.reshape(d["nq.exp"].get_type().get_shape()).astype(np.int64)
            signed = i >= len(func.args) or not nh.is_unsigned(func.args[i].type)
            a = quant.quantize_to_int(
                a, d["nq.bits"].value.data, exp, d["nq.rounding"].data, signed=signed
            )
        out.append(a)
    return out


def _exp_dtype(attr: Any) -> str:
    width = attr.get_type().get_element_type().width.data
    return {8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}[width]


def _softmax_builder(op: nh.SoftmaxOp | nh.LogSoftmaxOp, dtype: np.dtype[Any]) -> Kernel:
    """The integer algorithm of ``nanoir.runtime.numerics.softmax`` on int64 codes, with the
    op's tables (the same function nq runs in float64)."""
    axis, bits = op.axis.value.data, op.bits.value.data
    tables = (
        np.asarray(array_values(op.exp_hi), dtype=np.int64),
        np.asarray(array_values(op.exp_lo), dtype=np.int64),
    )
    k_in, k_out = nh.fixed_of(op.input).exp_list[0], nh.fixed_of(op.result).exp_list[0]
    signed = not nh.is_unsigned(op.result)
    out_dtype = quant.code_dtype(width_of(op.result), signed=signed)
    if isinstance(op, nh.LogSoftmaxOp):
        return lambda x: (
            softmax_numerics.log_softmax_codes(
                x.astype(np.int64), axis, k_in, 0, k_out, bits, tables, signed
            ).astype(out_dtype),
        )
    mask = None if op.mask is None else dense_to_numpy(op.mask).astype(bool)
    return lambda x: (
        softmax_numerics.softmax_codes(
            x.astype(np.int64), axis, k_in, 0, k_out, bits, mask, tables, signed
        ).astype(out_dtype),
    )


NH_BUILDERS[nh.SoftmaxOp] = _softmax_builder
NH_BUILDERS[nh.LogSoftmaxOp] = _softmax_builder


def _recurrent_builder(op: nh.RecurrentOp, dtype: np.dtype[Any]) -> Kernel:
    """The integer cell of ``nanoir.runtime.numerics.recurrent`` on int64 codes, with the
    op's tables (nq runs the same function on the codes of its float64 values)."""
    layout, has_h0, has_c0 = op.layout, op.h0 is not None, op.c0 is not None
    exps = [np.asarray(nh.fixed_of(v).exp_list, np.int64) for v in op.operands]
    gates, cell, hidden = op.grid("gates"), op.grid("cell"), op.grid("hidden")
    tables = (
        np.asarray(array_values(op.sigmoid_table), np.int64),
        np.asarray(array_values(op.tanh_table), np.int64),
    )
    mode = op.rounding.data
    out_dtypes = [quant.code_dtype(width_of(r)) for r in op.results]

    def run(*args: Any) -> tuple[Any, ...]:
        coded = [
            recurrent_numerics.Coded(np.asarray(a).astype(np.int64), k) for a, k in zip(args, exps)
        ]
        x, rest = coded[0], coded[1:]
        h0 = rest.pop(0) if has_h0 else None
        c0 = rest.pop(0) if has_c0 else None
        try:
            results = recurrent_numerics.run_codes(
                layout, x, h0, c0, rest, gates, cell, hidden, mode, tables
            )
        except recurrent_numerics.RecurrentBoundError as e:
            raise ExecutionError(f"{op.name}: {e}") from None
        return tuple(r.astype(d) for r, d in zip(results, out_dtypes))

    return run


NH_BUILDERS[nh.RecurrentOp] = _recurrent_builder


# --------------------------------------------------------------------------------------------
# Comparisons and selection
# --------------------------------------------------------------------------------------------


@impl(nh.CompareOp)
def compare(op: nh.CompareOp, dtype: np.dtype[Any]) -> Kernel:
    """Codes at one exponent compare as their values do: 1 or 0 (int8)."""
    fn = compare_numerics.PREDICATES[op.predicate.data]
    return lambda a, b: (fn(a.astype(np.int64), b).astype(np.int8),)


@impl(nh.SelectOp)
def select(op: nh.SelectOp, dtype: np.dtype[Any]) -> Kernel:
    """A code of ``lhs`` or ``rhs``: the verifier's range check is the whole proof."""
    return lambda c, a, b: (np.where(c != 0, a.astype(np.int64), b),)


# --------------------------------------------------------------------------------------------
# Reductions and prefix sums
# --------------------------------------------------------------------------------------------


def _reduced_dynamic(op: Operation, dims: Sequence[int]) -> bool:
    shape = tensor_shape(op.operands[0])
    return any(shape[d] == DYNAMIC_INDEX for d in dims)


@impl(nh.ReduceOp)
def reduce(op: nh.ReduceOp, dtype: np.dtype[Any]) -> Kernel:
    """Exact in int64; a sum over a dynamic dim is checked against its i32 result."""
    kind, dims = op.kind.data, array_values(op.dims) or ()
    check = kind == "sum" and _reduced_dynamic(op, dims)
    width = width_of(op.result)

    def run(x: IntArray) -> tuple[Any, ...]:
        y = reduce_numerics.reduce(x.astype(np.int64), kind, dims)
        if check:
            _check_fits(op, y, width)
        return (y,)

    return run


@impl(nh.ArgReduceOp)
def arg_reduce(op: nh.ArgReduceOp, dtype: np.dtype[Any]) -> Kernel:
    kind, (dim,) = op.kind.data, array_values(op.dims) or (0,)
    return lambda x: (reduce_numerics.arg_reduce(x, kind, dim),)


@impl(nh.CumsumOp)
def cumsum(op: nh.CumsumOp, dtype: np.dtype[Any]) -> Kernel:
    (dim,) = array_values(op.dims) or (0,)
    check = _reduced_dynamic(op, (dim,))
    width = width_of(op.result)

    def run(x: IntArray) -> tuple[Any, ...]:
        y = reduce_numerics.cumsum(x.astype(np.int64), dim)
        if check:
            _check_fits(op, y, width)
        return (y,)

    return run


@impl(nh.UpsampleBicubicOp)
def upsample_bicubic(op: nh.UpsampleBicubicOp, dtype: np.dtype[Any]) -> Kernel:
    """The integer weighted sum (int64; the verifier proves it fits)."""
    x, y = tensor_shape(op.input), tensor_shape(op.result)
    scaled = [a != b for a, b in zip(x[2:], y[2:])]
    pads = array_values(op.pads) or ()
    return lambda v: (bicubic_numerics.bicubic_sum(v.astype(np.int64), scaled, pads),)


@impl(nh.NormalizeOp)
def normalize(op: nh.NormalizeOp, dtype: np.dtype[Any]) -> Kernel:
    """``nanoir.runtime.numerics.l2norm.l2_normalize_codes``: the same function nq runs."""
    plan = op.plan()
    axis = op.axis.value.data % max(len(tensor_shape(op.input)), 1)
    return lambda x: (l2_numerics.l2_normalize_codes(x, axis, plan),)
