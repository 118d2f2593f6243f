"""Third-party networks for the reach benchmark (``bench_reach.py``) that the repository lacks.

timm and torchaudio import torchvision, which does not load in nanoir's environment, so each
network is written here in plain torch from the layout of its public model code (timm's
``resnet.py``, ``regnet.py``, ``dla.py``, ``cspnet.py``, ``efficientnet.py`` block strings,
``rexnet.py``, ``ghostnet.py``, ``mobilevit.py``/``byobnet.py``, ``convnext.py``,
``vision_transformer.py``, ``deit.py``, ``levit.py``; torchaudio's ``wav2letter.py``,
``deepspeech.py``, ``conv_tasnet.py``, ``conformer.py``, ``wav2vec2/components.py`` and its
M5 tutorial). Module names and code are ours; widths are the published ones unless the
docstring says "small" (then scaled so one compile takes seconds). What a new user would get
from ``timm.create_model(name)`` without pretrained weights is kept where it matters to a
compiler: zero-initialised last BatchNorm of timm's residual blocks (ResNet-10t, the
``-zi`` variants), ConvNeXt's layer scale of 1e-6, weight-normalised positional conv of wav2vec2.

``REACH_MODELS[name]`` gives the constructor, input shape without the batch dim, and where it
comes from; ``make_reach_model(name, seed)`` builds one with timm's initialisation
(``ptq_models.timm_init``), realistic BatchNorm statistics
(``nanoir.testing.randomize_batch_norm``) and the per-network extras, in ``eval()``.
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

from nanoir.testing import randomize_batch_norm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ptq_models import make_divisible, timm_init  # noqa: E402

__all__ = ["REACH_MODELS", "ReachModel", "make_reach_model", "trunc02_init"]


def _act(kind: str | None) -> nn.Module:
    table: dict[str | None, Callable[[], nn.Module]] = {
        None: nn.Identity,
        "relu": nn.ReLU,
        "relu6": nn.ReLU6,
        "hswish": nn.Hardswish,
        "silu": nn.SiLU,
        "leaky": lambda: nn.LeakyReLU(0.01),
        "gelu": nn.GELU,
    }
    return table[kind]()


class ConvBn(nn.Sequential):
    """conv (no bias) -> BN -> activation (``None``: none); timm's ConvNormAct."""

    def __init__(self, cin, cout, k=1, stride=1, groups=1, act: str | None = "relu", pad=None):
        super().__init__(
            nn.Conv2d(
                cin, cout, k, stride, k // 2 if pad is None else pad, groups=groups, bias=False
            ),
            nn.BatchNorm2d(cout),
            _act(act),
        )


class SE(nn.Module):
    """Squeeze-excitation: pool, 1x1 reduce, activation, 1x1 expand, gate, multiply
    (``norm``: a BN after the reduce, ReXNet's)."""

    def __init__(self, c: int, rd: int, act="relu", gate="sigmoid", norm=False):
        super().__init__()
        self.fc1 = nn.Conv2d(c, rd, 1)
        self.bn = nn.BatchNorm2d(rd) if norm else nn.Identity()
        self.act = _act(act)
        self.fc2 = nn.Conv2d(rd, c, 1)
        self.gate = nn.Hardsigmoid() if gate == "hsigmoid" else nn.Sigmoid()

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.fc2(self.act(self.bn(self.fc1(s)))))


