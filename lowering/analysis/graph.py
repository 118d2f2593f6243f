"""The runtime part of a function, as the stream planner and executor see it along one dim.

:func:`build_graph` keeps the ops with at least one runtime operand (constants and ops of
constants are "init" work, computed once) in program order, each with its distinct runtime
operands (one cache each) and its :class:`~nanoir.lowering.analysis.rules.StreamRule` along
the dim; ops with no streaming rule are an error naming them.

The dim is followed through transposes (``rules``, "relabelling"): ``StreamGraph.axes`` says
along which axis each runtime value's rows run (the analysed dim for the inputs that have it,
``perm.index(d)`` after a transpose, ``None`` for a value that moves as whole units), and
each node's rule is along its inputs' axis (``StreamNode.axis``).
"""

from __future__ import annotations

from dataclasses import dataclass

from nanoir.dialects.functions import describe
from nanoir.dialects.traits import shape_operands
from nanoir.lowering.analysis.rules import Axes, StreamPlanError, StreamRule, has_dim, node_axes
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, SSAValue

__all__ = ["StreamGraph", "StreamNode", "build_graph", "cache_operands"]


@dataclass(frozen=True)
class StreamNode:
    op: Operation
    inputs: tuple[SSAValue, ...]
    """Distinct runtime operands, in operand order: one cache each."""
    rule: StreamRule
    in_axes: tuple[int | None, ...] = ()
    """The axis each input (cache) streams along (``None``: whole units)."""
    out_axes: tuple[int | None, ...] = ()
    """The axis each result streams along (``None``: whole units)."""


@dataclass(frozen=True)
class StreamGraph:
    """The runtime part of a function along one dim: its inputs, nodes in program order, and
    the runtime values it returns."""

    func: FuncOp
    dim: int
    inputs: tuple[BlockArgument, ...]
    nodes: tuple[StreamNode, ...]
    results: tuple[SSAValue, ...]
    axes: Axes
    """The axis each runtime value streams along (``None``: it moves as whole units)."""

    def streams(self, value: SSAValue) -> bool:
        """Whether ``value`` arrives row by row (else as whole units)."""
        return self.axes.get(value) is not None


def cache_operands(op: Operation, runtime: set[SSAValue]) -> tuple[SSAValue, ...]:
    """The distinct runtime operands of ``op`` that get a cache: all but those read for their
    shape alone (an expand's shape source: its rows are never read, so the node neither waits
    for them nor keeps them; the executor hands the kernel a stand-in of its shape)."""
    shaped = shape_operands(op)
    return tuple(dict.fromkeys(v for v in op.operands if v in runtime and v not in shaped))


def build_graph(func: FuncOp, dim: int) -> StreamGraph:
    """The nodes of ``func`` with their rules along ``dim``; ops without one are an error."""
    block = func.body.block
    runtime: set[SSAValue] = set(block.args)
    axes: Axes = {a: dim if has_dim(a, dim) else None for a in block.args}
    nodes: list[StreamNode] = []
    results: tuple[SSAValue, ...] = ()
    for op in block.ops:
        if isinstance(op, ReturnOp):
            results = tuple(v for v in op.arguments if v in runtime)
            continue
        inputs = cache_operands(op, runtime)
        if not inputs:
            shaped = [v for v in shape_operands(op) if v in runtime]
            if shaped:
                raise StreamPlanError(
                    f"stream-plan: {describe(op)} takes a size from the runtime value "
                    f"{shaped[0].type} but no runtime data: it cannot be streamed (a constant "
                    "expanded to a dynamic batch has no rows to stream; import with "
                    "dynamic_batch=False)"
                )
            continue  # init: computed once from constants
        rule, out_axes = node_axes(op, dim, inputs, axes)
        nodes.append(StreamNode(op, inputs, rule, tuple(axes[v] for v in inputs), out_axes))
        axes.update(zip(op.results, out_axes))
        runtime.update(op.results)
    return StreamGraph(func, dim, tuple(block.args), tuple(nodes), results, axes)
