"""``nanoir.Streamer``'s ``gather``: a program whose every output is a whole-stream result
(pooled scores) has nothing to return before its input ends, so its rows are gathered and run
in groups. The stream must still equal the whole-tensor run bit for bit in any chunking and for
any ``gather``; a push returns what it would have (``None`` until the rows that complete the
scores, then the scores once); chunks are copied when kept (the caller may reuse its buffer); ``reset``
forgets what was gathered; a program with a streamed output gathers nothing by default."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.streamer import GATHER_ELEMENTS
from torch import nn
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.errors import ArgumentError
from nanoir.frontend import from_torch
from nanoir.testing.programs import examples, streaming_program

torch.set_num_threads(1)
LENGTH = 24


def _pooled(dynamic: bool, padding: int = 0) -> ModuleOp:
    """Conv1d -> ReLU -> dilated Conv1d -> ReLU -> global average pool -> flatten, 8-bit nh;
    ``dynamic``: its length dim made dynamic (the rows the type fixes: 24, 22 and 18);
    ``padding``: the first conv's (its last rows then need the stream's end)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(3, 4, 3, padding=padding),
        nn.ReLU(),
        nn.Conv1d(4, 5, 3, dilation=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool1d(1),
        nn.Flatten(),
    ).eval()
    x = torch.randn(4, 3, LENGTH)
    module = from_torch(model, x)
    nanoir.quantize(module, [x.numpy()], progress=False)
    text = str(lower_to_hw(module))
    if dynamic:
        text = re.sub(r"tensor<\?x(\d+)x(24|22|18)x", r"tensor<?x\1x?x", text)
    return nanoir.parse(text)


DECLARED, DYNAMIC = _pooled(False), _pooled(True)
PADDED = _pooled(False, padding=1)


def _stream(streamer: nanoir.Streamer, x: np.ndarray, cuts: list[int]) -> tuple[list, object]:
    """Push ``x`` cut at ``cuts`` (along dim 2), flush; (each push's result, flush's)."""
    bounds = [0, *sorted(c for c in cuts if 0 <= c <= x.shape[2]), x.shape[2]]
    pushed = [streamer.push(x[:, :, a:b])[0] for a, b in zip(bounds, bounds[1:])]
    return pushed, streamer.flush()[0]


LONGEST = 41
"""The dynamic program's lengths are 24..41: its pool's window is the 18 rows the two convs
leave of 24, and the program reads one window (a pool over the first 18 rows; from 42 rows
on the pool would make two, which its flatten does not take)."""
_STREAMERS: dict[tuple[bool, int | None], nanoir.Streamer] = {}


def _streamer(dynamic: bool, gather: int | None) -> nanoir.Streamer:
    """One Streamer per (program, gather), reset for each stream (built once: compiling the
    stream is most of an example's time)."""
    key = (dynamic, gather)
    if key not in _STREAMERS:
        _STREAMERS[key] = nanoir.Streamer(DYNAMIC if dynamic else DECLARED, raw=True, gather=gather)
    streamer = _STREAMERS[key]
    streamer.reset()
    return streamer


@settings(max_examples=examples(25), deadline=None)
@given(
    dynamic=st.booleans(),
    length=st.integers(LENGTH, LONGEST),
    gather=st.sampled_from([None, 1, 2, 5, 23, 24, 31, 32, 100]),
    cuts=st.lists(st.integers(0, 60), max_size=12),
    seed=st.integers(0, 2**16),
)
def test_gathered_streams_equal_the_whole_run(
    dynamic: bool, length: int, gather: int | None, cuts: list[int], seed: int
) -> None:
    """Any ``gather`` (the default included), any chunking (0-row pushes too): each push and
    the ``flush`` return what they return with ``gather=0`` (the scores on the same push:
    the one bringing the pool's last row, or the last declared row), and the scores equal
    the whole run's codes. Kills: gathered rows not run from the warm-up rows on (the scores
    a push late), nor at the last declared row, nor at ``flush``; gathered chunks joined in
    the wrong order or along the wrong dim; the counts not cleared after a run (rows run
    twice)."""
    hw = DYNAMIC if dynamic else DECLARED
    length = length if dynamic else LENGTH
    x = np.random.default_rng(seed).integers(-128, 128, (2, 3, length)).astype(np.int8)
    streamer = _streamer(dynamic, gather)
    assert streamer.gather == gather
    pushed, flushed = _stream(streamer, x, cuts)
    eager = _stream(_streamer(dynamic, 0), x, cuts)
    got = [*pushed, flushed]
    assert [y is None for y in got] == [y is None for y in [*eager[0], eager[1]]]
    arrived = [y for y in got if y is not None]
    assert len(arrived) == 1 and arrived[0].tobytes() == run(hw, x, raw=True)[0].tobytes()


