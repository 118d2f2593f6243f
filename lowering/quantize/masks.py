"""Infinite masks folded before quantize, for no grid holds an infinity.

``x + C`` where the constant ``C`` holds infinities (a causal mask ``full(-inf).triu(1)``
added to attention scores; ``x - C`` alike):

- read only by softmaxes (with no mask of their own), ``C`` holding only 0 and -inf: each
  becomes ``softmax(x, mask = C == 0)`` (``nf.softmax``'s boolean mask: a masked position
  outputs exactly 0, as torch's softmax of -inf does; the scores keep their own grid);
- otherwise ``where(isfinite(C), x + C', C)``, ``C'`` its finite entries (0 at the
  infinities), or ``where(isfinite(C), x, C)`` when those are all 0: ``nf.where`` read by its
  fake-quant picks the grid's lowest code for ``-inf``, as for ``masked_fill(-inf)``.

Likewise ``where(m, x, -inf)`` or ``where(m, -inf, x)`` (``masked_fill``) of a constant ``m``
read only by softmaxes becomes the softmax's mask. The float program computes the same values.

    %s = nf.add %x, %causal              ─▶   %keep = nf.constant dense<[[1, 0], [1, 1]]> : i1
    %p = nf.softmax %s {axis = -1}            %p = nf.softmax %x, %keep {axis = -1}
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy, numpy_to_dense
from xdsl.dialects.builtin import i1
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

__all__ = ["fold_infinite_masks"]


def _constant_values(value: SSAValue) -> np.ndarray | None:
    if isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp):
        return np.asarray(dense_to_numpy(value.op.value), np.float64)
    return None


def _infinite(value: SSAValue) -> np.ndarray | None:
    """The values of a constant holding an infinity and no NaN, else None."""
    data = _constant_values(value)
    if data is None or np.isnan(data).any() or np.isfinite(data).all():
        return None
    return data


def _constant(data: np.ndarray, element_type: object, before: Operation) -> SSAValue:
    op = nf.ConstantOp(numpy_to_dense(data, element_type))  # type: ignore[arg-type]
    Rewriter.insert_op(op, InsertPoint.before(before))
    return op.result


def _erase_unused(op: Operation) -> None:
    """``op`` and then each constant operand left unread."""
    operands = list(op.operands)
    Rewriter.erase_op(op)
    for v in operands:
        if isinstance(v, OpResult) and isinstance(v.op, nf.ConstantOp) and not v.uses:
            Rewriter.erase_op(v.op)


def _softmax_mask(op: Operation, x: SSAValue, keep: np.ndarray) -> bool:
    """Make ``keep`` (True = takes part) the mask of every softmax reading ``op``'s result,
    reading ``x`` instead, if only maskless softmaxes read it and ``x`` has its shape."""
    readers = [u.operation for u in op.results[0].uses]
    if not readers or nf.tensor_shape(x) != nf.tensor_shape(op.results[0]):
        return False
    if any(not isinstance(r, nf.SoftmaxOp) or r.mask is not None for r in readers):
        return False
    mask = _constant(keep.astype(np.int8), i1, op)
    for r in set(readers):
        assert isinstance(r, nf.SoftmaxOp)
        new = nf.SoftmaxOp(x, r.axis.value.data, mask)
        Rewriter.insert_op(new, InsertPoint.before(r))
        new.result.name_hint = r.result.name_hint
        r.result.replace_all_uses_with(new.result)
        Rewriter.erase_op(r)
    _erase_unused(op)
    return True


def _fold_sum(op: nf.AddOp | nf.SubOp) -> None:
    sub = isinstance(op, nf.SubOp)
    sides = ((op.rhs, op.lhs),) if sub else ((op.rhs, op.lhs), (op.lhs, op.rhs))
    for const, x in sides:
        data = _infinite(const)
        if data is None or _infinite(x) is not None:
            continue
        added = -data if sub else data  # what is added to x
        keep = np.isfinite(added)
        if (added[keep] == 0).all() and (added[~keep] < 0).all() and _softmax_mask(op, x, keep):
            return
        elt = op.result.type.get_element_type()  # type: ignore[attr-defined]
        picked = _constant(np.where(keep, 0.0, added), elt, op)
        cond = _constant(keep.astype(np.float64), elt, op)
        if np.where(keep, data, 0.0).any():
            rest = _constant(np.where(keep, data, 0.0), elt, op)
            partial = type(op)(x, rest) if x is op.lhs else type(op)(rest, x)
            Rewriter.insert_op(partial, InsertPoint.before(op))
            x = partial.result
        where = nf.WhereOp(cond, x, picked)  # (shaped as the sum: both broadcast x and C)
        Rewriter.insert_op(where, InsertPoint.before(op))
        where.result.name_hint = op.result.name_hint
        op.result.replace_all_uses_with(where.result)
        _erase_unused(op)
        return


def _fold_where(op: nf.WhereOp) -> None:
    cond = _constant_values(op.cond)
    if cond is None:
        return
    for fill, x, keep in ((op.rhs, op.lhs, cond != 0), (op.lhs, op.rhs, cond == 0)):
        data = _infinite(fill)
        if data is not None and (data < 0).all() and _infinite(x) is None:
            keep = np.broadcast_to(keep, np.broadcast_shapes(keep.shape, data.shape))
            _softmax_mask(op, x, keep)
            return


def fold_infinite_masks(func: FuncOp) -> None:
    """Fold every infinite mask of ``func`` (module docstring)."""
    for op in list(func.walk()):
        if op.parent is None:
            continue  # (erased by an earlier fold)
        if isinstance(op, nf.AddOp | nf.SubOp):
            _fold_sum(op)
        elif isinstance(op, nf.WhereOp):
            _fold_where(op)