# -- ResNet family (timm resnet.py) ------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet basic block; ``down``: ``conv`` (1x1 s conv-BN) or ``avg`` (timm's avg_down:
    2x2 average pool, then 1x1 conv-BN)."""

    def __init__(self, cin, cout, stride=1, down="conv"):
        super().__init__()
        self.conv1 = ConvBn(cin, cout, 3, stride)
        self.conv2 = ConvBn(cout, cout, 3, act=None)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            if down == "avg" and stride != 1:
                self.downsample = nn.Sequential(
                    nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),
                    ConvBn(cin, cout, 1, act=None),
                )
            else:
                self.downsample = ConvBn(cin, cout, 1, stride, act=None)

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(self.conv2(self.conv1(x)) + shortcut)


class ResNet(nn.Module):
    """timm's ResNet with basic blocks; ``stem="deep_tiered"`` is ResNet-10t's 24/32/64 stem."""

    def __init__(self, layers, stem="7x7", down="conv", classes=1000):
        super().__init__()
        if stem == "deep_tiered":
            self.stem = nn.Sequential(
                ConvBn(3, 24, 3, 2), ConvBn(24, 32, 3), ConvBn(32, 64, 3), nn.MaxPool2d(3, 2, 1)
            )
        else:
            self.stem = nn.Sequential(ConvBn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (n, cout) in enumerate(zip(layers, (64, 128, 256, 512))):
            for j in range(n):
                blocks.append(BasicBlock(cin, cout, 2 if i and not j else 1, down))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(x.mean((2, 3)))


def ResNet10t():
    """resnet10t: one basic block per stage, deep tiered stem, average-pool downsampling."""
    return ResNet([1, 1, 1, 1], stem="deep_tiered", down="avg")


def ResNet18():
    return ResNet([2, 2, 2, 2])


def ResNet34():
    return ResNet([3, 4, 6, 3])


class RegNetYBlock(nn.Module):
    """RegNetY bottleneck (ratio 1): 1x1, 3x3 grouped (group width 8), SE (a quarter of the
    block's input channels, ReLU, sigmoid), 1x1, shortcut, ReLU."""

    def __init__(self, cin, cout, stride, gw=8):
        super().__init__()
        self.conv1 = ConvBn(cin, cout, 1)
        self.conv2 = ConvBn(cout, cout, 3, stride, groups=cout // gw)
        self.se = SE(cout, int(round(cin * 0.25)))
        self.conv3 = ConvBn(cout, cout, 1, act=None)
        self.down = ConvBn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.conv3(self.se(self.conv2(self.conv1(x)))) + s)


class RegNetY002(nn.Module):
    """regnety_002: stem 32, widths 24, 56, 152, 368, depths 1, 1, 4, 7, SE 0.25."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = ConvBn(3, 32, 3, 2)
        blocks, cin = [], 32
        for w, d in ((24, 1), (56, 1), (152, 4), (368, 7)):
            for i in range(d):
                blocks.append(RegNetYBlock(cin, w, 2 if i == 0 else 1))
                cin = w
        self.stages = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.stages(self.stem(x)).mean((2, 3)))


# -- DLA-34 (timm dla.py) ----------------------------------------------------------------------


class DlaBasic(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = ConvBn(cin, cout, 3, stride)
        self.conv2 = ConvBn(cout, cout, 3, act=None)

    def forward(self, x, shortcut=None):
        shortcut = x if shortcut is None else shortcut
        return F.relu(self.conv2(self.conv1(x)) + shortcut)


class DlaRoot(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = ConvBn(cin, cout, 1)

    def forward(self, xs):
        return self.conv(torch.cat(xs, 1))


class DlaTree(nn.Module):
    """timm's DlaTree: two children (blocks or subtrees), a concatenating root, the
    downsampled input joining the root at ``level_root``."""

    def __init__(self, levels, cin, cout, stride=1, level_root=False, root_dim=0):
        super().__init__()
        root_dim = root_dim or 2 * cout
        if level_root:
            root_dim += cin
        self.downsample = nn.MaxPool2d(stride, stride) if stride > 1 else nn.Identity()
        self.project: nn.Module = nn.Identity()
        if levels == 1:
            self.tree1: nn.Module = DlaBasic(cin, cout, stride)
            self.tree2: nn.Module = DlaBasic(cout, cout)
            if cin != cout:
                self.project = ConvBn(cin, cout, 1, act=None)
            self.root: nn.Module | None = DlaRoot(root_dim, cout)
        else:
            self.tree1 = DlaTree(levels - 1, cin, cout, stride)
            self.tree2 = DlaTree(levels - 1, cout, cout, root_dim=root_dim + cout)
            self.root = None
        self.level_root = level_root

    def forward(self, x, shortcut=None, children=None):
        children = [] if children is None else children
        bottom = self.downsample(x)
        shortcut = self.project(bottom)
        if self.level_root:
            children.append(bottom)
        if self.root is not None:
            x1 = self.tree1(x, shortcut)
            x2 = self.tree2(x1)
            return self.root([x2, x1, *children])
        x1 = self.tree1(x)
        children.append(x1)
        return self.tree2(x1, None, children)


class DLA34(nn.Module):
    """dla34: levels 1, 1, 1, 2, 2, 1; channels 16, 32, 64, 128, 256, 512; 1x1 conv head."""

    def __init__(self, classes=1000):
        super().__init__()
        self.base = ConvBn(3, 16, 7)
        self.level0 = ConvBn(16, 16, 3)
        self.level1 = ConvBn(16, 32, 3, 2)
        self.level2 = DlaTree(1, 32, 64, 2)
        self.level3 = DlaTree(2, 64, 128, 2, level_root=True)
        self.level4 = DlaTree(2, 128, 256, 2, level_root=True)
        self.level5 = DlaTree(1, 256, 512, 2, level_root=True)
        self.fc = nn.Conv2d(512, classes, 1)

    def forward(self, x):
        x = self.level1(self.level0(self.base(x)))
        x = self.level5(self.level4(self.level3(self.level2(x))))
        return self.fc(x.mean((2, 3), keepdim=True)).flatten(1)


# -- CSPResNet-50 (timm cspnet.py), small -------------------------------------------------------


class CspBottleneck(nn.Module):
    def __init__(self, c, mid):
        super().__init__()
        self.conv1 = ConvBn(c, mid, 1, act="leaky")
        self.conv2 = ConvBn(mid, mid, 3, act="leaky")
        self.conv3 = ConvBn(mid, c, 1, act=None)

    def forward(self, x):
        return F.leaky_relu(self.conv3(self.conv2(self.conv1(x))) + x, 0.01)


class CrossStage(nn.Module):
    """conv_down (strided stages), linear 1x1 expand to 2x, split in halves, bottlenecks on
    one half, 1x1 transition_b, concat with the other half, 1x1 transition."""

    def __init__(self, cin, cout, stride, depth):
        super().__init__()
        self.conv_down = ConvBn(cin, cin, 3, stride, act="leaky") if stride != 1 else None
        self.exp = 2 * cout
        self.conv_exp = ConvBn(cin, self.exp, 1, act=None)
        half = self.exp // 2
        self.blocks = nn.Sequential(*(CspBottleneck(half, half // 2) for _ in range(depth)))
        self.conv_transition_b = ConvBn(half, half, 1, act="leaky")
        self.conv_transition = ConvBn(self.exp, cout, 1, act="leaky")

    def forward(self, x):
        if self.conv_down is not None:
            x = self.conv_down(x)
        xs, xb = self.conv_exp(x).split(self.exp // 2, dim=1)
        xb = self.conv_transition_b(self.blocks(xb))
        return self.conv_transition(torch.cat([xs, xb], 1))


class CSPResNet50(nn.Module):
    """cspresnet50 at half width (small): 7x7 s2 stem + max pool, stages of depth 3, 4, 6, 3,
    leaky ReLU."""

    def __init__(self, width=0.5, classes=1000):
        super().__init__()
        c = [int(v * width) for v in (64, 128, 256, 512, 1024)]
        self.stem = nn.Sequential(ConvBn(3, c[0], 7, 2, act="leaky"), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], c[0]
        for i, (cout, depth) in enumerate(zip(c[1:], (3, 4, 6, 3))):
            stages.append(CrossStage(cin, cout, 1 if i == 0 else 2, depth))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.stages(self.stem(x)).mean((2, 3)))


# -- EfficientNet family with SiLU and mixed kernels (timm efficientnet.py) --------------------


def _split(c: int, n: int) -> list[int]:
    """timm's _split_channels: equal parts, the first takes the remainder."""
    parts = [c // n] * n
    parts[0] += c - sum(parts)
    return parts


class MixedConv(nn.Module):
    """timm's MixedConv2d: channels split, one conv per kernel size, concat (one part: a
    plain conv)."""

    def __init__(self, cin, cout, ks, stride=1, depthwise=False):
        super().__init__()
        self.cin_split = _split(cin, len(ks))
        cout_split = _split(cout, len(ks))
        self.convs = nn.ModuleList(
            nn.Conv2d(i, o, k, stride, k // 2, groups=i if depthwise else 1, bias=False)
            for i, o, k in zip(self.cin_split, cout_split, ks)
        )

    def forward(self, x):
        if len(self.convs) == 1:
            return self.convs[0](x)
        parts = torch.split(x, self.cin_split, 1)
        return torch.cat([c(p) for p, c in zip(parts, self.convs)], 1)


@dataclass(frozen=True)
class MB:
    """One block-string stage: kind ``ds``/``ir``, repeats, dw kernels, stride, expansion,
    out channels, SE ratio (of the block's input channels), activation, expand/project
    split in ``a``/``p`` groups (MixNet's ``a1.1``/``p1.1``)."""

    kind: str
    r: int
    k: tuple[int, ...]
    s: int
    e: float
    c: int
    se: float = 0.0
    act: str = "silu"
    a: int = 1
    p: int = 1


class MBBlock(nn.Module):
    def __init__(self, cin, st: MB, stride):
        super().__init__()
        mid = cin if st.kind == "ds" else make_divisible(cin * st.e)
        if st.kind == "ir":
            self.conv_pw: nn.Module = nn.Sequential(
                MixedConv(cin, mid, (1,) * st.a), nn.BatchNorm2d(mid), _act(st.act)
            )
        else:
            self.conv_pw = nn.Identity()
        self.conv_dw = nn.Sequential(
            MixedConv(mid, mid, st.k, stride, depthwise=True), nn.BatchNorm2d(mid), _act(st.act)
        )
        self.se = SE(mid, max(1, int(cin * st.se)), act=st.act) if st.se else nn.Identity()
        self.conv_pwl = nn.Sequential(MixedConv(mid, st.c, (1,) * st.p), nn.BatchNorm2d(st.c))
        self.residual = stride == 1 and cin == st.c

    def forward(self, x):
        y = self.conv_pwl(self.se(self.conv_dw(self.conv_pw(x))))
        return x + y if self.residual else y


class MBNet(nn.Module):
    def __init__(self, stages, stem=32, head=1280, act="silu", classes=1000):
        super().__init__()
        self.stem = ConvBn(3, stem, 3, 2, act=act)
        blocks, cin = [], stem
        for st in stages:
            for i in range(st.r):
                blocks.append(MBBlock(cin, st, st.s if i == 0 else 1))
                cin = st.c
        self.blocks = nn.Sequential(*blocks)
        self.head = ConvBn(cin, head, 1, act=act)
        self.fc = nn.Linear(head, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


_B0 = (  # (kind, repeats, kernel, stride, expansion, channels)
    ("ds", 1, 3, 1, 1, 16),
    ("ir", 2, 3, 2, 6, 24),
    ("ir", 2, 5, 2, 6, 40),
    ("ir", 3, 3, 2, 6, 80),
    ("ir", 3, 5, 1, 6, 112),
    ("ir", 4, 5, 2, 6, 192),
    ("ir", 1, 3, 1, 6, 320),
)


def EfficientNetB0():
    """efficientnet_b0: SiLU, SE 0.25 (sigmoid gate) in every block."""
    return MBNet([MB(k, r, (ks,), s, e, c, 0.25) for k, r, ks, s, e, c in _B0])


def TinyNetE():
    """tinynet_e: EfficientNet-B0's stages at width 0.51 and depth 0.6 (head stays 1280)."""
    stages = [
        MB(k, math.ceil(r * 0.6), (ks,), s, e, make_divisible(c * 0.51), 0.25)
        for k, r, ks, s, e, c in _B0
    ]
    return MBNet(stages, stem=make_divisible(32 * 0.51))


def MixNetS():
    """mixnet_s: mixed depthwise kernels, split pointwise convs, ReLU early, SiLU after."""
    r = "relu"
    return MBNet(
        [
            MB("ds", 1, (3,), 1, 1, 16, act=r),
            MB("ir", 1, (3,), 2, 6, 24, act=r, a=2, p=2),
            MB("ir", 1, (3,), 1, 3, 24, act=r, a=2, p=2),
            MB("ir", 1, (3, 5, 7), 2, 6, 40, 0.5),
            MB("ir", 3, (3, 5), 1, 6, 40, 0.5, a=2, p=2),
            MB("ir", 1, (3, 5, 7), 2, 6, 80, 0.25, p=2),
            MB("ir", 2, (3, 5), 1, 6, 80, 0.25, p=2),
            MB("ir", 1, (3, 5, 7), 1, 6, 120, 0.5, a=2, p=2),
            MB("ir", 2, (3, 5, 7, 9), 1, 3, 120, 0.5, a=2, p=2),
            MB("ir", 1, (3, 5, 7, 9, 11), 2, 6, 200, 0.5),
            MB("ir", 2, (3, 5, 7, 9), 1, 6, 200, 0.5, p=2),
        ],
        stem=16,
        head=1536,
        act="relu",
    )


# -- ReXNet-1.0 (timm rexnet.py) ---------------------------------------------------------------


class LinearBottleneck(nn.Module):
    """ReXNet's block: (1x1 SiLU expand), 3x3 dw BN, SE with BN, ReLU6, 1x1 BN; the shortcut
    adds into the first input channels only (``x[:, :cin] += shortcut``)."""

    def __init__(self, cin, cout, stride, exp, se):
        super().__init__()
        self.cin = cin
        self.use_shortcut = stride == 1 and cin <= cout
        mid = cin
        if exp != 1:
            mid = make_divisible(round(cin * exp))
            self.conv_exp: nn.Module = ConvBn(cin, mid, 1, act="silu")
        else:
            self.conv_exp = nn.Identity()
        self.conv_dw = ConvBn(mid, mid, 3, stride, groups=mid, act=None)
        self.se = SE(mid, make_divisible(int(mid * se)), norm=True) if se else nn.Identity()
        self.conv_pwl = ConvBn(mid, cout, 1, act=None)

    def forward(self, x):
        y = self.conv_pwl(F.relu6(self.se(self.conv_dw(self.conv_exp(x)))))
        if self.use_shortcut:
            y[:, : self.cin] += x
        return y


class ReXNet(nn.Module):
    """rexnet_100: 16 blocks (1, 2, 2, 3, 3, 5) whose width grows linearly from 16 to 180,
    SE 1/12 after the second stage, stem 32, head 1280."""

    def __init__(self, classes=1000):
        super().__init__()
        layers, strides = [1, 2, 2, 3, 3, 5], [1, 2, 2, 2, 1, 2]
        strides = sum([[s] + [1] * (n - 1) for n, s in zip(layers, strides)], [])
        exps = [1] * layers[0] + [6] * sum(layers[1:])
        ses = [0.0] * (layers[0] + layers[1]) + [1 / 12] * sum(layers[2:])
        depth, base, outs = sum(layers), 16.0, []
        for _ in range(depth):
            outs.append(make_divisible(round(base)))
            base += 180 / depth
        self.stem = ConvBn(3, 32, 3, 2, act="silu")
        blocks, cin = [], 32
        for cout, s, e, se in zip(outs, strides, exps, ses):
            blocks.append(LinearBottleneck(cin, cout, s, e, se))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = ConvBn(cin, 1280, 1, act="silu")
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))).mean((2, 3)))


