"""One writer per nh op (``OPS``): the op's exact integer semantics (the kernels of
:mod:`nanoir.runtime.nh`) as standard ONNX nodes on the forms of :mod:`.graph`.

Products (`nh.conv`, `nh.linear`, `nh.matmul`, the window sums of `nh.avg_pool`) are
`ConvInteger` / `MatMulInteger` on uint8 operands: signed codes offset by 128 with zero point
128, unsigned ones with zero point 0. A 9..16-bit operand is split into two bytes
(``x = 256 hi + lo``, ``lo = x mod 256`` unsigned, ``hi`` signed) and the partial products
are added, scaled, in int32; int32 wraps like the exact sum modulo ``2**32``, and the exact sum
fits int32 (the nh accumulator), so the total is exact. Wider operands are refused.
A transposed convolution is `ConvInteger` on the input with ``stride - 1`` zeros (codes) put
between its samples, with the weight flipped and its channel dims swapped.

Softmax, log-softmax, LayerNorm and GroupNorm are their integer algorithms
(:mod:`nanoir.runtime.numerics.softmax`, :mod:`nanoir.runtime.numerics.norm`) step by step in
int64: table lookups are `Gather`, bit lengths count the powers of two at most the value
(``ReduceSum`` of a comparison), the norms' integer square root is the float64 root floored
and corrected by one either way, as the runtime's ``isqrt`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.arith import cast_to, clip, div_round, int_dtype, shift_round
from nanoir.grammar.onnx.integer.graph import Graph, IntegerOnnxError, natural_dtype, zero_point
from nanoir.runtime.nh import _pool_geometry, _pool_setup, _window_counts
from nanoir.runtime.numerics import kernels, movement
from nanoir.runtime.numerics.shapes import window_params
from nanoir.runtime.numerics.softmax import (
    _MANTISSA,
    EXP_FRAC,
    LN2,
    LN_FRAC,
    LN_TABLE,
    LN_TABLE_BITS,
    LO_FRAC,
)
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

Writer = Callable[[Graph, Any], None]
OPS: dict[type[Operation], Writer] = {}


def writes(op_type: type[Operation]) -> Callable[[Writer], Writer]:
    def register(fn: Writer) -> Writer:
        OPS[op_type] = fn
        return fn

    return register


def _refuse(op: Operation, why: str) -> IntegerOnnxError:
    hints = [r.name_hint for r in op.results if r.name_hint]
    where = f"{op.name} (%{hints[0]})" if hints else op.name
    return IntegerOnnxError(f"integer onnx export: {where} {why}")


def _out(g: Graph, op: Operation, i: int = 0) -> str:
    return g.base(op.results[i])


def _codes(v: SSAValue) -> np.ndarray | None:
    """A constant operand's codes (int64), or None for a run-time value."""
    if isinstance(v.owner, nh.ConstantOp):
        return v.owner.codes().astype(np.int64)
    return None


# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------


@writes(nh.ConstantOp)
def constant(g: Graph, op: nh.ConstantOp) -> None:
    codes = op.codes().astype(np.int64)
    g.lazy[op.result] = codes
    g.set_bound(op.result, int(np.abs(codes).max(initial=0)))


# --------------------------------------------------------------------------------------------
# Integer products on uint8 parts
# --------------------------------------------------------------------------------------------

Part = tuple[str, int, int]
"""A uint8 operand part: (tensor name, zero point, scale)."""


def _const_parts(
    codes: np.ndarray, op: Operation, g: Graph, base: str
) -> list[tuple[np.ndarray, int, int]]:
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
        raise _refuse(op, "has a constant operand wider than 32 bits")
    return [*parts, ((c + 128).astype(np.uint8), 128, scale)]


