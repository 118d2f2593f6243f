"""Detectors as they are exported for deployment: YOLOv5n and a Scaled-YOLOv4-CSP (Mish) with
the decoding head (reshape, permute, sigmoid, a grid built in ``forward`` by ``arange`` /
``meshgrid`` / ``stack``), and a tiny DETR (sine position embedding from ``cumsum`` of a mask,
learned queries ``repeat``-ed over the batch, ``nn.MultiheadAttention``).

Written from the layout of Ultralytics' ``models/common.py`` and ``models/yolo.py`` (v5 and the
Scaled-YOLOv4 branch) and facebookresearch/detr's ``models/position_encoding.py`` and
``transformer.py``; module names and code are ours, widths small.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from reach_models import ConvBn
from torch import nn


class YoloConv(nn.Sequential):
    """Ultralytics' ``Conv``: conv (no bias), BN (eps 1e-3), SiLU or Mish."""

    def __init__(self, cin, cout, k=1, s=1, act="silu", p=None):
        super().__init__(
            nn.Conv2d(cin, cout, k, s, k // 2 if p is None else p, bias=False),
            nn.BatchNorm2d(cout, eps=1e-3, momentum=0.03),
            nn.SiLU() if act == "silu" else nn.Mish(),
        )


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut=True, act="silu"):
        super().__init__()
        self.cv1, self.cv2 = YoloConv(c, c, 1, act=act), YoloConv(c, c, 3, act=act)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """YOLOv5's CSP block: two 1x1 halves, bottlenecks on one, concat, 1x1."""

    def __init__(self, cin, cout, n=1, shortcut=True):
        super().__init__()
        c = cout // 2
        self.cv1, self.cv2 = YoloConv(cin, c), YoloConv(cin, c)
        self.m = nn.Sequential(*(Bottleneck(c, shortcut) for _ in range(n)))
        self.cv3 = YoloConv(2 * c, cout)

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class BottleneckCSP(nn.Module):
    """Scaled-YOLOv4's CSP block: one half through bottlenecks and a plain 1x1, the other a
    plain 1x1 of the input, concat, **BN and Mish on the concat**, 1x1 conv."""

    def __init__(self, cin, cout, n=1, shortcut=True):
        super().__init__()
        c = cout // 2
        self.cv1 = YoloConv(cin, c, act="mish")
        self.cv2 = nn.Conv2d(cin, c, 1, bias=False)
        self.cv3 = nn.Conv2d(c, c, 1, bias=False)
        self.cv4 = YoloConv(2 * c, cout, act="mish")
        self.bn = nn.BatchNorm2d(2 * c, eps=1e-3, momentum=0.03)
        self.m = nn.Sequential(*(Bottleneck(c, shortcut, "mish") for _ in range(n)))

    def forward(self, x):
        y1, y2 = self.cv3(self.m(self.cv1(x))), self.cv2(x)
        return self.cv4(F.mish(self.bn(torch.cat((y1, y2), dim=1))))


class SPPF(nn.Module):
    """YOLOv5's SPPF: 1x1 to half, the same 5x5 s1 max pool three times in a row, concat, 1x1."""

    def __init__(self, cin, cout):
        super().__init__()
        c = cin // 2
        self.cv1, self.cv2 = YoloConv(cin, c), YoloConv(4 * c, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class SPPCSP(nn.Module):
    """Scaled-YOLOv4's SPPCSP: parallel 5/9/13 max pools inside a CSP split, BN + Mish on the
    concat."""

    def __init__(self, cin, cout):
        super().__init__()
        c = cout
        self.cv1 = YoloConv(cin, c, act="mish")
        self.cv2 = nn.Conv2d(cin, c, 1, bias=False)
        self.cv3, self.cv4 = YoloConv(c, c, 3, act="mish"), YoloConv(c, c, act="mish")
        self.m = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.cv5, self.cv6 = YoloConv(4 * c, c, act="mish"), YoloConv(c, c, 3, act="mish")
        self.bn = nn.BatchNorm2d(2 * c, eps=1e-3, momentum=0.03)
        self.cv7 = YoloConv(2 * c, cout, act="mish")

    def forward(self, x):
        x1 = self.cv4(self.cv3(self.cv1(x)))
        y1 = self.cv6(self.cv5(torch.cat([x1] + [m(x1) for m in self.m], 1)))
        return self.cv7(F.mish(self.bn(torch.cat((y1, self.cv2(x)), dim=1))))


_ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))


