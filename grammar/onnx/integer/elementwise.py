"""Elementwise ops: aligned add/sub/mul/max/min, ReLU, clamp, PReLU, lookup tables, comparisons
and selection.

Each runs in float32 where its operands and result stay within ``2**24`` (exact), else in int32.
Where the result may leave its type (an ``i32 + i32`` of a hand-written program), it is computed
in int64 and checked, as the NumPy executor checks it (:meth:`.graph.Graph.check`). A ReLU is
``Max(x, 0)``, never ``Relu``: onnxruntime's FuseReluClip (on at its default level) fails on a
Relu read by an integer Clip, which a requant or clamp after a ReLU would write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.grammar.onnx.integer.arith import clip
from nanoir.grammar.onnx.integer.common import (
    Writer,
    constant_codes,
    out_name,
    refuse,
    table_lookup,
)
from nanoir.grammar.onnx.integer.graph import F32_EXACT, FORM_DTYPE, I32_MAX, Graph, zero_point
from nanoir.grammar.onnx.integer.table_forms import write_float_form
from xdsl.ir import Operation, SSAValue


def _corners(op: Operation, fn: Callable[[int, int], int]) -> tuple[int, int]:
    """The result range of ``fn`` over the operands' declared code ranges (the NumPy
    executor's proof that an add, sub or mul fits its result)."""
    a = nh.value_code_range(op.operands[0])
    b = nh.value_code_range(op.operands[1])
    corners = [fn(x, y) for x in a for y in b]
    return min(corners), max(corners)


def _proven(op: Operation, fn: Callable[[int, int], int], bound: int) -> bool:
    """Whether every result provably fits the result's type: by the declared ranges, or (a
    signed result) by the static bound."""
    lo, hi = nh.value_code_range(op.results[0])
    if nh.width_of(op.results[0]) == 1:
        return False
    smin, smax = _corners(op, fn)
    return (lo <= smin and smax <= hi) or (lo < 0 and bound <= hi)


def _arith_form(g: Graph, operands: tuple[SSAValue, ...], bound: int) -> str:
    """int32 where the run-time operands are integers already (a signed trunc's result: no
    conversion), else float32 where every operand and the result are exact there, else
    int32."""
    exact = bound <= F32_EXACT and all(g.float_exact(v) for v in operands)
    held = [g.first_form(v) for v in operands if v not in g.lazy]
    if not exact or (held and all(f in ("i32", "i64", "in") for f in held)):
        return "i32"
    return "f32"


def _binary(op_type: str, combine: Callable[[int, int], int], fn: Callable[[int, int], int]):
    def write(g: Graph, op: Any) -> None:
        base = out_name(g, op)
        bound = combine(g.bound(op.lhs), g.bound(op.rhs))
        checked = op_type in ("Add", "Sub", "Mul") and not _proven(op, fn, bound)
        if checked:  # computed in int64 and checked against the result's type
            y = g.node(op_type, [g.get(op.lhs, "i64"), g.get(op.rhs, "i64")], base + "_w")
            lo, hi = nh.value_code_range(op.result)
            g.check(op, y, lo, hi, np.int64, one_bit=nh.width_of(op.result) == 1)
            g.put(op.result, "i32", g.node("Cast", [y], base, to=6))
            g.set_bound(op.result, min(bound, I32_MAX))
            return
        form = _arith_form(g, (op.lhs, op.rhs), bound)
        g.put(op.result, form, g.node(op_type, [g.get(op.lhs, form), g.get(op.rhs, form)], base))
        g.set_bound(op.result, bound)

    return write


def _kept_form(g: Graph, v: SSAValue) -> str:
    """The form an exponent-preserving op works in: the operand's own (``in`` as float32 or
    int32)."""
    form = g.first_form(v)
    if form == "in":
        return "f32" if g.float_exact(v) else "i32"
    return form


def relu(g: Graph, op: nh.ReluOp) -> None:
    """``Max(x, 0)`` in the input's form (see the module docstring)."""
    if op in g.fused:  # its requant saturated at 0 already
        form = _kept_form(g, op.input)
        g.put(op.result, form, g.get(op.input, form))
        g.set_bound(op.result, g.bound(op.input))
        return
    base = out_name(g, op)
    if nh.width_of(op.input) == 1:  # -1 codes become 0, no i1 code: checked
        y = g.node("Max", [g.get(op.input, "i32"), g.const(0, np.int32)], base)
        g.check(op, y, -1, 1, np.int32, one_bit=True)
        g.put(op.result, "i32", y)
        g.set_bound(op.result, 1)
        return
    form = _kept_form(g, op.input)
    zero = zero_point(op.input) if form == "u8" else 0
    y = g.node("Max", [g.get(op.input, form), g.const(zero, FORM_DTYPE[form])], base)
    g.put(op.result, form, y)
    g.set_bound(op.result, g.bound(op.input))


def _is_code(v: int, width: int, signed: bool) -> bool:
    lo, hi = nh.code_range(width, signed)
    return lo <= v <= hi and not (width == 1 and v == 0)


