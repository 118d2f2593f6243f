"""Conv families the first corpus lacks: ResNeSt, Res2Net, SKNet, BiT (weight-standardised
convs + GroupNorm), CBAM, SqueezeNet, ShuffleNetV2, GoogLeNet, HRNet, U-Net and an ESPCN
super-resolution net with a bicubic skip.

Written from the layout of timm's ``resnest.py``, ``res2net.py``, ``sknet.py``,
``resnetv2.py``, ``cbam.py``; torchvision's ``squeezenet.py``, ``shufflenetv2.py``,
``googlenet.py``; HRNet's and milesial's Pytorch-UNet public code; the ESPCN paper. Module
names and code are ours; "small" in a docstring means fewer blocks or narrower than published.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from ptq_models import make_divisible
from reach_models import ConvBn
from torch import nn

# -- ResNeSt (split attention) ------------------------------------------------------------------


class SplitAttention(nn.Module):
    """ResNeSt's split-attention conv (radix 2): a grouped 3x3 making ``radix`` splits, their
    sum pooled, a 2-layer 1x1 MLP, softmax across the splits (``rSoftMax``), the splits
    weighted and summed (``sum(dim=1)``)."""

    def __init__(self, cin, cout, radix=2):
        super().__init__()
        self.radix = radix
        mid = cout * radix
        attn = make_divisible(cin * radix * 0.25, 32)
        self.conv = nn.Conv2d(cin, mid, 3, 1, 1, groups=radix, bias=False)
        self.bn0 = nn.BatchNorm2d(mid)
        self.fc1, self.bn1, self.fc2 = (
            nn.Conv2d(cout, attn, 1),
            nn.BatchNorm2d(attn),
            nn.Conv2d(attn, mid, 1),
        )

    def forward(self, x):
        x = F.relu(self.bn0(self.conv(x)))
        b, rc, h, w = x.shape
        x = x.reshape(b, self.radix, rc // self.radix, h, w)
        gap = x.sum(dim=1).mean((2, 3), keepdim=True)
        attn = self.fc2(F.relu(self.bn1(self.fc1(gap))))
        attn = attn.view(b, 1, self.radix, -1).transpose(1, 2)
        attn = F.softmax(attn, dim=1).reshape(b, -1)
        attn = attn.view(b, self.radix, rc // self.radix, 1, 1)
        return (x * attn).sum(dim=1)


class ResNeStBottleneck(nn.Module):
    """1x1, split attention, 3x3 s2 average pool when strided (``avd``), 1x1 x4; an
    average-pooled 1x1 shortcut (``avg_down``)."""

    def __init__(self, cin, planes, stride):
        super().__init__()
        cout = 4 * planes
        self.conv1 = ConvBn(cin, planes, 1)
        self.conv2 = SplitAttention(planes, planes)
        self.avd = nn.AvgPool2d(3, stride, 1) if stride > 1 else nn.Identity()
        self.conv3 = ConvBn(planes, cout, 1, act=None)
        self.down = None
        if stride != 1 or cin != cout:
            pool = nn.AvgPool2d(stride, stride, ceil_mode=True, count_include_pad=False)
            self.down = nn.Sequential(
                pool if stride > 1 else nn.Identity(), ConvBn(cin, cout, 1, act=None)
            )

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.conv3(self.avd(self.conv2(self.conv1(x)))) + s)


class ResNeSt14(nn.Module):
    """resnest14d at half width (small): deep stem 16/16/32, max pool, one bottleneck per
    stage (planes 32, 64, 128, 256), mean, fc."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            ConvBn(3, 16, 3, 2), ConvBn(16, 16, 3), ConvBn(16, 32, 3), nn.MaxPool2d(3, 2, 1)
        )
        blocks, cin = [], 32
        for i, planes in enumerate((32, 64, 128, 256)):
            blocks.append(ResNeStBottleneck(cin, planes, 1 if i == 0 else 2))
            cin = 4 * planes
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


# -- Res2Net ------------------------------------------------------------------------------------


