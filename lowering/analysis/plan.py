"""The buffer plan of a function streamed along M: how many rows each runtime tensor and each
node input cache ("mem") must hold (:func:`stream_plan`), and its report table, laid out like
NanoEngine-PyTorch's analysis printout (:meth:`BufferPlan.report`).

Exported shapes (DESIGN.md): a runtime tensor is ``[-1, C, max along M, sum along each other
analysed dim]`` (other dims as typed; dims a tensor lacks are left out), a cache the same with
the cache's numbers; past a transpose that moved an analysed dim, its numbers stand at the
dim's new index. Names are NanoEngine's when the program came from a ``.ne`` file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nanoir.dialects import nf
from nanoir.dialects.functions import FunctionNotFoundError, find_function
from nanoir.lowering.analysis.graph import StreamGraph, build_graph
from nanoir.lowering.analysis.rules import StreamPlanError, shape_of
from nanoir.lowering.analysis.simulate import (
    DimCounts,
    Rows,
    simulate_one_step,
    simulate_streamed,
)
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation, SSAValue

from nanoir.errors import ArgumentError, int_argument

__all__ = [
    "BufferPlan",
    "CacheBuffer",
    "TensorBuffer",
    "find_plan_function",
    "mem_dim_problem",
    "parse_steps",
    "plan_function",
    "stream_plan",
]


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


def _export_shape(
    value: SSAValue, rows: dict[int, Rows], mem_dim: int, graphs: dict[int, StreamGraph]
) -> tuple[int, ...]:
    """The value's shape with its rows along each analysed dim ``d`` at the axis ``d`` runs
    along in it (``d`` itself unless a transpose moved it) and the batch as -1."""
    dims = list(shape_of(value))
    if dims:
        dims[0] = -1
    for d, r in rows.items():
        axis = graphs[d].axes.get(value)
        if axis is not None:
            dims[axis] = r.max if d == mem_dim else r.sum
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
    states: dict[Operation, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    """Per stateful node (a recurrent op along time), the shapes of the state it carries from
    row to row (``h``, and ``c`` for an LSTM: its ``h_n``/``c_n`` shapes, a dynamic batch -1); it is
    that node's cache, of a fixed size."""
    warmup_rows: dict[SSAValue, int] = field(default_factory=dict)
    """Per program result, the input rows along M fed until it has its first row (with the plan's
    step along M; with step 1 this is the result's warm-up latency)."""

    def tensor_shape(self, value: SSAValue) -> tuple[int, ...] | None:
        t = self.tensors.get(value)
        return None if t is None else t.shape

    def cache_shape(
        self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]
    ) -> tuple[int, ...] | None:
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
            h for d in dims for h in (f"Max Len D{d}", f"Sum Len D{d}")
        ]
        rows = [
            [c.node_name, c.tensor_name] + _row_numbers(c.rows, dims) for c in self.caches.values()
        ]
        lines += _table(header, rows)
        if self.states:
            lines += ["", "--- 2b. recurrent state carried from row to row ---"]
            rows = [
                [self.node_names[op], " ".join("x".join(map(str, s)) for s in shapes)]
                for op, shapes in self.states.items()
            ]
            lines += _table(["Node Name", "State"], rows)
        if self.warmup:
            lines += ["", f"--- 3. zero rows along dim {self.mem_dim} (causal warm-up) ---"]
            rows = [[self.node_names[op], str(b), str(e)] for op, (b, e) in self.warmup.items()]
            lines += _table(["Node Name", "Begin", "End"], rows)
        if self.warmup_rows:
            step = dict(self.steps)[self.mem_dim]
            lines += [
                "",
                f"--- 4. warm-up latency (input rows along dim {self.mem_dim}, step {step}) ---",
            ]
            rows = [
                [self.tensors[v].name, str(n)]
                for v, n in self.warmup_rows.items()
                if v in self.tensors
            ]
            lines += _table(["Result", "Input rows fed until its first row"], rows)
        lines += [
            "",
            "first row of every result after step "
            + ", ".join(f"{self.first_row_step[d]} (dim {d})" for d in dims),
            "",
        ]
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
                recorded = _attr_name(
                    ArrayAttr([arg_attrs[i].data.get("ne.tensor", DictionaryAttr({}))]), 0
                )
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


def mem_dim_problem(func: FuncOp, mem_dim: int) -> str | None:
    """Why ``mem_dim`` cannot stream ``func`` (``None``: it can): it must be a spatial dim,
    ``lowest_streamed_dim..rank-1`` of the inputs it streams (dim 0 is the batch, dim 1 the
    channels, which the stream plan never splits), and some input must have it. The plan and
    the streaming executor (``nanoir.runtime.stream.check_mem_dim``) refuse alike."""
    ranks = [
        len(t.get_shape()) for t in func.function_type.inputs.data if isinstance(t, TensorType)
    ]
    if nf.lowest_streamed_dim(func.body.block.args) <= mem_dim < max(ranks, default=0):
        return None
    return (
        f"mem_dim must be a spatial dim of the inputs of @{func.sym_name.data} it streams, "
        f"in 2..rank-1 (dim 0 is the batch, dim 1 the channels; input ranks: "
        f"{', '.join(map(str, ranks)) or 'none'}), got {mem_dim}"
    )


