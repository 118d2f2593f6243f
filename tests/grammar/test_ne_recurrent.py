"""The nq `.ne` rows LSTM / GRU / RNN for nf.recurrent (ONNX's op types and attribute names
where ONNX has them: hidden_size, direction, layout, activations; nanoir's extensions:
num_layers, has_biases, initial_states, and the quantized op's internal grids gates, cell,
hidden = [exp, bits] and rounding). The weights are in_s after the input and the initial
states, in torch's flat order (the reference does not read these rows). A float and a
quantized program export, import and export to the same text byte for byte, the read-back
program runs bit for bit as the original, and the float one equals torch (float64). The
quantized one lowered to nh does the same with the hw row `Recurrent` (mode, layout flags,
grids, rounding, sigmoid/tanh tables, initial_states), batch-first or time-major (the
results' nh layouts start with B, so they are declared as runtime tensors). Unread final
states are not written at either level."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.dialects import nf
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.frontend import from_torch

torch.set_num_threads(1)


class _Net(nn.Module):
    """A recurrent layer; the GRU takes h0, the RNN returns its final state too."""

    def __init__(self, kind: str, use_state: bool) -> None:
        super().__init__()
        self.kind, self.use_state = kind, use_state
        if kind == "lstm":
            self.r: nn.Module = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
        elif kind == "gru":
            self.r = nn.GRU(3, 4, batch_first=True)
        else:
            self.r = nn.RNN(3, 4, nonlinearity="relu", batch_first=False, bias=False)

    def forward(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        y, h = self.r(*args)
        return (y, h) if self.use_state else y


_CASES = [
    ("lstm", False, "op_type=LSTM,\n    attr=[direction=bidirectional, "),
    ("gru", False, "op_type=GRU,\n    attr=[direction=forward, "),
    ("rnn", True, "op_type=RNN,\n    attr=[activations=Relu, direction=forward, "),
]


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize(("kind", "use_state", "row"), _CASES)
def test_nq_recurrent_round_trip(kind: str, use_state: bool, row: str, quantized: bool) -> None:
    """Mutants seen to fail it (private copy): RNN activations always written Tanh; the
    layout (batch_first) attribute ignored on read; initial_states ignored (nq and hw);
    quantize's dead fake-quants of h_n/c_n written again (extra program outputs); an
    unwritten hw c_n typed on the hidden grid instead of the cell grid; the time-major
    output labelled MDC again (the hw writer refuses it)."""
    torch.manual_seed(0)
    net = _Net(kind, use_state).eval()
    inputs = (torch.randn(2, 5, 3),) + ((torch.randn(1, 2, 4),) if kind == "gru" else ())
    module = from_torch(net, inputs, dynamic_batch=False)
    xs = [x.numpy() for x in inputs]
    if quantized:
        nanoir.quantize(module, [tuple(xs) if len(xs) > 1 else xs[0]])
    else:  # the oracle: torch in float64
        got = run(module, *[x.astype(np.float64) for x in xs], dtype=np.float64)
        want = net.double()(*[x.double() for x in inputs])
        net.float()
        for g, w in zip(got, want if isinstance(want, tuple) else (want,), strict=True):
            np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-9, atol=1e-9)
    text = export_nanoengine(module)
    assert row in text
    assert ("gates=[" in text) == quantized
    assert ("has_biases=0" in text) == (kind == "rnn")
    back = import_nanoengine(text)
    (op,) = [o for o in back.walk() if isinstance(o, nf.RecurrentOp)]
    assert (
        op.properties == next(o for o in module.walk() if isinstance(o, nf.RecurrentOp)).properties
    )
    assert export_nanoengine(back) == text
    want_out, got_out = run(module, *xs), run(back, *xs)
    assert len(want_out) == len(got_out) == (2 if use_state else 1)
    assert all(w.tobytes() == g.tobytes() for w, g in zip(want_out, got_out))
    if quantized:  # the hw level's Recurrent row: nh.recurrent's integer parameters
        hw = lower_to_hw(module.clone())
        text = export_nanoengine(hw)
        assert "op_type=Recurrent," in text and "sigmoid_table=[" in text
        assert f"initial_states={int(kind == 'gru')}," in text
        back = import_nanoengine(text)
        assert export_nanoengine(back) == text
        want_out, got_out = run(hw, *xs), run(back, *xs)
        assert len(got_out) == len(want_out)
        assert all(w.tobytes() == g.tobytes() for w, g in zip(want_out, got_out))
