"""stream-plan: how many rows each runtime tensor and each node input cache ("mem") must hold
when a program runs incrementally along its streamed dim M (DESIGN.md, "Streaming").

The analysis simulates the dataflow with row *counts*, once per analysed dim ``d`` with a step
length ``step`` (NanoEngine-PyTorch's ``dim_step_len_arr``; ``memory_dim_index`` is M). Along d:

- Every node (an op with at least one runtime operand; constants and ops of constants are
  "init" work and never streamed) keeps one cache per *distinct* runtime operand. Its
  :class:`StreamRule` says how it consumes them: the receptive field (``field``: a conv or
  pool with kernel ``k`` and dilation ``dil`` needs ``dil*(k-1)+1`` rows; elementwise ops,
  fake-quant, requant, lut, BN, joins need 1), the ``stride`` (rows each cache drops after
  firing), the padding along d and the rows each output gains per firing (``gains``).
- A step: each graph input receives ``step`` rows (``min(step, rows left)`` for a static
  length). Nodes are visited in program order; a node's caches grow by what its operands
  produced in this step; while every cache holds at least its field, the node fires: each
  cache drops its stride, each output gains its rows. Joins (add, concat, ... of two runtime
  values) fire only when every cache has a row, so they buffer the earlier branch.
- Padding is a causal warm-up: a node padded by ``(begin, end)`` along d starts with
  ``begin`` zero rows in each cache, and once all its operands have *ended* it receives the
  ``end`` zero rows at once and fires on them; a pool with ``ceil_mode`` then fires once more
  on the partial last window when PyTorch would. Then the node and its outputs have ended
  too, in the same step (program order). A cache's count includes these zero rows.
- A stream ends with a step that delivers nothing (the executor's ``finish()``): a graph
  input of static length ``L`` has *ended* at the first step with no row left to deliver. A
  tensor without dim d (e.g. after flattening) moves as one unit per sample, delivered whole.
- Per tensor, ``max`` is the most rows produced in one step and ``sum`` the rows produced in
  total; per cache, ``max`` is the largest count right after growing (before firing) and
  ``sum`` the rows that entered it (zero rows included).

"Done" (the step after which ``sum`` is read, as the reference does) is the first step after
which every runtime result of the function has produced at least one row. ``max`` goes
further, so that the plan bounds every cache of a real run: the simulation continues until
every node has ended (static length) or the whole state (every cache's count) repeats, which
makes the run periodic; for a dynamic M it also ends the stream after every step of that
transient-plus-period and after every partial last step (1..step rows), and takes the maxima
of those endings too. For programs without padding this changes none of the reference's
numbers (the sample's table is reproduced exactly); where the reference's maxima at "done" are
too small for later steps (e.g. step 2 into a 2-row conv), this plan's are not.

Along a dim other than M (e.g. the width) the program must finish in one step: the step
delivers the whole extent (capped at its static size) and ends it at once; if some result has
no row after that step the analysis fails and names the smallest step that would do.

Ops the planner does not know (``nf.custom``, ...) are an error naming them. Ops whose rows
do not map to input rows along d (flattening or reshaping d away, ``linear`` contracting d,
concat or split along d, a transpose moving d, broadcasting along d, an adaptive pool whose
windows are uneven) need *the whole extent* of their inputs along d at once: a window of that
many rows, fired once; it must be static, otherwise the op cannot be streamed along d (error).
So ``flatten`` + ``linear`` after a conv stack buffers the whole M extent in the flatten's
cache, and everything after it moves as one unit.

Exported shapes (DESIGN.md): a runtime tensor is ``[-1, C, max along M, sum along each other
analysed dim]`` (other dims as typed; dims a tensor lacks are left out), a cache the same with
the cache's numbers. The pass writes them as attributes, for the `.ne` exporter:

- on the function, ``stream.plan = {mem_dim = 2 : i64, steps = array<i64: 2, 1, 3, 5>}``
  (flat ``dim, step`` pairs);
- on each runtime argument (arg attrs), ``stream.shape = array<i64: -1, 3, 1, 5>``;
- on each runtime op, ``stream.out_s = [array<i64: ...>, ...]`` (one per result) and
  ``stream.mem_s = [array<i64: ...>, ...]`` (one per distinct runtime operand, in operand
  order, as the exporter's caches are), and ``stream.warmup = array<i64: begin, end>`` when
  the op pads along M (the zero rows fed at the start and at the end of a stream).

:func:`stream_shapes` reads them back into an object with the exporter's ``StreamPlan``
methods (``tensor_shape``, ``cache_shape``); :class:`BufferPlan` has them too.

    %c = nf.conv %q, %w, %b {pads = array<i64: 0, 0, 0, 0>}          (before)
    %c = nf.conv %q, %w, %b {pads = array<i64: 0, 0, 0, 0>,             (after stream-plan
         stream.out_s = [array<i64: -1, 16, 1, 3>],                       {steps="2:1,3:5"})
         stream.mem_s = [array<i64: -1, 3, 3, 5>]}

Abbreviations: M = the streamed ("memory") dim, rf = receptive field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from nanoir.dialects import nf, nh
from nanoir.dialects.nf import array_values, int_array
from nanoir.dialects.nq import FakeQuantOp
from nanoir.runtime.numerics.shapes import window_params
from xdsl.context import Context
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

__all__ = [
    "BufferPlan",
    "CacheBuffer",
    "Firing",
    "NodeCursor",
    "Rows",
    "RULES",
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

MAX_STEPS = 10_000
"""Steps of an unbounded stream simulated before the planner gives up: a stream whose
state never repeats has a cache that grows without bound (a static length bounds its own
run: ``length / step`` steps and the end)."""

PLAN_ATTR = "stream.plan"
SHAPE_ATTR = "stream.shape"
OUT_ATTR = "stream.out_s"
MEM_ATTR = "stream.mem_s"
WARMUP_ATTR = "stream.warmup"


class StreamPlanError(DiagnosticException, Error):
    """The program cannot be streamed as asked; the message names the op or dim and why."""


def describe(op: Operation) -> str:
    """``'nf.conv' (%c)``: an op and its first result's name, for diagnostics."""
    hint = op.results[0].name_hint if op.results and op.results[0].name_hint else None
    if isinstance(op, nf.CustomOp):
        return f"'{op.name}' (op_type {op.op_type.data})" + (f" (%{hint})" if hint else "")
    return f"'{op.name}'" + (f" (%{hint})" if hint else "")


