"""LayerNorm and GroupNorm's integer algorithm against torch's float64 ops, written here (not
``nanoir.runtime.numerics.norm``, which nq and nh both run, so nq == nh cannot see it).

The programs quantize the input, weight and bias per tensor (values already on their grids,
so the fake-quants change nothing), run LayerNorm or GroupNorm, and requantize the result;
nq (float64) and nh (integers) must be equal, and both within the stated bound of torch's
``layer_norm`` / ``group_norm`` in float64 on the same real values, in output steps, after
clipping torch's value to the output grid's range (saturation is 1-Lipschitz):

- trunc and floor: below one step (the plan's nudge keeps the algorithm's error and the
  rounding's from adding up);
- half_up and half_even: ``1/2 + e``, with ``e = max|w| 2**k_out (isqrt(n - 1) + 1) 2**-27 +
  max|g| 2**-(P + 1)`` the algorithm's own error (``g`` the weight codes, ``P`` the plan's
  guard bits: nanoir/runtime/numerics/norm.py's docstring derives it; the plan keeps it below
  1/2, so no output is a step away).

At input widths 2, 4, 8 and 16 bits, output widths 2, 4, 8 and 16 bits, every rounding mode,
rows of 1 (a constant row: the output is the bias), 7 and 48 codes, and weight and bias
exponents far apart.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

import nanoir

MODES = ("trunc", "floor", "half_up", "half_even")


def fits(top: float, bits: int) -> int:
    """The finest exponent whose ``bits``-bit grid holds ``±top``."""
    return int(np.floor(np.log2((2 ** (bits - 1) - 1) / max(top, 1e-9))))


def fmt(a: np.ndarray) -> str:
    return np.array2string(
        np.asarray(a, np.float64), separator=", ", threshold=10**6, floatmode="unique"
    ).replace("\n", "")


def program(kind, shape, groups, grids, w, b, rounding, eps) -> str:
    """``x -> fake_quant -> layer_norm(last dim) | group_norm -> fake_quant``."""
    t = f"tensor<{'x'.join(map(str, shape))}xf32>"
    ta = f"tensor<{w.size}xf32>"

    def fq(src, dst, ty, grid, mode="trunc"):
        return (
            f"  %{dst} = nq.fake_quant %{src} {{bits = {grid[0]} : i64, exp = dense<{grid[1]}> : "
            f"tensor<1xi8>, rounding = #nq.rounding<{mode}>}} : {ty}\n"
        )

    attrs = "normalized_dims = 1 : i64" if kind == "layer" else f"groups = {groups} : i64"
    return (
        f"func.func @main(%x: {t}) -> {t} {{\n"
        + fq("x", "xq", t, grids["x"])
        + f"  %w = nf.constant dense<{fmt(w)}> : {ta}\n"
        + fq("w", "wq", ta, grids["w"])
        + f"  %b = nf.constant dense<{fmt(b)}> : {ta}\n"
        + fq("b", "bq", ta, grids["b"])
        + f"  %y = nf.{kind}_norm %xq, %wq, %bq {{{attrs}, epsilon = {eps:.6e} : f64}} : "
        f"({t}, {ta}, {ta}) -> {t}\n"
        + fq("y", "yq", t, grids["y"], rounding)
        + f"  func.return %yq : {t}\n}}\n"
    )


def on_grid(values: np.ndarray, bits: int, exp: int) -> np.ndarray:
    top = 2 ** (bits - 1) - 1
    return np.clip(np.round(values * 2.0**exp), -top - 1, top) * 2.0**-exp


def torch_norm(kind, x, w, b, groups, eps):
    xt = torch.tensor(x, dtype=torch.float64)
    wt, bt = torch.tensor(w, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    if kind == "layer":
        return torch.nn.functional.layer_norm(xt, (x.shape[-1],), wt, bt, eps).numpy()
    return torch.nn.functional.group_norm(xt, groups, wt, bt, eps).numpy()


def make_case(seed, kind, n, in_bits, out_bits, eps):
    """Input ``[rows, C, L]`` on its grid; a weight of magnitude 1/2..8 and a bias of 1/1000..4
    (so that their exponents lie far apart, either way round); the output grid fitted to
    torch's result."""
    rng = np.random.default_rng(seed)
    if kind == "layer":
        shape, groups, channels = (6, 3, n), 1, n
    else:
        channels = 2 * max(n // 4, 1)
        shape, groups = (6, channels, max(n // channels, 1)), 2
    kx = fits(3.0, in_bits)
    x = on_grid(rng.standard_normal(shape) * rng.uniform(0.2, 1.5, (shape[0], 1, 1)), in_bits, kx)
    x[0] = x[0].flat[0]  # a constant row (or group): its output is the bias
    wscale, bscale = 2.0 ** rng.uniform(-1, 3), 2.0 ** rng.uniform(-10, 2)
    if rng.integers(2):
        wscale, bscale = bscale * 8, wscale / 4  # the other way round
    w_raw = rng.uniform(-1, 1, channels) * wscale
    b_raw = rng.uniform(-1, 1, channels) * bscale
    kw, kb = fits(np.abs(w_raw).max(), 8), fits(np.abs(b_raw).max(), 8)
    w, b = on_grid(w_raw, 8, kw), on_grid(b_raw, 8, kb)
    ref = torch_norm(kind, x, w, b, groups, eps)
    ky = fits(float(np.abs(ref).max()), out_bits)
    grids = {"x": (in_bits, kx), "w": (8, kw), "b": (8, kb), "y": (out_bits, ky)}
    return x, w, b, groups, grids, ref


def guard_of(hw) -> int:
    op = next(o for o in hw.walk() if o.name in ("nh.layer_norm", "nh.group_norm"))
    return op.guard.value.data


@pytest.mark.parametrize("kind", ["layer", "group"])
@pytest.mark.parametrize("in_bits", [2, 4, 8, 16])
@pytest.mark.parametrize("out_bits", [2, 4, 8, 16])
def test_norm_within_the_bound_of_torch(kind: str, in_bits: int, out_bits: int):
    """kills: the norm plan made with the weight and bias exponents swapped (its guard bits
    and nudge then suit the wrong exponents: the accumulator leaves i64, or trunc and floor
    are nudged by a step); the eps term at the wrong exponent (``2**k`` for ``4**k``)."""
    checked = 0
    for n in (1, 7, 48):
        for rounding in MODES:
            eps = (1e-5, 1e-3)[n % 2]
            seed = zlib.crc32(repr((kind, in_bits, out_bits, n, rounding)).encode())
            x, w, b, groups, grids, ref = make_case(seed, kind, n, in_bits, out_bits, eps)
            text = program(kind, x.shape, groups, grids, w, b, rounding, eps)
            module = nanoir.parse(text)
            try:
                hw = nanoir.lower_to_hw(module.clone())
            except nanoir.Error as e:
                # the plan refuses what it cannot keep within i64 and half a step: rare here
                assert "i64" in str(e) or "output steps" in str(e), e
                continue
            y = nanoir.run(module, x, dtype=np.float64)[0]
            np.testing.assert_array_equal(nanoir.run(hw, x.astype(np.float32))[0], y)
            bits, ky = grids["y"]
            top = 2 ** (bits - 1)
            want = np.clip(ref * 2.0**ky, -top, top - 1)  # torch, in output steps, saturated
            err = y * 2.0**ky - want
            g = np.abs(np.round(w * 2.0 ** grids["w"][1]))
            e = float(np.abs(w).max()) * 2.0**ky * (math.isqrt(max(n - 1, 1)) + 1) * 2.0**-27
            e += float(g.max()) * 2.0 ** -(guard_of(hw) + 1)
            if rounding in ("half_up", "half_even"):
                assert np.abs(err).max() <= 0.5 + e, (n, rounding, grids, np.abs(err).max(), e)
            else:
                assert np.abs(err).max() < 1, (n, rounding, grids, np.abs(err).max())
            checked += 1
    assert checked >= 9  # most cases have a plan
