"""Vision transformers and MLP mixers the first corpus lacks: CaiT, XCiT, PiT, CrossViT, MaxViT,
Swin-V2, ConvNeXt-V2, EfficientFormer, EdgeNeXt, MLP-Mixer.

Written from the layout of timm's ``cait.py``, ``xcit.py``, ``pit.py``, ``crossvit.py``,
``maxxvit.py``, ``swin_transformer_v2.py``, ``convnext.py`` (V2's GRN), ``efficientformer.py``,
``edgenext.py``, ``mlp_mixer.py``; module names and code are ours. Depths are cut ("small") so
that one compile takes seconds; every block kind of the original is kept, and each block
computes what timm's does in ``forward`` (position encodings, bias tables, normalisations),
since that is what a compiler meets.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from reach_models import LayerNorm2d, Mlp
from torch import nn

# -- CaiT (talking-heads attention, layer scale, class attention) -------------------------------


class TalkingHeadAttention(nn.Module):
    """CaiT's self-attention: the heads are mixed by a linear before and after the softmax."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj_l, self.proj_w = nn.Linear(heads, heads), nn.Linear(heads, heads)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(dim=-1)
        attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class ClassAttention(nn.Module):
    """Attention whose only query is the class token (CaiT, XCiT): returns ``[B, 1, C]``."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        h = self.heads
        q = self.q(x[:, 0]).unsqueeze(1).reshape(b, 1, h, c // h).permute(0, 2, 1, 3)
        k = self.k(x).reshape(b, n, h, c // h).permute(0, 2, 1, 3)
        v = self.v(x).reshape(b, n, h, c // h).permute(0, 2, 1, 3)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, 1, c))


class LayerScaleBlock(nn.Module):
    """Pre-norm block whose two residual branches are scaled per channel (``gamma``)."""

    def __init__(self, dim, attn, init=1e-5, mlp_ratio=4.0):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), attn
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, int(dim * mlp_ratio))
        self.gamma1 = nn.Parameter(init * torch.ones(dim))
        self.gamma2 = nn.Parameter(init * torch.ones(dim))

    def forward(self, x):
        x = x + self.gamma1 * self.attn(self.norm1(x))
        return x + self.gamma2 * self.mlp(self.norm2(x))


class CaiTClassBlock(nn.Module):
    """CaiT's class-attention block: the class token reads ``cat(cls, tokens)``."""

    def __init__(self, dim, heads, init=1e-5):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), ClassAttention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)
        self.gamma1 = nn.Parameter(init * torch.ones(dim))
        self.gamma2 = nn.Parameter(init * torch.ones(dim))

    def forward(self, x, cls):
        u = torch.cat([cls, x], dim=1)
        cls = cls + self.gamma1 * self.attn(self.norm1(u))
        return cls + self.gamma2 * self.mlp(self.norm2(cls))


