"""``calibrate_batch_norm``: BN statistics from the data, so the test networks' outputs depend on
their inputs (with data-blind statistics the Magik CRNN's sigmoids moved by 1e-5 of their range
between two random inputs, and an exponent error mid-network did not reach them)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402 - needs torch

from nanoir.testing.magik_models import MAGIK_INPUTS, make_magik_model  # noqa: E402
from nanoir.testing.models import calibrate_batch_norm, make_test_model  # noqa: E402
from nanoir.testing.proof_models import make_proof_model  # noqa: E402


def _check_stats(bn: nn.BatchNorm2d, x: np.ndarray) -> None:
    """``bn``'s statistics against NumPy's of its input ``x``: the mean within 5 draws of
    0.2 std, the variance within [0.5, 2] times (the spread the helper promises)."""
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    rm, rv = bn.running_mean.double().numpy(), bn.running_var.double().numpy()
    assert (np.abs(rm - mean) <= 5 * 0.2 * np.sqrt(var)).all(), (rm, mean)
    assert ((rv >= 0.5 * var * (1 - 1e-6)) & (rv <= 2 * var * (1 + 1e-6))).all(), (rv, var)
    assert not np.allclose(rm, mean) and not np.allclose(rv, var)  # spread: folding non-trivial


def test_statistics_follow_the_data_in_forward_order() -> None:
    """Two conv-BN stages whose statistics start far off (mean 5, variance 100): each BN's
    statistics are its own input's (the second's measured after the first is set), up to the
    spread; affine parameters are kept.
    Mutants seen to fail it (private copy): statistics from one pass before any is set (a
    forward hook collecting inputs, then setting all: the second BN's are off by the first's
    scale); the mean over dims 0 and 1 (the channel averaged away); no spread."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 5, 1), nn.BatchNorm2d(5)
    )
    with torch.no_grad():
        for bn in (model[1], model[4]):
            bn.running_mean.fill_(5.0)
            bn.running_var.fill_(100.0)
            bn.weight.copy_(torch.linspace(0.5, 1.5, bn.num_features))
    weights = [model[1].weight.clone(), model[4].weight.clone()]
    x = torch.randn(8, 3, 6, 6, generator=torch.Generator().manual_seed(1)) * 3 + 1
    calibrate_batch_norm(model, (x,), seed=0)
    with torch.no_grad():
        first_in = model[0](x)
        second_in = model[3](model[2](model[1](first_in)))
    _check_stats(model[1], first_in.double().numpy())
    _check_stats(model[4], second_in.double().numpy())
    assert torch.equal(model[1].weight, weights[0]) and torch.equal(model[4].weight, weights[1])
    assert not model.training


def _relative_change(model: nn.Module, shape: tuple[int, ...]) -> float:
    """Largest change of the output between two N(0, 1) inputs, over the outputs' range."""
    ys = []
    for seed in (11, 12):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            ys.append(model(x).double().numpy())
    a, b = ys
    return float(np.abs(a - b).max() / (max(a.max(), b.max()) - min(a.min(), b.min())))


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: make_magik_model("MagikCRNN-linear-zero"), MAGIK_INPUTS["MagikCRNN-linear-zero"]),
        (lambda: make_magik_model("MagikCRNN-lstm-bilinear"), (2, 3, 32, 64)),
        (lambda: make_test_model("MobileNetV2Stack"), (2, 3, 32, 32)),
        (lambda: make_proof_model("MagikFront"), (2, 3, 16, 32)),
    ],
    ids=["MagikCRNN-linear-zero", "MagikCRNN-lstm-bilinear", "MobileNetV2Stack", "MagikFront"],
)
def test_outputs_depend_on_the_input(make: object, shape: tuple[int, ...]) -> None:
    """The networks that were nearly constant move by over 3% of their output range between
    two random inputs (measured with data-blind statistics: 7e-5, 2e-5, 4e-4, 2.5e-3; now
    0.78, 0.64, 0.33, 0.064).
    Mutant seen to fail it: each make function without ``calibrate_on_normal`` (the old
    models)."""
    assert _relative_change(make(), shape) > 0.03  # type: ignore[operator]
