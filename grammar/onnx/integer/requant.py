"""``nh.requant`` as exact float ops.

``y = saturate(shift_round(x, s, mode))`` (:func:`nanoir.runtime.numerics.quant.requant_codes`)
is ``x * 2**-s``, exact in floating point (a power of two), then each mode's own rounding of
it, also exact: ``Floor`` (floor), ``Round`` (ONNX's round half to even: half_even), ``Floor``
of ``x * 2**-s + 1/2`` (half_up), and for trunc ``Floor`` when the saturation's lower bound is
at least 0 (a trunc of a clipped value is the clipped trunc, as the bounds are integers), else
a ``Cast`` to int32 of the clipped value (see :func:`float_round`). Then ``Clip``. In float32
where ``|x| <= 2**24`` (and, for half_up, ``|x| + 2**(s-1)``), which the static bound says;
else in float64, which holds every nh code (at most 32 bits), its power-of-two multiples and
``x * 2**-s + 1/2`` exactly. (The integer rounding division of :mod:`.arith`, ``Div`` and
``Mod``, is a scalar loop in onnxruntime: 6x slower than the float64 form on int32 sums.)
A product read only by its requant folds ``2**-s`` (and half_up's half) into its weights and
bias (:mod:`.products`): the requant is then the rounding and the clip alone.

A requant whose only reader is an ``nh.relu`` saturates at 0 itself (the ReLU then reads the
same tensor).
"""

from __future__ import annotations

import math

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.arith import clip
from nanoir.grammar.onnx.integer.common import channel_shifts, out_name, refuse, sole_reader
from nanoir.grammar.onnx.integer.graph import F32_EXACT, F64_EXACT, Graph, zero_point
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Operation, SSAValue


def saturation(g: Graph, op: nh.RequantOp) -> tuple[int, int]:
    """The requant's saturation bounds, raised to 0 when its only reader is an ``nh.relu``
    (marked fused: it then reads the same tensor, one pass fewer per conv + ReLU)."""
    lo, hi = nh.code_range(nh.width_of(op.result), not nh.is_unsigned(op.result))
    reader = sole_reader(op.result)
    if isinstance(reader, nh.ReluOp) and lo < 0:
        g.fused.add(reader)
        return 0, hi
    return lo, hi


def shifts_of(op: nh.RequantOp) -> np.ndarray:
    """The requant's shifts shaped to broadcast over its input."""
    return channel_shifts(op, list(array_values(op.shift) or ()), len(tensor_shape(op.input)))


def quantizes(g: Graph, op: nh.RequantOp, bound: int) -> bool:
    """Whether the requant is one ``QuantizeLinear`` (to its :func:`byte_form`): a
    result of 2..8 bits, not a trunc that keeps negative codes, and ``x`` with its rounding
    offset (:func:`quantize_offset`) exact in float32 for ``|x| <= bound``."""
    width, mode = nh.width_of(op.result), op.rounding.data
    if width == 1 or width > 8:
        return False
    lo, _ = saturation(g, op)
    if mode is RoundingMode.TRUNC and lo < 0:
        return False
    if mode is RoundingMode.HALF_EVEN:
        return bound <= F32_EXACT
    return 2 * bound + 2 ** int(shifts_of(op).max(initial=0)) <= F32_EXACT


def quantize_offset(mode: RoundingMode, shifts: np.ndarray) -> np.ndarray:
    """What to add to ``y = x * 2**-s`` so that ``QuantizeLinear``'s round half to even gives
    the mode's rounding (``s >= 1``; integers need none): half_up adds ``2**-(s+1)`` (a tie
    then rounds up, nothing else moves past a half); floor, and trunc of values saturated at
    0, add ``2**-(s+1) - 1/2`` (every fraction then lies strictly within half a step of the
    floor)."""
    half = np.ldexp(1.0, -(shifts + 1))
    if mode is RoundingMode.HALF_EVEN:
        return np.zeros(np.shape(shifts))
    if mode is RoundingMode.HALF_UP:
        return np.where(shifts > 0, half, 0.0)
    return np.where(shifts > 0, half - 0.5, 0.0)


