"""Integer products (``nh.conv``, ``nh.conv_transpose``, ``nh.linear``, ``nh.matmul``) on the
fastest kernel onnxruntime runs exactly (issue 33 §1), chosen per op from static bounds:

1. **fused** (``QLinearConv``, uint8 codes x int8 weights, or x uint8 weights offset by 128):
   for a conv read only by a half_even requant to at most 8 bits. onnxruntime requantizes the
   int32 sum by a float32 multiply by ``2**-shift`` (the scales are powers of two: ``w_scale``
   per output channel), rounds half to even and saturates: exact while ``|acc| <= 2**24`` (the
   bound says so) and while the kernel sums its products exactly. Its uint8 x int8 GEMM kernels
   on x86 without VNNI saturate pairs of products in int16 (``vpmaddubsw``); its uint8 x uint8
   ones do not, and are slower. The graph uses the kernel ``Graph.kernel`` names, the fastest
   :func:`nanoir.grammar.onnx.integer.session.fused_kernel` finds exact on this machine, and
   the file records it (its reader writes the same graph; a session on a machine where the
   probe fails refuses it). Narrower results and a fused ReLU are a uint8 ``Clip`` after.
2. **float** (``Conv``, ``ConvTranspose``, ``MatMul`` in float32 on the codes): exact while every
   partial sum is, which holds when ``sum_k |x| |w_k| + |bias| <= 2**24`` per output (the static
   bound, from the constant weights' codes): any summation order, FMA or not, stays exact.
   A product read only by its requant is written with ``2**-shift`` folded into its weights and
   bias (exact: powers of two), plus 1/2 for half_up, so the requant is the rounding and the
   clip alone (:mod:`.requant`). A grouped conv whose bias alone passes ``2**24`` is a float32
   ``Conv`` without it and the bias added in float64 (:func:`_float_conv_wide_bias`).
3. **integer** (``ConvInteger`` / ``MatMulInteger`` on uint8 parts) otherwise: signed codes
   offset by 128 with zero point 128, unsigned ones with zero point 0; a 9..16-bit operand split
   into bytes (``x = 256 hi + lo``). int32 wraps like the exact sum modulo ``2**32``, so where the
   bound fits int32 the sum is exact. Where it does not (hand-written programs,
   ``lower-to-hw{allow_overflow=true}``), each part's product (which does fit int32) is summed
   in int64 and the result is *checked*: codes outside i32 count in the graph's check output,
   which the session turns into an :class:`~nanoir.runtime.base.ExecutionError`, as the NumPy
   executor refuses them. A part whose own sum may leave int32 (more than 33,025 terms of
   full bytes) is refused, naming the op and its bound.

A transposed convolution's integer form is ``ConvInteger`` on the input with ``stride - 1``
zeros (codes) put between its samples, the weight flipped and its channel dims swapped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.common import (
    Writer,
    constant_codes,
    out_name,
    per_output_bound,
    refuse,
    sole_reader,
)
from nanoir.grammar.onnx.integer.graph import F32_EXACT, I32_MAX, Graph, zero_point
from nanoir.grammar.onnx.integer.polyphase import interleave, phases
from nanoir.grammar.onnx.integer.requant import (
    half_up_fits,
    quantize_offset,
    quantizes,
    saturation,
    shifts_of,
)
from nanoir.grammar.onnx.integer.session import fused_weight_zero, fused_weights
from nanoir.runtime.numerics.quant import shift_round
from nanoir.runtime.numerics.shapes import window_params
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

SCALE_LIMIT = 100
"""Largest ``|shift|`` folded into float32 weights: ``2**-100`` times a code is a normal float."""


def constant(g: Graph, op: nh.ConstantOp) -> None:
    codes = op.codes().astype(np.int64)
    g.lazy[op.result] = codes
    g.set_bound(op.result, int(np.abs(codes).max(initial=0)))


# --------------------------------------------------------------------------------------------
# Bounds and the choice of kernel
# --------------------------------------------------------------------------------------------


def _requant_reader(op: Operation) -> nh.RequantOp | None:
    """The requant that alone reads the product, with shifts a float32 scale holds."""
    reader = sole_reader(op.results[0])
    if not isinstance(reader, nh.RequantOp) or nh.width_of(reader.result) == 1:
        return None
    if np.abs(shifts_of(reader)).max(initial=0) > SCALE_LIMIT:
        return None
    return reader


def _per_out(shifts: np.ndarray, outs: int) -> np.ndarray:
    """Requant shifts as one per output channel; a phase conv's ``outs`` are each channel's
    phases (:mod:`.polyphase`), which share its shift."""
    s = shifts.reshape(-1)
    assert outs % s.size == 0, "a shift per output channel, or per channel of a phase conv"
    return np.broadcast_to(s, (outs,)) if s.size == 1 else np.repeat(s, outs // s.size)


def _foldable(g: Graph, reader: nh.RequantOp | None, sums: np.ndarray) -> bool:
    """Whether the requant's scale (and its rounding offset) can go into a float product."""
    if reader is None:
        return False
    if quantizes(g, reader, int(max(sums, default=0))):
        return True
    if reader.rounding.data is RoundingMode.HALF_UP:
        s = _per_out(shifts_of(reader), len(sums))
        return all(half_up_fits(int(b), np.asarray(k)) for b, k in zip(sums, s))
    return True