# -- GhostNet (timm ghostnet.py) ---------------------------------------------------------------


class GhostModule(nn.Module):
    """1x1 primary conv to half the channels, 3x3 depthwise "cheap" conv, concat, cut."""

    def __init__(self, cin, cout, relu=True):
        super().__init__()
        self.cout = cout
        init = math.ceil(cout / 2)
        act = "relu" if relu else None
        self.primary = ConvBn(cin, init, 1, act=act)
        self.cheap = ConvBn(init, init, 3, groups=init, act=act)

    def forward(self, x):
        x1 = self.primary(x)
        return torch.cat([x1, self.cheap(x1)], 1)[:, : self.cout]


class GhostBottleneck(nn.Module):
    def __init__(self, cin, mid, cout, k, stride, se):
        super().__init__()
        self.ghost1 = GhostModule(cin, mid)
        self.dw = ConvBn(mid, mid, k, stride, groups=mid, act=None) if stride > 1 else None
        self.se = SE(mid, make_divisible(mid * se, 4), gate="hsigmoid") if se else nn.Identity()
        self.ghost2 = GhostModule(mid, cout, relu=False)
        if cin == cout and stride == 1:
            self.shortcut: nn.Module = nn.Identity()
        else:
            self.shortcut = nn.Sequential(
                ConvBn(cin, cin, k, stride, groups=cin, act=None), ConvBn(cin, cout, 1, act=None)
            )

    def forward(self, x):
        y = self.ghost1(x)
        if self.dw is not None:
            y = self.dw(y)
        return self.ghost2(self.se(y)) + self.shortcut(x)