CONVERTING_READERS: tuple[type[Operation], ...] = (
    nh.AddOp,
    nh.SubOp,
    nh.MulOp,
    nh.PReluOp,
    nh.RequantOp,
    nh.LutOp,
    ReturnOp,
)
"""Readers that take a byte-coded operand in another form (float32, int32: one ``Cast``) or,
for a function result, in its exchange dtype: none of them reads the uint8 form itself."""


def byte_form(value: SSAValue) -> str:
    """The form a ``QuantizeLinear`` writes ``value``'s codes in: ``i8`` (int8, zero point 0)
    for signed codes whose every reader converts them (one ``Cast``, where the uint8 form
    needs a ``Sub`` of 128 too: 83 of them in the PP-OCRv4 recognizer), else ``u8``."""
    if nh.is_unsigned(value) or not value.uses:
        return "u8"
    if all(isinstance(use.operation, CONVERTING_READERS) for use in value.uses):
        return "i8"
    return "u8"


def quantize(g: Graph, op: nh.RequantOp, x: str, scale: np.ndarray, base: str) -> str:
    """``QuantizeLinear(x, scale, zero point)`` to the result's :func:`byte_form` (put there),
    clipped where the result's range is narrower than the form's (fewer bits, a fused ReLU)."""
    lo, hi = saturation(g, op)
    form = byte_form(op.result)
    y = quantize_to(g, x, scale, lo, hi, zero_point(op.result), base, signed=form == "i8")
    g.put(op.result, form, y)
    return y


def quantize_to(
    g: Graph,
    x: str,
    scale: np.ndarray,
    lo: int,
    hi: int,
    zp: int,
    base: str,
    *,
    signed: bool = False,
) -> str:
    """``QuantizeLinear(x, scale, zp)``: the uint8 form (codes + ``zp``) of codes saturated to
    ``lo..hi`` (a uint8 ``Clip`` where that is narrower than uint8); ``signed``: the int8 form
    (zero point 0, an int8 ``Clip`` where ``lo..hi`` is narrower than int8)."""
    scale = np.asarray(scale, dtype=np.float64)
    attrs = {}
    dtype, zp = (np.int8, 0) if signed else (np.uint8, zp)
    zero = np.asarray(zp)
    if scale.size > 1:  # per axis: the zero point's shape follows the scale's
        attrs["axis"] = int(np.argmax(scale.shape))
        scale = scale.reshape(-1)
        zero = np.full(scale.shape, zp)
    inputs = [x, g.const(scale, np.float32, base + "_qs"), g.const(zero, dtype, base + "_qz")]
    info = np.iinfo(dtype)
    narrow = lo + zp > info.min or hi + zp < info.max
    y = g.node("QuantizeLinear", inputs, base + ("_q" if narrow else ""), **attrs)
    if narrow:
        y = g.node("Clip", [y, g.const(lo + zp, dtype), g.const(hi + zp, dtype)], base)
    return y


def half_up_fits(bound: int, shifts: np.ndarray) -> bool:
    """Whether ``x * 2**-s + 1/2`` is exact in float32 for ``|x| <= bound``."""
    top = int(shifts.max(initial=0))
    return top < 1 or bound + 2 ** (top - 1) <= F32_EXACT


def float_round(
    g: Graph,
    y: str,
    mode: RoundingMode,
    lo: int,
    hi: int,
    base: str,
    reach: float | None = None,
    dtype: type = np.float32,
) -> tuple[str, str]:
    """``clip(round_mode(y), lo, hi)`` of float32 (or ``dtype``) ``y`` already scaled by
    ``2**-s`` (and, for half_up, offset by 1/2), exactly: the tensor's name and its form
    (``f32``/``f64``, or ``i32`` for a signed trunc). ``reach`` bounds ``|y|``: no ``Clip``
    where the rounded values provably stay within ``lo..hi``.

    A signed trunc is the clip, then ``Cast`` to int32, which truncates toward zero (C++'s
    conversion of an in-range float, and SIMD's ``cvtt``): ``sign(y) * Floor(|y|)`` would be
    exact too, but onnxruntime's ``Sign`` costs five times another unary op."""
    form = "f64" if dtype is np.float64 else "f32"
    top = None if reach is None else math.floor(reach) + 1
    clipped = top is not None and -top >= lo and top <= hi

    def clip_float(x: str, name: str) -> str:
        return x if clipped else g.node("Clip", [x, g.const(lo, dtype), g.const(hi, dtype)], name)

    if mode is RoundingMode.TRUNC and lo >= 0:  # trunc of a clipped value: the clipped trunc
        return g.node("Floor", [clip_float(y, base + "_c")], base), form
    if mode is RoundingMode.TRUNC:
        return g.node("Cast", [clip_float(y, base + "_c")], base, to=6), "i32"
    op_type = "Round" if mode is RoundingMode.HALF_EVEN else "Floor"
    if clipped:
        return g.node(op_type, [y], base), form
    return clip_float(g.node(op_type, [y], base + "_r"), base), form


