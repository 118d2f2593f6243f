"""x2 bicubic upsampling as a fixed kernel, and the data movement of issue 32 §3 (stack,
flip, repeat_interleave, repeat, index_select, reflection pads): against torch, nq == nh bit
for bit (bicubic: nq equal to torch's float64 op on the quantized input, then the output
quantizer, as the weights are dyadic), and bicubic streamed == whole.

Mutants checked (each made the tests named fail; applied in place and restored):
- the odd output's weights in the even one's order (``ODD = EVEN``): test_bicubic_matches_torch;
- zero rows past each end instead of edge copies: test_bicubic_matches_torch;
- nh.upsample_bicubic's exponent step 7 for 8: test_bicubic_nq_is_torch_quantized;
- ``repeat_interleave`` repeating the whole dim (tiling): test_movement_matches_torch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nanoir.dialects import nf
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.quant import fake_quant
from torch import nn

import nanoir

torch.set_num_threads(1)


class Bicubic(nn.Module):
    def __init__(self, size: tuple[int, int] | None = None):
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.size is None:
            return F.interpolate(x, scale_factor=2, mode="bicubic")
        return F.interpolate(x, size=self.size, mode="bicubic")


@pytest.mark.parametrize(
    "shape, size", [((2, 3, 5, 4), None), ((2, 3, 1, 3), (2, 3)), ((1, 2, 4, 6), (4, 12))]
)
def test_bicubic_matches_torch(shape: tuple[int, ...], size: tuple[int, int] | None) -> None:
    """x2 along both spatial dims, along one, and a 1-row input (all taps the edge)."""
    model = Bicubic(size).double()
    x = torch.randn(shape, dtype=torch.float64)
    module = nanoir.from_torch(model, (x,), dynamic_batch=False)
    assert any(isinstance(op, nf.UpsampleBicubicOp) for op in module.walk())
    (got,) = run(module, x.numpy(), dtype=np.float64)
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-12, atol=1e-12)


def test_bicubic_nq_is_torch_quantized() -> None:
    """At nq the weighted sum of the quantized input is exact, so it is torch's float64
    bicubic of that input, fake-quantized by the output's quantizer (written here with
    ``fake_quant``); nh equals nq bit for bit, and streams equal to its whole run."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 5)
    module = nanoir.from_torch(Bicubic(), (x,))
    nanoir.quantize(module, [x.numpy()], progress=False)
    fqs = [op for op in module.walk() if op.name == "nq.fake_quant"]
    xin, yout = fqs[0], fqs[-1]
    y = np.random.default_rng(1).normal(size=(2, 3, 6, 5)).astype(np.float32)
    xq = fake_quant(y, xin.bits.value.data, np.array(list(xin.exp.get_values())), xin.rounding_mode)
    ref = F.interpolate(torch.tensor(xq), scale_factor=2, mode="bicubic").numpy()
    want = fake_quant(
        ref, yout.bits.value.data, np.array(list(yout.exp.get_values())), yout.rounding_mode
    )
    (nq,) = run(module, y)
    np.testing.assert_array_equal(nq, want)
    hw = lower_to_hw(module)
    (nh,) = run(hw, y)
    assert nh.tobytes() == nq.tobytes()
    (streamed,) = nanoir.stream(hw, [y], step=1)
    assert streamed.tobytes() == nh.tobytes()


class Movement(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.stack([x, y, x], dim=2),
            torch.stack([x, y], dim=-1),
            x.flip(1, 2),
            x.repeat_interleave(2, dim=2),
            y.repeat_interleave(torch.tensor([0, 2, 1]), dim=1),
            x.repeat(1, 2, 1, 2),
            x.index_select(2, torch.tensor([3, 0, 0])),
            F.pad(x, (1, 2, 0, 1), mode="reflect"),
            F.pad(x, (2, 1, 1, 0), mode="replicate"),
        )


def test_movement_matches_torch() -> None:
    """Each op equals torch (a dynamic batch, run at two sizes)."""
    x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    module = nanoir.from_torch(Movement(), (x, y))
    for n in (1, 3):
        a, b = torch.randn(n, 3, 4, 5), torch.randn(n, 3, 4, 5)
        for g, w in zip(run(module, a.numpy(), b.numpy()), Movement()(a, b)):
            np.testing.assert_array_equal(g, w.numpy())


def test_movement_nq_equals_nh() -> None:
    """Data movement keeps codes and exponents: nh == nq bit for bit."""
    x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    module = nanoir.from_torch(Movement(), (x, y))
    nanoir.quantize(module, [(x.numpy(), y.numpy())], progress=False)
    hw = lower_to_hw(module.clone())
    a, b = np.random.default_rng(2).normal(size=(2, 2, 3, 4, 5)).astype(np.float32)
    for q, h in zip(run(module, a, b), run(hw, a, b)):
        assert q.tobytes() == h.tobytes()
