"""Recurrent ops stream along time (issue 22): one row per step, the state (``h``, ``c``)
carried from row to row as the node's cache. Streamed (``nanoir.stream``, ``nanoir.Streamer``)
== whole (``nanoir.run``) bit for bit at nq and nh (nf: float rounding), on random LSTM / GRU /
RNN programs behind the permute a conv front end needs; bidirectional ops and ops whose final
state is read are refused along time, naming the op and why; and the keyword-spotting CRNN of
``nanoir.testing.stream_proof_models`` streams 2,000 frames one at a time at nh.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.lowering.quantize import quantize
from nanoir.lowering.stream_plan import StreamPlanError, stream_plan
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from nanoir.runtime.stream import StreamRunner, stream
from nanoir.runtime.streamer import Streamer
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.programs import examples
from nanoir.testing.stream_proof_models import import_streaming, make_stream_proof_model


def _dense(a: np.ndarray) -> str:
    text = np.array2string(
        np.asarray(a, np.float32), separator=", ", threshold=10**9, floatmode="unique"
    )
    return f"dense<{text.replace(chr(10), '')}>"


def _type(shape: tuple[int, ...]) -> str:
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


def recurrent_program(
    mode: str,
    layers: int,
    batch_first: bool,
    with_h0: bool,
    *,
    bidirectional: bool = False,
    return_h: bool = False,
    length: int = 6,
    seed: int = 0,
) -> str:
    """``x: [2, 3, T]`` (streamed along dim 2) permuted to ``[N, T, F]`` or ``[T, N, F]``, an
    ``nf.recurrent`` of hidden size 4 with random weights (and constant initial states), its
    sequence output returned (and ``h_n`` with ``return_h``)."""
    rng = np.random.default_rng(seed)
    layout = RecurrentLayout(mode, 4, layers, bidirectional, batch_first, True)
    x = (2, 3, length)
    perm = (0, 2, 1) if batch_first else (2, 0, 1)
    seq = tuple(x[p] for p in perm)
    lines = [
        f"  %t = nf.transpose %x {{perm = array<i64: {', '.join(map(str, perm))}>}} "
        f": {_type(x)} -> {_type(seq)}"
    ]
    shapes = layout.weight_shapes(3)
    for i, shape in enumerate(shapes):
        w = _dense(rng.uniform(-0.6, 0.6, shape))
        lines.append(f'  %w{i} = nf.constant "w{i}" {w} : {_type(shape)}')
    out, state, _ = layout.result_shapes(seq)
    states = ""
    if with_h0:
        for name in ("h0", "c0") if mode == "lstm" else ("h0",):
            s0 = _dense(rng.uniform(-0.8, 0.8, state))
            lines.append(f'  %{name} = nf.constant "{name}" {s0} : {_type(state)}')
            states += f" {name}(%{name} : {_type(state)})"
    lstm = mode == "lstm"
    types = [_type(out), _type(state)] + ([_type(state)] if lstm else [])
    lines.append(
        f"  %y, %h{', %c' if lstm else ''} = nf.recurrent %t : {_type(seq)}{states} "
        f"weights({', '.join(f'%w{i}' for i in range(len(shapes)))} : "
        f'{", ".join(_type(s) for s in shapes)}) {{mode = "{mode}", hidden_size = 4 : i64, '
        f"num_layers = {layers} : i64, bidirectional = {str(bidirectional).lower()}, "
        f"batch_first = {str(batch_first).lower()}, has_biases = true}} -> {', '.join(types)}"
    )
    results = [("%y", _type(out))] + ([("%h", _type(state))] if return_h else [])
    lines.append(
        f"  func.return {', '.join(r for r, _ in results)} : {', '.join(t for _, t in results)}"
    )
    signature = f"({', '.join(t for _, t in results)})"
    return f"func.func @main(%x: {_type(x)}) -> {signature} {{\n" + "\n".join(lines) + "\n}\n"


def _check(module: ModuleOp, x: np.ndarray, step: int, exact: bool) -> np.ndarray:
    (want,) = run(module, x)
    runner = StreamRunner(module)
    (got,) = stream(module, [x], step=step, runner=runner)
    assert got.shape == want.shape and got.dtype == want.dtype
    if exact:
        assert got.tobytes() == want.tobytes(), f"step {step}"
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    plan = stream_plan(module, steps=[(2, step)])
    for key, peak in runner.cache_peaks.items():
        assert peak <= plan.caches[key].rows[2].max <= step
    assert len(plan.states) == 1
    return want


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]),
    layers=st.integers(1, 2),
    batch_first=st.booleans(),
    with_h0=st.booleans(),
    length=st.integers(1, 12),
    step=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_recurrent_ops_stream_along_time(
    mode: str, layers: int, batch_first: bool, with_h0: bool, length: int, step: int, seed: int
) -> None:
    """nf (float rounding), nq and nh (bit for bit) streamed == whole, each with caches of at
    most ``step`` rows and the state as the node's one carried buffer; nh == nq in reals.
    Mutants seen to fail it (private copy): the executor resuming every firing from the
    initial state instead of the carried one, and the nh kernel carrying ``h``'s codes with
    an exponent one off the hidden grid's."""
    module = nanoir.parse(
        recurrent_program(mode, layers, batch_first, with_h0, length=length, seed=seed)
    )
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, length)) * 1.5
    _check(module, x, step, exact=False)
    quantize(module, [rng.standard_normal((2, 3, length)).astype(np.float32)])
    q = _check(module, x, step, exact=True)
    hw = lower_to_hw(module.clone())
    h = _check(hw, x, step, exact=True)
    assert h.tobytes() == q.tobytes()


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_bidirectional_is_refused_along_time(mode: str) -> None:
    """A bidirectional op needs the whole sequence: stream-plan, ``stream`` and ``Streamer``
    refuse it, naming the op and the reason. Mutant seen to fail it: the bidirectional
    check dropped from ``Recurrent.refusal``."""
    module = nanoir.parse(recurrent_program(mode, 1, True, False, bidirectional=True))
    for attempt in (lambda: stream_plan(module), lambda: Streamer(module)):
        with pytest.raises(StreamPlanError, match=r"nf.recurrent.*\(%y\).*bidirectional"):
            attempt()
    with pytest.raises(nanoir.Error, match="reverse direction"):
        stream(module, [np.zeros((2, 3, 6))])


