"""What every part of the ONNX reader shares: the errors, the node being read (`Node`), and the
tensors read so far with the helpers that turn them into nf values (`ReaderState`).

A tensor name is, at any point, one of: an SSA value (``values``: a graph input, an op's
result, a float constant made an ``nf.constant``), a constant known now (``static``: an
initializer, a ``Constant``, a folded result; NumPy), an integer vector with dynamic entries
(``symbolic``: a shape of a tensor with a dynamic batch), or the codes of a QuantizeLinear
waiting for its DequantizeLinear (``pending``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.errors import NanoEngineImportWarning
from nanoir.grammar.ne.node import NodeInput, NodeProblem, NodeSpec, Unsupported
from nanoir.grammar.ne.nq import convert_known
from nanoir.grammar.ne.schema import NE_INIT, NE_NODE, dense_from_const, set_hint
from nanoir.grammar.ne.syntax_tree import AttrValue, ConstTensor, Float
from nanoir.grammar.onnx.symbolic import SymbolicShape, first_dynamic
from nanoir.runtime.numerics.quant import RoundingMode
from numpy.typing import NDArray
from xdsl.dialects.builtin import StringAttr, TensorType, UnitAttr, f16, f32, f64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from nanoir.errors import FileFormatError

__all__ = [
    "FLOAT_TYPES",
    "Node",
    "OnnxImportError",
    "OnnxImportWarning",
    "PendingQ",
    "ReaderState",
    "dims_text",
    "node_label",
    "type_name",
]


class OnnxImportError(FileFormatError):
    """An ONNX file nanoir cannot read; the message names the file and, where one is to
    blame, the node."""


class OnnxImportWarning(NanoEngineImportWarning):
    """Something in an ONNX file read with a documented liberty (BatchNormalization's
    `training_mode=1`, an opset upgraded by ``onnx.version_converter``)."""


FLOAT_TYPES: dict[int, Attribute] = {1: f32, 10: f16, 11: f64}
"""ONNX TensorProto element types nanoir computes with: FLOAT, FLOAT16, DOUBLE."""


def type_name(onnx: Any, elem_type: int) -> str:
    """An ONNX element type's name (``FLOAT``), or its number when ONNX has none."""
    try:
        return str(onnx.TensorProto.DataType.Name(elem_type))
    except ValueError:
        return str(elem_type)


def dims_text(shape: Sequence[int]) -> str:
    """A shape as ONNX tools print it: `[1, 3, 2, 3]`, `?` for a dynamic dim."""
    return "[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"


@dataclass
class Node:
    """One ONNX node as the reader's parts see it: inputs and outputs with trailing empty
    (absent optional) names dropped, attributes read into `.ne` attribute values, and the
    opset of its domain."""

    proto: Any
    index: int
    op_type: str
    domain: str
    opset: int
    attrs: dict[str, AttrValue]
    inputs: list[str]
    outputs: list[str]

    @property
    def name(self) -> str:
        """The node's name, or its first output's (what the `.ne` rows name it by)."""
        return str(self.proto.name) or self.outputs[0]

    def input(self, i: int) -> str:
        """Input ``i``'s name, or '' when absent."""
        return self.inputs[i] if i < len(self.inputs) else ""


@dataclass
class PendingQ:
    """A QuantizeLinear waiting for its DequantizeLinear."""

    node: str
    x: str
    bits: int
    exp: NDArray[np.int8]
    zero_type: int
    op: FakeQuantOp | None = None


