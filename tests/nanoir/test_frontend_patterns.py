"""The patterns of issue 32 that stopped networks, each a few lines of torch, compiled to nh:
position ids ``torch.arange(T, device=x.device)``, a sinusoidal encoding and a 2-D (DETR)
encoding computed in ``forward``, a padding mask built from constants with ``eq``,
``masked_fill``, ``zeros_like``, ``ones`` and ``type_as``, and an attention bias of lower rank
added to the scores (a parameter table, folded; and a runtime input, broadcast on hw).

Per pattern: nf equals torch (float64, within 1e-9 relative), then quantize + lower-to-hw and
nq == nh bit for bit on fresh inputs. Everything input-independent folds at import
(nanoir/frontend/fold.py); the runtime bias broadcasts in nh (lowering/hw/elementwise.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import nanoir

torch.set_num_threads(1)


class PositionIds(nn.Module):
    """Learned position embeddings looked up by ``arange`` ids (BERT, GPT-2, ViT variants)."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(16, 8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = torch.arange(x.shape[1], device=x.device)
        return self.fc(x + self.pos(ids))


class Sinusoidal(nn.Module):
    """The Transformer's sinusoidal encoding, computed in forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape[1], x.shape[2]
        position = torch.arange(t, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe = torch.zeros(t, d)
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * torch.pow(10000.0, -torch.arange(0, d, 2) / d))
        return self.fc(x + pe.to(x.dtype))


class Sine2d(nn.Module):
    """DETR's 2-D sine encoding of a feature map: ones, cumsum, arange, floor_divide, pow,
    stack of sin/cos, flatten, cat, permute, repeat."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        c, h, w = y.shape[1:]
        not_mask = torch.ones(1, h, w)
        y_embed, x_embed = not_mask.cumsum(1), not_mask.cumsum(2)
        dim_t = torch.arange(c // 2, dtype=torch.float32)
        dim_t = 10000 ** (2 * (dim_t // 2) / (c // 2))
        pos_x, pos_y = x_embed[:, :, :, None] / dim_t, y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return y + pos.repeat(1, 1, 1, 1).to(y.dtype)


class PaddingMask(nn.Module):
    """A padding mask from constant lengths: ``eq``, ``masked_fill``, ``zeros_like``,
    ``ones``, ``type_as`` (the mask zeroes padded tokens before and after a linear)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = torch.ones(1, x.shape[1], dtype=torch.long)
        ids[:, 5:] = 0
        pad = ids.eq(0)
        fill = torch.zeros_like(ids, dtype=torch.float32).masked_fill(pad, 1.0)
        keep = (1 - fill).type_as(x).unsqueeze(-1)
        return self.fc(x.masked_fill(pad.unsqueeze(-1), 0.0)) * keep


class TableBias(nn.Module):
    """A relative position bias ``[H, T, T]`` from a parameter table (Swin, T5): folded into a
    constant, broadcast against the ``[N, H, T, T]`` scores."""

    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(8, 16)
        self.table = nn.Parameter(torch.randn(11, 2) * 0.5)
        idx = torch.arange(6)
        self.register_buffer("index", (idx[:, None] - idx[None, :]) + 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        q, k = self.qk(x).view(n, t, 2, 2, 4).permute(2, 0, 3, 1, 4)
        bias = self.table[self.index.view(-1)].view(t, t, 2).permute(2, 0, 1)
        return (q @ k.transpose(-1, -2) * 0.5 + bias).softmax(-1)


class RuntimeBias(nn.Module):
    """The bias given at run time (``[H, T, T]``, no batch dim) added to ``[N, H, T, T]``
    scores: a runtime value of lower rank broadcast on hw (a static batch: two inputs)."""

    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        q, k = self.qk(x).view(n, t, 2, 2, 4).permute(2, 0, 3, 1, 4)
        return (q @ k.transpose(-1, -2) * 0.5 + bias).softmax(-1)


Shapes = tuple[tuple[int, ...], ...]
PATTERNS: dict[str, tuple[Callable[[], nn.Module], Shapes, bool]] = {
    "position_ids": (PositionIds, ((2, 6, 8),), True),
    "sinusoidal": (Sinusoidal, ((2, 6, 8),), True),
    "sine_2d": (Sine2d, ((2, 3, 4, 6),), True),
    "padding_mask": (PaddingMask, ((2, 7, 8),), True),
    "table_bias": (TableBias, ((2, 6, 8),), True),
    "runtime_bias": (RuntimeBias, ((2, 6, 8), (2, 6, 6)), False),
}
"""Each pattern: the model, its input shapes, and whether the batch is dynamic."""


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return PATTERNS[name][0]().eval()


def _inputs(name: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in PATTERNS[name][1]]


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_nf_equals_torch(name: str) -> None:
    """The imported program in float64 against torch in float64 (within 1e-9 relative), on
    a batch other than the example's where the batch is dynamic. Kills: a folded constant
    computed from the example's values rather than the model's (the position ids of
    another length, the mask of another fill)."""
    model, dynamic = _model(name).double(), PATTERNS[name][2]
    example = [torch.from_numpy(a).double() for a in _inputs(name, 0)]
    module = nanoir.from_torch(model, tuple(example), dynamic_batch=dynamic)
    inputs = [torch.from_numpy(a).double() for a in _inputs(name, 1)]
    if dynamic:
        inputs = [torch.cat([t, t[:1]]) for t in inputs]  # batch 3
    with torch.no_grad():
        expected = model(*inputs).numpy()
    (actual,) = nanoir.run(module, *(t.numpy() for t in inputs), dtype=np.float64)
    assert actual.shape == expected.shape
    assert np.abs(actual - expected).max() <= 1e-9 * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("name", sorted(PATTERNS))
@pytest.mark.parametrize("bits", [4, 8])
def test_compiles_to_nh_with_nq_equal_nh(name: str, bits: int) -> None:
    """quantize (per-channel activations but one) + lower-to-hw, then nq == nh bit for bit
    on fresh inputs. Kills (runtime_bias): lower-to-hw shifting the ``[H, T, T]`` bias with
    the scores' rank (refused, as before)."""
    model, dynamic = _model(name), PATTERNS[name][2]
    example = tuple(torch.from_numpy(a) for a in _inputs(name, 0))
    module = nanoir.from_torch(model, example, dynamic_batch=dynamic)
    calibration = [tuple(_inputs(name, seed)) for seed in (1, 2, 3)]
    # table_bias per tensor: quantize gives the softmax input per-channel exponents, which
    # lower-to-hw refuses (issue 31 §2.13, quantize's; not the broadcast's)
    per_channel = name != "table_bias"
    nanoir.quantize(module, calibration, act_bits=bits, act_per_channel=per_channel)
    hw = nanoir.lower_to_hw(module.clone())
    for seed in (4, 5):
        inputs = _inputs(name, seed)
        (q,) = nanoir.run(module, *inputs)
        (h,) = nanoir.run(hw, *inputs)
        np.testing.assert_array_equal(h, q)
