"""Subgraphs an exporter writes for one op, read as that op (`PATTERNS`, one matcher each):

- the LayerNorm older exporters (paddle2onnx, torch before opset 17) write out,

      m = ReduceMean(x, axes)          d = Sub(x, m)        p = Pow(d, 2)   (or Mul(d, d))
      v = ReduceMean(p, axes)          e = Add(v, eps)      s = Sqrt(e)
      n = Div(d, s)                    y = Add(Mul(n, gamma), beta)   (gamma, beta optional)

  is one ``nf.layer_norm`` over the last ``len(axes)`` dims (ONNX LayerNormalization's
  semantics: biased variance, ``eps`` inside the root);
- the HardSwish paddle2onnx writes, ``Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)`` (or times
  ``1/6``, or the division first: ``Mul(x, Div(Clip(...), 6))``), and ``Mul(x,
  HardSigmoid(x))`` with torch's alpha = 1/6 and beta = 0.5, are one ``nf.hardswish`` (a
  lookup table once quantized, one rounding; the product is a table, a truncated product and
  a quantized 1/6). Paddle's SE gate, ``HardSigmoid`` with alpha = 0.2 times another tensor,
  is not that function and stays. (The torch frontend asks the same of its nf products:
  ``nanoir.lowering.analysis.products``.)

A matcher finds the structure once, before reading: op types, and who reads each output
(every intermediate read by the next node alone and no graph output). The reader defers a
group's nodes to its last one, where the group's ``fuse`` checks what only values tell
(constants, axes, shapes) and builds the op; when a check fails, the reader reads the
deferred nodes one by one as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.onnx.importer.state import Node, ReaderState
from xdsl.ir import SSAValue

__all__ = ["PATTERNS", "Group", "find_groups"]

NodeOf = Callable[[int], Node]


@dataclass(frozen=True)
class Group:
    """A matched subgraph: its node indices in graph order, the output its last node
    defines, and how to read it as one op (False: it is not one after all)."""

    members: tuple[int, ...]
    output: str
    fuse: Callable[[ReaderState, Group, NodeOf], bool] = field(compare=False)
    operands: dict[str, str] = field(default_factory=dict, compare=False)
    """Named operands the matcher found (tensor names)."""

    @property
    def last(self) -> int:
        return self.members[-1]


class _Graph:
    """Who reads each tensor of a graph, for matchers."""

    def __init__(self, graph: Any) -> None:
        self.nodes = list(graph.node)
        self.readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in node.input:
                self.readers.setdefault(name, []).append(i)
        self.outputs = {o.name for o in graph.output}

    def only_reader(self, name: str, *op_types: str) -> int | None:
        """The one node reading ``name`` (no graph output), if it is one of ``op_types``."""
        found = sorted(set(self.readers.get(name, [])))
        if name in self.outputs or len(found) != 1:
            return None
        node = self.nodes[found[0]]
        if node.op_type not in op_types or node.domain not in ("", "ai.onnx"):
            return None
        return found[0]


def _other(node: Any, name: str) -> str | None:
    """The other input of a two-input node one of whose inputs is ``name``."""
    inputs = list(node.input)
    if len(inputs) != 2 or name not in inputs:
        return None
    return inputs[1] if inputs[0] == name else inputs[0]


def _scalar(r: ReaderState, name: str) -> float | None:
    """A constant of one float value, or None."""
    array = r.static.get(name)
    if array is None or array.size != 1 or array.dtype.kind != "f":
        return None
    return float(array.reshape(-1)[0])


def _dtype(value: SSAValue) -> Any:
    return {"f16": np.float16, "f32": np.float32, "f64": np.float64}[
        str(value.type.get_element_type())  # type: ignore[attr-defined]
    ]


# ---------------------------------------------------------------------------------------
# LayerNorm
# ---------------------------------------------------------------------------------------


def _match_layer_norms(g: _Graph) -> list[Group]:
    groups: list[Group] = []
    nodes = g.nodes
    for m, node in enumerate(nodes):
        if node.op_type != "ReduceMean" or len(node.output) != 1 or not node.input:
            continue
        x = node.input[0]
        sub = g.only_reader(node.output[0], "Sub")
        if sub is None or list(nodes[sub].input) != [x, node.output[0]]:
            continue
        d = nodes[sub].output[0]
        users = sorted(set(g.readers.get(d, [])))
        if d in g.outputs or len(users) != 2:
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
        mean2 = g.only_reader(sq.output[0], "ReduceMean")
        add = None if mean2 is None else g.only_reader(nodes[mean2].output[0], "Add")
        if mean2 is None or add is None:
            continue
        eps = _other(nodes[add], nodes[mean2].output[0])
        sqrt = g.only_reader(nodes[add].output[0], "Sqrt")
        if eps is None or sqrt is None or g.only_reader(nodes[sqrt].output[0], "Div") != div:
            continue
        members = [m, sub, square, mean2, add, sqrt, div]
        last = nodes[div].output[0]
        operands = {"x": x, "eps": eps, "gamma": "", "beta": ""}
        mul = g.only_reader(last, "Mul")
        if mul is not None and _other(nodes[mul], last) not in (None, last):
            operands["gamma"] = str(_other(nodes[mul], last))
            members.append(mul)
            last = nodes[mul].output[0]
        bias = g.only_reader(last, "Add")
        if bias is not None and _other(nodes[bias], last) not in (None, last):
            operands["beta"] = str(_other(nodes[bias], last))
            members.append(bias)
            last = nodes[bias].output[0]
        if sorted(members) == members:  # (graph order; another graph is read node by node)
            groups.append(Group(tuple(members), last, _fuse_layer_norm, operands))
    return groups


def _axes(r: ReaderState, node: Node, rank: int) -> list[int] | None:
    if node.opset >= 18:
        if not node.input(1) or node.inputs[1] not in r.static:
            return None
        given = list(r.static_ints(node.inputs[1], "axes"))
    else:
        given = [int(a) for a in node.attrs.get("axes", ())]  # type: ignore[union-attr]
    if not given or node.attrs.get("keepdims", 1) != 1:
        return None
    return sorted(a % rank for a in given)


def _affine(
    r: ReaderState, name: str, normalized: Sequence[int], fill: float, dtype: Any
) -> SSAValue | None:
    """gamma or beta as a value of the normalised shape (``fill`` when absent), or None when
    it is not one."""
    if not name:
        label = "layer_norm_weight" if fill else "layer_norm_bias"
        return r.fresh_constant(label, np.full(normalized, fill, dtype))
    if name in r.static and r.static[name].dtype.kind == "f":
        array = r.static[name]
        lead = array.ndim - len(normalized)
        if array.size != int(np.prod(normalized)) or any(d != 1 for d in array.shape[:lead]):
            return None
        try:
            full = np.broadcast_to(array.reshape(array.shape[max(lead, 0) :]), tuple(normalized))
        except ValueError:
            return None
        if tuple(array.shape) == tuple(normalized):
            return r.ssa(name)
        return r.fresh_constant(f"{name}_normalized", np.ascontiguousarray(full))
    value = r.values.get(name)
    if value is not None and tuple(nf.tensor_shape(value)) == tuple(normalized):
        return value
    return None


def _fuse_layer_norm(r: ReaderState, group: Group, node_of: NodeOf) -> bool:
    ops = group.operands
    x = r.values.get(ops["x"])
    if x is None:
        return False
    shape = nf.tensor_shape(x)
    rank = len(shape)
    mean, squared, second = (
        node_of(group.members[0]),
        node_of(group.members[2]),
        node_of(group.members[3]),
    )
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
    if squared.op_type == "Pow" and _scalar(r, squared.inputs[1]) != 2:
        return False
    eps = _scalar(r, ops["eps"])
    if eps is None or not eps >= 0:
        return False
    weight = _affine(r, ops["gamma"], normalized, 1.0, _dtype(x))
    bias = _affine(r, ops["beta"], normalized, 0.0, _dtype(x))
    if weight is None or bias is None:
        return False
    r.add(node_of(group.last), nf.LayerNormOp(x, weight, bias, len(axes), eps), [group.output])
    return True


# ---------------------------------------------------------------------------------------
# HardSwish
# ---------------------------------------------------------------------------------------


def _scaling_reader(g: _Graph, name: str) -> int | None:
    """The one node reading ``name`` that scales it by a second input: ``Div(name, c)`` or
    ``Mul`` (either order); whether ``c`` is ``6`` or ``1/6`` the fuse checks."""
    node = g.only_reader(name, "Div", "Mul")
    if node is None or len(g.nodes[node].input) != 2:
        return None
    if g.nodes[node].op_type == "Div" and g.nodes[node].input[0] != name:
        return None
    return node


def _match_hard_swishes(g: _Graph) -> list[Group]:
    """``x · clip(x + 3, 0, 6) / 6``, the product or the division first, and
    ``x · HardSigmoid(x)`` (torch's alpha and beta, checked when fusing)."""
    groups: list[Group] = []
    nodes = g.nodes
    for a, node in enumerate(nodes):
        if node.op_type == "HardSigmoid" and len(node.input) == 1:
            x = node.input[0]
            mul = g.only_reader(node.output[0], "Mul")
            if mul is not None and _other(nodes[mul], node.output[0]) == x and a < mul:
                operands = {"x": x}
                groups.append(Group((a, mul), nodes[mul].output[0], _fuse_gate, operands))
            continue
        if node.op_type != "Add" or len(node.input) != 2:
            continue
        for x, three in (tuple(node.input), tuple(node.input)[::-1]):
            clip = g.only_reader(node.output[0], "Clip")
            if clip is None or nodes[clip].input[0] != node.output[0]:
                continue
            gate = nodes[clip].output[0]
            mul = g.only_reader(gate, "Mul")
            if mul is not None and _other(nodes[mul], gate) == x:  # (x · clip) / 6
                scale = _scaling_reader(g, nodes[mul].output[0])
                members = [a, clip, mul, scale]
                last = scale
            else:  # x · (clip / 6)
                scale = _scaling_reader(g, gate)
                mul = None if scale is None else g.only_reader(nodes[scale].output[0], "Mul")
                if mul is None or _other(nodes[mul], nodes[scale].output[0]) != x:
                    continue
                members = [a, clip, scale, mul]
                last = mul
            if scale is None or last is None:
                continue
            scaled = nodes[members[members.index(scale) - 1]].output[0]  # what 6 divides
            six = _other(nodes[scale], scaled)
            if six is None:
                continue
            operands = {"x": x, "three": three, "six": six, "scale": nodes[scale].op_type}
            if sorted(members) == members:
                groups.append(
                    Group(tuple(members), nodes[last].output[0], _fuse_hard_swish, operands)
                )
            break
    return groups


def _clip_bounds(r: ReaderState, clip: Node) -> tuple[float | None, float | None]:
    if clip.opset < 11:
        lo, hi = clip.attrs.get("min"), clip.attrs.get("max")
        return (
            None if lo is None else float(lo.value),  # type: ignore[union-attr]
            None if hi is None else float(hi.value),  # type: ignore[union-attr]
        )
    return (
        _scalar(r, clip.input(1)) if clip.input(1) else None,
        _scalar(r, clip.input(2)) if clip.input(2) else None,
    )


def _fuse_hard_swish(r: ReaderState, group: Group, node_of: NodeOf) -> bool:
    ops = group.operands
    x = r.values.get(ops["x"])
    if (
        x is None
        or _scalar(r, ops["three"]) != 3
        or _clip_bounds(r, node_of(group.members[1])) != (0, 6)
    ):
        return False
    divisor = _scalar(r, ops["six"])
    if (
        divisor is None
        or (ops["scale"] == "Div" and divisor != 6)
        or (ops["scale"] == "Mul" and abs(divisor - 1 / 6) > 1e-7)
    ):
        return False
    r.add(node_of(group.last), nf.HardSwishOp(x), [group.output])
    return True


def _fuse_gate(r: ReaderState, group: Group, node_of: NodeOf) -> bool:
    """``x · HardSigmoid(x)`` is hardswish with torch's hardsigmoid only (alpha 1/6 within
    float32 rounding, beta 0.5); Paddle's alpha = 0.2 is another function."""
    x = r.values.get(group.operands["x"])
    attrs = node_of(group.members[0]).attrs
    alpha, beta = attrs.get("alpha"), attrs.get("beta")
    alpha_value = 0.2 if alpha is None else float(alpha.value)  # type: ignore[union-attr]
    beta_value = 0.5 if beta is None else float(beta.value)  # type: ignore[union-attr]
    if x is None or abs(alpha_value - 1 / 6) > 1e-7 or beta_value != 0.5:
        return False
    r.add(node_of(group.last), nf.HardSwishOp(x), [group.output])
    return True


PATTERNS: tuple[Callable[[_Graph], list[Group]], ...] = (_match_layer_norms, _match_hard_swishes)
"""The matchers, in the order their groups are taken (a node joins one group at most)."""


def find_groups(graph: Any) -> dict[int, Group]:
    """Node index -> the matched group it belongs to, for every pattern of ``graph``."""
    g = _Graph(graph)
    found: dict[int, Group] = {}
    for match in PATTERNS:
        for group in match(g):
            if not any(i in found for i in group.members):
                found.update({i: group for i in group.members})
    return found
