"""What every op writer uses: the writer type, refusals naming the op, constant operands, the
sole reader of a value, and per-channel shifts shaped for broadcasting."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import tensor_shape
from nanoir.grammar.onnx.integer.graph import Graph, IntegerOnnxError, op_label
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

Writer = Callable[[Graph, Any], None]
"""Writes one nh op's nodes into the graph and puts its results' forms and bounds."""


def refuse(op: Operation, why: str) -> IntegerOnnxError:
    return IntegerOnnxError(f"integer onnx export: {op_label(op)} {why}")


def out_name(g: Graph, op: Operation, i: int = 0) -> str:
    return g.base(op.results[i])


def constant_codes(v: SSAValue) -> np.ndarray | None:
    """A constant operand's codes (int64), or None for a run-time value."""
    if isinstance(v.owner, nh.ConstantOp):
        return v.owner.codes().astype(np.int64)
    return None


def per_output_bound(
    w: np.ndarray | None, out_axis: int, bx: int, bw: int, inner: int, bias: np.ndarray | None
) -> np.ndarray:
    """Per output channel, a bound on every partial sum of ``sum_k x w_k + bias`` (Python
    integers): ``|x| <= bx``, and ``|w| <= bw`` over ``inner`` terms where ``w`` is None."""
    if w is None:
        sums = np.asarray([inner * bx * bw], dtype=object)
    else:
        moved = np.moveaxis(np.abs(w), out_axis, 0).reshape(w.shape[out_axis], -1)
        sums = moved.sum(axis=1).astype(object) * bx
    if bias is not None:
        sums = sums + np.abs(bias.reshape(-1)).astype(object)
    return sums


def sole_reader(value: SSAValue) -> Operation | None:
    """The one op reading ``value``, if exactly one op reads it once."""
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


def channel_shifts(op: Any, shifts: list[int], rank: int) -> np.ndarray:
    """An op's shifts shaped to broadcast over its input (per channel along the per-channel
    encoding's C, as the runtime's requant does)."""
    s = np.asarray(shifts or (0,), dtype=np.int64)
    fx, fy = nh.fixed_of(op.input), nh.fixed_of(op.result)
    if (fx.is_per_channel or fy.is_per_channel) and len(s) > 1:
        axis = (fx if fx.is_per_channel else fy).channel_axis
        assert axis is not None
        shape = [1] * rank
        shape[axis] = len(s)
        return s.reshape(shape)
    return s.reshape(())


def static_shape(shape: tuple[int, ...]) -> list[int]:
    """``shape`` for a Reshape: a dynamic dim as -1."""
    return [-1 if d == DYNAMIC_INDEX else d for d in shape]


LOOKUP_ELEMENTS = 256
"""Index values (the static dims' product: a dynamic dim counts 1) from which
:func:`table_lookup` writes ``GatherElements`` rather than ``Gather``."""


def table_lookup(g: Graph, table: str, index: str, shape: tuple[int, ...], name: str) -> str:
    """``table[index]`` for a 1-D ``table`` and an ``index`` of nh shape ``shape``. From
    :data:`LOOKUP_ELEMENTS` indices on it is ``GatherElements`` over the flattened indices,
    reshaped back: onnxruntime's ``Gather`` copies each element with a ``memcpy`` of its own
    (a 256-entry table, 262,144 indices, one thread: 2.24 ms against 0.22 ms), while its
    ``GatherElements`` over a 1-D tensor is one loop (and takes any index count along that
    one axis); below that the two more nodes cost more than they save (~1.5 us)."""
    if math.prod(1 if d == DYNAMIC_INDEX else d for d in shape) < LOOKUP_ELEMENTS:
        return g.node("Gather", [table, index], name, axis=0)
    flat = g.node("Reshape", [index, g.const([-1], np.int64)], name + "_flat")
    looked = g.node("GatherElements", [table, flat], name + "_ge", axis=0)
    if shape.count(DYNAMIC_INDEX) > 1:
        back = g.node("Shape", [index], name + "_shape")
    else:  # one dynamic dim is the -1 of a constant shape (one node fewer)
        back = g.const(static_shape(shape), np.int64)
    return g.node("Reshape", [looked, back], name)


def spatial(op: Operation, shape: tuple[int, ...]) -> list[int]:
    """The static spatial sizes of ``shape`` (Reshapes need them)."""
    if any(d == DYNAMIC_INDEX for d in shape[2:]):
        raise refuse(op, "has dynamic spatial sizes")
    return list(shape[2:])


def rank_of(value: SSAValue) -> int:
    return len(tensor_shape(value))
