"""Row counts of a stream along one dim (DESIGN.md, "Streaming"), per analysed dim ``d`` with a
step length ``step`` (NanoEngine-PyTorch's ``dim_step_len_arr``):

- A step: each graph input receives ``step`` rows (``min(step, rows left)`` for a static
  length). Nodes are visited in program order; a node's caches grow by what its operands
  produced in this step; while every cache holds at least its field, the node fires: each
  cache drops its stride, each result gains its rows per firing (its rule's ``gains``).
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
of those endings too.

Along a dim other than M the program must finish in one step: the step delivers the whole
extent (capped at its static size) and ends it at once; if some result has no row after that
step the analysis fails and names the smallest step that would do.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from nanoir.lowering.analysis.cursor import NodeCursor
from nanoir.lowering.analysis.graph import StreamGraph
from nanoir.lowering.analysis.rules import StreamPlanError, describe, shape_of
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

__all__ = [
    "MAX_STEPS",
    "DimCounts",
    "Rows",
    "simulate_one_step",
    "simulate_streamed",
    "value_label",
]

MAX_STEPS = 10_000
"""Steps of an unbounded stream simulated before the planner gives up: a stream whose
state never repeats has a cache that grows without bound (a static length bounds its own
run: ``length / step`` steps and the end)."""


def value_label(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else str(value.type)


class _Simulation:
    """Row counts of a stream along one dim; see the module docstring for the rules."""

    def __init__(
        self,
        graph: StreamGraph,
        step: int,
        lengths: dict[SSAValue, int | None],
        end_with_last_rows: bool,
    ):
        self.graph = graph
        self.step_len = step
        self.lengths = dict(lengths)
        self.end_with_last_rows = end_with_last_rows
        self.cursors = {n.op: NodeCursor(n.rule) for n in graph.nodes}
        self.delivered: dict[SSAValue, int] = {a: 0 for a in graph.inputs}
        self.ended: set[SSAValue] = set()
        self.totals: dict[SSAValue, int] = {}
        self.tensor_peak: dict[SSAValue, int] = {}
        self.first_row: dict[SSAValue, int] = {}
        """Per result, the input rows delivered (the most of any input) when it got a row."""
        self.steps = 0

    def copy(self) -> _Simulation:
        twin = copy.copy(self)
        twin.lengths = dict(self.lengths)
        twin.cursors = {op: c.copy() for op, c in self.cursors.items()}
        twin.delivered, twin.ended = dict(self.delivered), set(self.ended)
        twin.totals, twin.tensor_peak = dict(self.totals), dict(self.tensor_peak)
        twin.first_row = dict(self.first_row)
        return twin

    def _deliver(self, arg: SSAValue) -> int:
        if arg in self.ended:
            return 0
        if not self.graph.streams(arg):
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
            fired = sum(
                f.count for f in cursor.advance(arrived, all(v in self.ended for v in node.inputs))
            )
            for result, gain in zip(node.op.results, node.rule.gains):
                produced[result] = fired * gain
            if cursor.ended:
                self.ended.update(node.op.results)
        for v, n in produced.items():
            self.totals[v] = self.totals.get(v, 0) + n
            self.tensor_peak[v] = max(self.tensor_peak.get(v, 0), n)
        for v in self.graph.results:
            if v not in self.first_row and self.totals.get(v, 0) > 0:
                streamed = [self.delivered[a] for a in self.graph.inputs if self.graph.streams(a)]
                self.first_row[v] = max(streamed, default=0)
        self.steps += 1

    def done(self) -> bool:
        return all(self.totals.get(v, 0) > 0 for v in self.graph.results)

    def all_ended(self) -> bool:
        return all(c.ended for c in self.cursors.values()) and all(
            a in self.ended for a in self.graph.inputs
        )

    def state(self) -> tuple[object, ...]:
        return tuple(c.state() for c in self.cursors.values())


@dataclass(frozen=True)
class Rows:
    """Rows along one analysed dim: the most at once (``max``) and in total (``sum``)."""

    max: int
    sum: int


@dataclass
class DimCounts:
    tensors: dict[SSAValue, Rows]
    caches: dict[tuple[Operation, SSAValue], Rows]
    done_step: int
    first_row: dict[SSAValue, int]
    """Per program result, the input rows delivered when it first had a row (its warm-up
    latency, in rows of the step's multiple)."""


def _merge_peaks(into: _Simulation, other: _Simulation) -> None:
    for v, n in other.tensor_peak.items():
        into.tensor_peak[v] = max(into.tensor_peak.get(v, 0), n)
    for op, c in other.cursors.items():
        mine = into.cursors[op]
        mine.peak = [max(a, b) for a, b in zip(mine.peak, c.peak)]


def _records(graph: StreamGraph, peaks: _Simulation, at_done: _Simulation) -> DimCounts:
    tensors = {
        v: Rows(peaks.tensor_peak.get(v, 0), at_done.totals.get(v, 0))
        for v in (*graph.inputs, *(r for n in graph.nodes for r in n.op.results))
        if graph.streams(v)
    }
    caches = {
        (n.op, v): Rows(peaks.cursors[n.op].peak[i], at_done.cursors[n.op].entered(i))
        for n in graph.nodes
        for i, v in enumerate(n.inputs)
        if graph.streams(v)
    }
    return DimCounts(tensors, caches, at_done.steps, dict(at_done.first_row))


def _no_output(graph: StreamGraph, sim: _Simulation, why: str) -> StreamPlanError:
    silent = [v for v in graph.results if sim.totals.get(v, 0) == 0]
    names = ", ".join(value_label(v) for v in silent)
    return StreamPlanError(
        f"stream-plan: along dim {graph.dim} with step {sim.step_len}, result(s) {names} "
        f"never produce a row: {why}"
    )


def _too_short(graph: StreamGraph, sim: _Simulation) -> str:
    """Why a static stream gives a result no row: the first node (in program order) whose
    inputs ended while its window never filled is the op that cuts the streamed axis shorter
    than its window (a conv or pool longer than its input), named with its counts."""
    for node in graph.nodes:
        cursor = sim.cursors[node.op]
        if cursor.fired or not cursor.ended:
            continue
        for i, (v, field) in enumerate(zip(node.inputs, node.rule.fields)):
            if graph.streams(v) and cursor.entered(i) < field:
                r = node.rule
                pads = (
                    f", {r.pad_begin + r.pad_end} of them padding"
                    if r.pad_begin or r.pad_end
                    else ""
                )
                return (
                    f"the input is too short: {describe(node.op)} needs {field} rows of "
                    f"{value_label(v)} along dim {graph.axes[v]} for a window and gets "
                    f"{cursor.entered(i)}{pads}"
                )
    return "the input is too short"


def _lengths(graph: StreamGraph) -> dict[SSAValue, int | None]:
    out: dict[SSAValue, int | None] = {}
    for a in graph.inputs:
        axis = graph.axes[a]
        if axis is not None:
            size = shape_of(a)[axis]
            out[a] = None if size == DYNAMIC_INDEX else size
        else:
            out[a] = 1
    return out


def simulate_streamed(graph: StreamGraph, step: int) -> DimCounts:
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
        raise _no_output(graph, sim, _too_short(graph, sim))
    for snap in snapshots:
        for last in range(1, step + 1):
            end = snap.copy()
            for a in unbounded:
                end.lengths[a] = end.delivered[a] + last
            while not end.all_ended() and end.steps < snap.steps + 3:
                end.run_step()
            _merge_peaks(sim, end)
    return _records(graph, sim, at_done)


def simulate_one_step(graph: StreamGraph, step: int) -> DimCounts:
    """A dim other than M: one step delivers (up to) the whole extent and ends it."""
    lengths = _lengths(graph)
    sim = _Simulation(graph, step, lengths, end_with_last_rows=True)
    sim.run_step()
    if sim.done():
        return _records(graph, sim, sim)
    static = [n for a, n in lengths.items() if n is not None and graph.streams(a)]
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
