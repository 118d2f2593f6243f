"""Quantization-aware training: learnable power-of-two exponents in torch, handed to nq.

The API is :mod:`nanoir.qat.api` (``prepare``, ``calibrate``, ``train``, ``convert``, ...; its
docstring explains how it works); :mod:`nanoir.qat.quantizer` holds the fake-quant autograd
function and the exponent learners, :mod:`nanoir.qat.steps` the torch forwards of nf ops,
:mod:`nanoir.qat.distributed` one set of exponents under ``torch.distributed`` and
:mod:`nanoir.qat.checkpoint` ``train``'s resumable checkpoints.
Imports torch (the ``torch`` extra); ``import nanoir`` does not import this package.
"""

from __future__ import annotations

from nanoir.qat.api import (
    QATModule,
    calibrate,
    convert,
    evaluate,
    export_exponents,
    float_program,
    prepare,
    save_exponents,
    train,
)
from nanoir.qat.quantizer import (
    QATError,
    Quantizer,
    fake_quant_value,
    floor_log2,
    round_codes,
)

__all__ = [
    "QATError",
    "QATModule",
    "Quantizer",
    "calibrate",
    "convert",
    "evaluate",
    "export_exponents",
    "fake_quant_value",
    "float_program",
    "floor_log2",
    "prepare",
    "round_codes",
    "save_exponents",
    "train",
]
