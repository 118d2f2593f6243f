"""Kernels of the host boundary: ``nh.to_host`` and ``nh.from_host`` (lower-to-hw{host=true}).

A program partitioned by lower-to-hw holds nh ops (the engine) and, between these two, the nq
program's own nf and ``nq.fake_quant`` ops (the host islands). The executor runs it in float64
(``compile_module`` picks it for a program with host ops; nh kernels compute on integer codes
whatever the dtype), so a host island computes exactly what the nq level computes, and the
boundary ops are exact both ways:

- ``nh.to_host``: codes to their real values ``code * 2**-exp`` (float64, exact);
- ``nh.from_host``: float64 values to the codes of the fake-quant the op stands for (the same
  rounding and saturation as ``nq.fake_quant``; NaN has no code and stops the run).

So the whole mixed program equals the nq program bit for bit, engine parts and host parts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.runtime.base import Builder, Kernel
from nanoir.runtime.nh import dequantize
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

__all__ = ["HOST_BUILDERS", "has_host_ops"]


def to_host(op: nh.ToHostOp, dtype: np.dtype[Any]) -> Kernel:
    t = op.input.type
    assert isinstance(t, TensorType)
    return lambda x: (dequantize(np.asarray(x), t),)


def from_host(op: nh.FromHostOp, dtype: np.dtype[Any]) -> Kernel:
    t = op.result.type
    assert isinstance(t, TensorType) and isinstance(t.encoding, nh.FixedAttr)
    bits, mode = op.bits.value.data, op.rounding.data
    signed = not nh.is_unsigned(t)
    rank = len(t.get_shape())
    exps = t.encoding.exp_array(rank)  # (1-bit: the code is the sign, whatever the exponent)
    return lambda x: (
        quant.quantize_to_int(np.asarray(x, np.float64), bits, exps, mode, signed=signed),
    )


HOST_BUILDERS: dict[type[Operation], Builder] = {nh.ToHostOp: to_host, nh.FromHostOp: from_host}


def has_host_ops(ops: Any) -> bool:
    """Whether an op sequence (a function's ``walk()``) mixes nh ops with host (nf/nq) ops."""
    names = {op.name.split(".", 1)[0] for op in ops}
    return "nh" in names and bool(names & {"nf", "nq"})
