"""Plain-torch networks with the joins that made calibrated exponents refuse to lower (issue 20).

Each reproduces, at a small size, a pattern of a third-party network whose calibrated program
``lower-to-hw`` once refused for reasons that lay in the exponents quantize chose:

- ``ZeroInitResidual``: timm's / torchvision's ``zero_init_residual``: the last BatchNorm of
  each residual branch has weight 0, so the branch is exactly 0 and the add joins it to the
  shortcut (ResNet-10t, ResNet-18, RegNetX/Y-002);
- ``DLATree``: DLA's tree whose roots concatenate their children and feed a 1x1 conv
  (DLA-34, VoVNet's one-shot aggregation);
- ``CSPTransition``: CSPNet's split, a branch of convs, concat and a transition conv
  (CSPResNet-50);
- ``RepVGGBlock``: three parallel branches (3x3 conv-BN, 1x1 conv-BN, identity BN) summed;
- ``MagikFront``: the conv front end of the sample CRNN of Ingenic's Magik manual (with
  ``rnn="linear"``): ``Route`` concatenates a pooled map with a conv of it and feeds a
  strided conv; then x2 zero unpooling and the ``Shortcut`` add.

``make_proof_model(name, bn)`` builds one with fixed seeds in ``eval()`` mode and BatchNorm
statistics ``bn``: ``"realistic"`` (``randomize_batch_norm``'s affine parameters, statistics
from the data, ``calibrate_on_normal``: with random ones MagikFront's output moved by 0.25% of
its range between two random inputs), ``"zero_init"`` (realistic, with the weight and bias of
every BatchNorm that ends a branch, ``last_bn``, zeroed as the zero-init recipe does) or
``"fresh"`` (torch's initial statistics: every BN-folded bias is exactly 0). These are bigger
than ``TEST_MODELS``' and tested on their own (tests/lowering/test_proof_models.py).

Importing this module needs torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nanoir.testing.models import calibrate_on_normal, randomize_batch_norm

__all__ = [
    "BN_MODES",
    "PROOF_MODELS",
    "CSPTransition",
    "DLATree",
    "MagikFront",
    "RepVGGBlock",
    "ZeroInitResidual",
    "make_proof_model",
]


def _conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


def _conv_bn_relu(cin: int, cout: int, k: int = 3, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(*_conv_bn(cin, cout, k, stride), nn.ReLU())


class _Basic(nn.Module):
    """ResNet's basic block; ``last_bn`` ends the residual branch."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = _conv_bn_relu(cin, cout, 3, stride)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.last_bn = nn.BatchNorm2d(cout)
        self.down = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.down is None else self.down(x)
        return F.relu(self.last_bn(self.conv2(self.conv1(x))) + shortcut)


