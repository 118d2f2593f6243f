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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.grammar.onnx.integer import arith
from nanoir.grammar.onnx.integer.graph import Graph, IntegerOnnxError, zero_point
from nanoir.runtime.nh import _pool_geometry, _pool_setup, _window_counts
from nanoir.runtime.numerics import kernels
from nanoir.runtime.numerics.shapes import window_params
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
    """Constant codes as uint8 parts (array, zero point, scale): one byte when they fit,
    two when they fit 16 bits."""
    c = np.asarray(codes, dtype=np.int64)
    if c.size == 0 or (c.min() >= -128 and c.max() <= 127):
        return [((c + 128).astype(np.uint8), 128, 1)]
    if c.min() >= 0 and c.max() <= 255:
        return [(c.astype(np.uint8), 0, 1)]
    lo = np.mod(c, 256)
    hi = (c - lo) // 256
    if hi.min() < -128 or hi.max() > 127:
        raise _refuse(op, "has an operand wider than 16 bits (integer ONNX products take 8)")
    return [(lo.astype(np.uint8), 0, 1), ((hi + 128).astype(np.uint8), 128, 256)]


def _value_parts(g: Graph, v: SSAValue, op: Operation) -> list[Part]:
    """A run-time operand as uint8 parts."""
    width = nh.width_of(v)
    if width <= 8:
        return [(g.get(v, "u8"), zero_point(v), 1)]
    if width > 16:
        raise _refuse(
            op,
            f"has an {nh.type_text(v)} operand (integer ONNX products take 8 bits, "
            "split here up to 16)",
        )
    base = g.base(v)
    x = g.get(v, "i32")
    lo = g.node("Mod", [x, g.const(256, np.int32)], base + "_lo32")
    hi = g.node(
        "Div", [g.node("Sub", [x, lo], base + "_hi0"), g.const(256, np.int32)], base + "_hi32"
    )
    lo8 = g.node("Cast", [lo], base + "_lo", to=2)
    if nh.is_unsigned(v):
        return [(lo8, 0, 1), (g.node("Cast", [hi], base + "_hi", to=2), 0, 256)]
    hi = g.node("Add", [hi, g.const(128, np.int32)], base + "_hio")
    return [(lo8, 0, 1), (g.node("Cast", [hi], base + "_hi", to=2), 128, 256)]


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
            zx, zw = g.const(xz, np.uint8), g.const(wz, np.uint8)
            y = g.node(op_type, [xn, wn, zx, zw], base + "_p", **attrs)
            if xsc * wsc != 1:
                y = g.node("Mul", [y, g.const(xsc * wsc, np.int32)], base + "_ps")
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
    if nh.width_of(op.input) > 8:
        raise _refuse(op, f"has an {nh.type_text(op.input)} input (8 bits at most here)")
    # Zero-stuff the input (code 0 is the u8 form's zero point): [N, C, S] -> [N, C, (S-1)s+1].
    x = g.get(op.input, "u8")
    zp = zero_point(op.input)
    spatial = list(x_shape[2:])
    if any(s > 1 for s in strides):
        inter = [0, x_shape[1]] + [v for sz in spatial for v in (sz, 1)]
        y = g.node("Reshape", [x, g.const(inter, np.int64)], base + "_r")
        widen = [0] * (2 + 2 * n) + [0, 0] + [v for s in strides for v in (0, s - 1)]
        y = g.node("Pad", [y, g.const(widen, np.int64), g.const(zp, np.uint8)], base + "_z")
        stuffed = [0, x_shape[1]] + [sz * s for sz, s in zip(spatial, strides)]
        y = g.node("Reshape", [y, g.const(stuffed, np.int64)], base + "_s")
        ends = [sz * s - s + 1 for sz, s in zip(spatial, strides)]
        y = g.node(
            "Slice",
            [
                y,
                g.const([0] * n, np.int64),
                g.const(ends, np.int64),
                g.const(list(range(2, 2 + n)), np.int64),
            ],
            base + "_c",
        )
    else:
        y = x
    # Around it: d (k - 1) - pad on each side, output_padding more at the end (crop if < 0).
    begin = [d * (k - 1) - p for d, k, p in zip(dil, kernel, pads[:n])]
    end = [d * (k - 1) - p + o for d, k, p, o in zip(dil, kernel, pads[n:], out_pad)]
    if any(v < 0 for v in begin + end):
        y = g.node(
            "Pad",
            [
                y,
                g.const(
                    [0, 0] + [min(v, 0) for v in begin] + [0, 0] + [min(v, 0) for v in end],
                    np.int64,
                ),
            ],
            base + "_crop",
        )
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
        [(y, zp, 1)],
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
    y, dtype, _ = arith.shift_round(g, x, g.bound(op.input), shifts, op.rounding.data, base + "_q")
    lo, hi = nh.code_range(width, signed)
    lo, hi = _fuse_relu(g, op, lo, hi)
    y = arith.clip(g, y, lo, hi, dtype, base if dtype is np.int32 else base + "_c")
    y = arith.cast_to(g, y, dtype, np.int32, base)
    g.put(op.result, "i32", y)


