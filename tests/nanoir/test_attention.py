"""``aten.scaled_dot_product_attention`` decomposed by the frontend into matmul(q, k^T), a mul
by the scale, nf.softmax over the last dim (the mask its boolean operand) and matmul by v:
nf against torch in float64 (hypothesis over shapes, scale, mask kind), timm's ViT attention
block and nn.MultiheadAttention import, quantize + lower-to-hw gives nq == nh bit for bit,
and the masks nanoir cannot take are refused naming the node.

Mutants seen to fail in a private copy (``/tmp/copy-datamove``), each named at its test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)


class Sdpa(nn.Module):
    """F.scaled_dot_product_attention with a buffer mask (bool or float 0/-inf) or causal."""

    def __init__(self, mask: torch.Tensor | None, causal: bool, scale: float | None):
        super().__init__()
        self.causal, self.scale = causal, scale
        self.register_buffer("mask", mask)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=self.mask, is_causal=self.causal, scale=self.scale
        )


@st.composite
def attention_cases(draw):  # noqa: ANN001, ANN201
    b, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    lq, lk = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    e, ev = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    kind = draw(st.sampled_from(("none", "causal", "bool", "float")))
    scale = draw(st.one_of(st.none(), st.floats(0.05, 2.0)))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    mask = None
    if kind in ("bool", "float"):
        keep = torch.rand(lq, lk, generator=g) < 0.7
        keep[:, 0] = True  # every row keeps one position (torch gives NaN for none)
        mask = keep if kind == "bool" else torch.zeros(lq, lk).masked_fill(~keep, -math.inf)
    if kind == "causal":
        lk = max(lk, lq)  # the upper-left triangle keeps position 0 in every row
    shapes = [(b, h, lq, e), (b, h, lk, e), (b, h, lk, ev)]
    qkv = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    return Sdpa(mask, kind == "causal", scale).eval(), qkv, kind


@settings(max_examples=examples(20), deadline=None)
@given(attention_cases())
def test_attention_matches_torch_in_float64(case) -> None:  # noqa: ANN001
    """nf (float64) against torch's attention (float64) within 1e-5 * max(1, max |torch|);
    the mask is the softmax's operand, no -inf constant appears. Mutants: the default scale
    1/E instead of 1/sqrt(E); the causal mask upper- instead of lower-triangular."""
    model, qkv, kind = case
    if model.mask is not None and model.mask.dtype != torch.bool:
        model.mask = model.mask.double()
    module = nanoir.from_torch(model, tuple(qkv))
    with torch.no_grad():
        want = model(*qkv).numpy()
    (got,) = nanoir.run(module, *(t.numpy() for t in qkv))
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))
    softmaxes = [op for op in module.walk() if isinstance(op, nf.SoftmaxOp)]
    assert len(softmaxes) == 1 and (softmaxes[0].mask is not None) == (kind != "none")
    for op in module.walk():
        if isinstance(op, nf.ConstantOp):
            values = np.asarray(op.value.get_values(), dtype=np.float64)
            assert np.isfinite(values).all()


class TimmAttention(nn.Module):
    """timm's ViT ``Attention``: qkv linear, reshape, permute, unbind, SDPA, transpose,
    reshape, proj."""

    def __init__(self, dim: int, heads: int, causal: bool = False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Mha(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


@settings(max_examples=examples(15), deadline=None)
@given(
    st.sampled_from(("timm", "timm_causal", "mha")),
    st.integers(1, 3),
    st.integers(2, 6),
    st.integers(0, 2**16),
)
def test_attention_blocks_import(kind: str, heads: int, n: int, seed: int) -> None:
    """timm's ViT attention (also causal) and nn.MultiheadAttention: nf against torch in
    float64. Mutant: unbind returning its pieces in reverse order."""
    torch.manual_seed(seed)
    dim = 4 * heads
    model = Mha(dim, heads) if kind == "mha" else TimmAttention(dim, heads, kind != "timm")
    model = model.double().eval()
    x = torch.randn(2, n, dim, dtype=torch.float64)
    module = nanoir.from_torch(model, (x,))
    with torch.no_grad():
        want = model(x).numpy()
    (got,) = nanoir.run(module, x.numpy())
    assert float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))


@settings(max_examples=examples(15), deadline=None)
@given(
    st.booleans(),
    st.integers(1, 2),
    st.integers(2, 5),
    st.sampled_from([m.value for m in RoundingMode]),
    st.integers(0, 2**16),
)
def test_attention_nq_equals_nh(causal: bool, heads: int, n: int, rounding: str, seed) -> None:  # noqa: ANN001
    """The timm block quantized at 8 bits (rounding drawn; E = 8, so the scale 1/sqrt(8) is
    no short dyadic number) lowers to nh (nh.softmax with the mask, nh.matmul) and runs bit
    for bit like the nq program. Mutant: the scale an unnamed (unquantized) constant:
    lower-to-hw then refuses the mul (33-bit products)."""
    torch.manual_seed(seed)
    dim = 8 * heads
    model = TimmAttention(dim, heads, causal).eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, n, dim)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    calib = [rng.standard_normal((2, n, dim)).astype(np.float32) for _ in range(2)]
    nanoir.quantize(module, calib, rounding=rounding)
    (q,) = nanoir.run(module, x)
    hw = nanoir.lower_to_hw(module.clone())
    (h,) = nanoir.run(hw, x)
    np.testing.assert_array_equal(h, q)
    assert any(op.name == "nh.softmax" for op in hw.walk())


def _refusal(model: nn.Module, *inputs: torch.Tensor) -> str:
    with pytest.raises(nanoir.Error) as info:
        nanoir.from_torch(model, inputs)
    text = str(info.value)
    assert "aten.scaled_dot_product_attention" in text and "Traceback" not in text
    return text


def test_masks_nanoir_cannot_take_are_refused_naming_the_node() -> None:
    """An additive float mask (values other than 0/-inf), attention dropout: one error naming
    the SDPA node and the reason. Mutant: the 0/-inf check on a float mask removed (the
    bias is then read as a mask, no error)."""
    qkv = [torch.randn(2, 1, 3, 4) for _ in range(3)]
    bias = torch.zeros(3, 3)
    bias[0, 1] = 0.5
    assert "additive bias" in _refusal(Sdpa(bias, False, None).eval(), *qkv)

    class Dropout(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)

    assert "dropout" in _refusal(Dropout(), *qkv)