# --------------------------------------------------------------------------------------------
# Per-op streaming rules
# --------------------------------------------------------------------------------------------

Adjust = Literal["none", "window", "pad", "output_size", "result_rows"]
"""How the executor adapts an op to a window of rows (``runtime/stream.py``): ``window`` sets
the conv/pool ``pads`` along d to the zero rows inside the window, ``pad`` does so for
``nf.pad``, ``output_size`` sets an adaptive pool's size along d to the
windows fired, ``result_rows`` sets the result type's extent along d to the rows produced."""


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
    """How the executor adapts the op to a window of rows."""
    whole: bool = False
    """The node needs the whole extent along d at once (fields = the extents)."""


def _shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()


def has_dim(value: SSAValue, dim: int) -> bool:
    """Whether ``value`` is streamed row by row along ``dim`` (else it moves as one unit)."""
    return len(_shape(value)) > dim


def _row_rule(op: Operation, inputs: Sequence[SSAValue], field: int = 1, stride: int = 1,
              gain: int = 1, *, pad_begin: int = 0, pad_end: int = 0, ceil_mode: bool = False,
              adjust: Adjust = "none") -> StreamRule:
    """The same window on every input (a join's inputs fire together)."""
    n = len(inputs)
    return StreamRule((field,) * n, (stride,) * n, (gain,) * len(op.results), pad_begin,
                      pad_end, ceil_mode, adjust)


def _whole_rule(op: Operation, dim: int, inputs: Sequence[SSAValue]) -> StreamRule:
    """Fire once on the whole extent of every input along ``dim``; each result gains its whole
    extent (or one unit when it lacks the dim)."""

    def extent(v: SSAValue, what: str) -> int:
        if not has_dim(v, dim):
            return 1
        size = _shape(v)[dim]
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


RuleFn = Callable[[Operation, int, tuple[SSAValue, ...]], StreamRule]


