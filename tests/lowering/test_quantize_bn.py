"""Lone batch norms of programs nanoir quantizes always lower (issue 20, section 3).

A BN fold-bn cannot fold (after a concat: DenseNet's pre-activation BN-ReLU-conv) was lowered
by searching an integer affine reproducing the nq kernel's float64 ``x * A + B``; with random
statistics it often had none (the input code equal to the quantized mean gives exactly the
quantized bias, on the output grid, where float64's rounding decides). quantize now makes the
affine dyadic (``lowering/quantize/batch_norm.py``). The oracles: the nq program run in float64
(NumPy) against the nh program (nq == nh bit for bit), torch's float BN (the snapped affine
within the parameters' own quantization of ``g / sqrt(v + eps)`` and ``b - m A``, and the
program's output SQNR against torch), and the refusal of lower-to-hw on the same program left
as it was.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy, numpy_to_dense
from nanoir.lowering.hw.channel_wise import exact_affine
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.lowering.quantize import dyadic_affine, quantize
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import kernels, quant
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.lone_bn import (
    ConcatBnNet,
    LinearFlattenBnNet,
    random_statistics,
    set_batch_norm,
)
from nanoir.testing.programs import examples

C, H = 8, 6


def _net(seed: int, gain: float = 16.0) -> ConcatBnNet:
    torch.manual_seed(seed)
    return ConcatBnNet(C, gain).eval()


def _set_bn(model: ConcatBnNet, stats: np.ndarray) -> ConcatBnNet:
    return set_batch_norm(model, stats)


def _random_stats(rng: np.random.Generator) -> np.ndarray:
    return random_statistics(rng, 2 * C)


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - got) ** 2), 1e-300)))


def _check_bn_constants(nq: ModuleOp, model: ConcatBnNet) -> None:
    """The BN's snapped affine is torch's within its parameters' 8-bit quantization."""
    bn = next(op for op in nq.walk() if isinstance(op, nf.BatchNormOp))
    p = [dense_to_numpy(v.owner.value).astype(np.float64) for v in bn.operands[1:]]
    a = p[0] / np.sqrt(p[3] + bn.epsilon.value.data)
    b = p[1] - p[2] * a
    t = model.bn
    with torch.no_grad():
        a_t = t.weight.double() / torch.sqrt(t.running_var.double() + t.eps)
        a_ref = a_t.numpy()
        b_ref = (t.bias.double() - t.running_mean.double() * a_t).numpy()
    assert np.abs(a - a_ref).max() <= 2**-5 * np.abs(a_ref).max()
    assert np.abs(b - b_ref).max() <= 2**-4 * np.abs(b_ref).max()


def test_concat_bn_relu_conv_lowers() -> None:
    """The plain-torch net that lower-to-hw refused (seed 0: "has no integer affine within i32
    that reproduces the float64 rounding of its fake-quant on channel 1") compiles to nh,
    nq == nh bit for bit, and the output is torch's within 8-bit quantization. Mutants seen to
    fail it: ``make_dyadic`` a no-op (the BN's parameters are still fake-quants; lower-to-hw
    refuses it, as the test below shows); ``dyadic_affine`` picking the coarsest exponent that
    fits rather than the finest (M = 0: the BN's constants are far from torch's)."""
    rng = np.random.default_rng(0)
    model = _set_bn(_net(0), _random_stats(rng))
    x = torch.randn(2, 3, H, H)
    calibration = [(torch.randn(4, 3, H, H),)]
    nq = nanoir.compile_model(model, (x,), calibration, stop="nq")
    _check_bn_constants(nq, model)
    hw = lower_to_hw(nq.clone())
    data = rng.standard_normal((3, 3, H, H))
    (want,) = run(nq, data, dtype=np.float64)
    (got,) = run(hw, data)
    assert np.array_equal(got, want)
    with torch.no_grad():
        ref = model(torch.from_numpy(data).float()).double().numpy()
    assert _sqnr(ref, want) > 20


@functools.cache
def _folded() -> ModuleOp:
    """The net's folded nf program (one torch.export for every example)."""
    model = _net(1)
    return nanoir.compile_model(model, (torch.randn(2, 3, H, H),), stop="folded")


