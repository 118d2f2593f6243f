"""Plain-torch networks of the Ingenic Magik training-plugin manual's op list (issue 22), our
own copies (the manual's sample is ``magik_crnn.py``; nothing is imported from it):

- ``MagikCRNN``: the manual's sample CRNN: BatchNorm on the input, Conv+BN+ReLU6 blocks,
  MaxPool, ``Route`` (concat), ``Unpool2D`` (:class:`Unpool2d`, modes ``zero``, ``nearest``,
  ``bilinear``), ``Shortcut`` (add), BatchNorm+PReLU, strided convs down to height 1, a
  recurrent layer over the ``T`` columns (``rnn``: ``"lstm"``, the manual's bidirectional
  LSTM, ``"gru"``, or ``"linear"``, a Linear in its place), Flatten, FullyConnected with
  BatchNorm, FullyConnected, Sigmoid. ``width`` scales every channel count (the manual's
  network is ``width=1``: 256 channels into the LSTM) so tests can run a slim copy;
- ``Focus``: YOLOv5's space-to-depth by four strided slices, then a 1x1 conv;
- ``UnpoolDecoder``: a MaxPool/MaxUnpool decoder (``MaxPool2d(return_indices=True)``'s
  indices read by ``MaxUnpool2d``).
- ``TextCNN``: an ``Embedding`` → ``Conv1d`` text classifier; its input is int64 token ids
  ``[N, L]`` in ``0..TEXT_VOCAB-1`` (``MAGIK_INPUTS`` gives the shape, not the values).

``MAGIK_MODELS[name]()`` builds one (``MagikCRNN-<rnn>-<unpool>``; input
``MAGIK_INPUTS[name]``), ``make_magik_model(name, seed)`` with fixed weights and realistic
BatchNorm statistics (set from N(0, 1) inputs, ``calibrate_on_normal``: with random ones the
CRNN's sigmoids moved by 1e-5 of their range between two random inputs), in ``eval()``. The
``lstm`` / ``gru`` variants need the recurrent ops (``nf.recurrent``); the ``linear`` ones need
only the ops the manual's front end uses.

Importing this module needs torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from nanoir.testing.models import calibrate_on_normal, randomize_batch_norm

__all__ = [
    "MAGIK_INPUTS",
    "MAGIK_MODELS",
    "Focus",
    "MagikCRNN",
    "TEXT_VOCAB",
    "TextCNN",
    "Unpool2d",
    "UnpoolDecoder",
    "make_magik_model",
]

UNPOOL_MODES = ("zero", "nearest", "bilinear")
RNN_KINDS = ("linear", "lstm", "gru")


class ConvBlock(nn.Sequential):
    """Conv2d + BatchNorm2d + ReLU6: the manual's Conv2d with its default activation."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()
        )


