"""Pools: ``nh.max_pool`` as ``MaxPool`` on the codes (float32, or float64 past ``2**24``; uint8
codes are pooled as their bytes in float32: the order of codes is the order of values),
``nh.avg_pool`` as exact window sums divided with the op's rounding.

The window sums are a float32 depthwise ``Conv`` with a ones kernel (a ``ReduceSum`` for a
global pool) where they stay within ``2**24``, else ``ConvInteger`` on uint8 parts. A divisor
that is one power of two everywhere (a 2x2 pool without padding) is a float32 scale and the
mode's rounding (:func:`nanoir.grammar.onnx.integer.requant.float_round`); any other (3x3, a
padded window's count) is the integer rounding division of :mod:`.arith`.
"""

from __future__ import annotations

import math

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.arith import cast_to, div_round, int_dtype
from nanoir.grammar.onnx.integer.common import Writer, out_name, refuse, sole_reader
from nanoir.grammar.onnx.integer.graph import F32_EXACT, F64_EXACT, I32_MAX, Graph, zero_point
from nanoir.grammar.onnx.integer.products import integer_product, value_parts
from nanoir.grammar.onnx.integer.requant import float_round, requant
from nanoir.runtime.nh import _pool_geometry, _pool_setup, _window_counts
from nanoir.runtime.numerics.shapes import pool_output_size
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation


def max_pool(g: Graph, op: nh.MaxPoolOp) -> None:
    """``MaxPool`` in float32 (float64 for codes past ``2**24``). Codes held only as uint8
    (code + zero point: the same order) are pooled as those bytes cast to float32 and cast
    back, giving the result's uint8 form: onnxruntime's uint8 ``MaxPool`` is a scalar loop,
    about 9x slower than the two casts and its vectorised float32 kernel (3x3/2 over a
    1x64x112x112 input: 7.0 ms against 0.8 ms)."""
    if op in g.done:  # written before its requant (requant_or_pool_first)
        return
    base = out_name(g, op)
    bytes_only = (
        g.has(op.input, "u8")
        and not g.has(op.input, "f32")
        and zero_point(op.input) == zero_point(op.result)
    )
    if bytes_only:
        x = g.node("Cast", [g.get(op.input, "u8")], base + "_f", to=1)
    else:
        x = g.get(op.input, "f32" if g.float_exact(op.input) else "f64")
    y = _max_pool_node(g, op, x, base + ("_p" if bytes_only else ""))
    if bytes_only:
        g.put(op.result, "u8", g.node("Cast", [y], base, to=2))
    else:
        g.put(op.result, "f32" if g.float_exact(op.input) else "f64", y)
    g.set_bound(op.result, g.bound(op.input))


