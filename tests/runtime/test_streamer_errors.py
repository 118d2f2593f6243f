"""``nanoir.Streamer`` refuses a push exactly when ``nanoir.run`` refuses the same input, with a
``nanoir.Error`` and before anything runs (the stream goes on without it); what it accepts,
+-inf included, streams equal to the whole run bit for bit (nq, nh; nf float32 sums in
another order, so to 1e-5). ``mem_dim`` is an int in
2..rank-1 of the streamed inputs (the issue says 1..rank-1, but the stream plan never
splits dim 1, the channels, and streaming along it failed deep in a kernel).

Mutants this file catches (each applied in a copy and seen to fail the named tests):

- ``quantize_inputs`` without its NaN check (an nh NaN push is the bare ValueError of
  ``quantize_to_int`` again): the property and ``test_nan_is_a_nanoir_error_in_run_and_push``;
- ``Streamer._check`` without the dim comparison (a 0-row push with 5 channels accepted):
  the property and ``test_a_zero_row_push_is_checked_and_fixes_no_batch``;
- 0-row chunks handed to the runner (``== 0`` in the chunk filter made ``== -1``, so a 0-row
  push fixes the batch): the same two;
- the shape never fixed (``if False`` for the first push with rows): the 0-row test;
- the dtype kind unchecked: the property and the 0-row test;
- the shapes fixed before the runner's checks, so an nh NaN push that is refused still fixes
  the batch: the property;
- ``StreamRunner._nan_refused`` all False (an nq NaN push fails mid-step and ends the stream):
  ``test_an_nq_nan_push_is_refused_up_front``;
- ``check_mem_dim`` without its range check: ``test_mem_dim_must_be_a_streamed_dim``;
- ``Streamer.push`` not recording a failure while running (``self._failed`` left None):
  ``test_a_push_that_fails_while_running_ends_the_stream``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.programs import examples, streaming_program

LONG_ENOUGH = 7
"""Rows the whole run needs at least (c3's window reads 5 rows of h)."""


def _programs() -> dict[str, ModuleOp]:
    nf = nanoir.parse(streaming_program())
    module = nanoir.parse(streaming_program())
    x = np.random.default_rng(0).standard_normal((2, 4, 24)).astype(np.float32)
    nanoir.quantize(module, [x], act_bits=8, weight_bits=4)
    return {"nf": nf, "nq": module.clone(), "nh": lower_to_hw(module)}


PROGRAMS = _programs()


def _refused_by_run(program: ModuleOp, a: np.ndarray) -> bool:
    """Whether ``nanoir.run`` refuses ``a`` as (the start of) a whole input, padded with zero
    rows to a length the program takes; any error other than ``nanoir.Error`` propagates."""
    filler = np.zeros((*a.shape[:2], LONG_ENOUGH), dtype=a.dtype)
    try:
        nanoir.run(program, np.concatenate([a, filler], axis=2))
    except nanoir.Error:
        return True
    return False


@st.composite
def _chunk(draw: st.DrawFn) -> np.ndarray | None:
    """One push: mostly well formed, sometimes with the wrong rank, channels or batch, +-inf,
    NaN, integer codes (some out of i8), or no array at all."""
    if draw(st.integers(0, 15)) == 0:
        return None
    rows = draw(st.integers(0, 6))
    batch = draw(st.sampled_from([2, 2, 2, 2, 1, 3]))
    channels = draw(st.sampled_from([4, 4, 4, 4, 4, 3, 5]))
    rank = draw(st.sampled_from([3] * 8 + [2, 4]))
    shape = {2: (batch, channels), 3: (batch, channels, rows), 4: (batch, channels, rows, 1)}
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.int16]))
    if dtype == np.int16:
        a = rng.integers(-128, 128, size=shape[rank]).astype(np.int16)
        if a.size and draw(st.integers(0, 3)) == 0:
            a.flat[draw(st.integers(0, a.size - 1))] = 300  # not an i8 code
        return a
    a = (rng.standard_normal(shape[rank]) * 2).astype(dtype)
    for special in draw(st.lists(st.sampled_from([np.inf, -np.inf, np.nan]), max_size=2)):
        if a.size:
            a.flat[draw(st.integers(0, a.size - 1))] = special
    return a


