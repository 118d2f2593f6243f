"""Integer softmax through the integer ONNX writer's float64 form (exact: every integer of the
algorithm stays below ``2**52``) against the NumPy executor, bit for bit: input widths up to
16 bits (the combined exp table of up to 65,536 entries), output exponents either side of 0
(the denominator scaled, or the numerator), rows from 1 to past 6,000 elements, codes at the
extremes (equal rows, one far maximum, the type's ends), every rounding mode. The masked
form has its own tests (test_onnx_integer_masked_softmax).

Mutants seen to fail it (private copy): ``Floor`` of the quotient dropped (``Cast`` truncates
the same non-negative values, so ``Round`` was the mutant: it rounds half the codes up); the
numerator without its factor 2 (``num2 = e 2**k``); the combined table built one distance
off (``exp_values`` of ``arange(1, n + 1)``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw

import nanoir
from nanoir.testing.programs import examples

pytest.importorskip("onnxruntime")

MODES = ("trunc", "floor", "half_up", "half_even")


def _program(row: int, bits: int, k_in: int, out_bits: int, k_out: int, mode: str) -> str:
    q = "{bits = %d : i64, exp = dense<%d> : tensor<1xi8>, rounding = #nq.rounding<%s>}"
    t = f"tensor<?x{row}xf32>"
    return f"""func.func @main(%x: {t}) -> {t} {{
  %xq = nq.fake_quant %x {q % (bits, k_in, mode)} : {t}
  %y = nf.softmax %xq {{axis = -1 : i64}} : ({t}) -> {t}
  %yq = nq.fake_quant %y {q % (out_bits, k_out, mode)} : {t}
  func.return %yq : {t}
}}"""


@settings(max_examples=examples(30), deadline=None)
@given(
    row=st.sampled_from([1, 2, 7, 64, 6625]),
    bits=st.sampled_from([2, 4, 8, 12, 16]),
    k_in=st.integers(-2, 14),
    out_bits=st.sampled_from([2, 8, 16]),
    k_out=st.integers(-6, 17),
    mode=st.sampled_from(MODES),
    kind=st.sampled_from(["normal", "equal", "one_far", "ends"]),
    seed=st.integers(0, 2**16),
)
def test_softmax_equals_numpy(
    row: int, bits: int, k_in: int, out_bits: int, k_out: int, mode: str, kind: str, seed: int
) -> None:
    text = _program(row, bits, k_in, out_bits, k_out, mode)
    try:
        hw = lower_to_hw(nanoir.parse(text))
    except nanoir.Error as e:  # an exponent pair past 2**52: refused by name, not run
        assert "2**52" in str(e)
        event("refused")
        return
    event(f"ran, row {row}")
    rng = np.random.default_rng(seed)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if kind == "normal":
        codes = rng.normal(0, 2 ** (bits - 2), (3, row))
    elif kind == "equal":
        codes = np.full((3, row), rng.integers(lo, hi + 1))
    elif kind == "one_far":
        codes = np.full((3, row), lo)
        codes[:, rng.integers(0, row)] = hi
    else:
        codes = rng.choice([lo, hi, 0], (3, row))
    x = np.ldexp(np.clip(np.rint(codes), lo, hi), -k_in).astype(np.float32)
    (want,) = nanoir.run(hw, x, raw=True)
    (got,) = nanoir.run(hw, x, raw=True, backend="onnxruntime")
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
