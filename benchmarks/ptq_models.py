"""Networks of the PTQ benchmark (``bench_ptq.py``), in plain torch: issue 20's 14 architectures.

timm imports torchvision, which does not load in nanoir's environment, so the timm networks
are written here from their published layouts (block strings of timm's ``_gen_*`` functions,
channel rounding ``make_divisible(v, 8)``; module names are ours). Benchmark networks only,
not ``nanoir.testing.TEST_MODELS``. Networks that ``nanoir.testing`` or ``compile_models.py``
already have are reused: ResNet-18, the MobileNetV2 stack (the small ReLU6 net), the 1-D KWS
net and RepVGG-A0.

- ``MobileNetV2``: mobilenetv2_100 (ReLU6 inverted residuals, 1280 head);
- ``MobileNetV3Large``: mobilenetv3_large_100 (hardswish, squeeze-excitation with a
  hard-sigmoid gate, head after the pool);
- ``EfficientNetLite0``: efficientnet_lite0 (ReLU6, no squeeze-excitation);
- ``MnasNet``: mnasnet_100 (mnasnet_b1, ReLU);
- ``LCNet``: lcnet_100 (hardswish depthwise-separable blocks, squeeze-excitation at the end);
- ``RegNetX002``: regnetx_002 (grouped-conv bottlenecks, group width 8);
- ``VoVNet19``: ese_vovnet19b_dw (one-shot aggregation: a concat of every layer's output,
  depthwise-separable layers, effective squeeze-excitation);
- ``SENet``: a small CNN with squeeze-excitation (ReLU, sigmoid gate);
- ``KWS2D``: a DS-CNN keyword-spotting net on a 49x10 MFCC map;
- ``CRNN``: the Magik manual's sample network (``shared/samples/magik_crnn.py``) with its
  recurrent layer written as a linear (``rnn="linear"``) and its final sigmoid.

``make_ptq_model(name, seed)`` builds one with fixed seeds, timm's weight initialisation
(:func:`timm_init`), realistic BatchNorm statistics (``nanoir.testing.randomize_batch_norm``),
in eval mode; ``PTQ_MODELS[name].shape`` is its input
without the batch dim at the default image size (``input_shape(name, size)`` at another).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from nanoir.testing import (
    KWSNet,
    MobileNetV2Stack,
    ResNet18,
    randomize_batch_norm,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_models import RepVGGA0  # noqa: E402

__all__ = ["PTQ_MODELS", "PtqModel", "input_shape", "make_ptq_model", "timm_init"]


def make_divisible(v: float, divisor: int = 8) -> int:
    """timm's channel rounding: to a multiple of ``divisor``, never down by more than 10%."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _act(kind: str) -> nn.Module:
    return {"relu": nn.ReLU, "relu6": nn.ReLU6, "hswish": nn.Hardswish}[kind]()