def requant(g: Graph, op: nh.RequantOp) -> None:
    if op in g.done:  # written with its product (a fused kernel)
        return
    base = out_name(g, op)
    width = nh.width_of(op.result)
    mode = op.rounding.data
    if width == 1:  # the sign rule: x >= 0 -> +1, else -1 (the shift does not matter)
        form = "f32" if g.float_exact(op.input) else "i32"
        dtype = np.float32 if form == "f32" else np.int32
        x = g.get(op.input, form)
        cond = g.node("GreaterOrEqual", [x, g.const(0, dtype)], base + "_ge")
        twice = g.node(
            "Mul",
            [g.node("Cast", [cond], base + "_c", to=1 if form == "f32" else 6), g.const(2, dtype)],
            base + "_2",
        )  # 2 (x >= 0) - 1: onnxruntime's Where is slow
        y = g.node("Sub", [twice, g.const(1, dtype)], base)
        g.put(op.result, form, y)
        g.set_bound(op.result, 1)
        return
    lo, hi = saturation(g, op)
    shifts = shifts_of(op)
    bound = g.bound(op.input)
    reach = bound * 2.0 ** -float(shifts.min(initial=0)) + 0.5
    if op in g.scaled and quantizes(g, op, bound):  # its product added the offset
        quantize(g, op, g.scaled[op], np.ones(()), base)
    elif op in g.scaled:
        y, form = float_round(g, g.scaled[op], mode, lo, hi, base, reach)
        g.put(op.result, form, y)
    elif g.float_exact(op.input) and quantizes(g, op, bound):
        y = g.get(op.input, "f32")
        offset = quantize_offset(mode, shifts) * np.ldexp(1.0, shifts)
        if offset.any():
            y = g.node("Add", [y, g.const(offset, np.float32, base + "_off")], base + "_o")
        quantize(g, op, y, np.ldexp(1.0, shifts), base)
    else:
        # float32 where exact, else float64, which holds every nh code (at most 32 bits) and
        # its power-of-two multiples, halves included: onnxruntime's integer Div and Mod are
        # scalar loops, 6x slower than a Cast and these float ops on a requant of int32 sums
        f32 = g.float_exact(op.input) and (
            mode is not RoundingMode.HALF_UP or half_up_fits(bound, shifts)
        )
        if not f32 and bound > F64_EXACT:
            raise refuse(op, f"reads codes of bound {bound}, past float64's exact integers")
        dtype, form = (np.float32, "f32") if f32 else (np.float64, "f64")
        y = g.get(op.input, form)
        if shifts.any():
            scale = g.const(np.ldexp(1.0, -shifts), dtype, base + "_scale")
            y = g.node("Mul", [y, scale], base + "_m")
        if mode is RoundingMode.HALF_UP and (shifts > 0).any():
            half = g.const(np.where(shifts > 0, 0.5, 0.0), dtype, base + "_half")
            y = g.node("Add", [y, half], base + "_h")
        if (shifts > 0).any():
            y, form = float_round(g, y, mode, lo, hi, base, reach, dtype)
        elif bound * 2.0 ** -float(shifts.min(initial=0)) > min(-lo, hi):
            y = clip(g, y, lo, hi, dtype, base)  # an integer: the clip alone
        # (else a left shift that provably fits, an alignment: nothing to clip)
        g.put(op.result, form, y)
    # The rounded codes reach at most one past the scaled bound (an i32 requant's result
    # is no wider than its input says: the adds after it stay proven and in float32).
    g.set_bound(op.result, min(max(-lo, hi), math.floor(reach) + 1))
