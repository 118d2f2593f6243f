"""``nanoir.Streamer``: feed a program its input rows as they arrive and get each output's rows
as soon as they can be computed (NanoEngine's incremental streaming inference).

    streamer = nanoir.Streamer(hw, mem_dim=2)
    for frame in microphone():                # [batch, channels, rows] along mem_dim
        (ready,) = streamer.push(frame)       # possibly 0 rows: still warming up
        ...
    (rest,) = streamer.flush()                # the end padding's rows
    streamer.reset()                          # a new stream, same compiled kernels

Each output's rows arrive exactly once and equal the whole-tensor run's rows
(``nanoir.run``), bit for bit at the nh level. What it holds between pushes is the stream
plan's caches (``nanoir.stream_plan``), so memory stays flat over an arbitrarily long stream;
``warmup`` says, per output, how many input rows it takes before its first row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nanoir.dialects.nh import width_of
from nanoir.lowering.analysis.plan import plan_function
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.stream import StreamRunner
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue

__all__ = ["Streamer"]


class Streamer:
    """A program run row by row along ``mem_dim`` as its input arrives.

    ``push(*rows)`` takes, per program input, the next rows along ``mem_dim`` (any number,
    also 0; an input without that dim is given whole, once) and returns, per program output,
    the rows that became ready: an array with 0 or more rows along ``mem_dim``, or ``None``
    for an output without that dim (a whole-stream result such as a pooled class score) until
    ``flush()``. ``flush()`` ends the stream and returns the rest; ``reset()`` starts a new
    stream with the same compiled kernels. ``raw=True`` returns nh codes instead of reals.
    """

    def __init__(
        self,
        module: ModuleOp | FuncOp,
        mem_dim: int = 2,
        *,
        function: str | None = None,
        dtype: Any = None,
        raw: bool = False,
    ):
        self._runner = StreamRunner(
            module, mem_dim=mem_dim, function=function, dtype=dtype, raw=raw
        )
        self.mem_dim = mem_dim
        results = self._runner.results
        plan = plan_function(self._runner.func, mem_dim, [(mem_dim, 1)])
        self.warmup: tuple[int, ...] = tuple(plan.warmup_rows.get(v, 0) for v in results)
        """Per output, the input rows it takes before its first row (its warm-up latency)."""
        self._dtypes = [self._result_dtype(v, raw) for v in results]
        self._batch: int | None = None
        self._flushed = False

    @property
    def num_inputs(self) -> int:
        return len(self._runner.graph.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._runner.results)

    def streams_input(self, index: int) -> bool:
        """Whether input ``index`` arrives row by row (it has the streamed dim), not whole."""
        return self._runner.streamed[index]

    def _result_dtype(self, value: SSAValue, raw: bool) -> np.dtype[Any]:
        """The dtype the runner returns for ``value`` (for the 0-row arrays)."""
        if not self._runner.integer:
            return np.dtype(self._runner.plan.dtype)
        if not raw:
            return np.dtype(np.float64)
        return np.dtype(f"int{max(8, width_of(value))}")

    def _empty(self, index: int) -> np.ndarray | None:
        value = self._runner.results[index]
        t = value.type
        if not isinstance(t, TensorType) or len(t.get_shape()) <= self.mem_dim:
            return None
        shape = [self._batch or 0, *t.get_shape()[1:]]
        shape[self.mem_dim] = 0
        return np.zeros(shape, dtype=self._dtypes[index])

    def _outputs(self, outs: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
        return [self._empty(k) if y is None else y for k, y in enumerate(outs)]

    def push(self, *rows: Any) -> list[np.ndarray | None]:
        """Feed the next rows of every input; return each output's rows that became ready."""
        if self._flushed:
            raise ExecutionError("push after flush(): the stream has ended (reset() first)")
        if len(rows) != self.num_inputs:
            raise ExecutionError(
                f"Streamer.push takes {self.num_inputs} input(s) (one chunk each), got {len(rows)}"
            )
        if self._batch is None:
            sizes = [np.shape(r)[0] for r in rows if r is not None and np.ndim(r)]
            self._batch = sizes[0] if sizes else None
        # Chunks with no rows are no news: the runner wants None for them.
        chunks = [
            None
            if r is not None
            and np.ndim(r) > self.mem_dim
            and np.shape(r)[self.mem_dim] == 0
            and self._runner.streamed[i]
            else r
            for i, r in enumerate(rows)
        ]
        if all(c is None for c in chunks):
            return [self._empty(k) for k in range(self.num_outputs)]
        return self._outputs(self._runner.push(*chunks))

    def flush(self) -> list[np.ndarray | None]:
        """End the stream (its end padding) and return every output's remaining rows."""
        if self._flushed:
            raise ExecutionError("flush() called twice (reset() starts a new stream)")
        self._flushed = True
        return self._outputs(self._runner.finish())

    def reset(self) -> None:
        """Start a new stream (the batch size may change), keeping the compiled kernels."""
        self._runner.reset()
        self._batch = None
        self._flushed = False