def _with_stats(stats: np.ndarray) -> ModuleOp:
    """The folded program with the BN's constants replaced by ``stats``."""
    module = _folded().clone()
    names = {"bn.running_mean": 0, "bn.running_var": 1, "bn.weight": 2, "bn.bias": 3}
    for op in module.walk():
        if isinstance(op, nf.ConstantOp) and op.sym_name is not None:
            i = names.get(op.sym_name.data)
            if i is not None:
                op.properties["value"] = numpy_to_dense(
                    stats[i].astype(np.float32), op.value.type.element_type
                )
    return module


@settings(
    max_examples=examples(8),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    rounding=st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    act_bits=st.sampled_from((4, 8)),
    mean_scale=st.sampled_from((0.0, 0.5, 4.0)),
)
def test_random_bn_statistics_lower_exactly(
    seed: int, rounding: str, act_bits: int, mean_scale: float
) -> None:
    """Random BN statistics (means 0, 0.5 or 4 times N(0, 2), variances 0.5-3.5), every rounding
    mode, 4/8-bit activations: the program quantize gives lowers and
    nq == nh bit for bit. Mutants seen to fail it: ``make_dyadic`` a no-op (refusals);
    ``input_grid`` ignoring the concat's alignment (bits of the widest part only: the
    multiplier leaves no room for the 12-bit aligned input, "no integer affine")."""
    rng = np.random.default_rng(seed)
    stats = _random_stats(rng)
    stats[0] *= mean_scale
    module = _with_stats(stats)
    batches = [rng.standard_normal((2, 3, H, H))]
    quantize(module, batches, rounding=rounding, act_bits=act_bits, progress=False)
    hw = lower_to_hw(module.clone())
    data = rng.standard_normal((2, 3, H, H))
    (want,) = run(module, data, dtype=np.float64)
    (got,) = run(hw, data)
    assert np.array_equal(got, want)


