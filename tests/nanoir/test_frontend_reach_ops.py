"""Frontend mappings that bench_reach.py found missing, each onto nf ops nanoir already lowers:
``aten.glu`` (split + sigmoid + mul; Conformer), ``aten._weight_norm`` of parameters (folded
into a constant weight; wav2vec2's positional conv), ``mean`` over dims that are not all the
spatial ones (transpose + reshape + global average pool; LeViT, Swin), ``aten.roll`` (gathers
with constant indices; Swin) and indexing by a view of a constant buffer (the view is folded;
timm Swin's relative position bias). Per mapping: nf against torch in float64, and
quantize + lower-to-hw with nq == nh bit for bit; refusals name their reason.

Mutants seen to fail in a private copy (``/tmp/copy-frontops``), each named at its test.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn

import nanoir
from nanoir.frontend import FrontendError
from nanoir.testing.programs import examples

torch.set_num_threads(1)


class Glu(nn.Module):
    """A conv, then GLU over channels (``dim=1``) or over the last dim."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim, self.conv = dim, nn.Conv1d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.glu(self.conv(x), dim=self.dim)


class WeightNorm(nn.Module):
    """A weight-normed conv (wav2vec2's positional conv: ``dim=2``) and a weight-normed linear
    (the default ``dim=0``)."""

    def __init__(self):
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.conv = wn(nn.Conv1d(3, 4, 3, padding=1), dim=2)
        self.fc = wn(nn.Linear(6, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))


class TokenMean(nn.Module):
    """A linear on ``[B, N, C]`` tokens, then a mean over ``dims`` that are not all the
    spatial ones (LeViT's ``x.mean(1)``; Swin's ``x.mean((1, 2))`` on ``[B, H, W, C]``)."""

    def __init__(self, dims: tuple[int, ...], keepdim: bool, four_d: bool):
        super().__init__()
        self.dims, self.keepdim, self.four_d = dims, keepdim, four_d
        self.fc = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.four_d:
            y = y.reshape(y.shape[0], 2, 3, 5)
        return y.mean(self.dims, keepdim=self.keepdim)


class Roll(nn.Module):
    """A conv, a roll by constant shifts (negative and larger than the dim included), and an
    add of the unrolled value, so the rolled one is requantized."""

    def __init__(self, shifts: tuple[int, ...], dims: tuple[int, ...]):
        super().__init__()
        self.shifts, self.dims = shifts, dims
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.roll(y, self.shifts, self.dims) + y


