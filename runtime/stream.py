"""The streaming executor: run a program step by step along its streamed dim M.

``StreamRunner(module).push(rows)`` feeds the next rows of each input (any number, along M)
and returns the output rows that became computable; ``finish()`` ends the stream (feeding the
end padding) and returns the rest. ``stream(module, inputs, step=1)`` does both for whole
inputs. The concatenated rows equal the whole-tensor run (``nanoir.runtime.interpreter.run``)
bit for bit at the quantized (nq) and integer (nh) levels; at the float (nf) level up to float
rounding (a float32 product's terms may be summed in another order when BLAS is handed another
number of rows: 1 ulp seen). As ``run`` does, an nh
program takes float inputs (quantized as its argument attributes say) or integer codes, and
returns exact real values, or the raw codes with ``raw=True``.

How it works:

- The schedule is the stream plan's along M, computed by the very same
  :class:`~nanoir.lowering.analysis.cursor.NodeCursor` for every node: nodes in program order,
  caches grow by what their operands produced in the step, windows fire while every cache
  holds a receptive field, and the end of the stream (``finish()``) is a step of its own.
- A cache keeps only the *real* rows later windows read, as the arrays its producer made (no
  copy until a window spans two of them). Its largest size is recorded in
  :attr:`StreamRunner.cache_peaks`, keyed like ``BufferPlan.caches``, so that tests hold it
  against the plan (whose counts also include the zero rows of padding).
- Rows are followed through transposes: a transpose that moves M passes its rows on (one
  row in, one row out) and its result's rows run along ``perm.index(M)``; every value has
  its axis (``StreamRunner.axes``, from the plan's graph), and caches, windows and outputs
  cut and join rows along it. So a conv front end streamed along its last dim can feed the
  ``[N, T, F]`` a recurrent op takes, and an output may stream along another dim than M
  (``Streamer.output_axes`` says which).
- A recurrent op streams along its time axis one row per step, its state (``h``, ``c``)
  carried between firings like a cache (``_NodeRun.state``, reset with the stream) and the
  op resumed from it (``nanoir.runtime.stream_state``).
- Padding along M is never materialized. All the windows a node can fire in a step are one
  call of the op's own whole-tensor kernel (from the builder tables the interpreter uses,
  ``default_builders()``) on exactly the real rows they cover, with the op's M padding set to
  the zero rows that fall inside them. So the kernels pad as the whole tensor does: zeros for
  convs (code 0 at the nh level), -inf or the dtype's minimum for max pools (padding never
  wins), and avg pools count or skip padding in their divisors as they are told.
  ``ceil_mode`` is left as it is: whole windows span exactly ``(count - 1) * stride + field``
  rows, where it adds nothing, and the partial last window is cut where the stream ends.
- Window kernels are built once per distinct padding (a handful per op); ops whose rows map
  one to one use the compiled whole-tensor kernels, and a one-row node gets the rows that
  arrived as they are. Constants are folded once (the interpreter's ``init`` phase).
- Fast paths (``nanoir.runtime.stream_fast``; ``FAST_PATHS = False`` before building a runner
  turns them off, and the tests hold both ways equal bit for bit): 1-d convs (``nh.conv`` and
  ``nf.conv``, streamed along their length, weights constant) keep their input in a sliding
  ``[N, rows, C]`` buffer and compute a window's rows from a column view with a weight
  matrix made once; the elementwise nodes after such a conv, each the only user of the one
  before (requant, relu, clamp, fake_quant), run inside its step (an nh conv -> requant
  [-> relu] as one exact float kernel; a step that brings one array of rows mid-stream
  takes ``_NodeRun.step_one``, and a single window of held rows the chain's one-window
  kernel, ``at_one``); ``nh.requant`` and ``nq.fake_quant`` have kernels
  with their dispatch done once; pointwise steps move the cursor without the generic
  ``advance``, and so do the steps of a one-input windowed node that fire nothing;
  ``nh.avg_pool`` windows that tile the rows are summed in one call. Everything else takes
  the general path above.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.functions import find_function, level_of
from nanoir.dialects.nf import array_values, int_array, strided_indices
from nanoir.dialects.nh import FixedAttr
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import TransposedWindow
from nanoir.lowering.analysis.cursor import Firing, NodeCursor
from nanoir.lowering.analysis.graph import StreamNode, build_graph
from nanoir.lowering.analysis.plan import mem_dim_problem
from nanoir.runtime.interpreter import (
    ExecutionError,
    Kernel,
    check_input,
    compile_module,
    default_builders,
)
from nanoir.runtime.nh import dequantize, quantize_inputs
from nanoir.runtime.numerics import quant
from nanoir.runtime.stream_fast import (
    RowBuffer,
    fast_avg_pool,
    fast_conv,
    fast_fake_quant,
    fast_float_conv,
    fast_requant,
    fused_requant,
    padded_rows,
)
from nanoir.runtime.stream_state import state_kernel
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation, SSAValue

from nanoir.errors import ArgumentError, int_argument

__all__ = ["StreamRunner", "check_mem_dim", "stream"]

_FUSABLE = (nh.RequantOp, nh.ReluOp, nh.ClampOp, FakeQuantOp, nf.ReluOp, nf.ClampOp)
"""Elementwise ops: each output element depends on its input element only, so running them
per firing equals running them on the step's rows at once."""

Chunks = list[np.ndarray]

FAST_PATHS = True
"""Whether runners built from now on take the fast paths of ``nanoir.runtime.stream_fast``
(the tests compare both ways bit for bit)."""


def _tensor_shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()


def _is_nh(value: SSAValue) -> bool:
    t = value.type
    return isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr)


def _with_dim(t: Attribute, dim: int, size: int) -> TensorType:
    assert isinstance(t, TensorType)
    shape = list(t.get_shape())
    shape[dim] = size
    return TensorType(t.get_element_type(), shape, t.encoding)