class CaiTXXS(nn.Module):
    """cait_xxs24 (dim 192, 4 heads) with patch 8 on 32x32, 4 talking-heads blocks instead of
    24 (small), then its 2 class-attention blocks, norm, head on the class token. Layer scale
    0.1, the order of trained CaiT's (timm creates 1e-5, which leaves the class token, and so
    the output, the same for every image)."""

    def __init__(self, img=32, patch=8, dim=192, depth=4, heads=4, classes=1000, init=0.1):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, (img // patch) ** 2, dim))
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.blocks = nn.Sequential(
            *(LayerScaleBlock(dim, TalkingHeadAttention(dim, heads), init) for _ in range(depth))
        )
        self.blocks_token_only = nn.ModuleList(CaiTClassBlock(dim, heads, init) for _ in range(2))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        x = self.blocks(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        for block in self.blocks_token_only:
            cls = block(x, cls)
        x = self.norm(torch.cat([cls, x], dim=1))
        return self.head(x[:, 0])


# -- XCiT (cross-covariance attention, Fourier position encoding, local patch interaction) ------


class FourierPositions(nn.Module):
    """XCiT's (and EdgeNeXt's) position encoding, computed in ``forward`` for the token grid:
    normalised row and column indices, sines and cosines at ``hidden / 2`` frequencies
    interleaved by ``stack``, a 1x1 conv to the width; ``[B, dim, H, W]``."""

    def __init__(self, dim, hidden=32, temperature=10000.0):
        super().__init__()
        self.proj = nn.Conv2d(2 * hidden, dim, 1)
        self.hidden, self.temperature = hidden, temperature

    def forward(self, b: int, h: int, w: int, like: torch.Tensor) -> torch.Tensor:
        kw = {"dtype": like.dtype, "device": like.device}
        y = torch.arange(1, h + 1, **kw).view(1, -1, 1).repeat(b, 1, w)
        x = torch.arange(1, w + 1, **kw).view(1, 1, -1).repeat(b, h, 1)
        eps, scale = 1e-6, 2 * math.pi
        y = y / (y[:, -1:, :] + eps) * scale
        x = x / (x[:, :, -1:] + eps) * scale
        dim_t = torch.arange(self.hidden, **kw)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.hidden)
        pos_x, pos_y = x[:, :, :, None] / dim_t, y[:, :, :, None] / dim_t
        pos_x = torch.stack([pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()], dim=4).flatten(3)
        pos_y = torch.stack([pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()], dim=4).flatten(3)
        return self.proj(torch.cat([pos_y, pos_x], dim=3).permute(0, 3, 1, 2))


class CrossCovarianceAttention(nn.Module):
    """XCA: attention over channels: queries and keys ``F.normalize``-d along the tokens,
    ``q kᵀ`` (``[C/h, C/h]`` per head) times a learned temperature, softmax, times v."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)
        return self.proj((attn @ v).permute(0, 3, 1, 2).reshape(b, n, c))


class LocalPatchInteraction(nn.Module):
    """Two depthwise 3x3 convs (GELU, BN between) on the token grid."""

    def __init__(self, dim):
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.bn = nn.BatchNorm2d(dim)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x, h, w):
        b, n, c = x.shape
        x = x.permute(0, 2, 1).reshape(b, c, h, w)
        x = self.conv2(self.bn(F.gelu(self.conv1(x))))
        return x.reshape(b, c, n).permute(0, 2, 1)


class XCABlock(nn.Module):
    def __init__(self, dim, heads, eta=1.0):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), CrossCovarianceAttention(dim, heads)
        self.norm3, self.local_mp = nn.LayerNorm(dim, eps=1e-6), LocalPatchInteraction(dim)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma3 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x, h, w):
        x = x + self.gamma1 * self.attn(self.norm1(x))
        x = x + self.gamma3 * self.local_mp(self.norm3(x), h, w)
        return x + self.gamma2 * self.mlp(self.norm2(x))


class XCiTClassBlock(nn.Module):
    """XCiT's class-attention block: every token normalised, only the class token attends
    and goes through the MLP (``tokens_norm=False``: the others keep their values)."""

    def __init__(self, dim, heads, eta=1.0):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), ClassAttention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.gamma1 * torch.cat([self.attn(y), y[:, 1:]], dim=1)
        x = torch.cat([self.norm2(x[:, 0:1]), x[:, 1:]], dim=1)
        cls = self.gamma2 * self.mlp(x[:, 0:1])
        return x + torch.cat([cls, torch.zeros_like(x[:, 1:])], dim=1)


class XCiTNano(nn.Module):
    """xcit_nano_12_p8 (dim 128, 4 heads, eta 1.0) on 32x32: the 3-conv patch-8 embedding
    (BN, GELU), Fourier positions, 3 XCA blocks instead of 12 (small), 2 class-attention
    blocks, norm, head."""

    def __init__(self, dim=128, depth=3, heads=4, classes=1000):
        super().__init__()
        self.patch_embed = nn.Sequential(
            nn.Conv2d(3, dim // 4, 3, 2, 1, bias=False), nn.BatchNorm2d(dim // 4), nn.GELU(),
            nn.Conv2d(dim // 4, dim // 2, 3, 2, 1, bias=False), nn.BatchNorm2d(dim // 2), nn.GELU(),
            nn.Conv2d(dim // 2, dim, 3, 2, 1, bias=False), nn.BatchNorm2d(dim),
        )  # fmt: skip
        self.pos_embed = FourierPositions(dim)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.blocks = nn.ModuleList(XCABlock(dim, heads) for _ in range(depth))
        self.cls_blocks = nn.Sequential(*(XCiTClassBlock(dim, heads) for _ in range(2)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        b = x.shape[0]
        x = self.patch_embed(x)
        h, w = x.shape[2:]
        x = x.flatten(2).transpose(1, 2)
        x = x + self.pos_embed(b, h, w, x).reshape(b, -1, h * w).permute(0, 2, 1)
        for block in self.blocks:
            x = block(x, h, w)
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1)
        x = self.norm(self.cls_blocks(x))
        return self.head(x[:, 0])


# -- PiT (pooling-based ViT) --------------------------------------------------------------------


class _PreNormBlock(nn.Module):
    """timm's ViT block with ``F.scaled_dot_product_attention`` written out as matmuls."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.norm1, self.qkv, self.proj = (
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 3 * dim),
            nn.Linear(dim, dim),
        )
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)  # fmt: skip

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class PiTStage(nn.Module):
    """Tokens of a ``[B, C, H, W]`` grid with the class tokens in front, blocks, back to the
    grid."""

    def __init__(self, dim, heads, depth):
        super().__init__()
        self.blocks = nn.Sequential(*(_PreNormBlock(dim, heads) for _ in range(depth)))

    def forward(self, x, cls):
        b, c, h, w = x.shape
        tokens = cls.shape[1]
        x = torch.cat([cls, x.flatten(2).transpose(1, 2)], dim=1)
        x = self.blocks(x)
        cls, x = x[:, :tokens], x[:, tokens:]
        return x.transpose(1, 2).reshape(b, c, h, w), cls