def _kind(a: np.ndarray) -> str:
    return "float" if a.dtype.kind == "f" else "integer"


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(sorted(PROGRAMS)), st.lists(_chunk(), max_size=8))
def test_a_push_is_refused_exactly_when_run_refuses(
    level: str, chunks: list[np.ndarray | None]
) -> None:
    """The oracle is written here: the wrong rank or channel count, a batch or dtype kind
    other than the first push with rows had, or an input ``nanoir.run`` refuses (NaN at the
    nh and nq levels, a code outside i8 at nh); whatever is accepted streams equal to the
    whole run of the accepted rows."""
    program = PROGRAMS[level]
    streamer = nanoir.Streamer(program, mem_dim=2)
    batch: int | None = None
    kind: str | None = None
    accepted: list[np.ndarray] = []
    pieces: list[list[np.ndarray]] = [[], []]

    def keep(outs: list[np.ndarray | None], b: int) -> None:
        for k, y in enumerate(outs):
            assert y is not None and y.ndim == 3
            if y.shape[2]:
                pieces[k].append(y)
            else:
                assert y.shape[0] == b  # an empty array of the stream's batch

    for a in chunks:
        if a is None:
            refused = False
        elif a.ndim != 3 or a.shape[1] != 4:
            refused = True
            if a.ndim == 3:
                assert _refused_by_run(program, a)
        elif (batch is not None and a.shape[0] != batch) or kind not in (None, _kind(a)):
            refused = True  # not one whole input with the rows before it
        else:
            refused = _refused_by_run(program, a)
            nan = a.dtype.kind == "f" and bool(np.isnan(a).any())
            if level != "nf" and nan:
                assert refused  # the levels that quantize the input refuse NaN
        event(f"{level} push {'refused' if refused else 'accepted'}")
        if refused:
            with pytest.raises(nanoir.Error):
                streamer.push(a)
            continue
        outs = streamer.push(a)
        if a is not None and a.shape[2]:
            batch = batch if batch is not None else a.shape[0]
            kind = kind or _kind(a)
            accepted.append(a)
        keep(outs, batch if batch is not None else (a.shape[0] if a is not None else 0))
    # Make the stream long enough for the whole run, then end it.
    last = np.ones((batch or 2, 4, LONG_ENOUGH), np.int16 if kind == "integer" else np.float32)
    accepted.append(last)
    keep(streamer.push(last), batch or 2)
    keep(streamer.flush(), batch or 2)
    whole = np.concatenate(accepted, axis=2)
    want = nanoir.run(program, whole)
    for k, w in enumerate(want):
        got = np.concatenate(pieces[k], axis=2)
        assert got.dtype == w.dtype and got.shape == w.shape
        if level == "nf":  # float32 sums in another order (and NaN passes through)
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5, equal_nan=True)
        else:
            assert got.tobytes() == w.tobytes()


def test_nan_is_a_nanoir_error_in_run_and_push() -> None:
    """nh programs quantize float inputs; NaN has no code: ``run``, ``stream`` and a push say
    so with an ``ExecutionError`` naming the input and where, and the stream goes on."""
    x = np.random.default_rng(1).standard_normal((2, 4, 9)).astype(np.float32)
    bad = x.copy()
    bad[1, 2, 3] = np.nan
    hw = PROGRAMS["nh"]
    for call in (
        lambda: nanoir.run(hw, bad),
        lambda: nanoir.stream(hw, [bad]),
        lambda: nanoir.Streamer(hw).push(bad),
    ):
        with pytest.raises(nanoir.Error, match=r"input 0 has NaN at index \(1, 2, 3\)"):
            call()
    streamer = nanoir.Streamer(hw)
    with pytest.raises(nanoir.Error):
        streamer.push(bad)
    got = [np.concatenate(p, axis=2) for p in zip(streamer.push(x), streamer.flush())]
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, nanoir.run(hw, x)))