def _fusable(g: Graph, op: Operation, x: SSAValue, w: np.ndarray | None, sums: np.ndarray) -> bool:
    """Whether ``QLinearConv`` (``g.kernel``) computes the product and its requant exactly."""
    reader = _requant_reader(op)
    return (
        g.kernel is not None
        and reader is not None
        and reader.rounding.data is RoundingMode.HALF_EVEN
        and nh.width_of(reader.result) <= 8
        and nh.width_of(x) <= 8
        and w is not None
        and int(w.min(initial=0)) >= -128
        and int(w.max(initial=0)) <= 127
        and max(sums, default=0) <= F32_EXACT
    )


# --------------------------------------------------------------------------------------------
# Fused: QLinearConv
# --------------------------------------------------------------------------------------------


def _constant_channels(
    g: Graph, op: Operation, w: np.ndarray, bias: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray] | None:
    """For a conv whose requant alone reads it and some of whose output channels have all-zero
    weights, ``(bias, shifts)`` with each such channel's requantized result in its bias and
    shift 0 (the kernel then gives that code: its sum is the bias alone), else None. Such a
    channel (pruned, or dead after training) may carry a bias of 31 bits (its weight
    exponent is free), past float32's exact integers: without this the whole conv leaves the
    fused kernel for ``ConvInteger``."""
    reader = _requant_reader(op)
    dead = ~w.reshape(w.shape[0], -1).any(axis=1)
    if reader is None or not dead.any():
        return None
    shifts = _per_out(shifts_of(reader), w.shape[0]).astype(np.int64)
    b = np.zeros(w.shape[0], np.int64) if bias is None else bias.reshape(-1).astype(np.int64)
    lo, hi = saturation(g, reader)
    codes = np.clip(shift_round(b, shifts, reader.rounding.data), lo, hi)
    return np.where(dead, codes, b), np.where(dead, 0, shifts)


def _fused_conv(
    g: Graph,
    op: Operation,
    x: SSAValue,
    w: np.ndarray,
    bias: np.ndarray | None,
    attrs: dict[str, Any],
    sums: np.ndarray,
    shifts: np.ndarray | None = None,
) -> None:
    """``QLinearConv`` writing the requant's result in uint8 form (see the module docstring);
    ``shifts``: the requant's per output channel, when not its own."""
    reader = _requant_reader(op)
    assert reader is not None and g.kernel is not None
    base = out_name(g, reader)
    wz = fused_weight_zero(g.kernel)
    outs = w.shape[0]
    zx, zy = zero_point(x), zero_point(reader.result)
    if shifts is None:
        shifts = _per_out(shifts_of(reader), outs)
    if len(set(shifts.tolist())) == 1:  # per tensor: scalar scale and zero point
        shifts = shifts[:1].reshape(())
    inputs = [
        g.get(x, "u8"),
        g.const(1.0, np.float32),
        g.const(zx, np.uint8),
        g.const(fused_weights(w, g.kernel), wz.dtype, base + "_w"),
        g.const(np.ldexp(1.0, -shifts), np.float32, base + "_ws"),
        g.const(np.full(shifts.shape, wz), wz.dtype, base + "_wz"),
        g.const(1.0, np.float32),
        g.const(zy, np.uint8),
    ]
    if bias is not None:
        inputs.append(g.const(bias.reshape(-1), np.int32, base + "_b"))
    lo, hi = saturation(g, reader)
    y = g.node(
        "QLinearConv", inputs, base + ("_q" if lo + zy > 0 or hi + zy < 255 else ""), **attrs
    )
    if lo + zy > 0 or hi + zy < 255:
        y = g.node("Clip", [y, g.const(lo + zy, np.uint8), g.const(hi + zy, np.uint8)], base)
    g.used_kernel = True
    g.done.add(reader)
    g.put(reader.result, "u8", y)
    g.set_bound(reader.result, max(-lo, hi))
    g.set_bound(op.results[0], int(max(sums, default=0)))


