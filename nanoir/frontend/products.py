"""Products the torch frontend reads as something else (``nanoir.lowering.analysis.products``):

| torch | nf |
|---|---|
| ``x / c``, ``torch.div(x, c)`` with a constant ``c`` (a number or a buffer) not a power of two | ``nf.mul`` by ``1 / c`` (quantized like a weight) |
| ``x * F.relu6(x + 3) / 6`` (any association, ``clamp`` or ``hardtanh`` for ``relu6``, ``* (1/6)`` for ``/ 6``), ``x * F.hardsigmoid(x)`` | ``nf.hardswish`` |

Each wraps the core importer's ``div``/``mul`` handler: the handler builds the product as
written, then the product is asked what it is; the ops it no longer reads are dropped by the
importer (nothing reads them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import OpResult, SSAValue

from nanoir.dialects import nf
from nanoir.dialects.dense import numpy_to_dense
from nanoir.lowering.analysis.products import (
    float_constant,
    hardswish_input,
    reciprocal_of_divisor,
)

Handler = Callable[[Any, fx.Node, dict[str, Any]], Any]


def _reread(imp: Any, value: Any) -> Any:
    """``value`` (what the core handler returned) as the op it is: a hardswish, or a division
    by a constant as a product by the reciprocal."""
    if not isinstance(value, OpResult):
        return value
    x = hardswish_input(value)
    if x is not None:
        return imp.emit(nf.HardSwishOp(x)).result
    op = value.op
    if not isinstance(op, nf.DivOp):
        return value
    divisor = float_constant(op.rhs)
    inverse = None if divisor is None else reciprocal_of_divisor(divisor)
    if inverse is None:
        return value
    return imp.emit(nf.MulOp(op.lhs, _reciprocal_constant(imp, op.rhs, inverse))).result


def _reciprocal_constant(imp: Any, divisor: SSAValue, inverse: np.ndarray) -> SSAValue:
    """``inverse`` as a constant like ``divisor``: unnamed for a Python number (a scalar
    factor), ``<name>.reciprocal`` for a named buffer."""
    assert isinstance(divisor, OpResult) and isinstance(divisor.op, nf.ConstantOp)
    assert isinstance(divisor.type, TensorType)
    dense = numpy_to_dense(inverse.reshape(nf.tensor_shape(divisor)), divisor.type.element_type)
    name = divisor.op.sym_name
    op = nf.ConstantOp(dense, None if name is None else f"{name.data}.reciprocal")
    imp.constant_ops.append(op)
    return op.result


def _reread_product(previous: Handler) -> Handler:
    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        value = previous(imp, node, a)
        if a.get("rounding_mode") is not None:
            return value
        return _reread(imp, value)

    handle.__doc__ = (
        "The product as the core handler builds it, then read as a hardswish or, a division "
        "by a constant, as a product by its reciprocal."
    )
    return handle


WRAPS: dict[str, Callable[[Handler], Handler]] = {
    name: _reread_product
    for name in ("aten.div.Tensor", "aten.div.Scalar", "aten.mul.Tensor", "aten.mul.Scalar")
}
"""Handlers of the core importer this module extends: each wraps the one it replaces."""