class Unpool2d(nn.Module):
    """x2 unpooling in the manual's modes. ``zero`` has no torch op: it is written as a
    depthwise transposed conv by a one-hot 1x1 kernel, stride 2 (each value at the top left
    of its 2x2 window), which the frontend recognises as ``nf.upsample_zero``."""

    def __init__(self, channels: int, mode: str = "zero"):
        super().__init__()
        if mode not in UNPOOL_MODES:
            raise ValueError(f"Unpool2d mode must be one of {UNPOOL_MODES}, got {mode!r}")
        self.mode = mode
        self.register_buffer("one_hot", torch.ones(channels, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "zero":
            return F.conv_transpose2d(
                x, self.one_hot, stride=2, output_padding=1, groups=x.shape[1]
            )
        if self.mode == "nearest":
            return F.interpolate(x, scale_factor=2, mode="nearest")
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class MagikCRNN(nn.Module):
    """The manual's CRNN on a ``[N, 3, 32, W]`` line image: ``[N * W / 32, classes]``, a
    sigmoid per class and column."""

    def __init__(
        self, rnn: str = "lstm", unpool: str = "zero", classes: int = 10, width: float = 1.0
    ):
        super().__init__()
        if rnn not in RNN_KINDS:
            raise ValueError(f"MagikCRNN rnn must be one of {RNN_KINDS}, got {rnn!r}")

        def c(n: int) -> int:
            return max(2, int(n * width))

        self.bn_in = nn.BatchNorm2d(3)
        self.conv0 = ConvBlock(3, c(32))
        self.pool = nn.MaxPool2d(2)
        self.conv1 = ConvBlock(c(32), c(32))
        self.conv2 = ConvBlock(2 * c(32), c(32), stride=2)
        self.conv3 = ConvBlock(c(32), c(64))
        self.unpool = Unpool2d(c(64), unpool)
        self.conv4 = ConvBlock(c(64), c(64))
        self.conv5 = ConvBlock(c(64), c(64))
        self.bn1 = nn.BatchNorm2d(c(64))
        self.prelu = nn.PReLU(c(64))
        self.conv6 = ConvBlock(c(64), c(128), stride=2)
        self.conv7 = ConvBlock(c(128), c(128))
        self.conv8 = ConvBlock(c(128), c(256), stride=2)
        self.conv9 = ConvBlock(c(256), c(256))
        self.conv10 = ConvBlock(c(256), c(256), stride=2)
        self.kind, self.hidden = rnn, 2 * c(256)
        if rnn == "lstm":
            self.rnn: nn.Module = nn.LSTM(c(256), c(256), bidirectional=True, batch_first=True)
        elif rnn == "gru":
            self.rnn = nn.GRU(c(256), c(256), bidirectional=True, batch_first=True)
        else:
            self.rnn = nn.Linear(c(256), 2 * c(256))
        self.fc1 = nn.Linear(2 * c(256), c(128))
        self.bn_fc = nn.BatchNorm1d(c(128))
        self.fc2 = nn.Linear(c(128), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv0(self.bn_in(x))
        m1 = self.pool(x)
        x = torch.cat([m1, self.conv1(m1)], dim=1)  # Route
        x = self.conv4(self.unpool(self.conv3(self.conv2(x))))
        m2 = self.pool(x)
        x = self.prelu(self.bn1(m2 + self.conv5(m2)))  # Shortcut, BatchNorm with PReLU
        x = self.conv10(self.conv9(self.conv8(self.conv7(self.conv6(x)))))  # [N, C, 1, T]
        seq = x.squeeze(2).transpose(1, 2)  # [N, T, C]
        if self.kind == "linear":  # per step, on [N * T, C] (the same numbers as on [N, T, C])
            seq = self.rnn(seq.reshape(-1, seq.shape[-1]))
        else:
            seq = self.rnn(seq)[0]
        y = self.fc2(self.bn_fc(self.fc1(seq.reshape(-1, self.hidden))))  # Flatten
        return torch.sigmoid(y)


class Focus(nn.Module):
    """YOLOv5's Focus: ``x[..., ::2, ::2]`` and its three neighbours concatenated along
    channels (a space-to-depth by strided slices), then a 1x1 conv."""

    def __init__(self, cin: int = 3, cout: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(4 * cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]]
        return self.conv(torch.cat(parts, 1))


class UnpoolDecoder(nn.Module):
    """A MaxPool/MaxUnpool decoder (SegNet's pattern): conv, ReLU, 2x2 max pool keeping its
    indices, 1x1 conv, ReLU, max unpool by those indices, conv."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.enc, self.pool = nn.Conv2d(3, c, 3, padding=1), nn.MaxPool2d(2, return_indices=True)
        self.mid, self.unpool = nn.Conv2d(c, c, 1), nn.MaxUnpool2d(2)
        self.dec = nn.Conv2d(c, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, i = self.pool(torch.relu(self.enc(x)))
        return self.dec(self.unpool(torch.relu(self.mid(y)), i))


TEXT_VOCAB = 50
"""The token ids :class:`TextCNN` reads are in ``0..TEXT_VOCAB-1``."""


class TextCNN(nn.Module):
    """A text classifier (Kim's CNN, slim): ``Embedding`` (id 0 the padding row), two
    ``Conv1d`` + ReLU over the sequence, mean over it, ``Linear`` to ``classes`` logits."""

    def __init__(self, dim: int = 8, channels: int = 8, classes: int = 3):
        super().__init__()
        self.embed = nn.Embedding(TEXT_VOCAB, dim, padding_idx=0)
        self.conv1 = nn.Conv1d(dim, channels, 3, padding=1)
        self.conv2 = nn.Conv1d(channels, channels, 3, padding=1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids).transpose(1, 2)  # [N, L, D] -> [N, D, L]
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(x.mean(dim=2))


MAGIK_MODELS: dict[str, Callable[[], nn.Module]] = {
    **{
        f"MagikCRNN-{rnn}-{unpool}": partial(MagikCRNN, rnn, unpool, 10, 0.125)
        for rnn in RNN_KINDS
        for unpool in UNPOOL_MODES
    },
    "Focus": Focus,
    "UnpoolDecoder": UnpoolDecoder,
    "TextCNN": TextCNN,
}
"""The issue-22 proof networks by name (the CRNNs slim: ``width=1/8``)."""

MAGIK_INPUTS: dict[str, tuple[int, ...]] = {
    **{name: (2, 3, 32, 64) for name in MAGIK_MODELS if name.startswith("MagikCRNN")},
    "Focus": (2, 3, 8, 8),
    "UnpoolDecoder": (2, 3, 6, 8),
    "TextCNN": (2, 12),
}
"""An example input shape per network (the CRNN's height must be 32: it ends at 1)."""


def make_magik_model(name: str, seed: int = 0) -> nn.Module:
    """``MAGIK_MODELS[name]`` with fixed weights, random BatchNorm affine parameters and
    statistics from N(0, 1) inputs (the zero Unpool2D mode's in every mode), random PReLU
    slopes, ``eval()``."""
    torch.manual_seed(seed)
    model = MAGIK_MODELS[name]()
    randomize_batch_norm(model, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.PReLU):
                module.weight.copy_(
                    0.1 + 0.3 * torch.rand(module.weight.shape, generator=generator)
                )
    # Statistics of the zero mode in every Unpool2D mode: the variants of one head then differ
    # only in the unpool op (tests swap it in the IR and check against each variant's model).
    unpool = getattr(model, "unpool", None)
    mode = unpool.mode if isinstance(unpool, Unpool2d) else None
    if isinstance(unpool, Unpool2d):
        unpool.mode = "zero"
    calibrate_on_normal(model, MAGIK_INPUTS[name], seed)  # (after PReLU's slopes: it runs them)
    if isinstance(unpool, Unpool2d):
        unpool.mode = mode
    return model
