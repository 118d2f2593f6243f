"""Comparisons, logic and selection (issue 32 §3): ``nf.compare`` / ``nf.where`` against torch,
the integer thresholds of a comparison with a constant against a brute-force oracle, and
nq == nh bit for bit on programs of comparisons, masks and fills (``masked_fill`` by ``-inf``
and ``-1e9``, as padding masks do).

Mutants checked (each made the tests named fail; applied in place and restored):
- ``thresholds`` rounding ``gt`` up (``ceil`` for ``floor``): test_thresholds_decide_as_the_values;
- the NaN rule dropped (NaN compared as a code): test_thresholds_decide_as_the_values;
- ``LowerWhere`` selecting before the output's requant without it (values aligned only):
  test_masked_fill_by_minus_inf_lowers (the alignment to a ``-1e9`` fill passes i32);
- ``nf.where``'s kernel picking its values the other way round: test_nf_matches_torch.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.lowering.hw.select import thresholds
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.lowering.quantize import QuantRule
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

PREDICATES = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


@settings(max_examples=examples(200), deadline=None)
@given(
    predicate=st.sampled_from(sorted(PREDICATES)),
    c=st.one_of(
        st.floats(-40, 40, allow_nan=False, width=32),
        st.sampled_from([float("inf"), float("-inf"), float("nan"), 0.0, 0.25, -1e9]),
    ),
    exp=st.integers(-3, 8),
    bits=st.sampled_from((1, 2, 4, 8)),
)
def test_thresholds_decide_as_the_values(predicate: str, c: float, exp: int, bits: int) -> None:
    """For every code ``q`` of ``bits`` at ``exp``: ``q <p> t`` equals ``q 2**-exp <p> c``
    decided exactly (Fractions; NaN compares false, ``ne`` true)."""
    max_abs = 1 if bits == 1 else 2 ** (bits - 1)
    (t,) = thresholds(predicate, np.array(c), np.array([exp]), max_abs).tolist()
    for q in range(-max_abs, max_abs + 1):
        if c != c:  # NaN
            want = predicate == "ne"
        elif c in (float("inf"), float("-inf")):
            want = PREDICATES[predicate](float(q), c)
        else:
            want = PREDICATES[predicate](
                Fraction(q, 2**exp) if exp >= 0 else Fraction(q * 2**-exp), Fraction(c)
            )
        assert PREDICATES[predicate](q, t) == want, (q, t)


class Masks(nn.Module):
    """Comparisons with tensors and numbers, logic, where and masked fills."""

    def __init__(self, fill: float = float("-inf")):
        super().__init__()
        self.fill = fill
        self.conv = nn.Conv1d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.conv(x)
        pad = x.eq(0) | (y > 0.3)
        scores = h.masked_fill(pad, self.fill).softmax(-1)
        gate = torch.where(h > 0.1, h, 0.5 * h)
        pick = torch.where(x < y, x, y)
        logic = (~(x >= 0.2) ^ (y <= -0.1)).float() * y
        finite = torch.isfinite(h).float() + torch.isinf(x).float()
        return scores, gate, pick, logic, finite


def _inputs(seed: int, n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3, 8)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = 0.0
    return x, rng.normal(size=(n, 3, 8)).astype(np.float32)


def test_nf_matches_torch() -> None:
    """The imported program (dynamic batch) equals torch, bools as 0/1."""
    torch.manual_seed(0)
    model = Masks().eval()
    x, y = _inputs(0)
    module = nanoir.from_torch(model, (torch.tensor(x), torch.tensor(y)))
    assert any(isinstance(op, nf.WhereOp) for op in module.walk())
    for n in (1, 4):
        x, y = _inputs(n, n)
        got = run(module, x, y)
        with torch.no_grad():
            want = model(torch.tensor(x), torch.tensor(y))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fill", [float("-inf"), -1e9, 0.3])
@settings(max_examples=examples(2), deadline=None)
@given(seed=st.integers(0, 2**16))
def test_masked_fill_by_minus_inf_lowers(fill: float, seed: int) -> None:
    """Quantized and lowered, nh == nq bit for bit on new inputs; a fill far outside the
    output's grid (``-inf``, ``-1e9``) or not dyadic (0.3) needs no alignment."""
    torch.manual_seed(seed % 97)
    model = Masks(fill).eval()
    x, y = _inputs(seed)
    module = nanoir.from_torch(model, (torch.tensor(x), torch.tensor(y)))
    nanoir.quantize(module, [_inputs(seed + 1, 4)], progress=False)
    hw = lower_to_hw(module.clone())
    for s in (seed + 2, seed + 3):
        a, b = _inputs(s, 2)
        for q, h in zip(run(module, a, b), run(hw, a, b)):
            assert q.tobytes() == h.tobytes()


def test_a_wide_pick_with_no_fake_quant_is_refused() -> None:
    """With no fake-quant reading its result alone (a rule skips it), ``nf.where`` aligns its
    two values: a ``-1e9`` fill beside 8-bit codes would need 36 bits, refused naming the
    op (with the fake-quant, the fill is rounded onto its grid first and lowers)."""

    class Fill(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            w = torch.where(x > 0, x, -1e9)
            return w, w * 2

    x = torch.randn(2, 4)
    module = nanoir.from_torch(Fill(), (x,))
    nanoir.quantize(module, [x.numpy()], rules=[QuantRule("^where$", skip=True)], progress=False)
    with pytest.raises(LowerToHwError, match="'nf.where'.*more than i32"):
        lower_to_hw(module)
