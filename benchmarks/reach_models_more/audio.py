"""Speech and audio networks the first corpus lacks: QuartzNet (1-D separable convs), x-vector
TDNN (statistics pooling), ECAPA-TDNN (Res2Net 1-D, SE, attentive statistics pooling), an OCR
CRNN with a packed BiLSTM, a Speech-Transformer encoder (sinusoidal positions computed in
``forward``, a padding mask from ``eq``), the Hello-Edge DS-CNN keyword spotter, PANNs' CNN6
tagger, and a keyword spotter with its log-mel front end in the network (a DFT as a conv).

Written from the layout of NVIDIA NeMo's QuartzNet config and ``jasper.py`` blocks, Kaldi's
and SpeechBrain's x-vector and ECAPA-TDNN (``speechbrain/lobes/models/ECAPA_TDNN.py``), the
CRNN paper and its public PyTorch ports, ESPnet's ``Conv2dSubsampling`` and encoder layer,
ARM's ML-KWS DS-CNN, PANNs' ``models.py``; module names and code are ours.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# -- QuartzNet ----------------------------------------------------------------------------------


class SepConvBn(nn.Module):
    """Depthwise conv1d, pointwise conv1d, BN (NeMo's time-channel separable conv)."""

    def __init__(self, cin, cout, k, stride=1, dilation=1):
        super().__init__()
        pad = dilation * (k - 1) // 2
        self.dw = nn.Conv1d(cin, cin, k, stride, pad, dilation=dilation, groups=cin, bias=False)
        self.pw = nn.Conv1d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm1d(cout, eps=1e-3)

    def forward(self, x):
        return self.bn(self.pw(self.dw(x)))


class QuartzBlock(nn.Module):
    """R separable conv + BN + ReLU sub-blocks; the residual (1x1 conv + BN of the block's
    input) joins before the last ReLU."""

    def __init__(self, cin, cout, k, repeat):
        super().__init__()
        self.subs = nn.ModuleList(
            SepConvBn(cin if i == 0 else cout, cout, k) for i in range(repeat)
        )
        self.res = nn.Sequential(
            nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout, eps=1e-3)
        )

    def forward(self, x):
        y = x
        for i, sub in enumerate(self.subs):
            y = sub(y)
            if i < len(self.subs) - 1:
                y = F.relu(y)
        return F.relu(y + self.res(x))


class QuartzNet5x5(nn.Module):
    """QuartzNet 5x5 (kernels 33 s2; 33, 39, 51, 63, 75 x5; 87 dilation 2; 1x1; 1x1 to 29
    characters) at a quarter width (small: 64 ... 256 channels) on 64 mel bins x 128 frames;
    log-softmax over the characters."""

    def __init__(self, features=64, classes=29):
        super().__init__()
        self.c1 = SepConvBn(features, 64, 33, stride=2)
        widths = (64, 64, 128, 128, 128)
        blocks, cin = [], 64
        for w, k in zip(widths, (33, 39, 51, 63, 75)):
            blocks.append(QuartzBlock(cin, w, k, 5))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.c2 = SepConvBn(cin, 128, 87, dilation=2)
        self.c3 = nn.Sequential(nn.Conv1d(128, 256, 1, bias=False), nn.BatchNorm1d(256, eps=1e-3))
        self.c4 = nn.Conv1d(256, classes, 1)

    def forward(self, x):  # [N, mel, T]
        x = self.blocks(F.relu(self.c1(x)))
        x = self.c4(F.relu(self.c3(F.relu(self.c2(x)))))
        return F.log_softmax(x.transpose(1, 2), dim=-1)


# -- x-vector -----------------------------------------------------------------------------------


class XVector(nn.Module):
    """Kaldi's x-vector at half width (small: 256 frame channels, 750 before pooling): TDNN
    layers as dilated conv1d (contexts [-2, 2], {-2, 0, 2}, {-3, 0, 3}, 1, 1), ReLU, BN;
    statistics pooling (``mean`` and ``std`` over time, concat); two segment layers (linear,
    ReLU, BN) and the speaker classifier."""

    def __init__(self, features=30, c=256, pooled=750, emb=256, speakers=100):
        super().__init__()
        layers = []
        for cin, cout, k, d in (
            (features, c, 5, 1),
            (c, c, 3, 2),
            (c, c, 3, 3),
            (c, c, 1, 1),
            (c, pooled, 1, 1),
        ):
            layers += [nn.Conv1d(cin, cout, k, dilation=d), nn.ReLU(), nn.BatchNorm1d(cout)]
        self.frames = nn.Sequential(*layers)
        self.segment = nn.Sequential(
            nn.Linear(2 * pooled, emb), nn.ReLU(), nn.BatchNorm1d(emb),
            nn.Linear(emb, emb), nn.ReLU(), nn.BatchNorm1d(emb),
        )  # fmt: skip
        self.out = nn.Linear(emb, speakers)

    def forward(self, x):  # [N, features, T]
        x = self.frames(x)
        stats = torch.cat([x.mean(dim=2), x.std(dim=2)], dim=1)
        return self.out(self.segment(stats))


