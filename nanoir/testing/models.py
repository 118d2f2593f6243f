"""Test networks for the torch frontend, BN folding and the runtime.

Plain ``torch.nn.Module`` classes (torchvision does not import in nanoir's environment), each
with a ``make_example_input(batch)`` method. :func:`make_test_model` builds one by name with
fixed seeds, in ``eval()`` mode, and with batch norm parameters away from the identity: with
the default ``running_mean = 0`` and ``running_var = 1`` a BN layer is nearly the identity and
BN folding would go untested. The statistics follow the data (:func:`calibrate_batch_norm`):
drawn regardless of it, a deep network's signal fades and its output hardly depends on its
input, which makes end-to-end checks weak.

Importing this module needs torch (the ``torch`` extra). Abbreviations: bn = batch
normalization, kws = keyword spotting, mfcc = mel-frequency cepstral coefficients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from xdsl.dialects.builtin import ModuleOp

from nanoir.context import make_context
from nanoir.frontend import from_torch
from nanoir.lowering.fold_bn import FoldBnPass


def _randn(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator)


class LeNet5(nn.Module):
    """LeNet-5 on ``[N, 1, 32, 32]`` images: two 5x5 convs with pooling, then three linears.

    LeCun et al.'s layout with ReLU; the first stage pools by averaging and the second by max,
    so both pools are exercised.
    """

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)

    def make_example_input(self, batch: int, seed: int = 0) -> torch.Tensor:
        return _randn((batch, 1, 32, 32), seed)


class BasicBlock(nn.Module):
    """ResNet's two-conv residual block; a 1x1 conv + BN projects the shortcut when the shape
    changes."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016) with torchvision's module names, so parameter paths read
    ``layer1.0.conv1.weight``.

    The adaptive average pool makes it work at any input size from 32x32 up (224x224 is the
    ImageNet size).
    """

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)

    def make_example_input(self, batch: int, seed: int = 0, size: int = 32) -> torch.Tensor:
        return _randn((batch, 3, size, size), seed)


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand + BN + ReLU6 (skipped when ``expand == 1``), 3x3
    depthwise + BN + ReLU6, 1x1 linear projection + BN; a residual add when the shape is kept."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand: int):
        super().__init__()
        hidden = in_channels * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [
                nn.Conv2d(in_channels, hidden, 1, bias=False),
                nn.BatchNorm2d(hidden),
                nn.ReLU6(inplace=True),
            ]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.use_residual else y


class MobileNetV2Stack(nn.Module):
    """A MobileNetV2 front (Sandler et al. 2018) on ``[N, 3, 32, 32]``: stem, five inverted
    residual blocks (with and without the residual add), 1x1 head, global pool, classifier."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(inplace=True)
        )
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 1, 1),
            InvertedResidual(16, 24, 2, 6),
            InvertedResidual(24, 24, 1, 6),
            InvertedResidual(24, 32, 2, 6),
            InvertedResidual(32, 32, 1, 6),
        )
        self.head = nn.Sequential(
            nn.Conv2d(32, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU6(inplace=True)
        )
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(self.dropout(x))

    def make_example_input(self, batch: int, seed: int = 0) -> torch.Tensor:
        return _randn((batch, 3, 32, 32), seed)


class KWSNet(nn.Module):
    """A 1-D keyword-spotting CNN on ``[N, 40, T]`` MFCC frames (40 coefficients, T frames):
    Conv1d + BN + ReLU stages that stride and dilate along time, global average pooling over
    time, and a linear classifier over 12 keywords."""

    def __init__(self, num_classes: int = 12, channels: int = 64):
        super().__init__()
        specs = [  # (in, out, kernel, stride, dilation)
            (40, channels, 3, 1, 1),
            (channels, channels, 3, 2, 1),
            (channels, channels, 3, 1, 2),
            (channels, channels, 3, 1, 4),
        ]
        self.features = nn.Sequential()
        for cin, cout, k, s, d in specs:
            self.features.append(nn.Conv1d(cin, cout, k, s, padding=d * (k // 2), dilation=d))
            self.features.append(nn.BatchNorm1d(cout))
            self.features.append(nn.ReLU())
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.fc(torch.flatten(x, 1))

    def make_example_input(self, batch: int, seed: int = 0, frames: int = 49) -> torch.Tensor:
        return _randn((batch, 40, frames), seed)


class SampleConvs(nn.Module):
    """The two convs of the sample, grouped as in the model that printed it (``conv.conv1``)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3)
        self.conv2 = nn.Conv2d(16, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class SampleNet(nn.Module):
    """The model of ``shared/samples/readme_model.ne``: conv 3→16 3x3 (no padding), conv
    16→16 1x1, ``+ parameter`` (shape [1]), ``+ tensor constant``, ``+ 2``, then
    ``relu(x) + x``. Input ``[N, 3, H, 5]`` (the sample streams H and is 5 wide)."""

    def __init__(self):
        super().__init__()
        self.conv = SampleConvs()
        self.custom_param = nn.Parameter(torch.tensor([-0.8721]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = x + self.custom_param
        x = x + torch.tensor([1.9293])
        x = x + 2
        return F.relu(x) + x

    def make_example_input(self, batch: int, seed: int = 0, rows: int = 8) -> torch.Tensor:
        return _randn((batch, 3, rows, 5), seed)


def randomize_batch_norm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BN layer non-trivial statistics and affine parameters (in place).

    ``running_mean ~ N(0, 0.2)``, ``running_var ~ U(0.5, 2)``, ``weight ~ U(0.5, 1.5)``,
    ``bias ~ N(0, 0.2)``: far enough from the identity that folding them changes the weights,
    close enough that a deep network's activations stay in a sane range.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                c = module.num_features
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.copy_(0.2 * torch.randn(c, generator=generator))
                module.running_var.copy_(0.5 + 1.5 * torch.rand(c, generator=generator))
                if module.affine:
                    module.weight.copy_(0.5 + torch.rand(c, generator=generator))
                    module.bias.copy_(0.2 * torch.randn(c, generator=generator))
    return model


def calibrate_batch_norm(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], seed: int = 0
) -> nn.Module:
    """Set every BN layer's running statistics from the data that reaches it (in place), then
    spread them as :func:`randomize_batch_norm` does, in units of that data.

    Why: statistics drawn regardless of the data do not renormalise, so through a deep network
    the signal fades (through the Magik CRNN's eleven convs its output moved by 1e-5 of its
    range between two random inputs) and an end-to-end ``nq == nh`` check sees a constant.
    One forward pass on ``model(*inputs)`` in ``eval()``: each BN, when the pass reaches it
    (those upstream already set), takes its input's per-channel mean ``m`` and variance ``v``
    (floored at 1% of the layer's mean variance, so a dead channel does not get a huge folded
    scale) and keeps ``running_mean = m + 0.2 sqrt(v) N(0, 1)``, ``running_var = v U(0.5, 2)``:
    its output keeps the scale of its affine weight, and folding is still far from the
    identity. Affine parameters are left as they are; a BN run twice is set on its first run.
    """
    generator = torch.Generator().manual_seed(seed)
    done: set[nn.Module] = set()

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if module in done:
            return
        done.add(module)
        x = args[0].double()
        dims = [d for d in range(x.dim()) if d != 1]
        mean, var = x.mean(dims), x.var(dims, unbiased=False)
        var = var.clamp_min(0.01 * float(var.mean()) + 1e-12)
        c = mean.shape[0]
        mean = mean + 0.2 * var.sqrt() * torch.randn(c, generator=generator, dtype=torch.float64)
        var = var * (0.5 + 1.5 * torch.rand(c, generator=generator, dtype=torch.float64))
        module.running_mean.copy_(mean)  # type: ignore[operator]
        module.running_var.copy_(var)  # type: ignore[operator]

    batch_norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not batch_norms:
        return model
    handles = [m.register_forward_pre_hook(hook) for m in batch_norms]
    try:
        model.eval()
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return model


TEST_MODELS: dict[str, Callable[[], nn.Module]] = {
    "LeNet5": LeNet5,
    "ResNet18": ResNet18,
    "MobileNetV2Stack": MobileNetV2Stack,
    "KWSNet": KWSNet,
    "SampleNet": SampleNet,
}
"""The test networks by name."""


def calibrate_on_normal(model: nn.Module, shape: tuple[int, ...], seed: int = 0) -> nn.Module:
    """:func:`calibrate_batch_norm` on 8 samples of N(0, 1) of ``shape`` (its batch dim
    replaced), drawn from ``seed``: the tests' usual input distribution."""
    return calibrate_batch_norm(model, (_randn((8, *shape[1:]), seed + 2),), seed)


def make_test_model(name: str, seed: int = 0) -> nn.Module:
    """Build a test network with fixed seeds, random BN affine parameters and data-driven
    statistics (:func:`calibrate_on_normal`: with :func:`randomize_batch_norm`'s alone,
    MobileNetV2Stack's output moved by 4e-4 of its range between two random inputs), in
    ``eval()`` mode."""
    torch.manual_seed(seed)
    model = TEST_MODELS[name]()
    randomize_batch_norm(model, seed)
    shape = (1, 3, 32, 32) if name == "ResNet18" else model.make_example_input(1).shape  # type: ignore[operator]
    return calibrate_on_normal(model, tuple(shape), seed)


def import_folded(name: str, batch: int = 2) -> tuple[ModuleOp, tuple[int, ...]]:
    """A test network imported with ``from_torch``, BN folded: ``(module, input shape without
    the batch dim)``. ResNet-18 is imported at 32x32 to keep tests quick."""
    torch.manual_seed(0)
    model = make_test_model(name)
    example = (
        torch.randn(batch, 3, 32, 32) if name == "ResNet18" else (model.make_example_input(batch))
    )  # type: ignore[operator]
    module = from_torch(model, (example,))
    FoldBnPass().apply(make_context(), module)
    return module, tuple(example.shape[1:])