class _Cache:
    """The real rows of one node input still needed, as a queue of arrays along ``axis``
    (``None``: a tensor without the streamed dim, which moves as whole units)."""

    def __init__(self, axis: int | None):
        self.axis = axis
        self.chunks: deque[np.ndarray] = deque()
        self.base = 0
        """Index of the first row of ``chunks[0]`` (or of the next row wanted, when empty)."""
        self.end = 0
        """Rows received so far."""
        self.empty: np.ndarray | None = None
        """No rows, shaped like the others: what a window of padding only reads."""
        self.empty_is_real = False

    def rows_of(self, a: np.ndarray) -> int:
        return 1 if self.axis is None else a.shape[self.axis]

    def held(self) -> int:
        return max(0, self.end - self.base)

    def _cut(self, a: np.ndarray, start: int, stop: int) -> np.ndarray:
        index: list[slice] = [slice(None)] * a.ndim
        index[self.axis] = slice(start, stop)  # type: ignore[index]
        return a[tuple(index)]

    def append(self, a: np.ndarray) -> None:
        n = self.rows_of(a)
        if not self.empty_is_real and self.axis is not None:
            self.empty, self.empty_is_real = self._cut(a, 0, 0), True
        if self.end < self.base:  # rows a strided window skips
            skip = min(self.base - self.end, n)
            self.end += skip
            if skip == n:
                return
            a, n = self._cut(a, skip, n), n - skip
        if not self.chunks:
            self.base = self.end
        self.chunks.append(a)
        self.end += n

    def take(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``: a view when they lie in one array."""
        if self.axis is None:
            assert stop == start + 1, "a unit tensor is read one unit at a time"
            return self.chunks[start - self.base]
        if start <= self.base and self.end <= stop and len(self.chunks) > 1:
            return np.concatenate(self.chunks, axis=self.axis)  # (they hold [base, end))
        parts: Chunks = []
        offset = self.base
        for a in self.chunks:
            n = a.shape[self.axis]
            lo, hi = max(start - offset, 0), min(stop - offset, n)
            if lo < hi:
                parts.append(a if (lo, hi) == (0, n) else self._cut(a, lo, hi))
            offset += n
            if offset >= stop:
                break
        if len(parts) == 1:
            return parts[0]
        if not parts:
            if self.empty is None:
                raise ExecutionError(
                    "a window of padding only, before any row arrived, of a "
                    "tensor with a dynamic dim: cannot shape it"
                )
            return self.empty
        return np.concatenate(parts, axis=self.axis)

    def drop_before(self, row: int) -> None:
        """Forget every row before ``row`` (rows still to come before it are skipped)."""
        if row >= self.end:  # all of them (the loop below, at once)
            self.chunks.clear()
            self.base = row
            return
        while self.chunks and self.base + self.rows_of(self.chunks[0]) <= row:
            self.base += self.rows_of(self.chunks.popleft())
        if self.chunks and self.base < row:
            first = self.chunks[0]
            self.chunks[0] = self._cut(first, row - self.base, self.rows_of(first))
            self.base = row
        if not self.chunks:
            self.base = max(row, self.end)


def _shape_stand_in(shape: tuple[int, ...], batch: int) -> np.ndarray:
    """What a kernel gets for an operand it reads for its shape alone (an expand's shape
    source, which has no cache): zeros of that shape, without memory, its dynamic dims the
    stream's batch (dynamic dims are the batch)."""
    sizes = [batch if d == DYNAMIC_INDEX else d for d in shape]
    return np.broadcast_to(np.zeros((), np.int8), sizes)


class _NodeRun:
    """One node of the stream: its cursor, caches and window kernels; values are slots."""

    def __init__(
        self,
        node: StreamNode,
        dim: int,
        dtype: np.dtype[Any],
        slot: dict[SSAValue, int],
        constants: dict[SSAValue, Any],
        whole_kernel: Kernel,
    ):
        self.node, self.dim, self.dtype = node, dim, dtype
        self.inputs = [slot[v] for v in node.inputs]
        self.outputs = [slot[r] for r in node.op.results]
        local = {v: i for i, v in enumerate(node.inputs)}
        self.args: list[tuple[int, Any]] = [
            (local[v], None)
            if v in local
            else (-1, constants[v])
            if v in constants
            else (-2, _tensor_shape(v))  # a shape-only operand (cache_operands): its shape
            for v in node.op.operands
        ]
        self.batch = 0
        """The stream's batch (set by the runner at the first push)."""
        self.out_axes = node.out_axes
        self.streamed_results = [a is not None for a in node.out_axes]
        fast_whole = fast_requant(node.op) or fast_fake_quant(node.op, dtype)
        self.fast_paths = FAST_PATHS
        self.whole_kernel = (FAST_PATHS and fast_whole) or whole_kernel
        self.kernels: dict[tuple[int, int, int], Kernel] = {}
        rule = node.rule
        self.pads_first = rule.pad_begin >= min(rule.fields)
        """Windows of zero rows only can fire before any row arrives."""
        self.pointwise = (
            len(node.inputs) == 1
            and rule.fields == (1,)
            and rule.strides == (1,)
            and not rule.pad_begin
            and not rule.pad_end
            and not rule.whole
            and all(g == 1 for g in rule.gains)
            and rule.adjust in ("none", "result_rows")
        )
        self.fast = (
            (fast_conv(node.op, dim, constants) or fast_float_conv(node.op, dim, constants, dtype))
            if FAST_PATHS and rule.adjust == "window" and list(node.inputs) == [node.op.operands[0]]
            else None
        )
        """An nh conv's fast kernel and the dtype of its :class:`RowBuffer` cache."""
        if self.fast is not None and rule.ceil_mode:
            self.fast = None  # (the inlined cursor of _step_fast has no partial window)
        self.quick = (
            (rule.fields[0], rule.strides[0], rule.pad_begin)
            if FAST_PATHS
            and self.fast is None
            and not self.pointwise
            and len(node.inputs) == 1
            and not rule.ceil_mode
            and node.in_axes[0] is not None
            else None
        )
        """A one-input windowed node's geometry: steps that fire nothing take a short path."""
        self.geometry = (
            (rule.fields[0], rule.strides[0], rule.pad_begin) if self.fast is not None else None
        )
        self.fused: list[_NodeRun] = []
        """Elementwise nodes run right after this fast node's firings (a chain, each the only
        user of the one before): the runner does not step them on their own."""
        self.absorbed = False
        self.resume = state_kernel(node.op, dtype, constants) if node.rule.stateful else None
        """A stateful node's kernel (``nanoir.runtime.stream_state``): it resumes from
        ``self.state``, the node's cache of what it carries from row to row."""
        self.reset()

    def reset(self) -> None:
        self.cursor = NodeCursor(self.node.rule)
        self.chain_peak = 0
        """Most rows this fast node made in one step (its fused nodes' cache peaks)."""
        self.state: Any = None
        old = getattr(self, "caches", None)
        # a new stream fills the last one's buffer (no new pages to fault in)
        spare = old[0].buf if old and isinstance(old[0], RowBuffer) else None
        self.caches: list[Any] = (
            [RowBuffer(self.fast[1], spare)]
            if self.fast is not None
            else [_Cache(axis) for axis in self.node.in_axes]
        )
        self.peaks = [0] * len(self.node.inputs)

    # -- kernels ------------------------------------------------------------------------------
    def kernel(self, zeros_begin: int, zeros_end: int, windows: int) -> Kernel:
        """The op's kernel for ``windows`` windows with these zero rows along the dim."""
        rule = self.node.rule
        if rule.adjust == "none":
            return self.whole_kernel
        if rule.stateful:
            return self._resumed
        key = (
            zeros_begin,
            zeros_end,
            windows
            if rule.adjust in ("output_size", "result_rows", "transposed", "indices")
            else 0,
        )
        kernel = self.kernels.get(key)
        if kernel is None:
            kernel = self.kernels[key] = self._build(*key)
        return kernel

    def _resumed(self, x: np.ndarray, *constants: Any) -> tuple[Any, ...]:
        """The stateful op on the window's rows from the carried state, which it updates;
        its other results (the final state) are not produced while streaming."""
        y, self.state = self.resume(x, self.state)  # type: ignore[misc]
        return (y,) + (None,) * (len(self.outputs) - 1)

    def _build(self, zeros_begin: int, zeros_end: int, windows: int) -> Kernel:
        """Build the kernel of a stand-in op whose attributes fit the window."""
        op, dim, rule = self.node.op, self.dim, self.node.rule
        props = dict(op.properties)
        types = [r.type for r in op.results]
        if rule.adjust == "window":
            spatial = len(_tensor_shape(op.operands[0])) - 2
            pads = list(array_values(props.get("pads")) or (0,) * (2 * spatial))  # type: ignore[arg-type]
            pads[dim - 2], pads[spatial + dim - 2] = zeros_begin, zeros_end
            props["pads"] = int_array(pads)
        elif rule.adjust == "pad":
            rank = len(_tensor_shape(op.operands[0]))
            pads = list(array_values(props["pads"]) or ())  # type: ignore[arg-type]
            pads[dim], pads[rank + dim] = zeros_begin, zeros_end
            props["pads"] = int_array(pads)
        elif rule.adjust == "output_size":
            size = list(array_values(props["output_size"]) or ())  # type: ignore[arg-type]
            size[dim - 2] = windows
            props["output_size"] = int_array(size)
        elif rule.adjust == "result_rows":
            types = [_with_dim(t, dim, windows * g) for t, g in zip(types, rule.gains)]
        elif rule.adjust == "transposed":
            return self._build_transposed(zeros_begin, zeros_end, windows)
        elif rule.adjust == "indices":  # a strided gather: the row at ``start`` of each window
            size = _tensor_shape(op.operands[0])[dim]
            indices = array_values(props["indices"]) or ()  # type: ignore[arg-type]
            start, step = strided_indices(indices, size) or (0, 1)
            props["indices"] = int_array([start + step * i for i in range(windows)])
            types = [_with_dim(t, dim, windows) for t in types]
        variant = type(op).create(
            operands=list(op.operands),
            result_types=types,
            properties=props,
            attributes=dict(op.attributes),
        )
        try:
            general = default_builders()[type(op)](variant, self.dtype)
        finally:
            variant.drop_all_references()  # a stand-in: it must not count as a use
        pool = (
            fast_avg_pool(op, dim)
            if self.fast_paths and rule.adjust == "window" and not zeros_begin and not zeros_end
            else None
        )
        if pool is None:
            return general

        def run(x: np.ndarray) -> tuple[Any, ...]:
            return pool(x) or general(x)

        return run

    def _build_transposed(self, zeros_begin: int, zeros_end: int, windows: int) -> Kernel:
        """A transposed conv on ``windows`` firings (``TransposedWindow``): the window's zero
        rows made real (and enough zero rows after it to cover its ``output_padding``
        rows), the op run with no pads along the dim, and the ``windows * s`` rows it owns
        kept: they start ``pad_begin_rows * s + pads_begin`` rows into the window's output."""
        op, dim, rule = self.node.op, self.dim, self.node.rule
        trait = op.get_trait(TransposedWindow)
        assert trait is not None
        geo = trait.geometry(op)
        i, n = dim - 2, len(geo.kernel)
        s, span = geo.strides[i], geo.field(i) - 1
        offset = rule.pad_begin * s + geo.pads[i]
        rows = windows + rule.fields[0] - 1
        keep = windows * s
        extra = max(0, -(-(offset + keep - ((rows - 1) * s + span + 1)) // s))
        full = (rows + extra - 1) * s + span + 1
        props = dict(op.properties)
        pads = list(geo.pads)
        pads[i] = pads[n + i] = 0
        props["pads"] = int_array(pads)
        outpad = list(array_values(props.get("output_padding")) or (0,) * n)  # type: ignore[arg-type]
        outpad[i] = 0
        props["output_padding"] = int_array(outpad)
        types = [_with_dim(r.type, dim, full) for r in op.results]
        variant = type(op).create(
            operands=list(op.operands),
            result_types=types,
            properties=props,
            attributes=dict(op.attributes),
        )
        try:
            inner = default_builders()[type(op)](variant, self.dtype)
        finally:
            variant.drop_all_references()
        after = zeros_end + extra

        def run(x: np.ndarray, *rest: Any) -> tuple[Any, ...]:
            def zeros(count: int) -> np.ndarray:
                shape = list(x.shape)
                shape[dim] = count
                return np.zeros(shape, dtype=x.dtype)

            z = (
                np.concatenate([zeros(zeros_begin), x, zeros(after)], axis=dim)
                if zeros_begin or after
                else x
            )
            (y,) = inner(z, *rest)
            return (np.take(y, range(offset, offset + keep), axis=dim),)

        return run

    # -- one step -----------------------------------------------------------------------------
    def step(self, produced: list[Chunks | None], ended: list[bool]) -> None:
        """Grow the caches by this step's rows, fire, and add the outputs to ``produced``."""
        cursor = self.cursor
        if self.fast is not None:
            s = self.inputs[0]
            chunks = produced[s]
            inputs_ended = ended[s]
            if not inputs_ended:
                if chunks and len(chunks) == 1:
                    self.step_one(chunks[0], produced)
                    return
                if not chunks and (cursor.fired or not self.pads_first):
                    return
            self._step_fast(chunks, inputs_ended, produced)
        else:
            quick = self.quick
            if quick is not None and not ended[self.inputs[0]]:
                chunks = produced[self.inputs[0]]
                if chunks:
                    # rows that fire no window: the caches grow and the cursor counts them, as
                    # _step_windows and NodeCursor.advance do (no firing, no end)
                    field, stride, pad_begin = quick
                    cache = self.caches[0]
                    cache_dim = cache.axis
                    rows = sum(a.shape[cache_dim] for a in chunks)
                    received = cursor.received[0] + rows
                    count = pad_begin + received + cursor.fed_end - cursor.fired * stride
                    if count < field:
                        for a in chunks:
                            cache.append(a)
                        held = cache.held()
                        if held > self.peaks[0]:
                            self.peaks[0] = held
                        cursor.received[0] = received
                        if count > cursor.peak[0]:
                            cursor.peak[0] = count
                        cache.drop_before(cursor.fired * stride - pad_begin)
                        return
            arrivals = [produced[s] for s in self.inputs]
            inputs_ended = all(ended[s] for s in self.inputs)
            if not inputs_ended and not any(arrivals) and (cursor.fired or not self.pads_first):
                return  # nothing new: every window the held rows allow has fired
            if self.pointwise:
                self._step_pointwise(arrivals[0] or [], inputs_ended, produced)
            else:
                self._step_windows(arrivals, inputs_ended, produced)
            if cursor.ended and not cursor.fired:
                self._never_fired(produced, arrivals)
        if cursor.ended:
            if self.fast is not None and not cursor.fired:
                self._never_fired(produced, [])
            for s in self.outputs:
                ended[s] = True
            for f in self.fused:
                for s in f.outputs:
                    ended[s] = True

    def _never_fired(self, produced: list[Chunks | None], arrivals: list[Chunks | None]) -> None:
        """A node whose inputs ended before it ever fired: no window filled (or no row came),
        nothing was dropped, so it holds all it received (a one-row node: its last, empty,
        arrivals). The op's whole-tensor kernel on that is what the whole run computes for
        it: a result with no rows, or the kernel's own error (an input shorter than a conv's
        window says so, naming the conv, as the whole run does). Nothing arrived at all (a
        stream without rows): nothing to run it on."""
        windows: Chunks = []
        for i, cache in enumerate(self.caches):
            if self.pointwise:
                chunks = [a for a in arrivals[i] or () if a is not None]
                if not chunks:
                    return
                windows.append(chunks[0])
            elif isinstance(cache, RowBuffer):
                if cache.buf is None and cache.empty is None:
                    return
                windows.append(np.ascontiguousarray(cache.take(0, cache.end).transpose(0, 2, 1)))
            elif cache.axis is None:
                if not cache.chunks:
                    return
                windows.append(cache.take(cache.base, cache.base + 1))
            else:
                if not cache.chunks and not cache.empty_is_real:
                    return
                windows.append(cache.take(cache.base, cache.end))
        args = [
            windows[i] if i >= 0 else value if i == -1 else _shape_stand_in(value, self.batch)
            for i, value in self.args
        ]
        op = self.node.op
        try:
            results = self.whole_kernel(*args)
            if self.fused:
                chain = [results[0]]
                for f in self.fused:
                    chain.append(f.whole_kernel(chain[-1])[0])
                results = (chain[0],)
        except ExecutionError:
            raise
        except Exception as e:
            shapes = ", ".join(str(getattr(a, "shape", "?")) for a in args)
            raise ExecutionError(
                f"{op.name} failed on inputs of shapes ({shapes}): {type(e).__name__}: {e}"
            ) from e
        outs = list(zip(self.outputs, results, self.node.rule.gains))
        if self.fused:
            outs += [(f.outputs[0], y, 1) for f, y in zip(self.fused, chain[1:])]
        for slot, r, gain in outs:
            if not gain:
                continue  # a recurrent op's final state: not produced while streaming
            chunks = produced[slot]
            if chunks is None:
                produced[slot] = [r]
            else:
                chunks.append(r)

    def _step_pointwise(
        self, chunks: Chunks, inputs_ended: bool, produced: list[Chunks | None]
    ) -> None:
        """A one-row node with one input holds nothing between steps: it fires on exactly the
        rows that arrived, so they go to the kernel as they are. (Its cursor moves as
        ``advance`` would move it: every row fires at once, no padding, no partial window.)"""
        cursor = self.cursor
        if not chunks:
            if inputs_ended:
                cursor.ended = True
            return
        if len(chunks) == 1:
            x = chunks[0]
        else:
            x = np.concatenate(chunks, axis=self.dim) if self.caches[0].axis is not None else None
        rows = len(chunks) if self.caches[0].axis is None else x.shape[self.dim]  # type: ignore[union-attr]
        if not rows:
            if inputs_ended:
                cursor.ended = True
            return
        if rows > self.peaks[0]:
            self.peaks[0] = rows
        cursor.received[0] += rows
        if rows > cursor.peak[0]:
            cursor.peak[0] = rows
        firing = Firing(cursor.fired, rows)
        cursor.fired += rows
        if inputs_ended:
            cursor.ended = True
        if x is None:
            raise ExecutionError(f"{self.node.op.name}: several units of a tensor in one step")
        self._emit(self.kernel(0, 0, rows), [x], firing, produced)

    def step_one(self, a: np.ndarray, produced: list[Chunks | None]) -> None:
        """``_step_fast`` for one array of rows mid-stream (the stream goes on): the same
        cursor moves, caches and kernels, with what does not apply left out. Windows of real
        rows held in the buffer are one call of the chain's kernel (``chain_one`` for a
        single window); windows reaching into the begin padding take ``_fire``."""
        cursor, cache = self.cursor, self.caches[0]
        buf, n = cache.buf, a.shape[2]
        end, base = cache.end, cache.base
        start = cache.off + end - base
        if buf is not None and end >= base and start + n <= buf.shape[1]:
            # RowBuffer.append where the rows fit after the held ones
            buf[:, start : start + n] = a.transpose(0, 2, 1)
            cache.end = end = end + n
        else:
            cache.append(a)
            end, base = cache.end, cache.base
        held = end - base
        if held > self.peaks[0]:
            self.peaks[0] = held
        field, stride, pad_begin = self.geometry  # type: ignore[misc]
        received = cursor.received[0] + n
        cursor.received[0] = received
        count = pad_begin + received - cursor.fired * stride  # (fed_end: 0 mid-stream)
        if count > cursor.peak[0]:
            cursor.peak[0] = count
        if count < field:
            return
        n = (count - field) // stride + 1
        first = cursor.fired
        cursor.fired = first + n
        lo = first * stride - pad_begin
        one, whole_at = self.chain_one, self.chain_at
        if lo >= cache.base and whole_at is not None:
            # every row real and held (the last window ends at the last row received)
            row = lo - cache.base + cache.off
            if n == 1 and one is not None:
                y = one(cache.buf, row)
            else:
                y = whole_at(cache.buf, row, (n - 1) * stride + field, n)
            for slot in self.chain_slots:
                chunks = produced[slot]
                if chunks is None:
                    produced[slot] = [y]
                else:
                    chunks.append(y)
        else:
            self._fire([(first, n)], received, 0, produced)
        row = cursor.fired * stride - pad_begin
        if row > cache.base:  # RowBuffer.drop_before
            cache.off += max(0, min(row, cache.end) - cache.base)
            cache.base = row
        if n > self.chain_peak:
            self.chain_peak = n

    def _step_fast(
        self, chunks: Chunks | None, inputs_ended: bool, produced: list[Chunks | None]
    ) -> None:
        """A fast node (one input, a :class:`RowBuffer` cache) and its fused chain."""
        cursor, cache = self.cursor, self.caches[0]
        before = cache.end
        if chunks:
            for a in chunks:
                cache.append(a)
        held = cache.end - cache.base
        if held > self.peaks[0]:
            self.peaks[0] = held
        # NodeCursor.advance and .window for one input and no ceil_mode, inlined
        field, stride, pad_begin = self.geometry  # type: ignore[misc]
        received = cursor.received[0] + cache.end - before
        cursor.received[0] = received
        firings: list[tuple[int, int]] = []
        for feed_end in (False, True) if inputs_ended else (False,):
            if feed_end:
                if not self.node.rule.pad_end:
                    break
                cursor.fed_end = self.node.rule.pad_end
            held = pad_begin + received + cursor.fed_end - cursor.fired * stride
            if held > cursor.peak[0]:
                cursor.peak[0] = held
            if held >= field:
                n = (held - field) // stride + 1
                firings.append((cursor.fired, n))
                cursor.fired += n
        if inputs_ended:
            cursor.ended = True
        if len(firings) == 2:  # consecutive windows (before and after the end padding): one call
            (first, n), (_, more) = firings
            firings = [(first, n + more)]
        total = self._fire(firings, received, cursor.fed_end, produced)
        cache.drop_before(cursor.fired * stride - pad_begin)
        if total > self.chain_peak:
            self.chain_peak = total
        if cursor.ended:
            self.sync_chain()

    def _fire(
        self,
        firings: list[tuple[int, int]],
        received: int,
        fed_end: int,
        produced: list[Chunks | None],
    ) -> int:
        """Run the fast node's chain on its ``(first, count)`` firings (``received`` real
        rows so far, ``fed_end`` zero rows after them); add the rows to ``produced``; return
        the windows fired."""
        cache = self.caches[0]
        field, stride, pad_begin = self.geometry  # type: ignore[misc]
        total = 0
        if firings:
            slots, chain, conv = self.chain_slots, self.chain_last, self.fast[0]  # type: ignore[index]
            whole = self.chain_fused
            whole_at = self.chain_at
            for first, count in firings:
                lo = first * stride - pad_begin
                hi = (first + count - 1) * stride + field - pad_begin
                start, stop = max(lo, 0), min(hi, received)
                zb, ze = max(0, -lo), min(fed_end, max(0, hi - received))
                total += count
                if whole is not None:
                    # the chain in one kernel: every value of it has the rows of the last,
                    # which stands for them in ``produced`` (read only for row counts there)
                    buf = cache.buf
                    if (
                        whole_at is not None
                        and not zb
                        and not ze
                        and buf is not None
                        and cache.base <= start < stop <= cache.end
                    ):
                        # all rows real and held: the kernel reads them from the buffer
                        y = whole_at(buf, start - cache.base + cache.off, stop - start, count)
                    elif whole_at is not None and (zb or ze):
                        # the zero rows made real in a new (contiguous) window, read likewise
                        xp = padded_rows(cache.take(start, stop), zb, ze, cache.dtype)
                        y = whole_at(xp, 0, xp.shape[1], count)
                    else:
                        y = whole(cache.take(start, stop), zb, ze, count)
                    outs = [y] * len(slots)
                elif chain is not None:
                    # [N, rows, C] through the chain; each value is given as an [N, C, rows]
                    # view, and the last one (the only one read on) made contiguous
                    y = chain[0](cache.take(start, stop), zb, ze, count)
                    outs = [y.transpose(0, 2, 1)]
                    for kernel in chain[1:]:
                        y = kernel(y)[0]
                        outs.append(y.transpose(0, 2, 1))
                    outs[-1] = np.ascontiguousarray(outs[-1])
                else:
                    y = conv(cache.take(start, stop), zb, ze, count)
                    outs = [y]
                    for kernel in self.chain_kernels:
                        if kernel is not None:  # None: an identity (see _repeats_grid)
                            y = kernel(y)[0]
                        outs.append(y)
                for slot, out in zip(slots, outs):
                    chunks = produced[slot]
                    if chunks is None:
                        produced[slot] = [out]
                    else:
                        chunks.append(out)
        return total

    def sync_chain(self) -> None:
        """Bring the cursors of the fused nodes up to date: each fires on every row this
        fast node makes, as it makes them (``_step_fast`` counts them on this node alone)."""
        fired, peak, ended = self.cursor.fired, self.chain_peak, self.cursor.ended
        for f in self.fused:
            c = f.cursor
            c.received[0] = c.fired = fired
            c.peak[0] = f.peaks[0] = peak
            c.ended = ended

    def _step_windows(
        self, arrivals: list[Chunks | None], inputs_ended: bool, produced: list[Chunks | None]
    ) -> None:
        cursor = self.cursor
        arrived = []
        for i, chunks in enumerate(arrivals):
            cache = self.caches[i]
            before = cache.end
            for a in chunks or ():
                cache.append(a)
            arrived.append(cache.end - before)
            self.peaks[i] = max(self.peaks[i], cache.held())
        for firing in cursor.advance(arrived, inputs_ended):
            windows: Chunks = []
            zeros = (0, 0)
            for i, cache in enumerate(self.caches):
                start, stop, zb, ze = cursor.window(i, firing)
                windows.append(cache.take(start, stop))
                zeros = (zb, ze)  # only one-input nodes pad
            self._emit(self.kernel(*zeros, firing.count), windows, firing, produced)
        for i, cache in enumerate(self.caches):
            cache.drop_before(cursor.first_needed(i))

    def _emit(
        self, kernel: Kernel, windows: Chunks, firing: Firing, produced: list[Chunks | None]
    ) -> None:
        """Run ``kernel`` on the windows (and the constants); add its rows to ``produced``."""
        args = [
            windows[i] if i >= 0 else value if i == -1 else _shape_stand_in(value, self.batch)
            for i, value in self.args
        ]
        op = self.node.op
        try:
            results = kernel(*args)
        except ExecutionError:
            raise
        except Exception as e:
            shapes = ", ".join(str(getattr(a, "shape", "?")) for a in args)
            raise ExecutionError(
                f"{op.name} failed on a streamed window of shapes ({shapes}): "
                f"{type(e).__name__}: {e}"
            ) from e
        for slot, r, axis, gain in zip(self.outputs, results, self.out_axes, self.node.rule.gains):
            if not gain:
                continue  # a recurrent op's final state: not produced while streaming
            expected = firing.count * gain
            got = 1 if axis is None else r.shape[axis]
            if got != expected:
                raise ExecutionError(
                    f"{op.name}: a streamed window gave {got} rows along dim {axis}, "
                    f"the plan expects {expected} (shape {r.shape})"
                )
            chunks = produced[slot]
            if chunks is None:
                produced[slot] = [r]
            else:
                chunks.append(r)


def _codes_only(t: Attribute) -> Any:
    """For an argument type, ``dtype -> bool``: whether every value of that integer dtype is
    a code of the argument (an nh tensor type; int8 for i8 and wider), so that checking an
    array of it reads no values."""
    if not isinstance(t, TensorType) or not isinstance(t.encoding, FixedAttr):
        return lambda dtype: False
    lo, hi = nh.value_code_range(t)
    width = t.get_element_type().width.data  # type: ignore[union-attr]

    def check(dtype: np.dtype[Any]) -> bool:
        if dtype.kind != "i" or width == 1:
            return False
        info = np.iinfo(dtype)
        return lo <= int(info.min) and int(info.max) <= hi

    return check


def _repeats_grid(chain: list[_NodeRun], k: int, dtype: np.dtype[Any]) -> bool:
    """Whether ``chain[k]`` returns its input bit for bit: an ``nq.fake_quant`` after
    ``nf.relu`` after one with the same bits (> 1), exponents and rounding. The first one's
    values are grid points ``code * 2**-exp`` with codes in range and no ``-0.0``; relu keeps
    them so (a negative one becomes ``+0.0``), and on such values the second one's scaling,
    rounding, clip and scaling back are all exact. In float32 the grid must be exact too
    (codes of at most 24 bits, exponents far from float32's limits)."""
    if k < 2:
        return False
    first, relu, second = (r.node.op for r in chain[k - 2 : k + 1])
    if not (
        isinstance(first, FakeQuantOp)
        and isinstance(relu, nf.ReluOp)
        and isinstance(second, FakeQuantOp)
        and first.bits.value.data == second.bits.value.data
        and first.rounding_mode == second.rounding_mode
    ):
        return False
    bits = first.bits.value.data
    e1, e2 = dense_to_numpy(first.exp), dense_to_numpy(second.exp)
    if bits <= 1 or e1.shape != e2.shape or not np.array_equal(e1, e2):
        return False
    if np.dtype(dtype) == np.float64:
        return bits <= 53 and int(np.abs(e1).max(initial=0)) <= 900
    return np.dtype(dtype) == np.float32 and bits <= 24 and int(np.abs(e1).max(initial=0)) <= 90


def check_mem_dim(func: FuncOp, mem_dim: Any) -> int:
    """``mem_dim`` as an int in 2..rank-1 of the inputs it streams, else
    :class:`ArgumentError` (``mem_dim_problem``'s reason, which stream-plan gives too): dim 0
    is the batch and dim 1 the channels, which the stream plan never splits, and at least one
    input must have the dim."""
    dim = int_argument("mem_dim", mem_dim, -(2**63))
    problem = mem_dim_problem(func, dim)
    if problem is not None:
        raise ArgumentError(problem)
    return dim


class StreamRunner:
    """Runs a program one step at a time along ``mem_dim`` (see the module docstring).

    ``push(*rows)`` takes, per function input, the next rows along ``mem_dim`` (an input that
    lacks the dim is given whole, once; ``None`` means no rows this step) and returns, per
    result, the rows produced in this step or ``None``. ``finish()`` ends the stream and
    ``reset()`` starts a new one with the same compiled kernels.
    """

    def __init__(
        self,
        module: ModuleOp | FuncOp,
        *,
        mem_dim: int = 2,
        function: str | None = None,
        dtype: Any = None,
        raw: bool = False,
    ):
        func = find_function(module, function)
        mem_dim = check_mem_dim(func, mem_dim)
        self.graph = build_graph(func, mem_dim)  # first: it names ops that cannot stream
        self.plan = compile_module(func, dtype=dtype)
        self.func: FuncOp = func
        self.integer = level_of(func) == "nh"
        self._nan_refused = [
            level_of(func) == "nq"
            and bool(a.uses)
            and all(isinstance(u.operation, FakeQuantOp) for u in a.uses)
            for a in func.args
        ]
        """Per input, whether its every use is an ``nq.fake_quant``, which refuses NaN: then
        ``check`` refuses a NaN up front, as ``run`` would, before a window fails mid-step."""
        self.raw = raw
        self.dim = mem_dim
        self.constants = {
            v: self.plan.constants[s]
            for v, s in self.plan.slot_of.items()
            if s in self.plan.constants
        }
        values = [*self.graph.inputs, *(r for n in self.graph.nodes for r in n.op.results)]
        self.slot = {v: i for i, v in enumerate(values)}
        self.values = values
        self.axes = [self.graph.axes.get(v) for v in values]
        """Per value (slot), the axis its rows run along (``None``: whole units): ``mem_dim``
        unless a transpose moved it (``nanoir.lowering.analysis.rules``)."""
        self.streamed = [a is not None for a in self.axes]
        kernels = {step.op: step.kernel for step in self.plan.steps}
        self.runs = [
            _NodeRun(
                n,
                next((a for a in n.in_axes if a is not None), mem_dim),
                self.plan.dtype,
                self.slot,
                self.constants,
                kernels[n.op],
            )
            for n in self.graph.nodes
        ]
        self.results: list[SSAValue] = list(self.func.body.block.last_op.arguments)  # type: ignore[union-attr]
        self._fuse()
        self._active = [r for r in self.runs if not r.absorbed]
        self._result_slots = [self.slot.get(v) for v in self.results]
        """Per result, its slot (``None``: a constant, which no step produces)."""
        self._empties: dict[int, list[tuple[int, int, np.ndarray]]] = {}
        self._arg_types = [self._chunk_type(a.type) for a in self.graph.inputs]
        self._codes_only = [_codes_only(t) for t in self._arg_types]
        """Per input, whether an integer dtype holds codes of the argument only (its checks
        then read no values)."""
        self._known: list[set[tuple[Any, ...]]] = [set() for _ in self.graph.inputs]
        """Per input, the signatures (:meth:`_signature`) of arrays that passed as they are."""
        self.reset()

    def _fuse(self) -> None:
        """Chain elementwise nodes onto the fast node that feeds them (see ``_NodeRun.fused``):
        a node joins when it is elementwise (``_FUSABLE``), has one operand, and that operand
        is the chain's last value, used by it alone and not a program result."""
        run_of = {r.node.op: r for r in self.runs}
        results = set(self.results)
        for run in self.runs:
            if run.fast is not None:
                tail = run
                while len(tail.node.op.results) == 1:
                    (v,) = tail.node.op.results
                    if v in results or not v.has_one_use():
                        break
                    user = run_of.get(v.get_user_of_unique_use())  # type: ignore[arg-type]
                    if (
                        user is None
                        or not isinstance(user.node.op, _FUSABLE)
                        or not user.pointwise
                        or user.node.rule.adjust != "none"
                        or list(user.node.op.operands) != [v]
                        or list(user.node.inputs) != [v]
                    ):
                        break
                    run.fused.append(user)
                    user.absorbed = True
                    tail = user
            run.chain_slots = [*run.outputs[:1], *(f.outputs[0] for f in run.fused)]
            run.chain_kernels = [
                None if _repeats_grid(run.fused, k, self.plan.dtype) else f.whole_kernel
                for k, f in enumerate(run.fused)
            ]
            run.chain_last = None
            run.chain_fused = None
            run.chain_at = None
            run.chain_one = None
            if run.fast is not None and run.fused:
                run.chain_fused = fused_requant(run.fast[0], [f.node.op for f in run.fused])
                run.chain_at = getattr(run.chain_fused, "at", None)
                run.chain_one = getattr(run.chain_fused, "at_one", None)
                # codes read only by a fast conv that stores them as floats of the same
                # dtype: handed over as those floats (the same integers; no int cast and back)
                (v,) = run.fused[-1].node.op.results
                user = v.get_user_of_unique_use() if v.has_one_use() else None
                consumer = run_of.get(user) if user is not None else None  # type: ignore[arg-type]
                if (
                    run.chain_at is not None
                    and v not in results
                    and consumer is not None
                    and consumer.fast is not None
                    and list(consumer.node.inputs) == [v]
                    and consumer.fast[1] == run.chain_fused.float_dtype  # type: ignore[union-attr]
                ):
                    run.chain_at = run.chain_fused.at_float  # type: ignore[union-attr]
                    run.chain_one = run.chain_fused.at_one_float  # type: ignore[union-attr]
            last = getattr(run.fast[0], "channel_last", None) if run.fast is not None else None
            if last is not None:
                chain = [last]
                for f in run.fused:
                    if isinstance(f.node.op, nh.RequantOp):
                        kernel = fast_requant(f.node.op, channel_last=True)
                    elif isinstance(f.node.op, (nh.ReluOp, nh.ClampOp)):
                        kernel = f.whole_kernel  # elementwise, no per-channel operand
                    else:
                        kernel = None
                    if kernel is None:
                        break
                    chain.append(kernel)
                else:
                    run.chain_last = chain

    def reset(self) -> None:
        """Start a new stream, keeping the compiled kernels."""
        for run in self.runs:
            run.reset()
        self.ended = [False] * len(self.values)
        self.finished = False
        self._peaks = [0] * len(self.values)
        self._given_units: set[int] = set()
        self.batch: int | None = None
        self._first = True

    @property
    def cache_peaks(self) -> dict[tuple[Operation, SSAValue], int]:
        """Most real rows each cache held (keyed like ``BufferPlan.caches``)."""
        for r in self.runs:
            if r.fused:
                r.sync_chain()
        return {
            (r.node.op, v): peak
            for r in self.runs
            for v, peak in zip(r.node.inputs, r.peaks)
            if self.graph.streams(v)
        }

    @property
    def tensor_peaks(self) -> dict[SSAValue, int]:
        """Most rows each runtime tensor produced in one step."""
        return {v: p for v, p in zip(self.values, self._peaks)}

    def _chunk_type(self, t: Attribute) -> Attribute:
        """The argument type with the streamed dim dynamic (a chunk has any number of rows)."""
        if isinstance(t, TensorType) and len(t.get_shape()) > self.dim:
            return _with_dim(t, self.dim, DYNAMIC_INDEX)
        return t

    def _set_batch(self, rows: Sequence[Any]) -> None:
        """Shape the empty windows a conv padded by more than its span reads before any row
        of its input exists (the batch size is known from the first push)."""
        sizes = [np.shape(r)[0] for r in rows if r is not None and np.ndim(r)]
        if not sizes:
            return
        self.batch = sizes[0]
        for run in self.runs:
            run.batch = self.batch  # (a shape-only operand's stand-in has it)
        empties = self._empties.get(self.batch)
        if empties is None:
            # made once per batch size (arrays with no elements: shared between streams)
            empties = self._empties[self.batch] = []
            for r, run in enumerate(self.runs):
                for i, (v, cache) in enumerate(zip(run.node.inputs, run.caches)):
                    if cache.axis is None:
                        continue
                    shape = [self.batch, *_tensor_shape(v)[1:]]
                    shape[cache.axis] = 0
                    if DYNAMIC_INDEX not in shape:
                        # (an nh value's codes in their storage dtype, as the whole run
                        # holds them: an int64 empty made a padded int8 output int64)
                        dtype = (
                            quant.code_dtype(nh.width_of(v), signed=not nh.is_unsigned(v))
                            if _is_nh(v)
                            else self.plan.dtype
                        )
                        empties.append((r, i, np.zeros(shape, dtype=dtype)))
        runs = self.runs
        for r, i, empty in empties:
            runs[r].caches[i].empty = empty

    def push(self, *rows: Any) -> list[np.ndarray | None]:
        """Feed the next rows of every input; return the output rows now computable."""
        return self._push_checked(self.check(rows))

    def check(self, rows: Sequence[Any]) -> list[np.ndarray | None]:
        """The rows of one ``push`` converted and checked as ``run`` checks whole inputs
        (quantized first at the nh level; NaN refused there), changing no state.

        Integer codes of a dtype whose every value is a code of the argument (int8 for an i8
        argument) need no look at their values: once an array of a dtype and shape (the
        streamed dim aside) has passed, the next one like it passes as it is (the shape and
        dtype checks are per shape, never per element)."""
        if len(rows) != len(self.graph.inputs):
            raise ExecutionError(
                f"@{self.func.sym_name.data} takes {len(self.graph.inputs)} inputs, got {len(rows)}"
            )
        known = self._known
        fast: list[np.ndarray | None] = []
        for i, r in enumerate(rows):
            if r is None:
                fast.append(None)
            elif type(r) is np.ndarray and self._signature(i, r) in known[i]:
                fast.append(r)
            else:
                break
        else:
            return fast
        if self.integer:
            rows = quantize_inputs(self.func, rows)
        checked = [
            None if r is None else check_input(i, r, self._arg_types[i], self.plan.dtype)
            for i, r in enumerate(rows)
        ]
        for i, a in enumerate(checked):
            if a is not None and self._nan_refused[i] and np.isnan(a).any():
                at = tuple(int(j) for j in np.argwhere(np.isnan(a))[0])
                raise ExecutionError(
                    f"input {i} has NaN at index {at}, which has no integer code "
                    "(its nq.fake_quant refuses NaN; +-inf saturates)"
                )
        for i, (r, a) in enumerate(zip(rows, checked)):
            if a is not None and a is r and self._codes_only[i](a.dtype):
                known[i].add(self._signature(i, a))
        return checked

    def passed_as_is(self, index: int, a: np.ndarray) -> bool:
        """Whether an array like ``a`` (its dtype and shape, rows aside) passed the checks of
        input ``index`` without its values being read."""
        return self._signature(index, a) in self._known[index]

    def _signature(self, index: int, a: np.ndarray) -> tuple[Any, ...]:
        """What the checks of input ``index`` read of ``a``: its dtype and shape (the rows
        along the streamed dim aside)."""
        if self.streamed[index] and a.ndim > self.dim:
            return (a.dtype, a.shape[: self.dim], a.shape[self.dim + 1 :])
        return (a.dtype, a.shape)

    def _push_checked(self, rows: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
        """``push`` of rows already converted and checked (``stream`` checks whole inputs)."""
        if self.finished:
            raise ExecutionError("push after finish(): the stream has ended (reset() first)")
        if self.batch is None:
            self._set_batch(rows)
        produced: list[Chunks | None] = [None] * len(self.values)
        everything = self._first
        for i, chunk in enumerate(rows):
            if chunk is None:
                continue
            if not self.streamed[i]:
                if i in self._given_units:
                    raise ExecutionError(f"input {i} has no dim {self.dim}: give it once")
                self._given_units.add(i)
                self.ended[i] = True  # a unit arrives whole (as the plan has it)
                everything = True
            produced[i] = [chunk]
        self._first = False
        return self._step(produced, everything)

    def finish(self, rows: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray | None]:
        """End the stream: feed the end padding and return the last output rows. ``rows``
        (checked, every input streamed) are the stream's last rows, fed in the same step as
        the end: a node then fires its last rows and its end padding in one kernel call
        each (the KWS test model's last 49 rows at batch 16: 1.04 ms against 1.20 as a
        push and then the end)."""
        if self.finished:
            raise ExecutionError("finish() called twice (reset() starts a new stream)")
        produced: list[Chunks | None] = [None] * len(self.values)
        if rows is not None and any(r is not None for r in rows):
            if self.batch is None:
                self._set_batch(rows)
            for i, chunk in enumerate(rows):
                if chunk is not None:
                    produced[i] = [chunk]
        self._first = False
        self.finished = True
        for i in range(len(self.graph.inputs)):
            self.ended[i] = True
        out = self._step(produced, everything=True)
        assert all(r.cursor.ended for r in self.runs), "every node ends with its inputs"
        return out

    def _step(self, produced: list[Chunks | None], everything: bool) -> list[np.ndarray | None]:
        """Step the nodes in program order: ``everything``, or (within a stream, once every
        node has seen its first step) only those some of whose inputs got rows in this step:
        a node that got none fires nothing new until its inputs end (which is ``everything``:
        the end of the stream, a unit input given)."""
        ended = self.ended
        if everything:
            for run in self._active:
                if not run.cursor.ended:
                    run.step(produced, ended)
        else:
            # Nodes run in program order, so a node's inputs have all their rows of this step
            # by the time it is reached: it runs when one of them got some.
            for run in self._active:
                for s in run.inputs:
                    chunks = produced[s]
                    if chunks:
                        if run.fast is not None and len(chunks) == 1 and not ended[s]:
                            run.step_one(chunks[0], produced)  # (what step would call)
                        elif not run.cursor.ended:
                            run.step(produced, ended)
                        break
        axes, peaks = self.axes, self._peaks
        for s, chunks in enumerate(produced):
            if chunks:
                axis = axes[s]
                if axis is None:
                    n = len(chunks)
                elif len(chunks) == 1:
                    n = chunks[0].shape[axis]
                else:
                    n = sum(c.shape[axis] for c in chunks)
                if n > peaks[s]:
                    peaks[s] = n
        outs = [None if s is None else self._join_slot(s, produced[s]) for s in self._result_slots]
        if not self.integer or self.raw:
            return outs
        return [
            y if y is None or not _is_nh(v) else dequantize(y, v.type)  # type: ignore[arg-type]
            for v, y in zip(self.results, outs)
        ]

    def _join_slot(self, slot: int, chunks: Chunks | None) -> np.ndarray | None:
        if not chunks:
            return None
        axis = self.axes[slot]
        if axis is None or len(chunks) == 1:
            return chunks[0]
        return np.concatenate(chunks, axis=axis)


def stream(
    module: ModuleOp | FuncOp,
    inputs: Sequence[Any],
    *,
    mem_dim: int = 2,
    step: int = 1,
    function: str | None = None,
    dtype: Any = None,
    raw: bool = False,
    runner: StreamRunner | None = None,
) -> list[Any]:
    """Run ``module`` on whole ``inputs``, ``step`` rows at a time along ``mem_dim``; the
    outputs equal ``run(module, *inputs, raw=raw)``'s.

    A ``runner`` made for the same module reuses its compiled kernels (it is reset, and its
    ``raw`` applies); its ``cache_peaks`` can be read afterwards.
    """
    step = int_argument("stream: step", step, -(2**63))
    if step < 1:  # an ExecutionError, as before ArgumentError existed
        raise ExecutionError(f"stream: step must be >= 1, got {step}")
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise ArgumentError(
            f"stream: inputs must be a list of arrays (one per program input), "
            f"got {type(inputs).__name__}"
        )
    if runner is not None and not isinstance(runner, StreamRunner):
        raise ArgumentError(f"stream: runner must be a StreamRunner, got {type(runner).__name__}")
    if runner is None:
        runner = StreamRunner(module, mem_dim=mem_dim, function=function, dtype=dtype, raw=raw)
    elif runner.func is not find_function(module, function):
        raise ArgumentError("stream: runner was made for another program than module")
    else:
        runner.reset()
    func, dim = runner.func, runner.dim
    if len(inputs) != len(runner.graph.inputs):
        raise ExecutionError(
            f"@{func.sym_name.data} takes {len(runner.graph.inputs)} inputs, got {len(inputs)}"
        )
    if runner.integer:
        inputs = quantize_inputs(func, inputs)
    arrays = [
        check_input(i, x, t, runner.plan.dtype)
        for i, (x, t) in enumerate(zip(inputs, func.function_type.inputs.data))
    ]
    streamed = runner.streamed[: len(arrays)]
    length = max([a.shape[dim] for a, s in zip(arrays, streamed) if s] or [1])
    collected: list[Chunks] = [[] for _ in runner.results]

    def keep(outs: list[np.ndarray | None]) -> None:
        for k, y in enumerate(outs):
            if y is not None:
                collected[k].append(y)

    for start in range(0, length, step):
        chunks: list[np.ndarray | None] = []
        for a, s in zip(arrays, streamed):
            if not s:
                chunks.append(a if start == 0 else None)
                continue
            index = [slice(None)] * a.ndim
            index[dim] = slice(start, start + step)
            chunk = a[tuple(index)]
            chunks.append(chunk if chunk.shape[dim] else None)
        keep(runner._push_checked(chunks))
    keep(runner.finish())
    outputs: list[Any] = []
    for k, (value, parts) in enumerate(zip(runner.results, collected)):
        if value in runner.constants:
            c = runner.constants[value]
            real = runner.integer and not runner.raw and _is_nh(value)
            outputs.append(dequantize(c, value.type) if real else c)  # type: ignore[arg-type]
        elif not parts:
            raise ExecutionError(
                f"stream: output {k} produced no rows (the input is too short for the program)"
            )
        elif runner.graph.streams(value) and len(parts) > 1:
            outputs.append(np.concatenate(parts, axis=runner.graph.axes[value]))
        else:
            outputs.append(parts[0])
    return outputs
