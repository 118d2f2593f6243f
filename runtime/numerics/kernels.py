"""NumPy numeric kernels with PyTorch semantics, shared by the nf and nq interpreters.

One plain function per op, over NumPy arrays and Python ints/tuples; no xDSL here. The
interpreters wire these to IR ops, and the quantized level runs the very same kernels in
float64, so every kernel keeps the dtype it is given: float32 in, float32 out; float64 in,
float64 out. Mixed inputs follow NumPy's promotion rules (``np.result_type``), and Python
scalars never widen an array (NEP 50: ``float32 array + 0.5`` stays float32). Integer arrays
also go through the window kernels exactly (no BLAS then), but they compute in their own dtype:
widen them first if the sums can overflow.

Conventions:

- Activations are NCHW (``[N, C, *spatial]``, 1 or 2 spatial dims, and in general any number);
  conv weights are OIHW (``[O, C / groups, *kernel]``), linear weights ``[out, in]``.
- ``pads`` follow ONNX: all begins, then all ends, over the spatial dims of conv and pool
  (``[top, left, bottom, right]`` in 2-D, ``[left, right]`` in 1-D). Asymmetric pads are
  allowed. ``pad`` itself takes pads over *all* dims, as ONNX ``Pad`` does.
- ``kernel``, ``strides`` and ``dilations`` have one entry per spatial dim.
- Output lengths come from :func:`conv_output_size` and :func:`pool_output_size`, the same
  formulas the IR's shape inference uses (``nanoir.runtime.numerics.shapes`` has the same signatures).

Speed: a convolution is im2col plus one BLAS matmul. The column matrix is one copy of a
``sliding_window_view`` of the padded input, laid out in the ``[C * K, OH * OW]`` order that
``weight[O, C * K] @ columns`` needs, so the product comes out in NCHW without a transpose.
Pools loop over the kernel taps instead, one whole-tensor max or add per tap.
Grouped convolutions batch that matmul over the groups (no block-diagonal weight); for
depthwise ones that per-channel matmul measured faster than a multiply-accumulate per kernel
tap or ``einsum`` (see ``benchmarks/kernels_results.md``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

# One definition of the output-size formulas, shared with the IR's shape inference.
from nanoir.runtime.numerics.shapes import (
    conv_output_size,
    conv_transpose_output_size,
    pool_output_size,
)
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

__all__ = [
    "adaptive_avg_pool",
    "adaptive_max_pool",
    "adaptive_pool_ranges",
    "avg_pool",
    "batch_norm",
    "clamp",
    "concat",
    "conv",
    "conv_output_size",
    "conv_transpose",
    "depth_to_space",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "leaky_relu",
    "linear",
    "matmul",
    "max_pool",
    "nearest_indices",
    "pad",
    "pool_output_size",
    "prelu",
    "relu",
    "reshape",
    "sigmoid",
    "silu",
    "space_to_depth",
    "split",
    "tanh",
    "transpose",
    "upsample_nearest",
    "upsample_output_size",
]

Array = NDArray[np.generic]


# --------------------------------------------------------------------------------------------
# Output sizes (one spatial dim at a time; the shape inference must agree with these)
# --------------------------------------------------------------------------------------------


def upsample_output_size(size: int, *, scale: float | None = None, out: int | None = None) -> int:
    """Output length of nearest upsampling: ``out`` if given, else ``floor(size * scale)``.

    >>> upsample_output_size(7, scale=1.5)
    10
    """
    if out is not None:
        return out
    if scale is None:
        raise ValueError("upsample needs a scale or an output size")
    return math.floor(size * scale)


def adaptive_pool_ranges(size: int, out: int) -> list[tuple[int, int]]:
    """Input ranges ``[start, end)`` of adaptive pooling along one dim, as PyTorch picks them.

    ``start = floor(i * L / out)``, ``end = ceil((i + 1) * L / out)``; windows may overlap.

    >>> adaptive_pool_ranges(5, 3)
    [(0, 2), (1, 4), (3, 5)]
    """
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


# --------------------------------------------------------------------------------------------
# Window helpers
# --------------------------------------------------------------------------------------------


def _spatial_params(
    name: str, values: int | Sequence[int] | None, n: int, default: int
) -> tuple[int, ...]:
    if values is None:
        return (default,) * n
    if isinstance(values, int):
        return (values,) * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries, expected {n} (one per spatial dim)")
    return tuple(int(v) for v in values)


def _pads(pads: Sequence[int] | None, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if pads is None:
        return (0,) * n, (0,) * n
    if len(pads) != 2 * n:
        raise ValueError(
            f"pads has {len(pads)} entries, expected {2 * n} (all begins, then all ends)"
        )
    if any(p < 0 for p in pads):
        raise ValueError(f"pads must be non-negative, got {list(pads)}")
    return tuple(int(p) for p in pads[:n]), tuple(int(p) for p in pads[n:])


def _pad_spatial(x: Array, begins: Sequence[int], ends: Sequence[int], value: float | int) -> Array:
    """Pad the trailing ``len(begins)`` dims with a constant (a copy only when needed)."""
    if not any(begins) and not any(ends):
        return x
    n = len(begins)
    lead = x.shape[: x.ndim - n]
    shape = lead + tuple(s + b + e for s, b, e in zip(x.shape[x.ndim - n :], begins, ends))
    out = np.full(shape, value, dtype=x.dtype)
    inner = tuple(slice(b, b + s) for b, s in zip(begins, x.shape[x.ndim - n :]))
    out[(Ellipsis, *inner)] = x
    return out


def _taps(
    xp: Array,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> Iterator[Array]:
    """Yield one view per kernel tap, ``view[..., o] = xp[..., o * s + tap * d]``.

    ``xp`` is already padded; the views are strided slices over its trailing spatial dims, so
    a pool is a loop of whole-tensor NumPy operations, one per kernel tap (a reduction over
    the small window axes of :func:`_window_view` would walk them element by element).
    """
    for tap in itertools.product(*(range(k) for k in kernel)):
        index = tuple(
            slice(t * d, t * d + s * (o - 1) + 1, s)
            for t, d, s, o in zip(tap, dilations, strides, out)
        )
        yield xp[(Ellipsis, *index)]


def _window_view(
    xp: Array,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> Array:
    """The view ``v[n, c, *tap, *o] = xp[n, c, *(o * s + tap * d)]`` over the spatial dims."""
    n = len(kernel)
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations))
    view = sliding_window_view(xp, spans, axis=tuple(range(xp.ndim - n, xp.ndim)))
    # view[..., *start, *offset]: keep the starts o * s and the offsets tap * d.
    view = view[
        (
            Ellipsis,
            *(slice(0, s * (o - 1) + 1, s) for s, o in zip(strides, out)),
            *(slice(None, None, d) for d in dilations),
        )
    ]
    lead = tuple(range(xp.ndim - n))
    return view.transpose(*lead, *range(xp.ndim, xp.ndim + n), *range(xp.ndim - n, xp.ndim))


def _lowest(dtype: np.dtype[np.generic]) -> float | int:
    """The identity of ``max``: -inf for floats, the smallest value for integers."""
    if np.issubdtype(dtype, np.floating):
        return -np.inf
    return int(np.iinfo(dtype).min)


# --------------------------------------------------------------------------------------------
# Convolution and dense layers
# --------------------------------------------------------------------------------------------


def conv(
    x: Array,
    w: Array,
    b: Array | None = None,
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    groups: int = 1,
) -> Array:
    """N-d grouped convolution (cross-correlation): ``[N, C, *S] * [O, C/g, *K] -> [N, O, *S']``.

    Mirrors ``torch.nn.functional.conv1d``/``conv2d`` and ONNX
    [Conv](https://onnx.ai/onnx/operators/onnx__Conv.html), with ONNX's asymmetric ``pads``.
    ``b`` is an optional per-output-channel bias ``[O]``.
    """
    n = x.ndim - 2
    if n < 1 or w.ndim != x.ndim:
        raise ValueError(
            f"conv needs input [N, C, *S] and weight [O, C/g, *K], got {x.shape} and {w.shape}"
        )
    batch, channels = x.shape[:2]
    out_channels, group_channels = w.shape[:2]
    kernel = w.shape[2:]
    if groups < 1 or channels != group_channels * groups or out_channels % groups:
        raise ValueError(
            f"conv with groups={groups}: input has {channels} channels, weight {tuple(w.shape)} "
            f"expects {group_channels} per group and {out_channels} outputs divisible by groups"
        )
    strides_t = _spatial_params("strides", strides, n, 1)
    dil_t = _spatial_params("dilations", dilations, n, 1)
    begins, ends = _pads(pads, n)
    out = tuple(
        conv_output_size(
            x.shape[2 + i],
            kernel=kernel[i],
            stride=strides_t[i],
            pad_begin=begins[i],
            pad_end=ends[i],
            dilation=dil_t[i],
        )
        for i in range(n)
    )
    dtype = np.result_type(x, w) if b is None else np.result_type(x, w, b)
    xp = _pad_spatial(x.astype(dtype, copy=False), begins, ends, 0)
    w = w.astype(dtype, copy=False)
    taps = math.prod(kernel)
    positions = math.prod(out)

    if taps == 1 and all(s == 1 for s in strides_t) and xp.flags.c_contiguous:
        # A 1x1 stride-1 conv reads the input as is: its columns are the input itself.
        cols = xp.reshape(batch, groups, group_channels, positions)
    else:
        # im2col: cols[n, c, *tap, *o] = xp[n, c, o * s + tap * d], gathered by one copy of
        # a window view. [C, *K, *O] flattens to the [C * K, positions] matrix of the weight's
        # [O, C * K] order, so the matmul result is already [N, O, positions].
        cols = np.ascontiguousarray(_window_view(xp, kernel, strides_t, dil_t, out))
        cols = cols.reshape(batch, groups, group_channels * taps, positions)
    # Groups are a batch dim of the matmul, never a block-diagonal dense weight. Depthwise
    # convs take this path too: (m x K) @ (K x positions) per channel measured faster than a
    # multiply-accumulate per tap or einsum over a sliding window view.
    wg = w.reshape(groups, out_channels // groups, group_channels * taps)
    y = np.matmul(wg, cols).reshape(batch, out_channels, *out)
    if b is not None:
        y += b.astype(dtype, copy=False).reshape(out_channels, *(1,) * n)
    return y


def conv_transpose(
    x: Array,
    w: Array,
    b: Array | None = None,
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    output_padding: Sequence[int] | None = None,
    groups: int = 1,
) -> Array:
    """N-d grouped transposed convolution: ``[N, C, *S] * [C, O/g, *K] -> [N, O, *S']``.

    Mirrors ``torch.nn.functional.conv_transpose1d/2d`` and ONNX
    [ConvTranspose](https://onnx.ai/onnx/operators/onnx__ConvTranspose.html) (asymmetric
    ``pads``): ``y[n, o, i*s + t*d - pad_begin] += x[n, c, i] * w[c, o', t]``. Computed as a
    stride-1 :func:`conv` of the input with ``s - 1`` zeros inserted between rows, padded by
    ``d*(k-1) - pad`` (cropped where that is negative; ``output_padding`` more at the end),
    with the weight flipped and its channel axes swapped per group. Integer arrays stay exact.
    """
    n = x.ndim - 2
    if n < 1 or w.ndim != x.ndim:
        raise ValueError(
            f"conv_transpose needs input [N, C, *S] and weight [C, O/g, *K], got "
            f"{x.shape} and {w.shape}"
        )
    channels = x.shape[1]
    w_in, w_out = w.shape[:2]
    kernel = w.shape[2:]
    if groups < 1 or channels != w_in or w_in % groups:
        raise ValueError(
            f"conv_transpose with groups={groups}: input has {channels} channels, "
            f"weight {tuple(w.shape)}"
        )
    strides_t = _spatial_params("strides", strides, n, 1)
    dil_t = _spatial_params("dilations", dilations, n, 1)
    outpad = _spatial_params("output_padding", output_padding, n, 0)
    begins, ends = _pads(pads, n)
    out = tuple(
        conv_transpose_output_size(
            x.shape[2 + i],
            kernel=kernel[i],
            stride=strides_t[i],
            pad_begin=begins[i],
            pad_end=ends[i],
            dilation=dil_t[i],
            output_padding=outpad[i],
        )
        for i in range(n)
    )
    # Zero insertion: row i of x lands on row i * s.
    up = np.zeros(
        (*x.shape[:2], *((L - 1) * s + 1 for L, s in zip(x.shape[2:], strides_t))), dtype=x.dtype
    )
    up[(Ellipsis, *(slice(None, None, s) for s in strides_t))] = x
    # Full padding d*(k-1) minus the transposed conv's pads; negative = crop.
    lo = [d * (k - 1) - p for d, k, p in zip(dil_t, kernel, begins)]
    hi = [d * (k - 1) - p + op for d, k, p, op in zip(dil_t, kernel, ends, outpad)]
    up = _pad_spatial(up, [max(v, 0) for v in lo], [max(v, 0) for v in hi], 0)
    crop = tuple(
        slice(max(-a, 0), up.shape[2 + i] - max(-b, 0)) for i, (a, b) in enumerate(zip(lo, hi))
    )
    up = up[(Ellipsis, *crop)]
    # [C, O/g, *K] -> [O, C/g, *K], flipped along K.
    wg = w.reshape(groups, w_in // groups, w_out, *kernel)
    wg = np.swapaxes(wg, 1, 2).reshape(groups * w_out, w_in // groups, *kernel)
    wg = np.ascontiguousarray(wg[(Ellipsis, *(slice(None, None, -1),) * n)])
    y = conv(up, wg, b, dilations=dil_t, groups=groups)
    assert y.shape[2:] == out, (y.shape, out)
    return y


def depth_to_space(x: Array, block: int, mode: str = "CRD") -> Array:
    """``[N, C * r**n, *S] -> [N, C, *(S * r)]``: ONNX
    [DepthToSpace](https://onnx.ai/onnx/operators/onnx__DepthToSpace.html) in any rank.
    ``CRD`` (``torch.pixel_shuffle``): input channel ``c * r**n + offset``; ``DCR``:
    ``offset * C + c`` (the offset is the block position, row-major)."""
    n = x.ndim - 2
    batch, channels, *spatial = x.shape
    c = channels // block**n
    if mode == "CRD":
        y = x.reshape(batch, c, *(block,) * n, *spatial)
        offsets, base = list(range(2, 2 + n)), 1
    elif mode == "DCR":
        y = x.reshape(batch, *(block,) * n, c, *spatial)
        offsets, base = list(range(1, 1 + n)), 1 + n
    else:
        raise ValueError(f"depth_to_space mode must be CRD or DCR, got {mode!r}")
    sp = list(range(2 + n, 2 + 2 * n))
    perm = [0, base] + [a for pair in zip(sp, offsets) for a in pair]
    return y.transpose(perm).reshape(batch, c, *(s * block for s in spatial))


def space_to_depth(x: Array, block: int, mode: str = "CRD") -> Array:
    """The inverse of :func:`depth_to_space` in the same mode: ``CRD`` is
    ``torch.pixel_unshuffle``, ``DCR`` is ONNX
    [SpaceToDepth](https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html)."""
    n = x.ndim - 2
    batch, c, *spatial = x.shape
    small = [s // block for s in spatial]
    y = x.reshape(batch, c, *(v for s in small for v in (s, block)))
    sp = [2 + 2 * i for i in range(n)]
    offsets = [3 + 2 * i for i in range(n)]
    if mode == "CRD":
        perm = [0, 1, *offsets, *sp]
    elif mode == "DCR":
        perm = [0, *offsets, 1, *sp]
    else:
        raise ValueError(f"space_to_depth mode must be CRD or DCR, got {mode!r}")
    return y.transpose(perm).reshape(batch, c * block**n, *small)


def linear(x: Array, w: Array, b: Array | None = None) -> Array:
    """``y = x @ w.T + b`` over any leading dims: ``[..., I] x [O, I] -> [..., O]``.

    Mirrors ``torch.nn.functional.linear`` (ONNX
    [Gemm](https://onnx.ai/onnx/operators/onnx__Gemm.html) with ``transB=1``).
    """
    y = np.matmul(x, w.T)
    if b is not None:
        y = y + b
    return np.asarray(y)


def matmul(a: Array, b: Array) -> Array:
    """Matrix product with ``torch.matmul`` broadcasting (1-D operands promoted, then dropped).

    NumPy's ``matmul`` has exactly these rules; see
    [torch.matmul](https://pytorch.org/docs/stable/generated/torch.matmul.html).
    """
    return np.asarray(np.matmul(a, b))


def batch_norm(x: Array, scale: Array, bias: Array, mean: Array, var: Array, eps: float) -> Array:
    """Inference batch norm over channel dim 1: ``y = x * A + B``.

    ``A = scale / sqrt(var + eps)`` and ``B = bias - mean * A``, the affine form that BN folding
    also uses, so a folded and an unfolded network round alike. Mirrors
    ``torch.nn.functional.batch_norm(training=False)`` and ONNX
    [BatchNormalization](https://onnx.ai/onnx/operators/onnx__BatchNormalization.html).
    """
    if x.ndim < 2:
        raise ValueError(f"batch_norm needs input [N, C, ...], got shape {x.shape}")
    dtype = np.result_type(x, scale, bias, mean, var)
    a = scale.astype(dtype) / np.sqrt(var.astype(dtype) + eps)
    shift = bias.astype(dtype) - mean.astype(dtype) * a
    spread = (x.shape[1],) + (1,) * (x.ndim - 2)
    return x * a.reshape(spread) + shift.reshape(spread)


# --------------------------------------------------------------------------------------------
# Elementwise activations
# --------------------------------------------------------------------------------------------


def relu(x: Array) -> Array:
    """``max(x, 0)`` (ONNX [Relu](https://onnx.ai/onnx/operators/onnx__Relu.html))."""
    return np.maximum(x, x.dtype.type(0))


def clamp(x: Array, lo: float | None = None, hi: float | None = None) -> Array:
    """``min(max(x, lo), hi)`` with either bound optional (``torch.clamp``; ReLU6, hardtanh)."""
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return x


def leaky_relu(x: Array, alpha: float) -> Array:
    """``x if x > 0 else alpha * x`` (``torch.nn.functional.leaky_relu``)."""
    return np.where(x > 0, x, x * alpha)


def prelu(x: Array, slope: Array) -> Array:
    """``x if x > 0 else slope * x``, ``slope`` one value or one per channel (dim 1).

    Mirrors ``torch.nn.functional.prelu``: a 1-element slope applies everywhere; otherwise it
    has one entry per channel of dim 1 (an input of rank < 2 has one channel).
    """
    slope = np.asarray(slope)
    channels = x.shape[1] if x.ndim >= 2 else 1
    if slope.size == 1:
        slope = slope.reshape(())
    elif slope.size == channels:
        slope = slope.reshape((channels,) + (1,) * (x.ndim - 2))
    else:
        raise ValueError(
            f"prelu slope has {slope.size} values for {channels} channels of shape {x.shape}"
        )
    return np.where(x > 0, x, x * slope.astype(x.dtype))


def sigmoid(x: Array) -> Array:
    """``1 / (1 + exp(-x))``, evaluated through ``exp(-|x|)`` so it never overflows."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def tanh(x: Array) -> Array:
    """Hyperbolic tangent (ONNX [Tanh](https://onnx.ai/onnx/operators/onnx__Tanh.html))."""
    return np.tanh(x)


HARDSIGMOID_TORCH = (1 / 6, 0.5)
"""torch's hardsigmoid as ONNX HardSigmoid's ``(alpha, beta)``."""


def hardsigmoid(
    x: Array, alpha: float = HARDSIGMOID_TORCH[0], beta: float = HARDSIGMOID_TORCH[1]
) -> Array:
    """ONNX's ``max(0, min(1, alpha * x + beta))``; at torch's ``(1/6, 0.5)`` computed as torch
    does, ``relu6(x + 3) / 6`` (``torch.nn.functional.hardsigmoid``), bit for bit."""
    if (alpha, beta) == HARDSIGMOID_TORCH:
        return np.clip(x + 3, 0, 6) / 6
    return np.clip(alpha * x + beta, 0, 1)


def hardswish(x: Array) -> Array:
    """``x * relu6(x + 3) / 6`` (``torch.nn.functional.hardswish``), multiplied before dividing
    as PyTorch does."""
    return x * np.clip(x + 3, 0, 6) / 6


def silu(x: Array) -> Array:
    """``x * sigmoid(x)`` (SiLU, Swish; ``torch.nn.functional.silu``)."""
    return x * sigmoid(x)


GELU_APPROXIMATIONS = ("none", "tanh")
"""The forms of :func:`gelu`, by torch's (and ONNX's) ``approximate`` name."""

_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x: Array, approximate: str = "none") -> Array:
    """GELU, ``torch.nn.functional.gelu``: ``x * (1 + erf(x / sqrt(2))) / 2`` for
    ``approximate="none"``, ``x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x**3))) / 2`` for
    ``"tanh"``. Computed in float64 and rounded once to ``x``'s dtype (so a float32 tail such
    as gelu(-8) = -4.9e-15 is not lost to ``1 + erf`` cancelling in float32). NumPy has no
    erf: it is libm's (``math.erf``), per element."""
    x = np.asarray(x)
    x64 = np.asarray(x, np.float64)
    if approximate == "none":
        inner = np.asarray(_erf(x64 * math.sqrt(0.5)), np.float64)
    elif approximate == "tanh":
        inner = np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 * x64 * x64))
    else:
        raise ValueError(
            f"gelu: approximate must be one of {GELU_APPROXIMATIONS}, not {approximate!r}"
        )
    return (0.5 * x64 * (1 + inner)).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------


def _pool_geometry(
    x: Array,
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    dilations: Sequence[int] | None,
    ceil_mode: bool,
) -> tuple[
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
]:
    """Check the window attributes; return kernel, strides, dilations, begins, ends, out.

    ``ends`` includes the extra right padding that ``ceil_mode`` windows hang over.
    """
    n = x.ndim - 2
    if n < 1:
        raise ValueError(f"pooling needs input [N, C, *S], got shape {x.shape}")
    kernel_t = _spatial_params("kernel", kernel, n, 1)
    strides_t = _spatial_params("strides", strides, n, 1) if strides else kernel_t
    dil_t = _spatial_params("dilations", dilations, n, 1)
    begins, ends = _pads(pads, n)
    out = tuple(
        pool_output_size(
            x.shape[2 + i],
            kernel=kernel_t[i],
            stride=strides_t[i],
            pad_begin=begins[i],
            pad_end=ends[i],
            dilation=dil_t[i],
            ceil_mode=ceil_mode,
        )
        for i in range(n)
    )
    reach = tuple(
        (o - 1) * s + d * (k - 1) + 1 - (size + b)
        for o, s, d, k, size, b in zip(out, strides_t, dil_t, kernel_t, x.shape[2:], begins)
    )
    ends = tuple(max(e, r) for e, r in zip(ends, reach))
    return kernel_t, strides_t, dil_t, begins, ends, out


def max_pool(
    x: Array,
    *,
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: bool = False,
) -> Array:
    """Max over each window; padding never wins (it is -inf). ``strides`` defaults to ``kernel``.

    Mirrors ``torch.nn.functional.max_pool1d``/``max_pool2d`` (output size by
    :func:`pool_output_size`) and ONNX [MaxPool](https://onnx.ai/onnx/operators/onnx__MaxPool.html).
    NaN propagates.
    """
    kernel_t, strides_t, dil_t, begins, ends, out = _pool_geometry(
        x, kernel, strides, pads, dilations, ceil_mode
    )
    xp = _pad_spatial(x, begins, ends, _lowest(x.dtype))
    y: Array | None = None
    for view in _taps(xp, kernel_t, strides_t, dil_t, out):
        if y is None:
            y = view.copy()
        else:
            np.maximum(y, view, out=y)
    assert y is not None
    return y


def _avg_divisor_1d(
    size: int, kernel: int, stride: int, begin: int, end: int, out: int, count_include_pad: bool
) -> NDArray[np.int64]:
    """Divisor per output position along one dim, PyTorch's rule.

    A window ``[o * s - begin, + kernel)`` is first clipped to the padded extent
    ``[-begin, size + end)`` (that is its count with padding), then to the input ``[0, size)``
    (its count without). A ceil_mode window hanging past the right padding is thus shorter.
    """
    start = np.arange(out) * stride - begin
    stop = np.minimum(start + kernel, size + end)
    if count_include_pad:
        return stop - start
    return np.maximum(np.minimum(stop, size) - np.maximum(start, 0), 0)


def avg_pool(
    x: Array,
    *,
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Array:
    """Mean over each window, with PyTorch's divisors. ``strides`` defaults to ``kernel``.

    The sum covers input elements only. It is divided by ``divisor_override`` when given, else
    by the window's size within the padded input (``count_include_pad``) or within the input
    itself, per :func:`_avg_divisor_1d` on each dim (integer inputs thus give floats). Mirrors
    ``torch.nn.functional.avg_pool1d``/``avg_pool2d`` and ONNX
    [AveragePool](https://onnx.ai/onnx/operators/onnx__AveragePool.html).
    """
    n = x.ndim - 2
    kernel_t, strides_t, dil_t, begins, ends, out = _pool_geometry(
        x, kernel, strides, pads, None, ceil_mode
    )
    xp = _pad_spatial(x, begins, ends, 0)
    total = np.zeros((*x.shape[:2], *out), dtype=x.dtype)
    for view in _taps(xp, kernel_t, strides_t, dil_t, out):
        total += view
    if divisor_override is not None:
        return total / x.dtype.type(divisor_override)
    _, declared_ends = _pads(pads, n)
    divisor = np.ones((), dtype=np.int64)
    for i in range(n):
        d = _avg_divisor_1d(
            x.shape[2 + i],
            kernel_t[i],
            strides_t[i],
            begins[i],
            declared_ends[i],
            out[i],
            count_include_pad,
        )
        divisor = np.multiply.outer(divisor, d)
    # A window wholly in the padding (only with pads over half the kernel, which torch
    # forbids) averages nothing: 0 / 0 = NaN, without a warning.
    with np.errstate(invalid="ignore"):
        return total / divisor.astype(x.dtype)


def _adaptive_pool(
    x: Array, output_size: int | Sequence[int | None], reduce: Literal["sum", "max"]
) -> Array:
    """Separable adaptive pooling: reduce each spatial dim in turn over PyTorch's ranges.

    Rectangular windows make sums and maxima separable, so a 2-D pool is two 1-D passes of
    ``out`` slices each instead of ``OH * OW`` window reductions.
    """
    n = x.ndim - 2
    if n < 1:
        raise ValueError(f"adaptive pooling needs input [N, C, *S], got shape {x.shape}")
    sizes = (output_size,) * n if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != n:
        raise ValueError(f"output_size {output_size} does not match {n} spatial dims")
    y = x
    count = 1
    for i, o in enumerate(sizes):
        axis = 2 + i
        length = x.shape[axis]
        o = length if o is None else o
        if o <= 0 or length <= 0:
            raise ValueError(f"adaptive pooling of length {length} to {o} outputs")
        ranges = adaptive_pool_ranges(length, o)
        reducer = np.max if reduce == "max" else np.sum
        parts = [
            reducer(y[(slice(None),) * axis + (slice(a, b),)], axis=axis, keepdims=True)
            for a, b in ranges
        ]
        y = np.concatenate(parts, axis=axis)
        spread = (o,) + (1,) * (n - 1 - i)
        count = count * np.array([b - a for a, b in ranges]).reshape(spread)
    if reduce == "max":
        return y
    return y / np.asarray(count).astype(x.dtype)


def adaptive_avg_pool(x: Array, output_size: int | Sequence[int | None]) -> Array:
    """Adaptive average pool to ``output_size`` (an int, or one entry per spatial dim; ``None``
    keeps that dim). Window ``i`` covers ``[floor(i L / out), ceil((i + 1) L / out))``
    (:func:`adaptive_pool_ranges`), as ``torch.nn.functional.adaptive_avg_pool2d``. Output
    size 1 is ONNX [GlobalAveragePool](https://onnx.ai/onnx/operators/onnx__GlobalAveragePool.html).
    """
    return _adaptive_pool(x, output_size, "sum")


def adaptive_max_pool(x: Array, output_size: int | Sequence[int | None]) -> Array:
    """Adaptive max pool, the windows of :func:`adaptive_avg_pool`
    (``torch.nn.functional.adaptive_max_pool2d`` without indices)."""
    return _adaptive_pool(x, output_size, "max")


# --------------------------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------------------------

_PAD_MODES = {
    "constant": "constant",
    "reflect": "reflect",
    "replicate": "edge",
    "edge": "edge",
    "circular": "wrap",
    "wrap": "wrap",
}


def pad(x: Array, pads: Sequence[int], mode: str = "constant", value: float = 0.0) -> Array:
    """Pad every dim, ``pads`` in ONNX order over ALL dims: ``[b_0, ..., b_{r-1}, e_0, ..., e_{r-1}]``.

    Negative entries crop, as in ONNX [Pad](https://onnx.ai/onnx/operators/onnx__Pad.html) and
    ``torch.nn.functional.pad`` (whose own pads run last dim first, in (begin, end) pairs).
    Modes: ``constant`` (with ``value``), ``reflect`` (mirror without repeating the edge, so
    at most size - 1 rows a side, as torch and onnxruntime require), ``replicate``/``edge``,
    ``circular``/``wrap``.
    """
    r = x.ndim
    if len(pads) != 2 * r:
        raise ValueError(
            f"pads has {len(pads)} entries, expected {2 * r} (all begins, then all ends over every dim)"
        )
    if mode not in _PAD_MODES:
        raise ValueError(f"unknown pad mode {mode!r}; expected one of {sorted(_PAD_MODES)}")
    begins, ends = pads[:r], pads[r:]
    crop = tuple(
        slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends))
    )
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if not any(b or e for b, e in widths):
        return x
    for d, (b, e) in enumerate(widths):
        if mode == "reflect" and max(b, e) > 0 and max(b, e) >= x.shape[d]:  # (NumPy: again)
            raise ValueError(
                f"reflect pads ({b}, {e}) on dim {d} of size {x.shape[d]}: at most "
                f"{max(x.shape[d] - 1, 0)} rows a side reflect"
            )
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.asarray(value, dtype=x.dtype))
    return np.pad(x, widths, mode=_PAD_MODES[mode])


def upsample_nearest(
    x: Array,
    scales: float | Sequence[float] | None = None,
    size: int | Sequence[int] | None = None,
) -> Array:
    """Nearest upsampling of the spatial dims, as ``F.interpolate(mode="nearest")``.

    The output length is ``size``, or ``floor(L * scale)``. Output index ``j`` reads input
    ``min(floor(j * r), L - 1)`` with ``r = 1 / scale`` when a scale is given and ``L / out``
    otherwise (ONNX [Resize](https://onnx.ai/onnx/operators/onnx__Resize.html) with
    ``asymmetric`` and ``floor``).

    Details follow PyTorch's 2-D kernel (``upsample_nearest2d``, ``nearest_idx``), in any rank:

    - an output of length ``L`` or ``2 L`` reads ``j`` or ``j // 2``, whatever the scale (so
      scale 1.1 on length 5 is the identity; torch's 1-D kernel would apply the scale);
    - otherwise ``r`` and the product are float32 whatever ``x``'s dtype. That is how torch
      picks the pixels of a float32 tensor, and it keeps the float32 and float64 levels on the
      same pixels. It differs from the exact ``floor(j * L / out)`` (which torch uses for
      float64 tensors) where ``j * L / out`` is an integer and float32 ``r`` rounds down, e.g.
      length 2 to 82.
    """
    n = x.ndim - 2
    if n < 1:
        raise ValueError(f"upsample needs input [N, C, *S], got shape {x.shape}")
    if (scales is None) == (size is None):
        raise ValueError("upsample_nearest needs exactly one of scales and size")
    y = x
    for i in range(n):
        length = x.shape[2 + i]
        if size is not None:
            o = size if isinstance(size, int) else size[i]
            ratio = np.float32(length) / np.float32(o)
        else:
            assert scales is not None
            s = scales if isinstance(scales, (int, float)) else scales[i]
            o = upsample_output_size(length, scale=s)
            ratio = np.float32(1.0 / s)
        y = np.take(y, nearest_indices(length, o, ratio), axis=2 + i)
    return y


def nearest_indices(length: int, out: int, ratio: np.float32 | None = None) -> NDArray[np.int64]:
    """The input index each of ``out`` outputs of :func:`upsample_nearest` reads along a dim of
    ``length`` (``ratio``: float32 ``1 / scale``, default ``length / out``).

    For ``out = r * length`` this is ``j // r`` for every ``r`` below 41 and for most others;
    torch's float32 product picks ``j // r - 1`` at a few ``j`` for ``r`` = 41, 47, 55, ... (the
    streaming rule of upsampling checks this before it emits ``r`` rows per row).
    """
    if ratio is None:
        ratio = np.float32(length) / np.float32(out)
    if out == length:
        return np.arange(out)
    if out == 2 * length:
        return np.arange(out) // 2
    src = np.floor(np.arange(out, dtype=np.float32) * ratio).astype(np.int64)
    return np.minimum(src, length - 1)


def concat(xs: Sequence[Array], axis: int) -> Array:
    """Concatenate along ``axis`` (``torch.cat``; ONNX [Concat](https://onnx.ai/onnx/operators/onnx__Concat.html))."""
    return np.concatenate(list(xs), axis=axis)


def split(x: Array, sizes: int | Sequence[int], axis: int) -> list[Array]:
    """Split along ``axis`` into pieces of the given lengths, or of length ``sizes`` each with a
    shorter last one (``torch.split``; ONNX [Split](https://onnx.ai/onnx/operators/onnx__Split.html))."""
    length = x.shape[axis]
    if isinstance(sizes, int):
        if sizes <= 0:
            raise ValueError(f"split size must be positive, got {sizes}")
        sizes = [min(sizes, length - start) for start in range(0, length, sizes)] or [0]
    if sum(sizes) != length:
        raise ValueError(
            f"split sizes {list(sizes)} do not add up to length {length} of axis {axis}"
        )
    return np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)


def transpose(x: Array, perm: Sequence[int]) -> Array:
    """Permute the dims: ``y.shape[i] = x.shape[perm[i]]`` (``torch.permute``; ONNX Transpose)."""
    return np.transpose(x, perm)


def reshape(x: Array, shape: Sequence[int]) -> Array:
    """Reshape in C order; one entry may be -1 (``torch.reshape``). Unlike ONNX Reshape, 0 is
    a literal zero length, not "copy this dim"."""
    return np.reshape(x, tuple(shape))
