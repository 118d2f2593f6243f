"""The ``mse`` search skips candidates that cannot win (issue 30 §8): bounds from the first
calibration pass (``octave_sums``, ``error_bounds``, ``surviving_candidates`` in
``lowering/quantize/calibration.py``) drop a candidate only when its error is sure to exceed
another's, and the kept candidates' errors are computed as before, so the chosen exponents are
the ones the full search chooses.

The oracle is a brute-force NumPy fake-quant written here (scale by ``2**k``, round by the mode,
clip to the codes, scale back), summed over the batches, least error first on ties.

Mutants seen to fail it (applied in place and restored):
- the saturated octaves starting one octave lower (``first_saturated`` minus 1: the octave
  that straddles the bound counted as saturated): test_dropped_candidates_cannot_win;
- the upper bound a quarter step squared per value for every mode (true only to nearest):
  test_dropped_candidates_cannot_win;
- the code-0 values counted for floor too (a small negative value floors to -1, not 0):
  test_dropped_candidates_cannot_win;
- ``surviving_candidates`` keeping every candidate: test_bounds_drop_candidates (and the
  benchmark's speed-up with it).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanoir.lowering.quantize import (
    full_mse_search,
    mse_candidates,
    octave_sums,
    surviving_candidates,
)
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn

import nanoir
from nanoir.testing.programs import examples

MODES = ("trunc", "floor", "half_up", "half_even")


def oracle_error(batches: list[np.ndarray], bits: int, k: int, mode: str, signed: bool) -> float:
    """``sum((fake_quant(x) - x)**2)`` over the batches, fake_quant written out."""
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    total = 0.0
    for x in batches:
        y = x * 2.0**k
        if mode == "trunc":
            codes = np.trunc(y)
        elif mode == "floor":
            codes = np.floor(y)
        elif mode == "half_even":
            codes = np.rint(y)
        else:
            codes = np.floor(y) + ((y - np.floor(y)) >= 0.5)
        q = np.clip(codes, lo, hi) * 2.0**-k
        total += float(np.sum((q - x) ** 2))
    return total


@st.composite
def tensors(draw: st.DrawFn) -> tuple[list[np.ndarray], int, str, bool]:
    bits = draw(st.sampled_from((2, 3, 4, 8, 16)))
    mode = draw(st.sampled_from(MODES))
    signed = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    scale = draw(st.integers(-30, 30))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(("normal", "relu", "grid", "heavy", "zeros")))
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        x = rng.standard_normal(draw(st.integers(1, 200))) * 2.0**scale
        if kind == "relu":
            x = np.maximum(x, 0)
        elif kind == "grid":  # on a coarse grid: many candidates err by 0 in their middle
            x = np.round(x * 2.0 ** (2 - scale)) * 2.0 ** (scale - 2)
        elif kind == "heavy":
            x = x * np.exp(rng.standard_normal(x.size) * 2)
        elif kind == "zeros":
            x[: x.size // 2] = 0.0
        batches.append(x)
    return batches, bits, mode, signed


def _candidates(batches: list[np.ndarray], bits: int, signed: bool) -> np.ndarray:
    values = [np.abs(x) if signed else np.maximum(x, 0) for x in batches]
    absmax = np.array([max(float(v.max(initial=0.0)) for v in values)])
    return mse_candidates(absmax, absmax, bits, signed=signed)


@settings(max_examples=examples(100), deadline=None)
@given(tensors())
@example(([np.array([0.3, -0.01, -0.002, 0.25])], 4, "floor", True))
@example(([np.array([2.0, -1e-6, -1e-6, -1e-6, -1e-6])], 2, "floor", True))  # -1e-6 floors to -1
def test_dropped_candidates_cannot_win(case: tuple[list[np.ndarray], int, str, bool]) -> None:
    """Every dropped candidate errs more than the least error (strictly: a tie is kept), so the
    least-error exponent, earliest on ties, is among the kept, as the full search picks it."""
    batches, bits, mode, signed = case
    candidates = _candidates(batches, bits, signed)
    sums = sum(octave_sums(x) for x in batches)
    keep = surviving_candidates(sums, candidates, bits, RoundingMode(mode), signed=signed)
    errors = np.array([oracle_error(batches, bits, int(k), mode, signed) for k in candidates[:, 0]])
    best = int(np.argmin(errors))  # the earliest of the least
    assert keep[best], (candidates[:, 0], errors, keep)
    assert np.all(errors[~keep] > errors[best]), (candidates[:, 0], errors, keep)
    kept = np.flatnonzero(keep)
    assert kept[np.argmin(errors[kept])] == best


def test_bounds_drop_candidates() -> None:
    """On an 8-bit activation-like tensor the bounds leave few candidates (else they buy
    nothing): of the 10, the finest (saturating most) go."""
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal(20000), 0) * 3.0
    candidates = _candidates([x], 8, False)
    keep = surviving_candidates(octave_sums(x), candidates, 8, RoundingMode.TRUNC, signed=False)
    assert keep.size == 10 and keep.sum() <= 6, keep


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)) * 1.5) + torch.tanh(x[:, :1])


@pytest.mark.parametrize("rounding", ["trunc", "half_even"])
def test_quantize_gives_the_same_program_with_and_without_bounds(rounding: str) -> None:
    """The whole program (every exponent) is the same as the full search's."""
    torch.manual_seed(0)
    model = Net().eval()
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    programs = []
    for search in (contextlib.nullcontext, full_mse_search):
        with search():
            module = nanoir.from_torch(model, torch.from_numpy(batches[0]))
            nanoir.quantize(module, batches, rounding=rounding, progress=False)
        programs.append(str(module))
    assert programs[0] == programs[1]


@settings(max_examples=examples(40))
@given(
    st.sampled_from((np.float32, np.float64)),
    st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False, width=32),
            st.sampled_from((0.0, -0.0, 1e-45, -3e-39, 5e-324, 0.5, -1.0, 1.0)),
        ),
        min_size=1,
        max_size=60,
    ),
)
def test_octave_sums_equal_a_per_value_count(dtype: type, values: list[float]) -> None:
    """``octave_sums`` against a loop over the values with ``math.frexp``: per sign (zero and
    -0.0 non-negative) and octave (zeros in bin 0), the count, ``Σ|x|`` and ``Σx²`` in float64
    (a float32 value's square is exact there; the error bounds take the sums as exact). Kills:
    zeros left in the octave ``frexp`` gives them (e = 0); -0.0 counted as negative; the
    octave index off by one; a float32 input squared in float32; subnormals binned with the
    zeros; a negative bin's sum of ``x`` not negated."""
    import math

    from nanoir.lowering.quantize import OCTAVE_BASE, OCTAVES

    x = np.array(values, dtype=dtype).reshape(-1, 1)
    want = np.zeros((3, 2, OCTAVES))
    for v in x.reshape(-1):
        e = OCTAVE_BASE if v == 0 else math.frexp(float(v))[1]
        side, a = int(v < 0), abs(v)
        want[:, side, e - OCTAVE_BASE] += (1.0, float(a), float(a) * float(a))
    got = octave_sums(x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-12, atol=0)
