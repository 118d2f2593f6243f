"""QAT through recurrent ops (``nanoir.qat.recurrent``): training reaches the cell's weights
through the integer forward, and ``convert`` hands over bit for bit (module in eval mode ==
nq == nh)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import nanoir
from nanoir.frontend import from_torch


class _Tagger(nn.Module):
    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn
        self.fc = nn.Linear(8, 2)

    def forward(self, x):  # noqa: ANN001, ANN201
        y = self.rnn(x)[0]
        return self.fc(y[:, -1])


@pytest.mark.parametrize(
    ("make", "rounding"),
    [(lambda: nn.LSTM(3, 4, bidirectional=True, batch_first=True), "trunc")],
    ids=["lstm-bi"],
)
def test_qat_trains_through_the_cell_and_converts_bit_for_bit(make, rounding: str) -> None:  # noqa: ANN001
    """prepare, calibrate, train two short epochs, convert: the recurrent weights moved (their
    gradient is torch's cell's), and on fresh float64 inputs the module in eval mode, the
    converted nq program and its nh lowering agree bit for bit. Mutants seen to fail it
    (private copy): QAT's cell without the bias cap (a bias exponent then differs from
    convert's); calibrate not copying the internal grids (the forward stays float)."""
    torch.manual_seed(0)
    x = torch.randn(4, 6, 3)
    model = _Tagger(make()).eval()
    with torch.no_grad():  # tiny biases: their own exponents are finer than their products'
        for name, p in model.rnn.named_parameters():
            if name.startswith("bias"):
                p.mul_(1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = from_torch(model, (x,), dynamic_batch=False)
    q = nanoir.qat.prepare(module, (x,), rounding=rounding, weight_bits=4, bias_correction=False)
    nanoir.qat.calibrate(q, [torch.randn(4, 6, 3).numpy() for _ in range(2)])
    before = {k: v.detach().clone() for k, v in q.named_parameters() if "rnn" in k}
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 6, 3, generator=gen), torch.randint(0, 2, (4,), generator=gen))]
    nanoir.qat.train(q, data * 2, epochs=2, lr=2e-2)
    moved = [k for k, v in q.named_parameters() if "rnn" in k and not torch.equal(v, before[k])]
    assert moved, "training did not reach the recurrent weights"
    nq = nanoir.qat.convert(q)
    hw = nanoir.lower_to_hw(nq.clone())
    q.eval()
    xt = torch.randn(4, 6, 3, generator=gen, dtype=torch.float64) * 2
    with torch.no_grad():
        y_qat = q(xt).numpy()
    (y_nq,) = nanoir.run(nq, xt.numpy())
    (y_nh,) = nanoir.run(hw, xt.numpy())
    np.testing.assert_array_equal(y_qat, y_nq)
    np.testing.assert_array_equal(y_nq, y_nh)
