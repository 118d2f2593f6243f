"""SQNR of nq against nf at SiLU's and GELU's outputs, 8-bit weights and activations: the
table in docs/ADDING_AN_OP.md ("An elementwise float function"). Two small nets with
random-init weights (BN statistics randomized), N(0, 1) calibration and held-out batches;
prints `nanoir.report` of each and checks nq == nh.

    python benchmarks/sqnr_silu_gelu.py
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import nanoir

torch.manual_seed(0)
torch.set_num_threads(1)


class MBConv(nn.Module):
    def __init__(s, c=8, e=4):
        super().__init__()
        h = c * e
        s.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        s.dw = nn.Sequential(
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.SiLU()
        )
        s.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(h, 8, 1), nn.SiLU(), nn.Conv2d(8, h, 1), nn.Sigmoid()
        )
        s.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(s, x):
        y = s.dw(s.expand(x))
        return x + s.project(y * s.se(y))


class Mlp(nn.Module):
    def __init__(s, approximate):
        super().__init__()
        s.stem = nn.Conv1d(8, 32, 1)
        s.act = nn.GELU(approximate=approximate)
        s.fc = nn.Conv1d(32, 8, 1)

    def forward(s, x):
        return x + s.fc(s.act(s.stem(x)))


def randomize_bn(m):
    g = torch.Generator().manual_seed(1)
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.copy_(torch.randn(b.num_features, generator=g) * 0.1)
            b.running_var.copy_(torch.rand(b.num_features, generator=g) + 0.5)
            b.weight.data.copy_(torch.rand(b.num_features, generator=g) + 0.5)
    return m


for name, model, shape in [
    ("MBConv (SiLU x3, SE)", randomize_bn(MBConv()).eval(), (8, 16, 16)),
    ("GELU MLP none", Mlp("none").eval(), (8, 64)),
    ("GELU MLP tanh", Mlp("tanh").eval(), (8, 64)),
]:
    rng = np.random.default_rng(0)
    mod = nanoir.from_torch(model, (torch.randn(2, *shape),))
    nanoir.quantize(
        mod, [rng.standard_normal((8, *shape)) for _ in range(4)], weight_bits=8, act_bits=8
    )
    rep = nanoir.report(mod, [rng.standard_normal((8, *shape)) for _ in range(4)])
    print("==", name)
    ops = {
        op.results[0].name_hint: op.name for op in mod.walk() if op.name in ("nf.silu", "nf.gelu")
    }
    print("op outputs:", ops)
    print(rep)
    x = rng.standard_normal((3, *shape))
    hw = nanoir.lower_to_hw(mod.clone())
    print("nq == nh:", np.array_equal(nanoir.run(hw, x)[0], nanoir.run(mod, x)[0]))
