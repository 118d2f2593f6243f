"""Defaults for 2-bit weights: learned (``lsq``) exponents started from the ``absmax`` rule.

At 2 bits a weight has four codes (-2..1 steps), and where its exponent sits decides most of
what the layer computes. NanoEngine's learner gets it wrong there (measured on
``benchmarks/bench_qat_kws.py``, ``benchmarks/qat_kws_results.md``): the ``ema`` learner moves
the exponent towards the absmax rule at every training step, whatever calibration chose, so
training cannot move a step that zeroes too many weights. So a 2-bit weight whose learner the
caller did not choose (no ``learner=`` option, no rule naming one for it) gets :data:`LEARNER`
at :data:`RATE`, and, unless a ``calibrator`` was given, its exponents start from
:data:`CALIBRATOR` (in :func:`nanoir.qat.prepare` and :func:`nanoir.qat.calibrate`) whatever
the calibrator of the other tensors. Other bit widths, activations and named learners keep the
NanoEngine defaults, and ``prepare(bias_correction=False)``, the configuration that reproduces
NanoEngine-PyTorch step for step, keeps them for every tensor.

The start is ``absmax`` (the largest weight on the top code, so every weight under a quarter
of the largest is 0), not ``mse`` (the least squared error per channel, about half the codes 0),
although ``mse`` gives the better post-training accuracy when the first and last layers keep 8
bits. After QAT (issue 30 §9, ``benchmarks/qat_kws_results.md``, 3 seeds): under ``trunc``,
absmax led on both layer configurations (every weight at 2 bits; first and last at 8) with 3
conv blocks (+1.83, +0.17 points) and with 4 (+0.13, +0.37); under ``half_even`` it led or tied
except with every weight at 2 bits on 4 blocks (-0.23, inside the seed spread). Brevitas's
max-based power-of-two quantizer also beats its MSE-started one. From that start, on 3 blocks,
lsq at 0.01 led ``ema`` and lsq at 0.05 under ``trunc`` on both configurations; under
``half_even`` ``ema`` led with every weight at 2 bits (97.23 against 95.80).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from nanoir.lowering import quantize as qz
from nanoir.qat.quantizer import Quantizer

__all__ = ["BITS", "CALIBRATOR", "LEARNER", "RATE", "apply", "calibrator_exponents"]

BITS = 2
"""The weight width the defaults apply to."""
LEARNER, RATE = "lsq", 0.01
"""The learner and its rate (the exponent's Adam rate; lsq's usual one). At 0.05 the
exponents flip between neighbours: on a small MLP fitted for 30 steps the output lost 1-5 dB
where 0.01 gained 0.1-1.3 over the start."""
CALIBRATOR = "absmax"
"""Its initial exponents' calibrator (``mse`` before issue 30 §9's measurement)."""


def _named_learner(config: qz.QuantConfig, name: str) -> bool:
    """Whether the first rule matching the weight ``name`` names a learner or a rate."""
    for rule in config.rules:
        if rule.matches(name, "weight"):
            return rule.learner is not None or rule.lr is not None
    return False


def apply(qat: Any, options: Mapping[str, Any]) -> list[str]:
    """Give ``qat``'s 2-bit weights the low-bit defaults where ``options`` (``prepare``'s)
    leave them open: the learner, and (no ``calibrator`` given) :data:`CALIBRATOR` exponents
    from the current weights, recorded on ``qat`` for :func:`calibrator_exponents`. Returns
    the names of the weights whose learner changed."""
    if not getattr(qat, "bias_correction", False):  # NanoEngine-PyTorch's configuration
        qat.low_bit_start = []
        return []
    learner_given = "learner" in options or "lr" in options
    calibrator_given = "calibrator" in options
    changed: list[str] = []
    start: list[str] = []
    for key, q in list(qat.quantizers.items()):
        if q.kind != "weight" or q.bits != BITS:
            continue
        if not calibrator_given:
            start.append(q.name)
        if learner_given or _named_learner(qat.config, q.name) or q.learner == LEARNER:
            continue
        new = Quantizer(
            q.name,
            q.kind,
            q.bits,
            q.exp_shape,
            q.axis,
            q.rounding,
            LEARNER,
            RATE,
            q.n,
            q.signed,
        )
        new.set_exponents(q.int_exponents().reshape(-1))
        qat.quantizers[key] = new
        changed.append(q.name)
    qat.low_bit_start = start
    for name, record in calibrator_exponents(qat).items():
        qat.quantizer(name).set_exponents(record["exp"])
    return changed


def calibrator_exponents(qat: Any) -> dict[str, dict[str, Any]]:
    """The :data:`CALIBRATOR` exponents of the current values of the weights :func:`apply`
    recorded, as ``quantize(exponents=...)`` records (``{"exp", "bits", "rounding", "axis"}``)."""
    out: dict[str, dict[str, Any]] = {}
    for name in getattr(qat, "low_bit_start", ()):
        q = qat.quantizer(name)
        x = qat.tensor(name).detach().cpu().double().numpy()
        k = qz.tensor_exps(x, q.bits, q.axis, CALIBRATOR, q.rounding)
        out[name] = {
            "exp": [int(v) for v in np.asarray(k).reshape(-1)],
            "bits": q.bits,
            "rounding": str(q.rounding),
            "axis": q.axis,
        }
    return out
