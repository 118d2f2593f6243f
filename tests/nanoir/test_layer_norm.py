"""LayerNorm (and the integer algorithm it shares with GroupNorm) at every level built so far:
torch -> nf (float64 kernel against torch), the integer algorithm's error against a float64
oracle written here, nq == nh bit for bit, the i64 bound refusal, streamed == whole.

Mutants seen to fail these tests in a private copy (/tmp/copy-layernorm), each named in the
test that caught it.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.numerics import norm
from torch import nn
from xdsl.printer import Printer

import nanoir
from nanoir.testing.programs import examples

MODES = ("trunc", "floor", "half_up", "half_even")


def oracle(q: np.ndarray, k: int, g: np.ndarray, kg: int, c: np.ndarray, kc: int, eps: float):
    """torch's LayerNorm over the last dim, float64, on dequantized codes (written here)."""
    x = q.astype(np.float64) * 2.0**-k
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * (g * 2.0**-kg) + c * 2.0**-kc


@settings(max_examples=examples(300), deadline=None)
@given(
    n=st.integers(1, 200),
    rows=st.integers(1, 3),
    in_bits=st.sampled_from([4, 8, 16]),
    out_bits=st.sampled_from([8, 16]),
    mode=st.sampled_from(MODES),
    eps=st.sampled_from([1e-12, 1e-5, 1e-3, 0.5]),
    seed=st.integers(0, 2**32 - 1),
    spread=st.integers(0, 15),
)
def test_integer_algorithm_within_one_output_step(
    n: int, rows: int, in_bits: int, out_bits: int, mode: str, eps: float, seed: int, spread: int
) -> None:
    """|codes - torch(dequantized)| <= 1 output step (saturation aside), every mode and width;
    the output exponent is the finest that holds torch's largest value.

    Mutant caught: the per-row shift fixed at 0."""
    rng = np.random.default_rng(seed)
    top = 2 ** (in_bits - 1)
    q = rng.integers(-top, top, (rows, n)) >> min(spread, in_bits - 1)
    k = int(rng.integers(-2, in_bits))
    g, kg = rng.integers(-128, 128, n), int(rng.integers(4, 9))
    c, kc = rng.integers(-128, 128, n), int(rng.integers(2, 9))
    f = oracle(q, k, g, kg, c, kc, eps)
    amax = float(np.abs(f).max())
    ko = min(int(np.floor(np.log2((2 ** (out_bits - 1) - 1) / amax))), 40) if amax > 0 else 0
    plan = norm.plan_for(n, in_bits, k, eps, g, kg, c, kc, ko, out_bits, mode)
    y = norm.layer_norm_codes(q, 1, g, kg, c, kc, plan)
    lo, hi = -(2 ** (out_bits - 1)), 2 ** (out_bits - 1) - 1
    err = np.abs(y - np.clip(f * 2.0**ko, lo, hi))
    assert err.max() <= 1.0, (err.max(), plan)