def _max_pool_node(g: Graph, op: nh.MaxPoolOp, x: str, name: str) -> str:
    """The ``MaxPool`` of ``op``'s windows over ``x`` (float: its padding never wins). ONNX's
    ``ceil_mode`` keeps a last window that starts in the right padding, which PyTorch's rule
    (nh's) drops: that window is sliced off (over a dynamic size, where it cannot be known
    whether there is one, such a pool is refused)."""
    kernel, strides, begins, ends, dil, ceil_mode = _pool_geometry(op, array_values(op.dilations))
    sizes = tensor_shape(op.input)[2:]
    if ceil_mode and any(begins) and DYNAMIC_INDEX in sizes:
        raise refuse(
            op,
            "pools in ceil mode with padding over a dynamic size (ONNX keeps a last window "
            "that starts in the padding, which this op drops)",
        )
    axes: list[int] = []
    wanted: list[int] = []
    if ceil_mode and DYNAMIC_INDEX not in sizes:
        for axis, (n, k, s, b, e, d) in enumerate(zip(sizes, kernel, strides, begins, ends, dil)):
            want = pool_output_size(
                n, kernel=k, stride=s, pad_begin=b, pad_end=e, dilation=d, ceil_mode=True
            )
            wanted.append(want)
            if -(-(n + b + e - d * (k - 1) - 1) // s) + 1 != want:  # (ONNX's count)
                axes.append(axis + 2)
    y = g.node(
        "MaxPool",
        [x],
        name + ("_c" if axes else ""),
        kernel_shape=list(kernel),
        strides=list(strides),
        pads=list(begins) + list(ends),
        dilations=list(dil),
        ceil_mode=int(ceil_mode),
    )
    if not axes:
        return y
    ranges = [g.const(v, np.int64) for v in ([0] * len(axes), [wanted[a - 2] for a in axes], axes)]
    return g.node("Slice", [y, *ranges], name)


def requant_or_pool_first(g: Graph, op: nh.RequantOp) -> None:
    """``nh.requant``; when its one reader is an ``nh.max_pool`` and it reads float codes
    (no product wrote it, see :mod:`.products`), the pool first and the requant on the
    pooled codes, written as the pool's result: a requant is non-decreasing in every
    rounding mode and its clip too, so the max of the requantized codes is the requant of
    the max, and the requant then reads a quarter of the values (a 2x2 pool) without the
    uint8 round trip around the pool."""
    pool = sole_reader(op.result)
    if (
        not isinstance(pool, nh.MaxPoolOp)
        or op in g.done
        or op in g.scaled
        or nh.width_of(op.result) == 1
        or g.bound(op.input) > F64_EXACT
        or pool.result.type.encoding != op.result.type.encoding  # type: ignore[attr-defined]
        or pool.result.type.element_type != op.result.type.element_type  # type: ignore[attr-defined]
    ):
        requant(g, op)
        return
    form = "f32" if g.float_exact(op.input) else "f64"
    pooled = _max_pool_node(g, pool, g.get(op.input, form), out_name(g, pool) + "_pre")
    forms = g.forms.pop(op.input, None)
    g.forms[op.input] = {form: pooled}  # (the requant reads the pooled codes)
    try:
        requant(g, op)
    finally:
        if forms is None:
            del g.forms[op.input]
        else:
            g.forms[op.input] = forms
    g.forms[pool.result] = g.forms.pop(op.result)
    g.set_bound(pool.result, g.bound(op.result))
    g.done.add(pool)


def _divisor(op: nh.AvgPoolOp, x_shape: tuple[int, ...], geometry: tuple) -> np.ndarray:
    """The divisor of each output position (times ``2**shift``), broadcast over the output."""
    kernel, strides, begins, ends, dil, _ = geometry
    n = len(kernel)
    override = None if op.divisor_override is None else op.divisor_override.value.data
    if override is not None:
        divisor = np.full((1,) * (n + 2), override, dtype=np.int64)
    else:
        probe = np.zeros((1, 1, *x_shape[2:]), dtype=np.int8)
        out, _ = _pool_setup(probe, *geometry)
        include_pad = bool(op.count_include_pad.value.data)
        divisor = np.ones((), dtype=np.int64)
        for i in range(n):
            inside, padded = _window_counts(
                x_shape[2 + i], kernel[i], strides[i], begins[i], ends[i], dil[i], out[i]
            )
            divisor = np.multiply.outer(divisor, padded if include_pad else inside)
        if divisor.size and int(divisor.min()) == 0:
            raise refuse(op, "has a window of padding only, whose mean divides by 0")
        divisor = divisor.reshape(1, 1, *out)
    shifts = np.asarray(array_values(op.shift) or (0,), dtype=np.int64)
    if len(shifts) > 1:
        fx = nh.fixed_of(op.input)
        per = fx if fx.is_per_channel else nh.fixed_of(op.result)
        shape = [1] * (n + 2)
        shape[per.channel_axis or 1] = len(shifts)
        return divisor * (np.int64(1) << shifts.reshape(shape))
    return divisor * (np.int64(1) << shifts[0])


def avg_pool(g: Graph, op: nh.AvgPoolOp) -> None:
    base = out_name(g, op)
    geometry = _pool_geometry(op, None)
    kernel, strides, begins, ends, dil, ceil_mode = geometry
    x_shape = tensor_shape(op.input)
    if any(d == DYNAMIC_INDEX for d in x_shape[1:]):
        raise refuse(op, "has dynamic channels or spatial sizes")
    channels, n = x_shape[1], len(kernel)
    probe = np.zeros((1, 1, *x_shape[2:]), dtype=np.int8)
    out, reach = _pool_setup(probe, kernel, strides, begins, ends, dil, ceil_mode)
    divisor = _divisor(op, x_shape, geometry)
    bound = math.prod(kernel) * g.bound(op.input)
    width, signed = nh.width_of(op.result), not nh.is_unsigned(op.result)
    lo, hi = nh.code_range(width, signed)
    override = None if op.divisor_override is None else op.divisor_override.value.data
    checked = width == 1 or (override is not None and override < math.prod(kernel))
    mode = op.rounding.data
    exact = bound <= F32_EXACT and g.float_exact(op.input)
    if exact:
        whole = all(
            o == 1 and k == s and not b and not e
            for o, k, s, b, e in zip(out, kernel, x_shape[2:], begins, reach)
        )
        x = g.get(op.input, "f32")
        if whole:  # a global pool: one sum per plane
            total = g.node(
                "ReduceSum",
                [x, g.const(list(range(2, 2 + n)), np.int64)],
                base + "_sum",
                keepdims=1,
            )
        else:
            total = g.node(
                "Conv",
                [x, g.const(np.ones((channels, 1, *kernel)), np.float32, base + "_ones")],
                base + "_sum",
                kernel_shape=list(kernel),
                strides=list(strides),
                pads=list(begins) + list(reach),
                group=channels,
            )
        d = np.unique(divisor)
        power = len(d) == 1 and int(d[0]) > 0 and int(d[0]) & (int(d[0]) - 1) == 0
        if (
            power
            and not checked
            and (mode is not RoundingMode.HALF_UP or bound + int(d[0]) <= F32_EXACT)
        ):
            k = int(d[0]).bit_length() - 1
            y = total
            if k:
                y = g.node("Mul", [y, g.const(2.0**-k, np.float32)], base + "_m")
                if mode is RoundingMode.HALF_UP:
                    y = g.node("Add", [y, g.const(0.5, np.float32)], base + "_h")
            y, form = float_round(g, y, mode, lo, hi, base)
            g.put(op.result, form, y)
            g.set_bound(op.result, max(-lo, hi))
            return
        total, total_dtype = g.node("Cast", [total], base + "_sumi", to=6), np.int32
    else:
        total_dtype = np.int64 if bound > I32_MAX else np.int32
        ones = [(g.const(np.ones((channels, 1, *kernel)), np.uint8, base + "_ones"), 0, 1, 1)]
        total = integer_product(
            g,
            op,
            "ConvInteger",
            value_parts(g, op.input, op),
            ones,
            math.prod(kernel),
            bound > I32_MAX,
            base + "_sum",
            kernel_shape=list(kernel),
            strides=list(strides),
            pads=list(begins) + list(reach),
            group=channels,
        )
    dtype = int_dtype(bound + int(divisor.max(initial=1)))
    y = cast_to(g, total, total_dtype, dtype, base + "_w")
    y = div_round(g, y, divisor, mode, dtype, base + "_q")
    if checked:
        g.check(op, y, lo, hi, dtype, one_bit=width == 1)
    g.put(op.result, "i32", cast_to(g, y, dtype, np.int32, base))
    g.set_bound(op.result, max(-lo, hi))


WRITERS: dict[type[Operation], Writer] = {nh.MaxPoolOp: max_pool, nh.AvgPoolOp: avg_pool}
