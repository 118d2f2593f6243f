"""Networks for the compile-time benchmark (``bench_compile.py``), in plain torch.

torchvision does not load in nanoir's environment, so DenseNet-121 and RepVGG-A0 are written
here from their papers' layouts (Huang et al. 2017; Ding et al. 2021). They are benchmark
networks only, not test models. The generated networks scale to a requested number of nf ops
with small tensors, so that compile time per op, not arithmetic, is what grows:

- ``chain``: conv 3x3 -> relu, repeated;
- ``residual``: ResNet basic blocks without BN (conv -> relu -> conv -> add -> relu);
- ``dense``: dense blocks of 8 layers (conv -> relu -> concat of everything before), each
  closed by a 1x1 transition conv back to the block's input width, so that tensors stay small.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DenseNet121", "RepVGGA0", "generated", "GENERATED_KINDS"]


# -- DenseNet-121 --------------------------------------------------------------------------------


class DenseLayer(nn.Module):
    """BN -> ReLU -> 1x1 conv (4 * growth) -> BN -> ReLU -> 3x3 conv (growth)."""

    def __init__(self, in_channels: int, growth: int, bn_size: int = 4):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        x = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(x)))


class DenseBlock(nn.Module):
    def __init__(self, layers: int, in_channels: int, growth: int):
        super().__init__()
        self.layers = nn.ModuleList(
            DenseLayer(in_channels + i * growth, growth) for i in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Module):
    """BN -> ReLU -> 1x1 conv (halves the channels) -> 2x2 average pool."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(in_channels)
        self.conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(F.relu(self.norm(x))), 2)


class DenseNet121(nn.Module):
    """DenseNet-121: growth 32, blocks of 6, 12, 24 and 16 layers, 64 stem channels."""

    def __init__(self, growth: int = 32, blocks: tuple[int, ...] = (6, 12, 24, 16)):
        super().__init__()
        channels = 2 * growth
        self.conv0 = nn.Conv2d(3, channels, 7, 2, 3, bias=False)
        self.norm0 = nn.BatchNorm2d(channels)
        stages: list[nn.Module] = []
        for i, n in enumerate(blocks):
            stages.append(DenseBlock(n, channels, growth))
            channels += n * growth
            if i != len(blocks) - 1:
                stages.append(Transition(channels, channels // 2))
                channels //= 2
        self.features = nn.Sequential(*stages)
        self.norm5 = nn.BatchNorm2d(channels)
        self.classifier = nn.Linear(channels, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.norm0(self.conv0(x))), 3, 2, 1)
        x = F.relu(self.norm5(self.features(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- RepVGG-A0 (training-time form: three branches per block) -----------------------------------


class RepVGGBlock(nn.Module):
    """3x3 conv + BN, 1x1 conv + BN and (same shape) an identity BN, summed, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.conv3 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 1, stride, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        same = in_channels == out_channels and stride == 1
        self.identity = nn.BatchNorm2d(out_channels) if same else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn3(self.conv3(x)) + self.bn1(self.conv1(x))
        if self.identity is not None:
            y = y + self.identity(x)
        return F.relu(y)


class RepVGGA0(nn.Module):
    """RepVGG-A0: stages of 1, 2, 4, 14, 1 blocks, widths 48, 48, 96, 192, 1280."""

    def __init__(self) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        channels = 3
        for n, width in ((1, 48), (2, 48), (4, 96), (14, 192), (1, 1280)):
            for i in range(n):
                blocks.append(RepVGGBlock(channels, width, 2 if i == 0 else 1))
                channels = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- generated networks --------------------------------------------------------------------------


class Chain(nn.Module):
    """``n`` times conv 3x3 -> relu (2 nf ops each)."""

    def __init__(self, n: int, channels: int):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.relu(conv(x))
        return x


class Residual(nn.Module):
    """``n`` basic blocks without BN: conv -> relu -> conv -> add -> relu (5 nf ops each)."""

    def __init__(self, n: int, channels: int):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(channels, channels, 3, padding=1) for _ in range(2 * n)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for a, b in zip(self.convs[::2], self.convs[1::2], strict=True):
            x = F.relu(b(F.relu(a(x))) + x)
        return x


class Dense(nn.Module):
    """``n`` dense blocks of ``layers`` layers (conv -> relu -> concat) closed by a 1x1 conv
    back to ``channels`` (3 nf ops per layer, 1 per block)."""

    def __init__(self, n: int, channels: int, layers: int = 8, growth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(n):
            convs = nn.ModuleList(
                nn.Conv2d(channels + i * growth, growth, 3, padding=1) for i in range(layers)
            )
            close = nn.Conv2d(channels + layers * growth, channels, 1)
            self.blocks.append(nn.ModuleList([*convs, close]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            for conv in block[:-1]:
                x = torch.cat([x, F.relu(conv(x))], 1)
            x = block[-1](x)
        return x


def _near_identity(conv: nn.Conv2d, gain: float, generator: torch.Generator) -> None:
    """``gain`` times the identity on the first channels plus small noise: activations keep
    their range through thousands of layers (with torch's default init they shrink by about
    3x a layer, and quantize then picks exponents lower-to-hw cannot align)."""
    out_c, in_c, kh, kw = conv.weight.shape
    with torch.no_grad():
        noise = torch.randn(conv.weight.shape, generator=generator)
        conv.weight.copy_(0.05 * noise / (in_c * kh * kw) ** 0.5)
        for c in range(min(out_c, in_c)):
            conv.weight[c, c, kh // 2, kw // 2] += gain
        if conv.bias is not None:
            conv.bias.copy_(0.01 * torch.randn(out_c, generator=generator))


GENERATED_KINDS = {"chain": (Chain, 2), "residual": (Residual, 5), "dense": (Dense, 25)}
"""Each generated kind: its class and the nf ops per unit of ``n``."""


def generated(kind: str, ops: int, channels: int = 4, seed: int = 0) -> nn.Module:
    """A generated network of about ``ops`` nf ops, seeded, in eval mode."""
    cls, per_unit = GENERATED_KINDS[kind]
    torch.manual_seed(seed)
    model = cls(max(1, ops // per_unit), channels).eval()
    generator = torch.Generator().manual_seed(seed)
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            # A residual block's second conv is a small correction to the shortcut.
            odd = kind == "residual" and int(name.rsplit(".", 1)[-1]) % 2 == 1
            _near_identity(module, 0.0 if odd else 1.0, generator)
    return model
