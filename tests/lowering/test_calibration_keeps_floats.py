"""Bias correction reads the float outputs calibration kept, instead of running the float
program again (``calibrate(keep=)``, ``correct_biases(float_outputs=)``).

The reference is the same quantize with nothing kept (``KEEP_BYTES = 0``: bias correction runs
the float program op by op, as before): the programs must be the same text, in every
rounding mode and calibrator, on the test networks and on a network whose input is read by a
float op that does not widen float32 (a sigmoid).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.lowering.quantize import bias_correction, calibration
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
    saved = calibration.KEEP_BYTES
    calibration.KEEP_BYTES = saved if keep else 0
    try:
        nanoir.quantize(module, batches, progress=False, **options)
    finally:
        calibration.KEEP_BYTES = saved
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


def test_the_float_side_runs_no_op_when_calibration_kept_the_outputs(monkeypatch) -> None:
    """With the outputs kept, bias correction calls no float kernel of a runtime op (the
    float program is not run a third time); with nothing kept it runs them. Kills: the kept
    outputs ignored."""
    calls = []
    original = bias_correction._SideBySide.float_kernel

    def counting(self, op):
        kernel = original(self, op)
        return lambda *a: calls.append(op.name) or kernel(*a)

    monkeypatch.setattr(bias_correction._SideBySide, "float_kernel", counting)
    torch.manual_seed(2)
    model = SigmoidFirst().eval()
    quantized_text(model, (3, 6, 6), True)
    assert not [c for c in calls if c in ("nf.conv", "nf.linear", "nf.sigmoid")]
    quantized_text(model, (3, 6, 6), False)
    assert "nf.conv" in calls and "nf.sigmoid" in calls


def test_the_second_pass_does_not_run_the_kept_layers_again(monkeypatch) -> None:
    """``mse`` calibration runs the float program twice; the second run takes the convs'
    outputs the first one kept (``Plan.__call__(given=)``): 3 batches, one conv, 3 float64 conv
    calls (6 with nothing kept). Kills: ``given`` not passed to the second run."""
    from nanoir.runtime.numerics import kernels

    calls: list[np.dtype] = []
    original = kernels.conv

    def counting(x, *args, **kwargs):
        calls.append(np.asarray(x).dtype)
        return original(x, *args, **kwargs)

    monkeypatch.setattr(kernels, "conv", counting)
    torch.manual_seed(3)
    model = SigmoidFirst().eval()
    for keep, want in ((True, 3), (False, 6)):
        calls.clear()
        quantized_text(model, (3, 6, 6), keep, bias_correction=False)
        assert calls.count(np.dtype(np.float64)) == want, (keep, calls)
