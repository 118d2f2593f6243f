"""Where one node is along one dim, and which windows it fires: the one dataflow cursor that
both the stream planner's simulation and the streaming executor (``nanoir.runtime.stream``)
step, so that the executor's schedule is the plan's.

Counts are in *padded* rows: ``pad_begin`` zero rows, then the real rows received, then the
``pad_end`` zero rows once every operand has ended. While every cache holds its field the
node fires; each firing of ``count`` windows makes each result gain ``count * gain`` rows.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from nanoir.lowering.analysis.rules import StreamRule

__all__ = ["Firing", "NodeCursor"]


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
        return (
            max(lo, 0),
            min(hi, received),
            max(0, -lo),
            min(self.fed_end, max(0, hi - received)),
        )

    def first_needed(self, i: int) -> int:
        """The first real row of input ``i`` any later window reads."""
        return self.fired * self.rule.strides[i] - self.rule.pad_begin