class PiTPool(nn.Module):
    """PiT's pooling: a stride-2 depthwise conv doubling the channels, a linear for the class
    token."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, 2, 1, groups=cin)
        self.fc = nn.Linear(cin, cout)

    def forward(self, x, cls):
        return self.conv(x), self.fc(cls)


class PiTTi(nn.Module):
    """pit_ti (base dim 32, heads 2, 4, 8) on 64x64 with a patch-8 stride-4 embedding (15x15
    tokens), depths 1, 2, 1 instead of 2, 6, 4 (small)."""

    def __init__(self, classes=1000, base=32, heads=(2, 4, 8), depths=(1, 2, 1)):
        super().__init__()
        dims = [base * h for h in heads]
        self.patch_embed = nn.Conv2d(3, dims[0], 8, 4)
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, dims[0], 15, 15))
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dims[0]))
        self.stages = nn.ModuleList(PiTStage(d, h, n) for d, h, n in zip(dims, heads, depths))
        self.pools = nn.ModuleList(PiTPool(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.patch_embed(x) + self.pos_embed
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        for i, stage in enumerate(self.stages):
            x, cls = stage(x, cls)
            if i < len(self.pools):
                x, cls = self.pools[i](x, cls)
        return self.head(self.norm(cls)[:, 0])


# -- CrossViT (two branches, bicubic resize, cross attention on the class tokens) --------------


class CrossAttention(nn.Module):
    """The first token (a class token from the other branch) attends to all tokens."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim) for _ in range(3))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        h = self.heads
        q = self.wq(x[:, 0:1]).reshape(b, 1, h, c // h).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(b, n, h, c // h).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(b, n, h, c // h).permute(0, 2, 1, 3)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, 1, c))


class _Project(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.LayerNorm(cin, eps=1e-6), nn.GELU(), nn.Linear(cin, cout))


class CrossFusion(nn.Module):
    """One branch's class token, projected to the other branch's width, reads that branch's
    patch tokens (LayerNorm, cross attention, residual) and is projected back."""

    def __init__(self, dim, other, heads):
        super().__init__()
        self.project, self.revert = _Project(dim, other), _Project(other, dim)
        self.norm, self.attn = nn.LayerNorm(other, eps=1e-6), CrossAttention(other, heads)

    def forward(self, mine, theirs):
        cls = self.project(mine[:, 0:1])
        u = torch.cat([cls, theirs[:, 1:]], dim=1)
        cls = cls + self.attn(self.norm(u))
        return torch.cat([self.revert(cls), mine[:, 1:]], dim=1)


class CrossViTTiny(nn.Module):
    """crossvit_tiny (dims 96/192, 3 heads) on 48x48: branch 0 takes patch 12 of the image,
    branch 1 patch 16 of the image resized to 32x32 with ``F.interpolate(mode="bicubic")`` (timm
    resizes 240 to 224 so); one multi-scale block (depths 1 and 2, then the fusion) instead of
    three (small); the two heads' logits averaged by ``stack`` + ``mean``."""

    def __init__(self, classes=1000, dims=(96, 192), heads=3):
        super().__init__()
        self.sizes, self.patches = (48, 32), (12, 16)
        self.embeds = nn.ModuleList(nn.Conv2d(3, d, p, p) for d, p in zip(dims, self.patches))
        self.cls_tokens = nn.ParameterList(nn.Parameter(0.02 * torch.randn(1, 1, d)) for d in dims)
        self.pos_embeds = nn.ParameterList(
            nn.Parameter(0.02 * torch.randn(1, 1 + (s // p) ** 2, d))
            for d, s, p in zip(dims, self.sizes, self.patches)
        )
        self.branches = nn.ModuleList(
            nn.Sequential(*(_PreNormBlock(d, heads) for _ in range(depth)))
            for d, depth in zip(dims, (1, 2))
        )
        self.fusion = nn.ModuleList(
            [CrossFusion(dims[0], dims[1], heads), CrossFusion(dims[1], dims[0], heads)]
        )
        self.norms = nn.ModuleList(nn.LayerNorm(d, eps=1e-6) for d in dims)
        self.heads = nn.ModuleList(nn.Linear(d, classes) for d in dims)

    def forward(self, x):
        b = x.shape[0]
        xs = []
        for i, embed in enumerate(self.embeds):
            xi = x
            if self.sizes[i] != x.shape[-1]:
                size = (self.sizes[i], self.sizes[i])
                xi = F.interpolate(x, size=size, mode="bicubic", align_corners=False)
            t = embed(xi).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls_tokens[i].expand(b, -1, -1), t], dim=1) + self.pos_embeds[i]
            xs.append(self.branches[i](t))
        xs = [self.fusion[0](xs[0], xs[1]), self.fusion[1](xs[1], xs[0])]
        logits = [head(norm(t)[:, 0]) for t, norm, head in zip(xs, self.norms, self.heads)]
        return torch.mean(torch.stack(logits, dim=0), dim=0)


# -- MaxViT (MBConv, block and grid attention with an MLP relative-position bias) ---------------


def log_spaced_offsets(size: int) -> torch.Tensor:
    """The ``(2 size - 1)²`` relative offsets (dy, dx), log-spaced as Swin-V2 and timm's
    ``rel_pos_type="mlp"`` feed them to the bias MLP: ``sign(t) log2(1 + 8|t|/(size-1)) / 3``."""
    r = torch.arange(-(size - 1), size, dtype=torch.float32)
    table = torch.stack(torch.meshgrid(r, r, indexing="ij"), dim=-1).reshape(-1, 2)
    table = table / max(size - 1, 1) * 8
    return torch.sign(table) * torch.log2(table.abs() + 1.0) / 3.0


def relative_index(size: int) -> torch.Tensor:
    """``[size², size²]`` index into the ``(2 size - 1)²`` offsets table."""
    coords = torch.stack(torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij"))
    coords = coords.flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (size - 1)
    return rel[..., 0] * (2 * size - 1) + rel[..., 1]


class MlpBiasAttention(nn.Module):
    """Multi-head attention on ``[B', N, C]`` plus a bias per head and position pair that an
    MLP computes, in ``forward``, from the log-spaced offsets (timm's ``RelPosMlp``)."""

    def __init__(self, dim, head_dim, size, hidden=64):
        super().__init__()
        self.heads, self.scale = dim // head_dim, head_dim**-0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.bias_mlp = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, self.heads)
        )
        self.register_buffer("offsets", log_spaced_offsets(size), persistent=False)
        self.register_buffer("index", relative_index(size), persistent=False)

    def position_bias(self):
        n = self.index.shape[0]
        table = self.bias_mlp(self.offsets)
        return table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1) + self.position_bias()
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c))