def _value_parts(g: Graph, v: SSAValue, op: Operation) -> list[Part]:
    """A run-time operand as uint8 parts: itself up to 8 bits, else its bytes (the low ones
    unsigned, the top one signed, or unsigned for ``ui16``)."""
    width = nh.width_of(v)
    if width <= 8:
        return [(g.get(v, "u8"), zero_point(v), 1)]
    base = g.base(v)
    x = g.get(v, "i32")
    unsigned = nh.is_unsigned(v)
    parts: list[Part] = []
    nbytes = -(-width // 8)
    for k in range(nbytes - 1):
        lo = g.node("Mod", [x, g.const(256, np.int32)], f"{base}_b{k}")
        parts.append((g.node("Cast", [lo], f"{base}_u{k}", to=2), 0, 256**k))
        x = g.node("Sub", [x, lo], f"{base}_r{k}")
        x = g.node("Div", [x, g.const(256, np.int32)], f"{base}_q{k}")
    if not unsigned:
        x = g.node("Add", [x, g.const(128, np.int32)], f"{base}_top")
    top = g.node("Cast", [x], f"{base}_u{nbytes - 1}", to=2)
    return [*parts, (top, 0 if unsigned else 128, 256 ** (nbytes - 1))]


def _product(
    g: Graph,
    op_type: str,
    xs: list[Part],
    ws: list[Part],
    base: str,
    **attrs: Any,
) -> str:
    """Sum over part pairs of ``scale_x * scale_w * op_type(x, w)`` in int32."""
    acc: str | None = None
    for xn, xz, xsc in xs:
        for wn, wz, wsc in ws:
            # int32 wraps like the exact sum modulo 2**32: so does the scale.
            scale = (xsc * wsc) % 2**32
            scale -= 2**32 if scale >= 2**31 else 0
            if scale == 0:
                continue
            zx, zw = g.const(xz, np.uint8), g.const(wz, np.uint8)
            y = g.node(op_type, [xn, wn, zx, zw], base + "_p", **attrs)
            if scale != 1:
                y = g.node("Mul", [y, g.const(scale, np.int32)], base + "_ps")
            acc = y if acc is None else g.node("Add", [acc, y], base + "_pa")
    assert acc is not None
    return acc


def _weight_parts(
    g: Graph, op: Operation, w: SSAValue, array: Callable[[np.ndarray], np.ndarray], base: str
) -> list[Part]:
    codes = _codes(w)
    if codes is None:
        raise _refuse(op, "has a run-time weight (its integer ONNX form needs a constant one)")
    return [
        (g.const(array(a), np.uint8, base + "_w"), z, s)
        for a, z, s in _const_parts(codes, op, g, base)
    ]


def _add_bias(
    g: Graph, op: Operation, acc: str, bias: SSAValue | None, shape: tuple[int, ...], base: str
) -> str:
    if bias is None:
        return acc
    codes = _codes(bias)
    if codes is not None:
        b = g.const(codes.reshape(shape), np.int32, base + "_b")
    else:
        b = g.node("Reshape", [g.get(bias, "i32"), g.const(shape, np.int64)], base + "_b")
    return g.node("Add", [acc, b], base)


def _weight_bound(
    codes: np.ndarray | None, axis_out: int, bx: int, bw_declared: int, inner: int
) -> int:
    """A bound on ``|sum_k x w|`` per output, from the weight's codes when constant."""
    if codes is None:
        return inner * bx * bw_declared
    per_out = np.abs(np.moveaxis(codes, axis_out, 0)).reshape(codes.shape[axis_out], -1).sum(axis=1)
    return int(per_out.max(initial=0)) * bx


@writes(nh.ConvOp)
def conv(g: Graph, op: nh.ConvOp) -> None:
    base = _out(g, op)
    w_shape = tensor_shape(op.weight)
    n = len(w_shape) - 2
    kernel, strides, pads, dil = window_params(
        n, w_shape[2:], array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    xs = _value_parts(g, op.input, op)
    ws = _weight_parts(g, op, op.weight, lambda a: a, base)
    acc = _product(
        g,
        "ConvInteger",
        xs,
        ws,
        base + "_acc" if op.bias is not None else base,
        kernel_shape=list(kernel),
        strides=list(strides),
        pads=list(pads),
        dilations=list(dil),
        group=op.groups.value.data,
    )
    out = _add_bias(g, op, acc, op.bias, (w_shape[0],) + (1,) * n, base)
    g.put(op.result, "i32", out)
    bound = _weight_bound(_codes(op.weight), 0, g.bound(op.input), 2**16, math.prod(w_shape[1:]))
    g.set_bound(op.result, bound + (g.bound(op.bias) if op.bias is not None else 0))


@writes(nh.ConvTransposeOp)
def conv_transpose(g: Graph, op: nh.ConvTransposeOp) -> None:
    base = _out(g, op)
    x_shape, w_shape = tensor_shape(op.input), tensor_shape(op.weight)
    n = len(w_shape) - 2
    kernel, strides, pads, dil = window_params(
        n, w_shape[2:], array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    out_pad = list(array_values(op.output_padding) or (0,) * n)
    groups = op.groups.value.data
    if any(d == DYNAMIC_INDEX for d in x_shape[1:]):
        raise _refuse(op, "has dynamic channels or spatial sizes")
    spatial = list(x_shape[2:])
    begin = [d * (k - 1) - p for d, k, p in zip(dil, kernel, pads[:n])]
    end = [d * (k - 1) - p + o for d, k, p, o in zip(dil, kernel, pads[n:], out_pad)]

    def stuffed(x: str, zp: int, label: str) -> str:
        """Zero-stuff one uint8 part (code 0 is its zero point): [N, C, S] -> [N, C,
        (S-1)s+1]; then crop where ``d (k - 1) - pad`` (plus output_padding at the end) < 0."""
        y = x
        if any(s > 1 for s in strides):
            inter = [0, x_shape[1]] + [v for sz in spatial for v in (sz, 1)]
            y = g.node("Reshape", [y, g.const(inter, np.int64)], base + label + "_r")
            widen = [0] * (2 + 2 * n) + [0, 0] + [v for s in strides for v in (0, s - 1)]
            y = g.node(
                "Pad", [y, g.const(widen, np.int64), g.const(zp, np.uint8)], base + label + "_z"
            )
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

    xs = [
        (stuffed(name, zp, f"_x{i}"), zp, scale)
        for i, (name, zp, scale) in enumerate(_value_parts(g, op.input, op))
    ]
    conv_pads = [max(v, 0) for v in begin] + [max(v, 0) for v in end]
    c_in, per_group = w_shape[0], w_shape[1]

    def as_conv(a: np.ndarray) -> np.ndarray:
        # [C, O/g, *K] -> [O, C/g, *K], flipped: w'[g O/g + o, c] = w[g C/g + c, o, K - 1 - k].
        wg = a.reshape(groups, c_in // groups, per_group, *kernel)
        wg = np.swapaxes(wg, 1, 2)[(Ellipsis, *(slice(None, None, -1),) * n)]
        return np.ascontiguousarray(wg.reshape(groups * per_group, c_in // groups, *kernel))

    ws = _weight_parts(g, op, op.weight, as_conv, base)
    acc = _product(
        g,
        "ConvInteger",
        xs,
        ws,
        base + "_acc" if op.bias is not None else base,
        kernel_shape=list(kernel),
        pads=conv_pads,
        dilations=list(dil),
        group=groups,
    )
    out = _add_bias(g, op, acc, op.bias, (groups * per_group,) + (1,) * n, base)
    g.put(op.result, "i32", out)
    codes = _codes(op.weight)
    inner = math.prod(w_shape[2:]) * c_in // groups
    bw = int(np.abs(codes).max(initial=0)) if codes is not None else 2**16
    g.set_bound(
        op.result, inner * g.bound(op.input) * bw + (g.bound(op.bias) if op.bias is not None else 0)
    )


@writes(nh.LinearOp)
def linear(g: Graph, op: nh.LinearOp) -> None:
    base = _out(g, op)
    w_shape = tensor_shape(op.weight)
    xs = _value_parts(g, op.input, op)
    ws = _weight_parts(g, op, op.weight, lambda a: np.ascontiguousarray(a.T), base)
    acc = _product(g, "MatMulInteger", xs, ws, base + "_acc" if op.bias is not None else base)
    out = _add_bias(g, op, acc, op.bias, (w_shape[0],), base)
    g.put(op.result, "i32", out)
    bound = _weight_bound(_codes(op.weight), 0, g.bound(op.input), 2**16, w_shape[1])
    g.set_bound(op.result, bound + (g.bound(op.bias) if op.bias is not None else 0))


@writes(nh.MatmulOp)
def matmul(g: Graph, op: nh.MatmulOp) -> None:
    base = _out(g, op)
    parts = []
    for v in (op.lhs, op.rhs):
        codes = _codes(v)
        if codes is not None:
            parts.append(
                [
                    (g.const(a, np.uint8, base + "_k"), z, s)
                    for a, z, s in _const_parts(codes, op, g, base)
                ]
            )
        else:
            parts.append(_value_parts(g, v, op))
    g.put(op.result, "i32", _product(g, "MatMulInteger", parts[0], parts[1], base))
    inner = tensor_shape(op.lhs)[-1]
    g.set_bound(op.result, max(inner, 1) * g.bound(op.lhs) * g.bound(op.rhs))


# --------------------------------------------------------------------------------------------
# Elementwise arithmetic
# --------------------------------------------------------------------------------------------


def _binary(op_type: str, combine: Callable[[int, int], int]) -> Writer:
    def write(g: Graph, op: Any) -> None:
        y = g.node(op_type, [g.get(op.lhs, "i32"), g.get(op.rhs, "i32")], _out(g, op))
        g.put(op.result, "i32", y)
        g.set_bound(op.result, combine(g.bound(op.lhs), g.bound(op.rhs)))

    return write


OPS[nh.AddOp] = _binary("Add", lambda a, b: a + b)
OPS[nh.SubOp] = _binary("Sub", lambda a, b: a + b)
OPS[nh.MulOp] = _binary("Mul", lambda a, b: a * b)
OPS[nh.MaximumOp] = _binary("Max", max)
OPS[nh.MinimumOp] = _binary("Min", max)


def _channel_shifts(op: Any, shifts: list[int], rank: int) -> np.ndarray:
    """Shifts shaped to broadcast over the input, as the runtime's requant does."""
    s = np.asarray(shifts or (0,), dtype=np.int64)
    fx, fy = nh.fixed_of(op.input), nh.fixed_of(op.result)
    if (fx.is_per_channel or fy.is_per_channel) and len(s) > 1:
        axis = (fx if fx.is_per_channel else fy).channel_axis
        assert axis is not None
        shape = [1] * rank
        shape[axis] = len(s)
        return s.reshape(shape)
    return s.reshape(())


@writes(nh.RequantOp)
def requant(g: Graph, op: nh.RequantOp) -> None:
    base = _out(g, op)
    x = g.get(op.input, "i32")
    rank = len(tensor_shape(op.input))
    width, signed = nh.width_of(op.result), not nh.is_unsigned(op.result)
    if width == 1:  # the sign rule: x >= 0 -> +1, else -1 (the shift does not matter)
        cond = g.node("GreaterOrEqual", [x, g.const(0, np.int32)], base + "_ge")
        y = g.node("Where", [cond, g.const(1, np.int32), g.const(-1, np.int32)], base)
        g.put(op.result, "i32", y)
        return
    shifts = _channel_shifts(op, list(array_values(op.shift) or ()), rank)
    y, dtype, _ = shift_round(g, x, g.bound(op.input), shifts, op.rounding.data, base + "_q")
    lo, hi = nh.code_range(width, signed)
    lo, hi = _fuse_relu(g, op, lo, hi)
    y = clip(g, y, lo, hi, dtype, base if dtype is np.int32 else base + "_c")
    y = cast_to(g, y, dtype, np.int32, base)
    g.put(op.result, "i32", y)


def _fuse_relu(g: Graph, op: nh.RequantOp, lo: int, hi: int) -> tuple[int, int]:
    """The saturation bounds, raised to 0 when the result's only reader is an ``nh.relu``
    (which then reads the same tensor: one int32 pass fewer per conv + ReLU)."""
    uses = list(op.result.uses)
    if len(uses) == 1 and isinstance(uses[0].operation, nh.ReluOp) and lo < 0:
        g.fused.add(uses[0].operation)
        return 0, hi
    return lo, hi


@writes(nh.LutOp)
def lut(g: Graph, op: nh.LutOp) -> None:
    base = _out(g, op)
    width = nh.width_of(op.input)
    lo, _ = nh.value_code_range(op.input)
    span = 2 if width == 1 else 2**width
    table = np.asarray(array_values(op.table) or (), dtype=np.int64)
    if op.starts is not None:
        starts = np.asarray(array_values(op.starts), dtype=np.int64)
        subs = int((starts == lo).sum())
        if subs * span > 2**20:
            raise _refuse(
                op,
                f"has a segmented table over {nh.type_text(op.input)} codes too "
                "large to write out densely (more than 2**20 entries)",
            )
        keys = (np.cumsum(starts == lo) - 1) * span + (starts - lo)
        table = table[np.searchsorted(keys, np.arange(subs * span), side="right") - 1]
    x = g.get(op.input, "i32")
    if width == 1:
        index = g.node(
            "Div",
            [g.node("Add", [x, g.const(1, np.int32)], base + "_p1"), g.const(2, np.int32)],
            base + "_i",
        )
    elif lo:
        index = g.node("Sub", [x, g.const(lo, np.int32)], base + "_i")
    else:
        index = x
    if op.channels is not None:
        axis = op.channel_axis()
        assert axis is not None
        shape = [1] * len(tensor_shape(op.input))
        shape[axis] = -1
        offset = np.asarray(array_values(op.channels), dtype=np.int64).reshape(shape) * span
        index = g.node("Add", [index, g.const(offset, np.int32, base + "_sub")], base + "_ci")
    y = g.node("Gather", [g.const(table, np.int32, base + "_table"), index], base, axis=0)
    g.put(op.result, "i32", y)
    g.set_bound(op.result, int(np.abs(table).max(initial=0)))


@writes(nh.ReluOp)
def relu(g: Graph, op: nh.ReluOp) -> None:
    """``Max(x, 0)``, not ``Relu``: onnxruntime's FuseReluClip (on at its default level) fails
    on a Relu read by an integer Clip, and a requant or clamp after a ReLU writes one."""
    if op in g.fused:  # its requant saturated at 0 already
        g.put(op.result, "i32", g.get(op.input, "i32"))
        g.set_bound(op.result, g.bound(op.input))
        return
    y = g.node("Max", [g.get(op.input, "i32"), g.const(0, np.int32)], _out(g, op))
    g.put(op.result, "i32", y)
    g.set_bound(op.result, g.bound(op.input))


@writes(nh.ClampOp)
def clamp(g: Graph, op: nh.ClampOp) -> None:
    lo, hi = nh.value_code_range(op.input)
    mn = lo if op.min is None else max(op.min.value.data, lo)
    mx = hi if op.max is None else min(op.max.value.data, hi)
    mn, mx = max(mn, -(2**31)), min(mx, 2**31 - 1)
    y = clip(g, g.get(op.input, "i32"), mn, mx, np.int32, _out(g, op))
    g.put(op.result, "i32", y)
    g.set_bound(op.result, g.bound(op.input))


@writes(nh.PReluOp)
def prelu(g: Graph, op: nh.PReluOp) -> None:
    base = _out(g, op)
    rank = len(tensor_shape(op.input))
    shift = op.shift.value.data
    x = g.get(op.input, "i32")
    codes = _codes(op.slope)
    shape = () if math.prod(tensor_shape(op.slope)) == 1 else (-1,) + (1,) * (rank - 2)
    if codes is not None:
        slope = g.const(codes.reshape(shape), np.int32, base + "_slope")
    else:
        slope = g.node(
            "Reshape", [g.get(op.slope, "i32"), g.const(shape or (1,), np.int64)], base + "_slope"
        )
    pos = g.node("Mul", [x, g.const(2**shift, np.int32)], base + "_pos")
    neg = g.node("Mul", [x, slope], base + "_neg")
    cond = g.node("Greater", [x, g.const(0, np.int32)], base + "_gt")
    g.put(op.result, "i32", g.node("Where", [cond, pos, neg], base))
    g.set_bound(op.result, g.bound(op.input) * max(2**shift, g.bound(op.slope)))


# --------------------------------------------------------------------------------------------
# Pools
# --------------------------------------------------------------------------------------------


@writes(nh.MaxPoolOp)
def max_pool(g: Graph, op: nh.MaxPoolOp) -> None:
    kernel, strides, begins, ends, dil, ceil_mode = _pool_geometry(op, array_values(op.dilations))
    form = "u8" if nh.width_of(op.input) <= 8 else "f64"
    y = g.node(
        "MaxPool",
        [g.get(op.input, form)],
        _out(g, op),
        kernel_shape=list(kernel),
        strides=list(strides),
        pads=list(begins) + list(ends),
        dilations=list(dil),
        ceil_mode=int(ceil_mode),
    )
    g.put(op.result, form, y)
    g.set_bound(op.result, g.bound(op.input))


@writes(nh.AvgPoolOp)
def avg_pool(g: Graph, op: nh.AvgPoolOp) -> None:
    base = _out(g, op)
    kernel, strides, begins, ends, dil, ceil_mode = _pool_geometry(op, None)
    x_shape = tensor_shape(op.input)
    if any(d == DYNAMIC_INDEX for d in x_shape[1:]):
        raise _refuse(op, "has dynamic channels or spatial sizes")
    channels, n = x_shape[1], len(kernel)
    probe = np.zeros((1, 1, *x_shape[2:]), dtype=np.int8)
    out, reach = _pool_setup(probe, kernel, strides, begins, ends, dil, ceil_mode)
    # The window sums: a ones kernel per channel.
    ones = [(g.const(np.ones((channels, 1, *kernel)), np.uint8, base + "_ones"), 0, 1)]
    total = _product(
        g,
        "ConvInteger",
        _value_parts(g, op.input, op),
        ones,
        base + "_sum",
        kernel_shape=list(kernel),
        strides=list(strides),
        pads=list(begins) + list(reach),
        group=channels,
    )
    override = None if op.divisor_override is None else op.divisor_override.value.data
    if override is not None:
        divisor = np.full((1,) * (n + 2), override, dtype=np.int64)
    else:
        include_pad = bool(op.count_include_pad.value.data)
        divisor = np.ones((), dtype=np.int64)
        for i in range(n):
            inside, padded = _window_counts(
                x_shape[2 + i], kernel[i], strides[i], begins[i], ends[i], dil[i], out[i]
            )
            divisor = np.multiply.outer(divisor, padded if include_pad else inside)
        if divisor.size and int(divisor.min()) == 0:
            raise _refuse(op, "has a window of padding only, whose mean divides by 0")
        divisor = divisor.reshape(1, 1, *out)
    shifts = np.asarray(array_values(op.shift) or (0,), dtype=np.int64)
    if len(shifts) > 1:
        fx = nh.fixed_of(op.input)
        per = fx if fx.is_per_channel else nh.fixed_of(op.result)
        shape = [1] * (n + 2)
        shape[per.channel_axis or 1] = len(shifts)
        divisor = divisor * (np.int64(1) << shifts.reshape(shape))
    else:
        divisor = divisor * (np.int64(1) << shifts[0])
    bound = math.prod(kernel) * g.bound(op.input)
    dtype = int_dtype(bound + int(divisor.max(initial=1)))
    y = cast_to(g, total, np.int32, dtype, base + "_w")
    y = div_round(g, y, divisor, op.rounding.data, dtype, base + "_q")
    g.put(op.result, "i32", cast_to(g, y, dtype, np.int32, base))


# --------------------------------------------------------------------------------------------
# Data movement: on whichever form the value has
# --------------------------------------------------------------------------------------------


def _pad_value(g: Graph, v: SSAValue, form: str, code: int) -> str:
    if form == "u8":
        return g.const(code + zero_point(v), np.uint8)
    if form == "f64":
        return g.const(code, np.float64)
    if form == "i64":
        return g.const(code, np.int64)
    if form == "in":
        return g.const(code, natural_dtype(v))
    return g.const(code, np.int32)


def _moved(
    g: Graph, op: Operation, x: SSAValue, make: Callable[[str, str], str | list[str]]
) -> None:
    """Apply ``make(name, form)`` to ``x`` in its first form; the results keep that form
    (a graph input's ``in`` form is first converted to int32)."""
    form = g.first_form(x)
    if form == "in":
        form = "i32"
    names = make(g.get(x, form), form)
    for r, name in zip(op.results, names if isinstance(names, list) else [names]):
        if form == "u8" and nh.is_unsigned(r) != nh.is_unsigned(x):
            raise AssertionError("data movement changed signedness")
        g.put(r, form, name)
        g.set_bound(r, g.bound(x))


def _static(shape: tuple[int, ...]) -> list[int]:
    return [-1 if d == DYNAMIC_INDEX else d for d in shape]


@writes(nh.ConcatOp)
def concat(g: Graph, op: nh.ConcatOp) -> None:
    forms = [g.first_form(v) for v in op.inputs]
    same = len(set(forms)) == 1 and forms[0] != "in"
    form = forms[0] if same else "i32"
    if form == "u8" and not all(
        nh.is_unsigned(v) == nh.is_unsigned(op.result) and nh.width_of(op.result) <= 8
        for v in op.inputs
    ):
        form = "i32"
    y = g.node("Concat", [g.get(v, form) for v in op.inputs], _out(g, op), axis=op.axis.value.data)
    g.put(op.result, form, y)
    g.set_bound(op.result, max(g.bound(v) for v in op.inputs))


@writes(nh.ReshapeOp)
def reshape(g: Graph, op: nh.ReshapeOp) -> None:
    shape = g.const(_static(tensor_shape(op.result)), np.int64)
    _moved(g, op, op.input, lambda x, f: g.node("Reshape", [x, shape], _out(g, op)))


@writes(nh.TransposeOp)
def transpose(g: Graph, op: nh.TransposeOp) -> None:
    perm = list(array_values(op.perm) or ())
    _moved(g, op, op.input, lambda x, f: g.node("Transpose", [x], _out(g, op), perm=perm))


@writes(nh.PadOp)
def pad(g: Graph, op: nh.PadOp) -> None:
    pads = g.const(list(array_values(op.pads) or ()), np.int64)
    mode = op.mode.data

    def make(x: str, form: str) -> str:
        inputs = [x, pads]
        if mode == "constant":
            inputs.append(_pad_value(g, op.input, form, op.value.value.data))
        return g.node("Pad", inputs, _out(g, op), mode=mode)

    _moved(g, op, op.input, make)


@writes(nh.SplitOp)
def split(g: Graph, op: nh.SplitOp) -> None:
    sizes = g.const(list(array_values(op.sizes) or ()), np.int64)
    axis = op.axis.value.data
    n = len(op.results)

    def make(x: str, form: str) -> list[str]:
        names = g.node("Split", [x, sizes], _out(g, op), outputs=n, axis=axis)
        return names if isinstance(names, list) else [names]

    _moved(g, op, op.input, make)


@writes(nh.UpsampleNearestOp)
def upsample_nearest(g: Graph, op: nh.UpsampleNearestOp) -> None:
    x_shape, y_shape = tensor_shape(op.input), tensor_shape(op.result)
    picks = []
    for i, (size, want) in enumerate(zip(x_shape[2:], y_shape[2:])):
        index = np.arange(size, dtype=np.int64).reshape(1, 1, size)
        chosen = kernels.upsample_nearest(index, size=[want]).reshape(-1)
        if not np.array_equal(chosen, np.arange(size)):
            picks.append((2 + i, chosen))

    def make(x: str, form: str) -> str:
        for axis, chosen in picks:
            x = g.node("Gather", [x, g.const(chosen, np.int64)], _out(g, op), axis=axis)
        return x if picks else g.node("Identity", [x], _out(g, op))

    _moved(g, op, op.input, make)


def _block(g: Graph, op: nh.DepthToSpaceOp | nh.SpaceToDepthOp) -> None:
    """The kernels' reshape / transpose / reshape, batch dim copied (Reshape's 0)."""
    block, mode = op.block.value.data, op.mode.data
    x_shape = tensor_shape(op.input)
    n = len(x_shape) - 2
    if any(d == DYNAMIC_INDEX for d in x_shape[1:]):
        raise _refuse(op, "has dynamic channels or spatial sizes")
    channels, spatial = x_shape[1], list(x_shape[2:])
    if isinstance(op, nh.DepthToSpaceOp):
        c = channels // block**n
        if mode == "CRD":
            inter = [0, c, *(block,) * n, *spatial]
            offsets, first = list(range(2, 2 + n)), 1
        else:
            inter = [0, *(block,) * n, c, *spatial]
            offsets, first = list(range(1, 1 + n)), 1 + n
        sp = list(range(2 + n, 2 + 2 * n))
        perm = [0, first] + [a for pair in zip(sp, offsets) for a in pair]
        final = [0, c, *(s * block for s in spatial)]
    else:
        small = [s // block for s in spatial]
        inter = [0, channels, *(v for s in small for v in (s, block))]
        sp = [2 + 2 * i for i in range(n)]
        offsets = [3 + 2 * i for i in range(n)]
        perm = [0, 1, *offsets, *sp] if mode == "CRD" else [0, *offsets, 1, *sp]
        final = [0, channels * block**n, *small]

    def make(x: str, form: str) -> str:
        base = _out(g, op)
        y = g.node("Reshape", [x, g.const(inter, np.int64)], base + "_r")
        y = g.node("Transpose", [y], base + "_t", perm=perm)
        return g.node("Reshape", [y, g.const(final, np.int64)], base)

    _moved(g, op, op.input, make)


OPS[nh.DepthToSpaceOp] = _block
OPS[nh.SpaceToDepthOp] = _block


def _spatial(op: Operation, shape: tuple[int, ...]) -> list[int]:
    """The static spatial sizes of ``shape`` (the Reshapes below need them)."""
    if any(d == DYNAMIC_INDEX for d in shape[2:]):
        raise _refuse(op, "has dynamic spatial sizes")
    return list(shape[2:])


@writes(nh.UpsampleZeroOp)
def upsample_zero(g: Graph, op: nh.UpsampleZeroOp) -> None:
    """Each spatial dim ``d`` reshaped to ``(d, 1)``, the 1 padded with code-0 rows to the
    ratio ``r`` (``offset`` before, ``r - 1 - offset`` after), then merged back: one Pad."""
    small = _spatial(op, tensor_shape(op.input))
    big = _spatial(op, tensor_shape(op.result))
    offsets = list(array_values(op.offsets) or ())
    n = len(small)
    inter = [0, 0, *(v for d in small for v in (d, 1))]
    begin = [0] * (2 + 2 * n)
    end = [0] * (2 + 2 * n)
    for i, (d, b, o) in enumerate(zip(small, big, offsets)):
        begin[3 + 2 * i] = o
        end[3 + 2 * i] = b // d - 1 - o

    def make(x: str, form: str) -> str:
        base = _out(g, op)
        y = g.node("Reshape", [x, g.const(inter, np.int64)], base + "_r")
        zero = _pad_value(g, op.input, form, 0)
        y = g.node("Pad", [y, g.const(begin + end, np.int64), zero], base + "_p", mode="constant")
        return g.node("Reshape", [y, g.const([0, 0, *big], np.int64)], base)

    _moved(g, op, op.input, make)


@writes(nh.UpsampleBilinearOp)
def upsample_bilinear(g: Graph, op: nh.UpsampleBilinearOp) -> None:
    """The runtime's ``bilinear_sum`` in int32 (the verifier fits the sum in the result's
    width): per doubled dim, the edge-padded rows ``lo, mid, hi`` make ``lo + 3 mid`` and
    ``3 mid + hi``, interleaved by Unsqueeze / Concat / Reshape."""
    sizes = _spatial(op, tensor_shape(op.input))
    want = _spatial(op, tensor_shape(op.result))
    pads = list(array_values(op.pads) or ())
    n = len(sizes)
    base = _out(g, op)
    y = g.get(op.input, "i32")
    doubled = 0
    for i in range(n):
        if sizes[i] == want[i]:
            continue
        doubled += 1
        axis = 2 + i
        edge = [0] * (4 + 2 * n)
        edge[axis], edge[2 + n + axis] = pads[i], pads[n + i]
        if pads[i] or pads[n + i]:
            y = g.node("Pad", [y, g.const(edge, np.int64)], base + "_e", mode="edge")
        m = sizes[i] + pads[i] + pads[n + i] - 2
        ax = g.const([axis], np.int64)
        lo, mid, hi = (
            g.node(
                "Slice", [y, g.const([k], np.int64), g.const([k + m], np.int64), ax], base + "_s"
            )
            for k in range(3)
        )
        mid3 = g.node("Mul", [mid, g.const(3, np.int32)], base + "_m")
        pair = [
            g.node("Add", [lo, mid3], base + "_even"),
            g.node("Add", [mid3, hi], base + "_odd"),
        ]
        after = g.const([axis + 1], np.int64)
        pair = [g.node("Unsqueeze", [v, after], base + "_u") for v in pair]
        y = g.node("Concat", pair, base + "_c", axis=axis + 1)
        sizes[i] = 2 * m
        y = g.node("Reshape", [y, g.const([0] * axis + sizes[i:], np.int64)], base + "_i")
    y = g.node("Identity", [y], base)
    g.put(op.result, "i32", y)
    g.set_bound(op.result, g.bound(op.input) * 4**doubled)


@writes(nh.EmbeddingOp)
def embedding(g: Graph, op: nh.EmbeddingOp) -> None:
    """``Gather`` of the table's codes (int32) by the indices on axis 0. An index outside the
    table is an onnxruntime error, as it is the executor's: a negative one is first moved past
    the table (``Gather`` would count it from the end, a silently wrong row)."""
    rows = tensor_shape(op.table)[0]
    idx = _no_negative(g, g.get(op.indices, "i32"), rows, np.int32, _out(g, op) + "_i")
    y = g.node("Gather", [g.get(op.table, "i32"), idx], _out(g, op), axis=0)
    g.put(op.result, "i32", y)
    g.set_bound(op.result, g.bound(op.table))


@writes(nh.MaxPoolIndicesOp)
def max_pool_indices(g: Graph, op: nh.MaxPoolIndicesOp) -> None:
    """The runtime's window argmax: the ``kh * kw`` strided Slices of each window position
    stacked on a last axis, ``ArgMax`` (the first largest, as NumPy's), then the flat in-plane
    index ``(oy * sh + a // kw) * W + ox * sw + a % kw``."""
    (kh, kw), (sh, sw) = array_values(op.kernel) or (), array_values(op.strides) or ()
    _, width = _spatial(op, tensor_shape(op.input))
    oh, ow = _spatial(op, tensor_shape(op.result))
    base = _out(g, op)
    x = g.get(op.input, "i32")
    axes, steps, last = (
        g.const([2, 3], np.int64),
        g.const([sh, sw], np.int64),
        g.const([4], np.int64),
    )
    windows = []
    for i in range(kh):
        for j in range(kw):
            starts = g.const([i, j], np.int64)
            ends = g.const([i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1], np.int64)
            w = g.node("Slice", [x, starts, ends, axes, steps], base + "_w")
            windows.append(g.node("Unsqueeze", [w, last], base + "_u"))
    stacked = g.node("Concat", windows, base + "_c", axis=4)
    arg = g.node("ArgMax", [stacked], base + "_a", axis=4, keepdims=0)
    k = g.const(kw, np.int64)
    rows = g.node(
        "Add",
        [
            g.const((np.arange(oh) * sh).reshape(oh, 1), np.int64),
            g.node("Div", [arg, k], base + "_dy"),
        ],
        base + "_y",
    )
    cols = g.node(
        "Add",
        [g.const(np.arange(ow) * sw, np.int64), g.node("Mod", [arg, k], base + "_dx")],
        base + "_x",
    )
    flat = g.node(
        "Add", [g.node("Mul", [rows, g.const(width, np.int64)], base + "_r"), cols], base + "_f"
    )
    g.put(op.result, "i32", g.node("Cast", [flat], base, to=6))
    g.set_bound(op.result, int(np.prod(tensor_shape(op.input)[2:])) - 1)


def _no_negative(g: Graph, idx: str, past: int, dtype: Any, name: str) -> str:
    """``idx`` with each negative index replaced by ``past`` (one past the end): ``Gather`` and
    ``ScatterElements`` count negative indices from the end, where the executor refuses
    them; out of range, onnxruntime refuses them too."""
    negative = g.node("Less", [idx, g.const(0, dtype)], name + "_neg")
    return g.node("Where", [negative, g.const(past, dtype), idx], name + "_pos")


@writes(nh.MaxUnpoolOp)
def max_unpool(g: Graph, op: nh.MaxUnpoolOp) -> None:
    """``ScatterElements`` of the codes (int32) into code-0 planes at their flat indices.
    Equal indices (overlapping pool windows) are the one case ONNX leaves unordered; the
    codes there are the same input position's, so equal, when the indices are a max pool's."""
    size = _spatial(op, tensor_shape(op.result))
    base = _out(g, op)
    x = g.get(op.input, "i32")
    per_plane = int(np.prod(_spatial(op, tensor_shape(op.input))))  # -1: undetermined at N=0
    flat = g.const([0, 0, per_plane], np.int64)
    idx = g.node("Cast", [g.get(op.indices, "i32")], base + "_i", to=7)
    if not isinstance(op.indices.owner, nh.MaxPoolIndicesOp):  # a max pool's are in the plane
        idx = _no_negative(g, idx, int(np.prod(size)), np.int64, base + "_in")
    idx = g.node("Reshape", [idx, flat], base + "_if")
    upd = g.node("Reshape", [x, flat], base + "_xf")
    nc = g.node(
        "Slice",
        [g.node("Shape", [x], base + "_sh"), g.const([0], np.int64), g.const([2], np.int64)],
        base + "_nc",
    )
    shape = g.node("Concat", [nc, g.const([int(np.prod(size))], np.int64)], base + "_shape", axis=0)
    zeros = g.node("Expand", [g.const(0, np.int32), shape], base + "_z")
    y = g.node("ScatterElements", [zeros, idx, upd], base + "_s", axis=2)
    y = g.node("Reshape", [y, g.const([0, 0, *size], np.int64)], base)
    g.put(op.result, "i32", y)
    g.set_bound(op.result, g.bound(op.input))


@writes(nh.ExpandOp)
def expand(g: Graph, op: nh.ExpandOp) -> None:
    """``Expand``; a dim grown to a dynamic size reads the shape source's, ``Shape(like,
    start=i, end=i+1)``, joined with the other sizes by a Concat."""
    dims = [1 if d == DYNAMIC_INDEX else d for d in tensor_shape(op.result)]
    if op.like is None:
        shape = g.const(dims, np.int64)
    else:
        like = g.get(op.like, g.first_form(op.like))
        grown = set(movement.expand_grown(tensor_shape(op.input), tensor_shape(op.result)))
        base = _out(g, op)
        pieces = [
            g.node("Shape", [like], f"{base}_dim{i}", start=i, end=i + 1)
            if i in grown
            else g.const([d], np.int64)
            for i, d in enumerate(dims)
        ]
        shape = g.node("Concat", pieces, base + "_shape", axis=0)
    _moved(g, op, op.input, lambda x, f: g.node("Expand", [x, shape], _out(g, op)))


@writes(nh.GatherOp)
def gather(g: Graph, op: nh.GatherOp) -> None:
    indices = g.const(list(array_values(op.indices) or ()), np.int64)
    axis = op.axis.value.data
    _moved(g, op, op.input, lambda x, f: g.node("Gather", [x, indices], _out(g, op), axis=axis))


# --------------------------------------------------------------------------------------------
# Integer algorithms
# --------------------------------------------------------------------------------------------


def _exp_codes(g: Graph, op: Any, mask: str | None) -> tuple[str, str, str]:
    """``(neg, e, S)`` of ``nanoir.runtime.numerics.softmax._exp_codes`` in int64: the code
    distances to the row max (clipped to the tables), the i-exp values and the row sums."""
    base = _out(g, op)
    axis = op.axis.value.data
    hi = np.asarray(array_values(op.exp_hi), dtype=np.int64)
    lo = np.asarray(array_values(op.exp_lo), dtype=np.int64)
    i64 = np.int64
    q = g.get(op.input, "i64")
    if mask is not None:
        lowest = g.const(np.iinfo(np.int64).min // 4, i64)
        qm = g.node("Where", [mask, q, lowest], base + "_qm")
        top = g.node("ReduceMax", [qm, g.const([axis], i64)], base + "_top0", keepdims=1)
        whole = g.node("ReduceMax", [q], base + "_all", keepdims=0)
        whole = g.node("Max", [whole, g.const(0, i64)], base + "_all0")
        none = g.node("Equal", [top, lowest], base + "_none")
        top = g.node("Where", [none, whole, top], base + "_top")
    else:
        top = g.node("ReduceMax", [q, g.const([axis], i64)], base + "_top", keepdims=1)
    neg = g.node("Sub", [top, q], base + "_neg")
    neg = clip(g, neg, 0, len(hi) * len(lo) - 1, i64, base + "_negc")
    m = g.const(len(lo), i64)
    i = g.node("Div", [neg, m], base + "_i")
    j = g.node("Sub", [neg, g.node("Mul", [i, m], base + "_im")], base + "_j")
    prod = g.node(
        "Mul",
        [
            g.node("Gather", [g.const(hi, i64, base + "_hi"), i], base + "_ehi", axis=0),
            g.node("Gather", [g.const(lo, i64, base + "_lo"), j], base + "_elo", axis=0),
        ],
        base + "_prod",
    )
    rounded = g.node("Add", [prod, g.const(2 ** (LO_FRAC - 1), i64)], base + "_pr")
    e = g.node("Div", [rounded, g.const(2**LO_FRAC, i64)], base + "_e")  # >= 0: floor
    if mask is not None:
        e = g.node("Where", [mask, e, g.const(0, i64)], base + "_em")
    s = g.node("ReduceSum", [e, g.const([axis], i64)], base + "_s", keepdims=1)
    return neg, e, s


def _saturated(g: Graph, op: Any, y: str) -> None:
    bits, signed = op.bits.value.data, not nh.is_unsigned(op.result)
    lo_c, hi_c = nh.code_range(bits, signed)
    y = clip(g, y, lo_c, hi_c, np.int64, _out(g, op) + "_yc")
    g.put(op.result, "i32", g.node("Cast", [y], _out(g, op), to=6))


@writes(nh.SoftmaxOp)
def softmax(g: Graph, op: nh.SoftmaxOp) -> None:
    """``nanoir.runtime.numerics.softmax.softmax_codes`` in int64."""
    base = _out(g, op)
    k_out = nh.fixed_of(op.result).exp_list[0]
    i64 = np.int64
    mask = None
    if op.mask is not None:
        mask = g.const(dense_to_numpy(op.mask).astype(bool), np.bool_, base + "_mask")
    _, e, s = _exp_codes(g, op, mask)
    num = g.node("Mul", [e, g.const(2 ** max(k_out, 0), i64)], base + "_num")
    den = g.node("Mul", [s, g.const(2 ** max(-k_out, 0), i64)], base + "_den")
    positive = g.node("Greater", [den, g.const(0, i64)], base + "_pos")
    safe = g.node("Where", [positive, den, g.const(1, i64)], base + "_safe")
    two = g.const(2, i64)
    y = g.node(
        "Div",
        [
            g.node("Add", [g.node("Mul", [num, two], base + "_n2"), safe], base + "_n3"),
            g.node("Mul", [safe, two], base + "_d2"),
        ],
        base + "_y",
    )  # both non-negative: Div's truncation is the floor
    _saturated(g, op, g.node("Where", [positive, y, g.const(0, i64)], base + "_y0"))


def _ln_fixed(g: Graph, s: str, base: str) -> str:
    """``nanoir.runtime.numerics.softmax.ln_fixed`` of ``s >= 1`` (int64, below ``2**53``)."""
    i64 = np.int64
    pow2 = g.const(2 ** np.arange(63, dtype=np.int64), i64, base + "_pow2")
    # The bit length: how many powers of two are <= s.
    wide = g.node("Unsqueeze", [s, g.const([-1], i64)], base + "_su")
    ge = g.node("Cast", [g.node("GreaterOrEqual", [wide, pow2], base + "_ge")], base + "_gec", to=7)
    n = g.node("ReduceSum", [ge, g.const([-1], i64)], base + "_n", keepdims=0)
    up = g.node(
        "Max",
        [g.node("Sub", [g.const(_MANTISSA, i64), n], base + "_up0"), g.const(0, i64)],
        base + "_up",
    )
    down = g.node(
        "Max",
        [g.node("Sub", [n, g.const(_MANTISSA, i64)], base + "_dn0"), g.const(0, i64)],
        base + "_dn",
    )
    scaled = g.node("Mul", [s, g.node("Gather", [pow2, up], base + "_pu", axis=0)], base + "_sc")
    mant = g.node(
        "Div", [scaled, g.node("Gather", [pow2, down], base + "_pd", axis=0)], base + "_m"
    )
    rest_bits = _MANTISSA - 1 - LN_TABLE_BITS
    f = g.node("Sub", [mant, g.const(2 ** (_MANTISSA - 1), i64)], base + "_f")
    i = g.node("Div", [f, g.const(2**rest_bits, i64)], base + "_i")
    r = g.node(
        "Sub", [f, g.node("Mul", [i, g.const(2**rest_bits, i64)], base + "_ir")], base + "_r"
    )
    table = g.const(LN_TABLE, i64, base + "_ln")
    t0 = g.node("Gather", [table, i], base + "_t0", axis=0)
    i1 = g.node(
        "Min",
        [g.node("Add", [i, g.const(1, i64)], base + "_i1"), g.const(len(LN_TABLE) - 1, i64)],
        base + "_i1c",
    )
    t1 = g.node("Gather", [table, i1], base + "_t1", axis=0)
    slope = g.node("Mul", [g.node("Sub", [t1, t0], base + "_dt"), r], base + "_sl")
    interp = g.node(
        "Div",
        [
            g.node("Add", [slope, g.const(2 ** (rest_bits - 1), i64)], base + "_ia"),
            g.const(2**rest_bits, i64),
        ],
        base + "_ip",
    )  # >= 0: floor
    whole = g.node(
        "Mul",
        [g.node("Sub", [n, g.const(1 + EXP_FRAC, i64)], base + "_e2"), g.const(LN2, i64)],
        base + "_w",
    )
    return g.node("Add", [g.node("Add", [whole, t0], base + "_w0"), interp], base + "_ln")


@writes(nh.LogSoftmaxOp)
def log_softmax(g: Graph, op: nh.LogSoftmaxOp) -> None:
    """``nanoir.runtime.numerics.softmax.log_softmax_codes`` in int64."""
    base = _out(g, op)
    k_in, k_out = nh.fixed_of(op.input).exp_list[0], nh.fixed_of(op.result).exp_list[0]
    i64 = np.int64
    neg, _, s = _exp_codes(g, op, None)
    # d = q - max, unclipped (the tables' clip applies to their index only).
    q = g.get(op.input, "i64")
    top = g.node("ReduceMax", [q, g.const([op.axis.value.data], i64)], base + "_top2", keepdims=1)
    d = g.node("Sub", [q, top], base + "_d")
    c = max(k_in - k_out, LN_FRAC - k_out, 0)
    a, b = k_out - k_in + c, k_out - LN_FRAC + c
    big = g.node(
        "Sub",
        [
            g.node("Mul", [d, g.const(2**a, i64)], base + "_da"),
            g.node("Mul", [_ln_fixed(g, s, base + "_lnS"), g.const(2**b, i64)], base + "_lb"),
        ],
        base + "_big",
    )
    y = div_round(g, big, np.asarray(2**c), RoundingMode.HALF_UP, i64, base + "_y")
    _saturated(g, op, y)


def _div_half_up(g: Graph, num: str, den: str, base: str) -> str:
    """``div_round(num, den, half_up)`` for a run-time ``den > 0``, without overflow:
    ``q = floor(num / den)``, ``r = num - q den``, ``q + (2 r >= den)``."""
    r = g.node("Mod", [num, den], base + "_r")
    q = g.node("Div", [g.node("Sub", [num, r], base + "_f"), den], base + "_q")
    up = g.node(
        "GreaterOrEqual",
        [g.node("Mul", [r, g.const(2, np.int64)], base + "_2r"), den],
        base + "_up",
    )
    return g.node("Add", [q, g.node("Cast", [up], base + "_upc", to=7)], base)


def _bit_length_f64(g: Graph, v: str, base: str) -> str:
    """``frexp(float64(v))[1]`` of ``v >= 1`` (the bit length, or one more where the float
    rounds up to a power of two), as the runtime's ``_bit_length``: how many powers of two
    (exact doubles) are at most the double."""
    pow2 = g.const(2.0 ** np.arange(64), np.float64, base + "_p2f")
    dv = g.node(
        "Unsqueeze",
        [g.node("Cast", [v], base + "_dv", to=11), g.const([-1], np.int64)],
        base + "_dvu",
    )
    ge = g.node("Cast", [g.node("GreaterOrEqual", [dv, pow2], base + "_ge")], base + "_gec", to=7)
    return g.node("ReduceSum", [ge, g.const([-1], np.int64)], base, keepdims=0)


def _isqrt(g: Graph, w: str, base: str) -> str:
    """``nanoir.runtime.numerics.norm.isqrt``: the float64 root, floored, then corrected by
    one either way (exact for ``0 <= w <= 2**62``)."""
    i64 = np.int64
    root = g.node("Sqrt", [g.node("Cast", [w], base + "_wf", to=11)], base + "_sq")
    s = g.node("Cast", [g.node("Floor", [root], base + "_fl")], base + "_s0", to=7)
    one = g.const(1, i64)
    too_big = g.node("Greater", [g.node("Mul", [s, s], base + "_ss"), w], base + "_big")
    s = g.node("Where", [too_big, g.node("Sub", [s, one], base + "_sm"), s], base + "_s1")
    s1 = g.node("Add", [s, one], base + "_sp")
    fits = g.node("LessOrEqual", [g.node("Mul", [s1, s1], base + "_s11"), w], base + "_fit")
    return g.node("Where", [fits, s1, s], base)


def _norm(g: Graph, op: nh.LayerNormOp | nh.GroupNormOp) -> None:
    """``nanoir.runtime.numerics.norm.normalize_codes`` in int64, rows of ``n`` codes."""
    base = _out(g, op)
    i64 = np.int64
    n, big = op.reduced(), op.max_shift.value.data
    eps, guard, nudge = op.eps_term.value.data, op.guard.value.data, op.nudge.value.data
    out_exp = nh.fixed_of(op.result).exp_list[0]
    kg, kc = nh.fixed_of(op.weight).exp_list[0], nh.fixed_of(op.bias).exp_list[0]
    if guard > 62:
        raise _refuse(op, f"has guard {guard}: its rounding shift leaves int64")
    shape = tensor_shape(op.input)
    rank = len(shape)
    if any(d == DYNAMIC_INDEX for d in shape[1:]):
        raise _refuse(op, "has dynamic sizes past the batch dim")
    x = g.get(op.input, "i64")
    rows = g.node("Reshape", [x, g.const([-1, n], i64)], base + "_rows")
    axis1 = g.const([1], i64)
    s1 = g.node("ReduceSum", [rows, axis1], base + "_s1", keepdims=1)
    s2 = g.node(
        "ReduceSum", [g.node("Mul", [rows, rows], base + "_qq"), axis1], base + "_s2", keepdims=1
    )
    v = g.node(
        "Sub",
        [
            g.node("Mul", [s2, g.const(n, i64)], base + "_ns2"),
            g.node("Mul", [s1, s1], base + "_s11"),
        ],
        base + "_v",
    )
    bl = _bit_length_f64(
        g, g.node("Add", [v, g.const((eps >> (2 * big)) + 1, i64)], base + "_ve"), base + "_bl"
    )
    h = g.node(
        "Div", [g.node("Sub", [g.const(61, i64), bl], base + "_h0"), g.const(2, i64)], base + "_h1"
    )
    h = clip(g, h, 0, big, i64, base + "_h")
    pow2 = g.const(2 ** np.arange(63, dtype=np.int64), i64, base + "_p2")
    two_h = g.node("Mul", [h, g.const(2, i64)], base + "_2h")
    vs = g.node("Mul", [v, g.node("Gather", [pow2, two_h], base + "_4h", axis=0)], base + "_vs")
    down = g.node("Sub", [g.const(2 * big, i64), two_h], base + "_dn")
    eps_h = g.node(
        "Div",
        [g.const(eps, i64), g.node("Gather", [pow2, down], base + "_pd", axis=0)],
        base + "_eh",
    )
    sigma = g.node(
        "Max",
        [_isqrt(g, g.node("Add", [vs, eps_h], base + "_w"), base + "_isq"), g.const(1, i64)],
        base + "_sig",
    )
    d = g.node("Sub", [g.node("Mul", [rows, g.const(n, i64)], base + "_nq"), s1], base + "_d")
    frac = out_exp + guard - kg
    hf = g.node("Add", [h, g.const(frac, i64)], base + "_hf")
    up = clip(g, hf, 0, 62, i64, base + "_upc")
    num = g.node("Mul", [d, g.node("Gather", [pow2, up], base + "_pu", axis=0)], base + "_num")
    extra = clip(g, g.node("Sub", [up, hf], base + "_ex0"), 0, 31, i64, base + "_ex")
    den = g.node(
        "Mul", [sigma, g.node("Gather", [pow2, extra], base + "_pe", axis=0)], base + "_den"
    )
    z = _div_half_up(g, num, den, base + "_z")
    z = g.node("Reshape", [z, g.const(_static(shape), i64)], base + "_zs")
    if isinstance(op, nh.GroupNormOp):
        affine = (-1,) + (1,) * (rank - 2)
    else:
        affine = tuple(tensor_shape(op.weight))

    def operand(v: SSAValue, scale: int, label: str) -> str:
        codes = _codes(v)
        if codes is not None:
            return g.const(codes.reshape(affine) * scale, i64, base + label)
        y = g.node("Reshape", [g.get(v, "i64"), g.const(affine, i64)], base + label + "r")
        return g.node("Mul", [y, g.const(scale, i64)], base + label) if scale != 1 else y

    acc = g.node("Mul", [z, operand(op.weight, 1, "_g")], base + "_zg")
    acc = g.node(
        "Add", [acc, operand(op.bias, 2 ** max(out_exp + guard - kc, 0), "_c")], base + "_acc"
    )
    mode = op.rounding.data
    if mode is RoundingMode.FLOOR:
        acc = g.node("Add", [acc, g.const(nudge, i64)], base + "_nudge")
    elif mode is RoundingMode.TRUNC:
        moved = g.node(
            "Mul", [g.node("Sign", [acc], base + "_sgn"), g.const(nudge, i64)], base + "_nm"
        )
        acc = g.node("Add", [acc, moved], base + "_nudge")
    y = div_round(g, acc, np.asarray(2**guard), mode, i64, base + "_y")
    lo, hi = nh.code_range(op.bits.value.data, not nh.is_unsigned(op.result))
    y = clip(g, y, lo, hi, i64, base + "_yc")
    g.put(op.result, "i32", g.node("Cast", [y], base, to=6))


OPS[nh.LayerNormOp] = _norm
OPS[nh.GroupNormOp] = _norm