def test_without_the_rewrite_the_search_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The case is real: the same program quantized with the BN left as it was is refused by
    lower-to-hw (so the tests above would fail without ``make_dyadic``)."""
    driver = sys.modules[quantize.__module__]  # where quantize looks make_dyadic up
    monkeypatch.setattr(driver, "make_dyadic", lambda func, fixed: 0)
    rng = np.random.default_rng(0)
    model = _set_bn(_net(0), _random_stats(rng))
    x = torch.randn(2, 3, H, H)
    nq = nanoir.compile_model(model, (x,), [(torch.randn(4, 3, H, H),)], stop="nq")
    with pytest.raises(LowerToHwError, match="no integer affine"):
        lower_to_hw(nq)


def test_dyadic_affine_is_the_finest_that_fits() -> None:
    """``dyadic_affine`` against a brute force written here: for each channel the largest
    ``e`` with ``round(a 2**e)`` of at most ``min(31 - bits, 24)`` signed bits and
    ``|c M + N| <= 2**31 - 1`` over the codes. Mutant seen to fail it: the coarsest such
    ``e`` rather than the finest."""
    rng = np.random.default_rng(5)
    a = rng.uniform(-3, 3, 12) * 2.0 ** rng.integers(-8, 8, 12)
    b = rng.standard_normal(12) * 4
    x_exps = rng.integers(-4, 10, 12)
    for bits in (4, 8, 11, 16):
        e, m, n = dyadic_affine(a, b, x_exps, bits)
        for ch in range(12):
            best = None
            for k in range(-32, 63):
                mm = round(a[ch] * 2.0**k)
                nn_ = round(b[ch] * 2.0 ** (int(x_exps[ch]) + k))
                if abs(nn_) >= 2**24:
                    s = abs(nn_).bit_length() - 24
                    nn_ = round(nn_ / 2**s) * 2**s
                mb = max(abs(mm).bit_length() + 1, 2)
                lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
                worst = max(abs(lo * mm + nn_), abs(hi * mm + nn_))
                if mb <= min(31 - bits, 24) and worst <= 2**31 - 1:
                    best = (k, mm, nn_)
            assert best is not None
            assert (int(e[ch]), int(m[ch]), int(n[ch])) == best


@settings(max_examples=examples(40), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    x_bits=st.sampled_from((2, 4, 8, 11)),
    out_bits=st.sampled_from((4, 8)),
    rounding=st.sampled_from(tuple(RoundingMode)),
)
def test_exact_affine_equals_the_nq_kernel(
    seed: int, x_bits: int, out_bits: int, rounding: RoundingMode
) -> None:
    """``exact_affine`` on dyadic parameters (``M 2**-e`` and ``N 2**-(x + f)``, ``f <= e``)
    gives an affine whose requant equals the nq kernel (``kernels.batch_norm`` in float64, then
    the fake-quant) on every input code; on parameters that are not dyadic (``g / sqrt(v)`` of a
    random ``v``) it gives None. Mutant seen to fail it: ``need`` ignoring the bias's grid
    (no affine found for a dyadic bias)."""
    rng = np.random.default_rng(seed)
    c = 6
    e_a = rng.integers(0, 12, c)
    x_exps = rng.integers(-2, 8, c)
    scale = rng.integers(-(2**8), 2**8, c) * 2.0**-e_a
    # (the bias on a grid no finer than the products': an affine within i32 exists)
    bias = rng.integers(-(2**10), 2**10, c) * 2.0 ** -(x_exps + rng.integers(0, e_a + 1))
    out_exps = rng.integers(-4, 8, c)
    zeros, ones = np.zeros(c), np.ones(c)
    found = exact_affine(scale, bias, x_exps, x_bits)
    assert found is not None
    codes = np.arange(quant.qmin(x_bits), quant.qmax(x_bits) + 1)
    reals = np.ldexp(codes[None, None, :].astype(np.float64), -x_exps[None, :, None])
    y = kernels.batch_norm(reals, scale, bias, zeros, ones, 0.0)[0]
    want = quant.quantize_to_int(y, out_bits, out_exps[:, None], rounding)
    for ch, (e, m, n) in enumerate(found):
        acc = codes.astype(np.int64) * m + n
        got = quant.requant(acc, int(x_exps[ch]) + e - int(out_exps[ch]), out_bits, rounding)
        assert np.array_equal(got, want[ch])
    var = rng.uniform(0.5, 2.0, c)
    assert exact_affine(ones / np.sqrt(var), zeros, x_exps, x_bits) is None


def test_wide_concat_input_lowers() -> None:
    """A concat whose parts are 12 steps apart gives the BN 20-bit input codes: lower-to-hw
    checked at most 16-bit inputs code by code and refused ("has 20-bit input codes"); the
    snapped affine needs no search, lowers, and nq == nh bit for bit. Mutant seen to fail it:
    ``exact_affine`` returning None (the refusal)."""
    model = _set_bn(_net(3, gain=4096.0), _random_stats(np.random.default_rng(3)))
    x = torch.randn(2, 3, H, H)
    nq = nanoir.compile_model(model, (x,), [(torch.randn(4, 3, H, H),)], stop="nq")
    hw = lower_to_hw(nq.clone())
    data = np.random.default_rng(4).standard_normal((3, 3, H, H))
    (want,) = run(nq, data, dtype=np.float64)
    (got,) = run(hw, data)
    assert np.array_equal(got, want)


def test_a_bn_after_a_reshape_is_made_dyadic() -> None:
    """The BN reads its per-tensor fake-quant through a reshape (bench_reach's defect 7: LeViT
    was refused, ``no integer affine ... on channel 104``, on a float64 tie that needs its
    data): quantize snaps it like a BN after a fake-quant (mean 0, var 1, eps 0), lower-to-hw
    takes the exact affine, and nq == nh. Mutant seen to fail it: ``input_grid`` returning None
    for anything but a fake-quant or a concat (the BN keeps torch's statistics)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = set_batch_norm(LinearFlattenBnNet(), random_statistics(rng, 8)).eval()
    x = rng.standard_normal((2, 5, 6)).astype(np.float32)
    nq = nanoir.from_torch(model, (torch.from_numpy(x),))
    quantize(nq, [x])
    (bn,) = [op for op in nq.walk() if isinstance(op, nf.BatchNormOp)]
    assert bn.epsilon.value.data == 0
    consts = [
        dense_to_numpy(op.value)
        for op in nq.walk()
        if isinstance(op, nf.ConstantOp) and op.result in bn.operands
    ]
    assert any(np.all(c == 0) for c in consts) and any(np.all(c == 1) for c in consts)
    hw = lower_to_hw(nq.clone())
    x2 = rng.standard_normal((3, 5, 6)).astype(np.float32)
    np.testing.assert_array_equal(run(nq, x2)[0], run(hw, x2)[0])