class ZeroInitResidual(nn.Module):
    """A stem and three basic blocks (one downsampling), pooled into a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn_relu(3, 16, 3, 2)
        self.layer1 = nn.Sequential(_Basic(16, 16), _Basic(16, 16))
        self.layer2 = _Basic(16, 32, 2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 32, 32)


class _Root(nn.Module):
    """DLA's root: concat the children, 1x1 conv, BN, optional residual of the first child."""

    def __init__(self, cin: int, cout: int, residual: bool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.last_bn = nn.BatchNorm2d(cout)
        self.residual = residual

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        y = self.last_bn(self.conv(torch.cat(xs, 1)))
        return F.relu(y + xs[0] if self.residual else y)


class _Tree(nn.Module):
    """A two-level DLA tree: leaves are residual blocks, roots concatenate."""

    def __init__(self, cin: int, cout: int, levels: int, extra: int = 0):
        super().__init__()
        if levels == 1:
            self.tree1: nn.Module = _Basic(cin, cout)
            self.tree2: nn.Module = _Basic(cout, cout)
            self.root: _Root | None = _Root(2 * cout + cin + extra, cout, residual=True)
        else:
            self.tree1 = _Tree(cin, cout, levels - 1)
            self.tree2 = _Tree(cout, cout, levels - 1, extra=cout)
            self.root = None
        self.levels = levels

    def forward(self, x: torch.Tensor, *children: torch.Tensor) -> torch.Tensor:
        x1 = self.tree1(x)
        if self.levels == 1:
            assert self.root is not None
            return self.root(self.tree2(x1), x1, x, *children)
        return self.tree2(x1, x1, *children)


class DLATree(nn.Module):
    """A stem and a two-level tree whose roots concatenate three or four maps."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn_relu(3, 16, 3, 2)
        self.level = _Tree(16, 16, 2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.level(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 32, 32)


class CSPTransition(nn.Module):
    """CSP stage: split the channels, convs on one half, concat, a 1x1 transition conv."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn_relu(3, 32, 3, 2)
        self.conv_down = _conv_bn_relu(32, 32, 3, 2)
        self.blocks = nn.Sequential(_Basic(16, 16), _Basic(16, 16))
        self.conv_transition_b = _conv_bn_relu(16, 16, 1)
        self.conv_transition = nn.Sequential(
            nn.Conv2d(32, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()
        )
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_down(self.stem(x))
        xs, xb = x.split(16, dim=1)
        xb = self.conv_transition_b(self.blocks(xb))
        x = self.conv_transition(torch.cat([xs, xb], 1))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 32, 32)


class _RepVGG(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv_kxk = _conv_bn(cin, cout, 3, stride)
        self.conv_1x1 = _conv_bn(cin, cout, 1, stride)
        self.last_bn = nn.BatchNorm2d(cin) if cin == cout and stride == 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_kxk(x) + self.conv_1x1(x)
        return F.relu(y + self.last_bn(x) if self.last_bn is not None else y)


class RepVGGBlock(nn.Module):
    """RepVGG blocks (train-time form): 3x3 conv-BN + 1x1 conv-BN + identity BN, summed."""

    def __init__(self) -> None:
        super().__init__()
        self.stages = nn.Sequential(_RepVGG(3, 16, 2), _RepVGG(16, 16), _RepVGG(16, 32, 2))
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 32, 32)


class _ConvBlock(nn.Sequential):
    """The manual's Conv2d: conv, BN, ReLU6."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()
        )


class MagikFront(nn.Module):
    """The Magik sample network up to its ``Shortcut``: input BN, conv, max pool, ``Route``
    (concat of the pooled map and a conv of it) into a strided conv, x2 zero unpooling (a
    one-hot depthwise transposed conv), max pool, ``Shortcut`` add; pooled into a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.bn_in = nn.BatchNorm2d(3)
        self.conv0 = _ConvBlock(3, 32)
        self.pool = nn.MaxPool2d(2)
        self.conv1 = _ConvBlock(32, 32)
        self.conv2 = _ConvBlock(64, 32, stride=2)
        self.conv3 = _ConvBlock(32, 64)
        self.register_buffer("one_hot", torch.ones(64, 1, 1, 1))
        self.conv4 = _ConvBlock(64, 64)
        self.conv5 = _ConvBlock(64, 64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv0(self.bn_in(x))
        m1 = self.pool(x)
        x = torch.cat([m1, self.conv1(m1)], dim=1)  # Route
        x = self.conv3(self.conv2(x))
        x = F.conv_transpose2d(x, self.one_hot, stride=2, output_padding=1, groups=64)
        m2 = self.pool(self.conv4(x))
        x = m2 + self.conv5(m2)  # Shortcut
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def make_example_input(self, batch: int = 1) -> torch.Tensor:
        return torch.randn(batch, 3, 16, 32)


PROOF_MODELS: dict[str, Callable[[], nn.Module]] = {
    "ZeroInitResidual": ZeroInitResidual,
    "DLATree": DLATree,
    "CSPTransition": CSPTransition,
    "RepVGGBlock": RepVGGBlock,
    "MagikFront": MagikFront,
}
"""The proof networks by name (a registry of their own: ``TEST_MODELS`` stays small)."""


BN_MODES = ("realistic", "zero_init", "fresh")
"""BatchNorm statistics ``make_proof_model`` can give (see the module docstring)."""


def make_proof_model(name: str, bn: str = "realistic", seed: int = 0) -> nn.Module:
    """``PROOF_MODELS[name]`` with fixed weights and BatchNorm statistics ``bn``, ``eval()``."""
    if bn not in BN_MODES:
        raise ValueError(f"bn must be one of {', '.join(BN_MODES)}, got {bn!r}")
    torch.manual_seed(seed)
    model = PROOF_MODELS[name]()
    if bn != "fresh":
        randomize_batch_norm(model, seed)
    if bn == "zero_init":
        with torch.no_grad():
            for module_name, module in model.named_modules():
                if module_name.endswith("last_bn") and isinstance(module, nn.BatchNorm2d):
                    module.weight.zero_()
                    module.bias.zero_()
    if bn != "fresh":
        calibrate_on_normal(model, tuple(model.make_example_input(1).shape), seed)  # type: ignore[operator]
    return model.eval()
