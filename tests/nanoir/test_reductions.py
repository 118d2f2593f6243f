"""Reductions and prefix sums (issue 32 §3): ``nf.reduce`` / ``nf.arg_reduce`` / ``nf.cumsum``
and the statistics composed of them, against torch; nq == nh bit for bit (per-channel input
exponents included); the accumulator bound; streaming along a dim that is not reduced.

Mutants checked (each made the tests named fail; applied in place and restored):
- ``sum_bits`` without the ``ceil(log2 n)`` growth: test_the_sum_bound_is_checked (the
  lowering refuses nothing);
- per-channel exponents along a reduced dim not aligned first (``one_exponent_along``
  returning its input): test_nq_equals_nh[True] (the nh program fails to run);
- argmax picking the last maximum (``np.argmax`` of the reversed axis): test_nf_matches_torch;
- ``keepdim`` ignored by the frontend (no reshape): test_nf_matches_torch;
- the sum's container from the codes' bits alone, not the operand's declared width
  (``declared_sum_width`` returning ``container_width(bits)``):
  test_a_sum_of_codes_in_a_wider_container_verifies (0-d results: test_lower_scalars.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)


class Stats(nn.Module):
    """Every reduction of the family over ``dims`` (and one dim ``d``)."""

    def __init__(self, dims: tuple[int, ...], d: int, keepdim: bool):
        super().__init__()
        self.dims, self.d, self.keepdim = dims, d, keepdim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dims, d, k = self.dims, self.d, self.keepdim
        values, indices = x.max(dim=d, keepdim=k)
        return (
            x.sum(dim=dims, keepdim=k),
            x.amax(dim=dims, keepdim=k),
            x.amin(dim=dims, keepdim=k),
            values,
            indices.to(x.dtype),
            x.argmin(dim=d, keepdim=k).to(x.dtype),
            (x > 0.5).any(dim=d, keepdim=k).to(x.dtype),
            (x > -2).all(dim=d, keepdim=k).to(x.dtype),
            x.prod(dim=d, keepdim=k),
            x.cumsum(d),
            x.var(dim=dims, keepdim=k),
            x.std(dim=d, correction=0, keepdim=k),
            torch.linalg.vector_norm(x, 3, dim=dims, keepdim=k),
            torch.logsumexp(x, dim=d, keepdim=k),
            x.mean(),
        )


@settings(max_examples=examples(6), deadline=None)
@given(
    shape=st.lists(st.integers(2, 5), min_size=3, max_size=4),
    data=st.data(),
    keepdim=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_nf_matches_torch(shape: list[int], data: st.DataObject, keepdim: bool, seed: int) -> None:
    """Every reduction (torch's dims, negative dims, keepdim either way) equals torch in
    float64, argmax/argmin taking the first extreme as torch does (ties drawn on purpose)."""
    rank = len(shape)
    dims = tuple(sorted(data.draw(st.sets(st.integers(1, rank - 1), min_size=1))))
    d = data.draw(st.integers(-rank + 1, rank - 1).filter(lambda v: v % rank != 0))
    model = Stats(dims, d, keepdim).double().eval()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=gen).double() / 2  # ties in max/min
    module = nanoir.from_torch(model, (x,), dynamic_batch=False)
    got = run(module, x.numpy(), dtype=np.float64)
    with torch.no_grad():
        want = model(x)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-12, atol=1e-12, err_msg=str(i))


class Quantizable(nn.Module):
    """Reductions that lower: sum, max, min, argmax, any, cumsum, after a conv (per-channel
    exponents there when activations are per channel: the channels' scales differ)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding=1)
        with torch.no_grad():
            self.conv.weight *= torch.tensor([1.0, 4.0, 16.0, 0.25]).view(4, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.conv(x)
        return (
            h.sum(dim=1),
            h.amax(dim=2, keepdim=True),
            h.amin(dim=(1, 2)),
            h.argmax(dim=1).float(),
            (h > 0).any(dim=2).float(),
            h.cumsum(1),
            h.sum(dim=2) * 0.25,
        )


@pytest.mark.parametrize("per_channel", [False, True])
@settings(max_examples=examples(3), deadline=None)
@given(seed=st.integers(0, 2**16), bits=st.sampled_from((4, 8)))
def test_nq_equals_nh(per_channel: bool, seed: int, bits: int) -> None:
    """Quantized and lowered: nh == nq bit for bit on new inputs, per-tensor or per-channel
    activation exponents (a sum over channels aligns them first)."""
    torch.manual_seed(seed % 101)
    model = Quantizable().eval()
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4, 3, 9)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.tensor(x),))
    nanoir.quantize(module, [x], act_bits=bits, act_per_channel=per_channel, progress=False)
    hw = lower_to_hw(module.clone())
    for _ in range(2):
        y = rng.normal(size=(3, 3, 9)).astype(np.float32)
        for q, h in zip(run(module, y), run(hw, y)):
            assert q.tobytes() == h.tobytes()