class MaxxBlock(nn.Module):
    """MaxViT's block: MBConv (BN pre-norm, 1x1 x4 GELU, 3x3 dw GELU, SE SiLU, 1x1, a pooled
    1x1 shortcut when strided), then window attention and grid attention on NHWC, each
    LayerNorm, attention, residual; LayerNorm, GELU MLP, residual."""

    def __init__(self, cin, dim, stride, size=4, head_dim=32):
        super().__init__()
        mid = 4 * dim
        self.pre_norm = nn.BatchNorm2d(cin)
        self.conv1 = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.GELU()
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
            nn.BatchNorm2d(mid),
            nn.GELU(),
        )
        rd = dim // 4
        self.se = nn.Sequential(
            nn.Conv2d(mid, rd, 1), nn.SiLU(), nn.Conv2d(rd, mid, 1), nn.Sigmoid()
        )
        self.conv3 = nn.Conv2d(mid, dim, 1)
        self.shortcut = nn.Sequential(nn.AvgPool2d(stride), nn.Conv2d(cin, dim, 1))
        self.size = size
        self.parts = nn.ModuleList()
        for _ in ("window", "grid"):
            self.parts.append(
                nn.ModuleDict(
                    {
                        "norm1": nn.LayerNorm(dim),
                        "attn": MlpBiasAttention(dim, head_dim, size),
                        "norm2": nn.LayerNorm(dim),
                        "mlp": Mlp(dim, 4 * dim),
                    }
                )
            )

    def partition(self, x, grid: bool):
        b, h, w, c = x.shape
        p = self.size
        if grid:
            x = x.view(b, p, h // p, p, w // p, c).permute(0, 2, 4, 1, 3, 5)
        else:
            x = x.view(b, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, p * p, c)

    def reverse(self, x, shape, grid: bool):
        b, h, w, c = shape
        p = self.size
        if grid:
            x = x.view(b, h // p, w // p, p, p, c).permute(0, 3, 1, 4, 2, 5)
        else:
            x = x.view(b, h // p, w // p, p, p, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(b, h, w, c)

    def forward(self, x):
        y = self.conv2(self.conv1(self.pre_norm(x)))
        y = y * self.se(y.mean((2, 3), keepdim=True))
        x = self.shortcut(x) + self.conv3(y)
        x = x.permute(0, 2, 3, 1)
        for grid, part in zip((False, True), self.parts):
            shape = x.shape
            a = part["attn"](self.partition(part["norm1"](x), grid))
            x = x + self.reverse(a, shape, grid)
            x = x + part["mlp"](part["norm2"](x))
        return x.permute(0, 3, 1, 2)


class MaxViTSmall(nn.Module):
    """maxvit_rmlp_nano's layout on 64x64 (small: dims 32, 64, 128, one block per stage,
    partition 4): conv stem (3x3 s2 BN GELU, 3x3), blocks, mean, LayerNorm, tanh pre-logits
    linear, head."""

    def __init__(self, dims=(32, 64, 128), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.GELU(), nn.Conv2d(32, 32, 3, 1, 1)
        )
        blocks, cin = [], 32
        for d in dims:
            blocks.append(MaxxBlock(cin, d, 2))
            cin = d
        self.blocks = nn.Sequential(*blocks)
        self.norm = nn.LayerNorm(cin)
        self.pre_logits = nn.Linear(cin, cin)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x)).mean((2, 3))
        return self.head(torch.tanh(self.pre_logits(self.norm(x))))


# -- Swin-V2 (cosine attention, continuous position bias, post-norm) ----------------------------


class CosineWindowAttention(nn.Module):
    """Swin-V2 window attention: ``normalize(q) normalize(k)ᵀ`` times a clamped, exponentiated
    learned scale, plus ``16 sigmoid`` of a bias MLP's output on the log-spaced offsets, plus
    the shifted-window mask; q and v have biases, k has none (``cat(q_bias, zeros_like,
    v_bias)``)."""

    def __init__(self, dim, heads, ws, mask: torch.Tensor | None):
        super().__init__()
        self.heads = heads
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))
        self.cpb_mlp = nn.Sequential(
            nn.Linear(2, 512), nn.ReLU(), nn.Linear(512, heads, bias=False)
        )
        self.register_buffer("offsets", log_spaced_offsets(ws), persistent=False)
        self.register_buffer("index", relative_index(ws), persistent=False)
        self.register_buffer("mask", mask, persistent=False)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_bias, self.v_bias = nn.Parameter(torch.zeros(dim)), nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        bias = torch.cat([self.q_bias, torch.zeros_like(self.v_bias), self.v_bias])
        qkv = F.linear(x, self.qkv.weight, bias)
        q, k, v = qkv.reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        table = self.cpb_mlp(self.offsets).view(-1, self.heads)
        bias = table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = attn + 16 * torch.sigmoid(bias).unsqueeze(0)
        if self.mask is not None:
            windows = self.mask.shape[0]
            attn = attn.view(-1, windows, self.heads, n, n) + self.mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c))


