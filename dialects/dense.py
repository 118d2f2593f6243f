"""``dense<...>`` constants and NumPy arrays, both ways: one definition for passes, runtime,
frontends and tools.

xDSL keeps a dense attribute's elements as little-endian bytes; a zero-copy, read-only view of
those bytes is all any layer needs to read one (``.astype`` where it wants another type), and
C-order bytes of a NumPy array are all it takes to make one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, IntegerType, TensorType
from xdsl.ir import Attribute, SSAValue

__all__ = ["constant_array", "dense_to_numpy", "numpy_dtype", "numpy_to_dense"]

_INT_DTYPES = {1: "<i1", 8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}
_FLOAT_DTYPES = {"f16": "<f2", "f32": "<f4", "f64": "<f8"}


def numpy_dtype(element_type: Attribute) -> str:
    """The little-endian NumPy dtype of an integer or float element type (``<f4`` for f32)."""
    if isinstance(element_type, IntegerType):
        return _INT_DTYPES[element_type.width.data]
    return _FLOAT_DTYPES[element_type.name.removeprefix("builtin.")]  # type: ignore[attr-defined]


def dense_to_numpy(attr: Any) -> np.ndarray:
    """A ``dense<...>`` attribute as a NumPy array (zero-copy, read-only)."""
    t = attr.get_type()
    dtype = numpy_dtype(t.get_element_type())
    return np.frombuffer(attr.data.data, dtype=dtype).reshape(t.get_shape())


def numpy_to_dense(array: Any, element_type: Attribute) -> DenseIntOrFPElementsAttr:
    """A ``dense<...>`` attribute holding ``array`` converted to ``element_type``."""
    # np.asarray keeps rank 0 (np.ascontiguousarray would make it [1]); tobytes is C order.
    data = np.asarray(array, dtype=numpy_dtype(element_type))
    return DenseIntOrFPElementsAttr(TensorType(element_type, data.shape), BytesAttr(data.tobytes()))


def constant_array(value: SSAValue | None) -> np.ndarray | None:
    """The data of an ``nf.constant`` result (read-only view), or None if not a constant.

    The op is recognised by name: ``nf`` itself reads its constants through this module."""
    if value is None or getattr(value.owner, "name", None) != "nf.constant":
        return None
    return dense_to_numpy(value.owner.value)
