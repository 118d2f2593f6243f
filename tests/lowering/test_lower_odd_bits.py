"""A fake-quant to a width nh has no container of (3, 5, 6, 7 bits: nq.fake_quant takes any
1..MAX_BITS) lowers to ``nh.requant`` into the next container and a clamp to its own
bounds (``HwLowering.requant``): before, the requant saturated at the container's width (a
3-bit code up to 7), and nq != nh.

Property test: ``fq_out(relu(fq_in(x)))`` and ``fq_out(fq_in(x) + c)`` with random widths
(2..8 and 12), signedness, exponents and rounding modes: nq equals an independent NumPy
fake-quant written here, and nq == nh bit for bit.

Mutant checked (applied in place and restored): the clamp after the requant dropped:
test_any_width_fake_quant_equals_nq.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nanoir
from nanoir.testing.programs import examples


def fake_quant(x: np.ndarray, bits: int, exp: int, mode: str, signed: bool) -> np.ndarray:
    v = x * 2.0**exp
    c = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_up": lambda u: np.floor(u + 0.5),
        "half_even": np.round,
    }[mode](v)
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return np.clip(c, lo, hi) / 2.0**exp


@settings(max_examples=examples(40), deadline=None)
@given(
    bits=st.sampled_from([2, 3, 5, 6, 7, 8, 12]),
    signed=st.booleans(),
    exp_in=st.integers(0, 6),
    exp_out=st.integers(-2, 8),
    mode=st.sampled_from(["trunc", "floor", "half_up", "half_even"]),
    relu=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_width_fake_quant_equals_nq(bits, signed, exp_in, exp_out, mode, relu, seed):
    t = "tensor<2x19xf32>"
    body = f"%y = nf.relu %xq : {t}" if relu else f"%y = nf.add %xq, %xq : ({t}, {t}) -> {t}"
    sign = "" if signed else ", signed = false"
    module = nanoir.parse(f"""
    func.func @main(%x: {t}) -> {t} {{
      %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<{exp_in}> : tensor<1xi8>}} : {t}
      {body}
      %yq = nq.fake_quant %y {{bits = {bits} : i64, exp = dense<{exp_out}> : tensor<1xi8>,
        rounding = #nq.rounding<{mode}>{sign}}} : {t}
      func.return %yq : {t}
    }}""")
    x = np.random.default_rng(seed).normal(0, 8, size=(2, 19)).astype(np.float32)
    inner = fake_quant(x.astype(np.float64), 8, exp_in, "trunc", True)
    want = fake_quant(np.maximum(inner, 0) if relu else 2 * inner, bits, exp_out, mode, signed)
    nq = nanoir.run(module, x)[0]
    assert np.array_equal(nq, want)
    nh = nanoir.run(nanoir.lower_to_hw(module.clone()), x)[0]
    assert nh.tobytes() == nq.tobytes()
