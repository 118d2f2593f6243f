"""The runtime part of a function, as the stream planner and executor see it along one dim.

:func:`build_graph` keeps the ops with at least one runtime operand (constants and ops of
constants are "init" work, computed once) in program order, each with its distinct runtime
operands (one cache each) and its :class:`~nanoir.lowering.analysis.rules.StreamRule` along
the dim; ops with no streaming rule are an error naming them.
"""

from __future__ import annotations

from dataclasses import dataclass

from nanoir.lowering.analysis.rules import StreamRule, stream_rule
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, SSAValue

__all__ = ["StreamGraph", "StreamNode", "build_graph"]


@dataclass(frozen=True)
class StreamNode:
    op: Operation
    inputs: tuple[SSAValue, ...]
    """Distinct runtime operands, in operand order: one cache each."""
    rule: StreamRule


@dataclass(frozen=True)
class StreamGraph:
    """The runtime part of a function along one dim: its inputs, nodes in program order, and
    the runtime values it returns."""

    func: FuncOp
    dim: int
    inputs: tuple[BlockArgument, ...]
    nodes: tuple[StreamNode, ...]
    results: tuple[SSAValue, ...]


def build_graph(func: FuncOp, dim: int) -> StreamGraph:
    """The nodes of ``func`` with their rules along ``dim``; ops without one are an error."""
    block = func.body.block
    runtime: set[SSAValue] = set(block.args)
    nodes: list[StreamNode] = []
    results: tuple[SSAValue, ...] = ()
    for op in block.ops:
        if isinstance(op, ReturnOp):
            results = tuple(v for v in op.arguments if v in runtime)
            continue
        inputs = tuple(dict.fromkeys(v for v in op.operands if v in runtime))
        if not inputs:
            continue  # init: computed once from constants
        nodes.append(StreamNode(op, inputs, stream_rule(op, dim, inputs)))
        runtime.update(op.results)
    return StreamGraph(func, dim, tuple(block.args), tuple(nodes), results)