class Detect(nn.Module):
    """YOLOv5's ``Detect`` as exported: per level a 1x1 conv to ``anchors x (classes + 5)``,
    ``view`` + ``permute`` to ``[B, A, H, W, C+5]``, sigmoid, split, boxes decoded with a grid
    built in ``forward`` (``arange``, ``meshgrid``, ``stack``, ``expand``) and the anchors,
    ``cat``, flattened to ``[B, boxes, C+5]``; the levels concatenated."""

    def __init__(self, channels, classes=80, strides=(8, 16, 32)):
        super().__init__()
        self.no, self.na, self.nc = classes + 5, 3, classes
        self.register_buffer(
            "anchors",
            torch.tensor(_ANCHORS).float().view(3, 3, 2) / torch.tensor(strides).view(3, 1, 1),
        )
        self.strides = strides
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in channels)
        with torch.no_grad():  # Ultralytics' _initialize_biases (image size 640)
            for conv, s in zip(self.m, strides):
                b = conv.bias.view(self.na, -1)
                b[:, 4] += math.log(8 / (640 / s) ** 2)
                b[:, 5:] += math.log(0.6 / (classes - 0.99))

    def make_grid(self, nx: int, ny: int, i: int):
        d, t = self.anchors.device, self.anchors.dtype
        shape = (1, self.na, ny, nx, 2)
        y, x = torch.arange(ny, device=d, dtype=t), torch.arange(nx, device=d, dtype=t)
        yv, xv = torch.meshgrid(y, x, indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(shape) - 0.5
        anchor_grid = (self.anchors[i] * self.strides[i]).view((1, self.na, 1, 1, 2)).expand(shape)
        return grid, anchor_grid

    def forward(self, xs):
        z = []
        for i, conv in enumerate(self.m):
            x = conv(xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            grid, anchor_grid = self.make_grid(nx, ny, i)
            xy, wh, conf = x.sigmoid().split((2, 2, self.nc + 1), 4)
            xy = (xy * 2 + grid) * self.strides[i]
            wh = (wh * 2) ** 2 * anchor_grid
            z.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * nx * ny, self.no))
        return torch.cat(z, 1)


class YOLOv5n(nn.Module):
    """yolov5n (width 0.25, depth 0.33: C3 repeats 1, 2, 3, 1) on 64x64: 6x6 s2 stem, C3
    backbone, SPPF, PAN neck (nearest ``nn.Upsample``, concats), the decoding Detect head on
    strides 8, 16, 32 (80 classes)."""

    def __init__(self, classes=80):
        super().__init__()
        self.b0 = nn.Sequential(YoloConv(3, 16, 6, 2, p=2), YoloConv(16, 32, 3, 2), C3(32, 32, 1))
        self.b1 = nn.Sequential(YoloConv(32, 64, 3, 2), C3(64, 64, 2))  # P3
        self.b2 = nn.Sequential(YoloConv(64, 128, 3, 2), C3(128, 128, 3))  # P4
        self.b3 = nn.Sequential(YoloConv(128, 256, 3, 2), C3(256, 256, 1), SPPF(256, 256))  # P5
        self.h0, self.up = YoloConv(256, 128), nn.Upsample(scale_factor=2, mode="nearest")
        self.h1 = C3(256, 128, 1, False)
        self.h2 = YoloConv(128, 64)
        self.h3 = C3(128, 64, 1, False)  # out P3
        self.h4 = YoloConv(64, 64, 3, 2)
        self.h5 = C3(128, 128, 1, False)  # out P4
        self.h6 = YoloConv(128, 128, 3, 2)
        self.h7 = C3(256, 256, 1, False)  # out P5
        self.detect = Detect((64, 128, 256), classes)

    def forward(self, x):
        p3 = self.b1(self.b0(x))
        p4 = self.b2(p3)
        p5 = self.b3(p4)
        t5 = self.h0(p5)
        t4 = self.h2(self.h1(torch.cat([self.up(t5), p4], 1)))
        o3 = self.h3(torch.cat([self.up(t4), p3], 1))
        o4 = self.h5(torch.cat([self.h4(o3), t4], 1))
        o5 = self.h7(torch.cat([self.h6(o4), t5], 1))
        return self.detect([o3, o4, o5])


class ScaledYOLOv4(nn.Module):
    """yolov4-csp's layout at 1/8 width with one bottleneck per CSP block (small) on 64x64:
    Mish everywhere, BottleneckCSP (BN + Mish on the concat), SPPCSP, a PAN neck whose CSP
    blocks have no shortcut, the decoding Detect head."""

    def __init__(self, classes=80):
        super().__init__()
        m = "mish"
        self.b0 = nn.Sequential(
            YoloConv(3, 8, 3, act=m), YoloConv(8, 16, 3, 2, act=m), BottleneckCSP(16, 16)
        )
        self.b1 = nn.Sequential(
            YoloConv(16, 32, 3, 2, act=m),
            BottleneckCSP(32, 32),
            YoloConv(32, 64, 3, 2, act=m),
            BottleneckCSP(64, 64),
        )  # P3
        self.b2 = nn.Sequential(YoloConv(64, 128, 3, 2, act=m), BottleneckCSP(128, 128))  # P4
        self.b3 = nn.Sequential(
            YoloConv(128, 256, 3, 2, act=m), BottleneckCSP(256, 256), SPPCSP(256, 128)
        )  # P5
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.l4, self.r4 = YoloConv(128, 64, act=m), YoloConv(128, 64, act=m)
        self.n4 = BottleneckCSP(128, 64, shortcut=False)
        self.l3, self.r3 = YoloConv(64, 32, act=m), YoloConv(64, 32, act=m)
        self.n3 = BottleneckCSP(64, 32, shortcut=False)  # out P3
        self.d3 = YoloConv(32, 64, 3, 2, act=m)
        self.m4 = BottleneckCSP(128, 64, shortcut=False)  # out P4
        self.d4 = YoloConv(64, 128, 3, 2, act=m)
        self.m5 = BottleneckCSP(256, 128, shortcut=False)  # out P5
        self.detect = Detect((32, 64, 128), classes)

    def forward(self, x):
        p3 = self.b1(self.b0(x))
        p4 = self.b2(p3)
        p5 = self.b3(p4)
        n4 = self.n4(torch.cat([self.r4(p4), self.up(self.l4(p5))], 1))
        o3 = self.n3(torch.cat([self.r3(p3), self.up(self.l3(n4))], 1))
        o4 = self.m4(torch.cat([self.d3(o3), n4], 1))
        o5 = self.m5(torch.cat([self.d4(o4), p5], 1))
        return self.detect([o3, o4, o5])


