"""Subgraphs an exporter writes for one op, read as that op: the LayerNorm older exporters
(paddle2onnx, torch before opset 17) write out,

    m = ReduceMean(x, axes)          d = Sub(x, m)        p = Pow(d, 2)   (or Mul(d, d))
    v = ReduceMean(p, axes)          e = Add(v, eps)      s = Sqrt(e)
    n = Div(d, s)                    y = Add(Mul(n, gamma), beta)   (gamma, beta optional)

is one ``nf.layer_norm`` over the last ``len(axes)`` dims (ONNX LayerNormalization's
semantics: biased variance, ``eps`` inside the root).

`find_layer_norms` matches the structure once, before reading: op types, who reads each
output (every intermediate read by the next node alone, ``d`` by the Pow and the Div alone,
none a graph output). The reader then defers the group's nodes to its last one, where
`fuse_layer_norm` checks what only values tell (``eps`` a constant scalar, the exponent 2, the
axes the last dims, gamma and beta of the normalised shape) and builds the op; when a check
fails, the reader reads the deferred nodes one by one as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.onnx.importer.state import Node, ReaderState
from xdsl.ir import SSAValue

__all__ = ["LayerNormGroup", "find_layer_norms", "fuse_layer_norm"]


@dataclass(frozen=True)
class LayerNormGroup:
    """A matched LayerNorm subgraph: its node indices in graph order and its operands."""

    members: tuple[int, ...]
    x: str
    mean: int
    """The index of the first ReduceMean (its axes)."""
    squared: int
    """The index of the Pow (or Mul) that squares."""
    eps: str
    gamma: str
    beta: str
    output: str

    @property
    def last(self) -> int:
        return self.members[-1]


def _other(node: Any, name: str) -> str | None:
    """The other input of a two-input node one of whose inputs is ``name``."""
    inputs = list(node.input)
    if len(inputs) != 2 or name not in inputs:
        return None
    return inputs[1] if inputs[0] == name else inputs[0]


def find_layer_norms(graph: Any) -> list[LayerNormGroup]:
    """Every written-out LayerNorm of ``graph`` (by structure alone)."""
    nodes = list(graph.node)
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(i)
    outputs = {o.name for o in graph.output}

    def only_reader(name: str, op_type: str) -> int | None:
        found = sorted(set(readers.get(name, [])))
        if name in outputs or len(found) != 1:
            return None
        i = found[0]
        if nodes[i].op_type != op_type or nodes[i].domain not in ("", "ai.onnx"):
            return None
        return i

    groups: list[LayerNormGroup] = []
    for m, node in enumerate(nodes):
        if node.op_type != "ReduceMean" or len(node.output) != 1 or not node.input:
            continue
        x = node.input[0]
        sub = only_reader(node.output[0], "Sub")
        if sub is None or list(nodes[sub].input) != [x, node.output[0]]:
            continue
        d = nodes[sub].output[0]
        users = sorted(set(readers.get(d, [])))
        if d in outputs or len(users) != 2:
            continue
        square = next((u for u in users if nodes[u].op_type in ("Pow", "Mul")), None)
        div = next((u for u in users if nodes[u].op_type == "Div"), None)
        if square is None or div is None or list(nodes[div].input)[:1] != [d]:
            continue
        sq = nodes[square]
        if sq.op_type == "Mul" and list(sq.input) != [d, d]:
            continue
        if sq.op_type == "Pow" and list(sq.input)[:1] != [d]:
            continue
        mean2 = only_reader(sq.output[0], "ReduceMean")
        if mean2 is None:
            continue
        add = only_reader(nodes[mean2].output[0], "Add")
        if add is None:
            continue
        eps = _other(nodes[add], nodes[mean2].output[0])
        sqrt = only_reader(nodes[add].output[0], "Sqrt")
        if eps is None or sqrt is None or only_reader(nodes[sqrt].output[0], "Div") != div:
            continue
        members = [m, sub, square, mean2, add, sqrt, div]
        last = nodes[div].output[0]
        gamma = beta = ""
        mul = only_reader(last, "Mul")
        if mul is not None and _other(nodes[mul], last) not in (None, last):
            gamma = str(_other(nodes[mul], last))
            members.append(mul)
            last = nodes[mul].output[0]
        bias = only_reader(last, "Add")
        if bias is not None and _other(nodes[bias], last) not in (None, last):
            beta = str(_other(nodes[bias], last))
            members.append(bias)
            last = nodes[bias].output[0]
        if sorted(members) != members:
            continue  # (a graph in topological order has them so; another is read node by node)
        groups.append(LayerNormGroup(tuple(members), x, m, square, eps, gamma, beta, last))
    return groups


def _axes(r: ReaderState, node: Node, rank: int) -> list[int] | None:
    if node.opset >= 18:
        if not node.input(1):
            return None
        given = list(r.static_ints(node.inputs[1], "axes")) if node.inputs[1] in r.static else None
    else:
        given = [int(a) for a in node.attrs.get("axes", ())]  # type: ignore[union-attr]
    if not given or node.attrs.get("keepdims", 1) != 1:
        return None
    return sorted(a % rank for a in given)


def _affine(
    r: ReaderState, name: str, normalized: Sequence[int], fill: float, dtype: Any
) -> SSAValue | None:
    """gamma or beta as a constant of the normalised shape (``fill`` when absent), or None when
    it is not one."""
    if not name:
        return r.fresh_constant(
            f"layer_norm_{'weight' if fill else 'bias'}", np.full(normalized, fill, dtype)
        )
    if name in r.static and r.static[name].dtype.kind == "f":
        array = r.static[name]
        try:
            full = np.broadcast_to(
                array, (1,) * max(0, array.ndim - len(normalized)) + tuple(normalized)
            )
        except ValueError:
            return None
        if (
            full.size != int(np.prod(normalized))
            or array.ndim > len(normalized)
            and any(d != 1 for d in array.shape[: array.ndim - len(normalized)])
        ):
            return None
        if tuple(array.shape) == tuple(normalized):
            return r.ssa(name)
        return r.fresh_constant(
            f"{name}_normalized", np.ascontiguousarray(full.reshape(normalized))
        )
    value = r.values.get(name)
    if value is not None and tuple(nf.tensor_shape(value)) == tuple(normalized):
        return value
    return None


def fuse_layer_norm(r: ReaderState, group: LayerNormGroup, node_of: Any) -> bool:
    """Add ``nf.layer_norm`` for ``group`` if its values allow (`node_of(index)` is the
    reader's `Node` of a member); False, adding nothing, otherwise."""
    x = r.values.get(group.x)
    if x is None:
        return False
    shape = nf.tensor_shape(x)
    rank = len(shape)
    mean, squared = node_of(group.mean), node_of(group.squared)
    second = node_of(group.members[3])
    axes = _axes(r, mean, rank)
    if (
        axes is None
        or axes != _axes(r, second, rank)
        or axes != list(range(rank - len(axes), rank))
    ):
        return False
    normalized = shape[rank - len(axes) :]
    if any(d < 0 for d in normalized):
        return False
    if squared.op_type == "Pow":
        exponent = r.static.get(squared.inputs[1])
        if exponent is None or exponent.size != 1 or float(exponent.reshape(-1)[0]) != 2:
            return False
    eps = r.static.get(group.eps)
    if eps is None or eps.size != 1 or eps.dtype.kind != "f" or not float(eps.reshape(-1)[0]) >= 0:
        return False
    dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[
        str(x.type.get_element_type())
    ]  # type: ignore[attr-defined]
    weight = _affine(r, group.gamma, normalized, 1.0, dtype)
    bias = _affine(r, group.beta, normalized, 0.0, dtype)
    if weight is None or bias is None:
        return False
    op = nf.LayerNormOp(x, weight, bias, len(axes), float(eps.reshape(-1)[0]))
    r.add(node_of(group.last), op, [group.output])
    return True
