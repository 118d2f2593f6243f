"""Plain-torch networks that use the ops modern small networks need (issue 21), at a small size.

Each reproduces the block of a third-party network whose import once stopped at one of these
ATen ops (the architectures written out here; never imported from timm, torchvision or
torchaudio):

- ``MBConvSE``: EfficientNet-B0's MBConv: 1x1 expansion, depthwise 3x3, SiLU after each,
  squeeze-excitation (global mean, 1x1 reduce, SiLU, 1x1 expand, sigmoid gate), 1x1
  projection and the residual add (``aten.silu``);
- ``ConvNeXtBlock``: depthwise 7x7, ``permute(0, 2, 3, 1)``, ``nn.LayerNorm(C)`` over channels,
  Linear 4x, GELU, Linear back, layer scale (a per-channel ``gamma``), permute back, residual
  (``aten.layer_norm``, ``aten.gelu``);
- ``TinyViT``: a 2-layer pre-norm transformer encoder: patch-embedding conv, a class token
  (``expand`` to the batch, concatenated), position embedding, multi-head attention through
  ``F.scaled_dot_product_attention`` (q, k, v by ``unbind`` of one qkv projection), a GELU MLP,
  the class token's final LayerNorm into a linear head (``aten.scaled_dot_product_attention``,
  ``aten.expand``, ``aten.unbind``, ``aten.layer_norm``, ``aten.gelu``, ``aten.select``);
- ``KeywordNet``: the M5 keyword-spotting net's shape (strided 1-D convs, BN, ReLU, max pools,
  a global mean) ending in ``log_softmax`` (``aten.log_softmax``);
- ``TasNetBlock``: ConvTasNet's 1-D conv block: 1x1 conv, PReLU, global layer norm
  (``GroupNorm(1, C)``), dilated depthwise conv, PReLU, gLN, residual and skip 1x1 convs
  (``aten.group_norm``, ``aten.prelu``);
- ``GhostBlock``: GhostNet's ghost module (a primary 1x1 conv and a cheap depthwise conv of
  it, concatenated) and a shortcut added in place on a channel slice,
  ``y[:, :c] += shortcut(x)`` (``aten.slice_scatter`` with ``aten.copy``).

``make_op_proof_model(name, seed)`` builds one with fixed weights, realistic BatchNorm
statistics (``randomize_batch_norm``) and, where a network's initial parameters would make an
op trivial (layer scale, LayerNorm/GroupNorm affine, PReLU slopes), random ones, in ``eval()``.
``OP_PROOF_OPS[name]`` lists the ops each network is here to prove. A registry of its own beside
``PROOF_MODELS`` (tests/nanoir/test_op_proof_models.py).

Importing this module needs torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nanoir.testing.models import randomize_batch_norm

__all__ = [
    "OP_PROOF_MODELS",
    "OP_PROOF_OPS",
    "ConvNeXtBlock",
    "GhostBlock",
    "KeywordNet",
    "MBConvSE",
    "TasNetBlock",
    "TinyViT",
    "make_op_proof_model",
]


def _conv_bn(cin: int, cout: int, k: int, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, 1, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class _SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class MBConvSE(nn.Module):
    """A stem conv and one MBConv block (expansion 4, SE ratio 0.25 of the input), pooled into a
    linear head."""

    def __init__(self, channels: int = 8, expansion: int = 4) -> None:
        super().__init__()
        mid = channels * expansion
        self.stem = nn.Sequential(*_conv_bn(3, channels, 3), nn.SiLU())
        self.expand = nn.Sequential(*_conv_bn(channels, mid, 1), nn.SiLU())
        self.depthwise = nn.Sequential(*_conv_bn(mid, mid, 3, groups=mid), nn.SiLU())
        self.se = _SqueezeExcite(mid, max(1, channels // 4))
        self.project = nn.Sequential(*_conv_bn(mid, channels, 1))
        self.fc = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.project(self.se(self.depthwise(self.expand(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 12, 12)


class ConvNeXtBlock(nn.Module):
    """A patchify stem (4x4 stride-4 conv, LayerNorm2d: permute, LayerNorm, permute back) and one
    ConvNeXt block, pooled into a LayerNorm and a linear head."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 4, 4)
        self.stem_norm = nn.LayerNorm(channels, eps=1e-6)
        self.dwconv = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.pwconv1 = nn.Linear(channels, 4 * channels)
        self.pwconv2 = nn.Linear(4 * channels, channels)
        self.gamma = nn.Parameter(1e-1 * torch.ones(channels))
        self.head_norm = nn.LayerNorm(channels, eps=1e-6)
        self.fc = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem_norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        x = x + y.permute(0, 3, 1, 2)
        return self.fc(self.head_norm(x.mean((2, 3))))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 28, 28)


