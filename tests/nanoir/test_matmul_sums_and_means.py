"""``baddbmm`` / ``addmm`` and a mean that keeps a dynamic dim, as third-party networks write
them (DETR's attention ``torch.baddbmm(bias, q, k.transpose(1, 2), beta=1, alpha=scale)``;
CrossViT's ``torch.stack(branches).mean(0)``, whose batch is then dim 1): torch is the oracle
for the float program, and the integer program equals the quantized one bit for bit.

Mutants seen to fail these tests (applied in place and restored):
- ``baddbmm`` reading ``mat1``/``mat2`` (the names of ``addmm``'s operands): KeyError at import;
- alpha dropped from the product: test_baddbmm_matches_torch;
- the kept-dynamic-dim mean summing without the ``1/n``: test_mean_keeping_the_batch_elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nanoir  # noqa: E402


class Baddbmm(torch.nn.Module):
    def __init__(self, alpha: float, beta: float) -> None:
        super().__init__()
        self.q = torch.nn.Linear(6, 4)
        self.k = torch.nn.Linear(6, 4)
        self.bias = torch.nn.Parameter(torch.randn(1, 5, 5))
        self.alpha, self.beta = alpha, beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.q(x), self.k(x)
        bias = self.bias.expand(x.shape[0], -1, -1)
        return torch.baddbmm(bias, q, k.transpose(1, 2), beta=self.beta, alpha=self.alpha)


class StackMean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.a(x), self.b(x), x]).mean(0) + x.mean(1, keepdim=True)


def _check(model: torch.nn.Module, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = model.eval()
    x = torch.randn(*shape)
    module = nanoir.from_torch(model, (x,))
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_allclose(y, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(1)
    calibration = [rng.standard_normal((4, *shape[1:])).astype(np.float32) for _ in range(2)]
    q = nanoir.compile_model(model, (x,), calibration, stop="nq")
    hw = nanoir.compile_model(model, (x,), calibration)
    for batch in (1, 3):
        xb = rng.standard_normal((batch, *shape[1:])).astype(np.float32)
        (a,) = nanoir.run(q, xb, dtype=np.float64)
        (b,) = nanoir.run(hw, xb)
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, 1.0), (0.3, 2.0), (1.0, 0.0)])
def test_baddbmm_matches_torch(alpha: float, beta: float) -> None:
    torch.manual_seed(0)
    _check(Baddbmm(alpha, beta), (2, 5, 6))


def test_mean_keeping_the_batch_elsewhere() -> None:
    torch.manual_seed(0)
    _check(StackMean(), (3, 5, 8))