def shifted_window_mask(res: int, ws: int, shift: int) -> torch.Tensor:
    """Swin's mask for shifted windows: 0 within a region, -100 across regions."""
    img = torch.zeros(res, res)
    cuts = (slice(0, -ws), slice(-ws, -shift), slice(-shift, None))
    label = 0
    for hs in cuts:
        for wsl in cuts:
            img[hs, wsl] = label
            label += 1
    windows = img.view(res // ws, ws, res // ws, ws).permute(0, 2, 1, 3).reshape(-1, ws * ws)
    diff = windows.unsqueeze(1) - windows.unsqueeze(2)
    return torch.where(diff != 0, torch.tensor(-100.0), torch.tensor(0.0))


class SwinV2Block(nn.Module):
    def __init__(self, dim, heads, res, ws, shift):
        super().__init__()
        if res <= ws:
            ws, shift = res, 0
        self.ws, self.shift = ws, shift
        mask = shifted_window_mask(res, ws, shift) if shift else None
        self.attn = CosineWindowAttention(dim, heads, ws, mask)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x):  # [B, H, W, C]
        b, h, w, c = x.shape
        ws = self.ws
        y = torch.roll(x, (-self.shift, -self.shift), (1, 2)) if self.shift else x
        y = y.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        y = self.attn(y).view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        y = y.reshape(b, h, w, c)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), (1, 2))
        x = x + self.norm1(y)
        return x + self.norm2(self.mlp(x))