def _elementwise(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """Row in, row out, with NumPy broadcasting: an operand broadcast along ``dim`` (or a
    constant that varies along it) has no per-row meaning, so the node takes the whole extent."""
    if _all_units(dim, [*inputs, *op.results]):
        return _row_rule(op, inputs)
    out = _shape(op.results[0])
    rank = len(out)
    for v in op.operands:
        shape = _shape(v) if isinstance(v.type, TensorType) else ()
        axis = dim - (rank - len(shape))  # NumPy aligns trailing dims
        size = shape[axis] if axis >= 0 else 1
        if size != (out[dim] if v in inputs else 1):
            return _whole_rule(op, dim, inputs)
    if isinstance(op, FakeQuantOp):
        exp = op.exp.get_type()
        assert isinstance(exp, TensorType)
        e = exp.get_shape()
        axis = dim - (rank - len(e))
        if axis >= 0 and e[axis] != 1:  # exponents that vary from row to row
            return _whole_rule(op, dim, inputs)
    return _row_rule(op, inputs)


def _per_channel(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """BN and PReLU: row by row; their constant parameters run along the channels."""
    if inputs != (op.operands[0],):
        return _whole_rule(op, dim, inputs)
    return _row_rule(op, inputs)


def _window_geometry(op: Operation) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                             tuple[int, ...], bool]:
    """Kernel, strides, pads (begins then ends), dilations and ceil_mode of a conv or pool."""
    if isinstance(op, (nf.ConvOp, nh.ConvOp)):
        kernel = _shape(op.weight)[2:]
        dilations = array_values(op.dilations)
        ceil = False
    else:
        assert isinstance(op, (nf.MaxPoolOp, nf.AvgPoolOp, nh.MaxPoolOp, nh.AvgPoolOp))
        kernel = array_values(op.kernel) or ()
        dilations = array_values(op.dilations) if isinstance(op, (nf.MaxPoolOp, nh.MaxPoolOp)) \
            else None
        ceil = bool(op.ceil_mode.value.data)
    k, s, p, d = window_params(len(kernel), kernel, array_values(op.strides),
                               array_values(op.pads), dilations)
    return k, s, p, d, ceil


def _window(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """Conv and pools: ``field = dil*(k-1)+1``, ``stride``, pads along ``dim``."""
    data = op.operands[0]
    if inputs != (data,):  # a runtime weight or bias: no per-row meaning
        return _whole_rule(op, dim, inputs)
    if not has_dim(data, dim):
        return _row_rule(op, inputs)
    kernel, strides, pads, dilations, ceil = _window_geometry(op)
    i, n = dim - 2, len(kernel)
    return _row_rule(
        op, inputs, dilations[i] * (kernel[i] - 1) + 1, strides[i], pad_begin=pads[i],
        pad_end=pads[n + i], ceil_mode=ceil, adjust="window",
    )


def _adaptive_pool(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """Even windows (``L % out == 0``) are a pool of kernel = stride = ``L / out``."""
    assert isinstance(op, nf.AdaptiveAvgPoolOp)
    if not has_dim(op.input, dim):
        return _row_rule(op, inputs)
    size = _shape(op.input)[dim]
    out = (array_values(op.output_size) or ())[dim - 2]
    if size == DYNAMIC_INDEX or size % out:
        return _whole_rule(op, dim, inputs)
    k = size // out
    return _row_rule(op, inputs, k, k, adjust="output_size")


def _same_prefix(a: Sequence[int], b: Sequence[int], dim: int) -> bool:
    if len(a) <= dim or len(b) <= dim:
        return False
    return all(x == y or DYNAMIC_INDEX in (x, y) for x, y in zip(a[: dim + 1], b[: dim + 1]))


def _reshape(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """Row by row when the dims up to ``dim`` are kept; else (flatten) the whole extent."""
    x, y = _shape(op.operands[0]), _shape(op.results[0])
    if _all_units(dim, [*inputs, *op.results]):
        return _row_rule(op, inputs)
    if _same_prefix(x, y, dim):
        return _row_rule(op, inputs, adjust="result_rows")
    return _whole_rule(op, dim, inputs)


def _transpose(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    assert isinstance(op, nf.TransposeOp)
    perm = array_values(op.perm) or ()
    if _all_units(dim, [*inputs, *op.results]):
        return _row_rule(op, inputs)
    if perm[0] == 0 and len(perm) > dim and perm[dim] == dim:
        return _row_rule(op, inputs)
    return _whole_rule(op, dim, inputs)


def _along_axis(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """Concat and split: a join along any other axis; along ``dim`` itself, the whole extent."""
    assert isinstance(op, (nf.ConcatOp, nh.ConcatOp, nf.SplitOp))
    rank = len(_shape(op.results[0]))
    if _all_units(dim, [*inputs, *op.results]):
        return _row_rule(op, inputs)
    if op.axis.value.data % rank == dim or any(v not in inputs for v in op.operands):
        # (constants joined with streamed rows would have to be cut row by row)
        return _whole_rule(op, dim, inputs)
    return _row_rule(op, inputs)


def _contraction(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """linear / matmul: row by row along a leading dim of a runtime lhs with constant
    weights; contracting ``dim`` (or two runtime operands) needs the whole extent."""
    lhs = op.operands[0]
    if inputs != (lhs,):
        return _whole_rule(op, dim, inputs)
    if not has_dim(lhs, dim):
        return _row_rule(op, inputs)
    rhs = _shape(op.operands[1])
    if isinstance(op, (nf.MatmulOp, nh.MatmulOp)) and len(rhs) != 2:
        return _whole_rule(op, dim, inputs)
    if dim == len(_shape(lhs)) - 1:
        return _whole_rule(op, dim, inputs)
    return _row_rule(op, inputs)


def _pad(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """Constant padding along ``dim`` is warm-up rows; other modes and crops take it whole."""
    assert isinstance(op, nf.PadOp)
    if not has_dim(op.input, dim):
        return _row_rule(op, inputs)
    pads = array_values(op.pads) or ()
    rank = len(_shape(op.input))
    begin, end = pads[dim], pads[rank + dim]
    if begin == end == 0:
        return _row_rule(op, inputs, adjust="pad")
    if op.mode.data != nf.PadMode.CONSTANT or begin < 0 or end < 0:
        return _whole_rule(op, dim, inputs)
    return _row_rule(op, inputs, pad_begin=begin, pad_end=end, adjust="pad")


def _upsample(op: Operation, dim: int, inputs: tuple[SSAValue, ...]) -> StreamRule:
    """An integer scale ``r`` along ``dim``: each row becomes ``r`` rows."""
    x, y = _shape(op.operands[0]), _shape(op.results[0])
    if _all_units(dim, [*inputs, *op.results]):
        return _row_rule(op, inputs)
    if x[dim] == DYNAMIC_INDEX or y[dim] % x[dim]:
        return _whole_rule(op, dim, inputs)
    return _row_rule(op, inputs, gain=y[dim] // x[dim], adjust="result_rows")


RULES: dict[type[Operation], RuleFn] = {
    # field 1, stride 1: fake-quant, requant, lut, activations, (broadcasting) arithmetic
    **{t: _elementwise for t in (
        FakeQuantOp, nf.ReluOp, nf.SigmoidOp, nf.TanhOp, nf.HardSigmoidOp, nf.HardSwishOp,
        nf.ClampOp, nf.LeakyReluOp, nf.AddOp, nf.SubOp, nf.MulOp, nf.DivOp,
        nh.AddOp, nh.SubOp, nh.MulOp, nh.RequantOp, nh.LutOp, nh.ReluOp, nh.ClampOp,
    )},
    # field dil*(k-1)+1, stride s, pads (begin, end), ceil_mode: along the dim's spatial index
    **{t: _window for t in (
        nf.ConvOp, nh.ConvOp, nf.MaxPoolOp, nh.MaxPoolOp, nf.AvgPoolOp, nh.AvgPoolOp,
    )},
    nf.BatchNormOp: _per_channel,
    nf.PReluOp: _per_channel,
    nf.AdaptiveAvgPoolOp: _adaptive_pool,
    nf.ReshapeOp: _reshape,
    nh.ReshapeOp: _reshape,
    nf.TransposeOp: _transpose,
    nf.ConcatOp: _along_axis,
    nh.ConcatOp: _along_axis,
    nf.SplitOp: _along_axis,
    nf.LinearOp: _contraction,
    nh.LinearOp: _contraction,
    nf.MatmulOp: _contraction,
    nh.MatmulOp: _contraction,
    nf.PadOp: _pad,
    nf.UpsampleNearestOp: _upsample,
}
"""The streaming rule of each op the planner knows, along one dim."""


# --------------------------------------------------------------------------------------------
# The dataflow graph and the cursor of one node (shared with the streaming executor)
# --------------------------------------------------------------------------------------------


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
    """The nodes of ``func`` with their rules along ``dim``; unknown ops are an error."""
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
        rule_fn = RULES.get(type(op))
        if rule_fn is None:
            raise StreamPlanError(
                f"stream-plan: {describe(op)} has no streaming rule (the planner knows "
                + ", ".join(sorted({t.name for t in RULES})) + ")"
            )
        if any(not isinstance(v.type, TensorType) for v in (*op.operands, *op.results)):
            raise StreamPlanError(f"stream-plan: {describe(op)} works on non-tensor values")
        nodes.append(StreamNode(op, inputs, rule_fn(op, dim, inputs)))
        runtime.update(op.results)
    return StreamGraph(func, dim, tuple(block.args), tuple(nodes), results)


@dataclass(frozen=True)
class Firing:
    """A batch of consecutive windows fired at once: output positions ``first`` to
    ``first + count - 1``; ``final`` marks the partial last window of a ``ceil_mode`` pool."""

    first: int
    count: int
    final: bool = False


class NodeCursor:
    """Where one node is along one dim, counted in *padded* rows: ``pad_begin`` zero rows,
    then the real rows received, then the ``pad_end`` zero rows once fed. Window ``j`` of
    input ``i`` covers padded rows ``[j * stride, j * stride + field)``."""

    def __init__(self, rule: StreamRule):
        self.rule = rule
        n = len(rule.fields)
        self.received = [0] * n
        self.fed_end = 0
        self.fired = 0
        self.ended = False
        self.peak = [0] * n
        """Largest count of each cache right after it grew."""

    def copy(self) -> NodeCursor:
        twin = copy.copy(self)
        twin.received, twin.peak = list(self.received), list(self.peak)
        return twin

    def count(self, i: int) -> int:
        """Rows cache ``i`` holds (negative: rows still to skip before the next window)."""
        r = self.rule
        return r.pad_begin + self.received[i] + self.fed_end - self.fired * r.strides[i]

    def entered(self, i: int) -> int:
        """Rows that have entered cache ``i`` (zero rows of padding included)."""
        return self.rule.pad_begin + self.received[i] + self.fed_end

    def state(self) -> tuple[int, ...]:
        return (*(self.count(i) for i in range(len(self.received))), self.fed_end, self.ended)

    def _ready(self) -> int:
        """Windows every cache can fire now."""
        r = self.rule
        ready = None
        for i, (f, s) in enumerate(zip(r.fields, r.strides)):
            c = self.count(i)
            n = 0 if c < f else (c - f) // s + 1
            ready = n if ready is None else min(ready, n)
        return ready or 0

    def _record(self) -> None:
        for i in range(len(self.peak)):
            self.peak[i] = max(self.peak[i], self.count(i))

    def _fire(self, out: list[Firing]) -> None:
        n = self._ready()
        if n:
            out.append(Firing(self.fired, n))
            self.fired += n

    def advance(self, arrived: Sequence[int], inputs_ended: bool) -> list[Firing]:
        """One step: the caches grow by ``arrived`` rows and fire; once the inputs have ended,
        the end padding is fed and fired, and the node ends."""
        if self.ended:
            return []
        firings: list[Firing] = []
        for i, a in enumerate(arrived):
            self.received[i] += a
        self._record()
        self._fire(firings)
        if inputs_ended:
            if self.rule.pad_end:
                self.fed_end = self.rule.pad_end
                self._record()
                self._fire(firings)
            if self.rule.ceil_mode and self._partial_window():
                firings.append(Firing(self.fired, 1, final=True))
                self.fired += 1
            self.ended = True
        return firings

    def _partial_window(self) -> bool:
        """PyTorch's ceil_mode window past the end: it exists when more than ``field -
        stride`` rows are left and it starts before the end padding."""
        c = self.count(0)
        return c > self.rule.fields[0] - self.rule.strides[0] and c > self.rule.pad_end

    def window(self, i: int, firing: Firing) -> tuple[int, int, int, int]:
        """Real rows ``[start, stop)`` of input ``i`` under ``firing`` and the zero rows
        before (``zeros_begin``) and after (``zeros_end``) them: ``(start, stop, zb, ze)``."""
        r = self.rule
        lo = firing.first * r.strides[i] - r.pad_begin
        if firing.final:
            hi = self.received[i] + self.fed_end
        else:
            hi = (firing.first + firing.count - 1) * r.strides[i] + r.fields[i] - r.pad_begin
        received = self.received[i]
        return (max(lo, 0), min(hi, received), max(0, -lo),
                min(self.fed_end, max(0, hi - received)))

    def first_needed(self, i: int) -> int:
        """The first real row of input ``i`` any later window reads."""
        return self.fired * self.rule.strides[i] - self.rule.pad_begin


# --------------------------------------------------------------------------------------------
# The simulation
# --------------------------------------------------------------------------------------------


class _Simulation:
    """Row counts of a stream along one dim; see the module docstring for the rules."""

    def __init__(self, graph: StreamGraph, step: int, lengths: dict[SSAValue, int | None],
                 end_with_last_rows: bool):
        self.graph = graph
        self.step_len = step
        self.lengths = dict(lengths)
        self.end_with_last_rows = end_with_last_rows
        self.cursors = {n.op: NodeCursor(n.rule) for n in graph.nodes}
        self.delivered: dict[SSAValue, int] = {a: 0 for a in graph.inputs}
        self.ended: set[SSAValue] = set()
        self.totals: dict[SSAValue, int] = {}
        self.tensor_peak: dict[SSAValue, int] = {}
        self.steps = 0

    def copy(self) -> _Simulation:
        twin = copy.copy(self)
        twin.lengths = dict(self.lengths)
        twin.cursors = {op: c.copy() for op, c in self.cursors.items()}
        twin.delivered, twin.ended = dict(self.delivered), set(self.ended)
        twin.totals, twin.tensor_peak = dict(self.totals), dict(self.tensor_peak)
        return twin

    def _deliver(self, arg: SSAValue) -> int:
        if arg in self.ended:
            return 0
        if not has_dim(arg, self.graph.dim):
            self.ended.add(arg)  # a unit arrives whole
            return 1
        length = self.lengths[arg]
        left = self.step_len if length is None else length - self.delivered[arg]
        rows = min(self.step_len, left)
        self.delivered[arg] += rows
        if length is not None and (rows == 0 or self.end_with_last_rows and rows == left):
            self.ended.add(arg)
        return rows

    def run_step(self) -> None:
        produced: dict[SSAValue, int] = {}
        for arg in self.graph.inputs:
            produced[arg] = self._deliver(arg)
        for node in self.graph.nodes:
            cursor = self.cursors[node.op]
            if cursor.ended:
                continue
            arrived = [produced.get(v, 0) for v in node.inputs]
            fired = sum(f.count for f in cursor.advance(
                arrived, all(v in self.ended for v in node.inputs)))
            for result, gain in zip(node.op.results, node.rule.gains):
                produced[result] = fired * gain
            if cursor.ended:
                self.ended.update(node.op.results)
        for v, n in produced.items():
            self.totals[v] = self.totals.get(v, 0) + n
            self.tensor_peak[v] = max(self.tensor_peak.get(v, 0), n)
        self.steps += 1

    def done(self) -> bool:
        return all(self.totals.get(v, 0) > 0 for v in self.graph.results)

    def all_ended(self) -> bool:
        return all(c.ended for c in self.cursors.values()) and all(
            a in self.ended for a in self.graph.inputs)

    def state(self) -> tuple[object, ...]:
        return tuple(c.state() for c in self.cursors.values())


@dataclass(frozen=True)
class Rows:
    """Rows along one analysed dim: the most at once (``max``) and in total (``sum``)."""

    max: int
    sum: int


@dataclass
class _DimCounts:
    tensors: dict[SSAValue, Rows]
    caches: dict[tuple[Operation, SSAValue], Rows]
    done_step: int


def _merge_peaks(into: _Simulation, other: _Simulation) -> None:
    for v, n in other.tensor_peak.items():
        into.tensor_peak[v] = max(into.tensor_peak.get(v, 0), n)
    for op, c in other.cursors.items():
        mine = into.cursors[op]
        mine.peak = [max(a, b) for a, b in zip(mine.peak, c.peak)]


def _records(graph: StreamGraph, peaks: _Simulation, at_done: _Simulation) -> _DimCounts:
    dim = graph.dim
    tensors = {
        v: Rows(peaks.tensor_peak.get(v, 0), at_done.totals.get(v, 0))
        for v in (*graph.inputs, *(r for n in graph.nodes for r in n.op.results))
        if has_dim(v, dim)
    }
    caches = {
        (n.op, v): Rows(peaks.cursors[n.op].peak[i], at_done.cursors[n.op].entered(i))
        for n in graph.nodes for i, v in enumerate(n.inputs) if has_dim(v, dim)
    }
    return _DimCounts(tensors, caches, at_done.steps)


def _no_output(graph: StreamGraph, sim: _Simulation, why: str) -> StreamPlanError:
    silent = [v for v in graph.results if sim.totals.get(v, 0) == 0]
    names = ", ".join(_value_label(v) for v in silent)
    return StreamPlanError(
        f"stream-plan: along dim {graph.dim} with step {sim.step_len}, result(s) {names} "
        f"never produce a row: {why}"
    )


def _lengths(graph: StreamGraph) -> dict[SSAValue, int | None]:
    out: dict[SSAValue, int | None] = {}
    for a in graph.inputs:
        if has_dim(a, graph.dim):
            size = _shape(a)[graph.dim]
            out[a] = None if size == DYNAMIC_INDEX else size
        else:
            out[a] = 1
    return out


def _simulate_streamed(graph: StreamGraph, step: int) -> _DimCounts:
    """The M dim: run to the end of a static stream, or until the state repeats; for a
    dynamic length, also end the stream after every step seen and every partial last step."""
    lengths = _lengths(graph)
    sim = _Simulation(graph, step, lengths, end_with_last_rows=False)
    unbounded = [a for a, n in lengths.items() if n is None]
    snapshots: list[_Simulation] = []
    seen: set[tuple[object, ...]] = set()
    at_done: _Simulation | None = None
    while not sim.all_ended():
        if unbounded:
            snapshots.append(sim.copy())
        sim.run_step()
        if at_done is None and sim.done():
            at_done = sim.copy()
        if unbounded:
            state = sim.state()
            if state in seen:
                if at_done is None:
                    raise _no_output(graph, sim, "the stream reaches a steady state without it")
                break
            seen.add(state)
        if unbounded and sim.steps > MAX_STEPS:
            op = max(sim.cursors, key=lambda o: max(sim.cursors[o].state()[:-2], default=0))
            raise StreamPlanError(
                f"stream-plan: along dim {graph.dim}, the caches of {describe(op)} grow "
                f"without bound ({MAX_STEPS} steps simulated): its inputs arrive at different "
                "rates"
            )
    if at_done is None:
        raise _no_output(graph, sim, "the input is too short")
    for snap in snapshots:
        for last in range(1, step + 1):
            end = snap.copy()
            for a in unbounded:
                end.lengths[a] = end.delivered[a] + last
            while not end.all_ended() and end.steps < snap.steps + 3:
                end.run_step()
            _merge_peaks(sim, end)
    return _records(graph, sim, at_done)


def _simulate_one_step(graph: StreamGraph, step: int) -> _DimCounts:
    """A dim other than M: one step delivers (up to) the whole extent and ends it."""
    lengths = _lengths(graph)
    sim = _Simulation(graph, step, lengths, end_with_last_rows=True)
    sim.run_step()
    if sim.done():
        return _records(graph, sim, sim)
    static = [n for a, n in lengths.items() if n is not None and has_dim(a, graph.dim)]
    limit = max(static) if static else 4096
    for candidate in range(step + 1, limit + 1):
        trial = _Simulation(graph, candidate, lengths, end_with_last_rows=True)
        trial.run_step()
        if trial.done():
            raise StreamPlanError(
                f"stream-plan: along dim {graph.dim} (not the streamed dim) one step must "
                f"produce every result, but a step of {step} does not; the minimum step is "
                f"{candidate}"
            )
    raise _no_output(graph, sim, "not even the whole extent in one step is enough")


# --------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------


def _value_label(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else str(value.type)


@dataclass(frozen=True)
class TensorBuffer:
    """A runtime tensor's rows per analysed dim and its exported shape."""

    value: SSAValue
    name: str
    rows: dict[int, Rows]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class CacheBuffer:
    """A node's cache of one runtime operand: rows per analysed dim and its exported shape."""

    node: Operation
    node_name: str
    value: SSAValue
    tensor_name: str
    rows: dict[int, Rows]
    shape: tuple[int, ...]


def _export_shape(value: SSAValue, rows: dict[int, Rows], mem_dim: int) -> tuple[int, ...]:
    dims = list(_shape(value))
    for d, r in rows.items():
        dims[d] = r.max if d == mem_dim else r.sum
    if dims:
        dims[0] = -1
    return tuple(-1 if d == DYNAMIC_INDEX else d for d in dims)


@dataclass
class BufferPlan:
    """The stream plan of one function: see the module docstring for what the numbers mean.

    It has the `.ne` exporter's ``StreamPlan`` methods, so
    ``export_nanoengine(module, plan=stream_plan(module, ...))`` declares its shapes.
    """

    func: FuncOp
    mem_dim: int
    steps: tuple[tuple[int, int], ...]
    tensors: dict[SSAValue, TensorBuffer]
    caches: dict[tuple[Operation, SSAValue], CacheBuffer]
    warmup: dict[Operation, tuple[int, int]]
    """Zero rows fed along M at the start and at the end of a stream, per padded node."""
    first_row_step: dict[int, int]
    """Per analysed dim, the step after which every result had a row ("done")."""
    node_names: dict[Operation, str] = field(default_factory=dict)

    def tensor_shape(self, value: SSAValue) -> tuple[int, ...] | None:
        t = self.tensors.get(value)
        return None if t is None else t.shape

    def cache_shape(self, node: Operation, value: SSAValue,
                    tensor_shape: Sequence[int]) -> tuple[int, ...] | None:
        c = self.caches.get((node, value))
        return None if c is None else c.shape

    def report(self) -> str:
        """The buffer table, laid out like NanoEngine-PyTorch's analysis printout."""
        dims = [d for d, _ in self.steps]
        lines = [
            "========== stream plan: buffer sizes ==========",
            f"dim_step_len_arr = {list(self.steps)}",
            f"memory_dim_index = {self.mem_dim}",
            "",
            "--- 1. runtime tensors (Tensor Buffers) ---",
        ]
        header = ["Tensor Name"] + [h for d in dims for h in (f"Max-Len-D{d}", f"Sum-Len-D{d}")]
        rows = [[t.name] + _row_numbers(t.rows, dims) for t in self.tensors.values()]
        lines += _table(header, rows)
        lines += ["", "--- 2. node input caches (Node Input Caches) ---"]
        header = ["Node Name", "Tensor Name"] + [
            h for d in dims for h in (f"Max Len D{d}", f"Sum Len D{d}")]
        rows = [[c.node_name, c.tensor_name] + _row_numbers(c.rows, dims)
                for c in self.caches.values()]
        lines += _table(header, rows)
        if self.warmup:
            lines += ["", f"--- 3. zero rows along dim {self.mem_dim} (causal warm-up) ---"]
            rows = [[self.node_names[op], str(b), str(e)] for op, (b, e) in self.warmup.items()]
            lines += _table(["Node Name", "Begin", "End"], rows)
        lines += ["", "first row of every result after step " + ", ".join(
            f"{self.first_row_step[d]} (dim {d})" for d in dims), ""]
        return "\n".join(lines)


def _row_numbers(rows: dict[int, Rows], dims: Sequence[int]) -> list[str]:
    out: list[str] = []
    for d in dims:
        r = rows.get(d)
        out += ["-", "-"] if r is None else [str(r.max), str(r.sum)]
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Right-aligned columns, one space apart, as pandas' ``to_string(index=False)`` lays
    them out: a number column is one wider than its widest entry, for a sign."""
    widths = []
    for i, head in enumerate(header):
        cells = [r[i] for r in rows]
        numeric = bool(cells) and all(c.isdigit() or c == "-" for c in cells)
        widths.append(max([len(head), *(len(c) for c in cells)]) + numeric)
    return [" ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in [header, *rows]]


# --------------------------------------------------------------------------------------------
# Names (NanoEngine's when the program came from a .ne file)
# --------------------------------------------------------------------------------------------


def _attr_name(entries: Attribute | None, index: int) -> str | None:
    if not isinstance(entries, ArrayAttr) or index >= len(entries.data):
        return None
    entry = entries.data[index]
    if isinstance(entry, DictionaryAttr) and isinstance(entry.data.get("name"), StringAttr):
        return entry.data["name"].data  # type: ignore[union-attr]
    return None


class _Names:
    def __init__(self, func: FuncOp):
        self.tensor: dict[SSAValue, str] = {}
        self.node: dict[Operation, str] = {}
        unnamed = 0
        arg_attrs = func.arg_attrs.data if func.arg_attrs else ()
        for i, arg in enumerate(func.body.block.args):
            recorded = None
            if i < len(arg_attrs):
                recorded = _attr_name(ArrayAttr([arg_attrs[i].data.get("ne.tensor",
                                                                    DictionaryAttr({}))]), 0)
            self.tensor[arg] = recorded or arg.name_hint or ("input" if i == 0 else f"input_{i}")
        for op in func.body.block.ops:
            for i, r in enumerate(op.results):
                name = _attr_name(op.attributes.get("ne.out_s"), i) or r.name_hint
                if name is None:
                    name, unnamed = str(unnamed), unnamed + 1
                self.tensor[r] = name
            recorded = op.attributes.get("ne.node")
            if isinstance(recorded, StringAttr):
                self.node[op] = recorded.data
            elif op.results:
                self.node[op] = f"{op.name.split('.')[-1]}_{self.tensor[op.results[0]]}"
            else:
                self.node[op] = op.name


# --------------------------------------------------------------------------------------------
# The analysis
# --------------------------------------------------------------------------------------------


def parse_steps(steps: str | Sequence[tuple[int, int]] | None,
                mem_dim: int) -> tuple[tuple[int, int], ...]:
    """``"2:1,3:5"`` (or ``[(2, 1), (3, 5)]``) as checked ``(dim, step)`` pairs; the streamed
    dim comes first, with step 1 unless given."""
    if mem_dim < 2:
        raise StreamPlanError(f"stream-plan: mem_dim {mem_dim} must be a spatial dim (>= 2)")
    pairs: list[tuple[int, int]] = []
    if isinstance(steps, str):
        for item in filter(None, (s.strip() for s in steps.split(","))):
            parts = item.split(":")
            try:
                d, s = (int(p) for p in parts)
            except ValueError:
                raise StreamPlanError(
                    f"stream-plan: steps entry {item!r} is not 'dim:step' (e.g. steps=\"2:1,3:5\")"
                ) from None
            pairs.append((d, s))
    elif steps is not None:
        pairs = [(int(d), int(s)) for d, s in steps]
    if mem_dim not in [d for d, _ in pairs]:
        pairs.insert(0, (mem_dim, 1))
    pairs.sort(key=lambda p: (p[0] != mem_dim, p[0]))
    for d, s in pairs:
        if d < 2:
            raise StreamPlanError(f"stream-plan: dim {d} cannot be analysed (batch and channels "
                                  "are never split; use a spatial dim >= 2)")
        if s < 1:
            raise StreamPlanError(f"stream-plan: the step along dim {d} must be >= 1, got {s}")
    if len({d for d, _ in pairs}) != len(pairs):
        raise StreamPlanError(f"stream-plan: a dim is given twice in steps {pairs}")
    return tuple(pairs)


def _find_function(module: ModuleOp | FuncOp, function: str | None) -> FuncOp:
    from nanoir.runtime.interpreter import ExecutionError, find_function

    try:
        return find_function(module, function)
    except ExecutionError as e:
        raise StreamPlanError(f"stream-plan: {e}") from None


def plan_function(func: FuncOp, mem_dim: int = 2,
                  steps: str | Sequence[tuple[int, int]] | None = None) -> BufferPlan:
    """Analyse one function (see :func:`stream_plan`)."""
    pairs = parse_steps(steps, mem_dim)
    names = _Names(func)
    per_dim: dict[int, _DimCounts] = {}
    graphs: dict[int, StreamGraph] = {}
    for d, s in pairs:
        graphs[d] = build_graph(func, d)
        per_dim[d] = (_simulate_streamed if d == mem_dim else _simulate_one_step)(graphs[d], s)
    graph = graphs[mem_dim]
    tensors: dict[SSAValue, TensorBuffer] = {}
    for v in (*graph.inputs, *(r for n in graph.nodes for r in n.op.results)):
        rows = {d: c.tensors[v] for d, c in per_dim.items() if v in c.tensors}
        tensors[v] = TensorBuffer(v, names.tensor[v], rows, _export_shape(v, rows, mem_dim))
    caches: dict[tuple[Operation, SSAValue], CacheBuffer] = {}
    for n in graph.nodes:
        for v in n.inputs:
            rows = {d: c.caches[(n.op, v)] for d, c in per_dim.items() if (n.op, v) in c.caches}
            caches[(n.op, v)] = CacheBuffer(n.op, names.node[n.op], v, names.tensor[v], rows,
                                            _export_shape(v, rows, mem_dim))
    warmup = {n.op: (n.rule.pad_begin, n.rule.pad_end) for n in graph.nodes
              if n.rule.pad_begin or n.rule.pad_end}
    return BufferPlan(func, mem_dim, pairs, tensors, caches, warmup,
                      {d: c.done_step for d, c in per_dim.items()},
                      {n.op: names.node[n.op] for n in graph.nodes})


def stream_plan(module: ModuleOp | FuncOp, *, mem_dim: int = 2,
                steps: str | Sequence[tuple[int, int]] | None = None,
                function: str | None = None) -> BufferPlan:
    """The buffer plan of a program streamed along ``mem_dim``:
    ``nanoir.stream_plan(module, mem_dim=2, steps=[(2, 1), (3, 5)])``.

    ``steps`` are ``(dim, step)`` pairs (or ``"2:1,3:5"``); the streamed dim is analysed with
    step 1 unless given. Raises :class:`StreamPlanError` for programs that cannot stream.
    """
    return plan_function(_find_function(module, function), mem_dim, steps)


# --------------------------------------------------------------------------------------------
# Attributes for later stages
# --------------------------------------------------------------------------------------------


def _shape_attr(shape: Sequence[int]) -> DenseArrayBase:
    return int_array(shape)


def write_attributes(plan: BufferPlan) -> None:
    """Record the plan's shapes on the IR (formats in the module docstring)."""
    func = plan.func
    flat = [x for pair in plan.steps for x in pair]
    func.attributes[PLAN_ATTR] = DictionaryAttr({
        "mem_dim": IntegerAttr(plan.mem_dim, i64), "steps": int_array(flat)})
    block = func.body.block
    arg_attrs = list(func.arg_attrs.data) if func.arg_attrs else [
        DictionaryAttr({}) for _ in block.args]
    for i, arg in enumerate(block.args):
        t = plan.tensors.get(arg)
        if t is not None:
            arg_attrs[i] = DictionaryAttr({**arg_attrs[i].data, SHAPE_ATTR: _shape_attr(t.shape)})
    func.arg_attrs = ArrayAttr(arg_attrs)
    by_node: dict[Operation, list[DenseArrayBase]] = {}
    for (op, _), c in plan.caches.items():
        by_node.setdefault(op, []).append(_shape_attr(c.shape))
    for op, mems in by_node.items():
        op.attributes[OUT_ATTR] = ArrayAttr(
            [_shape_attr(plan.tensors[r].shape) for r in op.results])
        op.attributes[MEM_ATTR] = ArrayAttr(mems)
        if op in plan.warmup:
            op.attributes[WARMUP_ATTR] = int_array(plan.warmup[op])
        else:
            op.attributes.pop(WARMUP_ATTR, None)


@dataclass(frozen=True)
class StreamShapes:
    """Shapes recorded by the stream-plan pass, with the `.ne` exporter's ``StreamPlan``
    methods: ``export_nanoengine(module, plan=stream_shapes(module))``."""

    tensors: dict[SSAValue, tuple[int, ...]]
    caches: dict[tuple[Operation, SSAValue], tuple[int, ...]]

    def tensor_shape(self, value: SSAValue) -> tuple[int, ...] | None:
        return self.tensors.get(value)

    def cache_shape(self, node: Operation, value: SSAValue,
                    tensor_shape: Sequence[int]) -> tuple[int, ...] | None:
        return self.caches.get((node, value))


def _shape_of(attr: Attribute) -> tuple[int, ...]:
    assert isinstance(attr, DenseArrayBase)
    return tuple(int(v) for v in attr.get_values())


def stream_shapes(module: ModuleOp | FuncOp, function: str | None = None) -> StreamShapes | None:
    """The shapes the stream-plan pass wrote on the function, or None if it has not run."""
    func = _find_function(module, function)
    if PLAN_ATTR not in func.attributes:
        return None
    tensors: dict[SSAValue, tuple[int, ...]] = {}
    caches: dict[tuple[Operation, SSAValue], tuple[int, ...]] = {}
    block = func.body.block
    arg_attrs = func.arg_attrs.data if func.arg_attrs else ()
    for arg, attrs in zip(block.args, arg_attrs):
        if SHAPE_ATTR in attrs.data:
            tensors[arg] = _shape_of(attrs.data[SHAPE_ATTR])
    runtime: set[SSAValue] = set(block.args)
    for op in block.ops:
        outs, mems = op.attributes.get(OUT_ATTR), op.attributes.get(MEM_ATTR)
        inputs = list(dict.fromkeys(v for v in op.operands if v in runtime))
        if isinstance(outs, ArrayAttr) and isinstance(mems, ArrayAttr):
            tensors.update((r, _shape_of(a)) for r, a in zip(op.results, outs.data))
            caches.update(((op, v), _shape_of(a)) for v, a in zip(inputs, mems.data))
        if inputs:
            runtime.update(op.results)
    return StreamShapes(tensors, caches)


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