class _EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyViT(nn.Module):
    """ViT at a small size: 4x4 patches of a 16x16 image (16 tokens and a class token), width
    32, 4 heads, MLP 64, 2 layers."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2, patch: int = 4) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, (16 // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[_EncoderLayer(dim, heads, 2 * dim) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 16, 16)


class KeywordNet(nn.Module):
    """M5 (Dai et al., 2017) at a small size: a wide strided first conv over raw audio, three
    conv-BN-ReLU-max-pool stages, a global mean, a linear layer and ``log_softmax`` over the
    classes (torchaudio's speech-commands tutorial's shape, ``[N, 1, classes]``)."""

    def __init__(self, channels: int = 16, classes: int = 12) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv1d(1, channels, 40, stride=8),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.MaxPool1d(4),
        ]
        for cin, cout in ((channels, channels), (channels, 2 * channels)):
            layers += [nn.Conv1d(cin, cout, 3), nn.BatchNorm1d(cout), nn.ReLU(), nn.MaxPool1d(2)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = F.avg_pool1d(x, x.shape[-1]).permute(0, 2, 1)
        return F.log_softmax(self.fc(x), dim=2)

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 1, 800)


class TasNetBlock(nn.Module):
    """ConvTasNet's 1-D conv block (Luo & Mesgarani, 2019) after an encoder conv: 1x1 conv to
    the hidden width, PReLU, gLN, dilated depthwise conv, PReLU, gLN, then the residual and
    skip 1x1 convs; returns the residual path and the skip output, concatenated."""

    def __init__(self, channels: int = 16, hidden: int = 32, dilation: int = 2) -> None:
        super().__init__()
        self.encoder = nn.Conv1d(1, channels, 8, stride=4, bias=False)
        self.conv1x1 = nn.Conv1d(channels, hidden, 1)
        self.prelu1 = nn.PReLU()
        self.norm1 = nn.GroupNorm(1, hidden, eps=1e-8)
        self.dconv = nn.Conv1d(
            hidden, hidden, 3, padding=dilation, dilation=dilation, groups=hidden
        )
        self.prelu2 = nn.PReLU()
        self.norm2 = nn.GroupNorm(1, hidden, eps=1e-8)
        self.res = nn.Conv1d(hidden, channels, 1)
        self.skip = nn.Conv1d(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.encoder(x))
        y = self.norm1(self.prelu1(self.conv1x1(x)))
        y = self.norm2(self.prelu2(self.dconv(y)))
        return torch.cat([x + self.res(y), self.skip(y)], dim=1)

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 1, 200)


class _Ghost(nn.Module):
    """GhostNet's ghost module, ratio 2: half the outputs from a 1x1 conv, half a cheap
    depthwise 3x3 conv of those."""

    def __init__(self, cin: int, cout: int, relu: bool) -> None:
        super().__init__()
        act: list[nn.Module] = [nn.ReLU()] if relu else []
        self.primary = nn.Sequential(*_conv_bn(cin, cout // 2, 1), *act)
        self.cheap = nn.Sequential(*_conv_bn(cout // 2, cout // 2, 3, groups=cout // 2), *act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.primary(x)
        return torch.cat([y, self.cheap(y)], dim=1)


class GhostBlock(nn.Module):
    """A stem and a ghost bottleneck (ghost module, ghost module) whose shortcut, a 1x1
    conv of the input to the first ``c`` channels, is added in place on that slice, pooled into
    a linear head."""

    def __init__(self, channels: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, channels, 3), nn.ReLU())
        self.ghost1 = _Ghost(channels, hidden, relu=True)
        self.ghost2 = _Ghost(hidden, 2 * channels, relu=False)
        self.shortcut = nn.Sequential(*_conv_bn(channels, channels, 1))
        self.channels = channels
        self.fc = nn.Linear(2 * channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.ghost2(self.ghost1(x))
        y[:, : self.channels] += self.shortcut(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 10, 10)


OP_PROOF_MODELS: dict[str, Callable[[], nn.Module]] = {
    "MBConvSE": MBConvSE,
    "ConvNeXtBlock": ConvNeXtBlock,
    "TinyViT": TinyViT,
    "KeywordNet": KeywordNet,
    "TasNetBlock": TasNetBlock,
    "GhostBlock": GhostBlock,
}
"""The issue-21 proof networks by name (a registry of their own beside ``PROOF_MODELS``)."""

OP_PROOF_OPS: dict[str, tuple[str, ...]] = {
    "MBConvSE": ("nf.silu", "nf.sigmoid"),
    "ConvNeXtBlock": ("nf.layer_norm", "nf.gelu"),
    "TinyViT": ("nf.layer_norm", "nf.softmax", "nf.gelu", "nf.expand"),
    "KeywordNet": ("nf.log_softmax",),
    "TasNetBlock": ("nf.group_norm", "nf.prelu"),
    "GhostBlock": ("nf.concat", "nf.split"),
}
"""The nf ops each network proves (what its import must contain)."""


def make_op_proof_model(name: str, seed: int = 0) -> nn.Module:
    """``OP_PROOF_MODELS[name]`` with fixed weights, realistic BatchNorm statistics and random
    affine parameters where the initial ones are trivial (see the module docstring), ``eval()``."""
    torch.manual_seed(seed)
    model = OP_PROOF_MODELS[name]()
    randomize_batch_norm(model, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm | nn.GroupNorm) and module.weight is not None:
                module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))
            elif isinstance(module, nn.PReLU):
                module.weight.copy_(
                    0.1 + 0.3 * torch.rand(module.weight.shape, generator=generator)
                )
        if isinstance(model, ConvNeXtBlock):
            model.gamma.copy_(0.05 + 0.2 * torch.rand(model.gamma.shape, generator=generator))
    return model.eval()
