"""QAT's starting point under ``trunc`` with bias correction (the digits recipes'
configuration): ``prepare`` + ``calibrate`` + ``convert`` is ``quantize``'s program, so what
bias correction does under ``trunc`` (weights and biases rounded to the nearest code offline,
half an output step added before a ReLU, the mean truncation error of the output removed)
is where training starts. The weight codes are checked against NumPy's ``round``.

Needs torch (the ``torch`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest

import nanoir

torch = pytest.importorskip("torch")

from nanoir.dialects import nf  # noqa: E402
from nanoir.dialects.dense import dense_to_numpy  # noqa: E402
from nanoir.dialects.nq import FakeQuantOp  # noqa: E402
from nanoir.lowering.quantize import UNCORRECTED, QuantRule, get_exps  # noqa: E402
from nanoir.runtime.numerics.quant import RoundingMode  # noqa: E402
from torch import nn  # noqa: E402

from nanoir import qat  # noqa: E402

RULES = (
    QuantRule(r"^conv\d\.weight$", bits=4, kind="weight"),
    QuantRule(r"^fc\.weight$", bits=1, kind="weight"),
)
"""examples/digits.py's 4/1 configuration: 4-bit convs, a 1-bit classifier."""


def _digits_like() -> tuple[nn.Module, np.ndarray]:
    """conv-bn-relu, max pool, conv-relu, linear to the output (a signed ``trunc`` output whose
    negatives count), on random 8x8 images in [0, 1]."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 6, 3)
            self.fc = nn.Linear(24, 5)

        def forward(self, x):  # noqa: ANN001, ANN202
            x = nn.functional.max_pool2d(self.bn1(self.conv1(x)).relu(), 2)
            return self.fc(self.conv2(x).relu().flatten(1))

    net = Net()
    with torch.no_grad():  # running statistics away from the identity, so folding matters
        net.bn1.running_mean.uniform_(-0.2, 0.2)
        net.bn1.running_var.uniform_(0.5, 2.0)
    x = np.random.default_rng(0).random((32, 1, 8, 8)).astype(np.float32)
    return net.eval(), x


@pytest.mark.parametrize("calibrator", ["absmax", "mse"])
def test_trunc_start_is_the_bias_corrected_ptq_program(calibrator: str) -> None:
    """Under ``trunc`` with bias correction (the default), the calibrated QAT module converts
    to ``quantize``'s program (text equal, ``nq.uncorrected`` records aside) and runs equal to
    it on held-out inputs; its conv weights' codes at nh are NumPy's nearest codes (ties to
    even) of the folded float weights, not their truncations.

    Mutants seen to fail it (private copy): the loop in ``prepare`` that sets the offline
    quantizers' rounding to ``CONSTANT_ROUNDING`` removed (the QAT weights truncate, quantize's
    round to nearest: the texts differ); ``CONSTANT_ROUNDING`` set to ``trunc`` in both
    (texts equal, the weights' rounding is not the nearest code); ``round_codes`` truncating
    for ``half_even`` (the module in eval differs from its converted program)."""
    net, x = _digits_like()
    options = {"calibrator": calibrator, "rounding": "trunc", "rules": RULES}
    example = (torch.from_numpy(x[:2]),)
    batches = [x[:16], x[16:24]]
    q = qat.prepare(net, example, learner="lsq", **options)
    qat.calibrate(q, batches)
    ptq = nanoir.compile_model(net, example, batches, stop="nq", **options)
    for op in ptq.walk():
        op.attributes.pop(UNCORRECTED, None)
    module = qat.convert(q)
    assert str(module) == str(ptq)
    held_out = x[24:]
    (got,) = nanoir.run(module, held_out)
    (want,) = nanoir.run(ptq, held_out)
    assert np.array_equal(got, want)
    assert np.array_equal(qat.evaluate(q, held_out), want)

    hw_codes = {
        dense_to_numpy(op.value).shape: dense_to_numpy(op.value)
        for op in nanoir.lower_to_hw(module.clone()).walk()
        if op.name == "nh.constant"
    }
    checked = 0
    for op in module.walk():
        if not (isinstance(op, FakeQuantOp) and isinstance(op.input.owner, nf.ConstantOp)):
            continue
        name = op.input.owner.sym_name.data
        if name not in ("conv1.weight", "conv2.weight"):
            continue
        assert op.rounding_mode == RoundingMode.HALF_EVEN
        w = dense_to_numpy(op.input.owner.value).astype(np.float64)
        k = np.asarray(get_exps(op), np.float64).reshape(-1, 1, 1, 1)
        nearest = np.clip(np.round(w * 2.0**k), -8, 7)
        assert not np.array_equal(nearest, np.clip(np.trunc(w * 2.0**k), -8, 7))
        assert np.array_equal(hw_codes[w.shape], nearest), name
        checked += 1
    assert checked == 2