_GHOST = (  # kernel, expansion channels, out, SE, stride
    (3, 16, 16, 0, 1), (3, 48, 24, 0, 2), (3, 72, 24, 0, 1), (5, 72, 40, 0.25, 2),
    (5, 120, 40, 0.25, 1), (3, 240, 80, 0, 2), (3, 200, 80, 0, 1), (3, 184, 80, 0, 1),
    (3, 184, 80, 0, 1), (3, 480, 112, 0.25, 1), (3, 672, 112, 0.25, 1), (5, 672, 160, 0.25, 2),
    (5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1), (5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1),
)  # fmt: skip


class GhostNet(nn.Module):
    """ghostnet_100: stem 16, 16 ghost bottlenecks, 1x1 960, pool, 1x1 1280 + ReLU, fc."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = ConvBn(3, 16, 3, 2)
        blocks, cin = [], 16
        for k, mid, cout, se, s in _GHOST:
            blocks.append(GhostBottleneck(cin, mid, cout, k, s, se))
            cin = cout
        self.blocks = nn.Sequential(*blocks, ConvBn(cin, 960, 1))
        self.conv_head = nn.Conv2d(960, 1280, 1)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x)).mean((2, 3), keepdim=True)
        return self.fc(F.relu(self.conv_head(x)).flatten(1))


# -- transformers (timm vision_transformer.py, deit.py, levit.py, mobilevit.py, convnext.py) ---


class Attention(nn.Module):
    """timm's ViT attention: one qkv linear, heads, ``F.scaled_dot_product_attention``, proj."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Sequential):
    def __init__(self, dim, hidden, act="gelu"):
        super().__init__(nn.Linear(dim, hidden), _act(act), nn.Linear(hidden, dim))


class Block(nn.Module):
    """Pre-norm transformer block (timm's ViT Block)."""

    def __init__(self, dim, heads, mlp_ratio=4.0, act="gelu"):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """vit_tiny (dim 192, 12 blocks, 3 heads) with a patch-8 embedding on 32x32 images, a
    class token and learned position embedding; ``distilled``: DeiT's extra distillation
    token and head, averaged with the class head at inference (deit_tiny_distilled)."""

    def __init__(self, img=32, patch=8, dim=192, depth=12, heads=3, classes=1000, distilled=False):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        tokens = 2 if distilled else 1
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, tokens, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, (img // patch) ** 2 + tokens, dim))
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)
        self.head_dist = nn.Linear(dim, classes) if distilled else None

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        x = self.norm(self.blocks(x))
        if self.head_dist is None:
            return self.head(x[:, 0])
        return (self.head(x[:, 0]) + self.head_dist(x[:, 1])) / 2


def ViTTiny():
    return ViT()


def DeiTTiny():
    return ViT(distilled=True)


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: LayerNorm over the channels of NCHW (permute, norm, permute)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).permute(
            0, 3, 1, 2
        )


class ConvNeXtBlock(nn.Module):
    """dw 7x7, LayerNorm2d, 1x1 conv MLP with GELU (``conv_mlp=True``), layer scale, residual."""

    def __init__(self, dim):
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = LayerNorm2d(dim, eps=1e-6)
        self.fc1 = nn.Conv2d(dim, 4 * dim, 1)
        self.fc2 = nn.Conv2d(4 * dim, dim, 1)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(self.norm(self.conv_dw(x)))))
        return x + y * self.gamma.reshape(1, -1, 1, 1)


class ConvNeXtAtto(nn.Module):
    """convnext_atto: depths 2, 2, 6, 2, dims 40, 80, 160, 320, patch-4 stem, LayerNorm2d
    before every downsampling conv, pool, LayerNorm, fc; layer scale 1e-6 (timm's init)."""

    def __init__(self, classes=1000):
        super().__init__()
        dims = (40, 80, 160, 320)
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        stages = []
        for i, (d, n) in enumerate(zip(dims, (2, 2, 6, 2))):
            if i:
                stages += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
            stages += [ConvNeXtBlock(d) for _ in range(n)]
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.fc(self.norm(self.stages(self.stem(x)).mean((2, 3))))