# --------------------------------------------------------------------------------------------
# Float32 products
# --------------------------------------------------------------------------------------------


def _float_weights(
    g: Graph,
    op: Operation,
    w: np.ndarray,
    bias: np.ndarray | None,
    out_axis: int,
    sums: np.ndarray,
    label: str,
    fold: bool = True,
) -> tuple[str, str | None, nh.RequantOp | None]:
    """The weight and bias initializers of a float product: scaled by its requant's
    ``2**-shift`` (plus 1/2 in the bias for half_up) when the requant alone reads it (and
    ``fold``: not with a run-time bias, added after)."""
    reader = _requant_reader(op) if fold else None
    if not _foldable(g, reader, sums):
        reader = None
    outs = w.shape[out_axis]
    wf = w.astype(np.float64)
    bf = None if bias is None else bias.reshape(-1).astype(np.float64)
    if reader is not None:
        s = _per_out(shifts_of(reader), outs)
        shape = [1] * w.ndim
        shape[out_axis] = outs
        wf = np.ldexp(wf, -s.reshape(shape))
        bf = np.zeros(outs) if bf is None else bf
        bf = np.ldexp(bf, -s)
        if quantizes(g, reader, int(max(sums, default=0))):
            bf = bf + quantize_offset(reader.rounding.data, s)
        elif reader.rounding.data is RoundingMode.HALF_UP:
            bf = bf + np.where(s > 0, 0.5, 0.0)
    if bias is None and (bf is None or not bf.any()):
        bf = None  # a zero bias is no bias
    base = label if reader is None else out_name(g, reader) + "_scaled"
    wn = g.const(wf, np.float32, base + "_w")
    bn = None if bf is None else g.const(bf, np.float32, base + "_b")
    return wn, bn, reader


def _float_result(
    g: Graph, op: Operation, y: str, reader: nh.RequantOp | None, sums: np.ndarray
) -> None:
    """Record a float product's result: the scaled accumulator for its requant, or the
    accumulator's f32 form."""
    if reader is not None:
        g.scaled[reader] = y
    else:
        g.put(op.results[0], "f32", y)
    g.set_bound(op.results[0], int(max(sums, default=0)))


def _float_conv_wide_bias(
    g: Graph,
    op: Operation,
    x: SSAValue,
    w: np.ndarray,
    bias: np.ndarray,
    attrs: dict[str, Any],
    sums: np.ndarray,
) -> None:
    """A float32 ``Conv`` of the codes without the bias (exact: its sums fit float32), the
    bias added after in float64 (exact: the whole sum fits int32, as its bound says), the
    accumulator left in float64 for its reader. For grouped convs only: a bias past
    float32's integers (a channel whose weights have a fine exponent, common in trained
    depthwise convs) otherwise sends the conv to ``ConvInteger``, which onnxruntime runs as
    one GEMM per group (PP-OCRv4's 480-channel 5x5 depthwise conv: 1.0 ms against 0.41 with
    the bias; a 64-channel 3x3 one 0.20 against 0.11), while its dense ``ConvInteger`` beats
    the float32 ``Conv`` (1.2-1.7x on four dense shapes of the trained networks)."""
    base = out_name(g, op)
    wn = g.const(w.astype(np.float32), np.float32, base + "_w")
    y = g.node("Conv", [g.get(x, "f32"), wn], base + "_nb", **attrs)
    y = g.node("Cast", [y], base + "_nb64", to=11)
    shape = (w.shape[0],) + (1,) * (w.ndim - 2)
    y = g.node("Add", [y, g.const(bias.reshape(shape), np.float64, base + "_b")], base)
    g.put(op.results[0], "f64", y)
    g.set_bound(op.results[0], int(max(sums, default=0)))


