"""Minimal torch reproducers of what stopped the reach benchmark's second corpus
(``reach_models_more/``), one per distinct pattern, grouped by cause, for the sessions fixing
them (issue 32). Not tests: each prints what nanoir does with it today.

- A: values that do not depend on the input, computed in ``forward`` (fold at import);
- B: Core ATen op families and forms;
- C: programs quantize makes and lower-to-hw refuses;
- D: torch.export itself;
- E: patterns found behind the first refusals (the blockers worked around in torch).

Each module is compiled as the bench does (``compile_model`` to nq with every default, then
``lower_to_hw``), run at nq and nh on its input, and reported as the first refusal, or
``nq == nh`` and the nh output's SQNR against torch (float64).

    python benchmarks/reach_reproducers.py [A1,B12,...]
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import nanoir

rng = np.random.default_rng(0)
REPRODUCERS: dict[str, tuple[type[nn.Module], np.ndarray]] = {}
"""``"<id> <pattern>"`` -> (module class, input)."""


def feats(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def ids(vocab: int, *shape: int) -> np.ndarray:
    return rng.integers(0, vocab, shape).astype(np.int64)


def repro(name: str, x: np.ndarray) -> Callable[[type[nn.Module]], type[nn.Module]]:
    def register(cls: type[nn.Module]) -> type[nn.Module]:
        REPRODUCERS[name] = (cls, x)
        return cls

    return register


def op(name: str, fn: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray) -> None:
    """A reproducer that is one function of its input."""
    cls = type(name.split()[0], (nn.Module,), {"forward": lambda self, t: fn(t)})
    REPRODUCERS[name] = (cls, x)


# -- A. input-independent values computed in forward -------------------------------------------


@repro("A1 position ids from arange (BERT)", feats(4, 16, 8))
class PositionIds(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(32, 8)

    def forward(self, x):  # [N, T, C]
        return x + self.pos(torch.arange(x.shape[1], device=x.device))


@repro("A2 sinusoid from arange/pow/sin/cos/stack (Speech-Transformer)", feats(4, 16, 8))
class Sinusoid(nn.Module):
    def forward(self, x):
        t, d = x.shape[1], x.shape[2]
        pos = torch.arange(t, dtype=x.dtype).unsqueeze(1)
        angle = pos / torch.pow(10000.0, torch.arange(0, d, 2, dtype=x.dtype) / d)
        return x + torch.stack([angle.sin(), angle.cos()], -1).flatten(1)


@repro("A3 2-D positions repeated over the dynamic batch (XCiT, EdgeNeXt)", feats(4, 8, 4, 4))
class RepeatOverBatch(nn.Module):
    def forward(self, x):
        b, _, h, w = x.shape
        y = torch.arange(1, h + 1, dtype=x.dtype).view(1, -1, 1).repeat(b, 1, w)
        return x + (y / h).unsqueeze(1)


@repro("A4 detection grid from arange/meshgrid/stack (YOLO)", feats(4, 2, 4, 4))
class Grid(nn.Module):
    def forward(self, x):  # [N, 2, H, W] box centres
        ny, nx = x.shape[2:]
        r = (torch.arange(ny, dtype=x.dtype), torch.arange(nx, dtype=x.dtype))
        yv, xv = torch.meshgrid(*r, indexing="ij")
        grid = torch.stack((xv, yv), 0).unsqueeze(0) - 0.5
        return (x.sigmoid() * 2 + grid) * 8


@repro("A5 cumsum of a constant bool mask (DETR)", feats(4, 8, 4, 4))
class MaskCumsum(nn.Module):
    def forward(self, x):
        b, _, h, w = x.shape
        mask = torch.zeros((b, h, w), dtype=torch.bool)
        y = (~mask).cumsum(1, dtype=x.dtype)
        return x + (y / (y[:, -1:, :] + 1e-6)).unsqueeze(1)


@repro("A6 rotary cos/sin and a causal -inf triu mask (Llama)", feats(4, 8, 16))
class Rotary(nn.Module):
    def forward(self, x):  # [N, T, D]
        t, d = x.shape[1], x.shape[2]
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        emb = torch.outer(torch.arange(t, dtype=torch.float32), inv)
        emb = torch.cat((emb, emb), -1)
        rot = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), -1)
        y = x * emb.cos() + rot * emb.sin()
        mask = torch.full((t, t), float("-inf")).triu(1)
        return torch.softmax(y @ y.transpose(1, 2) + mask, -1)


@repro("A7 zeros_like of a parameter, clamp(param).exp() (Swin-V2)", feats(4, 16, 8))
class ParameterOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(24, 8) * 0.3)
        self.q_bias, self.v_bias = nn.Parameter(torch.randn(8)), nn.Parameter(torch.randn(8))
        self.scale = nn.Parameter(torch.tensor(2.3))

    def forward(self, x):
        bias = torch.cat([self.q_bias, torch.zeros_like(self.v_bias), self.v_bias])
        return F.linear(x, self.w, bias) * torch.clamp(self.scale, max=math.log(100.0)).exp()


@repro("A8 weight standardisation by F.batch_norm of the weight (BiT)", feats(4, 8, 8, 8))
class StdConv(nn.Conv2d):
    def __init__(self):
        super().__init__(8, 16, 3, padding=1, bias=False)

    def forward(self, x):
        w = self.weight.reshape(1, 16, -1)
        w = F.batch_norm(w, None, None, training=True, momentum=0.0, eps=1e-8)
        return F.conv2d(x, w.reshape_as(self.weight), None, 1, 1)


@repro(
    "A9 a linear of a constant buffer (MaxViT's bias MLP; crashed calibration)", feats(4, 16, 16)
)
class LinearOfBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 16)
        self.register_buffer("offsets", torch.randn(16, 2))

    def forward(self, x):
        return x + self.lin(self.offsets)


# -- B. Core ATen op families --------------------------------------------------------------------

op("B1 sum(dim) (ResNeSt, SKNet)", lambda x: x.sum(dim=1), feats(4, 2, 8, 4, 4))
op("B2 stack (SKNet, CrossViT)", lambda x: torch.stack([x, x.relu()], dim=1), feats(4, 8, 4, 4))
op("B3 amax(dim) (CBAM, BiGRU)", lambda x: x.amax(dim=1), feats(4, 16, 8))
op("B4 max(dim) values (PANNs)", lambda x: torch.max(x, dim=2)[0], feats(4, 8, 16))
op("B5 std(dim) (x-vector)", lambda x: torch.cat([x.mean(2), x.std(2)], 1), feats(4, 8, 32))
op("B6 pow by 2 (YOLO, ECAPA)", lambda x: x**2, feats(4, 8, 16))
op("B7 sqrt of a clamp (ECAPA)", lambda x: torch.sqrt(x.clamp(min=1e-6)), feats(4, 8, 16))
op(
    "B8 rsqrt (RMSNorm)",
    lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    feats(4, 8, 16),
)
op("B9 log of a clamp (log-mel)", lambda x: torch.log(torch.clamp(x, min=1e-6)), feats(4, 8, 16))
op("B10 exp", torch.exp, feats(4, 8, 16))
op("B11 mish (Scaled-YOLOv4)", F.mish, feats(4, 8, 16))
op("B12 F.normalize (XCiT, Swin-V2)", lambda x: F.normalize(x, dim=-1), feats(4, 8, 16))
op(
    "B13 torch.norm p=2 over (1, 2) (ConvNeXt-V2 GRN)",
    lambda x: x * torch.norm(x, p=2, dim=(1, 2), keepdim=True),
    feats(4, 4, 4, 8),
)
op(
    "B14 repeat over time (ECAPA)",
    lambda x: torch.cat([x, x.mean(2, keepdim=True).repeat(1, 1, x.shape[2])], 1),
    feats(4, 8, 16),
)
op("B15 repeat_interleave (GQA)", lambda x: x.repeat_interleave(2, dim=1), feats(4, 2, 8, 4))
op(
    "B16 a mask from abs/sum/eq and masked_fill (ESPnet)",
    lambda x: x.masked_fill(x.abs().sum(-1, keepdim=True).eq(0), 0.0),
    feats(4, 16, 8),
)
op("B17 neg (rotate_half)", lambda x: torch.cat((-x[..., 4:], x[..., :4]), -1), feats(4, 16, 8))
op("B18 ones_like (ECAPA)", lambda x: x * torch.ones_like(x[:, :1]) / x.shape[-1], feats(4, 8, 16))
op("B19 type_as (Llama RMSNorm)", lambda x: x.float().relu().type_as(x), feats(4, 8, 16))
op(
    "B20 bicubic to a size (CrossViT)",
    lambda x: F.interpolate(x, size=(6, 6), mode="bicubic", align_corners=False),
    feats(4, 3, 8, 8),
)
op(
    "B21 bicubic x2 (ESPCN)",
    lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False),
    feats(4, 3, 8, 8),
)
op(
    "B22 bilinear x4 to a size (HRNet)",
    lambda x: F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False),
    feats(4, 3, 4, 4),
)
op(
    "B23 bilinear x2 with align_corners=True (U-Net)",
    lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
    feats(4, 3, 4, 4),
)


@repro("B24 nn.MultiheadAttention with key_padding_mask (DETR)", feats(4, 16, 8))
class PaddedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        mask = torch.zeros(x.shape[:2], dtype=torch.bool)
        return self.attn(x, x, x, key_padding_mask=mask, need_weights=False)[0]


@repro("B25 a padding mask from ids by ne and .to(dtype) (BERT)", ids(50, 4, 16))
class IdsMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)

    def forward(self, t):
        x = self.emb(t)
        m = (t != 0).to(x.dtype)[:, :, None]
        return x * m + (1.0 - m) * -10000.0


# -- C. lower-to-hw refuses what quantize made ---------------------------------------------------


@repro("C1 a class token concatenated and read by LayerNorm (CaiT, PiT)", feats(4, 16, 8))
class ClassTokenNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 8) * 0.02)
        self.fc, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(torch.cat([self.cls.expand(x.shape[0], -1, -1), self.fc(x)], 1))


@repro("C2 nn.Embedding -> nn.LSTM or nn.GRU (LSTM LM, BiGRU)", ids(50, 4, 16))
class EmbeddingLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.rnn = nn.Embedding(50, 16), nn.LSTM(16, 16, batch_first=True)
        self.dec = nn.Linear(16, 50)

    def forward(self, t):
        return self.dec(self.rnn(self.emb(t))[0])


# -- D. torch.export -----------------------------------------------------------------------------


@repro("D1 pack_padded_sequence under the dynamic batch (CRNN)", feats(4, 16, 8))
class Packed(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8, bidirectional=True)

    def forward(self, x):  # [N, T, C]
        x = x.transpose(0, 1)
        lengths = torch.full((x.shape[1],), x.shape[0], dtype=torch.long)
        p = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        return nn.utils.rnn.pad_packed_sequence(self.rnn(p)[0], total_length=x.shape[0])[0]


# -- E. behind the first refusals ----------------------------------------------------------------


@repro("E1 ids >= 128 read by an embedding and a padding mask (BERT)", ids(1000, 4, 16))
class LargeVocabMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(1000, 8), nn.Linear(8, 4)

    def forward(self, t):
        return self.fc(self.emb(t) * (t != 0).to(torch.float32)[:, :, None])


@repro("E2 F.normalize on windows, dim 0 = batch x windows (Swin-V2)", feats(4, 16, 8))
class WindowNormalize(nn.Module):
    def forward(self, x):  # [N, 16, C] -> [4N, 4, C]
        return F.normalize(x.reshape(-1, 4, x.shape[-1]), dim=-1).reshape(x.shape)


op("E3 clamp at a non-dyadic bound (log-mel, ECAPA)", lambda x: x.clamp(min=1e-6), feats(4, 8, 16))


@repro("E4 a bool mask from the input, unsqueezed (Speech-Transformer)", feats(4, 16, 8))
class BoolMask(nn.Module):
    def forward(self, x):
        pad = x.abs().sum(-1).eq(0)  # [N, T]
        scores = x @ x.transpose(1, 2)
        return torch.softmax(scores.masked_fill(pad.unsqueeze(1), -1e9), -1)


op(
    "E5 zeros_like of a runtime slice (XCiT class attention)",
    lambda x: torch.cat([x[:, :1], torch.zeros_like(x[:, 1:])], 1) + x,
    feats(4, 16, 8),
)


@repro("E6 a concat of conv parts read by LayerNorm (EdgeNeXt SDTA)", feats(4, 16, 8, 8))
class SplitConvNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.LayerNorm(16)

    def forward(self, x):
        a, b = x.split(8, 1)
        return self.norm(torch.cat([self.conv(a), b], 1).permute(0, 2, 3, 1))


op(
    "E7 division by a runtime value (ConvNeXt-V2 GRN)",
    lambda x: x / (x.abs().mean(-1, keepdim=True) + 1e-6),
    feats(4, 8, 16),
)


# -- running ---------------------------------------------------------------------------------------


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("supported")]
    key = [line for line in lines[1:] if line.startswith(("- aten.", "reason:"))]
    return f"{type(error).__name__}: " + " / ".join(lines[:1] + key[:3])[:260]


def _flat(values) -> np.ndarray:
    if isinstance(values, (list, tuple)):
        return np.concatenate([np.ravel(v) for v in values])
    return np.ravel(values)


def run(name: str) -> str:
    """What nanoir does with ``REPRODUCERS[name]``: the first refusal (``CRASH`` when it is not
    a ``nanoir.Error``), or ``nq == nh`` and the SQNR of nh against torch in float64."""
    cls, x = REPRODUCERS[name]
    torch.manual_seed(0)
    model = cls().eval()
    calibration = [x, x[::-1].copy()]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nq = nanoir.compile_model(model, (torch.from_numpy(x),), calibration, stop="nq")
            hw = nanoir.lower_to_hw(nq.clone())
            want, got = _flat(nanoir.run(nq, x)), _flat(nanoir.run(hw, x))
    except nanoir.Error as error:
        return _first_line(error)
    except Exception as error:  # noqa: BLE001 -- a traceback a user would see
        return f"CRASH {type(error).__name__}: {str(error)[:200]}"
    with torch.no_grad():
        t = torch.from_numpy(x)
        reference = _flat(model.double()(t if t.dtype == torch.int64 else t.double()).numpy())
    noise = float(np.sum((got - reference) ** 2))
    sqnr = 10 * math.log10(float(np.sum(reference**2)) / noise) if noise else math.inf
    return f"nh; nq == nh {'yes' if np.array_equal(want, got) else 'NO'}; SQNR {sqnr:.1f} dB"


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    chosen = argv[0].split(",") if argv else None
    for name in REPRODUCERS:
        if chosen is None or name.split()[0] in chosen:
            print(f"{name}: {run(name)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
