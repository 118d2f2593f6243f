"""Kernels of the nq dialect: ``nq.fake_quant`` with the exact semantics of
:func:`nanoir.runtime.numerics.quant.fake_quant` (float64, trunc toward zero by default;
``signed = false`` clamps to the unsigned codes ``0 .. 2**b - 1``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.runtime.base import Builder, Kernel
from nanoir.runtime.numerics.quant import fake_quant as quant_fake_quant
from xdsl.ir import Operation


def fake_quant(op: FakeQuantOp, dtype: np.dtype[Any]) -> Kernel:
    bits, mode, signed = op.bits.value.data, op.rounding_mode, op.is_signed
    exp = dense_to_numpy(op.exp).astype(np.int64)
    return lambda x: (
        quant_fake_quant(x, bits, exp, mode, signed=signed).astype(dtype, copy=False),
    )


NQ_BUILDERS: dict[type[Operation], Builder] = {FakeQuantOp: fake_quant}