class SwinV2Merging(nn.Module):
    """Swin-V2's patch merging: 2x2 neighbours concatenated, linear to 2C, then LayerNorm."""

    def __init__(self, dim):
        super().__init__()
        self.reduction, self.norm = nn.Linear(4 * dim, 2 * dim, bias=False), nn.LayerNorm(2 * dim)

    def forward(self, x):
        b, h, w, c = x.shape
        x = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3)
        return self.norm(self.reduction(x))


class SwinV2Small(nn.Module):
    """swinv2_tiny's layout on 64x64 (small: embed 48, depths 2, 2, 2, 2, heads 3, 6, 12, 24,
    window 4): patch-4 embedding with LayerNorm, post-norm blocks with cosine attention,
    merging, LayerNorm, mean, head."""

    def __init__(self, img=64, dim=48, ws=4, classes=1000):
        super().__init__()
        self.patch, self.patch_norm = nn.Conv2d(3, dim, 4, 4), nn.LayerNorm(dim)
        layers: list[nn.Module] = []
        res = img // 4
        for i, heads in enumerate((3, 6, 12, 24)):
            if i:
                layers.append(SwinV2Merging(dim))
                res, dim = res // 2, dim * 2
            layers += [SwinV2Block(dim, heads, res, ws, ws // 2 if j % 2 else 0) for j in range(2)]
        self.layers = nn.Sequential(*layers)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_norm(self.patch(x).permute(0, 2, 3, 1))
        return self.head(self.norm(self.layers(x)).mean((1, 2)))


# -- ConvNeXt-V2 (global response normalisation) ------------------------------------------------


class GlobalResponseNorm(nn.Module):
    """GRN on NHWC: each channel's L2 norm over H, W (``torch.norm``), divided by the mean of
    those norms over the channels, scales x; ``gamma (x N) + beta + x``. timm creates gamma and
    beta at 0 (GRN is then the identity); here they are drawn small, as trained weights are."""

    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(0.1 * torch.randn(dim))
        self.beta = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class ConvNeXtV2Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1, self.grn, self.fc2 = (
            nn.Linear(dim, 4 * dim),
            GlobalResponseNorm(4 * dim),
            nn.Linear(4 * dim, dim),
        )

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.fc2(self.grn(F.gelu(self.fc1(y))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtV2Atto(nn.Module):
    """convnextv2_atto: depths 2, 2, 6, 2, dims 40, 80, 160, 320, patch-4 stem, LayerNorm2d
    and 2x2 s2 downsampling, blocks with GRN and no layer scale, mean, LayerNorm, head."""

    def __init__(self, classes=1000, dims=(40, 80, 160, 320), depths=(2, 2, 6, 2)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        stages: list[nn.Module] = []
        for i, (d, n) in enumerate(zip(dims, depths)):
            if i:
                stages += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
            stages += [ConvNeXtV2Block(d) for _ in range(n)]
        self.stages = nn.Sequential(*stages)
        self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.norm(self.stages(self.stem(x)).mean((2, 3))))


# -- EfficientFormer (pooling mixers, then attention with a learned bias table) -----------------


class Meta4D(nn.Module):
    """``x + ls (pool(x) - x)``, ``x + ls mlp(x)`` with 1x1 conv + BN MLPs (GELU)."""

    def __init__(self, dim, init=1e-5):
        super().__init__()
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp = nn.Sequential(
            nn.Conv2d(dim, 4 * dim, 1), nn.BatchNorm2d(4 * dim), nn.GELU(),
            nn.Conv2d(4 * dim, dim, 1), nn.BatchNorm2d(dim),
        )  # fmt: skip
        self.ls1 = nn.Parameter(init * torch.ones(dim, 1, 1))
        self.ls2 = nn.Parameter(init * torch.ones(dim, 1, 1))

    def forward(self, x):
        x = x + self.ls1 * (self.pool(x) - x)
        return x + self.ls2 * self.mlp(x)


class BiasTableAttention(nn.Module):
    """EfficientFormer's (LeViT's) attention: key dim 32, 8 heads, values 4x wide; the bias
    per head is ``attention_biases[:, idxs]``, a learned table gathered by a 2-D index."""

    def __init__(self, dim, res, key_dim=32, heads=8, ratio=4):
        super().__init__()
        self.heads, self.key_dim, self.val_dim = heads, key_dim, ratio * key_dim
        self.scale = key_dim**-0.5
        self.qkv = nn.Linear(dim, heads * (2 * key_dim + self.val_dim))
        self.proj = nn.Linear(heads * self.val_dim, dim)
        points = torch.stack(
            torch.meshgrid(torch.arange(res), torch.arange(res), indexing="ij")
        ).flatten(1)
        rel = (points[..., :, None] - points[..., None, :]).abs()
        self.attention_biases = nn.Parameter(0.02 * torch.randn(heads, res * res))
        self.register_buffer("attention_bias_idxs", rel[0] * res + rel[1], persistent=False)

    def forward(self, x):
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.val_dim], dim=3)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = (attn + self.attention_biases[:, self.attention_bias_idxs]).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, -1))