@settings(max_examples=examples(200), deadline=None)
@given(
    n=st.integers(2, 64),
    mode=st.sampled_from(MODES),
    guard=st.integers(4, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_bound_holds_at_a_coarse_guard(n: int, mode: str, guard: int, seed: int) -> None:
    """With few fraction bits below the output step (``max_guard``), the division's rounding
    error is a sizeable part of a step; the plan's nudge still keeps trunc and floor within
    one step of torch (the half modes within 1/2 + e).

    Mutant caught: floor's nudge dropped (``acc + nudge`` -> ``acc``)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, (4, n))
    g, c = rng.integers(-8, 8, n), rng.integers(-8, 8, n)
    f = oracle(q, 3, g, 4, c, 4, 1e-5)
    ko = min(int(np.floor(np.log2(127 / max(float(np.abs(f).max()), 1e-9)))), 40)
    plan = norm.plan_for(n, 8, 3, 1e-5, g, 4, c, 4, ko, 8, mode, max_guard=guard)
    y = norm.layer_norm_codes(q, 1, g, 4, c, 4, plan)
    assert np.abs(y - np.clip(f * 2.0**ko, -128, 127)).max() <= 1.0


def test_isqrt_is_exact_floor() -> None:
    """Against Python's math.isqrt on the edges of squares up to 2**62.

    Mutant caught: isqrt without its corrections (the float root alone)."""
    import math

    roots = np.array([0, 1, 2, 3, 2**20 + 7, 2**31 - 1, 2**31], np.int64)
    v = np.concatenate([roots * roots - 1, roots * roots, roots * roots + 1])
    v = v[(v >= 0) & (v <= 2**62)]
    assert norm.isqrt(v).tolist() == [math.isqrt(int(a)) for a in v]


class _LayerNorms(nn.Module):
    """Both ConvNeXt forms: LayerNorm(C) after permute(0, 2, 3, 1) and back (LayerNorm2d),
    then a LayerNorm over the last ``dims`` dims (no affine when ``affine`` is False)."""

    def __init__(self, c: int, shape: list[int], affine: bool, eps: float):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 1)
        self.ln_c = nn.LayerNorm(c, eps=eps)
        self.ln = nn.LayerNorm(shape, elementwise_affine=affine, eps=eps)
        with torch.no_grad():
            self.ln_c.weight.uniform_(-2, 2)
            self.ln_c.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_c(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.ln(y)


@settings(max_examples=examples(10), deadline=None)
@given(
    c=st.integers(1, 6),
    h=st.integers(1, 5),
    w=st.integers(1, 5),
    dims=st.integers(1, 3),
    affine=st.booleans(),
    eps=st.sampled_from([1e-5, 1e-6, 0.1]),
)
def test_nf_matches_torch(c: int, h: int, w: int, dims: int, affine: bool, eps: float) -> None:
    """nf (float64 kernel) vs torch in float64 within 1e-5 * max(1, max |torch|)."""
    torch.manual_seed(0)
    model = _LayerNorms(c, [c, h, w][3 - dims :], affine, eps).eval().double()
    x = torch.randn(2, 3, h, w, dtype=torch.float64)
    module = nanoir.from_torch(model.float(), (x.float(),))
    (y,) = nanoir.run(module, x.numpy(), dtype=np.float64)
    expected = model.double()(x).detach().numpy()
    assert np.abs(y - expected).max() <= 1e-5 * max(1.0, float(np.abs(expected).max()))
    names = {op.name for op in module.walk()}
    assert "nf.layer_norm" in names


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.integers(2, 5),
    h=st.integers(1, 4),
    dims=st.integers(1, 3),
    bits=st.sampled_from([4, 8, 16]),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 1000),
)
def test_nq_equals_nh(c: int, h: int, dims: int, bits: int, mode: str, seed: int) -> None:
    """quantize, then lower-to-hw: the nh codes equal the nq integer algorithm's bit for bit.
    (One channel is left out: LayerNorm(1) outputs its bias, so the second LayerNorm reads
    constant rows and outputs a calibrated-zero tensor at exponent 60, which the plan refuses.)

    Mutant caught: the nh kernel reading the bias's exponent for the weight's."""
    torch.manual_seed(seed)
    model = _LayerNorms(c, [c, h, 3][3 - dims :], True, 1e-5).eval()
    x = torch.randn(2, 3, h, 3)
    module = nanoir.from_torch(model, (x,))
    calib = [torch.randn(4, 3, h, 3).numpy() for _ in range(2)]
    nanoir.quantize(module, calib, act_bits=bits, rounding=mode)
    hw = lower_to_hw(module.clone())
    assert {"nh.layer_norm"} <= {op.name for op in hw.walk()}
    for _ in range(2):
        xs = np.random.default_rng(seed).normal(size=(3, 3, h, 3)) * 2
        (yq,) = nanoir.run(module, xs)
        (yh,) = nanoir.run(hw, xs)
        assert np.array_equal(yq, yh)


def test_nh_and_its_ne_text_equal_nq_on_a_large_input() -> None:
    """1.28 million outputs in floor mode: a handful fall within the plan's nudge of a
    rounding boundary, so an nh program that loses the nudge differs from nq there. The nh
    program is also written to `.ne` and read back.

    Mutants caught: lower-to-hw writing nudge 0; the hw LayerNorm row without nudge; the nq
    kernel running torch's float op and the fake-quant instead of the integer algorithm."""
    model = nn.Sequential(nn.LayerNorm(64)).eval()
    with torch.no_grad():
        model[0].weight.uniform_(-1, 1)
        model[0].bias.uniform_(-1, 1)
    x = np.random.default_rng(0).normal(size=(20000, 64)).astype(np.float32)
    module = nanoir.from_torch(model, (torch.from_numpy(x[:4]),))
    nanoir.quantize(module, [x[:256]], act_bits=8, rounding="floor")
    hw = lower_to_hw(module.clone())
    back = import_nanoengine(export_nanoengine(hw))
    (yq,) = nanoir.run(module, x)
    assert np.array_equal(nanoir.run(hw, x)[0], yq)
    assert np.array_equal(nanoir.run(back, x)[0], yq)


def test_i64_bound_refused_naming_the_op() -> None:
    """A LayerNorm over 2**15 16-bit codes: n**2 4**15 = 2**60 leaves i64; the nq kernel
    (already during quantize's bias correction) and lower-to-hw refuse it, naming
    nf.layer_norm and the reason.

    Mutant caught: the ``2**60`` bound raised to ``2**90``."""
    n = 2**15
    model = nn.Sequential(nn.LayerNorm(n)).eval()
    x = torch.randn(1, n)
    module = nanoir.from_torch(model, (x,))
    with pytest.raises(nanoir.Error, match=r"nf\.layer_norm.*leaves i64"):
        nanoir.quantize(module, [x.numpy()], act_bits=16)
        lower_to_hw(module)


def test_streamed_equals_whole_along_another_dim() -> None:
    """LayerNorm over the last dim streams along dim 2 row by row, bit for bit."""
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.LayerNorm(5)).eval()
    x = torch.randn(1, 2, 6, 5)
    module = nanoir.from_torch(model, (x,))
    nanoir.quantize(module, [torch.randn(4, 2, 6, 5).numpy()], act_bits=8)
    hw = lower_to_hw(module)
    xs = np.random.default_rng(0).normal(size=(1, 2, 6, 5))
    (whole,) = nanoir.run(hw, xs)
    (streamed,) = nanoir.stream(hw, [xs], mem_dim=2, step=1)
    assert np.array_equal(whole, streamed)


class _NativeNorms(nn.Module):
    """``aten.native_layer_norm`` / ``aten.native_group_norm`` called directly (torch.export
    keeps them, with their mean and rstd outputs unused)."""

    def __init__(self) -> None:
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(5))
        self.gw, self.gb = nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _, _ = torch.ops.aten.native_layer_norm(x, [5], self.w, self.b, 1e-5)
        z, _, _ = torch.ops.aten.native_group_norm(y, self.gw, self.gb, 2, 4, 15, 2, 1e-5)
        return z