def test_an_nq_nan_push_is_refused_up_front() -> None:
    """An nq program's input feeds ``nq.fake_quant`` only, which refuses NaN: the push says so
    before any window runs, so the stream is not left half-stepped and goes on."""
    x = np.random.default_rng(2).standard_normal((2, 4, 9)).astype(np.float32)
    bad = x[:, :, :2].copy()
    bad[0, 0, 1] = np.nan
    nq = PROGRAMS["nq"]
    with pytest.raises(nanoir.Error):
        nanoir.run(nq, np.concatenate([bad, x], axis=2))
    streamer = nanoir.Streamer(nq)
    parts = [streamer.push(x[:, :, :3])]
    with pytest.raises(nanoir.Error, match=r"input 0 has NaN at index \(0, 0, 1\)"):
        streamer.push(bad)
    parts += [streamer.push(x[:, :, 3:]), streamer.flush()]
    for k, w in enumerate(nanoir.run(nq, x)):
        assert np.concatenate([p[k] for p in parts], axis=2).tobytes() == w.tobytes()


def test_a_zero_row_push_is_checked_and_fixes_no_batch() -> None:
    x = np.random.default_rng(3).standard_normal((2, 4, 8)).astype(np.float32)
    hw = PROGRAMS["nh"]
    streamer = nanoir.Streamer(hw)
    with pytest.raises(nanoir.Error, match=r"input 0 has shape \(2, 5, 0\), expected \?x4x\?"):
        streamer.push(np.zeros((2, 5, 0), np.float32))
    empty = streamer.push(np.zeros((3, 4, 0), np.float32))  # batch 3, but no rows
    assert [y.shape for y in empty] == [(3, 3, 0), (3, 5, 0)]
    first = streamer.push(x[:, :, :4])  # the first push with rows fixes batch 2
    with pytest.raises(nanoir.Error, match=r"input 0 has shape \(3, 4, 0\), expected 2x4x\?"):
        streamer.push(np.zeros((3, 4, 0), np.float32))
    with pytest.raises(nanoir.Error, match=r"input 0 has shape \(1, 4, 2\), expected 2x4x\?"):
        streamer.push(x[:1, :, 4:6])
    with pytest.raises(nanoir.Error, match="int16 .integer., but this stream's earlier rows"):
        streamer.push(np.zeros((2, 4, 1), np.int16))
    assert [y.shape for y in streamer.push(x[:, :, 4:4])] == [(2, 3, 0), (2, 5, 0)]
    rest, end = streamer.push(x[:, :, 4:]), streamer.flush()
    for k, w in enumerate(nanoir.run(hw, x)):
        assert np.concatenate([first[k], rest[k], end[k]], axis=2).tobytes() == w.tobytes()
    streamer.reset()  # a new stream may have another batch
    assert streamer.push(x[:1, :, :2])[0].shape[0] == 1


@pytest.mark.parametrize(
    ("mem_dim", "message"),
    [
        (-1, r"mem_dim must be a spatial dim .* in 2\.\.rank-1 .* got -1"),
        (0, r"mem_dim must be .* in 2\.\.rank-1 \(dim 0 is the batch, .* got 0"),
        (1, r"mem_dim must be .* in 2\.\.rank-1 \(.*dim 1 the channels; .* got 1"),
        (3, r"mem_dim must be .* in 2\.\.rank-1 .*input ranks: 3\), got 3"),
        ("2", "mem_dim must be an int, got str '2'"),
        (None, "mem_dim must be an int, got NoneType"),
        (2.0, "mem_dim must be an int, got float"),
        (True, "mem_dim must be an int, got bool"),
    ],
)
def test_mem_dim_must_be_a_streamed_dim(mem_dim: object, message: str) -> None:
    for level in ("nh", "nf"):
        with pytest.raises(nanoir.errors.ArgumentError, match=message):
            nanoir.Streamer(PROGRAMS[level], mem_dim)  # type: ignore[arg-type]
        with pytest.raises(nanoir.errors.ArgumentError, match=message):
            x = np.zeros((1, 4, 8), np.float32)
            nanoir.stream(PROGRAMS[level], [x], mem_dim=mem_dim)  # type: ignore[arg-type]
    assert nanoir.Streamer(PROGRAMS["nh"], np.int64(2)).mem_dim == 2


def test_inf_streams_equal_to_the_whole_run() -> None:
    """+-inf saturates where the input is quantized (nh, nq) and passes through nf: the same
    either way, at every level."""
    x = np.random.default_rng(4).standard_normal((2, 4, 12)).astype(np.float32)
    x[0, 1, 2], x[1, 3, 7], x[0, 0, 11] = np.inf, -np.inf, np.inf
    for level, program in PROGRAMS.items():
        streamer = nanoir.Streamer(program)
        parts = [streamer.push(x[:, :, a : a + 3]) for a in range(0, 12, 3)] + [streamer.flush()]
        for k, w in enumerate(nanoir.run(program, x)):
            got = np.concatenate([p[k] for p in parts], axis=2)
            if level == "nf":  # float32 sums in another order
                np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5, equal_nan=True)
            else:
                assert np.isfinite(got).all() and got.tobytes() == w.tobytes(), level


