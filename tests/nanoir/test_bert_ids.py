"""A BERT-like network (token and position embeddings, an attention mask computed from the
ids, encoder layers with softmax attention, a classifier) through from_torch -> quantize ->
lower_to_hw -> run: the token ids, read as an embedding's indices and by the mask's
comparison, are integers at every level (no fake-quant moves them; ``i32`` at exponent 0 at
nh); nq is torch's result up to the quantization of the other values, and nh equals nq bit
for bit. Ids read by anything else are refused by quantize, naming the input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.dialects import nq
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from torch import nn
from xdsl.ir import BlockArgument

import nanoir
from nanoir.frontend import from_torch

torch.set_num_threads(1)

T, D, H = 8, 16, 2
MASKED = -30.0
"""The score a padded key gets (its softmax weight ``e**-30``, 0 to float32 in practice): a
``-1e4`` would set the per-tensor grid of the masked scores to a step of 0.5 even at 16 bits."""


class _Layer(nn.Module):
    """Post-norm encoder layer: multi-head softmax attention with an additive mask, a feed
    forward with a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ff1, self.ff2 = nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], T, H, D // H).transpose(1, 2)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = q @ k.transpose(-1, -2) * 0.5 + bias
        a = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(x.shape[0], T, D)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.ff2(torch.relu(self.ff1(x))))


class _Bert(nn.Module):
    """Ids -> token + position embeddings -> 2 encoder layers -> classifier on token 0; the
    padding mask from the ids (``mask`` picks how: ``ids != 0`` as a float bias, or
    ``ids == 0`` by ``masked_fill``)."""

    def __init__(self, vocab: int, mask: str) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, D, padding_idx=0)
        self.pos = nn.Embedding(T, D)
        self.layers = nn.ModuleList([_Layer(), _Layer()])
        self.cls = nn.Linear(D, 3)
        self.mask = mask
        self.register_buffer("positions", torch.arange(T))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.mask == "ne":
            bias = (1.0 - (ids != 0).float())[:, None, None, :] * MASKED
        else:
            zeros = torch.zeros(ids.shape[0], 1, 1, T)
            bias = zeros.masked_fill((ids == 0)[:, None, None, :], MASKED)
        x = self.tok(ids) + self.pos(self.positions)
        for layer in self.layers:
            x = layer(x, bias)
        return self.cls(x[:, 0])


def _ids(n: int, vocab: int, seed: int) -> torch.Tensor:
    """``n`` sequences of ids in ``1..vocab-1`` padded with 0 after 2..T tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (n, T), generator=g)
    for i, n_tokens in enumerate(torch.randint(2, T + 1, (n,), generator=g).tolist()):
        ids[i, n_tokens:] = 0
    return ids


def _quantized(vocab: int, mask: str, **options: object) -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    net = _Bert(vocab, mask).eval()
    module = from_torch(net, (_ids(2, vocab, 0),))
    nanoir.quantize(module, [_ids(16, vocab, s).numpy() for s in range(1, 4)], **options)
    return net, module


def _no_fake_quant_on_ids(module: object) -> None:
    for op in module.walk():  # type: ignore[attr-defined]
        if isinstance(op, nq.FakeQuantOp):
            assert not isinstance(op.input, BlockArgument), str(op)


@pytest.mark.parametrize("mask", ["ne", "eq"])
def test_bert_ids_exact_at_nq(mask: str) -> None:
    """16-bit weights and activations, a vocabulary of 40000 ids (a 16-bit grid holds them
    only at a step of 2): nq is within 16-bit noise of torch (float64), and no fake-quant
    reads the ids.
    ``eq`` moves the bool mask (``[:, None, None, :]``) before ``masked_fill``.
    kills: nf.is_index_input without its comparison case (quantize then refuses the ids; with
    no refusal either, they get a fake-quant at exponent -1 and odd ids read their
    neighbour's row); MOVES_BOOLS empty (the frontend refuses the bool unsqueeze)."""
    vocab = 40000
    net, module = _quantized(vocab, mask, weight_bits=16, act_bits=16, bias_bits=16)
    _no_fake_quant_on_ids(module)
    x = _ids(32, vocab, 99)
    want = net.double()(x).detach().numpy()
    (got,) = run(module, x.numpy(), dtype=np.float64)
    assert np.abs(got - want).max() < 2e-2 * np.abs(want).max()


@pytest.mark.parametrize("mask", ["ne", "eq"])
def test_bert_ids_nh_equals_nq(mask: str) -> None:
    """8 bits, a vocabulary of 300 (an 8-bit grid holds ids only at a step of 4): lower-to-hw
    carries the ids as an ``i32`` input at exponent 0 into the embedding and the mask's
    comparison; nh == nq bit for bit, and nq is torch's classification up to 8-bit noise.
    kills: nh's compare reading the ids by ``hw.get`` (no i32 input yet when the mask comes
    before the embedding: lower-to-hw refuses); nf.is_index_input without its comparison case
    (lower-to-hw refuses the fake-quantized ids)."""
    vocab = 300
    net, module = _quantized(vocab, mask)
    _no_fake_quant_on_ids(module)
    x = _ids(32, vocab, 98)
    (want_nq,) = run(module, x.numpy(), dtype=np.float64)
    hw = lower_to_hw(module.clone())
    (got,) = run(hw, x.numpy())
    assert np.array_equal(got, want_nq)
    torch_out = net.double()(x).detach().numpy()
    assert np.abs(want_nq - torch_out).max() < 0.3 * np.abs(torch_out).max()


class _IdsAsFeature(nn.Module):
    """The ids embedded and also added in as a float feature."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(300, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids) + ids.float()[..., None]


def test_ids_read_otherwise_are_refused_by_name() -> None:
    """Ids read by an embedding and moved into an add: one clear nanoir.Error naming the input and
    the other reader, never a fake-quant that silently moves the ids.
    kills: the refusal dropped (the ids get an 8-bit fake-quant at exponent -2)."""
    module = from_torch(_IdsAsFeature().eval(), (_ids(2, 300, 0),))
    with pytest.raises(nanoir.Error, match=r"input ids .*indices.*read by nf\.reshape"):
        nanoir.quantize(module, [_ids(8, 300, 1).numpy()])
