"""QAT's cap of a per-tensor recurrent bias, against the rule written here (issue 31, section
5: a mutant of the cap survived). A recurrent op's bias is added to one product per gate row:
``b_ih`` to ``x W_ih`` (exponent ``k_x + k_w`` per row), ``b_hh`` to ``h W_hh`` (``k_hidden +
k_w``). A per-tensor bias has one exponent for every row, so it is capped at the smallest of
them, where every row adds it by a left shift.

The join rules cap a conv's or a linear layer's bias already (``JoinRules.settle``), so a
mutant of ``export_exponents``' own cap shows only on a recurrent bias, which no join rule
reaches.
"""

from __future__ import annotations

import numpy as np
import pytest

from nanoir import qat

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402


class _Lstm(nn.Module):
    """An LSTM whose gate rows span 2**8 in scale (per-row weight exponents 8 apart) and whose
    biases are far finer than any row's product."""

    def __init__(self) -> None:
        super().__init__()
        self.r = nn.LSTM(3, 2, batch_first=True)
        scale = torch.tensor([1, 1 / 16, 1 / 256, 1, 1 / 16, 1 / 256, 1, 1 / 4]).reshape(-1, 1)
        with torch.no_grad():
            self.r.weight_ih_l0.mul_(scale)
            self.r.weight_hh_l0.mul_(scale)
            self.r.bias_ih_l0.copy_(torch.linspace(-1e-4, 1e-4, 8))
            self.r.bias_hh_l0.copy_(torch.linspace(-2e-4, 2e-4, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.r(x)[0]


@pytest.mark.filterwarnings("ignore:The tensor attributes")
def test_a_per_tensor_recurrent_bias_takes_the_smallest_product_exponent() -> None:
    """Both biases set finer than every row's product (exponent 22): ``export_exponents``
    gives each the smallest of its product's per-row exponents, and a training forward
    applies that exponent.

    kills: ``cap.min()`` -> ``cap.max()`` for a per-tensor bias in ``export_exponents``
    (nanoir/qat/api.py; it passed test_qat.py, test_recurrent_qat.py and test_qat_joins.py,
    whose per-tensor cap test reads a conv's bias, which the join rules cap first); the same in
    ``Quantizer.forward`` (nanoir/qat/quantizer.py)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((4, 5, 3)).astype(np.float32)
    q = qat.prepare(_Lstm().eval(), (torch.from_numpy(x),), rules=("bias@.*=8/pt",))
    qat.calibrate(q, [x])
    for name in ("r.bias_ih_l0", "r.bias_hh_l0"):
        q.quantizer(name).set_exponents([22])
    exported = qat.export_exponents(q)
    (kx,), (kh,) = exported["x"]["exp"], exported["r.hidden"]["exp"]
    kw_ih, kw_hh = exported["r.weight_ih_l0"]["exp"], exported["r.weight_hh_l0"]["exp"]
    assert len(kw_ih) == len(kw_hh) == 8 and len(set(kw_ih)) > 2 and len(set(kw_hh)) > 2
    want = {
        "r.bias_ih_l0": min(kx + k for k in kw_ih),
        "r.bias_hh_l0": min(kh + k for k in kw_hh),
    }
    assert max(want.values()) < 22  # the case: the cap binds
    assert {name: exported[name]["exp"] for name in want} == {n: [k] for n, k in want.items()}
    q.train()
    q(torch.from_numpy(x))
    for name, k in want.items():
        assert q.quantizer(name).last_k.reshape(-1).tolist() == [k], name
