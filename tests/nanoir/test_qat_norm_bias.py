"""A layer/group norm bias that starts at zero (torch's default ``nn.LayerNorm`` and
``nn.GroupNorm`` init) trains under QAT's ``ema`` learner, and a tiny non-zero norm bias
quantizes and lowers (issue 21).

A zero bias calibrates to exponent 60 (nothing measured). After one optimiser step it is no
longer zero but its EMA exponent is still ~60, and the integer algorithm cannot add a bias
that much finer than its output: training stopped with "has no accumulator within i64". The
join rules now cap a non-zero norm bias at 16 steps finer than the norm's output
(``join_rules.NORM_BIAS_GUARD``), in ``quantize`` and in every QAT forward alike.

Oracles: the module in eval mode against ``nanoir.run`` of ``convert``'s program (bit for bit),
nq against nh, and the bias exponent against the output's + 16 (written here).
Mutant seen to fail these tests in a private copy (/tmp/copy-defects): ``Rules.norm``
returning at once (training raises the QATError again; quantize's program is refused by
lower-to-hw).
"""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects.nq import FakeQuantOp

import nanoir

torch = pytest.importorskip("torch")
qat = pytest.importorskip("nanoir.qat")

torch.set_num_threads(1)


class _Net(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.conv = torch.nn.Conv1d(3, 4, 1)
        self.norm = torch.nn.LayerNorm(6) if kind == "layer" else torch.nn.GroupNorm(2, 4)
        self.head = torch.nn.Conv1d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.conv(x)))


def _fq(module, name: str) -> FakeQuantOp:  # noqa: ANN001
    return next(
        op
        for op in module.walk()
        if isinstance(op, FakeQuantOp)
        and getattr(op.input.owner, "sym_name", None) is not None
        and op.input.owner.sym_name.data == name
    )


def _out_exp(module) -> int:  # noqa: ANN001
    fq = next(
        op
        for op in module.walk()
        if isinstance(op, FakeQuantOp)
        and getattr(op.input.owner, "name", None) in ("nf.layer_norm", "nf.group_norm")
    )
    return int(fq.exp.get_values()[0])


@pytest.mark.parametrize("kind", ["layer", "group"])
def test_ema_trains_a_zero_norm_bias(kind: str) -> None:
    """Three SGD steps from torch's zero bias with the ``ema`` learner, then ``convert``:
    the module in eval mode equals the converted program bit for bit, which lowers with
    nq == nh, and the norm bias sits at most 16 steps finer than the norm's output."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = _Net(kind)
    x = torch.from_numpy(rng.standard_normal((4, 3, 6)).astype(np.float32))
    q = qat.prepare(model, (x,), learner="ema")
    qat.calibrate(q, [rng.standard_normal((8, 3, 6)).astype(np.float32)])
    opt = torch.optim.SGD(q.parameters(), lr=0.1)
    q.train()
    for _ in range(3):
        xb = torch.from_numpy(rng.standard_normal((8, 3, 6)).astype(np.float32))
        loss = q(xb).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    q.eval()
    module = qat.convert(q)
    xs = rng.standard_normal((2, 3, 6))
    with torch.no_grad():
        want = q(torch.from_numpy(xs)).double().numpy()
    (got,) = nanoir.run(module, xs)
    np.testing.assert_array_equal(got, want)
    bias = _fq(module, "norm.bias")
    assert int(bias.exp.get_values()[0]) <= _out_exp(module) + 16
    (h,) = nanoir.run(nanoir.lower_to_hw(module.clone()), xs)
    np.testing.assert_array_equal(h, got)


TINY_BIAS = """\
func.func @main(%x: tensor<?x3x6xf32>) -> tensor<?x3x6xf32> {
  %w = nf.constant "norm.weight" dense<[1.0, 0.5, 2.0, -1.0, 1.5, 0.75]> : tensor<6xf32>
  %b = nf.constant "norm.bias" dense<[1.0e-09, 0.0, -2.0e-09, 0.0, 0.0, 3.0e-09]> : tensor<6xf32>
  %n = nf.layer_norm %x, %w, %b {normalized_dims = 1 : i64} : (tensor<?x3x6xf32>,
    tensor<6xf32>, tensor<6xf32>) -> tensor<?x3x6xf32>
  func.return %n : tensor<?x3x6xf32>
}
"""


def test_a_tiny_norm_bias_quantizes_and_lowers() -> None:
    """PTQ of a LayerNorm whose bias is ~1e-9 (its own exponent, 8 bits: 35): capped 16 steps
    past the output's exponent, the program lowers and nh equals nq."""
    module = nanoir.parse(TINY_BIAS)
    rng = np.random.default_rng(1)
    nanoir.quantize(module, [rng.standard_normal((4, 3, 6))])
    bias = _fq(module, "norm.bias")
    assert bias.origin is not None and bias.origin.data.startswith("norm:")
    assert int(bias.exp.get_values()[0]) == _out_exp(module) + 16
    x = rng.standard_normal((2, 3, 6))
    (want,) = nanoir.run(module, x)
    (got,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)
    np.testing.assert_array_equal(got, want)