def _runtime_bias(g: Graph, op: Operation, y: str, bias: SSAValue, shape: tuple[int, ...]) -> str:
    b = g.node("Reshape", [g.get(bias, "f32"), g.const(shape, np.int64)], out_name(g, op) + "_b")
    return g.node("Add", [y, b], out_name(g, op) + "_acc")


# --------------------------------------------------------------------------------------------
# Integer products on uint8 parts
# --------------------------------------------------------------------------------------------

Part = tuple[str, int, int, int]
"""A uint8 operand part: (tensor name, zero point, scale, bound of |part - zero point|)."""


def _const_parts(codes: np.ndarray, op: Operation) -> list[tuple[np.ndarray, int, int]]:
    """Constant codes as uint8 parts (array, zero point, scale): one byte when they fit, else
    low bytes (unsigned) and a signed top byte, ``c = sum(part * scale)``."""
    c = np.asarray(codes, dtype=np.int64)
    if c.size == 0 or (c.min() >= -128 and c.max() <= 127):
        return [((c + 128).astype(np.uint8), 128, 1)]
    if c.min() >= 0 and c.max() <= 255:
        return [(c.astype(np.uint8), 0, 1)]
    parts: list[tuple[np.ndarray, int, int]] = []
    scale = 1
    while c.min() < -128 or c.max() > 127:
        lo = np.mod(c, 256)
        parts.append((lo.astype(np.uint8), 0, scale))
        c = (c - lo) // 256
        scale *= 256
    if scale > 2**24:
        raise refuse(op, "has a constant operand wider than 32 bits")
    return [*parts, ((c + 128).astype(np.uint8), 128, scale)]


def _named_parts(
    g: Graph, codes: np.ndarray, op: Operation, array: Callable[[np.ndarray], np.ndarray], base: str
) -> list[Part]:
    return [
        (
            g.const(array(a), np.uint8, base),
            z,
            s,
            int(np.abs(a.astype(np.int64) - z).max(initial=0)),
        )
        for a, z, s in _const_parts(codes, op)
    ]