class Meta3D(nn.Module):
    def __init__(self, dim, res, init=1e-5):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), BiasTableAttention(dim, res)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, 4 * dim)
        self.ls1, self.ls2 = (
            nn.Parameter(init * torch.ones(dim)),
            nn.Parameter(init * torch.ones(dim)),
        )

    def forward(self, x):
        x = x + self.ls1 * self.attn(self.norm1(x))
        return x + self.ls2 * self.mlp(self.norm2(x))


class EfficientFormerL1(nn.Module):
    """efficientformer_l1 (dims 48, 96, 224, 448) on 64x64 with depths 1, 1, 2, 2 instead of
    3, 2, 6, 4 (small): the 3x3 s2 conv stem (BN, ReLU) twice, Meta4D stages with 3x3 s2
    downsampling, the last block a Meta3D on the flattened 2x2 tokens; LayerNorm, mean, class
    and distillation heads averaged."""

    def __init__(self, classes=1000, dims=(48, 96, 224, 448), depths=(1, 1, 2, 2)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, dims[0] // 2, 3, 2, 1), nn.BatchNorm2d(dims[0] // 2), nn.ReLU(),
            nn.Conv2d(dims[0] // 2, dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.ReLU(),
        )  # fmt: skip
        stages: list[nn.Module] = []
        for i, (d, n) in enumerate(zip(dims, depths)):
            if i:
                stages += [nn.Conv2d(dims[i - 1], d, 3, 2, 1), nn.BatchNorm2d(d)]
            last = i == len(dims) - 1
            stages += [Meta4D(d) for _ in range(n - 1 if last else n)]
        self.stages = nn.Sequential(*stages)
        self.meta3d = Meta3D(dims[-1], res=2)
        self.norm = nn.LayerNorm(dims[-1])
        self.head, self.head_dist = nn.Linear(dims[-1], classes), nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = self.stages(self.stem(x)).flatten(2).transpose(1, 2)
        x = self.norm(self.meta3d(x)).mean(1)
        return (self.head(x) + self.head_dist(x)) / 2


# -- EdgeNeXt (conv encoders, split depthwise transpose attention) ------------------------------


class EdgeConvBlock(nn.Module):
    """dw conv k, LayerNorm (NHWC), linear 4x, GELU, linear, layer scale, residual."""

    def __init__(self, dim, k, init=1e-6):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, k, padding=k // 2, groups=dim)
        self.norm, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)
        self.gamma = nn.Parameter(init * torch.ones(dim))

    def forward(self, x):
        y = self.gamma * self.mlp(self.norm(self.dw(x).permute(0, 2, 3, 1)))
        return x + y.permute(0, 3, 1, 2)


