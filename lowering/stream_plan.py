"""stream-plan: how many rows each runtime tensor and each node input cache ("mem") must hold
when a program runs incrementally along its streamed dim M (DESIGN.md, "Streaming").

The analysis lives in the analysis layer, ``nanoir.lowering.analysis``, where the streaming
executor (``nanoir.runtime.stream``) shares it: each op's streaming rule comes from its trait
(``nanoir.dialects.traits``: rows it needs to fire, drops, and emits per firing; ``rules``),
the nodes of a function form a graph (``graph``), one cursor per node steps along M
(``cursor``), the dataflow is simulated with row *counts* per analysed dim with a step length
(NanoEngine-PyTorch's ``dim_step_len_arr``; ``simulate``), and the result is a
:class:`BufferPlan` with its report table (``plan``). This pass runs the analysis on every
function and writes the plan's shapes as attributes for the `.ne` exporter
(``attributes``: ``stream.plan`` on the function, ``stream.shape`` on runtime arguments,
``stream.out_s``/``stream.mem_s`` and, for ops padded along M, ``stream.warmup`` on nodes).

Exported shapes: a runtime tensor is ``[-1, C, max along M, sum along each other analysed
dim]``, a cache the same with the cache's numbers. For programs without padding the numbers
are the reference's (the NanoEngine sample's table is reproduced exactly); padding along M is
a causal warm-up, and ``max`` bounds every step of a real run, not only the first rows.

Before, a 3x3 conv on 5-wide rows:

    func.func @main(%x: tensor<?x3x?x5xf32>) -> tensor<?x4x?x3xf32> {
      %w = nf.constant "w" dense<5.000000e-01> : tensor<4x3x3x3xf32>
      %c = nf.conv %x, %w : (tensor<?x3x?x5xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x3xf32>
      func.return %c : tensor<?x4x?x3xf32>
    }

After ``-p 'stream-plan{steps="2:1,3:5"}'`` (one row per step along M = dim 2, the whole
width along dim 3; the conv's cache holds its 3 rows):

    func.func @main(%x: tensor<?x3x?x5xf32> {stream.shape = array<i64: -1, 3, 1, 5>})
        -> tensor<?x4x?x3xf32>
        attributes {stream.plan = {mem_dim = 2 : i64, steps = array<i64: 2, 1, 3, 5>}} {
      %w = nf.constant "w" dense<5.000000e-01> : tensor<4x3x3x3xf32>
      %c = nf.conv %x, %w {stream.out_s = [array<i64: -1, 4, 1, 3>],
                           stream.mem_s = [array<i64: -1, 3, 3, 5>]}
          : (tensor<?x3x?x5xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x3xf32>
      func.return %c : tensor<?x4x?x3xf32>
    }

Abbreviations: M = the streamed ("memory") dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from nanoir.lowering.analysis.attributes import (
    StreamShapes,
    stream_shapes,
    write_attributes,
)
from nanoir.lowering.analysis.cursor import Firing, NodeCursor
from nanoir.lowering.analysis.graph import StreamGraph, StreamNode, build_graph
from nanoir.lowering.analysis.plan import (
    BufferPlan,
    CacheBuffer,
    TensorBuffer,
    parse_steps,
    plan_function,
    stream_plan,
)
from nanoir.lowering.analysis.rules import StreamPlanError, StreamRule
from nanoir.lowering.analysis.simulate import Rows
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.passes import ModulePass

__all__ = [
    "BufferPlan",
    "CacheBuffer",
    "Firing",
    "NodeCursor",
    "Rows",
    "StreamGraph",
    "StreamNode",
    "StreamPlanError",
    "StreamPlanPass",
    "StreamRule",
    "StreamShapes",
    "TensorBuffer",
    "build_graph",
    "parse_steps",
    "stream_plan",
    "stream_shapes",
]


@dataclass(frozen=True)
class StreamPlanPass(ModulePass):
    """Plan the per-node caches of a program streamed along M and record their shapes."""

    name = "stream-plan"

    mem_dim: int = 2
    """The streamed ("memory") dim M, NanoEngine's ``memory_dim_index``."""

    steps: str = ""
    """Analysed dims and step lengths as ``dim:step`` pairs, e.g. ``"2:1,3:5"`` (NanoEngine's
    ``dim_step_len_arr``); the streamed dim is analysed with step 1 unless listed."""

    report: bool = False
    """Print the buffer table (like NanoEngine-PyTorch's analysis) to stdout."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        parse_steps(self.steps, self.mem_dim)
        for func in [f for f in op.body.block.ops if isinstance(f, FuncOp)]:
            if func.is_declaration:
                continue
            plan = plan_function(func, self.mem_dim, self.steps)
            write_attributes(plan)
            if self.report:
                print(plan.report())