# -- DETR ---------------------------------------------------------------------------------------


class SinePositions(nn.Module):
    """DETR's ``PositionEmbeddingSine`` (normalised): ``cumsum`` of the not-padded mask along
    each axis, divided by ``temperature ** (2 (i // 2) / d)``, sines and cosines interleaved
    by ``stack``, ``[B, 2d, H, W]``."""

    def __init__(self, d, temperature=10000.0):
        super().__init__()
        self.d, self.temperature = d, temperature

    def forward(self, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        not_mask = ~mask
        y = not_mask.cumsum(1, dtype=dtype)
        x = not_mask.cumsum(2, dtype=dtype)
        eps, scale = 1e-6, 2 * math.pi
        y = y / (y[:, -1:, :] + eps) * scale
        x = x / (x[:, :, -1:] + eps) * scale
        dim_t = torch.arange(self.d, dtype=dtype, device=mask.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.d)
        pos_x, pos_y = x[:, :, :, None] / dim_t, y[:, :, :, None] / dim_t
        pos_x = torch.stack(
            (pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4
        ).flatten(3)
        pos_y = torch.stack(
            (pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4
        ).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class DetrEncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, src, pos, key_padding_mask):
        q = k = src + pos
        src = self.norm1(src + self.attn(q, k, src, key_padding_mask=key_padding_mask)[0])
        return self.norm2(src + self.fc2(F.relu(self.fc1(src))))


class DetrDecoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.self_attn, self.cross_attn = (
            nn.MultiheadAttention(d, heads),
            nn.MultiheadAttention(d, heads),
        )
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, tgt, memory, pos, query_pos, key_padding_mask):
        q = k = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, k, tgt)[0])
        a = self.cross_attn(
            tgt + query_pos, memory + pos, memory, key_padding_mask=key_padding_mask
        )[0]
        tgt = self.norm2(tgt + a)
        return self.norm3(tgt + self.fc2(F.relu(self.fc1(tgt))))


class DETRTiny(nn.Module):
    """DETR's inference path, tiny (small): a 4-stage ConvBn backbone to stride 16 (128
    channels), 1x1 projection to 64, one encoder and two decoder layers (4 heads, FFN 128), 10
    learned queries, class logits (91 + 1) and ``sigmoid`` boxes from a 3-layer MLP; the mask
    of padded pixels is all False for a batch of equal images, as DETR builds it."""

    def __init__(self, d=64, heads=4, ff=128, queries=10, classes=91):
        super().__init__()
        self.backbone = nn.Sequential(
            ConvBn(3, 32, 3, 2), ConvBn(32, 64, 3, 2), ConvBn(64, 64, 3), ConvBn(64, 128, 3, 2),
            ConvBn(128, 128, 3, 2),
        )  # fmt: skip
        self.input_proj = nn.Conv2d(128, d, 1)
        self.position = SinePositions(d // 2)
        self.encoder = DetrEncoderLayer(d, heads, ff)
        self.decoder = nn.ModuleList(DetrDecoderLayer(d, heads, ff) for _ in range(2))
        self.decoder_norm = nn.LayerNorm(d)
        self.query_embed = nn.Embedding(queries, d)
        self.class_embed = nn.Linear(d, classes + 1)
        self.bbox_embed = nn.Sequential(
            nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4)
        )

    def forward(self, x):
        f = self.backbone(x)
        b, _, h, w = f.shape
        mask = torch.zeros((b, h, w), dtype=torch.bool, device=x.device)
        pos = self.position(mask, f.dtype).flatten(2).permute(2, 0, 1)
        src = self.input_proj(f).flatten(2).permute(2, 0, 1)  # [HW, B, d]
        key_padding_mask = mask.flatten(1)
        memory = self.encoder(src, pos, key_padding_mask)
        query_pos = self.query_embed.weight.unsqueeze(1).repeat(1, b, 1)
        tgt = torch.zeros_like(query_pos)
        for layer in self.decoder:
            tgt = layer(tgt, memory, pos, query_pos, key_padding_mask)
        hs = self.decoder_norm(tgt).transpose(0, 1)  # [B, queries, d]
        return self.class_embed(hs), self.bbox_embed(hs).sigmoid()
