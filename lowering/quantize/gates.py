"""Gated products and table inputs: intermediates quantize keeps on a finer grid.

PaddleOCR's and MobileNetV3's squeeze-excitation ``x * hardsigmoid(conv(pool(x)))``, SiLU or
hardswish written out as ``x * sigmoid(x)`` or ``x * clip(x + 3, 0, 6)``, a GLU's halves: a
product of two runtime values, each already truncated onto its own 8-bit grid, whose result is
truncated a second time. Under ``trunc`` every such product shrinks toward zero, and a network
that chains them (11 SE blocks in PP-OCR's classifier) loses the signal multiplicatively:
measured on ``bench_trained.py``, the SE products' own SQNR is 9 to 24 dB where the tensors
around them keep 25 to 35 dB. TFLite keeps the same intermediates (hardswish, LSTM gates) in
16 bits for that reason. A product with a constant (a scale, ``x * (1/6)``) is not a gated
product.

The input of a lookup table (hardswish, sigmoid, SiLU, tanh: the ``LookupTable`` trait) is the
other half of the same chain: the table rounds its output offline at no cost, but the value it
is indexed by was truncated, the signed output of a conv whose negatives count; at 16 bits the
table is segmented (lower-to-hw) and indexed almost by the float value. On PP-OCR's classifier
both together: 83.6% -> 100% labels, 7.5 -> 26.5 dB (onnxruntime: 100%, 30.0 dB).

``QuantConfig.gate_bits`` (16 by default) and ``QuantConfig.table_input_bits`` (off by
default: it grows every table) give them their bits where no rule names them
(:func:`intermediate_bits`).
"""

from __future__ import annotations

from nanoir.dialects import nf
from nanoir.dialects.traits import LookupTable
from nanoir.lowering.quantize.rules import QuantConfig
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

__all__ = ["gated_product", "intermediate_bits", "table_input"]


def _runtime(value: SSAValue, seen: dict[SSAValue, bool]) -> bool:
    """Whether ``value`` depends on a function input (not on constants only); ``seen``
    memoizes. Iterative, in post-order: a deep program must not exhaust the recursion limit."""
    stack: list[tuple[SSAValue, bool]] = [(value, False)]
    while stack:
        v, operands_done = stack.pop()
        if v in seen:
            continue
        if isinstance(v, BlockArgument):
            seen[v] = True
            continue
        assert isinstance(v, OpResult)
        op: Operation = v.op
        if operands_done or not op.operands:
            seen[v] = any(seen[o] for o in op.operands)
            continue
        stack.append((v, True))
        stack.extend((o, False) for o in op.operands if o not in seen)
    return seen[value]


def gated_product(value: SSAValue, seen: dict[SSAValue, bool] | None = None) -> bool:
    """Whether ``value`` is an ``nf.mul`` of two runtime values (see the module)."""
    if not isinstance(value, OpResult) or not isinstance(value.op, nf.MulOp):
        return False
    memo: dict[SSAValue, bool] = {} if seen is None else seen
    return all(_runtime(o, memo) for o in value.op.operands)


def table_input(value: SSAValue) -> bool:
    """Whether every reader of ``value`` (an op's result, read at all) is a lookup table."""
    uses = list(value.uses)
    return (
        isinstance(value, OpResult)
        and bool(uses)
        and all(u.operation.has_trait(LookupTable) for u in uses)
    )


def intermediate_bits(
    value: SSAValue, config: QuantConfig, seen: dict[SSAValue, bool] | None = None
) -> int | None:
    """The bits ``config`` gives ``value`` as a gated product (``gate_bits``) or a table's
    input (``table_input_bits``), or None: ``act_bits`` and the rules decide. (A gated product
    may be narrowed again where it is multiplied by another runtime value: ``products``.)"""
    if config.gate_bits is not None and gated_product(value, seen):
        return config.gate_bits
    if config.table_input_bits is not None and table_input(value):
        return config.table_input_bits
    return None
