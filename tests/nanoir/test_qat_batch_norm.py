"""QAT computes quantize's dyadic affine for a lone batch norm (issue 20, section 3).

A BN fold-bn cannot fold (after a concat) stays in the QAT module; ``convert`` gives it the
dyadic affine of ``lowering/quantize_bn.py``, and the module computes the same one at every
forward (``nanoir.qat.batch_norm``). Oracles: the converted nq program run by nanoir's NumPy
interpreter in float64 against the module's torch forward, and the lowered nh program against
the nq program, both bit for bit; and torch's float BN (the module's output SQNR).

Needs torch (the ``torch`` extra) and hypothesis (the ``test`` extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nanoir
from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")

from nanoir.dialects import nf  # noqa: E402

from nanoir import qat  # noqa: E402
from nanoir.testing.lone_bn import ConcatBnNet, random_statistics, set_batch_norm  # noqa: E402

H = 6


def _trained(seed: int, learner: str, rounding: str, steps: int) -> tuple[qat.QATModule, Any]:
    torch.manual_seed(seed)
    model = set_batch_norm(ConcatBnNet(4), random_statistics(np.random.default_rng(seed), 8))
    model.eval()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 3, H, H)).astype(np.float32)
    q = qat.prepare(model, (torch.from_numpy(x[:2]),), learner=learner, rounding=rounding, lr=0.5)
    qat.calibrate(q, [x[:3], x[3:]])
    gen = torch.Generator().manual_seed(seed)
    xt = torch.from_numpy(x)
    opt = torch.optim.Adam(q.param_groups(0.02))
    q.train()
    for _ in range(steps):
        out = q(xt)
        loss = (out - torch.randn(out.shape, generator=gen)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    q.eval()
    return q, model


@settings(
    max_examples=examples(2),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**16),
    learner=st.sampled_from(("ema", "lsq")),
    rounding=st.sampled_from(("trunc", "half_even")),
)
def test_lone_bn_converts_exactly_and_lowers(seed: int, learner: str, rounding: str) -> None:
    """Prepare, calibrate, train 2 steps, convert: the converted program has the lone BN (not
    folded), equals the module bit for bit on float64 inputs, lowers, and nq == nh. Mutants
    seen to fail it: ``BatchNormStep`` computing the float BN (convert != module);
    ``convert`` not calling ``make_dyadic`` (convert != module, and the float BN's refusal
    "no integer affine" where it has no affine)."""
    q, _ = _trained(seed, learner, rounding, steps=2)
    module = qat.convert(q)
    assert any(isinstance(op, nf.BatchNormOp) for op in module.walk())
    x = np.random.default_rng(seed + 1).standard_normal((3, 3, H, H))
    expected = qat.evaluate(q, x)
    (got,) = nanoir.run(module, x)
    assert np.array_equal(got, expected), np.abs(got - expected).max()
    hw = nanoir.lower_to_hw(module.clone())
    (integers,) = nanoir.run(hw, x)
    assert np.array_equal(integers, got)


def test_calibrated_module_is_close_to_torch() -> None:
    """Calibrated, untrained: the module's output is torch's float net's within 8-bit
    quantization (SQNR > 20 dB, NumPy here): the snapped affine is the BN's, not another."""
    q, model = _trained(0, "ema", "trunc", steps=0)
    x = np.random.default_rng(7).standard_normal((4, 3, H, H))
    with torch.no_grad():
        ref = model(torch.from_numpy(x).float()).double().numpy()
    got = qat.evaluate(q, x)
    sqnr = 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2))
    assert sqnr > 20
