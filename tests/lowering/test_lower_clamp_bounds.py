"""A clamp at bounds that are no dyadic rational (``x.clamp(min=1e-6)`` before a ``log`` or
``sqrt``; ``clamp_min(norm, 1e-12)`` in ``F.normalize``) lowers when fake-quants alone read
it: the clamp moves after the fake-quant onto the bounds' codes
(``lowering/hw/elementwise.py``: ``clamp_after_fake_quant``).

Property test over nq programs ``fq_out(clamp(fq_in(x), lo, hi))``: random input and output
exponents, 2 to 8 bits, signed or unsigned output codes, every rounding mode, one bound or
both, bounds on no grid (and some near a code boundary): nq against an independent NumPy
oracle written here (the fake-quant of DESIGN.md), then nq == nh bit for bit. The torch
reproducers (``log``, ``sqrt`` of a clamp) compile to nh with nf == torch. A clamp at such a
bound read by something else is refused, naming it.

Mutants checked (each made the tests named fail; applied in place and restored):
- the bounds' codes computed with trunc whatever the fake-quant's rounding:
  test_clamp_then_fake_quant_equals_nq (half modes);
- the bounds' codes taken as signed for an unsigned fake-quant (``signed=True``):
  test_clamp_then_fake_quant_equals_nq;
- the bounds' codes taken at the input's exponent instead of the fake-quant's:
  test_clamp_then_fake_quant_equals_nq;
- support.py's check left refusing every non-dyadic bound:
  test_torch_clamp_before_log_and_sqrt_lowers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.hw.core import LowerToHwError
from torch import nn

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

MODES = ("trunc", "floor", "half_up", "half_even")


def fake_quant(x: np.ndarray, bits: int, exp: int, mode: str, signed: bool) -> np.ndarray:
    """DESIGN.md's fake-quant, written out (the oracle)."""
    v = x * 2.0**exp
    if mode == "trunc":
        c = np.trunc(v)
    elif mode == "floor":
        c = np.floor(v)
    elif mode == "half_up":
        c = np.floor(v + 0.5)
    else:
        c = np.round(v)  # NumPy rounds half to even
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return np.clip(c, lo, hi) / 2.0**exp


def program(shape, exp_in, bits, exp_out, mode, signed, lo, hi) -> str:
    bounds = ", ".join(
        f"{k} = {float(v)!r} : f64" for k, v in (("min", lo), ("max", hi)) if v is not None
    )
    t = f"tensor<{'x'.join(map(str, shape))}xf32>"
    sign = "" if signed else ", signed = false"
    return f"""
    func.func @main(%x: {t}) -> {t} {{
      %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<{exp_in}> : tensor<1xi8>}} : {t}
      %c = nf.clamp %xq {{{bounds}}} : {t}
      %cq = nq.fake_quant %c {{bits = {bits} : i64, exp = dense<{exp_out}> : tensor<1xi8>,
        rounding = #nq.rounding<{mode}>{sign}}} : {t}
      func.return %cq : {t}
    }}"""


@settings(max_examples=examples(40), deadline=None)
@given(
    exp_in=st.integers(0, 8),
    exp_out=st.integers(-2, 10),
    bits=st.sampled_from([2, 3, 4, 8]),
    mode=st.sampled_from(MODES),
    signed=st.booleans(),
    lo=st.one_of(st.none(), st.floats(-3, 3)),
    width=st.one_of(st.none(), st.floats(1e-3, 4)),
    seed=st.integers(0, 2**16),
)
def test_clamp_then_fake_quant_equals_nq(exp_in, exp_out, bits, mode, signed, lo, width, seed):
    hi = None if width is None else (lo if lo is not None else -1.0) + width
    if lo is None and hi is None:
        lo = 1e-6
    # bounds on no grid: a third added (1/3 is no dyadic rational)
    lo = None if lo is None else lo + 1 / 3
    hi = None if hi is None else hi + 1 / 3
    x = np.random.default_rng(seed).normal(0, 2, size=(3, 17)).astype(np.float32)
    x[0, :4] = [lo or 0.0, hi or 0.0, (lo or 0.0) - 2.0**-exp_in, (hi or 0.0) + 2.0**-exp_in]
    module = nanoir.parse(program(x.shape, exp_in, bits, exp_out, mode, signed, lo, hi))
    nq = nanoir.run(module, x)[0]
    inner = fake_quant(x.astype(np.float64), 8, exp_in, "trunc", True)
    want = fake_quant(np.clip(inner, lo, hi), bits, exp_out, mode, signed)
    assert np.array_equal(nq, want)
    nh = nanoir.run(nanoir.lower_to_hw(module.clone()), x)[0]
    assert nh.tobytes() == nq.tobytes()


def test_torch_clamp_before_log_and_sqrt_lowers() -> None:
    """``log(clamp(x, 1e-6))`` and ``sqrt(clamp(x, min=1e-12))`` as torch writes them."""

    class M(nn.Module):
        def forward(self, x):
            return torch.log(x.clamp(min=1e-6)) + torch.sqrt(x.clamp(1e-12, 3.3))

    x = np.abs(np.random.default_rng(1).normal(size=(4, 8, 16))).astype(np.float32)
    x[0, 0, :3] = 0.0
    module = nanoir.from_torch(M(), (torch.from_numpy(x),))
    with torch.no_grad():
        want = M()(torch.from_numpy(x).double()).numpy()
    np.testing.assert_allclose(nanoir.run(module, x)[0], want, rtol=1e-5, atol=1e-5)
    nanoir.quantize(module, [x], progress=False)
    nq = nanoir.run(module, x)[0]
    nh = nanoir.run(nanoir.lower_to_hw(module.clone()), x)[0]
    assert nh.tobytes() == nq.tobytes()


def test_clamp_at_a_non_dyadic_bound_read_by_an_op_is_refused() -> None:
    """Read by an add (no fake-quant between), the clamped value is on no grid: refused,
    naming the clamp and the way out."""
    t = "tensor<2x4xf32>"
    module = nanoir.parse(f"""
    func.func @main(%x: {t}) -> {t} {{
      %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : {t}
      %c = nf.clamp %xq {{min = 0.1 : f64}} : {t}
      %s = nf.add %c, %xq : ({t}, {t}) -> {t}
      %sq = nq.fake_quant %s {{bits = 8 : i64, exp = dense<3> : tensor<1xi8>}} : {t}
      func.return %sq : {t}
    }}""")
    with pytest.raises(LowerToHwError, match=r"'nf.clamp'.*not dyadic.*fake-quants alone"):
        nanoir.lower_to_hw(module)