RELU_THEN_QUANT = """func.func @main(%x: tensor<?x2x?xf32>) -> tensor<?x2x?xf32> {
  %r = nf.relu %x : tensor<?x2x?xf32>
  %q = nq.fake_quant %r {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x?xf32>
  func.return %q : tensor<?x2x?xf32>
}"""


def test_a_push_that_fails_while_running_ends_the_stream() -> None:
    """Here the input reaches its fake-quant through a relu, so a NaN is found only by the
    window that quantizes it: that push raises, and so does every later push or flush (the
    caches are half stepped) until ``reset``, after which the stream is as new."""
    module = nanoir.parse(RELU_THEN_QUANT)
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 4) / 8
    bad = x.copy()
    bad[0, 1, 2] = np.nan
    with pytest.raises(nanoir.Error, match="contains NaN"):
        nanoir.run(module, bad)
    streamer = nanoir.Streamer(module)
    streamer.push(x)
    with pytest.raises(nanoir.Error, match="contains NaN"):
        streamer.push(bad)
    with pytest.raises(nanoir.Error, match="push after a failed push .*reset"):
        streamer.push(x)
    with pytest.raises(nanoir.Error, match="flush after a failed push .*reset"):
        streamer.flush()
    streamer.reset()
    (got,) = streamer.push(x)
    assert got.tobytes() == nanoir.run(module, x)[0].tobytes()


def test_a_static_stream_length_is_enforced() -> None:
    """An input whose type fixes its rows along ``mem_dim`` (here 6) has no whole run of
    another length to equal: a push past 6 rows is refused before it runs (the stream goes
    on), and ``flush`` before 6 rows is refused; 6 rows stream equal to the whole run.
    Mutants seen to fail it: the push check removed (a 7th row accepted); the flush check removed (3 rows flushed as if the stream were
    complete); rows counted per push instead of summed (every 1-row push passes)."""
    module = nanoir.parse(
        "func.func @main(%x: tensor<?x2x6xf32>) -> tensor<?x2x6xf32> {\n"
        "  %y = nf.relu %x : tensor<?x2x6xf32>\n"
        "  func.return %y : tensor<?x2x6xf32>\n}\n"
    )
    x = np.random.default_rng(3).standard_normal((1, 2, 7)).astype(np.float32)
    s = nanoir.Streamer(module, mem_dim=2)
    rows = [s.push(x[:, :, t : t + 1])[0] for t in range(6)]
    with pytest.raises(nanoir.Error, match="declares 6 rows along dim 2; this push brings it to 7"):
        s.push(x[:, :, 6:7])
    rows.append(s.flush()[0])
    np.testing.assert_array_equal(np.concatenate(rows, axis=2), np.maximum(x[:, :, :6], 0))
    s.reset()
    s.push(x[:, :, :3])
    with pytest.raises(nanoir.Error, match="declares 6 rows along dim 2, got 3"):
        s.flush()
    s.push(x[:, :, 3:6])  # the refused flush left the stream open
    s.flush()


STATIC_NH = """func.func @main(%x: tensor<?x2x6xi8, #nh.fixed<0, BCM>>) -> tensor<?x2x6xi8, #nh.fixed<0, BCM>> {
  %y = nh.relu %x : tensor<?x2x6xi8, #nh.fixed<0, BCM>>
  func.return %y : tensor<?x2x6xi8, #nh.fixed<0, BCM>>
}"""


