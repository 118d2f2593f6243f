"""The predicates of ``nf.compare`` and ``nh.compare``, one table for values and codes alike.

Orderings compare the arrays as they are (real values at nf and nq; codes at one exponent at
nh, which order as their values do); ``and``/``or``/``xor`` read each element as non-zero
(true) or zero (false), as torch's ``logical_*`` do.

>>> PREDICATES["lt"](np.array([1, 2]), np.array([2, 2])).tolist()
[True, False]
>>> PREDICATES["xor"](np.array([0.0, 3.0]), np.array([1.0, -1.0])).tolist()
[True, False]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["LOGICAL", "PREDICATES"]

LOGICAL = ("and", "or", "xor")
"""The predicates of truth values (non-zero or zero), at any exponents."""

PREDICATES: dict[str, Callable[[Any, Any], Any]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": lambda a, b: np.logical_and(a != 0, b != 0),
    "or": lambda a, b: np.logical_or(a != 0, b != 0),
    "xor": lambda a, b: np.logical_xor(a != 0, b != 0),
}
"""Each predicate on two NumPy arrays (broadcasting): a bool array."""
