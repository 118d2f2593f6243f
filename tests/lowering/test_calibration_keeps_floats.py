"""Bias correction reads the float outputs calibration kept, instead of running the float
program again (``calibrate(keep=)``, ``correct_biases(float_outputs=)``).

The reference is the same quantize with nothing kept (``without_kept_floats``: calibration's
second pass and bias correction run the float layers again, as before): the programs must be the same text, in every
rounding mode and calibrator, on the test networks and on a network whose input is read by a
float op that does not widen float32 (a sigmoid).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.lowering.quantize import without_kept_floats
from nanoir.runtime.numerics import kernels
from torch import nn

import nanoir
from nanoir.testing import TEST_MODELS, make_test_model


class SigmoidFirst(nn.Module):
    """The input read by a sigmoid (computed in float32 on a float32 array), then a conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(torch.sigmoid(x)))
        return self.fc(y.flatten(1))


def quantized_text(model: nn.Module, shape: tuple[int, ...], keep: bool, **options) -> str:
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((2, *shape)).astype(np.float32) for _ in range(3)]
    module = nanoir.from_torch(model, (torch.from_numpy(batches[0]),))
    if keep:
        nanoir.quantize(module, batches, progress=False, **options)
    else:
        with without_kept_floats():
            nanoir.quantize(module, batches, progress=False, **options)
    return str(module)


def _shape(name: str, model: nn.Module) -> tuple[int, ...]:
    if name == "ResNet18":
        return (3, 32, 32)
    return tuple(model.make_example_input(1).shape[1:])


@pytest.mark.parametrize("name", sorted(TEST_MODELS))
def test_kept_floats_give_the_same_program(name: str) -> None:
    """Kills: a kept output read for the wrong batch; the outputs kept in the first pass of a
    two-pass calibration only in part; a weighted op's kept output taken before its bias."""
    model = make_test_model(name)
    shape = _shape(name, model)
    assert quantized_text(model, shape, True) == quantized_text(model, shape, False)


@pytest.mark.parametrize(
    "options",
    [{}, {"rounding": "half_even"}, {"calibrator": "absmax"}, {"rounding": "floor"}],
)
def test_kept_floats_with_a_float32_op_on_the_input(options: dict) -> None:
    """A sigmoid reads the float32 input directly, in every rounding mode and calibrator:
    the same program either way. (The float side converts its inputs to float64 as
    calibration's run does; left float32, the sigmoid's float32 rounding did not reach the
    float32 biases here: not a mutant this test kills.)"""
    torch.manual_seed(1)
    model = SigmoidFirst().eval()
    assert quantized_text(model, (3, 6, 6), True, **options) == quantized_text(
        model, (3, 6, 6), False, **options
    )


def test_kept_layers_are_not_run_again(monkeypatch) -> None:
    """``mse`` calibration runs the float program twice and bias correction a third time
    beside the quantized one; with the convs' outputs kept, the float conv runs once per batch
    (3 batches: 3 float64 calls; the quantized side's convs run on float32 codes), with
    nothing kept 9 times, and 6 without bias correction. Kills: ``given`` not passed to the
    second run; the kept outputs ignored by bias correction."""
    calls: list[np.dtype] = []
    original = kernels.conv

    def counting(x, *args, **kwargs):
        calls.append(np.asarray(x).dtype)
        return original(x, *args, **kwargs)

    monkeypatch.setattr(kernels, "conv", counting)
    torch.manual_seed(3)
    model = SigmoidFirst().eval()
    for keep, options, want in (
        (True, {}, 3),
        (False, {}, 9),
        (True, {"bias_correction": False}, 3),
        (False, {"bias_correction": False}, 6),
    ):
        calls.clear()
        quantized_text(model, (3, 6, 6), keep, **options)
        assert calls.count(np.dtype(np.float64)) == want, (keep, options, calls)
