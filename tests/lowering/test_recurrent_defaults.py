"""LSTM and GRU defaults (issue 30 §6): TFLite's / CMSIS-NN's integer LSTM recipe, 16-bit gate
pre-activations and cell, 8-bit weights and hidden state, unless a rule names a grid.

Oracles: torch's float LSTM/GRU for the output error, the nq program run in float64 for nh
(bit for bit) and for the ``.ne`` round trip (written, read back, run again).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from xdsl.dialects.builtin import ModuleOp

import nanoir
import nanoir.qat

MODES = ("lstm", "gru")


class _Reader(torch.nn.Module):
    """A linear layer into a bidirectional recurrent layer, its sequence output returned."""

    def __init__(self, mode: str):
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
        self.rnn = cls(8, 10, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(self.a(x))[0]


@functools.cache
def _model(mode: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = _Reader(mode).eval()
    with torch.no_grad():  # gates that use their range, as a trained cell's do
        for p in model.rnn.parameters():
            p.mul_(3.0)
    return model


def _data(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 6, 6)).astype(np.float32) for _ in range(n)]


@functools.cache
def _float_program(mode: str) -> ModuleOp:
    """The nf program of ``_model(mode)`` (torch.export of a recurrent layer takes seconds)."""
    return nanoir.from_torch(_model(mode), (torch.from_numpy(_data(0, 1)[0]),))


def _quantized(mode: str, **options: object) -> ModuleOp:
    module = _float_program(mode).clone()
    nanoir.quantize(module, _data(0, 3), progress=False, **options)
    return module


def _op(module: ModuleOp) -> nf.RecurrentOp:
    (op,) = [op for op in module.walk() if isinstance(op, nf.RecurrentOp)]
    return op


def _bits(module: ModuleOp) -> dict[str, int]:
    op = _op(module)
    grids = {k: op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL}
    bits = {k: g.bits for k, g in grids.items() if g is not None}
    for fq in module.walk():
        if isinstance(fq, FakeQuantOp) and (fq.input.name_hint or "").startswith("rnn.weight"):
            bits["weights"] = fq.bits.value.data
    return bits


def _sqnr(module: ModuleOp, model: torch.nn.Module) -> float:
    signal = noise = 0.0
    for x in _data(1, 2):
        ref = model(torch.from_numpy(x)).detach().numpy().astype(np.float64)
        (y,) = nanoir.run(module, x)
        signal += float(np.sum(ref**2))
        noise += float(np.sum((np.asarray(y) - ref) ** 2))
    return 10 * np.log10(signal / noise)


@pytest.mark.parametrize("mode", MODES)
def test_default_grids_are_the_integer_lstm_recipe(mode: str) -> None:
    """8/8 bits: gates and cell 16-bit, hidden state and weights 8-bit; a rule naming the
    gates still sets them (``rnn.gates=8``); 16-bit activations keep 16-bit gates. The
    default's output error against torch is below the 8-bit gates' (by at least 3 dB here).

    Kills: ``GATE_BITS = 8`` (gates 8-bit by default); the rule check after the default
    (``rnn.gates=8`` ignored: 16)."""
    model = _model(mode)
    default = _quantized(mode)
    want = {"gates": 16, "cell": 16, "hidden": 8, "weights": 8}
    assert _bits(default) == want
    eight = _quantized(mode, rules=(r"rnn\.gates=8",))
    assert _bits(eight) == {**want, "gates": 8}
    assert _sqnr(default, model) > _sqnr(eight, model) + 3.0
    assert _bits(_quantized(mode, act_bits=16))["gates"] == 16


@pytest.mark.parametrize("mode", MODES)
def test_default_grids_lower_and_write_ne_exactly(mode: str) -> None:
    """The default program lowers with nq == nh bit for bit, its nh.recurrent keeps 16-bit
    gates, and the ``.ne`` file written from nh reads back to a program that runs the same
    codes."""
    module = _quantized(mode, rounding="half_even")
    x = _data(2, 1)[0]
    want = nanoir.run(module, x)
    hw = nanoir.lower_to_hw(module.clone())
    got = nanoir.run(hw, x)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    text = export_nanoengine(hw)
    assert "gates" in text
    back = import_nanoengine(text)
    again = nanoir.run(back, x)
    assert all(np.array_equal(g, w) for g, w in zip(again, want, strict=True))


def test_qat_follows_the_defaults() -> None:
    """QAT's internal grids are quantize's: ``prepare`` + ``calibrate`` + ``convert`` give
    16-bit gates, and the converted program runs as the module in eval mode, bit for bit.

    Kills: ``GATE_BITS = 8``."""
    model = _model("lstm")
    calibration = _data(0, 3)
    module = nanoir.from_torch(model, (torch.from_numpy(calibration[0]),), dynamic_batch=False)
    q = nanoir.qat.prepare(module, (torch.from_numpy(calibration[0]),), bias_correction=False)
    nanoir.qat.calibrate(q, calibration)
    converted = nanoir.qat.convert(q)
    assert _bits(converted)["gates"] == 16
    x = torch.from_numpy(_data(3, 1)[0]).to(torch.float64)
    q.eval()
    with torch.no_grad():
        y = q(x).numpy()
    (z,) = nanoir.run(converted, x.numpy())
    np.testing.assert_array_equal(np.asarray(z), y)