def test_a_returned_final_state_is_refused_along_time() -> None:
    """``h_n`` is known only when the stream ends: returning it is refused, naming it; a
    fake-quant quantize leaves on an unread ``h_n`` is not a reader. Mutants seen to fail it:
    no check of the final state's readers, and any use counting as a reader."""
    module = nanoir.parse(recurrent_program("gru", 1, True, False, return_h=True))
    with pytest.raises(StreamPlanError, match=r"final state \(h\)"):
        stream_plan(module)
    unread = nanoir.parse(recurrent_program("gru", 1, True, False))
    quantize(unread, [np.random.default_rng(0).standard_normal((2, 3, 6)).astype(np.float32)])
    assert any(
        u.operation.name == "nq.fake_quant"
        for op in unread.walk()
        if op.name == "nf.recurrent"
        for u in op.results[1].uses
    )
    assert len(stream_plan(unread).states) == 1


def test_kws_crnn_streams_2000_frames_at_nh() -> None:
    """The keyword-spotting CRNN (conv front end, permute, GRU, per-frame linear) compiled to
    nh, pushed one frame at a time through ``nanoir.Streamer``: 2,000 frames of logits, each
    once and as soon as the front end's look-ahead allows (warm-up 3 input frames), equal to
    the whole run bit for bit, and the streamed nq program equal to nh in reals."""
    model = make_stream_proof_model("KWSCRNN")
    nq = import_streaming(model, 10)
    rng = np.random.default_rng(0)
    quantize(nq, [rng.standard_normal((4, 10, 200)).astype(np.float32)])
    hw = lower_to_hw(nq.clone())
    frames = 2000
    x = rng.standard_normal((1, 10, frames)).astype(np.float32)
    (want,) = run(hw, x)
    streamer = Streamer(hw)
    assert streamer.warmup == (3,) and streamer.output_axes == (1,)
    got = [streamer.push(x[:, :, t : t + 1])[0] for t in range(frames)]
    assert [g.shape[1] for g in got[:4]] == [0, 0, 1, 1]
    got.append(streamer.flush()[0])
    assert sum(g.shape[1] for g in got) == frames
    assert np.concatenate(got, axis=1).tobytes() == want.tobytes()
    (q,) = run(nq, x[:, :, :300])  # its last 2 frames read padding where more frames follow
    assert np.array_equal(q[:, :298], want[:, :298])
