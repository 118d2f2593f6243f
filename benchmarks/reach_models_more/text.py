"""Token-id networks: an LSTM language model with tied embedding (PyTorch's word_language_model
example), a bidirectional-GRU text classifier, a BERT encoder (position ids from ``arange``,
token types from ``zeros_like``, an additive padding mask) and a Llama-style decoder (RMSNorm,
rotary positions computed in ``forward``, grouped-query attention by ``repeat_interleave``, a
causal mask from ``triu``, SwiGLU).

Written from the layout of pytorch/examples' ``word_language_model/model.py``, Hugging Face's
``modeling_bert.py`` and ``modeling_llama.py``; module names and code are ours, sizes small.
Inputs are ``[N, T]`` int64 ids, 0 the padding id, padded at the end.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 1000
"""The vocabulary of every network here (the bench draws ids below it)."""


class LSTMLanguageModel(nn.Module):
    """word_language_model's ``RNNModel("LSTM", tie_weights=True)`` (small: 128 wide, 2
    layers): embedding (``U(±0.1)``), dropout, LSTM, dropout, a decoder sharing the embedding's
    weight; logits for every position."""

    def __init__(self, vocab=VOCAB, d=128, layers=2):
        super().__init__()
        self.encoder = nn.Embedding(vocab, d)
        self.drop = nn.Dropout(0.2)
        self.rnn = nn.LSTM(d, d, layers, dropout=0.2, batch_first=True)
        self.decoder = nn.Linear(d, vocab)
        self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, ids):
        out, _ = self.rnn(self.drop(self.encoder(ids)))
        return self.decoder(self.drop(out))


class GRUClassifier(nn.Module):
    """A bidirectional GRU text classifier: embedding (``padding_idx=0``), BiGRU (hidden 64),
    max (``amax``) and mean over time concatenated, linear to 4 classes."""

    def __init__(self, vocab=VOCAB, d=64, hidden=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.gru = nn.GRU(d, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(4 * hidden, classes)

    def forward(self, ids):
        out, _ = self.gru(self.embed(ids))
        return self.fc(torch.cat([out.amax(dim=1), out.mean(dim=1)], dim=1))


class BertLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_out, self.attn_norm = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
        self.intermediate, self.output = nn.Linear(d, ff), nn.Linear(ff, d)
        self.out_norm = nn.LayerNorm(d, eps=1e-12)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.dh).permute(0, 2, 1, 3)

    def forward(self, x, bias):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dh) + bias
        ctx = (F.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).flatten(2)
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))


class BertTiny(nn.Module):
    """A BERT encoder (small: 2 layers, 128 wide, 2 heads, FFN 512, 64 positions) with
    Hugging Face's embedding and mask code: ``arange`` position ids, ``zeros_like`` token
    types, LayerNorm; the padding mask ``ids != 0`` turned into ``(1 - mask) * finfo.min``;
    the tanh pooler on the first token, a 2-class head. Weights ``N(0, 0.02)``."""

    def __init__(self, vocab=VOCAB, d=128, layers=2, heads=2, ff=512, positions=64, classes=2):
        super().__init__()
        self.word = nn.Embedding(vocab, d, padding_idx=0)
        self.position, self.token_type = nn.Embedding(positions, d), nn.Embedding(2, d)
        self.emb_norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, heads, ff) for _ in range(layers))
        self.pooler, self.classifier = nn.Linear(d, d), nn.Linear(d, classes)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, ids):
        t = ids.shape[1]
        position_ids = (
            torch.arange(t, dtype=torch.long, device=ids.device).unsqueeze(0).expand_as(ids)
        )
        token_type_ids = torch.zeros_like(ids)
        x = self.word(ids) + self.position(position_ids) + self.token_type(token_type_ids)
        x = self.emb_norm(x)
        mask = (ids != 0).to(x.dtype)[:, None, None, :]
        bias = (1.0 - mask) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


class RMSNorm(nn.Module):
    """Llama's RMSNorm: in float32 (``.float()``), ``x rsqrt(mean(x²) + eps)``, back with
    ``type_as``, times the weight."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.type_as(x)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    """Grouped-query attention: 4 query heads share 2 key/value heads (``repeat_interleave``),
    rotary positions on q and k, a causal mask added before the softmax."""

    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dh = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.dh, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.dh, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.dh).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.dh) + mask
        attn = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((attn @ v).transpose(1, 2).reshape(b, t, d))


class LlamaLayer(nn.Module):
    def __init__(self, d, heads, kv_heads, ff):
        super().__init__()
        self.input_norm, self.attn = RMSNorm(d), LlamaAttention(d, heads, kv_heads)
        self.post_norm = RMSNorm(d)
        self.gate, self.up, self.down = (
            nn.Linear(d, ff, bias=False),
            nn.Linear(d, ff, bias=False),
            nn.Linear(ff, d, bias=False),
        )

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_norm(x), cos, sin, mask)
        y = self.post_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class TinyLlama(nn.Module):
    """A Llama-style decoder, tiny (small: d 64, 2 layers, 4 heads, 2 KV heads, SwiGLU 176,
    vocab 1000, tied head): rotary ``cos``/``sin`` from ``arange`` and ``outer`` in
    ``forward``, the causal mask ``full(-inf).triu(1)``, final RMSNorm, logits for every
    position. Weights ``N(0, 0.02)``."""

    def __init__(self, vocab=VOCAB, d=64, layers=2, heads=4, kv_heads=2, ff=176, theta=10000.0):
        super().__init__()
        self.dh, self.theta = d // heads, theta
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(LlamaLayer(d, heads, kv_heads, ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
        self.lm_head.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids)
        t = ids.shape[1]
        inv_freq = 1.0 / (
            self.theta
            ** (torch.arange(0, self.dh, 2, dtype=torch.float32, device=ids.device) / self.dh)
        )
        freqs = torch.outer(torch.arange(t, dtype=torch.float32, device=ids.device), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        mask = torch.full((t, t), float("-inf"), device=ids.device).triu(1).to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))