def clamp(g: Graph, op: nh.ClampOp) -> None:
    """``Clip`` in the input's form; a bound that is no code of the type (every clamped value
    then leaves it) is checked, as the NumPy executor checks it."""
    base = out_name(g, op)
    width, signed = nh.width_of(op.input), not nh.is_unsigned(op.input)
    lo, hi = nh.code_range(width, signed)
    mn = None if op.min is None or op.min.value.data <= lo else op.min.value.data
    mx = None if op.max is None or op.max.value.data >= hi else op.max.value.data
    if (mn is not None and not _is_code(mn, width, signed)) or (
        mx is not None and not _is_code(mx, width, signed)
    ):
        low = lo if mn is None else mn
        high = hi if mx is None else mx
        y = clip(g, g.get(op.input, "i64"), low, high, np.int64, base + "_w")
        g.check(op, y, lo, hi, np.int64, one_bit=width == 1)
        g.put(op.result, "i32", g.node("Cast", [y], base, to=6))
        g.set_bound(op.result, g.bound(op.input))
        return
    form = _kept_form(g, op.input)
    zero = zero_point(op.input) if form == "u8" else 0
    low = (lo if mn is None else mn) + zero
    high = (hi if mx is None else mx) + zero
    y = clip(g, g.get(op.input, form), low, high, FORM_DTYPE[form], base)
    g.put(op.result, form, y)
    g.set_bound(op.result, g.bound(op.input))


def prelu(g: Graph, op: nh.PReluOp) -> None:
    """``x > 0 ? x << shift : x * slope`` as ``Max(x, 0) * 2**shift + Min(x, 0) * slope``
    (onnxruntime's ``Where`` costs twenty elementwise ops): float32 where exact, int32 where
    the result provably fits its type, else int64 and checked. With constant slopes whose
    terms stay exact, ``x * 2**shift + Min(x, 0) * (slope - 2**shift)``: one node fewer
    (each a fixed cost on small tensors: MTCNN's R-Net has four)."""
    base = out_name(g, op)
    rank = len(tensor_shape(op.input))
    shift = op.shift.value.data
    bound = g.bound(op.input) * max(2**shift, g.bound(op.slope))
    lo, hi = nh.value_code_range(op.result)
    checked = not (lo < 0 and bound <= hi and nh.width_of(op.result) > 1)
    if checked:
        form, dtype = "i64", np.int64
    elif bound <= F32_EXACT and g.float_exact(op.input):
        form, dtype = "f32", np.float32
    else:
        form, dtype = "i32", np.int32
    x = g.get(op.input, form)
    codes = constant_codes(op.slope)
    shape = () if math.prod(tensor_shape(op.slope)) == 1 else (-1,) + (1,) * (rank - 2)
    zero = g.const(0, dtype)
    scale = 2**shift
    if codes is not None and not checked:
        # The rewritten terms: |x| * 2**shift and |x| * |slope - 2**shift|.
        excess = codes.astype(np.int64) - scale
        limit = F32_EXACT if form == "f32" else I32_MAX
        if g.bound(op.input) * max(scale, int(np.abs(excess).max(initial=0))) <= limit:
            pos = g.node("Mul", [x, g.const(scale, dtype)], base + "_pos") if shift else x
            neg = g.node("Min", [x, zero], base + "_n")
            neg = g.node("Mul", [neg, g.const(excess.reshape(shape), dtype)], base + "_neg")
            g.put(op.result, form, g.node("Add", [pos, neg], base))
            g.set_bound(op.result, min(bound, max(-lo, hi)))
            return
    if codes is not None:
        slope = g.const(codes.reshape(shape), dtype, base + "_slope")
    else:
        slope = g.node(
            "Reshape", [g.get(op.slope, form), g.const(shape or (1,), np.int64)], base + "_slope"
        )
    pos = g.node("Max", [x, zero], base + "_p")
    if shift:
        pos = g.node("Mul", [pos, g.const(scale, dtype)], base + "_pos")
    neg = g.node("Mul", [g.node("Min", [x, zero], base + "_n"), slope], base + "_neg")
    y = g.node("Add", [pos, neg], base + ("_w" if checked else ""))
    if checked:
        g.check(op, y, lo, hi, np.int64, one_bit=nh.width_of(op.result) == 1)
        y = g.node("Cast", [y], base, to=6)
        form = "i32"
    g.put(op.result, form, y)
    g.set_bound(op.result, min(bound, max(-lo, hi)))


