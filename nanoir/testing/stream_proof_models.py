"""Proof networks for streaming along time (issue 22): a registry of their own beside
``PROOF_MODELS`` and ``OP_PROOF_MODELS`` (the ``torch`` extra).

- ``KWSCRNN``: a keyword-spotting CRNN over log-mel frames ``[N, mels, T]``: a conv front end
  along time (Conv1d + BatchNorm + ReLU, twice), the permute to the ``[N, T, C]`` a recurrent
  op takes, a unidirectional GRU (``batch_first``) and a linear classifier per frame: logits
  ``[N, T, classes]``. Streamed one frame at a time through ``nanoir.Streamer`` it gives each
  frame's logits as soon as the front end's one frame of look-ahead has arrived, equal to the
  whole run (``tests/runtime/test_stream_recurrent.py``; ``benchmarks/bench_stream_rnn.py``
  measures its per-frame latency and its flat memory over 100,000 frames).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from torch import nn
from xdsl.dialects.builtin import ModuleOp

from nanoir.api import parse
from nanoir.context import make_context
from nanoir.frontend import from_torch
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.testing.models import randomize_batch_norm

__all__ = ["STREAM_PROOF_MODELS", "KWSCRNN", "import_streaming", "make_stream_proof_model"]

EXPORT_FRAMES = 13
"""Frames of the example a streaming proof network is exported with (see
:func:`import_streaming`); no other dim of these networks is 13."""


class KWSCRNN(nn.Module):
    """Conv front end along time, permute, unidirectional GRU, per-frame linear (see the module
    docstring). Widths are small by default so that CI can push 2,000 frames."""

    def __init__(self, mels: int = 10, channels: int = 12, hidden: int = 16, classes: int = 5):
        super().__init__()
        self.front = nn.Sequential(
            nn.Conv1d(mels, channels, 3, padding=1, bias=False),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
        )
        self.gru = nn.GRU(channels, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(self.front(x).permute(0, 2, 1))
        return self.fc(y)


STREAM_PROOF_MODELS: dict[str, Callable[[], nn.Module]] = {"KWSCRNN": KWSCRNN}
"""The streaming proof networks by name."""


def make_stream_proof_model(name: str, seed: int = 0) -> nn.Module:
    """``STREAM_PROOF_MODELS[name]`` with fixed weights and realistic BatchNorm statistics,
    ``eval()``."""
    torch.manual_seed(seed)
    model = STREAM_PROOF_MODELS[name]()
    randomize_batch_norm(model, seed)
    return model.eval()


def import_streaming(model: nn.Module, features: int) -> ModuleOp:
    """The nf program of ``model`` over ``[N, features, T]`` with ``T`` dynamic (``?``), BN
    folded: an unbounded stream's program.

    ``from_torch`` fixes every dim but the batch, and torch.export's tracing of ``nn.GRU``
    takes time growing with ``T`` (measured: 18 s at 13 frames, 39 s at 50, 137 s at 200); so
    the model is exported on :data:`EXPORT_FRAMES` frames and that dim of every type made
    dynamic in the program text, which nothing else in these networks depends on."""
    module = from_torch(model.eval(), (torch.randn(2, features, EXPORT_FRAMES),))
    text = re.sub(rf"(?<=[<x]){EXPORT_FRAMES}(?=x)", "?", str(module))
    module = parse(text)
    FoldBnPass().apply(make_context(), module)
    return module
