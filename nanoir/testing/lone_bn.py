"""Plain-torch networks with a batch norm fold-bn cannot fold (needs the ``torch`` extra).

``LinearFlattenBnNet``: LeViT's linear -> flatten -> BatchNorm1d (the BN reads its input
through a reshape). ``ConcatBnNet``: two conv branches of different ranges concatenated (the concat aligns them:
11-12-bit codes, or ~20 with a large ``gain``), then DenseNet's pre-activation BN-ReLU-conv.
With random BN statistics (``set_batch_norm``, ``random_statistics``) lower-to-hw used to
refuse its BN ("no integer affine within i32 that reproduces the float64 rounding"); the tests
of ``lowering/quantize/batch_norm.py`` and ``nanoir.qat.batch_norm`` use it. Import it from here
(never from ``tests``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["ConcatBnNet", "LinearFlattenBnNet", "random_statistics", "set_batch_norm"]


class ConcatBnNet(nn.Module):
    """``conv(relu(bn(concat(relu(a(x)), relu(b(x))))))``, ``b`` scaled by ``gain``."""

    def __init__(self, channels: int = 8, gain: float = 16.0) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, channels, 3, padding=1)
        self.b = nn.Conv2d(3, channels, 3, padding=1)
        with torch.no_grad():
            self.b.weight.mul_(gain)
            self.b.bias.mul_(gain)
        self.bn = nn.BatchNorm2d(2 * channels)
        self.conv = nn.Conv2d(2 * channels, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], 1)
        return self.conv(torch.relu(self.bn(y)))


class LinearFlattenBnNet(nn.Module):
    """LeViT's ``LinearNorm``: a linear over tokens ``[B, N, 6]``, the tokens flattened into
    the batch, a BatchNorm1d over the 8 features (reading its quantized input through a
    reshape), reshaped back."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return self.bn(y.flatten(0, 1)).reshape(y.shape)


def random_statistics(rng: np.random.Generator, n: int) -> np.ndarray:
    """``[4, n]``: running mean ~ N(0, 2), running var ~ U(0.5, 3.5), weight ~ U(0.5, 1.5),
    bias ~ N(0, 1)."""
    return np.stack(
        [
            rng.standard_normal(n) * 2,
            0.5 + 3 * rng.random(n),
            0.5 + rng.random(n),
            rng.standard_normal(n),
        ]
    )


def set_batch_norm(model: nn.Module, stats: np.ndarray) -> ConcatBnNet:
    """The BN's mean, var, weight and bias from the rows of ``stats`` (in place)."""
    bn = model.bn
    assert bn.running_mean is not None and bn.running_var is not None
    with torch.no_grad():
        for buf, row in zip((bn.running_mean, bn.running_var, bn.weight, bn.bias), stats):
            buf.copy_(torch.from_numpy(np.asarray(row)).float())
    return model
