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
  contracting d, concat or split along d, a transpose moving d, broadcasting along d, an
  adaptive pool whose windows are uneven) gets a window of that many rows, fired once; the
  extent must be static, otherwise the op cannot be streamed along d (error).

An op without the trait (``nf.custom``, ...) is an error naming it. Abbreviation: M = the
streamed ("memory") dim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nanoir.dialects.functions import describe
from nanoir.dialects.traits import Adjust, StreamingRule
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

__all__ = ["StreamPlanError", "StreamRule", "describe", "has_dim", "shape_of", "stream_rule"]


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


def shape_of(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()


def has_dim(value: SSAValue, dim: int) -> bool:
    """Whether ``value`` is streamed row by row along ``dim`` (else it moves as one unit)."""
    return len(shape_of(value)) > dim


def _whole_rule(op: Operation, dim: int, inputs: Sequence[SSAValue]) -> StreamRule:
    """Fire once on the whole extent of every input along ``dim``; each result gains its whole
    extent (or one unit when it lacks the dim)."""

    def extent(v: SSAValue, what: str) -> int:
        if not has_dim(v, dim):
            return 1
        size = shape_of(v)[dim]
        if size == DYNAMIC_INDEX:
            raise StreamPlanError(
                f"stream-plan: {describe(op)} needs the whole of dim {dim} of its {what} at "
                f"once, but that dim is dynamic ({v.type}); it cannot be streamed along dim {dim}"
            )
        return size

    fields = tuple(extent(v, "input") for v in inputs)
    gains = tuple(extent(r, "result") for r in op.results)
    return StreamRule(fields, fields, gains, whole=True)


def _all_units(dim: int, values: Iterable[SSAValue]) -> bool:
    return not any(has_dim(v, dim) for v in values)


def streaming_trait(op: Operation) -> StreamingRule | None:
    """The op's streaming rule trait, if it has one."""
    return op.get_trait(StreamingRule)


def stream_rule(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """The rule of ``op`` along ``dim`` with these distinct runtime operands (``inputs``)."""
    trait = streaming_trait(op)
    if trait is None:
        raise StreamPlanError(
            f"stream-plan: {describe(op)} has no streaming rule (no "
            "nanoir.dialects.traits.StreamingRule trait: elementwise, data movement, sliding "
            "window, channel-wise, contraction or whole-extent)"
        )
    if any(not isinstance(v.type, TensorType) for v in (*op.operands, *op.results)):
        raise StreamPlanError(f"stream-plan: {describe(op)} works on non-tensor values")
    if _all_units(dim, [*inputs, *op.results]):
        return StreamRule((1,) * len(inputs), (1,) * len(inputs), (1,) * len(op.results))
    step = trait.row_step(op, dim, inputs)
    if step is None:
        return _whole_rule(op, dim, inputs)
    n = len(inputs)
    return StreamRule(
        (step.need,) * n,
        (step.drop,) * n,
        (step.emit,) * len(op.results),
        step.pad_begin,
        step.pad_end,
        step.ceil_mode,
        step.adjust,
    )
