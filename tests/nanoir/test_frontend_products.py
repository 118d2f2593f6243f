"""The torch frontend's products (``nanoir/frontend/products.py``, issue 30 §7): a division by
a constant that is no power of two is a product by its reciprocal, and torch's hardswish
written out (``x * relu6(x + 3) / 6`` in any association, ``x * hardsigmoid(x)``) is one
``nf.hardswish``.

Each network: the nf program against torch in float64 (the oracle), the ops it holds, then
quantized, lowered, and nq == nh bit for bit. lower-to-hw refused ``x / 6`` before ("reciprocal
is not a dyadic rational").

Mutants seen to fail it (applied in place and restored):
- ``reciprocal_of_divisor`` returning None always (divisions stay): test_division_by_a_constant
  (``x / 6`` keeps its nf.div; lower-to-hw refuses it);
- the power-of-two test dropped (``x / 8`` made a product): test_division_by_a_constant
  (counts nf.div 0, expected 1);
- ``_near(coefficient, 1 / 6)`` as ``_near(coefficient, 1.0)``: test_hardswish_forms (no
  nf.hardswish for the relu6 forms).
(torch has no hardsigmoid of another alpha; Paddle's alpha = 0.2 gate is tested on the ONNX
reader: tests/grammar/test_onnx_products.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nanoir

torch.set_num_threads(1)


def _probe(fn):
    return type("Probe", (nn.Module,), {"forward": lambda self, x: fn(x)})()


class ByBuffer(nn.Module):
    """``x / self.scale``: a per-channel constant divisor (one value a power of two)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([2.0, 3.0, 6.0]).reshape(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.scale


def _ops(module: object, name: str) -> int:
    return str(module).count(f" {name} ")


def _check(model: nn.Module, x: np.ndarray) -> object:
    """nf against torch (float64), then nq == nh after quantize and lower-to-hw; the module."""
    module = nanoir.from_torch(model, torch.from_numpy(x))
    with torch.no_grad():
        want = model.double()(torch.from_numpy(x).double()).numpy()
    (got,) = nanoir.run(module, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    nanoir.quantize(module, [x], progress=False)
    (nq,) = nanoir.run(module, x)
    (nh,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)
    assert np.asarray(nq, np.float64).tobytes() == np.asarray(nh, np.float64).tobytes()
    return module


def _input(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((2, 3, 5, 5)) * 3).astype(np.float32)


DIVISIONS = {
    "x / 6": (lambda x: x / 6, 0),
    "torch.div(x, 3)": (lambda x: torch.div(x, 3), 0),
    "x / 0.3": (lambda x: x / 0.3, 0),
    "x / 8 (exact)": (lambda x: x / 8, 1),
    "x / -0.5 (exact)": (lambda x: x / -0.5, 1),
}


@pytest.mark.parametrize("name", DIVISIONS)
def test_division_by_a_constant(name: str) -> None:
    fn, divisions = DIVISIONS[name]
    module = _check(_probe(lambda x: torch.relu(fn(x))), _input())
    assert _ops(module, "nf.div") == divisions


def test_division_by_a_buffer() -> None:
    module = _check(ByBuffer(), _input(1))
    assert _ops(module, "nf.div") == 0
    assert '"scale.reciprocal"' in str(module)


HARDSWISH_FORMS = {
    "x * relu6(x + 3) / 6": lambda x: x * F.relu6(x + 3) / 6,
    "x * (relu6(x + 3) / 6)": lambda x: x * (F.relu6(x + 3) / 6),
    "relu6(x + 3) * x / 6": lambda x: F.relu6(3 + x) * x / 6,
    "x * clamp(x + 3, 0, 6) * (1/6)": lambda x: x * torch.clamp(x + 3, 0, 6) * (1 / 6),
    "x * hardtanh(x + 3, 0, 6) / 6": lambda x: x * F.hardtanh(x + 3, 0.0, 6.0) / 6,
    "x * hardsigmoid(x)": lambda x: x * F.hardsigmoid(x),
    "hardsigmoid(x) * x": lambda x: F.hardsigmoid(x) * x,
}


@pytest.mark.parametrize("name", HARDSWISH_FORMS)
def test_hardswish_forms(name: str) -> None:
    module = _check(_probe(HARDSWISH_FORMS[name]), _input(2))
    assert _ops(module, "nf.hardswish") == 1
    for op in ("nf.mul", "nf.div", "nf.clamp", "nf.hardsigmoid"):
        assert _ops(module, op) == 0, (op, str(module))


NOT_HARDSWISH = {
    "x * relu6(x + 2) / 6": lambda x: x * F.relu6(x + 2) / 6,
    "x * relu6(x + 3) / 5": lambda x: x * F.relu6(x + 3) / 5,
    "x * hardsigmoid(x - 1)": lambda x: x * F.hardsigmoid(x - 1),
    "relu(x) * hardsigmoid(x)": lambda x: torch.relu(x) * F.hardsigmoid(x),
    "Paddle's gate, alpha 0.2, on x": lambda x: x * torch.clamp(0.2 * x + 0.5, 0, 1),
    "SE gate on another tensor": lambda x: torch.tanh(x) * F.hardsigmoid(x),
}


@pytest.mark.parametrize("name", NOT_HARDSWISH)
def test_not_hardswish(name: str) -> None:
    module = _check(_probe(NOT_HARDSWISH[name]), _input(3))
    assert _ops(module, "nf.hardswish") == 0
