"""What the torch frontend's handler modules share: the refusal they raise, and small helpers
on the importer's values.

The handlers of the op families (``math_ops``, ``reductions``, ``movement_ops``,
``core_aten``) live in modules of their own and are registered into
``torch_import.ATEN_HANDLERS``; they cannot import ``torch_import`` (it imports them), so
what they need from it sits here: :class:`Unsupported`, which the importer turns into a
``FrontendError`` naming the node, its module and its source line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Operation

from nanoir.dialects.nf import IndexResult
from nanoir.dialects.traits import DataMovement

__all__ = [
    "Unsupported",
    "axes",
    "axis",
    "constant_of",
    "holds_integers",
    "is_runtime",
    "refines",
]


class Unsupported(Exception):
    """Raised by a handler for an op or argument it cannot map; becomes a FrontendError."""


def axis(dim: int, rank: int) -> int:
    """``dim`` counted from the front (torch allows negative dims; a 0-d tensor has dim 0)."""
    n = max(rank, 1)
    if not -n <= dim < n:
        raise Unsupported(f"dim {dim} is out of range for a tensor of rank {rank}")
    return dim % n


def axes(dims: Sequence[int] | int | None, rank: int) -> list[int]:
    """Sorted distinct dims; ``None`` or ``[]`` is every dim (torch's reductions)."""
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    return sorted({axis(int(d), rank) for d in dims})


def constant_of(imp: Any, arg: Any) -> torch.Tensor | None:
    """The tensor of a parameter, buffer or folded constant argument, else None (a runtime
    value, or not a tensor node)."""
    if not isinstance(arg, fx.Node):
        return None
    tensor = getattr(imp.values.get(arg), "tensor", None)
    return tensor if isinstance(tensor, torch.Tensor) else None


def is_runtime(imp: Any, arg: Any) -> bool:
    """Whether ``arg`` is a tensor computed at run time (from the program's inputs)."""
    return isinstance(arg, fx.Node) and constant_of(imp, arg) is None


def holds_integers(value: Any) -> bool:
    """Whether an nf value holds torch's integers or bools as floats: the result of an op
    with ``IndexResult`` (indices, comparisons), or data movement of one (a reshape of
    argmax's indices, a concat of masks)."""
    op = getattr(value, "owner", None)
    while isinstance(op, Operation):
        if op.has_trait(IndexResult):
            return True
        if not op.has_trait(DataMovement) or not op.operands:
            return False
        op = op.operands[0].owner
    return False


def refines(actual: Any, expected: Any) -> bool:
    """Whether the nf type ``actual`` is torch's ``expected`` with some of its dynamic dims
    known (a length torch leaves data-dependent, such as ``repeat_interleave`` by a constant
    tensor's counts, that the importer computes)."""
    if not isinstance(actual, TensorType) or not isinstance(expected, TensorType):
        return False
    a, e = actual.get_shape(), expected.get_shape()
    return (
        actual.get_element_type() == expected.get_element_type()
        and len(a) == len(e)
        and all(x == y or y == DYNAMIC_INDEX for x, y in zip(a, e))
    )
