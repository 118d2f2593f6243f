"""quantize's check (issue 30 §3): a collapsed output is never silent.

Networks built to collapse: a chain of gated products ``h * sigmoid(h)`` at 2 bits with
NanoEngine's truncation, whose quantized output is 0 everywhere (each product lands below one
step of the grid calibrated on its float range), and a softmax classifier behind it that
answers the same to every input. The oracle for what the quantized program computes is
``nanoir.run`` of it beside torch's float model, compared in NumPy here; the check is what is
under test. The test networks stay silent on their calibration data.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import nanoir
from nanoir.cli.opt import main as opt_main
from nanoir.testing import TEST_MODELS, make_test_model

COLLAPSE = {"rules": ("act@.*=2",), "calibrator": "absmax", "bias_correction": False}
"""Options under which :class:`Gated` collapses (2-bit activations, absmax, truncation; by a
rule, so that no default width for gated products applies)."""
COLLAPSE_RULES = {"calibrator": "absmax", "bias_correction": False}


class Gated(nn.Module):
    """``h = h * sigmoid(h)``, ``n`` times: the gated products of hardswish, SE and SiLU."""

    def __init__(self, n: int = 2) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(self.n):
            h = h * torch.sigmoid(h)
        return h


class GatedClassifier(nn.Module):
    """:class:`Gated` then a 2-class linear head and a softmax, logits varying by ~0.2."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = Gated(1)
        self.head = nn.Linear(16, 2)
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            self.head.weight.copy_(0.1 * torch.randn(2, 16, generator=g))
            self.head.bias.copy_(torch.tensor([0.3, -0.2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(self.gate(x)), dim=1)


def uniform_batches(n: int = 2, rows: int = 8, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.0, 1.0, (rows, 16)) for _ in range(n)]


def quantized(model: nn.Module, batches: list[np.ndarray], **options: object) -> list[str]:
    """Quantize ``model``'s program on ``batches``; the QuantizationWarnings' messages."""
    module = nanoir.from_torch(model, (torch.zeros(2, 16),))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nanoir.quantize(module, batches, **options)
    quantized.module = module  # type: ignore[attr-defined]
    return [str(w.message) for w in caught if issubclass(w.category, nanoir.QuantizationWarning)]


def run_all(module: object, batches: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(nanoir.run(module, b)[0], np.float64) for b in batches])