class _IR(nn.Module):
    """byobnet's inverted-residual "bottle" block (MobileViT): 1x1 expand SiLU, 3x3 dw SiLU,
    1x1 linear, residual when shapes allow."""

    def __init__(self, cin, cout, stride, e=2.0):
        super().__init__()
        mid = make_divisible(cin * e)
        self.body = nn.Sequential(
            ConvBn(cin, mid, 1, act="silu"),
            ConvBn(mid, mid, 3, stride, groups=mid, act="silu"),
            ConvBn(mid, cout, 1, act=None),
        )
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileVitBlock(nn.Module):
    """3x3 conv, 1x1 to the transformer width, unfold into 2x2 patches, transformer blocks
    (4 heads, MLP 2x, SiLU), LayerNorm, fold, 1x1 back, concat with the input, 3x3 fusion."""

    def __init__(self, c, dim, depth, patch=2):
        super().__init__()
        self.patch = patch
        self.conv_kxk = ConvBn(c, c, 3, act="silu")
        self.conv_1x1 = nn.Conv2d(c, dim, 1, bias=False)
        self.transformer = nn.Sequential(*(Block(dim, 4, 2.0, act="silu") for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.conv_proj = ConvBn(dim, c, 1, act="silu")
        self.conv_fusion = ConvBn(2 * c, c, 3, act="silu")

    def forward(self, x):
        shortcut = x
        x = self.conv_1x1(self.conv_kxk(x))
        b, c, h, w = x.shape
        p = self.patch
        nh, nw = h // p, w // p
        x = x.reshape(b * c * nh, p, nw, p).transpose(1, 2)  # unfold
        x = x.reshape(b, c, nh * nw, p * p).transpose(1, 3).reshape(b * p * p, nh * nw, c)
        x = self.norm(self.transformer(x))
        x = x.reshape(b, p * p, nh * nw, c).transpose(1, 3).reshape(b * c * nh, nw, p, p)
        x = x.transpose(1, 2).reshape(b, c, nh * p, nw * p)  # fold
        return self.conv_fusion(torch.cat([shortcut, self.conv_proj(x)], 1))


class MobileViTXXS(nn.Module):
    """mobilevit_xxs: stem 16 s2, IR stages (16; 24 x3), three MobileViT stages (48/64,
    64/80, 80/96 with 2, 4, 3 transformer blocks) each after a strided IR, 1x1 320 head."""

    def __init__(self, classes=1000):
        super().__init__()
        layers: list[nn.Module] = [ConvBn(3, 16, 3, 2, act="silu"), _IR(16, 16, 1)]
        layers += [_IR(16, 24, 2), _IR(24, 24, 1), _IR(24, 24, 1)]
        cin = 24
        for c, dim, depth in ((48, 64, 2), (64, 80, 4), (80, 96, 3)):
            layers += [_IR(cin, c, 2), MobileVitBlock(c, dim, depth)]
            cin = c
        layers.append(ConvBn(cin, 320, 1, act="silu"))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(320, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


class LinearNorm(nn.Module):
    """LeViT's Linear + BatchNorm1d over the flattened tokens."""

    def __init__(self, cin, cout):
        super().__init__()
        self.linear = nn.Linear(cin, cout, bias=False)
        self.bn = nn.BatchNorm1d(cout)

    def forward(self, x):
        return self.bn(self.linear(x).flatten(0, 1)).reshape(x.shape[0], x.shape[1], -1)


def _bias_idxs(res: int, stride: int = 1) -> tuple[torch.Tensor, int]:
    """LeViT's attention-bias index table: |dy|, |dx| between query and key positions."""
    q = [(i, j) for i in range(0, res, stride) for j in range(0, res, stride)]
    k = [(i, j) for i in range(res) for j in range(res)]
    offsets: dict[tuple[int, int], int] = {}
    idxs = []
    for a in q:
        for b in k:
            off = (abs(a[0] - b[0]), abs(a[1] - b[1]))
            idxs.append(offsets.setdefault(off, len(offsets)))
    return torch.tensor(idxs).view(len(q), len(k)), len(offsets)


class LevitAttention(nn.Module):
    """LeViT attention: qkv LinearNorm, q·kᵀ·scale plus a learned bias per head and position
    offset (indexed by a constant table), softmax, ·v, hardswish, proj LinearNorm; with
    ``stride`` 2 the queries come from every other token (AttentionSubsample)."""

    def __init__(self, cin, cout, key_dim, heads, attn_ratio, res, stride=1):
        super().__init__()
        self.heads, self.key_dim, self.res, self.stride = heads, key_dim, res, stride
        self.d = int(attn_ratio * key_dim)
        self.scale = key_dim**-0.5
        if stride == 1:
            self.qkv = LinearNorm(cin, heads * (2 * key_dim + self.d))
        else:
            self.kv = LinearNorm(cin, heads * (key_dim + self.d))
            self.q = LinearNorm(cin, heads * key_dim)
        self.proj = LinearNorm(heads * self.d, cout)
        idxs, n = _bias_idxs(res, stride)
        self.attention_biases = nn.Parameter(0.1 * torch.randn(heads, n))
        self.register_buffer("attention_bias_idxs", idxs, persistent=False)

    def forward(self, x):
        b, n, _ = x.shape
        h, kd = self.heads, self.key_dim
        if self.stride == 1:
            q, k, v = self.qkv(x).view(b, n, h, -1).split([kd, kd, self.d], dim=3)
            nq = n
        else:
            k, v = self.kv(x).view(b, n, h, -1).split([kd, self.d], dim=3)
            r = self.res
            xs = x.view(b, r, r, -1)[:, :: self.stride, :: self.stride].reshape(b, -1, x.shape[2])
            nq = xs.shape[1]
            q = self.q(xs).view(b, nq, h, kd)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        attn = q @ k.transpose(-2, -1) * self.scale
        attn = (attn + self.attention_biases[:, self.attention_bias_idxs]).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, nq, h * self.d)
        return self.proj(F.hardswish(x))


class LevitMlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.ln1, self.ln2 = LinearNorm(dim, hidden), LinearNorm(hidden, dim)

    def forward(self, x):
        return self.ln2(F.hardswish(self.ln1(x)))


class LeViT128s(nn.Module):
    """levit_128s on 64x64 (small resolution: 4x4 tokens): a 4-conv hardswish stem to 128,
    stages of 128/256/384 with 4/6/8 heads, depths 2/3/4, key dim 16, attention-subsample
    between stages, mean over tokens, BN + linear heads (class and distillation) averaged."""

    def __init__(self, img=64, classes=1000):
        super().__init__()
        dims, heads, depths = (128, 256, 384), (4, 6, 8), (2, 3, 4)
        self.stem = nn.Sequential(
            ConvBn(3, 16, 3, 2, act="hswish"),
            ConvBn(16, 32, 3, 2, act="hswish"),
            ConvBn(32, 64, 3, 2, act="hswish"),
            ConvBn(64, 128, 3, 2, act=None),
        )
        res = img // 16
        layers: list[nn.Module] = []
        for i, (d, h, n) in enumerate(zip(dims, heads, depths)):
            if i:
                layers.append(
                    LevitAttention(dims[i - 1], d, 16, dims[i - 1] // 16, 4, res, stride=2)
                )
                res = (res - 1) // 2 + 1
                layers.append(_Residual(LevitMlp(d, 2 * d)))
            for _ in range(n):
                layers.append(_Residual(LevitAttention(d, d, 16, h, 2, res)))
                layers.append(_Residual(LevitMlp(d, 2 * d)))
        self.blocks = nn.Sequential(*layers)
        self.head_bn, self.head = nn.BatchNorm1d(dims[-1]), nn.Linear(dims[-1], classes)
        self.dist_bn, self.dist = nn.BatchNorm1d(dims[-1]), nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.blocks(self.stem(x).flatten(2).transpose(1, 2)).mean(1)
        return (self.head(self.head_bn(x)) + self.dist(self.dist_bn(x))) / 2


class _Residual(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return x + self.m(x)


class PoolFormerBlock(nn.Module):
    """GroupNorm(1), 3x3 average pool (padding not counted) minus its input, layer scale;
    GroupNorm(1), 1x1-conv MLP with GELU, layer scale; both residual."""

    def __init__(self, dim):
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(1, dim), nn.GroupNorm(1, dim)
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp = nn.Sequential(nn.Conv2d(dim, 4 * dim, 1), nn.GELU(), nn.Conv2d(4 * dim, dim, 1))
        self.ls1 = nn.Parameter(1e-5 * torch.ones(dim, 1, 1))
        self.ls2 = nn.Parameter(1e-5 * torch.ones(dim, 1, 1))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.ls1 * (self.pool(y) - y)
        return x + self.ls2 * self.mlp(self.norm2(x))


class PoolFormerS12(nn.Module):
    """poolformer_s12: 7x7 s4 stem, depths 2, 2, 6, 2, widths 64, 128, 320, 512, 3x3 s2
    downsampling convs, GroupNorm(1), mean, fc; layer scale 1e-5 (timm's init)."""

    def __init__(self, classes=1000):
        super().__init__()
        dims = (64, 128, 320, 512)
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 7, 4, 2)]
        for i, (d, n) in enumerate(zip(dims, (2, 2, 6, 2))):
            if i:
                layers.append(nn.Conv2d(dims[i - 1], d, 3, 2, 1))
            layers += [PoolFormerBlock(d) for _ in range(n)]
        self.features = nn.Sequential(*layers, nn.GroupNorm(1, dims[-1]))
        self.fc = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def _relative_index(ws: int) -> torch.Tensor:
    """Swin's relative-position index of a ws x ws window: [ws², ws²] into a (2ws-1)² table."""
    coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
    coords = coords.flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
    return rel[..., 0] * (2 * ws - 1) + rel[..., 1]


class SwinBlock(nn.Module):
    """Swin's block on [B, H, W, C]: LayerNorm, (cyclic shift by ``torch.roll``), window
    partition, window attention with a relative-position bias (a learned table indexed by a
    constant) and, when shifted, the -100 additive mask, window reverse, roll back,
    residual; LayerNorm, GELU MLP, residual."""

    def __init__(self, dim, heads, res, ws, shift):
        super().__init__()
        if res <= ws:
            ws, shift = res, 0
        self.dim, self.heads, self.res, self.ws, self.shift = dim, heads, res, ws, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.table = nn.Parameter(0.02 * torch.randn((2 * ws - 1) ** 2, heads))
        self.register_buffer("index", _relative_index(ws), persistent=False)
        self.mlp = Mlp(dim, 4 * dim)
        mask = None
        if shift:
            img = torch.zeros(1, res, res, 1)
            cnt = 0
            for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                    img[:, h, w, :] = cnt
                    cnt += 1
            win = self._partition(img).squeeze(-1)  # [nW, N]
            mask = win[:, None, :] - win[:, :, None]
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        self.register_buffer("mask", mask, persistent=False)

    def _partition(self, x):
        b, h, w, c = x.shape
        ws = self.ws
        x = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, ws * ws, c)

    def forward(self, x):
        b, h, w, c = x.shape
        ws, n = self.ws, self.ws * self.ws
        y = self.norm1(x)
        if self.shift:
            y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
        win = self._partition(y)  # [B*nW, N, C]
        qkv = self.qkv(win).reshape(-1, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        if self.mask is not None:
            nw = self.mask.shape[0]
            attn = attn.view(-1, nw, self.heads, n, n) + self.mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        y = (attn.softmax(-1) @ v).transpose(1, 2).reshape(-1, n, c)
        y = self.proj(y).view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        y = y.reshape(b, h, w, c)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), (1, 2))
        x = x + y
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """2x2 neighbours concatenated (Swin v1 order), LayerNorm(4C), linear to 2C."""

    def __init__(self, dim):
        super().__init__()
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        b, h, w, c = x.shape
        x = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3)
        return self.reduction(self.norm(x))