@dataclass(repr=False, eq=False)
class ReaderState:
    """The tensors of one model being read, the ops made so far, and the helpers the reader's
    parts use to read inputs and add ops (their errors name the file and the node)."""

    onnx: Any
    model: Any
    filename: str
    values: dict[str, SSAValue] = field(default_factory=dict)
    static: dict[str, NDArray[Any]] = field(default_factory=dict)
    symbolic: dict[str, SymbolicShape] = field(default_factory=dict)
    types: dict[str, int] = field(default_factory=dict)
    """ONNX element type of initializers and Constants (as stored: int4 is read as int8)."""
    pending: dict[str, PendingQ] = field(default_factory=dict)
    const_ops: list[Operation] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)
    init_values: set[SSAValue] = field(default_factory=set)
    """Values computed from constants only (`.ne` init nodes)."""
    bypassed: set[Operation] = field(default_factory=set)
    """Ops dropped at the end if nothing reads them."""
    current: str = ""
    """The node being read, for messages."""
    warned: set[str] = field(default_factory=set)

    @property
    def graph(self) -> Any:
        return self.model.graph

    # -- errors and warnings ---------------------------------------------------------------
    def error(self, message: str) -> OnnxImportError:
        where = f"node {self.current}: " if self.current else ""
        return OnnxImportError(f"{self.filename}: {where}{message}")

    def warn_once(self, key: str, message: str) -> None:
        """One `OnnxImportWarning` per ``key`` and model."""
        if key in self.warned:
            return
        self.warned.add(key)
        warnings.warn(OnnxImportWarning(f"{self.filename}: warning: {message}"), stacklevel=8)

    # -- reading tensors ---------------------------------------------------------------------
    def ssa(self, name: str, reader: str = "it") -> SSAValue:
        """The float tensor ``name`` as an SSA value (a static float becomes an nf.constant)."""
        if name in self.values:
            return self.values[name]
        if name in self.pending:
            raise self.error(
                f"{reader} reads '{name}', the integer codes of QuantizeLinear node "
                f"'{self.pending[name].node}'; nanoir reads a QuantizeLinear only when "
                "DequantizeLinear nodes alone read it"
            )
        if name in self.static:
            array = self.static[name]
            if array.dtype.kind != "f" or array.dtype.itemsize not in (2, 4, 8):
                raise self.error(
                    f"{reader} reads '{name}', a {array.dtype} constant; expected a float tensor"
                )
            return self.constant(name, array)
        if name in self.symbolic:
            raise self.error(
                f"{reader} reads '{name}', an integer tensor computed from shapes, as a float "
                "tensor"
            )
        if not name:
            raise self.error(f"{reader} has an empty input name where a tensor is needed")
        raise self.error(
            f"{reader} reads '{name}', which is no graph input, initializer or output of an "
            "earlier node"
        )

    def constant(self, name: str, array: NDArray[Any]) -> SSAValue:
        """A new ``nf.constant`` named ``name`` holding ``array``; ``name`` reads it from now."""
        const = ConstTensor.from_numpy(name, array)
        op = nf.ConstantOp(dense_from_const(const), name)
        set_hint(op.results[0], name)
        self.const_ops.append(op)
        self.values[name] = op.results[0]
        self.init_values.add(op.results[0])
        return op.results[0]

    def fresh_constant(self, base: str, array: NDArray[Any]) -> SSAValue:
        """A new ``nf.constant`` under a name no tensor of the model has (a weight the reader
        derived: transposed, scaled, repeated)."""
        name, i = base, 0
        while name in self.values or name in self.static:
            i += 1
            name = f"{base}_{i}"
        return self.constant(name, array)

    def is_static(self, name: str) -> bool:
        return name in self.static

    def static_array(self, name: str, what: str) -> NDArray[Any]:
        """A constant input (initializer, Constant node output, folded result), read now."""
        if name in self.static:
            return self.static[name]
        if name in self.symbolic:
            raise self.error(
                f"its {what} '{name}' depends on {first_dynamic(self.symbolic[name]).describe()}, "
                "which is dynamic; nanoir reads it statically" + self.shapes_hint()
            )
        raise self.error(
            f"its {what} '{name}' is not a constant (an initializer, a Constant node's output, "
            "or computed from those); nanoir reads it statically"
        )

    def static_ints(self, name: str, what: str) -> tuple[int, ...]:
        array = self.static_array(name, what)
        if array.dtype.kind not in "iu" or array.ndim > 1:
            raise self.error(f"its {what} '{name}' must be a 1-D integer tensor")
        return tuple(int(v) for v in array.reshape(-1))

    def static_scalar(self, name: str, what: str) -> Float:
        array = self.static_array(name, what)
        if array.size != 1:
            raise self.error(f"its {what} '{name}' must hold one value, not {array.size}")
        value = float(array.reshape(-1)[0])
        if not math.isfinite(value):
            raise self.error(f"its {what} '{name}' is {value}")
        return Float.from_value(value)

    def shapes_hint(self) -> str:
        """How to give the graph inputs static shapes (the end of a message about a dynamic
        dim)."""
        examples = []
        for info in self.graph.input:
            if info.name in self.static or not info.type.HasField("tensor_type"):
                continue
            dims = [
                d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else -1
                for d in info.type.tensor_type.shape.dim
            ]
            if -1 in dims:
                example = [1 if i == 0 else 32 for i in range(len(dims))]
                example = [e if d < 0 else d for e, d in zip(example, dims)]
                examples.append((info.name, dims, example))
        if not examples:
            return ""
        name, dims, example = examples[0]
        given = ", ".join(f"'{n}': {tuple(e)}" for n, _, e in examples)
        return (
            f"; give the graph inputs static shapes (graph input '{name}' is declared "
            f"{dims_text(dims)}): nanoir.load(path, input_shapes={{{given}}}) or "
            f"--input-shape {name}={'x'.join(str(e) for e in example)} (sizes of your choice)"
        )

    # -- adding ops --------------------------------------------------------------------------
    def emit(self, op: Operation) -> Operation:
        """Append ``op`` (an intermediate op of a node's reading); its results are init
        values when all its operands are."""
        if op.operands and all(v in self.init_values for v in op.operands):
            self.init_values.update(op.results)
        self.ops.append(op)
        return op

    def add(self, node: Node | Any, op: Operation, outputs: Sequence[str]) -> None:
        """Append the op that computes ``outputs`` (its results, in order), recording the
        node's name (`ne.node`, and `ne.init` when computed from constants only)."""
        proto = node.proto if isinstance(node, Node) else node
        if proto.name:
            op.attributes[NE_NODE] = StringAttr(proto.name)
            if op.operands and all(v in self.init_values for v in op.operands):
                op.attributes[NE_INIT] = UnitAttr()
        self.emit(op)
        for name, result in zip(outputs, op.results):
            if name:
                self.values[name] = result
                set_hint(result, name)

    def alias(self, name: str, value: SSAValue) -> None:
        """``name`` is ``value`` (an op that computes nothing: Identity, Dropout)."""
        self.values[name] = value

    def readers(self, names: Sequence[str]) -> list[str]:
        """The nodes (and graph outputs) that read any of ``names``, as messages label them."""
        wanted = {n for n in names if n}
        found = [
            node_label(n, i)
            for i, n in enumerate(self.graph.node)
            if any(x in wanted for x in n.input)
        ]
        found += [f"graph output '{o.name}'" for o in self.graph.output if o.name in wanted]
        return found

    def int_const(self, name: str) -> ConstTensor:
        try:
            return ConstTensor.from_numpy(name, self.static[name])
        except (KeyError, ValueError):
            raise self.error(
                f"'{name}' is a {self.static[name].dtype} constant, which nanoir does not read"
            ) from None

    def row(
        self,
        node: Node,
        op_type: str,
        attrs: dict[str, AttrValue],
        inputs: Sequence[str | SSAValue | ConstTensor],
        outputs: Sequence[str],
    ) -> Operation:
        """The op of the `.ne` row ``op_type`` for these attributes and inputs (names: a float
        tensor or an integer constant; or SSA values, or integer constants), added for
        ``outputs``."""
        spec_inputs: list[NodeInput] = []
        for name in inputs:
            if isinstance(name, SSAValue | ConstTensor):
                spec_inputs.append(name)
            elif name in self.static and self.static[name].dtype.kind in "iub":
                spec_inputs.append(self.int_const(name))
            else:
                spec_inputs.append(self.ssa(name, "it"))
        floats = {v.type for v in spec_inputs if isinstance(v, SSAValue)}
        elts = {t.get_element_type() for t in floats if isinstance(t, TensorType)}
        if len(elts) > 1:
            raise self.error(f"its inputs mix float types ({', '.join(sorted(map(str, elts)))})")
        spec = NodeSpec(node.name, op_type, tuple(attrs.items()), tuple(spec_inputs), len(outputs))
        try:
            op = convert_known(spec)
        except Unsupported as why:
            hint = self.shapes_hint() if "dynamic" in str(why) else ""
            raise self.error(f"nanoir cannot read this {node.op_type} node: {why}{hint}") from None
        except NodeProblem as problem:
            raise self.error(problem.message) from None
        self.add(node, op, outputs)
        return op

    def fake_quant(
        self,
        x: SSAValue,
        bits: int,
        exp: NDArray[np.int8],
        mode: RoundingMode,
        signed: bool = True,
    ) -> FakeQuantOp:
        """An ``nq.fake_quant`` (verified; unsigned codes are ``signed = false`` at the same
        step)."""
        const = ConstTensor.from_numpy("exp", exp)
        op = FakeQuantOp(x, bits, dense_from_const(const), mode, signed)
        try:
            op.verify()
        except VerifyException as e:
            raise self.error(f"{e.args[0] if e.args else e}") from None
        return op


def node_label(node: Any, index: int) -> str:
    """How messages name a node: `'name' (OpType)`, or `#index (OpType)` when unnamed."""
    if not isinstance(node.name, str) or not isinstance(node.op_type, str):
        return f"#{index}"
    return f"'{node.name}' ({node.op_type})" if node.name else f"#{index} ({node.op_type})"