def lut(g: Graph, op: nh.LutOp) -> None:
    """The float ops of the table's function where they give the table (:mod:`.table_forms`),
    else ``Gather`` of the table (float32 where exact) by ``code - lo`` (the uint8 form of
    8-bit codes is that index already), offset by the channel's sub-table."""
    base = out_name(g, op)
    width = nh.width_of(op.input)
    lo, _ = nh.value_code_range(op.input)
    span = 2 if width == 1 else 2**width
    table = np.asarray(array_values(op.table) or (), dtype=np.int64)
    if op.starts is not None:
        starts = np.asarray(array_values(op.starts), dtype=np.int64)
        subs = int((starts == lo).sum())
        if subs * span > 2**20:
            raise refuse(
                op,
                f"has a segmented table over {nh.type_text(op.input)} codes too "
                "large to write out densely (more than 2**20 entries)",
            )
        keys = (np.cumsum(starts == lo) - 1) * span + (starts - lo)
        table = table[np.searchsorted(keys, np.arange(subs * span), side="right") - 1]
    if write_float_form(g, op, table):
        return
    if width == 1:  # -1 -> 0, +1 -> 1
        x = g.get(op.input, "i32")
        index = g.node(
            "Div",
            [g.node("Add", [x, g.const(1, np.int32)], base + "_p1"), g.const(2, np.int32)],
            base + "_i",
        )
    elif g.has(op.input, "u8") and width <= 8:
        index = g.node("Cast", [g.get(op.input, "u8")], base + "_u", to=6)
        offset = zero_point(op.input) + lo  # u8 = code + zero point; index = code - lo
        if offset:
            index = g.node("Sub", [index, g.const(offset, np.int32)], base + "_i")
    else:
        x = g.get(op.input, "f32" if g.first_form(op.input) == "f32" else "i32")
        if g.first_form(op.input) == "f32":
            x = g.node("Cast", [x], base + "_x", to=6)
        index = g.node("Sub", [x, g.const(lo, np.int32)], base + "_i") if lo else x
    if op.channels is not None:
        axis = op.channel_axis()
        assert axis is not None
        shape = [1] * len(tensor_shape(op.input))
        shape[axis] = -1
        offset = np.asarray(array_values(op.channels), dtype=np.int64).reshape(shape) * span
        index = g.node("Add", [index, g.const(offset, np.int32, base + "_sub")], base + "_ci")
    bound = int(np.abs(table).max(initial=0))
    form = "f32" if bound <= F32_EXACT else "i32"
    table_name = g.const(table, FORM_DTYPE[form], base + "_table")
    y = table_lookup(g, table_name, index, tensor_shape(op.input), base)
    g.put(op.result, form, y)
    g.set_bound(op.result, bound)


_ORDERINGS = {
    "eq": "Equal",
    "ne": "Equal",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
}
_LOGICAL = {"and": "And", "or": "Or", "xor": "Xor"}
_BOOL = 9  # ONNX TensorProto BOOL


def _truth(g: Graph, v: SSAValue, base: str) -> str:
    """``v``'s codes as bool, non-zero true (from float32 or int32 codes, never the offset
    uint8 form)."""
    return g.node("Cast", [g.get(v, "f32" if g.float_exact(v) else "i32")], base, to=_BOOL)


def compare(g: Graph, op: nh.CompareOp) -> None:
    """Codes at one exponent compare as their values do: ONNX's comparison on both in one
    form (float32 where exact, else int32; ``ne`` is ``Not(Equal)``); a logical predicate
    reads each code as non-zero. The bool result is cast to int32 codes 1 and 0."""
    base = out_name(g, op)
    predicate = op.predicate.data
    if predicate in _LOGICAL:
        a, b = (_truth(g, v, f"{base}_{i}") for i, v in enumerate((op.lhs, op.rhs)))
        truth = g.node(_LOGICAL[predicate], [a, b], base + "_b")
    else:
        bound = max(g.bound(op.lhs), g.bound(op.rhs))
        form = _arith_form(g, (op.lhs, op.rhs), bound)
        operands = [g.get(op.lhs, form), g.get(op.rhs, form)]
        truth = g.node(_ORDERINGS[predicate], operands, base + "_b")
        if predicate == "ne":
            truth = g.node("Not", [truth], base + "_n")
    g.put(op.result, "i32", g.node("Cast", [truth], base, to=6))
    g.set_bound(op.result, 1)


def select(g: Graph, op: nh.SelectOp) -> None:
    """``Where`` on the condition's codes as bool (non-zero true), ``lhs`` and ``rhs`` in one
    form (float32 where both are exact, else int32): a code of either, which the result's
    type holds (the verifier's proof)."""
    base = out_name(g, op)
    bound = max(g.bound(op.lhs), g.bound(op.rhs))
    form = _arith_form(g, (op.lhs, op.rhs), bound)
    cond = _truth(g, op.cond, base + "_c")
    g.put(op.result, form, g.node("Where", [cond, g.get(op.lhs, form), g.get(op.rhs, form)], base))
    g.set_bound(op.result, bound)


WRITERS: dict[type[Operation], Writer] = {
    nh.AddOp: _binary("Add", lambda a, b: a + b, lambda x, y: x + y),
    nh.SubOp: _binary("Sub", lambda a, b: a + b, lambda x, y: x - y),
    nh.MulOp: _binary("Mul", lambda a, b: a * b, lambda x, y: x * y),
    nh.MaximumOp: _binary("Max", max, max),
    nh.MinimumOp: _binary("Min", max, min),
    nh.ReluOp: relu,
    nh.ClampOp: clamp,
    nh.PReluOp: prelu,
    nh.LutOp: lut,
    nh.CompareOp: compare,
    nh.SelectOp: select,
}
