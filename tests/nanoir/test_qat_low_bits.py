"""nanoir.qat's defaults for 2-bit weights (``nanoir/qat/low_bits.py``, tracker issue 24 §3).

A 2-bit weight whose learner and calibrator the caller left open starts from the least-squares
power-of-two step and learns it (``lsq``); NanoEngine's rules (``absmax``, the ``ema`` learner)
zero most 2-bit weights and pull the exponent back there at every step. The oracle is NumPy
written here: the power of two with the least squared error, searched over a wide range.

Needs torch (the ``torch`` extra) and hypothesis (the ``test`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from nanoir import qat  # noqa: E402

WEIGHTS = ("0.weight", "2.weight")


def make_net(seed: int, spread: float) -> nn.Module:
    """Linear 16 -> 24, ReLU, Linear 24 -> 6 with normal weights whose rows' scales differ by
    up to ``2**spread``."""
    gen = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 6))
    with torch.no_grad():
        for layer in (net[0], net[2]):
            rows = 2.0 ** (spread * torch.rand(layer.out_features, 1, generator=gen))
            layer.weight.copy_(0.2 * rows * torch.randn(layer.weight.shape, generator=gen))
    return net.eval()


def half_even_2bit(w: np.ndarray, k: int) -> np.ndarray:
    """2-bit codes -2..1 at step ``2**-k``, rounded half to even (NumPy's ``rint``)."""
    return np.clip(np.rint(w * 2.0**k), -2, 1) / 2.0**k


def least_squares_exponents(w: np.ndarray) -> list[int]:
    """Per row, the exponent with the least squared error of ``half_even_2bit``."""
    out = []
    for row in w.astype(np.float64):
        errors = {k: float(((half_even_2bit(row, k) - row) ** 2).sum()) for k in range(-20, 30)}
        out.append(min(errors, key=errors.__getitem__))
    return out


def zero_fraction(q: qat.QATModule, name: str) -> float:
    """The share of the weight ``name`` whose 2-bit code is 0 at the current exponents."""
    w = q.tensor(name).detach().double().numpy()
    k = q.quantizer(name).int_exponents().reshape(-1, 1)
    return float((np.clip(np.rint(w * 2.0**k), -2, 1) == 0).mean())


@settings(max_examples=examples(2), deadline=None)
@given(seed=st.integers(0, 2**16), spread=st.floats(0.0, 4.0))
def test_two_bit_weights_start_from_least_squares_and_learn(seed: int, spread: float) -> None:
    """prepare and calibrate start every 2-bit weight row at the NumPy least-squares exponent,
    learned by ``lsq``; activations keep ``ema``. Mutants seen to fail it (private copy):
    ``low_bits.apply`` not called (absmax exponents, ema), ``CALIBRATOR = "absmax"``,
    ``LEARNER = "ema"``. Not yet checked: calibrate without ``calibrator_exponents``."""
    net = make_net(seed, spread)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(seed))
    q = qat.prepare(net, (x[:2],), weight_bits=2, rounding="half_even")
    for stage in ("prepare", "calibrate"):
        if stage == "calibrate":
            qat.calibrate(q, [x.numpy()])
        for name in WEIGHTS:
            w = net.get_parameter(name).detach().numpy()
            got = q.quantizer(name).int_exponents().reshape(-1).tolist()
            assert got == least_squares_exponents(w), (stage, name)
            assert q.quantizer(name).learner == "lsq"
    assert {v.learner for v in q.quantizers.values() if v.kind == "act"} == {"ema"}


@pytest.mark.parametrize(
    "options",
    [
        {"bias_correction": False},  # NanoEngine-PyTorch's configuration
        {"learner": "ema"},
        {"rules": ("weight@.*=ema",)},
        {"weight_bits": 4},
    ],
)
def test_chosen_learners_and_other_widths_keep_ema(options: dict) -> None:
    """A named learner, another width or ``bias_correction=False`` keeps NanoEngine's ``ema``
    on every weight. Mutant meant to fail it (not yet run): ``apply`` ignoring
    ``learner_given``."""
    net = make_net(0, 1.0)
    options = {"weight_bits": 2, **options}
    q = qat.prepare(net, (torch.zeros(2, 16),), rounding="half_even", **options)
    assert {q.quantizer(name).learner for name in WEIGHTS} == {"ema"}


def trained_zero_fraction(seed: int, **options: object) -> float:
    """The mean share of zero codes over both 2-bit weights after 24 steps of QAT towards
    the float net's outputs."""
    net = make_net(seed, 2.0)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 16, generator=gen)
    with torch.no_grad():
        y = net(x)
    q = qat.prepare(net, (x[:2],), weight_bits=2, rounding="half_even", **options)
    qat.calibrate(q, [x.numpy()])
    batches = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 256, 64)]
    qat.train(q, batches, epochs=6, loss_fn=nn.functional.mse_loss)
    return float(np.mean([zero_fraction(q, name) for name in WEIGHTS]))


def test_two_bit_training_keeps_most_weights_non_zero() -> None:
    """After 24 QAT steps with the defaults at most half the 2-bit codes are 0 (measured
    0.38-0.46 on seeds 0-3); NanoEngine's rules (``ema``, ``absmax``, the old defaults) leave
    more than 55% at 0 (0.57-0.63). Mutants seen to fail it: ``low_bits.apply`` not called,
    ``LEARNER = "ema"``."""
    assert trained_zero_fraction(0) <= 0.5
    assert trained_zero_fraction(0, learner="ema", calibrator="absmax") > 0.55