def test_checks_passed_once_per_shape_still_refuse_other_chunks() -> None:
    """Once int8 codes of one shape have passed every check, ``push`` hands chunks like them
    straight to the runner (issue 33 §4: the checks are per dtype and shape, not per push).
    A later push of another shape, batch, dtype kind, or of int16 codes out of the i8 range
    (even after in-range int16 codes passed twice), or past a declared stream length, still
    gets its clear error, changes nothing, and the stream goes on equal to the whole run.

    Mutants seen to fail it (each applied in a copy of runtime/streamer.py): the fast path's
    (dtype, shape) test removed (a 5-channel or float32 chunk reaches the runner); its
    length test removed (a 7th row of a 6-row input accepted); ``_learn`` remembering
    chunks the runner's check had to read (``runner.passed_as_is`` not asked: out-of-range int16
    codes accepted after in-range ones). It found a bug older than that fast path: a rank-2
    chunk after rank-3 ones of the same dims passed ``_check`` (its key lacked the rank) and
    failed with an IndexError instead of the shape error."""
    hw = PROGRAMS["nh"]
    x = np.random.default_rng(5).integers(-128, 128, (2, 4, 12)).astype(np.int8)
    streamer = nanoir.Streamer(hw, raw=True)
    parts = [streamer.push(x[:, :, t : t + 1]) for t in range(3)]
    assert streamer._passed == [{(np.dtype(np.int8), (2, 4), ())}]  # the fast path is on
    refused = [
        (np.zeros((2, 5, 1), np.int8), r"input 0 has shape \(2, 5, 1\), expected 2x4x\?"),
        (np.zeros((1, 4, 1), np.int8), r"input 0 has shape \(1, 4, 1\), expected 2x4x\?"),
        (np.zeros((2, 4), np.int8), r"input 0 has shape \(2, 4\), expected 2x4x\?"),
        (np.zeros((2, 4, 1), np.float32), "float32 .float., but this stream's earlier rows"),
    ]
    wide = x[:, :, 3:5].astype(np.int16)
    parts += [streamer.push(wide[:, :, :1]), streamer.push(wide[:, :, 1:])]  # values read
    out_of_range = np.zeros((2, 4, 1), np.int16)
    out_of_range[1, 2, 0] = 300
    refused.append((out_of_range, r"input 0 has code 300 at index \(1, 2, 0\), outside i8"))
    for chunk, message in refused:
        with pytest.raises(nanoir.Error, match=message):
            streamer.push(chunk)
    parts += [streamer.push(x[:, :, t : t + 2]) for t in range(5, 12, 2)] + [streamer.flush()]
    for k, w in enumerate(nanoir.run(hw, x, raw=True)):
        assert np.concatenate([p[k] for p in parts], axis=2).tobytes() == w.tobytes()

    static = nanoir.Streamer(nanoir.parse(STATIC_NH), raw=True)
    codes = np.random.default_rng(6).integers(-128, 128, (1, 2, 7)).astype(np.int8)
    rows = [static.push(codes[:, :, t : t + 1])[0] for t in range(6)]
    with pytest.raises(nanoir.Error, match="declares 6 rows along dim 2; this push brings it to 7"):
        static.push(codes[:, :, 6:7])
    rows.append(static.flush()[0])
    assert np.concatenate(rows, axis=2).tobytes() == np.maximum(codes[:, :, :6], 0).tobytes()


def test_a_new_stream_like_the_last_skips_the_first_checks_and_fixes_the_same() -> None:
    """After ``reset``, a first chunk like ones the last stream's checks passed goes the fast
    way too; it fixes the batch and shape as a checked one would, so a later chunk of another
    batch is still refused, and a stream of another batch takes the checks (and learns its
    own). Every stream equals the whole run. Kills: the adopted first push not fixing the
    stream's shape (a batch-3 chunk then joins a batch-2 stream); the last stream's chunks
    kept for a stream of another batch."""
    hw = PROGRAMS["nh"]
    rng = np.random.default_rng(8)
    streamer = nanoir.Streamer(hw, raw=True)
    for batch, change in ((2, 3), (2, 3), (3, 2)):
        streamer.reset()
        x = rng.integers(-128, 128, (batch, 4, 6)).astype(np.int8)
        parts = [streamer.push(x[:, :, :2])]
        other = np.zeros((change, 4, 1), np.int8)
        with pytest.raises(nanoir.Error, match=rf"input 0 has shape \({change}, 4, 1\), expected"):
            streamer.push(other)
        parts += [streamer.push(x[:, :, 2:]), streamer.flush()]
        for k, want in enumerate(nanoir.run(hw, x, raw=True)):
            assert np.concatenate([p[k] for p in parts], axis=2).tobytes() == want.tobytes()
        assert streamer._kept == [{(np.dtype(np.int8), (batch, 4), ())}]
