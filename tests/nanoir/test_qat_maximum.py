"""``nanoir.qat`` through elementwise ``torch.maximum`` / ``torch.minimum`` (``nf.maximum`` /
``nf.minimum``): prepare, calibrate, train and convert a network using them; the module in eval
mode equals its converted nq program (NumPy) bit for bit, and that program lowers to nh with
nh == nq. The operands have different exponents (one branch's weights are scaled down), so convert's
program needs the alignment lower-to-hw does for an add.

Mutants seen to fail it (private copy): no step for ``nf.maximum``/``nf.minimum`` (prepare
refuses: "has no torch forward"); the maximum step computing ``torch.minimum``; the minimum
step computing ``torch.maximum``.
"""

from __future__ import annotations

import numpy as np
import pytest

import nanoir

torch = pytest.importorskip("torch")

from nanoir.dialects.nq import FakeQuantOp  # noqa: E402

from nanoir import qat  # noqa: E402

torch.set_num_threads(1)


class MaxMinNet(torch.nn.Module):
    """Two conv branches at different scales meeting in a maximum, a broadcast minimum."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv1d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv1d(3, 4, 1)
        with torch.no_grad():  # a branch at a smaller scale: a finer exponent
            self.b.weight.mul_(0.05)
            self.b.bias.mul_(0.05)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.a(x), self.b(x)
        return torch.maximum(a, b), torch.minimum(a, b[:, :1])


@pytest.mark.parametrize(
    ("learner", "rounding"), [("ema", "trunc"), ("lsq", "half_even")], ids=["ema", "lsq"]
)
def test_qat_maximum_minimum_convert_bit_for_bit(learner: str, rounding: str) -> None:
    """After a few training steps (weights and exponents moved), evaluate == run(convert)
    exactly on fresh inputs, and lower_to_hw(convert) gives the same numbers."""
    torch.manual_seed(0)
    net = MaxMinNet().eval()
    rng = np.random.default_rng(0)
    x0 = torch.randn(4, 3, 7)
    q = qat.prepare(net, (x0,), rounding=rounding, rules=(f".*=8/{learner}",))
    qat.calibrate(q, [rng.standard_normal((8, 3, 7)).astype(np.float32) for _ in range(2)])
    before = {k: v.detach().clone() for k, v in q.state_dict().items()}

    def loss(outputs: tuple[torch.Tensor, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        return ((outputs[0] - target) ** 2).mean() + ((outputs[1] + target) ** 2).mean()

    data = [(torch.randn(8, 3, 7), torch.randn(8, 4, 7)) for _ in range(3)]
    qat.train(q, data, epochs=2, lr=1e-2, loss_fn=loss, progress=False)
    moved = [k for k, v in q.state_dict().items() if k in before and not torch.equal(v, before[k])]
    assert any("a" in k for k in moved) and any("b" in k for k in moved), moved

    module = qat.convert(q)
    names = [op.name for op in module.walk()]
    assert "nf.maximum" in names and "nf.minimum" in names
    (mx,) = [op for op in module.walk() if op.name == "nf.maximum"]
    exps = [
        tuple(int(e) for e in operand.owner.exp.get_values())
        for operand in mx.operands
        if isinstance(operand.owner, FakeQuantOp)
    ]
    assert len(exps) == 2 and exps[0] != exps[1], exps  # the operands need aligning

    x = rng.standard_normal((16, 3, 7)) * 2
    got = nanoir.run(module, x)
    want = qat.evaluate(q, x)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g.dtype == np.float64 and w.dtype == np.float64
        np.testing.assert_array_equal(g, w)
    hw = nanoir.lower_to_hw(module.clone())
    for g, h in zip(got, nanoir.run(hw, x)):
        np.testing.assert_array_equal(g, h)