def value_parts(g: Graph, v: SSAValue, op: Operation) -> list[Part]:
    """A run-time operand as uint8 parts: itself up to 8 bits, else its bytes (the low ones
    unsigned, the top one signed, or unsigned for ``ui16``)."""
    width = nh.width_of(v)
    if width <= 8:
        zp = zero_point(v)
        return [(g.get(v, "u8"), zp, 1, max(zp, 255 - zp) if zp else 255)]
    base = g.base(v)
    # float32 where the codes are exact in it (16-bit ones): onnxruntime runs integer Mod and
    # Div as scalar loops, Floor and the rest vectorized; x / 256 and its floor are exact.
    dtype = np.float32 if g.float_exact(v) else np.int32
    x = g.get(v, "f32" if dtype is np.float32 else "i32")
    unsigned = nh.is_unsigned(v)
    parts: list[Part] = []
    nbytes = -(-width // 8)
    for k in range(nbytes - 1):
        if dtype is np.float32:
            q = g.node("Mul", [x, g.const(1 / 256, dtype)], f"{base}_s{k}")
            q = g.node("Floor", [q], f"{base}_q{k}")
            high = g.node("Mul", [q, g.const(256, dtype)], f"{base}_h{k}")
            lo = g.node("Sub", [x, high], f"{base}_b{k}")
        else:
            lo = g.node("Mod", [x, g.const(256, dtype)], f"{base}_b{k}")
            q = g.node("Sub", [x, lo], f"{base}_r{k}")
            q = g.node("Div", [q, g.const(256, dtype)], f"{base}_q{k}")
        parts.append((g.node("Cast", [lo], f"{base}_u{k}", to=2), 0, 256**k, 255))
        x = q
    if not unsigned:
        x = g.node("Add", [x, g.const(128, dtype)], f"{base}_top")
    top = g.node("Cast", [x], f"{base}_u{nbytes - 1}", to=2)
    return [*parts, (top, 0 if unsigned else 128, 256 ** (nbytes - 1), 255 if unsigned else 128)]


def integer_product(
    g: Graph,
    op: Operation,
    op_type: str,
    xs: list[Part],
    ws: list[Part],
    inner: int,
    wide: bool,
    base: str,
    **attrs: Any,
) -> str:
    """Sum over part pairs of ``scale_x * scale_w * op_type(x, w)``: in int32 (wrapping like
    the exact sum modulo ``2**32``) or, ``wide``, in int64 from int32 part products that each
    provably fit (else refused)."""
    acc: str | None = None
    for xn, xz, xsc, xb in xs:
        for wn, wz, wsc, wb in ws:
            if wide:
                part_bound = inner * xb * wb
                if part_bound > I32_MAX:
                    raise refuse(
                        op,
                        f"sums {inner} products of up to {xb * wb} per part (bound "
                        f"{part_bound}), past int32 in one integer kernel: no exact integer "
                        "ONNX form (split the reduction, or lower without allow_overflow)",
                    )
                scale = xsc * wsc
            else:  # int32 wraps like the exact sum modulo 2**32: so does the scale.
                scale = (xsc * wsc) % 2**32
                scale -= 2**32 if scale >= 2**31 else 0
                if scale == 0:
                    continue
            zx, zw = g.const(xz, np.uint8), g.const(wz, np.uint8)
            y = g.node(op_type, [xn, wn, zx, zw], base + "_p", **attrs)
            dtype = np.int32
            if wide:
                y, dtype = g.node("Cast", [y], base + "_p64", to=7), np.int64
            if scale != 1:
                y = g.node("Mul", [y, g.const(scale, dtype)], base + "_ps")
            acc = y if acc is None else g.node("Add", [acc, y], base + "_pa")
    assert acc is not None
    return acc


def _integer_bias(
    g: Graph,
    acc: str,
    bias: SSAValue | np.ndarray | None,
    shape: tuple[int, ...],
    wide: bool,
    base: str,
) -> str:
    """``acc`` plus ``bias``: a value, or constant codes."""
    if bias is None:
        return acc
    dtype = np.int64 if wide else np.int32
    codes = bias if isinstance(bias, np.ndarray) else constant_codes(bias)
    if codes is not None:
        b = g.const(codes.reshape(shape), dtype, base + "_b")
    else:
        b = g.node(
            "Reshape",
            [g.get(bias, "i64" if wide else "i32"), g.const(shape, np.int64)],
            base + "_b",
        )
    return g.node("Add", [acc, b], base + "_acc" if wide else base)


def _integer_result(g: Graph, op: Operation, acc: str, wide: bool, bound: int) -> None:
    """The accumulator's i32 form; a wide one is checked against i32 first."""
    result = op.results[0]
    if wide:
        g.check(op, acc, -(2**31), I32_MAX, np.int64)
        acc = g.node("Cast", [acc], out_name(g, op), to=6)
    g.put(result, "i32", acc)
    g.set_bound(result, bound)


# --------------------------------------------------------------------------------------------
# The writers
# --------------------------------------------------------------------------------------------


def conv(g: Graph, op: nh.ConvOp) -> None:
    """``nh.conv`` on the fastest exact kernel (the module docstring); of zero-inserted codes
    it alone reads, as its phase convolution of the small input (:mod:`.polyphase`)."""
    p = phases(g, op)
    if p is None:
        w = constant_codes(op.weight)
        if w is None:
            raise refuse(op, "has a run-time weight (its integer ONNX form needs a constant one)")
        bias = None if op.bias is None else constant_codes(op.bias)
        n = w.ndim - 2
        _, strides, pads, dil = window_params(
            n,
            w.shape[2:],
            array_values(op.strides),
            array_values(op.pads),
            array_values(op.dilations),
        )
        _conv(g, op, op.input, w, bias, list(strides), list(pads), list(dil))
        return
    n = len(p.ratios)
    _conv(g, op, p.up.input, p.weight, p.bias, [1] * n, p.pads, [1] * n)
    reader = _requant_reader(op)
    if reader is not None and reader in g.done:  # the fused kernel wrote the requant's codes
        result = reader.result
    elif reader is not None and reader in g.scaled:
        g.scaled[reader] = interleave(g, op, p, g.scaled[reader], "f32")
        return
    else:
        result = op.results[0]
    g.forms[result] = {f: interleave(g, op, p, y, f) for f, y in g.forms[result].items()}


def _conv(
    g: Graph,
    op: nh.ConvOp,
    x: SSAValue,
    w: np.ndarray,
    bias: np.ndarray | None,
    strides: list[int],
    pads: list[int],
    dilations: list[int],
) -> None:
    """``op`` as the conv of ``x`` by the codes ``w`` and ``bias`` (None: none, or a run-time
    one) with ``op``'s groups."""
    base = out_name(g, op)
    n = w.ndim - 2
    attrs = {
        "kernel_shape": list(w.shape[2:]),
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "group": op.groups.value.data,
    }
    runtime_bias = op.bias is not None and bias is None
    sums = per_output_bound(w, 0, g.bound(x), 0, 0, bias)
    if runtime_bias:
        sums = sums + g.bound(op.bias)
    if not runtime_bias and _fusable(g, op, x, w, sums):
        _fused_conv(g, op, x, w, bias, attrs, sums)
        return
    constant = None if runtime_bias else _constant_channels(g, op, w, bias)
    if constant is not None:
        folded = per_output_bound(w, 0, g.bound(x), 0, 0, constant[0])
        if _fusable(g, op, x, w, folded):
            _fused_conv(g, op, x, w, constant[0], attrs, folded, constant[1])
            return
    if max(sums, default=0) <= F32_EXACT and g.float_exact(x):
        wn, bn, reader = _float_weights(g, op, w, bias, 0, sums, base, not runtime_bias)
        inputs = [g.get(x, "f32"), wn, *([bn] if bn is not None else [])]
        y = g.node("Conv", inputs, base + ("_acc" if runtime_bias else ""), **attrs)
        if runtime_bias:
            assert op.bias is not None
            y = _runtime_bias(g, op, y, op.bias, (w.shape[0],) + (1,) * n)
        _float_result(g, op, y, reader, sums)
        return
    if bias is not None and attrs["group"] > 1 and g.float_exact(x):
        unbiased = per_output_bound(w, 0, g.bound(x), 0, 0, None)
        if max(unbiased, default=0) <= F32_EXACT and max(sums, default=0) <= I32_MAX:
            _float_conv_wide_bias(g, op, x, w, bias, attrs, sums)
            return
    bound = int(max(sums, default=0))
    wide = bound > I32_MAX
    xs = value_parts(g, x, op)
    ws = _named_parts(g, w, op, lambda a: a, base + "_w")
    acc = integer_product(
        g,
        op,
        "ConvInteger",
        xs,
        ws,
        math.prod(w.shape[1:]),
        wide,
        base + "_acc" if op.bias is not None or wide else base,
        **attrs,
    )
    b = op.bias if runtime_bias else bias
    acc = _integer_bias(g, acc, b, (w.shape[0],) + (1,) * n, wide, base)
    _integer_result(g, op, acc, wide, bound)


def conv_transpose(g: Graph, op: nh.ConvTransposeOp) -> None:
    """float32 ``ConvTranspose`` where exact; else a convolution of the input with
    ``stride - 1`` zeros put between its samples, by the weight flipped with its channel dims
    swapped: float32 ``Conv`` where exact (onnxruntime's ``ConvTranspose`` refuses an
    ``output_padding`` of at least the stride, which torch and nh take), else ``ConvInteger``
    on uint8 parts."""
    base = out_name(g, op)
    x_shape, w_shape = tensor_shape(op.input), tensor_shape(op.weight)
    n = len(w_shape) - 2
    kernel, strides, pads, dil = window_params(
        n, w_shape[2:], array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    out_pad = list(array_values(op.output_padding) or (0,) * n)
    groups = op.groups.value.data
    w = constant_codes(op.weight)
    if w is None:
        raise refuse(op, "has a run-time weight (its integer ONNX form needs a constant one)")
    if any(d == DYNAMIC_INDEX for d in x_shape[1:]):
        raise refuse(op, "has dynamic channels or spatial sizes")
    c_in, per_group = w_shape[0], w_shape[1]
    inner = math.prod(w_shape[2:]) * c_in // groups
    bw = int(np.abs(w).max(initial=0))
    bias_bound = 0 if op.bias is None else g.bound(op.bias)
    bound = inner * g.bound(op.input) * bw + bias_bound
    spatial = list(x_shape[2:])
    begin = [d * (k - 1) - p for d, k, p in zip(dil, kernel, pads[:n])]
    end = [d * (k - 1) - p + o for d, k, p, o in zip(dil, kernel, pads[n:], out_pad)]

    def stuffed(x: str, zero: str, label: str) -> str:
        """Zero-stuff one operand (``zero`` is code 0 in its form): [N, C, S] -> [N, C,
        (S-1)s+1]; then crop where ``d (k - 1) - pad`` (plus output_padding at the end) < 0."""
        y = x
        if any(s > 1 for s in strides):
            inter = [0, x_shape[1]] + [v for sz in spatial for v in (sz, 1)]
            y = g.node("Reshape", [y, g.const(inter, np.int64)], base + label + "_r")
            widen = [0] * (2 + 2 * n) + [0, 0] + [v for s in strides for v in (0, s - 1)]
            y = g.node("Pad", [y, g.const(widen, np.int64), zero], base + label + "_z")
            full = [0, x_shape[1]] + [sz * s for sz, s in zip(spatial, strides)]
            y = g.node("Reshape", [y, g.const(full, np.int64)], base + label + "_s")
            ends = [sz * s - s + 1 for sz, s in zip(spatial, strides)]
            axes = g.const(list(range(2, 2 + n)), np.int64)
            starts = g.const([0] * n, np.int64)
            y = g.node("Slice", [y, starts, g.const(ends, np.int64), axes], base + label + "_c")
        if any(v < 0 for v in begin + end):
            crop = [0, 0] + [min(v, 0) for v in begin] + [0, 0] + [min(v, 0) for v in end]
            y = g.node("Pad", [y, g.const(crop, np.int64)], base + label + "_crop")
        return y

    def as_conv(a: np.ndarray) -> np.ndarray:
        # [C, O/g, *K] -> [O, C/g, *K], flipped: w'[g O/g + o, c] = w[g C/g + c, o, K - 1 - k].
        wg = a.reshape(groups, c_in // groups, per_group, *kernel)
        wg = np.swapaxes(wg, 1, 2)[(Ellipsis, *(slice(None, None, -1),) * n)]
        return np.ascontiguousarray(wg.reshape(groups * per_group, c_in // groups, *kernel))

    conv_pads = [max(v, 0) for v in begin] + [max(v, 0) for v in end]
    attrs = {
        "kernel_shape": list(kernel),
        "pads": conv_pads,
        "dilations": list(dil),
        "group": groups,
    }
    bias_shape = (groups * per_group,) + (1,) * n
    if bound <= F32_EXACT and g.float_exact(op.input):
        bias = None if op.bias is None else constant_codes(op.bias)
        runtime_bias = op.bias is not None and bias is None
        name = base + ("_acc" if runtime_bias else "")
        if all(o < s for o, s in zip(out_pad, strides)):  # what ConvTranspose itself takes
            inputs = [g.get(op.input, "f32"), g.const(w, np.float32, base + "_w")]
            if bias is not None:
                inputs.append(g.const(bias.reshape(-1), np.float32, base + "_b"))
            y = g.node(
                "ConvTranspose",
                inputs,
                name,
                kernel_shape=list(kernel),
                strides=list(strides),
                pads=list(pads),
                dilations=list(dil),
                output_padding=out_pad,
                group=groups,
            )
        else:
            x = stuffed(g.get(op.input, "f32"), g.const(0.0, np.float32), "_x")
            inputs = [x, g.const(as_conv(w), np.float32, base + "_w")]
            if bias is not None:
                inputs.append(g.const(bias.reshape(-1), np.float32, base + "_b"))
            y = g.node("Conv", inputs, name, **attrs)
        if runtime_bias:
            assert op.bias is not None
            y = _runtime_bias(g, op, y, op.bias, bias_shape)
        g.put(op.result, "f32", y)
        g.set_bound(op.result, bound)
        return
    xs = [
        (stuffed(name, g.const(zp, np.uint8), f"_x{i}"), zp, scale, b)
        for i, (name, zp, scale, b) in enumerate(value_parts(g, op.input, op))
    ]
    wide = bound > I32_MAX
    ws = _named_parts(g, w, op, as_conv, base + "_w")
    acc = integer_product(
        g,
        op,
        "ConvInteger",
        xs,
        ws,
        inner,
        wide,
        base + "_acc" if op.bias is not None or wide else base,
        **attrs,
    )
    acc = _integer_bias(g, acc, op.bias, bias_shape, wide, base)
    _integer_result(g, op, acc, wide, bound)


def linear(g: Graph, op: nh.LinearOp) -> None:
    base = out_name(g, op)
    w_shape = tensor_shape(op.weight)
    w = constant_codes(op.weight)
    if w is None:
        raise refuse(op, "has a run-time weight (its integer ONNX form needs a constant one)")
    bias = None if op.bias is None else constant_codes(op.bias)
    runtime_bias = op.bias is not None and bias is None
    sums = per_output_bound(w, 0, g.bound(op.input), 0, 0, bias)
    if runtime_bias:
        sums = sums + g.bound(op.bias)
    if max(sums, default=0) <= F32_EXACT and g.float_exact(op.input):
        wn, bn, reader = _float_weights(g, op, w.T, bias, 1, sums, base, not runtime_bias)
        last = bn is None and not runtime_bias
        y = g.node("MatMul", [g.get(op.input, "f32"), wn], base + ("" if last else "_mm"))
        if bn is not None:
            y = g.node("Add", [y, bn], base)
        if runtime_bias:
            assert op.bias is not None
            y = _runtime_bias(g, op, y, op.bias, (w_shape[0],))
        _float_result(g, op, y, reader, sums)
        return
    bound = int(max(sums, default=0))
    wide = bound > I32_MAX
    xs = value_parts(g, op.input, op)
    ws = _named_parts(g, w, op, lambda a: np.ascontiguousarray(a.T), base + "_w")
    acc = integer_product(
        g,
        op,
        "MatMulInteger",
        xs,
        ws,
        w_shape[1],
        wide,
        base + "_acc" if op.bias is not None or wide else base,
    )
    acc = _integer_bias(g, acc, op.bias, (w_shape[0],), wide, base)
    _integer_result(g, op, acc, wide, bound)


def matmul(g: Graph, op: nh.MatmulOp) -> None:
    base = out_name(g, op)
    inner = max(tensor_shape(op.lhs)[-1], 1)
    bound = inner * g.bound(op.lhs) * g.bound(op.rhs)
    if bound <= F32_EXACT:
        y = g.node("MatMul", [g.get(op.lhs, "f32"), g.get(op.rhs, "f32")], base)
        g.put(op.result, "f32", y)
        g.set_bound(op.result, bound)
        return
    wide = bound > I32_MAX
    parts = []
    for v in (op.lhs, op.rhs):
        codes = constant_codes(v)
        if codes is not None:
            parts.append(_named_parts(g, codes, op, lambda a: a, base + "_k"))
        else:
            parts.append(value_parts(g, v, op))
    acc = integer_product(
        g, op, "MatMulInteger", parts[0], parts[1], inner, wide, base + ("_acc" if wide else "")
    )
    _integer_result(g, op, acc, wide, bound)


WRITERS: dict[type[Operation], Writer] = {
    nh.ConstantOp: constant,
    nh.ConvOp: conv,
    nh.ConvTransposeOp: conv_transpose,
    nh.LinearOp: linear,
    nh.MatmulOp: matmul,
}
