"""Handlers for torch's data movement beyond the core importer's, each written with the data
movement ops nf already has (so every level, the exponents and streaming follow; resizing is
``resize.py``'s):

| ATen | nf |
|---|---|
| ``stack`` | one ``nf.reshape`` per input (the new unit dim), then ``nf.concat`` |
| ``flip`` | ``nf.gather`` of the reversed indices, per flipped dim |
| ``repeat_interleave`` by a number or a constant tensor | ``nf.gather`` of each index repeated (the flattened tensor without ``dim``) |
| ``repeat`` (``tile``) | ``nf.reshape`` for new leading dims, ``nf.concat`` of copies per repeated dim |
| ``index_select`` by a constant index | ``nf.gather`` |

A dim of dynamic size cannot be flipped, gathered or repeated by index (its indices are not
static): refused, naming the dim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import fx
from xdsl.ir import SSAValue

from nanoir.dialects import nf
from nanoir.frontend.support import Unsupported, axis, constant_of
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX

__all__ = ["HANDLERS"]

Handler = Callable[[Any, fx.Node, dict[str, Any]], Any]


def _static(x: SSAValue, dim: int, what: str) -> int:
    size = nf.tensor_shape(x)[dim]
    if size == DYNAMIC_INDEX:
        raise Unsupported(f"{what} along the dynamic dim {dim} (its indices are not static)")
    return size


def _reshape(imp: Any, x: SSAValue, shape: Sequence[int]) -> SSAValue:
    if tuple(nf.tensor_shape(x)) == tuple(shape):
        return x
    return imp.emit(nf.ReshapeOp(x, shape)).result


def _stack(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``stack(ts, dim)``: each input with a unit dim at ``dim``, concatenated along it."""
    elt = imp.element_type(node)
    inputs = [imp.tensor(t, elt) for t in a["tensors"]]
    rank = len(nf.tensor_shape(inputs[0])) + 1
    d = axis(int(a["dim"]), rank)
    parts = []
    for x in inputs:
        shape = list(nf.tensor_shape(x))
        parts.append(_reshape(imp, x, [*shape[:d], 1, *shape[d:]]))
    if len(parts) == 1:
        return parts[0]
    return imp.emit(nf.ConcatOp(parts, d)).result


def _flip(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``flip(x, dims)``: a gather of the reversed indices along each dim (length > 1)."""
    x = imp.tensor(a["self"], imp.element_type(node))
    rank = len(nf.tensor_shape(x))
    for d in sorted({axis(int(d), rank) for d in a["dims"]}):
        size = _static(x, d, "flip")
        if size > 1:
            x = imp.emit(nf.GatherOp(x, d, list(range(size - 1, -1, -1)))).result
    return x


def _repeat_interleave(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``repeat_interleave(x, repeats, dim)``: a gather with index ``i`` repeated
    ``repeats[i]`` times (one number for all); without ``dim``, of the flattened tensor."""
    x = imp.tensor(a["self"], imp.element_type(node))
    repeats = a["repeats"]
    if isinstance(repeats, fx.Node):
        tensor = constant_of(imp, repeats)
        if tensor is None:
            raise Unsupported("repeat_interleave by repeats computed at run time")
        counts = [int(v) for v in tensor.reshape(-1).tolist()]
    else:
        counts = [int(repeats)]
    if a.get("dim") is None:
        shape = nf.tensor_shape(x)
        if DYNAMIC_INDEX in shape:
            raise Unsupported("repeat_interleave of a tensor with a dynamic dim without dim")
        size = 1
        for s in shape:
            size *= s
        x, d = _reshape(imp, x, [size]), 0
    else:
        d = axis(int(a["dim"]), len(nf.tensor_shape(x)))
    size = _static(x, d, "repeat_interleave")
    if len(counts) == 1:
        counts = counts * size
    if len(counts) != size or any(c < 0 for c in counts):
        raise Unsupported(f"repeat_interleave by {len(counts)} repeats along a dim of {size}")
    indices = [i for i, c in enumerate(counts) for _ in range(c)]
    if indices == list(range(size)):
        return x
    return imp.emit(nf.GatherOp(x, d, indices)).result


def _repeat(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``x.repeat(r0, r1, ...)`` (``tile``): new leading dims for the extra repeats, then
    ``r`` copies concatenated along each dim with ``r > 1``."""
    x = imp.tensor(a["self"], imp.element_type(node))
    repeats = [int(r) for r in a["repeats"]]
    shape = list(nf.tensor_shape(x))
    if len(repeats) < len(shape):
        raise Unsupported(f"repeat with {len(repeats)} repeats for {len(shape)} dims")
    x = _reshape(imp, x, [1] * (len(repeats) - len(shape)) + shape)
    if any(r == 0 for r in repeats):
        raise Unsupported("repeat by 0 (an empty tensor)")
    for d, r in enumerate(repeats):
        if r > 1:
            x = imp.emit(nf.ConcatOp([x] * r, d)).result
    return x


def _index_select(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
    """``index_select(x, dim, index)`` by a constant index: ``nf.gather``."""
    index = constant_of(imp, a["index"])
    if index is None:
        raise Unsupported("index_select by an index computed at run time (constant indices only)")
    x = imp.tensor(a["self"], imp.element_type(node))
    rank = len(nf.tensor_shape(x))
    if rank == 0:
        return x
    d = axis(int(a["dim"]), rank)
    size = _static(x, d, "index_select")
    indices = [int(i) % size for i in index.reshape(-1).tolist()]
    return imp.emit(nf.GatherOp(x, d, indices)).result


HANDLERS: dict[str, Handler] = {
    "aten.stack.default": _stack,
    "aten.flip.default": _flip,
    "aten.repeat_interleave.self_int": _repeat_interleave,
    "aten.repeat_interleave.self_Tensor": _repeat_interleave,
    "aten.repeat.default": _repeat,
    "aten.index_select.default": _index_select,
}
"""The ATen data movement ops of this family, by overload name."""
