"""What a `.ne` op table's rows and functions see of one node, and how they say it does not map.

Both levels build ops from nodes: `NodeSpec` is a node's op type, attributes and inputs with
typed accessors whose errors name the node; `NodeProblem` (the node contradicts itself, an
error located at the attribute or input) and `Unsupported` (the op cannot express it: the
nq level keeps it as `nf.custom` with a warning) are what a converter raises. `AttrMap`
is a table row's mapping of one attribute to one op property.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

from nanoir.grammar.ne.schema import encode_prop
from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    ConstTensor,
    Float,
    InitNode,
    Loc,
    RuntimeNode,
    WordTensor,
)
from xdsl.ir import Operation, SSAValue

__all__ = [
    "AttrMap",
    "Unsupported",
    "NodeProblem",
    "NodeInput",
    "NodeSpec",
    "Converter",
    "kind_of_const",
]


class Unsupported(Exception):
    """The node is meaningful but the nf op cannot express it: keep it as nf.custom."""


class NodeProblem(Exception):
    """A node contradicts itself; `attr` or `input` says where (for the location)."""

    def __init__(self, message: str, *, attr: str | None = None, input: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.attr = attr
        self.input = input

    def loc(self, node: InitNode | RuntimeNode) -> Loc | None:
        """Where in the node the problem is: the attribute, else the input, else the node."""
        if self.attr is not None:
            for (key, _), loc in zip(node.attrs, node.attr_locs):
                if key == self.attr:
                    return loc
        if self.input is not None and self.input < len(node.in_locs):
            return node.in_locs[self.input]
        return node.loc


NodeInput = Union[SSAValue, ConstTensor, WordTensor]


@dataclass
class NodeSpec:
    """What a converter sees of one node: op type, attributes and inputs (in in_s order).

    Inputs are SSA values (float constants, computed tensors) or the declarations of integer
    and word constants, which never become SSA values. The exporter builds the same spec
    from an op to check that an `ne.attr` it carries still means what the op does.
    """

    name: str
    op_type: str
    attrs: tuple[tuple[str, AttrValue], ...]
    inputs: tuple[NodeInput, ...]
    num_outputs: int

    def __post_init__(self) -> None:
        self._attrs = dict(self.attrs)

    # -- attributes ------------------------------------------------------------------------
    def allow(self, *names: str) -> None:
        unknown = [k for k, _ in self.attrs if k not in names]
        if unknown:
            raise Unsupported(f"attribute '{unknown[0]}' is not one nanoir maps for {self.op_type}")

    def has(self, key: str) -> bool:
        return key in self._attrs

    def int(self, key: str, default: int | None = None) -> int:
        value = self._attrs.get(key, default)
        if value is None:
            raise NodeProblem(f"{self.op_type} node '{self.name}' needs attribute '{key}'")
        if isinstance(value, bool) or not isinstance(value, int):
            raise NodeProblem(
                f"attribute '{key}' of node '{self.name}' must be an integer", attr=key
            )
        return value

    def ints(self, key: str) -> tuple[int, ...] | None:
        value = self._attrs.get(key)
        if value is None:
            return None
        if not isinstance(value, tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise NodeProblem(
                f"attribute '{key}' of node '{self.name}' must be a list of integers", attr=key
            )
        return tuple(int(v) for v in value)  # type: ignore[arg-type]  # checked above

    def float(self, key: str, default: float | None = None) -> float:
        value = self._attrs.get(key)
        if value is None:
            if default is None:
                raise NodeProblem(f"{self.op_type} node '{self.name}' needs attribute '{key}'")
            return default
        if isinstance(value, Float):
            number = value.value
        elif isinstance(value, int) and not isinstance(value, bool):
            number = float(value)
        else:
            raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be a number", attr=key)
        if not math.isfinite(number):  # (1e999 reads as inf, which no .ne float spells)
            raise NodeProblem(
                f"attribute '{key}' of node '{self.name}' must be a finite number, got {number}",
                attr=key,
            )
        return number

    def name_attr(self, key: str, default: str) -> str:
        value = self._attrs.get(key, default)
        if not isinstance(value, str):
            raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be a name", attr=key)
        return value

    def flag(self, key: str, default: int) -> bool:
        value = self.int(key, default)
        if value not in (0, 1):
            raise NodeProblem(
                f"attribute '{key}' of node '{self.name}' must be 0 or 1, got {value}", attr=key
            )
        return bool(value)

    # -- inputs and outputs ----------------------------------------------------------------
    def values(self, low: int, high: int | None = None) -> list[SSAValue]:
        """The inputs as SSA values: `low` to `high` of them (-1: no limit), none a constant."""
        high = low if high is None else high
        n = len(self.inputs)
        if n < low or (high >= 0 and n > high):
            wanted = (
                str(low) if low == high else f"at least {low}" if high < 0 else f"{low} to {high}"
            )
            raise NodeProblem(f"{self.op_type} node '{self.name}' takes {wanted} inputs, got {n}")
        out: list[SSAValue] = []
        for i, value in enumerate(self.inputs):
            if not isinstance(value, SSAValue):
                raise Unsupported(
                    f"input {i} '{value.name}' is a {kind_of_const(value)}, not a float tensor"
                )
            out.append(value)
        return out

    def one_output(self) -> None:
        if self.num_outputs != 1:
            raise Unsupported(
                f"{self.op_type} node '{self.name}' has {self.num_outputs} outputs; nanoir maps 1"
            )


def kind_of_const(value: ConstTensor | WordTensor) -> str:
    return f"{value.dtype} constant" if isinstance(value, ConstTensor) else "word-list constant"


Converter = Callable[[NodeSpec], Operation]


@dataclass(frozen=True)
class AttrMap:
    """An attribute that is one op property: `.ne` name, property, codec kind, default.

    `kind` is an `schema.encode_prop` codec ("int", "float", "ints", "flag",
    "rounding", "name"). At the nq level `read` takes the value from a node (ONNX's `default` when
    absent; None: required) and `write` spells the property; the hw level writes the
    attribute exactly when the op has the property (`hw.HwOp.props`)."""

    name: str
    prop: str
    kind: str
    default: int | float | None = None

    def read(self, n: NodeSpec) -> object:
        """The node's value for the op's constructor (NodeProblem naming the node if bad)."""
        if self.kind == "int":
            return n.int(self.name, None if self.default is None else int(self.default))
        if self.kind == "float":
            return n.float(self.name, None if self.default is None else float(self.default))
        if self.kind == "flag":
            return n.flag(self.name, int(self.default or 0))
        if self.kind == "ints":
            return n.ints(self.name)
        raise AssertionError(
            f"AttrMap {self.name!r}: nq rows read int, float, flag or ints, not {self.kind!r}"
        )

    def write(self, op: Operation) -> tuple[str, AttrValue]:
        return self.name, encode_prop(self.kind, getattr(op, self.prop))