class ViewIndex(nn.Module):
    """timm Swin's relative position bias: a table indexed by a view of an index buffer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.table = nn.Parameter(torch.randn(7, 4))
        self.register_buffer("index", torch.randint(0, 7, (2, 3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.table[self.index.view(-1)].view(2, 3, 4).permute(2, 0, 1)
        return self.conv(x) + bias


CASES = {
    "glu_channels": (lambda: Glu(1), (2, 3, 5)),
    "glu_last": (lambda: Glu(-1), (2, 3, 6)),
    "weight_norm": (WeightNorm, (2, 3, 6)),
    "mean_tokens": (lambda: TokenMean((1,), False, False), (2, 4, 6)),
    "mean_tokens_keepdim": (lambda: TokenMean((-2,), True, False), (2, 4, 6)),
    "mean_hw_of_bhwc": (lambda: TokenMean((1, 2), False, True), (2, 6, 6)),
    "roll": (lambda: Roll((1, -3), (2, 3)), (2, 3, 3, 4)),
    "roll_channels": (lambda: Roll((5,), (1,)), (2, 3, 3, 4)),
    "view_index": (ViewIndex, (2, 3, 2, 3)),
}


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return CASES[name][0]().eval()


def _inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_nf_matches_torch_in_float64(name: str) -> None:
    """nf against torch, both in float64, within 1e-5 * max(1, max |torch|). Mutants: glu
    gating the second half by the first (``sigmoid(a) * b``); the weight norm taken over
    ``dim`` instead of every other dim; mean's transpose putting the kept dims last; roll
    gathering ``x[(i + s) mod n]``; reshape no longer folding integer constants (view_index is
    then refused)."""
    model = _model(name).double()
    x = torch.from_numpy(_inputs(CASES[name][1], 1)).double()
    module = nanoir.from_torch(model, (x,))
    with torch.no_grad():
        expected = model(x).numpy()
    (actual,) = nanoir.run(module, x.numpy())
    assert actual.shape == expected.shape
    bound = 1e-5 * max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(actual - expected).max()) <= bound


@functools.cache
def _imported(name: str):  # noqa: ANN202
    """One torch.export per case: the examples below quantize clones of it."""
    model = _model(name)
    return nanoir.from_torch(model, (torch.from_numpy(_inputs(CASES[name][1], 0)),))


@settings(max_examples=examples(12), deadline=None)
@given(
    st.sampled_from(sorted(CASES)),
    st.integers(0, 2**16),
    st.sampled_from((4, 8)),
    st.sampled_from([m.value for m in RoundingMode]),
)
def test_nq_equals_nh_bit_for_bit(name: str, seed: int, bits: int, rounding: str) -> None:
    """quantize + lower-to-hw: the nh run (reals) equals the nq run element for element.
    Mutant: lower-to-hw's gather keeping its input's per-channel exponents in place (the
    rolled channels then read their neighbours' scale)."""
    shape = CASES[name][1]
    module = _imported(name).clone()
    calib = [_inputs(shape, seed + k) for k in (1, 2)]
    nanoir.quantize(
        module,
        calib,
        weight_bits=8,
        act_bits=bits,
        rounding=rounding,
        act_per_channel=True,
        weight_per_channel=True,
    )
    x = _inputs(shape, seed)
    (q,) = nanoir.run(module, x)
    (h,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)
    np.testing.assert_array_equal(h, q)


# The mean over (1, 2) of [B, H, W, C] streamed along dim 2 trips a stream-plan defect that
# the same graph written in torch (reshape, permute, reshape, adaptive_avg_pool1d) trips too:
# "nh.requant: a streamed window gave 6 rows along dim 2, the plan expects 1". Not the
# frontend's; its whole-tensor nq == nh is checked above.
STREAMED = sorted(set(CASES) - {"mean_hw_of_bhwc"})


@pytest.mark.parametrize("name", STREAMED)
def test_streamed_equals_whole(name: str) -> None:
    """The nh program streamed along dim 2 a row at a time equals its whole run (roll's
    gathers along the streamed dim wait for the whole extent). Mutant: ``gather_rows``
    streaming a gather row by row along its own axis (the roll case fails)."""
    shape = CASES[name][1]
    module = _imported(name).clone()
    nanoir.quantize(module, [_inputs(shape, 1)], weight_bits=8, act_bits=8)
    hw = nanoir.lower_to_hw(module)
    x = _inputs(shape, 2)
    (whole,) = nanoir.run(hw, x)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=1)
    np.testing.assert_array_equal(streamed, whole)


class BatchMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean((0, 1))


class RuntimeWeightNorm(nn.Module):
    """A weight norm of the input itself (``self.v * 2.0`` would be folded at import, as any
    input-independent computation is: tests/nanoir/test_frontend_fold.py)."""

    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_norm(x, self.g, 1)


class FlatRoll(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.roll(x, 1)


@pytest.mark.parametrize(
    ("model", "shape", "reason"),
    [
        (BatchMean(), (2, 3, 4), "the batch dim 0 cannot be reduced"),
        (RuntimeWeightNorm(), (2, 3), "weight norm of tensors computed at run time"),
        (FlatRoll(), (2, 3), "roll of the flattened tensor"),
    ],
)
def test_refusals_name_the_reason(model: nn.Module, shape: tuple[int, ...], reason: str) -> None:
    """What has no nf form is refused by one FrontendError naming the op and why."""
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(model, (torch.randn(*shape),))
    assert reason in str(info.value)