def test_the_sum_bound_is_checked() -> None:
    """A sum of 2**16 + 1 codes of 16 bits needs 33 bits: refused, naming the op; 2**15
    codes take 31 and lower (i32)."""

    class Sum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(dim=1)

    for n, ok in ((2**15, True), (2**16 + 1, False)):
        x = np.random.default_rng(0).normal(size=(2, n)).astype(np.float32)
        module = nanoir.from_torch(Sum(), (torch.tensor(x),))
        nanoir.quantize(module, [x], act_bits=16, progress=False)
        if ok:
            hw = lower_to_hw(module.clone())
            assert run(hw, x)[0].tobytes() == run(module, x)[0].tobytes()
        else:
            with pytest.raises(LowerToHwError, match="'nf.reduce'.*33 bits, more than i32"):
                lower_to_hw(module)


def test_prod_is_refused_at_hw() -> None:
    """A product of codes has no integer form: imported, run in float, refused at lower-to-hw
    naming the op."""

    class Prod(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.prod(dim=1)

    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    module = nanoir.from_torch(Prod(), (torch.tensor(x),))
    np.testing.assert_allclose(run(module, x)[0], x.prod(axis=1), rtol=1e-5)
    nanoir.quantize(module, [x], progress=False)
    with pytest.raises(LowerToHwError, match="'nf.reduce'.*multiplies codes"):
        lower_to_hw(module)


def test_streamed_equals_whole() -> None:
    """Reductions over channels, streamed along time at nh: equal to the whole run."""

    class Over(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(3, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.conv(x)
            return h.amax(dim=1, keepdim=True), h.sum(dim=1, keepdim=True) + h

    torch.manual_seed(0)
    x = torch.randn(2, 3, 10)
    module = nanoir.from_torch(Over().eval(), (x,))
    assert any(isinstance(op, nf.ReduceOp) for op in module.walk())
    nanoir.quantize(module, [x.numpy()], progress=False)
    hw = lower_to_hw(module)
    want = run(hw, x.numpy())
    got = nanoir.stream(hw, [x.numpy()], step=1)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()


def test_a_0d_result_lowers() -> None:
    """A reduction to a 0-d value computed at run time lowers (one element inside nh,
    reshaped to 0-d at the return: lowering/hw/scalars.py), nq == nh, with torch's shape."""

    class Whole(nn.Module):
        def __init__(self, keepdim: bool):
            super().__init__()
            self.keepdim = keepdim

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.amax(dim=(0, 1), keepdim=self.keepdim)

    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    for keepdim in (True, False):
        module = nanoir.from_torch(Whole(keepdim), (torch.tensor(x),), dynamic_batch=False)
        nanoir.quantize(module, [x], progress=False)
        got = run(lower_to_hw(module.clone()), x)[0]
        assert got.shape == ((1, 1) if keepdim else ())
        assert got.tobytes() == run(module, x)[0].tobytes()


def test_a_sum_of_codes_in_a_wider_container_verifies() -> None:
    """Codes that per-channel exponents aligned to one (3 signed bits, held in ``i4``) summed:
    the result is as wide as the verifier asks from the declared ``i4`` (it was ``i4``, and
    nh.reduce refused: "may overflow; the exact result needs i5"); nq == nh."""
    t, s, r = "tensor<?x2x3xf32>", "tensor<?x2x1xf32>", "tensor<?x1x1xf32>"
    module = nanoir.parse(f"""
    func.func @main(%x: {t}) -> {r} {{
      %xq = nq.fake_quant %x {{bits = 2 : i64, exp = dense<0> : tensor<1xi8>}} : {t}
      %a = nf.reduce "sum" %xq {{dims = array<i64: 2>}} : {t} -> {s}
      %aq = nq.fake_quant %a {{bits = 2 : i64, exp = dense<[[0], [1]]> : tensor<2x1xi8>}} : {s}
      %b = nf.reduce "sum" %aq {{dims = array<i64: 1>}} : {s} -> {r}
      %bq = nq.fake_quant %b {{bits = 2 : i64, exp = dense<0> : tensor<1xi8>}} : {r}
      func.return %bq : {r}
    }}""")
    x = np.random.default_rng(0).integers(-2, 2, size=(5, 2, 3)).astype(np.float32)
    hw = lower_to_hw(module.clone())
    hw.verify()
    nh = run(hw, x)[0]
    assert nh.tobytes() == run(module, x)[0].tobytes()
