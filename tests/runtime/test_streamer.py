"""``nanoir.Streamer``: rows pushed in any chunking (0 rows included) come out exactly once and
equal the whole-tensor run bit for bit (nh codes) and exactly (nf); an output without the
streamed dim arrives at ``flush``; ``warmup`` is the input rows before an output's first row
(checked against the rows actually pushed); reset starts a new stream with another batch;
memory stays flat over a long stream; misuse is a clear ``ExecutionError``."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.interpreter import run
from torch import nn
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.programs import examples, streaming_program

torch.set_num_threads(1)


def _programs() -> tuple[ModuleOp, ModuleOp]:
    module = nanoir.parse(streaming_program())
    x = np.random.default_rng(0).standard_normal((2, 4, 24)).astype(np.float32)
    nanoir.quantize(module, [x], act_bits=8, weight_bits=4)
    nq_copy = module.clone()
    return nq_copy, lower_to_hw(module)


NQ, HW = _programs()


def _feed(streamer: nanoir.Streamer, x: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    """Push ``x`` cut at ``cuts`` along dim 2, flush, and join each output's pieces."""
    bounds = [0, *sorted(c for c in cuts if 0 <= c <= x.shape[2]), x.shape[2]]
    pieces: list[list[np.ndarray]] = [[] for _ in range(streamer.num_outputs)]
    for a, b in zip(bounds, bounds[1:]):
        for k, y in enumerate(streamer.push(x[:, :, a:b])):
            if y is not None:
                pieces[k].append(y)
    for k, y in enumerate(streamer.flush()):
        assert y is not None
        pieces[k].append(y)
    return [np.concatenate(p, axis=2) for p in pieces]


SHORTEST = 5
"""The shortest input the whole run takes: ``h`` keeps the input's length and c3's window is
5 rows, so 5 rows give c3 one row and 4 rows are refused (as torch's conv refuses a kernel
longer than its input)."""


@pytest.mark.parametrize("length", range(SHORTEST, 9))
@pytest.mark.parametrize("chunking", ["whole", "rows", "zero-rows"])
def test_short_streams_equal_the_whole_run(length: int, chunking: str) -> None:
    """Streams of 5 to 8 rows, pushed at once, row by row, or after 0-row pushes: the rows
    that fire only at flush (c3's first window, for 5 and 6 rows) come out as the whole
    run's.

    kills: a node that has not fired before the inputs end never firing on its last arrivals
    (in the stream executor and the row cursor); the property test drew no stream shorter than
    7 rows and missed it."""
    x = np.random.default_rng(length).standard_normal((2, 4, length)).astype(np.float32)
    cuts = {"whole": [], "rows": list(range(length)), "zero-rows": [0, 0, 1, 1, length]}
    for raw in (False, True):
        got = _feed(nanoir.Streamer(HW, mem_dim=2, raw=raw), x, cuts[chunking])
        want = run(HW, x, raw=raw)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("length", range(1, SHORTEST))
@pytest.mark.parametrize("program", ["nh", "nq"])
def test_a_stream_shorter_than_a_window_is_refused_alike(length: int, program: str) -> None:
    """1 to 4 rows: c3's 5-row window does not fit. The whole run refuses them naming the
    conv (as torch's conv refuses an input shorter than its kernel), and ``Streamer.flush``
    with the very same message (it returned the rows of ``h`` and none of c3, with no
    error); the stream has ended after it.

    kills (each run): a node whose inputs end before it ever fired giving nothing (the old
    flush), the nh conv's size check letting a window one row too long give no rows."""
    module = HW if program == "nh" else NQ
    x = np.zeros((1, 4, length), np.float32)
    with pytest.raises(ExecutionError) as whole:
        run(module, x)
    assert "nh.conv" in str(whole.value) or "nf.conv" in str(whole.value)
    streamer = nanoir.Streamer(module, mem_dim=2)
    for t in range(length):
        streamer.push(x[:, :, t : t + 1])
    with pytest.raises(ExecutionError) as streamed:
        streamer.flush()
    assert str(streamed.value) == str(whole.value)
    with pytest.raises(ExecutionError, match="the stream has ended"):
        streamer.push(x[:, :, :1])


CONV2D_POOL = """\
func.func @main(%x: tensor<?x1x?x4xf32>) -> (tensor<?x2x?x2xf32>, tensor<?x1x?x2xf32>) {
  %w = nf.constant "w" dense<0.5> : tensor<2x1x3x3xf32>
  %c = nf.conv %x, %w : (tensor<?x1x?x4xf32>, tensor<2x1x3x3xf32>) -> tensor<?x2x?x2xf32>
  %p = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
      : tensor<?x1x?x4xf32> -> tensor<?x1x?x2xf32>
  func.return %c, %p : tensor<?x2x?x2xf32>, tensor<?x1x?x2xf32>
}
"""