class ConvBnAct(nn.Sequential):
    """conv (no bias) -> BN -> activation (``None``: none)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        k: int = 1,
        stride: int = 1,
        groups: int = 1,
        act: str | None = "relu",
    ):
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if act is not None:
            layers.append(_act(act))
        super().__init__(*layers)


class SqueezeExcite(nn.Module):
    """Pool, 1x1 reduce + ReLU, 1x1 expand, gate (sigmoid or hard sigmoid), multiply."""

    def __init__(self, channels: int, reduced: int, gate: str = "hsigmoid"):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.gate = nn.Hardsigmoid() if gate == "hsigmoid" else nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(F.relu(self.reduce(s))))


# -- EfficientNet-family builder (timm's _gen_* block strings) ----------------------------------


@dataclass(frozen=True)
class Stage:
    """One block-string stage: ``kind`` ``ds`` (depthwise-separable), ``dsa`` (the same with
    an activation after the pointwise conv, LCNet's), ``ir`` (inverted residual) or ``cn``
    (one conv-BN-act), repeats, kernel, stride of the first block, expansion, output channels,
    squeeze-excitation ratio (of the expanded channels), activation, skip allowed."""

    kind: str
    repeats: int
    k: int
    stride: int
    expand: float
    out: int
    se: float = 0.0
    act: str = "relu"
    skip: bool = True


class EffBlock(nn.Module):
    """timm's DepthwiseSeparableConv (``ds``, ``dsa``), InvertedResidual (``ir``) and
    ConvBnAct (``cn``) blocks."""

    def __init__(self, cin: int, stage: Stage, stride: int, se_gate: str, se_from_in: bool):
        super().__init__()
        if stage.kind == "cn":
            self.expand: nn.Module | None = ConvBnAct(
                cin, stage.out, stage.k, stride, act=stage.act
            )
            self.dw: nn.Module | None = None
            self.se: nn.Module | None = None
            self.project: nn.Module | None = None
            self.residual = False
            return
        mid = cin if stage.kind in ("ds", "dsa") else make_divisible(cin * stage.expand)
        self.expand = ConvBnAct(cin, mid, 1, act=stage.act) if stage.kind == "ir" else None
        self.dw = ConvBnAct(mid, mid, stage.k, stride, groups=mid, act=stage.act)
        if stage.se:
            base = cin if se_from_in else mid
            self.se = SqueezeExcite(mid, make_divisible(base * stage.se), se_gate)
        else:
            self.se = None
        project_act = stage.act if stage.kind == "dsa" else None
        self.project = ConvBnAct(mid, stage.out, 1, act=project_act)
        self.residual = stage.skip and stride == 1 and cin == stage.out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x if self.expand is None else self.expand(x)
        if self.dw is None or self.project is None:
            return y
        y = self.dw(y)
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return x + y if self.residual else y


class EffNet(nn.Module):
    """Stem conv s2 -> stages -> 1x1 head -> pool -> classifier (``head_after_pool``: pool,
    then the 1x1 head with a bias and no BN, as MobileNetV3 and LCNet do)."""

    def __init__(
        self,
        stages: list[Stage],
        stem: int = 32,
        head: int = 1280,
        act: str = "relu6",
        head_after_pool: bool = False,
        se_gate: str = "hsigmoid",
        se_from_in: bool = False,
        classes: int = 1000,
    ):
        super().__init__()
        self.stem = ConvBnAct(3, stem, 3, 2, act=act)
        blocks: list[nn.Module] = []
        cin = stem
        for stage in stages:
            for i in range(stage.repeats):
                blocks.append(
                    EffBlock(cin, stage, stage.stride if i == 0 else 1, se_gate, se_from_in)
                )
                cin = stage.out
        self.blocks = nn.Sequential(*blocks)
        self.head_after_pool = head_after_pool
        if head_after_pool:
            self.head: nn.Module = nn.Sequential(nn.Conv2d(cin, head, 1), _act(act))
        else:
            self.head = ConvBnAct(cin, head, 1, act=act)
        self.classifier = nn.Linear(head, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        if self.head_after_pool:
            x = self.head(F.adaptive_avg_pool2d(x, 1))
        else:
            x = F.adaptive_avg_pool2d(self.head(x), 1)
        return self.classifier(torch.flatten(x, 1))


def MobileNetV2() -> nn.Module:
    """mobilenetv2_100: ds_r1_k3_s1_c16, ir_r2_k3_s2_e6_c24, ir_r3_k3_s2_e6_c32,
    ir_r4_k3_s2_e6_c64, ir_r3_k3_s1_e6_c96, ir_r3_k3_s2_e6_c160, ir_r1_k3_s1_e6_c320."""
    a = "relu6"
    return EffNet(
        [
            Stage("ds", 1, 3, 1, 1, 16, act=a),
            Stage("ir", 2, 3, 2, 6, 24, act=a),
            Stage("ir", 3, 3, 2, 6, 32, act=a),
            Stage("ir", 4, 3, 2, 6, 64, act=a),
            Stage("ir", 3, 3, 1, 6, 96, act=a),
            Stage("ir", 3, 3, 2, 6, 160, act=a),
            Stage("ir", 1, 3, 1, 6, 320, act=a),
        ],
        act=a,
    )


def MobileNetV3Large() -> nn.Module:
    """mobilenetv3_large_100: ReLU ("nre") in the first stages, hardswish after; squeeze-
    excitation (reduced to a quarter of the expanded channels, hard-sigmoid gate) in three."""
    r, h = "relu", "hswish"
    return EffNet(
        [
            Stage("ds", 1, 3, 1, 1, 16, act=r),
            Stage("ir", 1, 3, 2, 4, 24, act=r),
            Stage("ir", 1, 3, 1, 3, 24, act=r),
            Stage("ir", 3, 5, 2, 3, 40, se=0.25, act=r),
            Stage("ir", 1, 3, 2, 6, 80, act=h),
            Stage("ir", 1, 3, 1, 2.5, 80, act=h),
            Stage("ir", 2, 3, 1, 2.3, 80, act=h),
            Stage("ir", 2, 3, 1, 6, 112, se=0.25, act=h),
            Stage("ir", 3, 5, 2, 6, 160, se=0.25, act=h),
            Stage("cn", 1, 1, 1, 1, 960, act=h),
        ],
        stem=16,
        act=h,
        head_after_pool=True,
    )


def EfficientNetLite0() -> nn.Module:
    """efficientnet_lite0: EfficientNet-B0's stages with ReLU6 and no squeeze-excitation."""
    a = "relu6"
    return EffNet(
        [
            Stage("ds", 1, 3, 1, 1, 16, act=a),
            Stage("ir", 2, 3, 2, 6, 24, act=a),
            Stage("ir", 2, 5, 2, 6, 40, act=a),
            Stage("ir", 3, 3, 2, 6, 80, act=a),
            Stage("ir", 3, 5, 1, 6, 112, act=a),
            Stage("ir", 4, 5, 2, 6, 192, act=a),
            Stage("ir", 1, 3, 1, 6, 320, act=a),
        ],
        act=a,
    )


def MnasNet() -> nn.Module:
    """mnasnet_100 (mnasnet_b1): ReLU, no squeeze-excitation, the first and last stage
    without residual."""
    return EffNet(
        [
            Stage("ds", 1, 3, 1, 1, 16, skip=False),
            Stage("ir", 3, 3, 2, 3, 24),
            Stage("ir", 3, 5, 2, 3, 40),
            Stage("ir", 3, 5, 2, 6, 80),
            Stage("ir", 2, 3, 1, 6, 96),
            Stage("ir", 4, 5, 2, 6, 192),
            Stage("ir", 1, 3, 1, 6, 320, skip=False),
        ],
        act="relu",
    )


def LCNet() -> nn.Module:
    """lcnet_100: a hardswish stem of 16 and depthwise-separable blocks (dw conv-BN-act,
    squeeze-excitation in the last two, pw conv-BN-act); head after the pool."""
    h = "hswish"
    return EffNet(
        [
            Stage("dsa", 1, 3, 1, 1, 32, act=h, skip=False),
            Stage("dsa", 2, 3, 2, 1, 64, act=h, skip=False),
            Stage("dsa", 2, 3, 2, 1, 128, act=h, skip=False),
            Stage("dsa", 1, 3, 2, 1, 256, act=h, skip=False),
            Stage("dsa", 1, 5, 1, 1, 256, act=h, skip=False),
            Stage("dsa", 4, 5, 1, 1, 256, act=h, skip=False),
            Stage("dsa", 2, 5, 2, 1, 512, se=0.25, act=h, skip=False),
        ],
        stem=16,
        act=h,
        head_after_pool=True,
        se_from_in=True,
    )


# -- ResNet-family ------------------------------------------------------------------------------


class RegNetBlock(nn.Module):
    """RegNetX bottleneck (ratio 1): 1x1 conv-BN-ReLU, 3x3 grouped conv (group width 8)
    -BN-ReLU, 1x1 conv-BN, plus the shortcut (1x1 conv-BN when the shape changes), ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8):
        super().__init__()
        self.conv1 = ConvBnAct(cin, cout, 1)
        self.conv2 = ConvBnAct(cout, cout, 3, stride, groups=cout // group_width)
        self.conv3 = ConvBnAct(cout, cout, 1, act=None)
        self.down = (
            ConvBnAct(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.down is None else self.down(x)
        return F.relu(self.conv3(self.conv2(self.conv1(x))) + shortcut)


class RegNetX002(nn.Module):
    """regnetx_002: stem 32, stages of widths 24, 56, 152, 368 and depths 1, 1, 4, 7."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = ConvBnAct(3, 32, 3, 2)
        blocks: list[nn.Module] = []
        cin = 32
        for width, depth in ((24, 1), (56, 1), (152, 4), (368, 7)):
            for i in range(depth):
                blocks.append(RegNetBlock(cin, width, 2 if i == 0 else 1))
                cin = width
        self.stages = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- VoVNet -------------------------------------------------------------------------------------


class SeparableConvBnAct(nn.Sequential):
    """timm's SeparableConvNormAct: depthwise 3x3, pointwise 1x1, BN, ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__(
            nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
            nn.Conv2d(cin, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )


class EffectiveSE(nn.Module):
    """eSE: pool, one 1x1 conv with bias, hard sigmoid, multiply."""

    def __init__(self, channels: int):
        super().__init__()
        self.fc = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * F.hardsigmoid(self.fc(F.adaptive_avg_pool2d(x, 1)))


class OSABlock(nn.Module):
    """One-shot aggregation: (1x1 reduction), three separable layers, concat of the block's
    input and every layer's output, 1x1 conv-BN-ReLU, eSE."""

    def __init__(self, cin: int, mid: int, cout: int, layers: int = 3):
        super().__init__()
        self.reduction = ConvBnAct(cin, mid, 1) if cin != mid else None
        self.layers = nn.ModuleList(SeparableConvBnAct(mid, mid) for _ in range(layers))
        self.concat = ConvBnAct(cin + layers * mid, cout, 1)
        self.ese = EffectiveSE(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = [x]
        y = x if self.reduction is None else self.reduction(x)
        for layer in self.layers:
            y = layer(y)
            outputs.append(y)
        return self.ese(self.concat(torch.cat(outputs, 1)))


class VoVNet19(nn.Module):
    """ese_vovnet19b_dw: stem (3x3 s2 conv, separable s1, separable s2, 64 channels), four
    stages of one OSA block (mid 128, 160, 192, 224; out 256, 512, 768, 1024), a 3x3 s2 max
    pool before every stage but the first."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            ConvBnAct(3, 64, 3, 2), SeparableConvBnAct(64, 64), SeparableConvBnAct(64, 64, 2)
        )
        stages: list[nn.Module] = []
        cin = 64
        for i, (mid, out) in enumerate(((128, 256), (160, 512), (192, 768), (224, 1024))):
            if i:
                stages.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            stages.append(OSABlock(cin, mid, out))
            cin = out
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- small nets ---------------------------------------------------------------------------------


class SENet(nn.Module):
    """A small CNN with squeeze-excitation after each stage (ReLU, sigmoid gate)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for cout in (32, 64, 128):
            layers += [
                ConvBnAct(cin, cout, 3, 2),
                ConvBnAct(cout, cout, 3),
                SqueezeExcite(cout, cout // 4, "sigmoid"),
            ]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class KWS2D(nn.Module):
    """DS-CNN keyword spotting (Zhang et al. 2017, "Hello Edge"), small: a 10x4 stride-2 conv
    on the 49x10 MFCC map, four depthwise-separable layers of 64, pool, 12 keywords."""

    def __init__(self, classes: int = 12, channels: int = 64):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, channels, (10, 4), 2, (5, 1), bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
        )
        layers: list[nn.Module] = []
        for _ in range(4):
            layers += [
                ConvBnAct(channels, channels, 3, groups=channels),
                ConvBnAct(channels, channels, 1),
            ]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _MagikConv(nn.Sequential):
    """The manual's Conv2d: conv 3x3, BN, ReLU6."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()
        )


class CRNN(nn.Module):
    """The Magik manual's sample CRNN with ``rnn="linear"``, zero unpooling: input BN, convs
    with a ``Route`` concat and a ``Shortcut`` add, BN + PReLU, convs down to height 1, the
    columns as a sequence through a linear, two linears with a BN, a sigmoid per class and
    column. Input ``[N, 3, 32, W]``, output ``[N * W / 32, 10]``."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.bn_in = nn.BatchNorm2d(3)
        self.conv0 = _MagikConv(3, 32)
        self.pool = nn.MaxPool2d(2)
        self.conv1 = _MagikConv(32, 32)
        self.conv2 = _MagikConv(64, 32, stride=2)
        self.conv3 = _MagikConv(32, 64)
        self.register_buffer("one_hot", torch.ones(64, 1, 1, 1))
        self.conv4 = _MagikConv(64, 64)
        self.conv5 = _MagikConv(64, 64)
        self.bn1 = nn.BatchNorm2d(64)
        self.prelu = nn.PReLU(64)
        self.conv6 = _MagikConv(64, 128, stride=2)
        self.conv7 = _MagikConv(128, 128)
        self.conv8 = _MagikConv(128, 256, stride=2)
        self.conv9 = _MagikConv(256, 256)
        self.conv10 = _MagikConv(256, 256, stride=2)
        self.rnn = nn.Linear(256, 512)
        self.fc1 = nn.Linear(512, 128)
        self.bn_fc = nn.BatchNorm1d(128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv0(self.bn_in(x))
        m1 = self.pool(x)
        x = torch.cat([m1, self.conv1(m1)], dim=1)  # Route
        x = self.conv3(self.conv2(x))
        x = F.conv_transpose2d(x, self.one_hot, stride=2, output_padding=1, groups=64)
        m2 = self.pool(self.conv4(x))
        x = self.prelu(self.bn1(m2 + self.conv5(m2)))  # Shortcut, BN with PReLU
        x = self.conv10(self.conv9(self.conv8(self.conv7(self.conv6(x)))))  # [N, 256, 1, T]
        seq = self.rnn(x.squeeze(2).transpose(1, 2))  # [N, T, 512]
        y = self.fc2(self.bn_fc(self.fc1(seq.reshape(-1, 512))))
        return torch.sigmoid(y)


# -- registry -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PtqModel:
    """A benchmark network: its constructor and input shape (``None`` in a dim: the image size)."""

    build: Callable[[], nn.Module]
    shape: tuple[int | None, ...]


def _image(build: Callable[[], nn.Module]) -> PtqModel:
    return PtqModel(build, (3, None, None))


PTQ_MODELS: dict[str, PtqModel] = {
    "MobileNetV2": _image(MobileNetV2),
    "MobileNetV3-Large": _image(MobileNetV3Large),
    "EfficientNet-Lite0": _image(EfficientNetLite0),
    "MnasNet": _image(MnasNet),
    "LCNet": _image(LCNet),
    "ResNet-18": _image(ResNet18),
    "RegNetX-002": _image(RegNetX002),
    "VoVNet-19": _image(VoVNet19),
    "RepVGG-A0": _image(RepVGGA0),
    "SENet": _image(SENet),
    "ReLU6-MobileNetV2Stack": PtqModel(MobileNetV2Stack, (3, 32, 32)),
    "KWS-1D": PtqModel(KWSNet, (40, 49)),
    "KWS-2D": PtqModel(KWS2D, (1, 49, 10)),
    "CRNN": PtqModel(CRNN, (3, 32, 128)),
}
"""The benchmark networks by name (issue 20 section 4's 14 architectures)."""


def input_shape(name: str, size: int) -> tuple[int, ...]:
    """The input shape of ``name`` without the batch dim, images at ``size`` x ``size``."""
    return tuple(size if d is None else d for d in PTQ_MODELS[name].shape)


def timm_init(model: nn.Module, seed: int = 0) -> nn.Module:
    """timm's initialisation (in place): conv weights ``N(0, 2 / fan_out)`` (fan_out = output
    channels x kernel size / groups), linear weights ``U(±1 / sqrt(out_features))``, biases 0.

    Why: with torch's default (fan-in uniform, gain 1/sqrt(3)) every layer shrinks the
    input-dependent part of its activations about 3x, the BatchNorm offsets take over, and a
    deep net's output is the same constant for every image (MobileNetV3-Large's: its standard
    deviation over the images is 0.0 of its mean), which makes an output SQNR meaningless.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv1d, nn.Conv2d)):
                fan_out = module.out_channels * math.prod(module.kernel_size) // module.groups
                noise = torch.randn(module.weight.shape, generator=generator)
                module.weight.copy_(noise * math.sqrt(2.0 / fan_out))
            elif isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.out_features)
                noise = torch.rand(module.weight.shape, generator=generator)
                module.weight.copy_((2 * noise - 1) * bound)
            else:
                continue
            if module.bias is not None:
                module.bias.zero_()
    return model


def make_ptq_model(name: str, seed: int = 0) -> nn.Module:
    """``PTQ_MODELS[name]`` with seeded timm-initialised weights, realistic BatchNorm
    statistics, ``eval()``."""
    torch.manual_seed(seed)
    model = PTQ_MODELS[name].build()
    timm_init(model, seed)
    randomize_batch_norm(model, seed)
    return model.eval()
