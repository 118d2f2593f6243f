"""quantize's bias cap: a bias exponent is at most its accumulator's ``exp(x) + exp(w)``
per output channel, so lowering adds it to the integer sums exactly. A per-tensor bias has
one exponent for every channel: the smallest of the channels' caps (the oracle below is
that rule, computed from the program's own input and weight exponents).

Mutant it kills (checked in a copy; it passed tests/lowering/test_quantize*.py before):
``cap.min()`` -> ``cap.max()`` for a per-tensor bias in ``quantize_function``
(lowering/quantize/driver.py)."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument

import nanoir

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402


def exps(module: ModuleOp, name: str | None) -> list[int]:
    """The exponents of the fake-quant of constant ``name`` (None: of the input)."""
    (fq,) = [
        op
        for op in module.walk()
        if isinstance(op, FakeQuantOp)
        and (
            isinstance(op.input, BlockArgument)
            if name is None
            else getattr(getattr(getattr(op.input, "op", None), "sym_name", None), "data", None)
            == name
        )
    ]
    return dense_to_numpy(fq.exp).astype(np.int64).reshape(-1).tolist()


@pytest.mark.parametrize("kind", ["conv", "linear"])
@pytest.mark.parametrize("bias_bits", [4, 8])
def test_a_per_tensor_bias_takes_the_smallest_cap(kind: str, bias_bits: int) -> None:
    torch.manual_seed(0)
    layer = nn.Conv1d(2, 3, 3) if kind == "conv" else nn.Linear(5, 3)
    with torch.no_grad():
        scale = torch.tensor([8.0, 1.0, 1 / 8])
        layer.weight.mul_(scale.reshape(3, *(1,) * (layer.weight.dim() - 1)))
        layer.bias.copy_(torch.tensor([1e-4, -2e-4, 3e-4]))  # far finer than any cap
    x = torch.randn(4, 2, 7) if kind == "conv" else torch.randn(4, 5)
    module = nanoir.from_torch(layer.eval(), x)
    rule = f"bias@.*={bias_bits}/pt"
    # (no bias correction: it would replace the tiny biases the case is about)
    nanoir.quantize(module, [x.numpy()], bias_bits=bias_bits, rules=(rule,), bias_correction=False)
    (kx,), kw = exps(module, None), exps(module, "weight")
    assert len(set(kw)) == 3  # the case: the channels' caps differ
    assert exps(module, "bias") == [min(kx + k for k in kw)]
    hw = lower_to_hw(module.clone())
    for v in (x.numpy(), 4 * x.numpy()):
        (want,) = run(module, v, dtype=np.float64)
        (got,) = run(hw, v)
        assert got.tobytes() == want.tobytes()
