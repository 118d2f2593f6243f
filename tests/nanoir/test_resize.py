"""torch's linear and cubic resizing at any size or scale (nanoir/frontend/resize.py): the
x2 half-pixel cases keep their exact ops, every other one is a linear by torch's own weights
per resized dim, quantized like a weight.

- the float program equals torch in float64 (bilinear, bicubic, 1-D linear, trilinear;
  ``align_corners`` both ways; sizes and scales up, down and fractional; antialiasing);
- the weights read from torch equal the ones written out here for linear interpolation with
  ``align_corners=True`` (``j (in - 1) / (out - 1)``, an independent oracle);
- quantized, lowered: nq == nh bit for bit, and nh stays near torch;
- a resize whose weights would be too large is refused by name.

Mutants checked (each made the tests named fail; applied in place and restored):
- the dim moved back after its linear left out (``_along_last`` without the second
  transpose): test_resize_matches_torch;
- the weights not transposed (``out[corner]`` for ``out[corner].T``):
  test_weights_are_torchs and test_resize_matches_torch;
- the exact x2 op taken whatever ``align_corners`` says: test_resize_matches_torch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nanoir.dialects import nf
from torch import nn

import nanoir
from nanoir.frontend.resize import resize_weights

torch.set_num_threads(1)


class Resize(nn.Module):
    def __init__(self, **kw: object) -> None:
        super().__init__()
        self.kw = kw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **self.kw)  # type: ignore[arg-type]


CASES = [
    ((2, 3, 4, 4), {"size": (6, 7), "mode": "bicubic", "align_corners": True}, nf.LinearOp),
    ((2, 3, 8, 8), {"size": (5, 3), "mode": "bicubic"}, nf.LinearOp),
    ((1, 2, 4, 5), {"scale_factor": 1.7, "mode": "bicubic"}, nf.LinearOp),
    ((1, 2, 4, 4), {"scale_factor": 4, "mode": "bilinear"}, nf.LinearOp),
    ((2, 2, 4, 6), {"scale_factor": 2, "mode": "bilinear", "align_corners": True}, nf.LinearOp),
    ((2, 2, 9, 9), {"size": (4, 6), "mode": "bilinear", "antialias": True}, nf.LinearOp),
    ((2, 3, 5), {"scale_factor": 0.6, "mode": "linear"}, nf.LinearOp),
    ((1, 2, 3, 4, 2), {"size": (5, 4, 3), "mode": "trilinear"}, nf.LinearOp),
    ((2, 3, 4, 5), {"scale_factor": 2, "mode": "bilinear"}, nf.UpsampleBilinearOp),
    ((2, 3, 4, 5), {"size": (8, 5), "mode": "bicubic"}, nf.UpsampleBicubicOp),
]


@pytest.mark.parametrize("shape, kw, form", CASES)
def test_resize_matches_torch(shape, kw, form) -> None:
    model = Resize(**kw).double()
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    module = nanoir.from_torch(model, (x,), dynamic_batch=False)
    assert any(isinstance(op, form) for op in module.walk())
    (got,) = nanoir.run(module, x.numpy(), dtype=np.float64)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_weights_are_torchs() -> None:
    """align_corners=True linear weights, written out: output j reads position
    ``j (n - 1) / (m - 1)``, split between its two neighbours."""
    for n, m in ((4, 7), (6, 3), (5, 5), (2, 9)):
        want = np.zeros((m, n))
        for j in range(m):
            src = j * (n - 1) / (m - 1)
            i0 = min(int(np.floor(src)), n - 2)
            frac = src - i0
            want[j, i0] += 1 - frac
            want[j, i0 + 1] += frac

        def op(t: torch.Tensor, size=m) -> torch.Tensor:
            return F.interpolate(t, size=size, mode="linear", align_corners=True)

        (got,) = resize_weights(op, (), (1, 1, n))
        np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("shape, kw, form", [CASES[0], CASES[3], CASES[6], CASES[8]])
def test_resize_lowers_exactly(shape, kw, form) -> None:
    """Quantized on its own data and lowered: nq == nh bit for bit, nh near torch."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    module = nanoir.from_torch(Resize(**kw), (torch.from_numpy(x),))
    nanoir.quantize(module, [x], progress=False)
    (nq,) = nanoir.run(module, x)
    (nh,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)
    assert nh.tobytes() == nq.tobytes()
    with torch.no_grad():
        want = Resize(**kw)(torch.from_numpy(x).double()).numpy()
    sqnr = 10 * np.log10(np.sum(want**2) / np.sum((nh - want) ** 2))
    assert sqnr > 20


def test_too_large_a_resize_is_refused_by_name() -> None:
    with pytest.raises(nanoir.Error, match=r"(?s)upsample_bilinear2d.*more than 4194304"):
        nanoir.from_torch(
            Resize(size=(1, 4096), mode="bilinear", align_corners=True),
            (torch.randn(1, 1, 1, 2048),),
        )
