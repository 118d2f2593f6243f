"""``nanoir.Streamer``: feed a program its input rows as they arrive and get each output's rows
as soon as they can be computed (NanoEngine's incremental streaming inference).

    streamer = nanoir.Streamer(hw, mem_dim=2)
    for frame in microphone():                # [batch, channels, rows] along mem_dim
        (ready,) = streamer.push(frame)       # possibly 0 rows: still warming up
        ...
    (rest,) = streamer.flush()                # the end padding's rows
    streamer.reset()                          # a new stream, same compiled kernels

Each output's rows arrive exactly once and equal the whole-tensor run's rows
(``nanoir.run``), bit for bit at the nh level. A push is checked against the program input
before anything runs: its dtype kind (float or integer, fixed by the first push with rows),
rank, and every dim but the streamed one (the batch and any dynamic dim fixed by the first
push with rows, until ``reset``), as ``nanoir.run`` checks the whole input; a refused push
(:class:`~nanoir.runtime.base.ExecutionError`) changes nothing, and the stream goes on.
What it holds between pushes is the stream plan's caches (``nanoir.stream_plan``), so memory
stays flat over an arbitrarily long stream; ``warmup`` says, per output, how many input rows it
takes before its first row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nanoir.dialects.nh import is_unsigned, width_of
from nanoir.lowering.analysis.plan import plan_function
from nanoir.runtime.base import ExecutionError, as_array
from nanoir.runtime.numerics import quant
from nanoir.runtime.stream import StreamRunner
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue

from nanoir.errors import ArgumentError, int_argument

__all__ = ["GATHER_ELEMENTS", "MAX_GATHER", "Streamer"]

GATHER_ELEMENTS = 2**16
"""Values (rows x the batch x a row's other dims) a stream of a program whose every output
is a whole-stream result gathers per input before they run, unless ``gather`` names rows. A
push of one frame then costs a copy, not a firing of every conv (on the KWS test model a
single frame's firings cost ~3x a whole run's kernel calls). A count of values, not rows,
because a NumPy call's fixed cost is amortized by the values it handles: the same count
makes 1,638 rows of the KWS model's 40 channels at batch 1 and 102 at batch 16. What the
stream holds grows by at most this many values per input (512 KiB of float64)."""
MAX_GATHER = 2**20
"""The largest ``gather`` (rows held per input): memory stays bounded."""


class Streamer:
    """A program run row by row along ``mem_dim`` as its input arrives.

    ``push(*rows)`` takes, per program input, the next rows along ``mem_dim`` (any number,
    also 0; an input without that dim is given whole, once) and returns, per program output,
    the rows that became ready: an array with 0 or more rows along ``mem_dim`` (or along
    the dim a transpose moved it to: :attr:`output_axes`), or ``None``
    for an output without that dim (a whole-stream result such as a pooled class score) until
    ``flush()``. ``flush()`` ends the stream and returns the rest; ``reset()`` starts a new
    stream with the same compiled kernels. ``raw=True`` returns nh codes instead of reals.

    ``mem_dim`` is an int in 2..rank-1 of the inputs it streams (dim 0 is the batch, dim 1
    the channels). A push whose rows ``run`` would refuse as part of the whole input (NaN
    where the input is quantized: nh, or an nq input read by fake-quants only; a code out of
    range; the wrong shape or dtype) raises before anything runs and leaves the stream as it
    was; one that fails while running (a NaN reaching a fake-quant through other ops) ends
    the stream until ``reset()``.

    A program whose every output is a whole-stream result has nothing to return until an
    output's warm-up rows are in: its rows are gathered, ``gather`` rows per input (default:
    about :data:`GATHER_ELEMENTS` values; 0 runs each push at once), and run together, with
    the same results on the same pushes and fewer kernel calls; a failure while running then
    surfaces at the push (or ``flush``) that ran the rows.
    """

    def __init__(
        self,
        module: ModuleOp | FuncOp,
        mem_dim: int = 2,
        *,
        function: str | None = None,
        dtype: Any = None,
        raw: bool = False,
        gather: int | None = None,
    ):
        if not isinstance(raw, (bool, np.bool_)):
            raise ArgumentError(f"raw must be True or False, got {raw!r}")
        if gather is not None:
            gather = int_argument("gather", gather, 0, MAX_GATHER)
        self._runner = StreamRunner(
            module, mem_dim=mem_dim, function=function, dtype=dtype, raw=bool(raw)
        )
        self.mem_dim = self._runner.dim
        results = self._runner.results
        plan = plan_function(self._runner.func, self.mem_dim, [(self.mem_dim, 1)])
        self.warmup: tuple[int, ...] = tuple(plan.warmup_rows.get(v, 0) for v in results)
        """Per output, the input rows it takes before its first row (its warm-up latency)."""
        self._dtypes = [self._result_dtype(v, raw) for v in results]
        self._declared = [
            t.get_shape() if isinstance(t, TensorType) else None
            for t in (a.type for a in self._runner.graph.inputs)
        ]
        dim = self.mem_dim
        self._extent = [
            shape[dim]
            if streamed and shape is not None and len(shape) > dim and shape[dim] != DYNAMIC_INDEX
            else None
            for streamed, shape in zip(self._runner.streamed, self._declared)
        ]
        """Per streamed input, the rows its type fixes along ``mem_dim`` (None: unbounded): a
        stream of another length has no whole run to equal, so it is refused."""
        self._bounded = [i for i, e in enumerate(self._extent) if e is not None]
        self._empties: dict[tuple[int, int], np.ndarray | None] = {}
        whole_only = all(a is None for a in self.output_axes) and all(
            self._runner.streamed[i] for i in range(self.num_inputs)
        )
        self.gather: int | None = (None if whole_only else 0) if gather is None else gather
        """Rows each input gathers before they run (every output a whole-stream result):
        ``gather`` if given, else for such a program ``None``, the rows that hold about
        :data:`GATHER_ELEMENTS` values (set per stream by the input's first chunk), and 0
        (each push runs) for any other. A push then returns what it would have (``None``
        per output, and an output on the push that completes it: the rows run at once when
        they reach an output's warm-up rows) and the rows run in groups: the same results,
        fewer kernel calls; an error while running surfaces at the push (or the ``flush``)
        that ran its rows."""
        self._lead = (slice(None),) * self.mem_dim
        """The index of every dim before ``mem_dim`` (a chunk's rows are ``(*lead, rows)``)."""
        self._dues = sorted(set(self.warmup))
        """The row counts at which an output may complete (its warm-up rows), ascending."""
        self._kept: list[set[tuple[Any, ...]]] | None = None
        """The last stream's ``_passed`` (kept over ``reset``): a new stream whose first
        chunks are like some of them skips the first push's checks too."""
        self._end_only = False
        """Whether a run of a complete stream's rows (every input at its declared length)
        completed no output: that depends on the program alone, not on the rows or how they
        were pushed, so later streams keep such rows for ``flush``, which runs them with the
        end padding in one step (one kernel call per node, not two)."""
        self.reset()

    @property
    def num_inputs(self) -> int:
        return len(self._runner.graph.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._runner.results)

    def streams_input(self, index: int) -> bool:
        """Whether input ``index`` arrives row by row (it has the streamed dim), not whole."""
        index = int_argument("index", index, 0, self.num_inputs - 1)
        return self._runner.streamed[index]

    def _result_dtype(self, value: SSAValue, raw: bool) -> np.dtype[Any]:
        """The dtype the runner returns for ``value`` (for the 0-row arrays)."""
        if not self._runner.integer:
            return np.dtype(self._runner.plan.dtype)
        if not raw:
            return np.dtype(np.float64)
        # the dtype run gives these codes (unsigned ones one size up), for 0-row arrays too
        return quant.code_dtype(width_of(value), signed=not is_unsigned(value))

    @property
    def output_axes(self) -> tuple[int | None, ...]:
        """Per output, the dim its rows come along: ``mem_dim``, or where a transpose moved
        it (a ``[N, C, T]`` stream permuted to ``[N, T, C]`` comes along dim 1); ``None`` for
        an output without it (given whole at ``flush()``)."""
        axes = self._runner.graph.axes
        return tuple(axes.get(v) for v in self._runner.results)

    def _empty(self, index: int, batch: int) -> np.ndarray | None:
        key = (index, batch)
        if key in self._empties:
            return self._empties[key]
        value = self._runner.results[index]
        t = value.type
        axis = self._runner.graph.axes.get(value)
        empty = None
        if isinstance(t, TensorType) and axis is not None:
            # the batch is dim 0 unless a transpose moved it: each dynamic dim is the batch
            shape = [batch if d == DYNAMIC_INDEX else d for d in t.get_shape()]
            shape[axis] = 0
            empty = np.zeros(shape, dtype=self._dtypes[index])
        self._empties[key] = empty  # no elements to change: one array serves every push
        return empty

    def _outputs(
        self, outs: Sequence[np.ndarray | None], batch: int | None = None
    ) -> list[np.ndarray | None]:
        """``outs`` with an empty array for each output with no rows yet, of the stream's
        batch (before the first push with rows: the batch of this push's 0-row arrays)."""
        b = self._batch if self._batch is not None else batch or 0
        return [self._empty(k, b) if y is None else y for k, y in enumerate(outs)]

    def _check(self, index: int, rows: Any) -> np.ndarray | None:
        """Input ``index``'s chunk as an array, checked against the input's dtype kind, rank
        and every dim but ``mem_dim`` (declared, or fixed by the first push with rows): once
        per dtype and shape (the rows aside) until that changes what is expected."""
        if rows is None:
            return None
        a = rows if type(rows) is np.ndarray and rows.dtype.kind in "fiu" else as_array(index, rows)
        declared = self._declared[index]
        if not self._runner.streamed[index] or declared is None:
            return a  # a whole input: the runner checks it as run does
        dim = self.mem_dim
        shape = a.shape
        key = (a.dtype, len(shape), shape[:dim], shape[dim + 1 :])  # (a rank-2 chunk: not 3)
        seen = self._seen[index]
        if key in seen:
            return a
        fixed = self._shape[index]
        want = fixed or declared
        if len(shape) != len(want) or any(
            w != DYNAMIC_INDEX and w != n and d != dim for d, (w, n) in enumerate(zip(want, shape))
        ):
            text = ["?" if d == dim or w == DYNAMIC_INDEX else str(w) for d, w in enumerate(want)]
            since = " (its other dims fixed by the first push with rows)" if fixed else ""
            raise ExecutionError(
                f"Streamer.push: input {index} has shape {tuple(shape)}, expected "
                f"{'x'.join(text)}{since}"
            )
        kind = "float" if a.dtype.kind == "f" else "integer"
        if self._kind[index] not in (None, kind):
            raise ExecutionError(
                f"Streamer.push: input {index} is {a.dtype} ({kind}), but this stream's earlier "
                f"rows were {self._kind[index]} (reset() starts a new stream)"
            )
        seen.add(key)
        return a

    def push(self, *rows: Any) -> list[np.ndarray | None]:
        """Feed the next rows of every input; return each output's rows that became ready."""
        passed = self._passed
        fresh = passed is None and self._batch is None and self._failed is None
        if fresh and not self._flushed:
            passed = self._kept  # (a new stream: its first chunks may be like the last's)
        if passed is not None and len(rows) == len(passed):
            # Chunks like ones that passed every check: only the row counts are news.
            dim = self.mem_dim
            for i, a in enumerate(rows):
                if (
                    type(a) is not np.ndarray
                    or a.ndim <= dim
                    or not a.shape[dim]
                    or (a.dtype, a.shape[:dim], a.shape[dim + 1 :]) not in passed[i]
                ):
                    break
            else:
                extent, counted = self._extent, self._rows
                for i in self._bounded:
                    if counted[i] + rows[i].shape[dim] > extent[i]:  # type: ignore[operator]
                        return self._push(rows)  # (it says why)
                if self._passed is None:
                    self._adopt(rows)
                for i, a in enumerate(rows):
                    counted[i] += a.shape[dim]
                outs = self._run(rows)
                return [e if y is None else y for e, y in zip(self._no_rows, outs)]
        return self._push(rows)

    def _adopt(self, rows: Sequence[np.ndarray]) -> None:
        """The first push of a stream, its chunks like ones the checks passed in an earlier
        stream (:attr:`_kept`): fix what those checks would fix (each input's shape and
        kind, the batch), as :meth:`_push` does, and take the earlier stream's learned
        chunks (its checks passed against the same fixed shapes)."""
        for i, a in enumerate(rows):
            self._shape[i] = a.shape
            self._kind[i] = "float" if a.dtype.kind == "f" else "integer"
        self._batch = rows[0].shape[0]
        self._passed = self._kept
        self._no_rows = [self._empty(k, self._batch) for k in range(self.num_outputs)]

    def _run(self, chunks: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
        """:meth:`_gathered` of checked ``chunks``; a failure ends the stream."""
        try:
            return self._gathered(chunks)
        except Exception as e:
            self._failed = f"{type(e).__name__}: {e}"
            self._passed = None
            raise

    def _gathered(self, chunks: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
        """The runner's push of checked ``chunks``, or, while gathering, their copies kept
        (the caller may reuse its arrays) until an input holds its group's rows."""
        if self.gather == 0:
            return self._runner._push_checked(chunks)
        full = False
        for i, c in enumerate(chunks):
            if c is not None:
                full = self._keep(i, c) or full
        dues, rows = self._dues, max(self._rows)
        if not full and (self._next_due >= len(dues) or rows < dues[self._next_due]):
            # (the rows run at once when they may complete an output: at its warm-up rows,
            # which are all the rows a declared length has)
            return [None] * self.num_outputs
        while self._next_due < len(dues) and rows >= dues[self._next_due]:
            self._next_due += 1
        complete = self._complete()
        if complete and self._end_only:
            return [None] * self.num_outputs  # (flush runs them with the end)
        outs = self._runner._push_checked(self._take_pending())
        if complete and all(y is None for y in outs):
            self._end_only = True
        return outs

    def _complete(self) -> bool:
        """Whether every input holds the rows its type declares: no push can add any."""
        return len(self._bounded) == self.num_inputs and all(
            self._rows[i] == self._extent[i] for i in self._bounded
        )

    def _keep(self, index: int, chunk: np.ndarray) -> bool:
        """Copy ``chunk`` after input ``index``'s gathered rows (one buffer of a group's
        rows, allocated when a group starts: no list of copies to join); whether the group
        is full. The first chunk of a stream sets the group's rows (``gather``, or about
        :data:`GATHER_ELEMENTS` values)."""
        dim, n = self.mem_dim, chunk.shape[self.mem_dim]
        group = self._group[index]
        if group is None:
            row = max(chunk.size // n, 1)  # (n >= 1: a chunk without rows is not kept)
            group = self.gather or max(1, min(MAX_GATHER, GATHER_ELEMENTS // row))
            self._group[index] = group
        held, buf = self._pending_rows[index], self._pending[index]
        if buf is None or chunk.dtype == buf.dtype:
            dtype = chunk.dtype
        else:
            dtype = np.result_type(buf.dtype, chunk.dtype)
        lead = self._lead
        if buf is None or held + n > buf.shape[dim] or dtype != buf.dtype:
            # A chunk past the group's end, or of a wider dtype (as a join would promote it).
            shape = (*chunk.shape[:dim], max(group, held + n), *chunk.shape[dim + 1 :])
            new = np.empty(shape, dtype)
            if held:
                new[(*lead, slice(0, held))] = self._held(index)
            self._pending[index] = buf = new
        buf[(*lead, slice(held, held + n))] = chunk
        self._pending_rows[index] = held + n
        return held + n >= group

    def _held(self, index: int) -> np.ndarray | None:
        """Input ``index``'s gathered rows (a view of its buffer; None: none)."""
        buf, held = self._pending[index], self._pending_rows[index]
        if buf is None or not held:
            return None
        return buf[(*self._lead, slice(0, held))]

    def _take_pending(self) -> list[np.ndarray | None]:
        """The gathered rows, one array per input (None: none), and nothing kept: the next
        group gets new buffers (the runner may hold views of these)."""
        rows = [self._held(i) for i in range(self.num_inputs)]
        self._pending = [None] * self.num_inputs
        self._pending_rows = [0] * self.num_inputs
        return rows

    def _push(self, rows: tuple[Any, ...]) -> list[np.ndarray | None]:
        """``push`` with every check (see :meth:`_learn` for what lets later chunks skip them)."""
        if self._failed is not None:
            raise ExecutionError(
                f"push after a failed push ({self._failed}): the stream has ended (reset() first)"
            )
        if self._flushed:
            raise ExecutionError("push after flush(): the stream has ended (reset() first)")
        if len(rows) != self.num_inputs:
            raise ExecutionError(
                f"Streamer.push takes {self.num_inputs} input(s) (one chunk each), got {len(rows)}"
            )
        dim, streamed = self.mem_dim, self._runner.streamed
        arrays = [self._check(i, r) for i, r in enumerate(rows)]
        # Chunks with no rows are no news: the runner wants None for them.
        chunks = [
            None if a is not None and streamed[i] and a.shape[dim] == 0 else a
            for i, a in enumerate(arrays)
        ]
        if all(c is None for c in chunks):
            batches = [a.shape[0] for a in arrays if a is not None and a.ndim]
            return self._outputs([None] * self.num_outputs, batches[0] if batches else None)
        for i in self._bounded:
            c, extent = chunks[i], self._extent[i]
            if c is not None and self._rows[i] + c.shape[dim] > extent:  # type: ignore[operator]
                raise ExecutionError(
                    f"Streamer.push: input {i} declares {extent} rows along dim {dim}; "
                    f"this push brings it to {self._rows[i] + c.shape[dim]}"
                )
        checked = self._runner.check(chunks)  # raises before any state changes
        for i, c in enumerate(chunks):
            if c is not None and streamed[i]:
                self._rows[i] += c.shape[dim]
                if self._shape[i] is None:
                    self._shape[i] = c.shape
                    self._kind[i] = "float" if c.dtype.kind == "f" else "integer"
                    self._seen[i].clear()  # what is expected changed
                    if self._batch is None:
                        self._batch = c.shape[0]
        outs = self._run(checked)
        self._learn(rows, checked)
        return self._outputs(outs)

    def _learn(self, rows: Sequence[Any], checked: Sequence[np.ndarray | None]) -> None:
        """After a push that every check passed: remember, per input, the (dtype, shape with
        the rows aside) of its chunk when a chunk like it passes them all again without a
        look at its values, so that ``push`` hands such chunks straight to the runner. That
        holds when the chunk was an array with rows that ``_check`` passed against the
        stream's fixed shape and kind (a chunk like it passes the same comparisons) and the
        runner's ``check`` took as it was (its dtype holds codes only:
        ``StreamRunner.passed_as_is``). Anything else, and every 0-row chunk, takes the checks."""
        if self._passed is None:
            if self._batch is None:
                return
            self._passed = self._kept = [set() for _ in rows]
            self._no_rows = [self._empty(k, self._batch) for k in range(self.num_outputs)]
        runner, dim = self._runner, self.mem_dim
        for i, (r, a) in enumerate(zip(rows, checked)):
            if (
                a is r
                and type(a) is np.ndarray
                and runner.streamed[i]
                and self._shape[i] is not None
                and a.ndim > dim
                and a.shape[dim]
            ):
                if (a.dtype, a.ndim, a.shape[:dim], a.shape[dim + 1 :]) in self._seen[i] and (
                    runner.passed_as_is(i, a)
                ):
                    self._passed[i].add((a.dtype, a.shape[:dim], a.shape[dim + 1 :]))

    def flush(self) -> list[np.ndarray | None]:
        """End the stream (its end padding) and return every output's remaining rows."""
        if self._failed is not None:
            raise ExecutionError(
                f"flush after a failed push ({self._failed}): the stream has ended (reset() first)"
            )
        if self._flushed:
            raise ExecutionError("flush() called twice (reset() starts a new stream)")
        streamed = [i for i in range(self.num_inputs) if self._runner.streamed[i]]
        missing = [i for i in streamed if self._shape[i] is None]
        if missing and len(missing) < len(streamed):  # nothing reading it ran: no rows out
            raise ExecutionError(
                f"flush: input {missing[0]} got no rows in this stream, input "
                f"{next(i for i in streamed if i not in missing)} did; push its rows first"
            )
        short = [
            i
            for i in streamed
            if self._extent[i] is not None
            and self._shape[i] is not None
            and self._rows[i] < self._extent[i]
        ]
        if short:
            i = short[0]
            raise ExecutionError(
                f"flush: input {i} declares {self._extent[i]} rows along dim {self.mem_dim}, got "
                f"{self._rows[i]}; push the rest first"
            )
        self._flushed = True
        self._passed = None
        try:
            # (the gathered rows and the end in one step; each output is a whole-stream
            # result while gathering: it comes once)
            last = self._take_pending() if any(self._pending_rows) else None
            outs = self._runner.finish(last)
        except Exception as e:  # (an input shorter than a window: the whole run's error)
            self._failed = f"{type(e).__name__}: {e}"
            raise
        return self._outputs(outs)

    def reset(self) -> None:
        """Start a new stream (the batch size may change), keeping the compiled kernels."""
        self._runner.reset()
        self._batch: int | None = None
        self._shape: list[tuple[int, ...] | None] = [None] * self.num_inputs
        self._kind: list[str | None] = [None] * self.num_inputs
        self._rows = [0] * self.num_inputs
        self._seen: list[set[tuple[Any, ...]]] = [set() for _ in range(self.num_inputs)]
        """Per input, the (dtype, rank, shape with the rows aside) of chunks ``_check``
        passed."""
        self._flushed = False
        self._failed: str | None = None
        self._passed: list[set[tuple[Any, ...]]] | None = None
        """Per input, the (dtype, shape with the rows aside) of chunks with rows that pass
        every check of ``_push`` without a look at their values (``_learn``); ``None`` until
        the batch is fixed, and once the stream has ended."""
        self._no_rows: list[np.ndarray | None] = []
        """Per output, what ``push`` returns for it when it got no rows (the stream's batch)."""
        self._pending: list[np.ndarray | None] = [None] * self.num_inputs
        """Per input, the buffer of its group's checked rows gathered and not run yet
        (``gather``): its first ``_pending_rows`` rows along ``mem_dim``."""
        self._pending_rows = [0] * self.num_inputs
        self._group: list[int | None] = [None] * self.num_inputs
        """Per input, the rows of a group in this stream (None: no chunk yet)."""
        self._next_due = 0
        """The first of ``_dues`` the rows run so far have not reached."""
