"""Reading ``dense<...>`` constants as NumPy arrays: one definition for passes, runtime and tools.

xDSL keeps a dense attribute's elements as little-endian bytes; a zero-copy, read-only view of
those bytes is all any layer needs (``.astype`` where it wants another type).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import IntegerType

__all__ = ["dense_to_numpy"]

_INT_DTYPES = {1: "<i1", 8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}
_FLOAT_DTYPES = {"f16": "<f2", "f32": "<f4", "f64": "<f8"}


def dense_to_numpy(attr: Any) -> np.ndarray:
    """A ``dense<...>`` attribute as a NumPy array (zero-copy, read-only)."""
    t = attr.get_type()
    elt = t.get_element_type()
    if isinstance(elt, IntegerType):
        dtype = _INT_DTYPES[elt.width.data]
    else:
        dtype = _FLOAT_DTYPES[elt.name.removeprefix("builtin.")]
    return np.frombuffer(attr.data.data, dtype=dtype).reshape(t.get_shape())