class SwinTiny(nn.Module):
    """swin_tiny (dims 96..768, depths 2, 2, 6, 2, heads 3, 6, 12, 24) on 64x64 with window
    4 (small: 16x16 tokens after the patch-4 embedding; the last stage's window is its
    2x2 resolution, unshifted, as timm does)."""

    def __init__(self, img=64, ws=4, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, 96, 4, 4)
        self.patch_norm = nn.LayerNorm(96)
        layers: list[nn.Module] = []
        res, dim = img // 4, 96
        for i, (depth, heads) in enumerate(zip((2, 2, 6, 2), (3, 6, 12, 24))):
            if i:
                layers.append(PatchMerging(dim))
                res, dim = res // 2, dim * 2
            layers += [
                SwinBlock(dim, heads, res, ws, ws // 2 if j % 2 else 0) for j in range(depth)
            ]
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_norm(self.patch(x).permute(0, 2, 3, 1))
        return self.fc(self.norm(self.layers(x)).mean((1, 2)))


# -- torchaudio models -------------------------------------------------------------------------


class Wav2Letter(nn.Module):
    """torchaudio's Wav2Letter, ``input_type="waveform"``: a 250-wide stride-160 conv front,
    then conv 48 s2, seven conv 7, conv 32 (2000), 1x1 (2000), 1x1 to the classes, ReLU after
    each, log-softmax over the classes (dim 1). ``width`` scales 250/2000 (small: 0.25)."""

    def __init__(self, classes=40, width=0.25):
        super().__init__()
        a, b = int(250 * width), int(2000 * width)
        layers = [(1, a, 250, 160, 45), (a, a, 48, 2, 23)] + [(a, a, 7, 1, 3)] * 7
        layers += [(a, b, 32, 1, 16), (b, b, 1, 1, 0), (b, classes, 1, 1, 0)]
        mods: list[nn.Module] = []
        for cin, cout, k, s, p in layers:
            mods += [nn.Conv1d(cin, cout, k, s, p), nn.ReLU()]
        self.model = nn.Sequential(*mods)

    def forward(self, x):
        return F.log_softmax(self.model(x), dim=1)


class M5(nn.Module):
    """The M5 keyword net of torchaudio's speech-command tutorial: conv 80 s16, then three
    conv 3, each BN, ReLU, max pool 4; average over time, linear, log-softmax."""

    def __init__(self, classes=35, c=32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, c, 80, 16), nn.BatchNorm1d(c), nn.ReLU(), nn.MaxPool1d(4),
            nn.Conv1d(c, c, 3), nn.BatchNorm1d(c), nn.ReLU(), nn.MaxPool1d(4),
            nn.Conv1d(c, 2 * c, 3), nn.BatchNorm1d(2 * c), nn.ReLU(), nn.MaxPool1d(4),
            nn.Conv1d(2 * c, 2 * c, 3), nn.BatchNorm1d(2 * c), nn.ReLU(), nn.MaxPool1d(4),
        )  # fmt: skip
        self.fc = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.features(x)
        x = F.avg_pool1d(x, x.shape[-1]).permute(0, 2, 1)
        return F.log_softmax(self.fc(x), dim=2)