class Bottle2neck(nn.Module):
    """Res2Net's bottleneck (scale 4): 1x1, the channels split in 4, three 3x3 convs each on
    its split plus the previous result (the first block of a stage: on its split alone, the
    last split average-pooled), concat, 1x1, residual."""

    def __init__(self, cin, planes, stride, first, base_width=26, scale=4):
        super().__init__()
        width = planes * base_width // 64
        self.width, self.first = width, first
        self.conv1 = ConvBn(cin, width * scale, 1)
        self.convs = nn.ModuleList(ConvBn(width, width, 3, stride) for _ in range(scale - 1))
        self.pool = nn.AvgPool2d(3, stride, 1) if first else None
        self.conv3 = ConvBn(width * scale, 4 * planes, 1, act=None)
        self.down = ConvBn(cin, 4 * planes, 1, stride, act=None) if first else None

    def forward(self, x):
        spx = torch.split(self.conv1(x), self.width, 1)
        out, sp = [], None
        for i, conv in enumerate(self.convs):
            sp = spx[i] if i == 0 or self.first else sp + spx[i]
            sp = conv(sp)
            out.append(sp)
        out.append(self.pool(spx[-1]) if self.pool is not None else spx[-1])
        s = x if self.down is None else self.down(x)
        return F.relu(self.conv3(torch.cat(out, 1)) + s)


