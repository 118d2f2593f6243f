"""Gain correction (bias correction's first step): truncation shrinks a tensor toward zero, a
gain below 1 that multiplies along a network; each conv/linear layer scales its float weights
per output channel by the least-squares slope of its float output on its quantized one.

The oracle is NumPy written here (``np.polyfit``) and the float program; the subject is the
slope of nanoir's quantized output against float, with and without the correction
(``without_gain_correction``).

kills: the slope fitted the other way round (quantized on float: the shrink doubled instead
of undone), the moments of one batch only, the weight scaled along its input dim, the corrected
weight not quantized again (nq != nh), the float weight not kept for ``restore_uncorrected``,
the correction applied without calibration-based bias correction (NanoEngine's parity config).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.lowering.quantize import (
    GAIN_LIMITS,
    channel_slopes,
    restore_uncorrected,
    without_gain_correction,
)
from torch import nn

import nanoir

torch.set_num_threads(1)


@given(
    seed=st.integers(0, 2**32 - 1),
    channels=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    axis=st.sampled_from([1, -1]),
)
def test_channel_slopes_equal_polyfit_over_all_batches(
    seed: int, channels: int, sizes: list[int], axis: int
) -> None:
    rng = np.random.default_rng(seed)
    pairs = []
    for n in sizes:
        shape = (n, channels, 3) if axis == 1 else (n, 2, channels)
        x = rng.normal(0, 2, shape)
        moved = np.moveaxis(x, axis, -1)  # channels last
        y = rng.normal(0.5, 2, channels) * moved + rng.normal(0, 0.1, moved.shape)
        pairs.append((x, np.moveaxis(y, -1, axis)))
    got = channel_slopes(pairs, axis)
    xs = np.concatenate([np.moveaxis(x, axis, 0).reshape(channels, -1) for x, _ in pairs], 1)
    ys = np.concatenate([np.moveaxis(y, axis, 0).reshape(channels, -1) for _, y in pairs], 1)
    for c in range(channels):
        if np.ptp(xs[c]) == 0:
            assert got[c] == 1.0
        else:
            want = np.polyfit(xs[c], ys[c], 1)[0]
            assert np.isclose(got[c], want, rtol=1e-7, atol=1e-9), (got[c], want)


def test_a_constant_input_has_slope_one() -> None:
    x = np.ones((4, 2, 3))
    assert channel_slopes([(x, 3 * x)], 1).tolist() == [1.0, 1.0]


class Linear(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(32, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Up(nn.Module):
    """A transposed conv: its weight's output channel is dim 1 (``Weighted.channel_axis``)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.ConvTranspose2d(8, 5, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


SHAPES = {Linear: (64, 32), Up: (4, 8, 5, 5)}


def slopes_against_float(
    seed: int, *, gain: bool, layer: type[nn.Module] = Linear
) -> tuple[np.ndarray, nanoir.ModuleOp, np.ndarray]:
    """Per output channel, the slope of the float output on nanoir's: a truncated 4-bit
    input (the shrink), a 16-bit output (its own rounding negligible)."""
    model = layer(seed).eval()
    rng = np.random.default_rng(seed)
    shape = SHAPES[layer]
    calibration = [rng.normal(0, 1, shape).astype(np.float32) for _ in range(4)]
    program = nanoir.from_torch(model, (torch.from_numpy(calibration[0]),))
    options = {"act_bits": 4, "rules": ("act@fc=16",), "progress": False}
    if gain:
        nanoir.quantize(program, calibration, **options)
    else:
        with without_gain_correction():
            nanoir.quantize(program, calibration, **options)
    x = rng.normal(0, 1, (4 * shape[0], *shape[1:])).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy().astype(np.float64)
    got = np.asarray(nanoir.run(program, x)[0], np.float64)
    axis = 1 if layer is Up else -1
    channels = zip(np.moveaxis(got, axis, 0), np.moveaxis(want, axis, 0), strict=True)
    slopes = np.array([np.polyfit(g.ravel(), w.ravel(), 1)[0] for g, w in channels])
    return slopes, program, x


@settings(deadline=None, max_examples=4)
@given(seed=st.integers(0, 2**16), layer=st.sampled_from([Linear, Up]))
def test_the_correction_brings_a_truncated_layer_back_to_unit_gain(
    seed: int, layer: type[nn.Module]
) -> None:
    """Without it the 4-bit truncated input leaves the layer's output about 15% short of
    float (slope of float on quantized about 1.15, every channel); with it the slope is 1
    within 6% on every channel and 3% on average, on inputs the calibration did not see. The
    program still lowers bit-exactly. The bounds are sampling bounds (the gain is estimated
    on 4 calibration batches): over 100 random seeds the largest channel deviation was 0.041
    (Linear; median 0.021) and the largest mean 0.019; 4% and 2% failed on seeds 2513 and
    157 under the explore profile, on the code before this round's last changes too."""
    before, _, _ = slopes_against_float(seed, gain=False, layer=layer)
    after, program, x = slopes_against_float(seed, gain=True, layer=layer)
    assert np.all(before > 1.08), before  # there is a shrink to undo
    assert np.all(np.abs(after - 1) < 0.06), after
    assert np.mean(np.abs(after - 1)) < 0.03, after
    hw = nanoir.lower_to_hw(program.clone())
    np.testing.assert_array_equal(nanoir.run(hw, x)[0], nanoir.run(program, x)[0])


def weight_of(program: nanoir.ModuleOp) -> tuple[np.ndarray, nf.ConstantOp]:
    (linear,) = [op for op in program.walk() if isinstance(op, nf.LinearOp)]
    const = linear.weight.owner.input.owner  # type: ignore[union-attr]
    assert isinstance(const, nf.ConstantOp)
    return dense_to_numpy(const.value), const


def test_the_float_weight_is_kept_and_restored() -> None:
    _, program, _ = slopes_against_float(3, gain=True)
    model = Linear(3)
    original = model.fc.weight.detach().numpy()
    corrected, _ = weight_of(program)
    ratio = corrected / original
    # one factor per output row (the weight's dim 0), within the limits, not all 1
    np.testing.assert_allclose(ratio, ratio[:, :1] * np.ones_like(ratio), rtol=1e-5)
    assert np.all((ratio >= GAIN_LIMITS[0] - 1e-6) & (ratio <= GAIN_LIMITS[1] + 1e-6))
    assert np.abs(ratio - 1).max() > 0.01
    assert restore_uncorrected(program) >= 2  # the bias and the weight
    restored, _ = weight_of(program)
    np.testing.assert_array_equal(restored, original)


def test_nanoengine_parity_options_leave_weights_alone() -> None:
    """``bias_correction=False`` (NanoEngine-PyTorch's configuration) corrects no gain."""
    model = Linear(5).eval()
    rng = np.random.default_rng(5)
    calibration = [rng.normal(0, 1, (64, 32)).astype(np.float32) for _ in range(2)]
    program = nanoir.from_torch(model, (torch.from_numpy(calibration[0]),))
    nanoir.quantize(
        program, calibration, act_bits=4, progress=False, bias_correction=False, calibrator="absmax"
    )
    weight, const = weight_of(program)
    np.testing.assert_array_equal(weight, model.fc.weight.detach().numpy())
    assert "nq.uncorrected" not in const.attributes