def _fuse_relu(g: Graph, op: nh.RequantOp, lo: int, hi: int) -> tuple[int, int]:
    """Nothing to fuse yet: the saturation bounds as they are."""
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
    g.put(op.result, "i32", g.node("Relu", [g.get(op.input, "i32")], _out(g, op)))
    g.set_bound(op.result, g.bound(op.input))


@writes(nh.ClampOp)
def clamp(g: Graph, op: nh.ClampOp) -> None:
    lo, hi = nh.value_code_range(op.input)
    mn = lo if op.min is None else max(op.min.value.data, lo)
    mx = hi if op.max is None else min(op.max.value.data, hi)
    mn, mx = max(mn, -(2**31)), min(mx, 2**31 - 1)
    y = arith.clip(g, g.get(op.input, "i32"), mn, mx, np.int32, _out(g, op))
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
    dtype = arith.int_dtype(bound + int(divisor.max(initial=1)))
    y = arith.cast_to(g, total, np.int32, dtype, base + "_w")
    y = arith.div_round(g, y, divisor, op.rounding.data, dtype, base + "_q")
    g.put(op.result, "i32", arith.cast_to(g, y, dtype, np.int32, base))


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
        from nanoir.grammar.onnx.integer.graph import natural_dtype

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


@writes(nh.ExpandOp)
def expand(g: Graph, op: nh.ExpandOp) -> None:
    shape = g.const([1 if d == DYNAMIC_INDEX else d for d in tensor_shape(op.result)], np.int64)
    _moved(g, op, op.input, lambda x, f: g.node("Expand", [x, shape], _out(g, op)))


@writes(nh.GatherOp)
def gather(g: Graph, op: nh.GatherOp) -> None:
    indices = g.const(list(array_values(op.indices) or ()), np.int64)
    axis = op.axis.value.data
    _moved(g, op, op.input, lambda x, f: g.node("Gather", [x, indices], _out(g, op), axis=axis))


# --------------------------------------------------------------------------------------------
# Integer algorithms
# --------------------------------------------------------------------------------------------


@writes(nh.SoftmaxOp)
def softmax(g: Graph, op: nh.SoftmaxOp) -> None:
    """``nanoir.runtime.numerics.softmax.softmax_codes`` in int64."""
    from nanoir.runtime.numerics.softmax import LO_FRAC

    base = _out(g, op)
    axis = op.axis.value.data
    hi = np.asarray(array_values(op.exp_hi), dtype=np.int64)
    lo = np.asarray(array_values(op.exp_lo), dtype=np.int64)
    k_out = nh.fixed_of(op.result).exp_list[0]
    bits, signed = op.bits.value.data, not nh.is_unsigned(op.result)
    i64 = np.int64
    q = g.get(op.input, "i64")
    mask = None
    if op.mask is not None:
        from nanoir.dialects.dense import dense_to_numpy

        mask = g.const(dense_to_numpy(op.mask).astype(bool), np.bool_, base + "_mask")
        lowest = g.const(np.iinfo(np.int64).min // 4, i64)
        qm = g.node("Where", [mask, q, lowest], base + "_qm")
        top = g.node("ReduceMax", [qm, g.const([axis], i64)], base + "_top0", keepdims=1)
        whole = g.node("ReduceMax", [q], base + "_all", keepdims=0)
        whole = g.node("Max", [whole, g.const(0, i64)], base + "_all0")
        top = g.node(
            "Where", [g.node("Equal", [top, lowest], base + "_none"), whole, top], base + "_top"
        )
    else:
        top = g.node("ReduceMax", [q, g.const([axis], i64)], base + "_top", keepdims=1)
    neg = g.node("Sub", [top, q], base + "_neg")
    neg = arith.clip(g, neg, 0, len(hi) * len(lo) - 1, i64, base + "_negc")
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
    e = g.node(
        "Div",
        [
            g.node("Add", [prod, g.const(2 ** (LO_FRAC - 1), i64)], base + "_pr"),
            g.const(2**LO_FRAC, i64),
        ],
        base + "_e",
    )
    if mask is not None:
        e = g.node("Where", [mask, e, g.const(0, i64)], base + "_em")
    s = g.node("ReduceSum", [e, g.const([axis], i64)], base + "_s", keepdims=1)
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
    y = g.node("Where", [positive, y, g.const(0, i64)], base + "_y0")
    lo_c, hi_c = nh.code_range(bits, signed)
    y = arith.clip(g, y, lo_c, hi_c, i64, base + "_yc")
    g.put(op.result, "i32", g.node("Cast", [y], base, to=6))