def test_gathered_chunks_are_copies() -> None:
    """One buffer, refilled with the next frame after each push (as a capture loop does):
    the stream equals the whole run of the frames. Kills: a gathered chunk kept as the
    caller's array (every gathered row then reads the last frame)."""
    x = np.random.default_rng(1).integers(-128, 128, (2, 3, LENGTH)).astype(np.int8)
    streamer = nanoir.Streamer(DECLARED, raw=True)
    assert streamer.gather is None
    frame = np.empty((2, 3, 1), np.int8)
    got = []
    for t in range(x.shape[2]):
        frame[...] = x[:, :, t : t + 1]
        got.append(streamer.push(frame)[0])
    assert got[:-1] == [None] * (LENGTH - 1) and streamer.flush()[0] is None
    assert got[-1].tobytes() == run(DECLARED, x, raw=True)[0].tobytes()


def test_reset_forgets_gathered_rows() -> None:
    """Rows gathered and not run when ``reset`` starts a new stream (of another batch) are
    not part of it. Kills: ``reset`` keeping the gathered chunks."""
    rng = np.random.default_rng(2)
    streamer = nanoir.Streamer(DYNAMIC, raw=True, gather=8)
    streamer.push(rng.integers(-128, 128, (2, 3, 5)).astype(np.int8))
    streamer.reset()
    x = rng.integers(-128, 128, (3, 3, 30)).astype(np.int8)
    pushed, flushed = _stream(streamer, x, [4, 10])
    arrived = [y for y in [*pushed, flushed] if y is not None]
    assert len(arrived) == 1 and arrived[0].tobytes() == run(DYNAMIC, x, raw=True)[0].tobytes()


def _count_runs(streamer: nanoir.Streamer) -> list[int]:
    """The rows of each run of the streamer's runner, as they happen (the last ones run by
    ``finish``, with the end padding, at ``flush``)."""
    runner = streamer._runner
    calls: list[int] = []
    push, finish = runner._push_checked, runner.finish

    def counted(chunks):  # noqa: ANN001, ANN202
        calls.append(sum(c.shape[2] for c in chunks if c is not None))
        return push(chunks)

    def finished(chunks=None):  # noqa: ANN001, ANN202
        if chunks is not None:
            calls.append(sum(c.shape[2] for c in chunks if c is not None))
        return finish(chunks)

    runner._push_checked = counted  # type: ignore[method-assign]
    runner.finish = finished  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize(
    ("dynamic", "length", "runs"), [(False, 24, [8, 8, 8]), (True, 30, [8, 8, 8, 6])]
)
def test_one_row_pushes_run_in_groups(dynamic: bool, length: int, runs: list[int]) -> None:
    """Pushes of one row with ``gather=8``: the runner runs on groups of 8 rows (rows 8, 16,
    24), not on each; every row reaches it, the last ones at ``flush`` (the dynamic program);
    the scores come on the push of row 24. Kills: the gathered count not cleared after a run
    (every later push then runs at once), ``flush`` not running the gathered rows."""
    hw = DYNAMIC if dynamic else DECLARED
    streamer = nanoir.Streamer(hw, raw=True, gather=8)
    calls = _count_runs(streamer)
    x = np.random.default_rng(3).integers(-128, 128, (2, 3, length)).astype(np.int8)
    got = [streamer.push(x[:, :, t : t + 1])[0] for t in range(length)]
    assert streamer.flush()[0] is None
    assert calls == runs
    assert [t for t, y in enumerate(got) if y is not None] == [LENGTH - 1]
    assert got[LENGTH - 1].tobytes() == run(hw, x, raw=True)[0].tobytes()


def test_a_stream_that_completes_at_flush_runs_its_last_rows_with_the_end() -> None:
    """A declared length whose scores need the end padding (a padded conv): the first stream
    runs its rows at the push of the last row (where scores may be due) and none come; later
    streams keep those rows for ``flush``, which runs them and the end in one step. A
    program whose scores come at that push (no padding) keeps running them there. Each
    stream equals the whole run, its pushes return ``None``, the scores come once. Kills:
    the rows kept in a stream whose scores were due at the push (they come at ``flush``);
    ``flush`` not running the kept rows."""
    for hw, at_push in ((PADDED, False), (DECLARED, True)):
        streamer = nanoir.Streamer(hw, raw=True, gather=100)
        runner = streamer._runner
        calls: list[str] = []
        push, finish = runner._push_checked, runner.finish

        def pushed(chunks, push=push):  # noqa: ANN001, ANN202
            calls.append("push")
            return push(chunks)

        def finished(chunks=None, finish=finish):  # noqa: ANN001, ANN202
            calls.append("finish" if chunks is None else "finish with rows")
            return finish(chunks)

        runner._push_checked, runner.finish = pushed, finished  # type: ignore[method-assign]
        rng = np.random.default_rng(11)
        for stream in range(3):
            calls.clear()
            streamer.reset()
            x = rng.integers(-128, 128, (2, 3, LENGTH)).astype(np.int8)
            got = [streamer.push(x[:, :, t : t + 6])[0] for t in range(0, LENGTH, 6)]
            flushed = streamer.flush()[0]
            want = run(hw, x, raw=True)[0].tobytes()
            if at_push:
                assert got[-1].tobytes() == want and flushed is None
                assert calls == ["push", "finish"]
            else:
                assert all(y is None for y in got) and flushed.tobytes() == want
                assert calls == (["push", "finish"] if stream == 0 else ["finish with rows"])