class _FC(nn.Module):
    """DeepSpeech's FullyConnected: linear, ReLU, hardtanh(0, 20)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.fc = nn.Linear(cin, cout)

    def forward(self, x):
        return F.hardtanh(F.relu(self.fc(x)), 0, 20)


class DeepSpeech(nn.Module):
    """torchaudio's DeepSpeech (small: hidden 256): three FC layers, a bidirectional ReLU RNN
    over time whose directions are summed, an FC, the output linear, log-softmax. Input
    ``[N, 1, T, features]``."""

    def __init__(self, features=40, hidden=256, classes=40):
        super().__init__()
        self.hidden = hidden
        self.fc1, self.fc2, self.fc3 = (
            _FC(features, hidden),
            _FC(hidden, hidden),
            _FC(hidden, hidden),
        )
        self.bi_rnn = nn.RNN(hidden, hidden, nonlinearity="relu", bidirectional=True)
        self.fc4 = _FC(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        x = self.fc3(self.fc2(self.fc1(x.squeeze(1))))  # [N, T, H]
        x, _ = self.bi_rnn(x.transpose(0, 1))  # [T, N, 2H]
        x = x[:, :, : self.hidden] + x[:, :, self.hidden :]
        x = self.out(self.fc4(x)).transpose(0, 1)
        return F.log_softmax(x, dim=2)


class _TasConvBlock(nn.Module):
    def __init__(self, io, hidden, dilation, residual):
        super().__init__()
        self.conv_layers = nn.Sequential(
            nn.Conv1d(io, hidden, 1), nn.PReLU(), nn.GroupNorm(1, hidden, eps=1e-8),
            nn.Conv1d(hidden, hidden, 3, padding=dilation, dilation=dilation, groups=hidden),
            nn.PReLU(), nn.GroupNorm(1, hidden, eps=1e-8),
        )  # fmt: skip
        self.res_out = nn.Conv1d(hidden, io, 1) if residual else None
        self.skip_out = nn.Conv1d(hidden, io, 1)

    def forward(self, x):
        y = self.conv_layers(x)
        return (None if self.res_out is None else self.res_out(y)), self.skip_out(y)


class ConvTasNet(nn.Module):
    """torchaudio's ConvTasNet (small: 64 encoder features, 32 bottleneck, 64 hidden, 4
    layers x 1 stack, 2 sources, kernel 16): encoder conv, global-layer-norm (GroupNorm 1)
    TCN mask generator with PReLU, skip sums, sigmoid masks, transposed-conv decoder."""

    def __init__(self, sources=2, k=16, feats=64, bottleneck=32, hidden=64, layers=4):
        super().__init__()
        self.sources, self.feats, self.stride = sources, feats, k // 2
        self.encoder = nn.Conv1d(1, feats, k, self.stride, self.stride, bias=False)
        self.input_norm = nn.GroupNorm(1, feats, eps=1e-8)
        self.input_conv = nn.Conv1d(feats, bottleneck, 1)
        self.blocks = nn.ModuleList(
            _TasConvBlock(bottleneck, hidden, 2**i, i < layers - 1) for i in range(layers)
        )
        self.output_prelu = nn.PReLU()
        self.output_conv = nn.Conv1d(bottleneck, feats * sources, 1)
        self.decoder = nn.ConvTranspose1d(feats, 1, k, self.stride, self.stride, bias=False)

    def forward(self, x):  # [N, 1, T], T a multiple of the stride
        n, _, t = x.shape
        feats = self.encoder(x)
        y = self.input_conv(self.input_norm(feats))
        skip = None
        for block in self.blocks:
            res, s = block(y)
            y = y if res is None else y + res
            skip = s if skip is None else skip + s
        mask = torch.sigmoid(self.output_conv(self.output_prelu(skip)))
        masked = mask.view(n, self.sources, self.feats, -1) * feats.unsqueeze(1)
        out = self.decoder(masked.view(n * self.sources, self.feats, -1))
        return out.view(n, self.sources, -1)[..., :t]


class _ConformerConv(nn.Module):
    """Conformer convolution module: LayerNorm, 1x1 to 2D, GLU, depthwise conv 31, BN, SiLU,
    1x1."""

    def __init__(self, d, k=31):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x):  # [N, T, D]
        y = F.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
        return self.pw2(F.silu(self.bn(self.dw(y)))).transpose(1, 2)


class _FF(nn.Sequential):
    def __init__(self, d, hidden):
        super().__init__(nn.LayerNorm(d), nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, d))


class ConformerLayer(nn.Module):
    """torchaudio's ConformerLayer: half-step FFN, MHSA (``nn.MultiheadAttention`` on
    ``[T, N, D]``), convolution module, half-step FFN, LayerNorm."""

    def __init__(self, d=64, heads=4, ffn=128):
        super().__init__()
        self.ffn1, self.ffn2 = _FF(d, ffn), _FF(d, ffn)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads)
        self.conv = _ConformerConv(d)
        self.final = nn.LayerNorm(d)

    def forward(self, x):  # [N, T, D]
        x = x + 0.5 * self.ffn1(x)
        y = self.attn_norm(x).transpose(0, 1)
        x = x + self.attn(y, y, y, need_weights=False)[0].transpose(0, 1)
        x = x + self.conv(x)
        return self.final(x + 0.5 * self.ffn2(x))


class Conformer(nn.Module):
    """A small Conformer (torchaudio ``Conformer``: input linear, 2 layers of dim 64, 4 heads,
    FFN 128, kernel 31) on 80-dim features, a linear head with log-softmax."""

    def __init__(self, features=80, d=64, layers=2, classes=32):
        super().__init__()
        self.inp = nn.Linear(features, d)
        self.layers = nn.Sequential(*(ConformerLayer(d) for _ in range(layers)))
        self.out = nn.Linear(d, classes)

    def forward(self, x):  # [N, T, F]
        return F.log_softmax(self.out(self.layers(self.inp(x))), dim=-1)


class Wav2Vec2Small(nn.Module):
    """torchaudio's wav2vec2/HuBERT base front, small (64 channels, 1 encoder layer): conv
    stack (10/5 with per-channel GroupNorm, then 3/2 x4 and 2/2 x2, GELU), feature projection
    (LayerNorm, linear), weight-normalised grouped positional conv (kernel 16, 4 groups,
    the last frame dropped, GELU) added, LayerNorm, one post-norm transformer layer."""

    def __init__(self, c=64, d=64, heads=4):
        super().__init__()
        convs: list[nn.Module] = [nn.Conv1d(1, c, 10, 5, bias=False), nn.GroupNorm(c, c), nn.GELU()]
        for k in (3, 3, 3, 3, 2, 2):
            convs += [nn.Conv1d(c, c, k, 2, bias=False), nn.GELU()]
        self.features = nn.Sequential(*convs)
        self.proj_norm = nn.LayerNorm(c)
        self.proj = nn.Linear(c, d)
        pos = nn.Conv1d(d, d, 16, padding=8, groups=4)
        self.pos_conv = nn.utils.parametrizations.weight_norm(pos, name="weight", dim=2)
        self.enc_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):  # [N, 1, T] waveform
        x = self.proj(self.proj_norm(self.features(x).transpose(1, 2)))  # [N, T', D]
        pos = F.gelu(self.pos_conv(x.transpose(1, 2))[..., :-1]).transpose(1, 2)
        x = self.enc_norm(x + pos)
        x = self.norm1(x + self.attn(x, x, x, need_weights=False)[0])
        return self.norm2(x + self.ff(x))


# -- registry ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReachModel:
    """A network: constructor, input shape without the batch dim, its source, whether the
    last BN of each residual block starts at zero (timm's ``zero_init_last``), and its source's
    weight initialisation: ``fan_out`` (``timm_init``: the CNNs whose timm code draws conv
    weights ``N(0, 2 / fan_out)``), ``trunc02`` (ConvNeXt's and ViT's ``N(0, 0.02)`` for conv
    and linear weights, biases 0), ``torch`` (torch's defaults: GhostNet, LeViT and the
    torchaudio models have no init of their own)."""

    build: Callable[[], nn.Module]
    shape: tuple[int, ...]
    source: str
    zero_init_last: bool = False
    init: str = "fan_out"


_IMG = (3, 64, 64)
REACH_MODELS: dict[str, ReachModel] = {
    "ResNet-10t": ReachModel(ResNet10t, _IMG, "timm resnet10t", zero_init_last=True),
    "ResNet-18-zi": ReachModel(ResNet18, _IMG, "timm resnet18", zero_init_last=True),
    "ResNet-34": ReachModel(ResNet34, _IMG, "timm resnet34"),
    "RegNetY-002": ReachModel(RegNetY002, _IMG, "timm regnety_002"),
    "DLA-34": ReachModel(DLA34, _IMG, "timm dla34"),
    "CSPResNet-50/2": ReachModel(CSPResNet50, _IMG, "timm cspresnet50 (half width)"),
    "EfficientNet-B0": ReachModel(EfficientNetB0, _IMG, "timm efficientnet_b0"),
    "MixNet-S": ReachModel(MixNetS, _IMG, "timm mixnet_s"),
    "TinyNet-E": ReachModel(TinyNetE, _IMG, "timm tinynet_e"),
    "ReXNet-1.0": ReachModel(ReXNet, _IMG, "timm rexnet_100"),
    "GhostNet": ReachModel(GhostNet, _IMG, "timm ghostnet_100", init="torch"),
    "MobileViT-XXS": ReachModel(MobileViTXXS, _IMG, "timm mobilevit_xxs"),
    "ConvNeXt-atto": ReachModel(ConvNeXtAtto, _IMG, "timm convnext_atto", init="trunc02"),
    "ViT-tiny/8": ReachModel(
        ViTTiny, (3, 32, 32), "timm vit_tiny (patch 8, 32x32)", init="trunc02"
    ),
    "DeiT-tiny": ReachModel(
        DeiTTiny, (3, 32, 32), "timm deit_tiny_distilled (patch 8)", init="trunc02"
    ),
    "PoolFormer-S12": ReachModel(PoolFormerS12, _IMG, "timm poolformer_s12", init="trunc02"),
    "Swin-T/w4": ReachModel(SwinTiny, _IMG, "timm swin_tiny (64x64, window 4)", init="trunc02"),
    "LeViT-128s": ReachModel(LeViT128s, _IMG, "timm levit_128s (64x64)", init="torch"),
    "Wav2Letter": ReachModel(
        Wav2Letter, (1, 8000), "torchaudio Wav2Letter (1/4 width)", init="torch"
    ),
    "M5": ReachModel(M5, (1, 8000), "torchaudio tutorial M5", init="torch"),
    "DeepSpeech": ReachModel(
        DeepSpeech, (1, 50, 40), "torchaudio DeepSpeech (hidden 256)", init="torch"
    ),
    "ConvTasNet": ReachModel(ConvTasNet, (1, 4000), "torchaudio ConvTasNet (small)", init="torch"),
    "Conformer": ReachModel(Conformer, (50, 80), "torchaudio Conformer (small)", init="torch"),
    "Wav2Vec2-FE": ReachModel(
        Wav2Vec2Small, (1, 8000), "torchaudio wav2vec2/HuBERT (small)", init="torch"
    ),
}
"""The networks this file adds, by name."""


def trunc02_init(model: nn.Module, seed: int = 0) -> nn.Module:
    """The transformers' initialisation (in place): conv and linear weights ``N(0, 0.02)``
    truncated at two standard deviations, biases 0 (timm's ViT, ConvNeXt, Swin ``_init_weights``)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                noise = torch.randn(module.weight.shape, generator=generator)
                module.weight.copy_(0.02 * noise.clamp(-2, 2))
                if module.bias is not None:
                    module.bias.zero_()
    return model


_LAST_BN = {BasicBlock: "conv2", DlaBasic: "conv2", CspBottleneck: "conv3"}


def make_reach_model(name: str, seed: int = 0) -> nn.Module:
    """``REACH_MODELS[name]`` with timm's initialisation, realistic BatchNorm statistics (and,
    for ``zero_init_last`` nets, each residual block's last BN at weight 0 and bias 0, as
    timm creates them), ``eval()``."""
    torch.manual_seed(seed)
    spec = REACH_MODELS[name]
    model = spec.build()
    if spec.init == "fan_out":
        timm_init(model, seed)
    elif spec.init == "trunc02":
        trunc02_init(model, seed)
    randomize_batch_norm(model, seed)
    if spec.zero_init_last:
        with torch.no_grad():
            for module in model.modules():
                attr = _LAST_BN.get(type(module))
                if attr is not None:
                    bn = getattr(module, attr)[1]
                    bn.weight.zero_()
                    bn.bias.zero_()
    return model.eval()
