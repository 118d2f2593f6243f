"""``nanoir.fold_bn`` and quantize's folding of batch norms (issue 30 §4).

``nanoir.quantize`` folds every batch norm that folds into the conv or linear before it, as
``compile_model`` always did: a program from ``from_torch`` or ``nanoir.load`` no longer keeps
Conv and BatchNormalization apart (PaddleOCR's classifier: 5.6 dB unfolded, 33.0 folded).
The oracle for the folded program is torch's unfolded model in eval mode.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import nanoir
from nanoir.testing import randomize_batch_norm


class ConvBnNet(nn.Module):
    """Two conv + BN blocks (one BN after a ReLU, which does not fold), a linear + BN1d head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.conv2, self.bn2 = nn.Conv2d(6, 6, 3, groups=2, bias=False), nn.BatchNorm2d(6)
        self.lone = nn.BatchNorm2d(6)
        self.fc, self.bn3 = nn.Linear(6, 4), nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.lone(torch.relu(self.bn2(self.conv2(x))))
        return self.bn3(self.fc(x.mean((2, 3))))


def model() -> nn.Module:
    torch.manual_seed(0)
    return randomize_batch_norm(ConvBnNet(), 0).eval()


def batch_norms(module: object) -> int:
    return sum(op.name == "nf.batch_norm" for op in module.walk())  # type: ignore[attr-defined]


def program() -> object:
    return nanoir.from_torch(model(), (torch.zeros(2, 3, 8, 8),))


def test_folded_program_computes_the_torch_model() -> None:
    """kills (each seen failing): ``A = γ·√(σ²+ε)`` instead of ``γ/√(σ²+ε)``, the sign of
    ``B`` flipped, the layer's old bias dropped."""
    module = program()
    assert batch_norms(module) == 4
    assert nanoir.fold_bn(module) == 3  # the one after a ReLU stays
    assert batch_norms(module) == 1
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = model()(torch.from_numpy(x)).numpy()
    (got,) = nanoir.run(module, x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert nanoir.fold_bn(module) == 0  # nothing left that folds


def test_fold_bn_takes_a_program() -> None:
    with pytest.raises(nanoir.Error, match="fold_bn takes a program"):
        nanoir.fold_bn("model.mlir")  # type: ignore[arg-type]


def calibration() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((4, 3, 8, 8)) for _ in range(2)]


def test_quantize_folds_and_fold_bn_false_keeps_them() -> None:
    """The quantized program's conv weights are ``nanoir.fold_bn``'s. kills: quantize not
    folding (four batch norms left), folding whatever ``fold_bn`` says."""
    folded, kept = program(), program()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nanoir.QuantizationWarning)
        nanoir.quantize(folded, calibration())
        nanoir.quantize(kept, calibration(), fold_bn=False)
    assert batch_norms(folded) == 1 and batch_norms(kept) == 4
    reference = program()
    nanoir.fold_bn(reference)
    # The folded weights are what quantize's weight fake-quants read (before the gain
    # correction scales them: its record, nq.uncorrected, holds the folded value).
    weights = {
        op.sym_name.data: op.attributes.get("nq.uncorrected", op.value)
        for op in folded.walk()  # type: ignore[attr-defined]
        if op.name == "nf.constant" and op.sym_name is not None
    }
    for op in reference.walk():  # type: ignore[attr-defined]
        if op.name == "nf.constant" and op.sym_name is not None and "conv" in op.sym_name.data:
            if op.sym_name.data.endswith("weight"):
                assert weights[op.sym_name.data] == op.value


def test_nanoir_opt_quantize_fold_bn_option(tmp_path) -> None:
    from nanoir.cli.opt import main as opt_main

    source = tmp_path / "net.mlir"
    source.write_text(str(program()))
    data = tmp_path / "cal.npy"
    np.save(data, np.concatenate(calibration()))
    for option, expected in (("", 1), (" fold_bn=false", 4)):
        out = tmp_path / "q.mlir"
        rc = opt_main(
            [str(source), "-p", f'quantize{{calibration="{data}"{option}}}', "-o", str(out)]
        )
        assert rc == 0
        assert out.read_text().count("nf.batch_norm") == expected