@pytest.mark.parametrize("length", [1, 2])
def test_a_window_that_never_fills_ends_like_the_whole_run(length: int) -> None:
    """A 2-d conv and a pool (nodes of the general window path, not the 1-d fast path): one
    or two rows are too short for the 3-row conv; the whole run and ``flush`` fail with the
    same message, naming the conv (the pool's row, if any, was streamed before).

    kills: the general path's node that never fired giving nothing at the end."""
    module = nanoir.parse(CONV2D_POOL)
    x = np.arange(length * 4, dtype=np.float32).reshape(1, 1, length, 4)
    with pytest.raises(ExecutionError) as whole:
        run(module, x)
    streamer = nanoir.Streamer(module, mem_dim=2)
    for t in range(length):
        streamer.push(x[:, :, t : t + 1])
    with pytest.raises(ExecutionError) as streamed:
        streamer.flush()
    assert str(streamed.value) == str(whole.value) and "nf.conv" in str(whole.value)


@settings(max_examples=examples(20), deadline=None)
@given(
    st.integers(1, 3),
    st.integers(SHORTEST, 40),
    st.lists(st.integers(0, 40), max_size=12),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_any_chunking_equals_the_whole_run(
    batch: int, length: int, cuts: list[int], raw: bool, seed: int
) -> None:
    """Every length the whole run takes (it skipped those below 7 rows), any cuts, 0-row
    pushes included; :func:`test_short_streams_equal_the_whole_run` holds the short ones."""
    x = np.random.default_rng(seed).standard_normal((batch, 4, length)).astype(np.float32)
    streamer = nanoir.Streamer(HW, mem_dim=2, raw=raw)
    got = _feed(streamer, x, cuts)
    want = run(HW, x, raw=raw)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()
    # The same streamer again, after reset, with another batch size and chunking.
    streamer.reset()
    x2 = np.concatenate([x, x[:1]], axis=0)
    got2 = _feed(streamer, x2, [c // 2 for c in cuts])
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got2, run(HW, x2, raw=raw)))


def test_float_programs_stream_too() -> None:
    x = np.random.default_rng(1).standard_normal((2, 4, 17)).astype(np.float32)
    got = _feed(nanoir.Streamer(NQ), x, [1, 2, 3, 9, 9, 16])
    for g, w in zip(got, run(NQ, x)):
        np.testing.assert_array_equal(g, w)


def test_warmup_is_the_rows_before_the_first_row() -> None:
    streamer = nanoir.Streamer(HW)
    x = np.random.default_rng(2).standard_normal((1, 4, 30)).astype(np.float32)
    first: list[int | None] = [None] * streamer.num_outputs
    for t in range(x.shape[2]):
        for k, y in enumerate(streamer.push(x[:, :, t : t + 1])):
            assert y is not None and y.shape[0] == 1 and y.shape[1] in (3, 5)
            if first[k] is None and y.shape[2] > 0:
                first[k] = t + 1
    assert tuple(first) == streamer.warmup
    # By hand: c1 (k3, p1) row j reads x row j+1, so it exists after j+2 input rows; c2 (k3,
    # d2, p2) row j reads c1 row j+2: h row j exists after j+4 input rows. The transposed conv
    # (k4, s2, p1) emits its first rows from h rows 0 and 1 (5 input rows); c3 (k5, no pad)
    # needs h rows 0..4 (8 input rows).
    assert streamer.warmup == (5, 8)
    report = nanoir.stream_plan(HW).report()
    section = report.split("warm-up latency")[1].split("first row of every result")[0]
    assert [line.split()[-1] for line in section.strip().splitlines()[2:]] == ["5", "8"]


def test_an_output_without_the_dim_arrives_once() -> None:
    """A pooled, flattened score has no streamed dim: it is ``None`` until the last input
    row has arrived, then comes once (here on the last push; ``flush`` adds nothing)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten()
    ).eval()
    x = torch.randn(2, 3, 9)
    nf_module = from_torch(model, x)
    nanoir.quantize(nf_module, [x.numpy()])
    hw = lower_to_hw(nf_module)
    streamer = nanoir.Streamer(hw)
    arrived = []
    for t in range(9):
        (y,) = streamer.push(x.numpy()[:, :, t : t + 1])
        if y is not None:
            arrived.append((t, y))
    (rest,) = streamer.flush()
    assert rest is None
    assert [t for t, _ in arrived] == [8]
    assert arrived[0][1].tobytes() == run(hw, x.numpy())[0].tobytes()


def test_memory_stays_flat_over_a_long_stream() -> None:
    """After a warm-up (NumPy fills internal caches over the first ~2000 calls; measured flat
    from there to 20000 frames), 3000 more frames leave traced memory where it was: a leak of
    even 8 bytes a frame would show."""
    streamer = nanoir.Streamer(HW, raw=True)
    frame = np.random.default_rng(3).standard_normal((1, 4, 1)).astype(np.float32)
    tracemalloc.start()
    try:
        marks = []
        for t in range(5000):
            streamer.push(frame)
            if t in (1999, 4999):
                marks.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert abs(marks[1] - marks[0]) < 16 * 1024, marks


def test_misuse_is_a_clear_error() -> None:
    streamer = nanoir.Streamer(HW)
    x = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(ExecutionError, match="takes 1 input"):
        streamer.push(x, x)
    streamer.push(x)
    streamer.flush()
    with pytest.raises(ExecutionError, match="reset"):
        streamer.push(x)
    with pytest.raises(ExecutionError, match="reset"):
        streamer.flush()
    streamer.reset()
    streamer.push(x)
    with pytest.raises(ExecutionError, match="shape"):
        streamer.push(np.zeros((1, 5, 2), np.float32))