class Res2Net50(nn.Module):
    """res2net50_26w_4s at half width with 1, 1, 2, 1 blocks instead of 3, 4, 6, 3 (small)."""

    def __init__(self, classes=1000, depths=(1, 1, 2, 1)):
        super().__init__()
        self.stem = nn.Sequential(ConvBn(3, 32, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 32
        for i, (planes, n) in enumerate(zip((32, 64, 128, 256), depths)):
            for j in range(n):
                blocks.append(Bottle2neck(cin, planes, 2 if i and not j else 1, j == 0))
                cin = 4 * planes
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


# -- SKNet (selective kernel) -------------------------------------------------------------------


class SelectiveKernel(nn.Module):
    """timm's SelectiveKernel (``split_input=True``): the input halves go through a 3x3 and a
    dilated 3x3 path, ``stack``-ed; their sum pooled, a 1x1 MLP, softmax over the two paths,
    weighted ``sum(dim=1)``."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.paths = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(cin // 2, cout, 3, stride, d, dilation=d, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
            )
            for d in (1, 2)
        )
        rd = make_divisible(cout / 8, 16)
        self.fc_reduce, self.bn = nn.Conv2d(cout, rd, 1, bias=False), nn.BatchNorm2d(rd)
        self.fc_select = nn.Conv2d(rd, 2 * cout, 1, bias=False)

    def forward(self, x):
        halves = torch.split(x, x.shape[1] // 2, 1)
        x = torch.stack([path(h) for path, h in zip(self.paths, halves)], dim=1)
        b, _, c, _, _ = x.shape
        attn = self.fc_select(F.relu(self.bn(self.fc_reduce(x.sum(1).mean((2, 3), keepdim=True)))))
        attn = torch.softmax(attn.view(b, 2, c, 1, 1), dim=1)
        return (x * attn).sum(dim=1)


class SKBasic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = SelectiveKernel(cin, cout, stride)
        self.conv2 = ConvBn(cout, cout, 3, act=None)
        self.down = ConvBn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.conv2(self.conv1(x)) + s)


class SKResNet18(nn.Module):
    """skresnet18 at half width (small): 7x7 stem, 2 selective-kernel basic blocks per stage."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(ConvBn(3, 32, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 32
        for i, cout in enumerate((32, 64, 128, 256)):
            for j in range(2):
                blocks.append(SKBasic(cin, cout, 2 if i and not j else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


# -- BiT: ResNetV2 with weight standardisation and GroupNorm ------------------------------------


class StdConv2d(nn.Conv2d):
    """A conv whose weight is standardised per output channel in ``forward`` (timm's
    ``StdConv2d``: ``F.batch_norm`` of the weight in training mode, eps 1e-8)."""

    def forward(self, x):
        w = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1),
            None,
            None,
            training=True,
            momentum=0.0,
            eps=1e-8,
        ).reshape_as(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _GnAct(nn.Sequential):
    def __init__(self, c):
        super().__init__(nn.GroupNorm(32, c, eps=1e-5), nn.ReLU())


class PreActBottleneck(nn.Module):
    """ResNetV2's pre-activation bottleneck: GN+ReLU first, the shortcut projected from it."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        mid = cout // 4
        self.norm1 = _GnAct(cin)
        self.down = (
            StdConv2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else None
        )
        self.conv1, self.norm2 = StdConv2d(cin, mid, 1, bias=False), _GnAct(mid)
        self.conv2, self.norm3 = StdConv2d(mid, mid, 3, stride, 1, bias=False), _GnAct(mid)
        self.conv3 = StdConv2d(mid, cout, 1, bias=False)

    def forward(self, x):
        pre = self.norm1(x)
        s = x if self.down is None else self.down(pre)
        return self.conv3(self.norm3(self.conv2(self.norm2(self.conv1(pre))))) + s


class BiTResNetV2(nn.Module):
    """resnetv2_50x1_bit at half width with one block per stage (small): StdConv 7x7 stem,
    constant pad + 3x3 max pool, pre-activation bottlenecks, GN+ReLU, mean, 1x1 conv head."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            StdConv2d(3, 32, 7, 2, 3, bias=False), nn.ConstantPad2d(1, 0.0), nn.MaxPool2d(3, 2)
        )
        blocks, cin = [], 32
        for i, cout in enumerate((128, 256, 512, 1024)):
            blocks.append(PreActBottleneck(cin, cout, 1 if i == 0 else 2))
            cin = cout
        self.stages = nn.Sequential(*blocks)
        self.norm = _GnAct(cin)
        self.head = nn.Conv2d(cin, classes, 1)

    def forward(self, x):
        x = self.norm(self.stages(self.stem(x)))
        return self.head(x.mean((2, 3), keepdim=True)).flatten(1)


# -- CBAM ---------------------------------------------------------------------------------------


class CBAM(nn.Module):
    """Channel attention (a shared 1x1 MLP on the average and the max pool, summed, sigmoid),
    then spatial attention (``cat`` of the channel mean and ``amax``, 7x7 conv + BN, sigmoid)."""

    def __init__(self, c, rd=16):
        super().__init__()
        self.fc = nn.Sequential(
            nn.Conv2d(c, c // rd, 1, bias=False), nn.ReLU(), nn.Conv2d(c // rd, c, 1, bias=False)
        )
        self.spatial = ConvBn(2, 1, 7, act=None)

    def forward(self, x):
        avg, mx = x.mean((2, 3), keepdim=True), x.amax((2, 3), keepdim=True)
        x = x * torch.sigmoid(self.fc(avg) + self.fc(mx))
        s = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)
        return x * torch.sigmoid(self.spatial(s))


class CbamBasic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.conv2 = ConvBn(cin, cout, 3, stride), ConvBn(cout, cout, 3, act=None)
        self.cbam = CBAM(cout)
        self.down = ConvBn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.cbam(self.conv2(self.conv1(x))) + s)


class CbamResNet18(nn.Module):
    """timm's cbam_resnet18 layout (resnet18 with CBAM after each block's second conv) at half
    width (small)."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(ConvBn(3, 32, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 32
        for i, cout in enumerate((32, 64, 128, 256)):
            for j in range(2):
                blocks.append(CbamBasic(cin, cout, 2 if i and not j else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


# -- SqueezeNet 1.1 -----------------------------------------------------------------------------


class Fire(nn.Module):
    def __init__(self, cin, squeeze, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1, self.expand3 = nn.Conv2d(squeeze, e1, 1), nn.Conv2d(squeeze, e3, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1(x)), F.relu(self.expand3(x))], 1)


class SqueezeNet11(nn.Module):
    """torchvision's squeezenet1_1 with its initialisation (kaiming-uniform convs, the final
    conv ``N(0, 0.01)``): ceil-mode max pools, fire modules, dropout, 1x1 conv classifier,
    ReLU, adaptive average pool."""

    def __init__(self, classes=1000):
        super().__init__()
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
        )  # fmt: skip
        final = nn.Conv2d(512, classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(0.5), final, nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# -- ShuffleNetV2 x0.5 --------------------------------------------------------------------------


def channel_shuffle(x, groups: int):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    """torchvision's InvertedResidual: stride 1 ``chunk``s the channels and transforms one
    half; stride 2 transforms the input twice; concat, channel shuffle."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        half = cout // 2
        self.stride = stride
        self.branch1 = nn.Identity()
        if stride > 1:
            self.branch1 = nn.Sequential(
                ConvBn(cin, cin, 3, stride, groups=cin, act=None), ConvBn(cin, half, 1)
            )
        c = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            ConvBn(c, half, 1),
            ConvBn(half, half, 3, stride, groups=half, act=None),
            ConvBn(half, half, 1),
        )

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """torchvision's shufflenet_v2_x0_5: channels 24, 48, 96, 192, 1024, repeats 4, 8, 4."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Sequential(ConvBn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1))
        units, cin = [], 24
        for cout, n in ((48, 4), (96, 8), (192, 4)):
            for i in range(n):
                units.append(ShuffleUnit(cin, cout, 2 if i == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*units)
        self.conv5 = ConvBn(cin, 1024, 1)
        self.fc = nn.Linear(1024, classes)

    def forward(self, x):
        return self.fc(self.conv5(self.stages(self.conv1(x))).mean([2, 3]))


# -- GoogLeNet ----------------------------------------------------------------------------------


class BasicConv(nn.Sequential):
    def __init__(self, cin, cout, k, stride=1, padding=0):
        super().__init__(
            nn.Conv2d(cin, cout, k, stride, padding, bias=False),
            nn.BatchNorm2d(cout, eps=0.001),
            nn.ReLU(),
        )


class Inception(nn.Module):
    """Four branches: 1x1; 1x1, 3x3; 1x1, 3x3 (torchvision's 3x3 where the paper has 5x5);
    3x3 s1 ceil-mode max pool, 1x1; concat."""

    def __init__(self, cin, c1, c3r, c3, c5r, c5, pool):
        super().__init__()
        self.branch1 = BasicConv(cin, c1, 1)
        self.branch2 = nn.Sequential(BasicConv(cin, c3r, 1), BasicConv(c3r, c3, 3, padding=1))
        self.branch3 = nn.Sequential(BasicConv(cin, c5r, 1), BasicConv(c5r, c5, 3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), BasicConv(cin, pool, 1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision's googlenet (no aux heads) with ``transform_input=True`` (as its pretrained
    weights set: each channel re-normalised, ``x[:, i]`` slices, ``unsqueeze``, ``cat``) and its
    initialisation (truncated ``N(0, 0.01)``)."""

    def __init__(self, classes=1000):
        super().__init__()
        pool = lambda k=3: nn.MaxPool2d(k, 2, ceil_mode=True)  # noqa: E731
        self.stem = nn.Sequential(
            BasicConv(3, 64, 7, 2, 3),
            pool(),
            BasicConv(64, 64, 1),
            BasicConv(64, 192, 3, padding=1),
            pool(),
        )
        self.inceptions = nn.Sequential(
            Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64), pool(),
            Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
            Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
            Inception(528, 256, 160, 320, 32, 128, 128), pool(2),
            Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128),
        )  # fmt: skip
        self.dropout, self.fc = nn.Dropout(0.2), nn.Linear(1024, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, 0.0, 0.01, -2, 2)

    def forward(self, x):
        c0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
        c1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
        c2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
        x = self.inceptions(self.stem(torch.cat((c0, c1, c2), 1)))
        return self.fc(self.dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


# -- HRNet --------------------------------------------------------------------------------------


class _Basic(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.conv2 = ConvBn(c, c, 3), ConvBn(c, c, 3, act=None)

    def forward(self, x):
        return F.relu(self.conv2(self.conv1(x)) + x)


class HRFuse(nn.Module):
    """HRNet's fuse layer: each output branch sums every input branch brought to its
    resolution (1x1 conv + BN + ``nn.Upsample`` nearest from below, chains of 3x3 s2 convs
    from above), ReLU."""

    def __init__(self, widths):
        super().__init__()
        self.paths = nn.ModuleList()
        for i, ci in enumerate(widths):
            row = nn.ModuleList()
            for j, cj in enumerate(widths):
                if j > i:
                    row.append(
                        nn.Sequential(
                            ConvBn(cj, ci, 1, act=None),
                            nn.Upsample(scale_factor=2 ** (j - i), mode="nearest"),
                        )
                    )
                elif j == i:
                    row.append(nn.Identity())
                else:
                    steps = [ConvBn(cj, cj, 3, 2) for _ in range(i - j - 1)]
                    row.append(nn.Sequential(*steps, ConvBn(cj, ci, 3, 2, act=None)))
            self.paths.append(row)

    def forward(self, xs):
        out = []
        for row in self.paths:
            y = row[0](xs[0])
            for path, x in zip(list(row)[1:], xs[1:]):
                y = y + path(x)
            out.append(F.relu(y))
        return out


class HRNetSmall(nn.Module):
    """An HRNet-W18-small segmenter (small: one basic block per branch, stages of 2 and 3
    branches, widths 18, 36, 72): stem 2x 3x3 s2, one block, transitions, fuse layers, the
    segmentation head (lower branches upsampled to the top one by bilinear ``interpolate``,
    concat, 1x1 + BN + ReLU, 1x1 to 19 classes)."""

    def __init__(self, classes=19, widths=(18, 36, 72)):
        super().__init__()
        self.stem = nn.Sequential(ConvBn(3, 32, 3, 2), ConvBn(32, 32, 3, 2), _Basic(32))
        self.trans1 = nn.ModuleList([ConvBn(32, widths[0], 3), ConvBn(32, widths[1], 3, 2)])
        self.stage2 = nn.ModuleList(_Basic(c) for c in widths[:2])
        self.fuse2 = HRFuse(widths[:2])
        self.trans2 = ConvBn(widths[1], widths[2], 3, 2)
        self.stage3 = nn.ModuleList(_Basic(c) for c in widths)
        self.fuse3 = HRFuse(widths)
        total = sum(widths)
        self.head = nn.Sequential(ConvBn(total, total, 1), nn.Conv2d(total, classes, 1))

    def forward(self, x):
        x = self.stem(x)
        xs = [t(x) for t in self.trans1]
        xs = self.fuse2([b(v) for b, v in zip(self.stage2, xs)])
        xs = [*xs, self.trans2(xs[-1])]
        xs = self.fuse3([b(v) for b, v in zip(self.stage3, xs)])
        h, w = xs[0].shape[2:]
        ups = [F.interpolate(v, size=(h, w), mode="bilinear", align_corners=False) for v in xs[1:]]
        return self.head(torch.cat([xs[0], *ups], 1))


# -- U-Net --------------------------------------------------------------------------------------


class DoubleConv(nn.Sequential):
    def __init__(self, cin, cout, mid=None):
        mid = mid or cout
        super().__init__(ConvBn(cin, mid, 3), ConvBn(mid, cout, 3))


class Up(nn.Module):
    """Bilinear x2 (``align_corners=True``), pad to the skip's size, concat, double conv."""

    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = DoubleConv(cin, cout, cin // 2)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size()[2] - x1.size()[2], x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class UNetSmall(nn.Module):
    """milesial's U-Net (``bilinear=True``) at a quarter width (16 ... 128): four max-pool
    downs, four bilinear ups with skip concats, 1x1 to 2 classes."""

    def __init__(self, classes=2, w=16):
        super().__init__()
        self.inc = DoubleConv(3, w)
        self.downs = nn.ModuleList(
            nn.Sequential(nn.MaxPool2d(2), DoubleConv(a, b))
            for a, b in ((w, 2 * w), (2 * w, 4 * w), (4 * w, 8 * w), (8 * w, 8 * w))
        )
        self.ups = nn.ModuleList([Up(16 * w, 4 * w), Up(8 * w, 2 * w), Up(4 * w, w), Up(2 * w, w)])
        self.outc = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)


# -- ESPCN x2 with a bicubic skip ---------------------------------------------------------------


class ESPCN(nn.Module):
    """ESPCN (5x5 64, 3x3 32, 3x3 to 3·r², tanh, ``pixel_shuffle``) for x2 super-resolution,
    its output added to a bicubic upsampling of the input (the residual form edge SR nets
    use)."""

    def __init__(self, scale=2):
        super().__init__()
        self.scale = scale
        self.body = nn.Sequential(
            nn.Conv2d(3, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
            nn.Conv2d(32, 3 * scale**2, 3, padding=1),
        )  # fmt: skip

    def forward(self, x):
        up = F.interpolate(x, scale_factor=self.scale, mode="bicubic", align_corners=False)
        return F.pixel_shuffle(self.body(x), self.scale) + up