def test_default_groups_hold_about_gather_elements_values() -> None:
    """By default a group holds the rows that make about ``GATHER_ELEMENTS`` values: at a
    batch of 2730 (8190 values a row) 8 rows. A push past a group's end runs the whole
    push (5 + 5 rows: one run of 10); int8 codes join uint8 ones (which the checks widen).
    Kills: a group counted in rows whatever the batch, a chunk cut at the group's end (rows
    lost), the gathered rows run twice or not at all."""
    batch = 2730
    assert GATHER_ELEMENTS // (3 * batch) == 8
    streamer = nanoir.Streamer(DYNAMIC, raw=True)
    calls = _count_runs(streamer)
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (batch, 3, 30)).astype(np.int8)
    x[:, :, :5] = np.abs(x[:, :, :5].astype(np.int16)).clip(0, 127)
    pieces = [x[:, :, :5].astype(np.uint8), x[:, :, 5:10], x[:, :, 10:11], x[:, :, 11:30]]
    got = [streamer.push(p)[0] for p in pieces]
    flushed = streamer.flush()[0]
    assert calls == [10, 20]  # (the last push passes the warm-up row 24: 1 + 19 rows run)
    arrived = [y for y in [*got, flushed] if y is not None]
    assert len(arrived) == 1 and arrived[0].tobytes() == run(DYNAMIC, x, raw=True)[0].tobytes()


def test_each_warm_up_runs_the_rows_at_once() -> None:
    """Outputs due at different row counts (here 5 and 24, set as a program with two heads
    would have them): the gathered rows run at row 5 and at row 24 whatever ``gather`` says,
    and in groups of 8 between. Kills: only the first warm-up run at once (``_next_due`` not
    advanced, or advanced past every due at once)."""
    streamer = nanoir.Streamer(DECLARED, raw=True, gather=8)
    streamer._dues = [5, 24]
    calls = _count_runs(streamer)
    x = np.random.default_rng(5).integers(-128, 128, (2, 3, LENGTH)).astype(np.int8)
    got = [streamer.push(x[:, :, t : t + 1])[0] for t in range(LENGTH)]
    assert calls == [5, 8, 8, 3]
    assert got[-1].tobytes() == run(DECLARED, x, raw=True)[0].tobytes()


def test_a_streamed_output_gathers_nothing_by_default() -> None:
    """A program with an output along the streamed dim returns rows as they are ready: its
    default ``gather`` is 0, and a push that completes a window returns its row."""
    module = nanoir.parse(streaming_program())
    x = np.random.default_rng(0).standard_normal((2, 4, 24)).astype(np.float32)
    nanoir.quantize(module, [x], progress=False)
    hw = lower_to_hw(module)
    streamer = nanoir.Streamer(hw)
    assert streamer.gather == 0
    ys = [streamer.push(x[:, :, t : t + 1]) for t in range(12)]
    assert any(y is not None and y.shape[2] for out in ys for y in out)


@pytest.mark.parametrize("bad", [-1, 2**20 + 1, 2.5, "8", True])
def test_a_bad_gather_is_one_argument_error(bad: object) -> None:
    with pytest.raises(ArgumentError, match="gather"):
        nanoir.Streamer(DYNAMIC, gather=bad)  # type: ignore[arg-type]


def test_a_group_keeps_its_buffer_across_pushes() -> None:
    """int8 chunks after a first chunk the checks widened (uint8 -> int64) go into the
    group's int64 buffer as they are: one buffer for the group, not a new one (and a copy
    of every held row) per push. Kills: a new buffer whenever the chunk's dtype differs
    from the buffer's (quadratic in the group's rows)."""
    streamer = nanoir.Streamer(DYNAMIC, raw=True)
    rng = np.random.default_rng(11)
    x = rng.integers(0, 128, (2, 3, 30)).astype(np.int8)
    streamer.push(x[:, :, :5].astype(np.uint8))
    buffers = []
    for t in range(5, 20):
        streamer.push(x[:, :, t : t + 1])
        buffers.append(id(streamer._pending[0]))
    assert len(set(buffers)) == 1
    got = [streamer.push(x[:, :, 20:])[0], streamer.flush()[0]]
    arrived = [y for y in got if y is not None]
    assert len(arrived) == 1 and arrived[0].tobytes() == run(DYNAMIC, x, raw=True)[0].tobytes()