def parse_steps(
    steps: str | Sequence[tuple[int, int]] | None, mem_dim: int, lowest: int = 2
) -> tuple[tuple[int, int], ...]:
    """``"2:1,3:5"`` (or ``[(2, 1), (3, 5)]``) as checked ``(dim, step)`` pairs; the streamed
    dim comes first, with step 1 unless given."""
    mem_dim = int_argument("mem_dim", mem_dim, -(2**63))
    if steps is not None and not isinstance(steps, (str, Sequence)):
        raise ArgumentError(
            f'steps must be "dim:step,..." or (dim, step) pairs, got {type(steps).__name__}'
        )
    if mem_dim < lowest:  # (1 for token ids: nf.lowest_streamed_dim)
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
        if d < lowest:
            raise StreamPlanError(
                f"stream-plan: dim {d} cannot be analysed (batch and channels "
                "are never split; use a spatial dim >= 2)"
            )
        if s < 1:
            raise StreamPlanError(f"stream-plan: the step along dim {d} must be >= 1, got {s}")
    if len({d for d, _ in pairs}) != len(pairs):
        raise StreamPlanError(f"stream-plan: a dim is given twice in steps {pairs}")
    return tuple(pairs)


def find_plan_function(module: ModuleOp | FuncOp, function: str | None) -> FuncOp:
    """The function to plan (as the interpreter picks it), or a :class:`StreamPlanError`."""
    try:
        return find_function(module, function)
    except FunctionNotFoundError as e:
        raise StreamPlanError(f"stream-plan: {e}") from None


def plan_function(
    func: FuncOp, mem_dim: int = 2, steps: str | Sequence[tuple[int, int]] | None = None
) -> BufferPlan:
    """Analyse one function (see :func:`stream_plan`)."""
    pairs = parse_steps(steps, mem_dim, nf.lowest_streamed_dim(func.body.block.args))
    problem = mem_dim_problem(func, int(mem_dim))
    if problem is not None:
        raise StreamPlanError(f"stream-plan: {problem}")
    names = _Names(func)
    per_dim: dict[int, DimCounts] = {}
    graphs: dict[int, StreamGraph] = {}
    for d, s in pairs:
        graphs[d] = build_graph(func, d)
        per_dim[d] = (simulate_streamed if d == mem_dim else simulate_one_step)(graphs[d], s)
    graph = graphs[mem_dim]
    tensors: dict[SSAValue, TensorBuffer] = {}
    for v in (*graph.inputs, *(r for n in graph.nodes for r in n.op.results)):
        rows = {d: c.tensors[v] for d, c in per_dim.items() if v in c.tensors}
        tensors[v] = TensorBuffer(v, names.tensor[v], rows, _export_shape(v, rows, mem_dim, graphs))
    caches: dict[tuple[Operation, SSAValue], CacheBuffer] = {}
    for n in graph.nodes:
        for v in n.inputs:
            rows = {d: c.caches[(n.op, v)] for d, c in per_dim.items() if (n.op, v) in c.caches}
            caches[(n.op, v)] = CacheBuffer(
                n.op,
                names.node[n.op],
                v,
                names.tensor[v],
                rows,
                _export_shape(v, rows, mem_dim, graphs),
            )
    warmup = {
        n.op: (n.rule.pad_begin, n.rule.pad_end)
        for n in graph.nodes
        if n.rule.pad_begin or n.rule.pad_end
    }
    states = {
        n.op: tuple(
            tuple(-1 if d == DYNAMIC_INDEX else d for d in shape_of(r)) for r in n.op.results[1:]
        )
        for n in graph.nodes
        if n.rule.stateful
    }
    return BufferPlan(
        func,
        mem_dim,
        pairs,
        tensors,
        caches,
        warmup,
        {d: c.done_step for d, c in per_dim.items()},
        {n.op: names.node[n.op] for n in graph.nodes},
        states,
        per_dim[mem_dim].first_row,
    )


def stream_plan(
    module: ModuleOp | FuncOp,
    *,
    mem_dim: int = 2,
    steps: str | Sequence[tuple[int, int]] | None = None,
    function: str | None = None,
) -> BufferPlan:
    """The buffer plan of a program streamed along ``mem_dim``:
    ``nanoir.stream_plan(module, mem_dim=2, steps=[(2, 1), (3, 5)])``.

    ``steps`` are ``(dim, step)`` pairs (or ``"2:1,3:5"``); the streamed dim is analysed with
    step 1 unless given. Raises :class:`StreamPlanError` for programs that cannot stream.
    """
    return plan_function(find_plan_function(module, function), mem_dim, steps)
