"""Issue 31 §2.9: inputs without a batch dim, as torch takes them.

An unbatched ``Conv1d`` input ``[C, L]`` (and unbatched 2-D convs, transposed convs, pools
and adaptive pools) is one sample: the importer gives the op's handler a batch of one and
reshapes the result back (``_Importer._with_batch_of_one``), so nf equals torch. Under the
dynamic batch, such an input's dim 0 is not a batch: refused naming it, with
``dynamic_batch=False`` offered. ``torch.mean(x, dim=-1)`` of a 0-d tensor is the tensor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import nanoir
from nanoir.frontend import FrontendError

torch.set_num_threads(1)


class Op(nn.Module):
    def __init__(self, fn, layer: nn.Module | None = None):  # noqa: ANN001
        super().__init__()
        self.fn, self.layer = fn, layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)


CASES = {
    "conv1d": (lambda: Op(lambda m, x: m.layer(x), nn.Conv1d(3, 4, 3, padding=1)), (3, 8)),
    "conv2d": (lambda: Op(lambda m, x: m.layer(x), nn.Conv2d(3, 4, 3)), (3, 5, 6)),
    "conv_transpose1d": (
        lambda: Op(lambda m, x: m.layer(x), nn.ConvTranspose1d(3, 2, 2, stride=2)),
        (3, 4),
    ),
    "max_pool1d": (lambda: Op(lambda m, x: F.max_pool1d(x, 2)), (3, 8)),
    "avg_pool2d": (lambda: Op(lambda m, x: F.avg_pool2d(x, 2)), (3, 4, 6)),
    "adaptive_avg_pool1d": (lambda: Op(lambda m, x: F.adaptive_avg_pool1d(x, 2)), (3, 8)),
    "adaptive_avg_pool2d": (lambda: Op(lambda m, x: F.adaptive_avg_pool2d(x, 1)), (3, 4, 4)),
    "adaptive_max_pool1d": (lambda: Op(lambda m, x: F.adaptive_max_pool1d(x, 4)), (3, 8)),
    "adaptive_max_pool2d": (lambda: Op(lambda m, x: F.adaptive_max_pool2d(x, 2)), (3, 4, 4)),
    "max_pool2d_indices": (
        lambda: Op(lambda m, x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)),
        (3, 4, 4),
    ),
}


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return CASES[name][0]().eval()


@pytest.mark.parametrize("name", sorted(CASES))
def test_unbatched_inputs_are_one_sample(name: str) -> None:
    """nf equals torch (float64) on the unbatched input, with torch's unbatched result
    shape. Kills: the wrapper removed (the handlers' 'internal error importing'); the
    result left with the batch of one (the shape check against torch fails)."""
    model = _model(name).double()
    x = torch.randn(CASES[name][1], dtype=torch.float64)
    module = nanoir.from_torch(model, (x,), dynamic_batch=False)
    with torch.no_grad():
        expected = model(x).numpy()
    (actual,) = nanoir.run(module, x.numpy(), dtype=np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)


def test_unbatched_conv1d_compiles_to_nh() -> None:
    """The unbatched conv quantizes and lowers, nq == nh bit for bit."""
    model = _model("conv1d")
    x = torch.randn(3, 8)
    module = nanoir.from_torch(model, (x,), dynamic_batch=False)
    nanoir.quantize(module, [x.numpy()], act_bits=8)
    hw = nanoir.lower_to_hw(module.clone())
    y = torch.randn(3, 8).numpy()
    np.testing.assert_array_equal(nanoir.run(hw, y)[0], nanoir.run(module, y)[0])


@pytest.mark.parametrize("name", ["max_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d"])
def test_unbatched_under_the_dynamic_batch_names_the_missing_batch_dim(name: str) -> None:
    """torch.export keeps the sample's dim 0 dynamic for pools: refused naming it (no
    'internal error'). Kills: the dynamic case sent to the wrapper (an nf.reshape of a
    dynamic dim to a batch of one fails verification)."""
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(_model(name), (torch.randn(CASES[name][1]),))
    text = str(info.value)
    assert "has no batch dim" in text and "dynamic_batch=False" in text
    assert "internal error" not in text


def test_unbatched_conv_under_the_dynamic_batch_offers_the_static_batch() -> None:
    """For a conv torch.export itself fails (it fixes the channels it was told are the
    batch); the hint is given since the static export succeeds."""
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(_model("conv1d"), (torch.randn(3, 8),))
    assert "hint: torch.export succeeds with dynamic_batch=False" in str(info.value)


class Mean(nn.Module):
    def __init__(self, dim: int | tuple[int, ...]):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


@pytest.mark.parametrize(("shape", "dim"), [((), -1), ((), 0), ((4,), -1), ((2, 3), (0, 1))])
def test_mean_of_0d_and_over_a_static_dim_0(shape: tuple[int, ...], dim: int) -> None:
    """The mean of a 0-d tensor is itself (torch allows dim -1 and 0), and a static dim 0
    may be reduced. Kills: the bare IndexError of rank 0; dim 0 refused when static."""
    x = torch.randn(shape, dtype=torch.float64)
    module = nanoir.from_torch(Mean(dim), (x,), dynamic_batch=False)
    (actual,) = nanoir.run(module, x.numpy(), dtype=np.float64)
    expected = Mean(dim)(x).numpy()
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-12)


def test_mean_over_the_dynamic_batch_is_refused() -> None:
    with pytest.raises(FrontendError, match="the batch dim 0 cannot be reduced: it is dynamic"):
        nanoir.from_torch(Mean(-1), (torch.randn(4),))