def test_native_forms_and_mlir_round_trips() -> None:
    """The native ATen forms import (nf vs torch in float64); the nf, nq and nh programs print
    and parse back to the same text, custom and generic.

    Mutant caught: the native_group_norm handler taking ``C`` for the group count."""
    torch.manual_seed(0)
    model = _NativeNorms().eval()
    x = torch.randn(2, 4, 3, 5)
    module = nanoir.from_torch(model, (x,), dynamic_batch=False)
    assert [op.name for op in module.walk() if op.name.endswith("_norm")] == [
        "nf.layer_norm",
        "nf.group_norm",
    ]
    (y,) = nanoir.run(module, x.numpy(), dtype=np.float64)
    expected = model.double()(x.double()).detach().numpy()
    assert np.abs(y - expected).max() <= 1e-5 * max(1.0, float(np.abs(expected).max()))
    nanoir.quantize(module, [x.numpy()])
    hw = lower_to_hw(module.clone())
    for program in (module, hw):
        text = str(program)
        assert str(nanoir.parse(text)) == text
        stream = io.StringIO()
        Printer(stream=stream, print_generic_format=True).print_op(program)
        assert str(nanoir.parse(stream.getvalue())) == text


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "{bits = 8 : i64, max_shift",
            "{bits = 9 : i64, max_shift",
            "nh.layer_norm: bits 9 do not fit the result's i8",
        ),
        (
            "normalized_dims = 1 : i64} : (tensor<?x16xi8",
            "normalized_dims = 3 : i64} : (tensor<?x16xi8",
            "nh.layer_norm: normalized_dims 3 must name static trailing dims",
        ),
        ("max_shift = ", "max_shift = 4", "nh.layer_norm: max_shift .* > 30"),
        (
            "normalized_dims = 1 : i64} : (tensor<?x16xf32>",
            "normalized_dims = 5 : i64} : (tensor<?x16xf32>",
            "nf.layer_norm: normalized_dims 5 is not in 1..2",
        ),
    ],
)
def test_verifiers_name_the_op(old: str, new: str, message: str) -> None:
    """Bad nh.layer_norm / nf.layer_norm text is refused, naming the op and the values.

    Mutant caught: nh's bits check skipped (the first case)."""
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16)).eval()
    x = torch.randn(64, 8)
    module = nanoir.from_torch(model, (x,))
    text = str(module)
    nanoir.quantize(module, [x.numpy()])
    if "xf32" not in old:
        text = str(lower_to_hw(module))
    assert old in text
    with pytest.raises(nanoir.Error, match=message):
        nanoir.parse(text.replace(old, new, 1))
