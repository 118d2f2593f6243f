"""The streaming rule of one node along one dim, read from its op's traits.

A node is an op with at least one runtime operand (constants and ops of constants are "init"
work and never streamed). It keeps one cache per *distinct* runtime operand; its
:class:`StreamRule` says how it consumes them along a dim ``d``: the receptive field
(``fields``: a conv or pool with kernel ``k`` and dilation ``dil`` needs ``dil*(k-1)+1`` rows;
elementwise ops, fake-quant, requant, lut, BN, joins need 1), the ``strides`` (rows each cache
drops after firing), the padding along d and the rows each result gains per firing
(``gains``: 1, or ``r`` for a nearest upsample by ``r``).

The op's :class:`~nanoir.dialects.traits.StreamingRule` trait gives the step of the op
(:class:`~nanoir.dialects.traits.RowStep`); this module adds what holds for every op:

- a node none of whose values has dim d moves whole units (one row in, one row out);
- the same step applies to every cache, so a join (add, concat, ... of runtime values) fires
  only when every cache has a row: it buffers the earlier branch;
- an op that needs the whole extent along d (flattening or reshaping d away, ``linear``
  contracting d, concat or split along d, broadcasting along d, an adaptive pool whose
  windows are uneven) gets a window of that many rows, fired once; the extent must be
  static, otherwise the op cannot be streamed along d (error).

The streamed dim is followed through transposes by *relabelling* it: a transpose moves the
same rows, only the index of the dim they run along changes (``perm.index(d)``), so it
steps one row in, one row out, and its result streams along the new index. Each runtime
value therefore has its own streamed axis (``axes``: ``None`` for a value that moves as
whole units; see ``graph``), and a node's rule is asked along the axis its streamed inputs
share. Past a relabelling the axis may be the batch or the channel dim (a conv front end's
``[N, C, T]`` permuted to the ``[N, T, F]`` a recurrent op takes): there, ops whose rule is
about spatial dims (convs, pools, adaptive pools) or whose parameters run along the channels
(batch norm, PReLU) take the whole extent, and so does any node with an nh value whose
per-channel exponents run along its streamed axis (a window of rows would have fewer
channels than exponents), or whose streamed inputs run along different axes.

A recurrent op (trait :class:`~nanoir.dialects.traits.Recurrent`) streams along its time axis
one row per step with its state carried from row to row (``StreamRule.stateful``); a
bidirectional one, or one whose final state is read, is refused along time, naming the op and
why.

An op without the trait (``nf.custom``, ...) is an error naming it. Abbreviation: M = the
streamed ("memory") dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nanoir.dialects.functions import describe
from nanoir.dialects.nh import FixedAttr
from nanoir.dialects.traits import (
    ROW,
    Adjust,
    ChannelWise,
    DataMovement,
    Recurrent,
    RowStep,
    SlidingWindow,
    StreamingRule,
    WholeExtent,
    transpose_rows,
)
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

__all__ = [
    "Axes",
    "StreamPlanError",
    "StreamRule",
    "describe",
    "has_dim",
    "node_axes",
    "shape_of",
    "stream_rule",
]

Axes = dict[SSAValue, "int | None"]
"""The axis each runtime value streams along (``None``: it moves as whole units)."""


class StreamPlanError(DiagnosticException, Error):
    """The program cannot be streamed as asked; the message names the op or dim and why."""


@dataclass(frozen=True)
class StreamRule:
    """How a node consumes its caches along one dim (one entry per distinct runtime operand)."""

    fields: tuple[int, ...]
    """Receptive field: rows each cache must hold to fire."""
    strides: tuple[int, ...]
    """Rows each cache drops after firing."""
    gains: tuple[int, ...]
    """Rows each result gains per firing."""
    pad_begin: int = 0
    """Zero rows in each cache before the first real row (causal warm-up)."""
    pad_end: int = 0
    """Zero rows fed once every operand has ended."""
    ceil_mode: bool = False
    """Fire once more on a partial last window (PyTorch's pooling ``ceil_mode``)."""
    adjust: Adjust = "none"
    """How the executor adapts the op to a window of rows (``nanoir.dialects.traits.Adjust``)."""
    whole: bool = False
    """The node needs the whole extent along d at once (fields = the extents)."""
    stateful: bool = False
    """The node carries a state from row to row (a recurrent op along time): the executor
    keeps it between firings, as it keeps the caches, and resumes the op from it."""


def shape_of(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()


def has_dim(value: SSAValue, dim: int) -> bool:
    """Whether ``value`` is streamed row by row along ``dim`` (else it moves as one unit)."""
    return len(shape_of(value)) > dim


def _whole_rule(
    op: Operation,
    inputs: Sequence[SSAValue],
    in_axes: Sequence[int | None],
    out_axes: Sequence[int | None],
) -> StreamRule:
    """Fire once on the whole extent of every input along its axis; each result gains its
    whole extent (or one unit when it lacks a streamed axis)."""

    def extent(v: SSAValue, axis: int | None, what: str) -> int:
        if axis is None:
            return 1
        size = shape_of(v)[axis]
        if size == DYNAMIC_INDEX:
            raise StreamPlanError(
                f"stream-plan: {describe(op)} needs the whole of dim {axis} of its {what} at "
                f"once, but that dim is dynamic ({v.type}); it cannot be streamed along dim {axis}"
            )
        return size

    fields = tuple(extent(v, a, "input") for v, a in zip(inputs, in_axes))
    gains = tuple(extent(r, a, "result") for r, a in zip(op.results, out_axes))
    return StreamRule(fields, fields, gains, whole=True)


def streaming_trait(op: Operation) -> StreamingRule | None:
    """The op's streaming rule trait, if it has one."""
    return op.get_trait(StreamingRule)


def _channels_along(value: SSAValue, axis: int | None) -> bool:
    """Whether ``value`` is an nh value whose per-channel exponents run along ``axis``."""
    t = value.type
    if axis is None or not isinstance(t, TensorType) or not isinstance(t.encoding, FixedAttr):
        return False
    fixed = t.encoding
    return fixed.is_per_channel and fixed.channel_axis == axis and len(fixed.exp_list) > 1


def _row_step(
    op: Operation, trait: StreamingRule, axis: int, inputs: tuple[SSAValue, ...]
) -> RowStep | None:
    """The trait's step along ``axis``, or None where it takes the whole extent (see the
    module docstring for the rules past a relabelling)."""
    if axis < 2 and (
        isinstance(trait, SlidingWindow)
        or type(trait) is WholeExtent
        or (axis == 1 and isinstance(trait, ChannelWise))
    ):
        return None
    return trait.row_step(op, axis, inputs)


def _relabelled(op: Operation, trait: StreamingRule, axis: int) -> int | None:
    """The result's axis when ``op`` is a transpose (its rows move along ``perm.index(axis)``),
    else None."""
    if not (isinstance(trait, DataMovement) and trait.rows is transpose_rows):
        return None
    perm = [int(p) for p in op.properties["perm"].get_values()]  # type: ignore[attr-defined]
    return perm.index(axis)


def node_axes(
    op: Operation, dim: int, inputs: tuple[SSAValue, ...], axes: Axes
) -> tuple[StreamRule, tuple[int | None, ...]]:
    """The rule of ``op`` over these distinct runtime operands (``inputs``, streamed along
    ``axes``) and the axis each result streams along (``None``: whole units, as every result
    of a node whose inputs are all units). ``dim`` is the analysed dim."""
    trait = streaming_trait(op)
    if trait is None:
        raise StreamPlanError(
            f"stream-plan: {describe(op)} has no streaming rule (no "
            "nanoir.dialects.traits.StreamingRule trait: elementwise, data movement, sliding "
            "window, channel-wise, contraction or whole-extent)"
        )
    if any(not isinstance(v.type, TensorType) for v in (*op.operands, *op.results)):
        raise StreamPlanError(f"stream-plan: {describe(op)} works on non-tensor values")
    in_axes = tuple(axes.get(v) for v in inputs)
    streamed = sorted({a for a in in_axes if a is not None})
    axis = streamed[0] if streamed else dim

    def along(a: int) -> tuple[int | None, ...]:
        return tuple(a if len(shape_of(r)) > a else None for r in op.results)

    out_axes = along(axis)
    if isinstance(trait, Recurrent) and streamed == [trait.time_axis(op)]:
        return _recurrent_rule(op, trait, axis, inputs)
    if not streamed:
        # Units in, units out: the node fires once on whole inputs, so its results come out
        # whole too, whatever dims they have (a result computed from units that took the
        # analysed dim as its axis got all its rows in one firing where the plan counted one).
        n = len(inputs)
        return StreamRule((1,) * n, (1,) * n, (1,) * len(op.results)), (None,) * len(op.results)
    step: RowStep | None = None
    if len(streamed) <= 1 and not any(
        _channels_along(v, a) for v, a in (*zip(inputs, in_axes), *zip(op.results, out_axes))
    ):
        moved = _relabelled(op, trait, axis) if streamed else None
        if moved is not None:
            out_axes, step = (moved,), ROW
        else:
            step = _row_step(op, trait, axis, inputs)
    if step is None:
        return _whole_rule(op, inputs, in_axes, out_axes), out_axes
    n = len(inputs)
    rule = StreamRule(
        (step.need,) * n,
        (step.drop,) * n,
        (step.emit,) * len(op.results),
        step.pad_begin,
        step.pad_end,
        step.ceil_mode,
        step.adjust,
    )
    return rule, out_axes


def _recurrent_rule(
    op: Operation, trait: Recurrent, axis: int, inputs: tuple[SSAValue, ...]
) -> tuple[StreamRule, tuple[int | None, ...]]:
    """A recurrent op along its time axis: one row in, one row of ``output`` out, the state
    carried (``stateful``); ``h_n``/``c_n`` gain nothing while streaming (they must be
    unread), or a refusal naming the op and why."""
    reason = trait.refusal(op, inputs)
    if reason is not None:
        raise StreamPlanError(
            f"stream-plan: {describe(op)} cannot be streamed along dim {axis}, its time axis: "
            f"{reason}"
        )
    gains = (1,) + (0,) * (len(op.results) - 1)
    rule = StreamRule((1,), (1,), gains, adjust="state", stateful=True)
    return rule, (axis,) + (None,) * (len(op.results) - 1)


def stream_rule(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """The rule of ``op`` along ``dim`` with these distinct runtime operands (``inputs``),
    each streamed along ``dim`` when it has it."""
    axes: Axes = {v: dim if has_dim(v, dim) else None for v in inputs}
    return node_axes(op, dim, inputs, axes)[0]