class SplitTransposeBlock(nn.Module):
    """SDTA: the channels split in ``scales`` parts, each part but the last a 3x3 dw conv of
    itself plus the previous part's result (Res2Net order), concat; Fourier positions (first
    SDTA only); cross-covariance attention with layer scale; LayerNorm, MLP, layer scale."""

    def __init__(self, dim, scales, heads=4, positions=False, init=1e-6):
        super().__init__()
        width = math.ceil(dim / scales)
        self.widths = [width] * (scales - 1) + [dim - width * (scales - 1)]
        self.convs = nn.ModuleList(
            nn.Conv2d(width, width, 3, padding=1, groups=width) for _ in range(scales - 1)
        )
        self.pos_embd = FourierPositions(dim) if positions else None
        self.norm_xca, self.xca = nn.LayerNorm(dim, eps=1e-6), CrossCovarianceAttention(dim, heads)
        self.gamma_xca = nn.Parameter(init * torch.ones(dim))
        self.norm, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)
        self.gamma = nn.Parameter(init * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        parts = torch.split(x, self.widths, dim=1)
        out, sp = [], None
        for i, conv in enumerate(self.convs):
            sp = parts[i] if sp is None else sp + parts[i]
            sp = conv(sp)
            out.append(sp)
        x = torch.cat([*out, parts[-1]], dim=1)
        b, c, h, w = x.shape
        x = x.reshape(b, c, h * w).permute(0, 2, 1)
        if self.pos_embd is not None:
            x = x + self.pos_embd(b, h, w, x).reshape(b, -1, h * w).permute(0, 2, 1)
        x = x + self.gamma_xca * self.xca(self.norm_xca(x))
        x = x.reshape(b, h, w, c)
        x = self.gamma * self.mlp(self.norm(x))
        return shortcut + x.permute(0, 3, 1, 2)


class EdgeNeXtXXS(nn.Module):
    """edgenext_xx_small (dims 24, 48, 88, 168, kernels 3, 5, 7, 9, SDTA scales 2, 2, 3, 4,
    layer scale 1e-6) on 64x64 with one conv block per stage and one SDTA closing stages 2-4
    (small; timm has 2, 2, 6, 2 blocks): patch-4 stem with LayerNorm2d, LayerNorm2d + 2x2
    s2 downsampling, mean, LayerNorm, head."""

    def __init__(self, classes=1000, dims=(24, 48, 88, 168)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        stages: list[nn.Module] = []
        for i, (d, k, s) in enumerate(zip(dims, (3, 5, 7, 9), (2, 2, 3, 4))):
            if i:
                stages += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
            stages.append(EdgeConvBlock(d, k))
            if i:
                stages.append(SplitTransposeBlock(d, s, positions=i == 1))
        self.stages = nn.Sequential(*stages)
        self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.norm(self.stages(self.stem(x)).mean((2, 3))))


# -- MLP-Mixer ----------------------------------------------------------------------------------


class MixerBlock(nn.Module):
    def __init__(self, dim, tokens, token_hidden, channel_hidden):
        super().__init__()
        self.norm1, self.mlp_tokens = nn.LayerNorm(dim, eps=1e-6), Mlp(tokens, token_hidden)
        self.norm2, self.mlp_channels = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, channel_hidden)

    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.mlp_channels(self.norm2(x))


class MixerSmall(nn.Module):
    """mixer_s16's layout on 32x32 with patch 8 (16 tokens; small: dim 128, 4 blocks, token
    MLP 64, channel MLP 512): token mixing by transposed MLPs, LayerNorm, mean, head."""

    def __init__(self, img=32, patch=8, dim=128, depth=4, classes=1000):
        super().__init__()
        tokens = (img // patch) ** 2
        self.stem = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*(MixerBlock(dim, tokens, 64, 512) for _ in range(depth)))
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x).flatten(2).transpose(1, 2))
        return self.head(self.norm(x).mean(1))