# -- ECAPA-TDNN ---------------------------------------------------------------------------------


class TdnnBlock(nn.Sequential):
    def __init__(self, cin, cout, k=1, d=1):
        super().__init__(
            nn.Conv1d(cin, cout, k, dilation=d, padding=d * (k - 1) // 2),
            nn.ReLU(),
            nn.BatchNorm1d(cout),
        )


class Res2Net1d(nn.Module):
    def __init__(self, c, scale, k, d):
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(
            TdnnBlock(c // scale, c // scale, k, d) for _ in range(scale - 1)
        )

    def forward(self, x):
        parts = torch.chunk(x, self.scale, dim=1)
        out, y = [parts[0]], None
        for i, block in enumerate(self.blocks, 1):
            y = block(parts[i] if i == 1 else parts[i] + y)
            out.append(y)
        return torch.cat(out, dim=1)


class SEBlock1d(nn.Module):
    def __init__(self, c, rd):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv1d(c, rd, 1), nn.Conv1d(rd, c, 1)

    def forward(self, x):
        s = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return s * x


class SERes2Block(nn.Module):
    def __init__(self, c, k, d, scale=8):
        super().__init__()
        self.tdnn1, self.res2 = TdnnBlock(c, c), Res2Net1d(c, scale, k, d)
        self.tdnn2, self.se = TdnnBlock(c, c), SEBlock1d(c, c // 4)

    def forward(self, x):
        return x + self.se(self.tdnn2(self.res2(self.tdnn1(x))))


class AttentiveStatsPool(nn.Module):
    """Attentive statistics pooling with global context: the frames concatenated with their
    mean and std ``repeat``-ed over time, a TDNN + tanh + 1x1 conv scoring each frame, softmax
    over time, the weighted mean and std (``sum(dim=2)``, ``pow``, ``sqrt`` of a clamp)."""

    def __init__(self, c, attn=64, eps=1e-12):
        super().__init__()
        self.eps = eps
        self.tdnn = TdnnBlock(3 * c, attn)
        self.conv = nn.Conv1d(attn, c, 1)

    def stats(self, x, w):
        mean = (w * x).sum(dim=2)
        std = torch.sqrt((w * (x - mean.unsqueeze(2)).pow(2)).sum(dim=2).clamp(self.eps))
        return mean, std

    def forward(self, x):
        t = x.shape[-1]
        uniform = torch.ones_like(x[:, :1]) / t
        mean, std = self.stats(x, uniform)
        ctx = torch.cat(
            [x, mean.unsqueeze(2).repeat(1, 1, t), std.unsqueeze(2).repeat(1, 1, t)], dim=1
        )
        w = F.softmax(self.conv(torch.tanh(self.tdnn(ctx))), dim=2)
        mean, std = self.stats(x, w)
        return torch.cat((mean, std), dim=1)


class ECAPATDNN(nn.Module):
    """SpeechBrain's ECAPA-TDNN at C = 128 (small; 512 or 1024 published) on 80 fbank x 100
    frames: TDNN k5, three SE-Res2Net blocks (k3, dilation 2, 3, 4), multi-layer feature
    aggregation (concat, TDNN to 3C), attentive statistics pooling, BN, linear to 192."""

    def __init__(self, features=80, c=128, emb=192):
        super().__init__()
        self.layer1 = TdnnBlock(features, c, 5)
        self.blocks = nn.ModuleList(SERes2Block(c, 3, d) for d in (2, 3, 4))
        self.mfa = TdnnBlock(3 * c, 3 * c)
        self.asp = AttentiveStatsPool(3 * c)
        self.asp_bn = nn.BatchNorm1d(6 * c)
        self.fc = nn.Linear(6 * c, emb)

    def forward(self, x):  # [N, features, T]
        x = self.layer1(x)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.asp(self.mfa(torch.cat(outs, dim=1)))
        return self.fc(self.asp_bn(x))


# -- CRNN with a packed BiLSTM ------------------------------------------------------------------


class BiLSTM(nn.Module):
    """CRNN's ``BidirectionalLSTM``: the sequence packed with its lengths
    (``pack_padded_sequence``), a bidirectional LSTM, unpacked, a linear."""

    def __init__(self, cin, hidden, cout):
        super().__init__()
        self.rnn = nn.LSTM(cin, hidden, bidirectional=True)
        self.embedding = nn.Linear(2 * hidden, cout)

    def forward(self, x, lengths):  # [T, N, C]
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
        return self.embedding(out)


class CRNNPacked(nn.Module):
    """The CRNN text recogniser (VGG-style conv stack at a quarter width, BN on convs 5 and
    6, max pools (2, 2) (2, 2) (2, 1) (2, 1)) on 1x32x100 grey crops, two packed BiLSTMs (hidden
    64), log-softmax over 37 symbols. The lengths are the full width, as a fixed-size export
    passes them."""

    def __init__(self, classes=37, hidden=64):
        super().__init__()
        cfg = [
            (1, 16, False),
            (16, 32, False),
            (32, 64, False),
            (64, 64, False),
            (64, 128, True),
            (128, 128, True),
        ]
        pools = {0: (2, 2), 1: (2, 2), 3: ((2, 2), (2, 1), (0, 1)), 5: ((2, 2), (2, 1), (0, 1))}
        layers: list[nn.Module] = []
        for i, (cin, cout, bn) in enumerate(cfg):
            layers += (
                [nn.Conv2d(cin, cout, 3, 1, 1)]
                + ([nn.BatchNorm2d(cout)] if bn else [])
                + [nn.ReLU()]
            )
            if i in pools:
                layers.append(nn.MaxPool2d(*pools[i]))
        layers += [nn.Conv2d(128, 128, 2, 1, 0), nn.BatchNorm2d(128), nn.ReLU()]
        self.cnn = nn.Sequential(*layers)
        self.rnn1, self.rnn2 = BiLSTM(128, hidden, hidden), BiLSTM(hidden, hidden, classes)

    def forward(self, x):
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [T, N, C]
        t, b, _ = f.shape
        lengths = torch.full((b,), t, dtype=torch.long)
        y = self.rnn2(self.rnn1(f, lengths), lengths)
        return F.log_softmax(y, dim=2)


# -- Speech-Transformer encoder -----------------------------------------------------------------


def sinusoid_positions(t: int, d: int, like: torch.Tensor) -> torch.Tensor:
    """``[t, d]`` sines and cosines interleaved (even dims sin, odd cos), computed from
    ``arange``, ``pow``, ``sin``, ``cos``, ``stack``."""
    pos = torch.arange(t, dtype=like.dtype, device=like.device).unsqueeze(1)
    i = torch.arange(0, d, 2, dtype=like.dtype, device=like.device)
    angle = pos / torch.pow(10000.0, i / d)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(1)


class MaskedSelfAttention(nn.Module):
    """ESPnet's MultiHeadedAttention: padded keys ``masked_fill``-ed with the dtype's minimum
    before the softmax and with 0 after it."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dk = heads, d // heads
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, pad):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, self.dk).transpose(1, 2)
        k = self.k(x).view(b, t, self.heads, self.dk).transpose(1, 2)
        v = self.v(x).view(b, t, self.heads, self.dk).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        mask = pad.unsqueeze(1).unsqueeze(2)  # [B, 1, 1, T]
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        return self.out((attn @ v).transpose(1, 2).reshape(b, t, d))


class SpeechEncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(d, eps=1e-12), MaskedSelfAttention(d, heads)
        self.norm2 = nn.LayerNorm(d, eps=1e-12)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Linear(ff, d))

    def forward(self, x, pad):
        x = x + self.attn(self.norm1(x), pad)
        return x + self.ff(self.norm2(x))


class SpeechTransformer(nn.Module):
    """ESPnet's Transformer encoder, small (d 64, 4 heads, FFN 256, 2 layers) on 64 frames x 80
    fbank: conv2d subsampling (2x 3x3 s2 + ReLU, linear), ``x sqrt(d)`` plus sinusoidal
    positions computed in ``forward``, a padding mask from all-zero input frames (``eq``)
    subsampled as ESPnet does (``[:, :-2:2]``), pre-norm layers, LayerNorm, CTC linear,
    log-softmax."""

    def __init__(self, features=80, d=64, heads=4, ff=256, layers=2, classes=32):
        super().__init__()
        self.d = d
        self.conv = nn.Sequential(
            nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU()
        )
        self.linear = nn.Linear(d * (((features - 1) // 2 - 1) // 2), d)
        self.layers = nn.ModuleList(SpeechEncoderLayer(d, heads, ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.ctc = nn.Linear(d, classes)

    def forward(self, feats):  # [N, T, F]
        pad = feats.abs().sum(dim=-1).eq(0)
        pad = pad[:, :-2:2][:, :-2:2]
        x = self.conv(feats.unsqueeze(1))
        b, c, t, f = x.shape
        x = self.linear(x.transpose(1, 2).contiguous().view(b, t, c * f))
        x = x * math.sqrt(self.d) + sinusoid_positions(t, self.d, x)
        for layer in self.layers:
            x = layer(x, pad)
        return F.log_softmax(self.ctc(self.norm(x)), dim=-1)


# -- DS-CNN keyword spotting (Hello Edge) -------------------------------------------------------


class DSCNN(nn.Module):
    """ARM ML-KWS's DS-CNN-S on 49 frames x 10 MFCC: conv 10x4 s2 (64), four depthwise 3x3 +
    pointwise 1x1 pairs (BN, ReLU), average pool, linear to 12 keywords."""

    def __init__(self, c=64, classes=12):
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(1, c, (10, 4), 2, (5, 1), bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
        ]
        for _ in range(4):
            layers += [
                nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
            ]  # fmt: skip
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):  # [N, 1, 49, 10]
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


# -- PANNs CNN6 ---------------------------------------------------------------------------------


class Cnn6(nn.Module):
    """PANNs' Cnn6 at half width (small: 32 ... 256) on 1 x 100 frames x 64 mel: BN over the
    mel bins (``transpose(1, 3)``), four 5x5 conv + BN + ReLU + 2x2 average-pool blocks, mean over
    frequency, ``max`` (values, indices) plus ``mean`` over time, linear + ReLU, sigmoid
    tag scores (527 AudioSet classes)."""

    def __init__(self, mel=64, classes=527):
        super().__init__()
        self.bn0 = nn.BatchNorm2d(mel)
        blocks, cin = [], 1
        for cout in (32, 64, 128, 256):
            blocks += [
                nn.Conv2d(cin, cout, 5, 1, 2, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
                nn.AvgPool2d(2),
            ]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc1, self.fc_audioset = nn.Linear(cin, cin), nn.Linear(cin, classes)

    def forward(self, x):  # [N, 1, T, mel]
        x = self.bn0(x.transpose(1, 3)).transpose(1, 3)
        x = torch.mean(self.blocks(x), dim=3)
        (x1, _) = torch.max(x, dim=2)
        x = x1 + torch.mean(x, dim=2)
        return torch.sigmoid(self.fc_audioset(F.relu(self.fc1(x))))


# -- keyword spotting with a log-mel front end in the network -----------------------------------


def mel_filterbank(bins: int, mels: int, rate: int) -> torch.Tensor:
    """``[mels, bins]`` triangular filters evenly spaced on the mel scale (HTK formula)."""
    to_mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    edges = torch.linspace(0.0, to_mel(rate / 2), mels + 2)
    hz = 700.0 * (10 ** (edges / 2595.0) - 1.0)
    freqs = torch.linspace(0.0, rate / 2, bins)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up, down = (freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


class LogMelKWS(nn.Module):
    """A keyword spotter that takes 1 s of 8 kHz audio: the STFT as a fixed conv1d (Hann-windowed
    cosines and sines, n_fft 256, hop 128, as nnAudio and TFLite-micro front ends do), power
    ``re² + im²``, a mel filterbank ``matmul`` (40 mels), ``log`` of a clamp, then a small
    conv net (3x3 convs, BN, ReLU, max pools, mean, linear to 12)."""

    def __init__(self, n_fft=256, hop=128, mels=40, rate=8000, classes=12):
        super().__init__()
        bins = n_fft // 2 + 1
        n = torch.arange(n_fft, dtype=torch.float32)
        k = torch.arange(bins, dtype=torch.float32)[:, None]
        window = torch.hann_window(n_fft, periodic=True)
        angle = 2 * math.pi * k * n / n_fft
        kernel = torch.cat([torch.cos(angle) * window, -torch.sin(angle) * window])[:, None, :]
        self.stft = nn.Conv1d(1, 2 * bins, n_fft, hop, bias=False)
        self.stft.weight.data.copy_(kernel)
        self.stft.weight.requires_grad_(False)
        self.register_buffer("mel", mel_filterbank(bins, mels, rate))
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(),
        )  # fmt: skip
        self.fc = nn.Linear(64, classes)

    def forward(self, x):  # [N, 1, samples]
        re, im = self.stft(x).chunk(2, dim=1)
        power = re**2 + im**2
        logmel = torch.log(torch.clamp(torch.matmul(self.mel, power), min=1e-6))
        y = self.net(logmel.unsqueeze(1))
        return self.fc(y.mean((2, 3)))
