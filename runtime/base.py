"""What every kernel table shares: the kernel and builder types, and the one runtime error.

A *builder* ``builder(op, dtype) -> kernel`` reads an op's attributes once, at compile time; the
*kernel* ``kernel(*arrays) -> tuple of arrays`` is what the executor calls in its hot loop. The
per-dialect tables (``runtime/nf.py``, ``nq.py``, ``nh.py``) and the executor
(``runtime/interpreter.py``) import these from here, so neither imports the other's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nanoir.errors import Error

__all__ = ["Builder", "ExecutionError", "Kernel", "as_array"]

Kernel = Callable[..., tuple[Any, ...]]
Builder = Callable[[Any, np.dtype[Any]], Kernel]


class ExecutionError(RuntimeError, Error):
    """A program could not run: names the op (or input), the shapes and the offending value."""


def as_array(index: int, value: Any) -> np.ndarray:
    """Input ``index`` as a NumPy array of numbers, else an :class:`ExecutionError` saying why
    (a ragged list, a string, ``None`` ...), before any kernel sees it."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise ExecutionError(f"input {index} is not an array: {e}") from e
    if array.dtype.kind not in "fiu":
        raise ExecutionError(f"input {index} has non-numeric dtype {array.dtype}")
    return array
