"""``nanoir.report`` on a bias-corrected program: "vs float" means the float network quantize
was given (the ``nq.uncorrected`` values), not the corrected biases under the fake-quants."""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.lowering.quantize import UNCORRECTED, restore_uncorrected
from torch import nn
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.context import make_context


def _net() -> nn.Module:
    """Conv + BN + ReLU twice, a bias-less conv, a linear: 4-bit ``trunc`` shrinks every layer,
    so bias correction moves the biases far."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 1, bias=False),
        nn.Flatten(),
        nn.Linear(8 * 6 * 6, 5),
    ).eval()


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    """SQNR in dB, written here (not the report's ``sqnr_db``)."""
    return 10.0 * math.log10(float(np.sum(ref**2)) / float(np.sum((got - ref) ** 2)))


def _strip(module: ModuleOp) -> ModuleOp:
    """The quantized program with its fake-quants removed and nothing else changed."""
    out = module.clone()
    for op in list(out.walk()):
        if isinstance(op, FakeQuantOp):
            op.result.replace_all_uses_with(op.input)
            op.detach()
            op.erase()
    return out


def _programs() -> tuple[ModuleOp, ModuleOp, np.ndarray]:
    model = _net()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((16, 3, 6, 6)).astype(np.float32) for _ in range(2)]
    folded = nanoir.from_torch(model, (torch.from_numpy(calib[0]),))
    FoldBnPass().apply(make_context(), folded)
    quantized = folded.clone()
    nanoir.quantize(quantized, calib, weight_bits=4, act_bits=4, rounding="trunc", progress=False)
    x = rng.standard_normal((32, 3, 6, 6))
    return folded, quantized, x


def test_report_vs_float_is_against_the_original_float_program() -> None:
    """With bias correction on, the report's output SQNR equals the one computed here against
    the ORIGINAL folded nf program (run in float64), and differs by over 0.5 dB from the one
    against the corrected program under the fake-quants (measured: 5.7 dB against the
    original, 4.6 dB against the corrected biases). The ``.mlir`` text keeps the record.

    Mutants caught (in a private copy): ``float_twin`` not calling ``restore_uncorrected``
    (the report gave 4.6 dB); ``correct_biases`` not recording ``nq.uncorrected``."""
    folded, quantized, x = _programs()
    want = nanoir.run(folded, x, dtype=np.float64)[0]
    got = nanoir.run(quantized, x, dtype=np.float64)[0]
    corrected = nanoir.run(_strip(quantized), x, dtype=np.float64)[0]
    vs_original, vs_corrected = _sqnr(want, got), _sqnr(corrected, got)
    assert abs(vs_original - vs_corrected) > 0.5, (vs_original, vs_corrected)
    (reported,) = nanoir.report(quantized, [x]).output_sqnr
    assert math.isclose(reported, vs_original, abs_tol=1e-6), (reported, vs_original)
    (reparsed,) = nanoir.report(nanoir.parse(str(quantized)), [x]).output_sqnr
    assert math.isclose(reparsed, vs_original, abs_tol=1e-6)


def test_restore_uncorrected_gives_back_every_float_bias_and_weight() -> None:
    """Every bias constant of the folded program (and a zero one for the bias-less conv) and
    every weight (gain correction scales them under ``trunc``) is back at its float value, bit
    for bit, after ``restore_uncorrected`` on the stripped program; before it, at least one
    bias and one weight differ (the corrections moved them)."""

    def constants(module: ModuleOp, suffix: str) -> dict[str, np.ndarray]:
        return {
            op.sym_name.data: np.asarray(op.value.get_values(), np.float64)
            for op in module.walk()
            if isinstance(op, nf.ConstantOp)
            and op.sym_name is not None
            and op.sym_name.data.endswith(suffix)
        }

    folded, quantized, _ = _programs()
    stripped = _strip(quantized)
    before = constants(stripped, "bias") | constants(stripped, "weight")
    want = constants(folded, "bias") | constants(folded, "weight")
    assert set(before) - set(want) == {"6.bias"}  # the bias correction added
    want["6.bias"] = np.zeros(8)
    assert any(not np.array_equal(before[k], want[k]) for k in want if k.endswith("bias"))
    assert any(not np.array_equal(before[k], want[k]) for k in want if k.endswith("weight"))
    recorded = sum(UNCORRECTED in op.attributes for op in stripped.walk())
    assert recorded >= len(constants(folded, "bias")) + 1
    assert restore_uncorrected(stripped) == recorded
    after = constants(stripped, "bias") | constants(stripped, "weight")
    assert all(np.array_equal(after[k], want[k]) for k in want), (after, want)
    assert UNCORRECTED not in str(stripped)


def test_ne_and_onnx_drop_the_record(tmp_path: os.PathLike[str]) -> None:
    """``.ne`` (after lower-to-hw) and ONNX (the NanoEngine flavour, trunc rounding) write a
    bias-corrected program without choking on ``nq.uncorrected``, and do not carry it."""
    _, quantized, x = _programs()
    assert UNCORRECTED in str(quantized)
    onnx_path = os.path.join(tmp_path, "m.onnx")
    nanoir.save(quantized, onnx_path, onnx_flavor="nanoengine")
    assert UNCORRECTED not in str(nanoir.load(onnx_path))
    hw = nanoir.lower_to_hw(quantized.clone())
    ne_path = os.path.join(tmp_path, "m.ne")
    nanoir.save(hw, ne_path)
    with open(ne_path) as f:
        assert "uncorrected" not in f.read()
    back = nanoir.load(ne_path)
    np.testing.assert_array_equal(nanoir.run(back, x)[0], nanoir.run(hw, x)[0])