def torch_all(model: nn.Module, batches: list[np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate(
            [model(torch.from_numpy(b).float()).double().numpy() for b in batches]
        )


def test_gated_chain_all_zero_warns_naming_output_layer_and_remedy() -> None:
    """kills: no check at the end of quantize; the all-zero case reported as a plain low SQNR;
    the layer chosen as the lowest SQNR on the path (the program input at 6.1 dB, then the
    product at 0 dB: the fall is at the product, 6.1 -> 0.0); the remedies left out."""
    batches = uniform_batches()
    model = Gated(2)
    messages = quantized(model, batches, **COLLAPSE)
    q, f = run_all(quantized.module, batches), torch_all(model, batches)  # type: ignore[attr-defined]
    assert not q.any() and f.any()  # the oracle: it did collapse
    assert len(messages) == 1, messages
    (m,) = messages
    assert m.startswith("quantize: output 0 (%mul) is all zero on the calibration data")
    assert "SQNR 0.0 dB against float" in m
    assert "falls most at mul (nf.mul): 6.1 dB -> 0.0 dB" in m
    assert 'rounding="half_even"' in m and "act@^mul$=16" in m and "nanoir.qat" in m


def test_strict_raises_naming_the_output() -> None:
    """kills: strict ignored (a warning instead of the error), or raised without the output."""
    module = nanoir.from_torch(Gated(2), (torch.zeros(2, 16),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", nanoir.QuantizationWarning)  # no warning either
        with pytest.raises(nanoir.Error, match=r"output 0 \(%mul\) is all zero"):
            nanoir.quantize(module, uniform_batches(), strict=True, **COLLAPSE)


def test_strict_without_calibration_data_is_refused() -> None:
    module = nanoir.from_torch(Gated(1), (torch.zeros(2, 16),))
    with pytest.raises(nanoir.Error, match="strict=True checks .* calibration"):
        nanoir.quantize(module, None, strict=True, exponents={})


def test_constant_classifier_warns_even_above_the_sqnr_threshold() -> None:
    """The gate collapses to 0, so the head answers softmax(bias) to every input: high SQNR
    (the float probabilities stay near it) yet no information. kills: the constant case
    dropped (only a low SQNR reported)."""
    batches = uniform_batches()
    model = GatedClassifier()
    messages = quantized(model, batches, rules=("act@^(x|gate)$=2",), **COLLAPSE_RULES)
    q, f = run_all(quantized.module, batches), torch_all(model, batches)  # type: ignore[attr-defined]
    assert (q == q[0]).all() and not (f == f[0]).all()  # the oracle: constant, float varies
    sqnr = 10 * math.log10(np.sum(f**2) / np.sum((q - f) ** 2))
    assert sqnr > 6.0  # so only the constant rule can fire
    assert len(messages) == 1, messages
    assert "is the same for every calibration input while the float output varies" in messages[0]
    assert f"SQNR {sqnr:.1f} dB" in messages[0]


def test_sqnr_threshold_pooled_over_batches() -> None:
    """The threshold (``min_sqnr``) against the output SQNR over all batches pooled, computed
    here from ``nanoir.run`` and torch: just above it warns, just below is silent. The two
    batches have different scales, so a mean of per-batch SQNRs or a float output paired with
    the wrong batch gives another figure. kills: per-batch averaging, misaligned float
    outputs, the threshold ignored or compared the wrong way."""
    rng = np.random.default_rng(1)
    batches = [rng.uniform(0.0, 1.0, (8, 16)), rng.uniform(0.0, 0.3, (8, 16))]
    model = Gated(1)
    messages = quantized(model, batches, rules=("act@.*=4",), bias_correction=False)
    assert messages == []
    q, f = run_all(quantized.module, batches), torch_all(model, batches)  # type: ignore[attr-defined]
    sqnr = 10 * math.log10(np.sum(f**2) / np.sum((q - f) ** 2))
    assert 6.0 < sqnr < 40.0
    above = quantized(
        model, batches, rules=("act@.*=4",), bias_correction=False, min_sqnr=sqnr + 0.05
    )
    assert len(above) == 1 and f"has SQNR {sqnr:.1f} dB against float" in above[0]
    below = quantized(
        model, batches, rules=("act@.*=4",), bias_correction=False, min_sqnr=sqnr - 0.05
    )
    assert below == []


def test_bad_min_sqnr_is_refused() -> None:
    module = nanoir.from_torch(Gated(1), (torch.zeros(2, 16),))
    for bad in ("6", float("nan"), True):
        with pytest.raises(nanoir.Error, match="min_sqnr"):
            nanoir.quantize(module, uniform_batches(), min_sqnr=bad)


def test_imported_exponents_are_checked_too() -> None:
    """Every activation exponent imported: calibration runs no float program, so the check
    runs it itself. kills: the check skipped when calibration kept no float outputs."""
    batches = uniform_batches()
    model = Gated(1)
    module = nanoir.from_torch(model, (torch.zeros(2, 16),))
    exponents = {"x": 1, "sigmoid": 1, "mul": 1}  # steps of 1/2: the product is below one
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nanoir.quantize(module, batches, exponents=exponents, **COLLAPSE)
    assert not run_all(module, batches).any() and torch_all(model, batches).any()
    found = [w for w in caught if issubclass(w.category, nanoir.QuantizationWarning)]
    assert len(found) == 1 and "output 0 (%mul) is all zero" in str(found[0].message)


def test_compile_model_warns_and_strict_raises() -> None:
    batches = uniform_batches()
    x = (torch.zeros(2, 16),)
    with pytest.warns(nanoir.QuantizationWarning, match="output 0"):
        nanoir.compile_model(Gated(2), x, batches, stop="nq", **COLLAPSE)
    with pytest.raises(nanoir.Error, match="output 0"):
        nanoir.compile_model(Gated(2), x, batches, stop="nq", strict=True, **COLLAPSE)


@pytest.mark.parametrize("name", sorted(TEST_MODELS))
def test_silent_on_the_test_models(name: str) -> None:
    """The test networks with their calibration data (N(0, 1), the tests' usual inputs) and
    the default options: no output collapses (strict: a collapse would raise here)."""
    torch.manual_seed(0)
    model = make_test_model(name)
    shape = (1, 3, 32, 32) if name == "ResNet18" else tuple(model.make_example_input(1).shape)
    module = nanoir.from_torch(model, (torch.randn(2, *shape[1:]),))
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((2, *shape[1:])) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", nanoir.QuantizationWarning)
        nanoir.quantize(module, batches, strict=True)


def test_cli_warns_on_stderr_and_strict_fails(tmp_path, capsys) -> None:
    """nanoir-opt: the warning is one line on stderr and the program is written (exit 0);
    ``quantize{strict=true}`` exits 1 with the error and writes nothing."""
    module = nanoir.from_torch(Gated(2), (torch.zeros(2, 16),))
    source = tmp_path / "gated.mlir"
    source.write_text(str(module))
    data = tmp_path / "cal.npy"
    np.save(data, np.concatenate(uniform_batches()))
    options = f'calibration="{data}" rules="act@.*=2" calibrator="absmax" bias_correction=false'
    out = tmp_path / "q.mlir"
    rc = opt_main([str(source), "-p", f"quantize{{{options}}}", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0 and out.exists()
    assert err.startswith("nanoir-opt: warning: quantize: output 0 (%mul) is all zero")
    assert err.count("\n") == 1
    strict = tmp_path / "strict.mlir"
    rc = opt_main([str(source), "-p", f"quantize{{{options} strict=true}}", "-o", str(strict)])
    err = capsys.readouterr().err
    assert rc == 1 and not strict.exists()
    assert "output 0 (%mul) is all zero" in err and "warning" not in err


def test_qat_convert_checks_on_data() -> None:
    """``nanoir.qat.convert(qat, data)`` checks the converted program as quantize does; without
    data it cannot, and strict then refuses. kills: convert ignoring data."""
    batches = uniform_batches()
    qat = nanoir.qat.prepare(
        Gated(2), (torch.zeros(2, 16),), rules=("act@.*=2",), calibrator="absmax"
    )
    nanoir.qat.calibrate(qat, batches)
    with pytest.warns(nanoir.QuantizationWarning, match="output 0 .* all zero"):
        nanoir.qat.convert(qat, batches)
    with pytest.raises(nanoir.Error, match="output 0"):
        nanoir.qat.convert(qat, batches, strict=True)
    with pytest.raises(nanoir.Error, match="strict=True"):
        nanoir.qat.convert(qat, strict=True)


@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(0, 40),
    specials=st.lists(st.sampled_from([np.inf, -np.inf, np.nan, 1e200]), max_size=3),
)
def test_finite_energies_equal_masked_sums(seed: int, size: int, specials: list[float]) -> None:
    """The locating step's signal and noise sums skip non-finite positions, as a mask does.

    kills: the masked fallback dropped (an inf in the float program poisons every sum),
    the noise taken as ``sum(q²)``."""
    from nanoir.lowering.quantize import finite_energies

    rng = np.random.default_rng(seed)
    f, q = rng.normal(0, 3, size), rng.normal(0, 3, size)
    for value in specials if size else []:
        (f if rng.integers(2) else q)[rng.integers(size)] = value
    ok = np.isfinite(f) & np.isfinite(q)
    want_s = math.fsum(v * v for v in f[ok])
    want_n = math.fsum((a - b) ** 2 for a, b in zip(q[ok], f[ok], strict=True))
    s, n = finite_energies(f, q)
    assert s == pytest.approx(want_s, rel=1e-12, abs=1e-300)
    assert n == pytest.approx(want_n, rel=1e-12, abs=1e-300)
