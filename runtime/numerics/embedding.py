"""Embedding lookup (torch's ``nn.Embedding``, ONNX ``Gather`` on axis 0 of a table) as a NumPy
kernel shared by the nf and nh levels (pure functions, no xDSL).

The indices are a runtime value (integers: int64 at nh, exact float integers at nf); each
selects one row of a constant ``[V, D]`` table. An index outside ``0..V-1`` (torch accepts no
negative index either) is an ``IndexError`` the executor reports naming the op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["embed"]


def embed(indices: Any, table: Any) -> Any:
    """``table[indices]``: the result has the indices' shape plus the table's row.

    >>> embed(np.array([[2, 0]]), np.array([[1, 2], [3, 4], [5, 6]])).tolist()
    [[[5, 6], [1, 2]]]
    """
    idx = np.asarray(indices)
    table = np.asarray(table)
    vocab = table.shape[0]
    if idx.dtype.kind == "f" and idx.size and not np.array_equal(idx, np.round(idx)):
        bad = idx[idx != np.round(idx)].reshape(-1)[0]
        raise IndexError(f"embedding: index {float(bad)} is not an integer")
    if idx.size and (idx.min() < 0 or idx.max() >= vocab):
        bad = idx[(idx < 0) | (idx >= vocab)].reshape(-1)[0]
        raise IndexError(
            f"embedding: index {int(bad)} is outside the table's {vocab} rows (0..{vocab - 1})"
        )
    return table[idx.astype(np.int64)]
