"""The ONNX reader's walk over one graph: the model's checks, the graph inputs (with
``input_shapes``), each node in order, and the function it builds.

Each node goes, in this order, to: NanoEngine's ``Q`` or the QDQ pair (``qdq.py``);
``Constant``/``Identity``; the evaluation of integer tensors with dynamic entries
(``symbolic.py``: a ``Shape`` of a tensor with a dynamic batch, and what moves it to a
Reshape or Expand); the constant folder when every input is a constant (``fold.py``: an
input-independent node is evaluated at import); ``Shape``/``Size`` of a runtime tensor; the
recurrent layers (``recurrent.py``); an embedding's ``Gather``; the op forms
(``forms.py``, ``compute.py``, ``resize.py``); else the op type's `.ne` row. A written-out
LayerNorm or HardSwish (``patterns.py``) is deferred to its last node and read as one op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.ne.nq import BY_OP_TYPE
from nanoir.grammar.ne.schema import set_hint
from nanoir.grammar.ne.syntax_tree import AttrValue, ConstTensor, Float
from nanoir.grammar.onnx.fold import (
    MAX_SHAPE_ENTRIES,
    SHAPE_OPERAND,
    FoldBudget,
    Unfoldable,
    evaluate,
    fold_budget,
    plain,
)
from nanoir.grammar.onnx.importer.compute import COMPUTE
from nanoir.grammar.onnx.importer.forms import FORMS, read_by_row
from nanoir.grammar.onnx.importer.patterns import Group, find_groups
from nanoir.grammar.onnx.importer.qdq import (
    NANOENGINE_DOMAIN,
    read_dequantize_linear,
    read_q,
    read_quantize_linear,
)
from nanoir.grammar.onnx.importer.resize import RESIZE, read_resize
from nanoir.grammar.onnx.importer.state import (
    FLOAT_TYPES,
    Node,
    OnnxImportError,
    ReaderState,
    dims_text,
    node_label,
    type_name,
)
from nanoir.grammar.onnx.recurrent import ONNX_RECURRENT, read_recurrent
from nanoir.grammar.onnx.symbolic import (
    MOVEMENT,
    DynamicDim,
    SymbolicShape,
    first_dynamic,
    static_or_symbolic,
)
from nanoir.runtime.numerics.shapes import shape_str, shapes_compatible
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from nanoir.errors import ArgumentError

__all__ = ["Reader", "InputShapes"]

InputShapes = Mapping[str, Sequence[int | None]]
"""Graph input name -> its shape (None or -1 for a dim left dynamic)."""

OLDEST_READ = 7
"""Opsets below this are upgraded to it with ``onnx.version_converter`` first (with a warning)."""

_INDEX_TYPES = (7, 6)
"""Integer graph input types read as an embedding's indices: INT64, INT32."""

_INT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}
"""ONNX integer element types (a Cast of a shape vector to one of them keeps its entries)."""

Read = Callable[[ReaderState, Node], None]

READERS: dict[str, Read] = {**FORMS, **COMPUTE, **RESIZE}
"""ONNX op type (default domain) -> its reader, where the `.ne` row alone does not do."""


def _all_tensors(graph: Any) -> Any:
    """Every TensorProto of a graph: initializers, sparse ones, node attributes, subgraphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def _python_attrs(attrs: Mapping[str, AttrValue]) -> dict[str, Any]:
    """`.ne` attribute values as plain Python (floats for `Float`)."""

    def plain_value(v: AttrValue) -> Any:
        if isinstance(v, Float):
            return v.value
        if isinstance(v, tuple):
            return [plain_value(x) for x in v]
        return v

    return {k: plain_value(v) for k, v in attrs.items()}


class Reader(ReaderState):
    """Reads one model (see the module docstring)."""

    def __init__(
        self,
        onnx: Any,
        model: Any,
        filename: str,
        file_bytes: int,
        input_shapes: InputShapes | None = None,
    ) -> None:
        super().__init__(onnx, model, filename)
        self.defined: dict[str, str] = {}
        self.index_inputs: set[str] = set()
        self.input_shapes = _check_input_shapes(input_shapes)
        self.budget = FoldBudget(fold_budget(file_bytes))
        self.opsets: dict[str, int] = {}
        self.groups: dict[int, Group] = {}
        self.deferred: set[int] = set()

    # -- validity -----------------------------------------------------------------------------
    def _define(self, name: str, what: str) -> None:
        """Record a tensor's definition; a second one is refused (onnxruntime refuses it; read
        on, the last definition would silently win)."""
        if not name:
            return
        if name in self.defined:
            raise self.error(f"it defines '{name}', which is already {self.defined[name]}")
        self.defined[name] = f"the output of node {self.current}" if self.current else what

    def _refuse_external_data(self) -> None:
        """Tensors still stored as external data are refused: read without a folder (stdin,
        bytes), their relative locations would resolve against the working directory."""
        for tensor in _all_tensors(self.graph):
            if tensor.data_location == self.onnx.TensorProto.EXTERNAL:
                where = dict((e.key, e.value) for e in tensor.external_data).get("location", "")
                raise self.error(
                    f"tensor '{tensor.name}' is stored as external data ('{where}'), and the "
                    "model was read without a folder to find it in (from stdin or bytes); "
                    "read the model from its file instead"
                )

    def _check_model(self, results: Sequence[SSAValue]) -> None:
        """`onnx.checker`'s full check (structure, schemas, single definitions, types by strict
        inference), except that declared shapes are not compared with inferred ones: value_info
        shapes are hints the reader does not use, and graph outputs are compared with the
        shapes the reader computes (`run`). Runs after the reader, whose messages are better
        located, on a copy of the model. A graph output declared with no type (onnxruntime
        reads it) is checked with the element type the reader computed for it."""
        for out in self.graph.output:
            if out.type.HasField("tensor_type") and not out.type.tensor_type.elem_type:
                raise self.error(f"graph output '{out.name}' has element type UNDEFINED")
        copy = self.onnx.ModelProto()
        copy.CopyFrom(self.model)
        infos = [*copy.graph.output, *copy.graph.value_info]
        for info in infos:
            if info.type.HasField("tensor_type"):
                info.type.tensor_type.ClearField("shape")
        for info in copy.graph.input:  # a -1 dim (Paddle's dynamic dim) is no ONNX dim
            if info.type.HasField("tensor_type"):
                for d in info.type.tensor_type.shape.dim:
                    if d.HasField("dim_value") and d.dim_value < 0:
                        d.dim_param = "dynamic"
        for info, value in zip(copy.graph.output, results):
            if info.type.WhichOneof("value") is None:
                elt = value.type.get_element_type() if isinstance(value.type, TensorType) else None
                codes = {t: code for code, t in FLOAT_TYPES.items()}
                info.type.tensor_type.elem_type = codes.get(elt, 0)  # type: ignore[arg-type]
            if info.type.HasField("tensor_type"):
                info.type.tensor_type.shape.SetInParent()  # the checker wants one; unused here
        try:
            self.onnx.checker.check_model(copy)
            for info in copy.graph.output:
                info.type.tensor_type.ClearField("shape")
            self.onnx.shape_inference.infer_shapes(copy, check_type=True, strict_mode=True)
        except Exception as e:  # ValidationError, InferenceError, or a C++ error
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = " ".join(lines[:3]) if lines else type(e).__name__
            raise self.error(f"the model is not valid ONNX: {detail}") from None

    def _upgrade_old_opset(self) -> None:
        """A model of an opset below 7 is converted to opset 7 by ``onnx.version_converter``
        (its adapters rewrite the older spellings: ``consumed_inputs``, Gemm's ``broadcast``),
        with a warning saying so."""
        for domain in self.model.opset_import:
            if domain.domain in ("", "ai.onnx") and domain.version < OLDEST_READ:
                old = domain.version
                try:
                    converted = self.onnx.version_converter.convert_version(self.model, OLDEST_READ)
                except Exception as e:
                    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
                    raise self.error(
                        f"opset {old} is older than nanoir reads ({OLDEST_READ}), and "
                        f"onnx.version_converter cannot upgrade it ({lines[0] if lines else e})"
                    ) from None
                self.model = converted
                self.warn_once(
                    "opset",
                    f"opset {old} is older than nanoir reads; the model was upgraded to opset "
                    f"{OLDEST_READ} with onnx.version_converter",
                )
                return

    # -- the whole graph --------------------------------------------------------------------
    def run(self) -> ModuleOp:
        if not self.model.HasField("graph"):
            raise self.error("the model has no graph")
        newest = int(self.onnx.defs.onnx_opset_version())
        for domain in self.model.opset_import:
            if domain.domain in ("", "ai.onnx") and domain.version > newest:
                raise self.error(
                    f"opset {domain.version} is newer than any ONNX defines ({newest})"
                )
        self._refuse_external_data()
        self._upgrade_old_opset()
        self.opsets = {
            ("" if d.domain == "ai.onnx" else d.domain): int(d.version)
            for d in self.model.opset_import
        }
        numpy_helper = self.onnx.numpy_helper
        if len(self.graph.sparse_initializer):
            raise self.error("sparse initializers are not read")
        for init in self.graph.initializer:
            self._define(init.name, "an initializer")
            try:
                self.static[init.name] = plain(numpy_helper.to_array(init))
                self.types[init.name] = int(init.data_type)
            except Exception as e:
                raise self.error(
                    f"initializer '{init.name}' cannot be read ({type(e).__name__}: {e})"
                ) from None
        names = [i.name for i in (*self.graph.input, *self.graph.output, *self.graph.initializer)]
        if not all(isinstance(n, str) for n in names):
            raise self.error("a graph input, output or initializer name is not valid UTF-8")
        inputs = [i for i in self.graph.input if i.name not in self.static]
        unknown = sorted(set(self.input_shapes) - {i.name for i in inputs})
        if unknown:
            raise self.error(
                f"input_shapes names '{unknown[0]}', which is no graph input (the graph inputs "
                f"are {', '.join(repr(i.name) for i in inputs) or 'none'})"
            )
        self.index_inputs = self._index_inputs(inputs)
        arg_types = [self._value_type(i, "input") for i in inputs]
        block = Block(arg_types=arg_types)
        for arg, info in zip(block.args, inputs):
            self._define(info.name, "a graph input")
            self.values[info.name] = arg
            set_hint(arg, info.name)
        self.groups = find_groups(self.graph)
        for index, node in enumerate(self.graph.node):
            self.current = node_label(node, index)
            self._node(node, index)
        self.current = ""
        results: list[SSAValue] = []
        for out in self.graph.output:
            value = self.ssa(out.name, f"graph output '{out.name}'")
            declared = self._declared_shape(out, "output")
            got = nf.tensor_shape(value)
            if declared is not None and not shapes_compatible(got, declared):
                raise self.error(
                    f"graph output '{out.name}' is declared {shape_str(declared)}, but the "
                    f"graph computes {shape_str(got)}"
                )
            results.append(value)
        if not results:
            raise self.error("the graph has no outputs")
        self._check_model(results)
        ret = ReturnOp(*results)
        for op in (*self.const_ops, *self.ops):
            if op in self.bypassed and not any(r.uses for r in op.results):
                op.erase()
                continue
            block.add_op(op)
        block.add_op(ret)
        func = FuncOp("main", (arg_types, [r.type for r in results]), Region(block))
        module = ModuleOp([func])
        try:
            module.verify()
        except VerifyException as e:
            raise self.error(f"the program does not verify: {e}") from None
        return module

    # -- graph inputs ---------------------------------------------------------------------
    def _declared_shape(self, info: Any, what: str) -> list[int] | None:
        """A value's declared shape; a dim_param, or -1 (as Paddle writes a dynamic dim), is
        dynamic; another negative dim is refused."""
        t = info.type
        if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        dims = []
        for d in t.tensor_type.shape.dim:
            if not d.HasField("dim_value") or d.dim_value == -1:
                dims.append(DYNAMIC_INDEX)
            elif d.dim_value < 0:
                raise self.error(f"graph {what} '{info.name}' has a negative dim {d.dim_value}")
            else:
                dims.append(int(d.dim_value))
        return dims

    def _index_inputs(self, inputs: Sequence[Any]) -> set[str]:
        """Integer graph inputs read only as the indices of Gather on axis 0 (token ids of
        an embedding, as nanoir writes ``nf.embedding``): they become float inputs holding
        exact integers, and those Gathers ``nf.embedding`` (:meth:`_embedding`)."""
        found = set()
        for info in inputs:
            t = info.type
            if not t.HasField("tensor_type") or t.tensor_type.elem_type not in _INDEX_TYPES:
                continue
            readers = [n for n in self.graph.node if info.name in n.input]
            if readers and all(
                n.domain in ("", "ai.onnx")
                and n.op_type == "Gather"
                and list(n.input[1:2]) == [info.name]
                and info.name != n.input[0]
                and all(a.name != "axis" or a.i == 0 for a in n.attribute)
                for n in readers
            ):
                found.add(info.name)
        return found

    def _value_type(self, info: Any, what: str) -> TensorType:
        t = info.type
        if not t.HasField("tensor_type"):
            raise self.error(f"graph {what} '{info.name}' is not a tensor")
        elt = FLOAT_TYPES.get(t.tensor_type.elem_type)
        if info.name in self.index_inputs:
            elt = f32  # token ids: exact integers in a float tensor, as nf.embedding reads them
        if elt is None:
            index = " (an int64/int32 one only as the indices of Gather on axis 0)"
            raise self.error(
                f"graph {what} '{info.name}' has element type "
                f"{type_name(self.onnx, t.tensor_type.elem_type)}; nanoir reads float tensors"
                + (index if t.tensor_type.elem_type in _INDEX_TYPES else "")
            )
        shape = self._declared_shape(info, what)
        if shape is None:
            if info.name not in self.input_shapes:
                raise self.error(f"graph {what} '{info.name}' has no shape")
            shape = [DYNAMIC_INDEX] * len(self.input_shapes[info.name])
        given = self.input_shapes.get(info.name)
        if given is not None:
            if len(given) != len(shape):
                raise self.error(
                    f"input_shapes gives '{info.name}' {len(given)} dims; the graph declares "
                    f"{dims_text(shape)}"
                )
            for i, (d, g) in enumerate(zip(shape, given)):
                if d != DYNAMIC_INDEX and g != DYNAMIC_INDEX and d != g:
                    raise self.error(
                        f"input_shapes gives '{info.name}' dim {i} the size {g}; the graph "
                        f"declares {dims_text(shape)}"
                    )
            shape = [d if g == DYNAMIC_INDEX else g for d, g in zip(shape, given)]
        return TensorType(elt, shape)

    # -- one node -------------------------------------------------------------------------
    def _node(self, proto: Any, index: int) -> None:
        texts = [proto.name, proto.op_type, proto.domain, *proto.input, *proto.output]
        texts += [a.name for a in proto.attribute]
        if not all(isinstance(t, str) for t in texts):
            raise self.error("its names are not valid UTF-8")
        domain = proto.domain if proto.domain != "ai.onnx" else ""
        outputs = list(proto.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        if not outputs:
            raise self.error("the node has no outputs")
        for name in proto.output:
            self._define(name, "")
        self._bound_shape_operand(proto, domain)
        group = self.groups.get(index)
        if group is not None and index != group.last:
            self.deferred.add(index)
            return
        if group is not None:
            self.groups = {i: g for i, g in self.groups.items() if g is not group}
            if group.fuse(self, group, self._node_of):
                self.deferred -= set(group.members)
                return
            for member in group.members[:-1]:  # not the op after all: node by node
                self.deferred.discard(member)
                self.current = node_label(self.graph.node[member], member)
                self._read(self._node_of(member))
            self.current = node_label(proto, index)
        self._read(self._node_of(index))

    def _node_of(self, index: int) -> Node:
        proto = self.graph.node[index]
        domain = proto.domain if proto.domain != "ai.onnx" else ""
        inputs, outputs = list(proto.input), list(proto.output)
        while inputs and not inputs[-1]:
            inputs.pop()
        while outputs and not outputs[-1]:
            outputs.pop()
        opset = self.opsets.get(domain, 1)
        return Node(proto, index, proto.op_type, domain, opset, self._attrs(proto), inputs, outputs)

    def _attrs(self, proto: Any) -> dict[str, AttrValue]:
        A = self.onnx.AttributeProto
        out: dict[str, AttrValue] = {}
        for attr in proto.attribute:
            kind = attr.type
            try:
                if kind == A.INT:
                    out[attr.name] = int(attr.i)
                elif kind == A.FLOAT:
                    out[attr.name] = Float.from_value(float(attr.f))
                elif kind == A.STRING:
                    out[attr.name] = attr.s.decode("utf-8")
                elif kind == A.INTS:
                    out[attr.name] = tuple(int(v) for v in attr.ints)
                elif kind == A.FLOATS:
                    out[attr.name] = tuple(Float.from_value(float(v)) for v in attr.floats)
                elif kind == A.STRINGS:
                    out[attr.name] = tuple(s.decode("utf-8") for s in attr.strings)
                # tensors and graphs: read where they mean something (Constant,
                # ConstantOfShape's value, folded control flow is refused by the folder)
            except (UnicodeDecodeError, ValueError) as e:
                raise self.error(f"attribute '{attr.name}' cannot be read: {e}") from None
        return out

    def _read(self, n: Node) -> None:
        if n.domain == NANOENGINE_DOMAIN and n.op_type == "Q":
            read_q(self, n)
            return
        if n.domain != "":
            self._unknown(n)
        if n.op_type == "Constant":
            self._constant_node(n)
            return
        if n.op_type == "Identity" and len(n.inputs) == 1 and len(n.outputs) == 1:
            src = n.inputs[0]
            if src in self.static:
                self.static[n.outputs[0]] = self.static[src]
            elif src in self.symbolic:
                self.symbolic[n.outputs[0]] = self.symbolic[src]
            else:
                self.alias(n.outputs[0], self.ssa(src))
            return
        if n.op_type == "QuantizeLinear":
            read_quantize_linear(self, n)
            return
        if n.op_type == "DequantizeLinear":
            read_dequantize_linear(self, n)
            return
        if any(name in self.symbolic for name in n.inputs):
            self._symbolic(n)
            return
        if all(not name or name in self.static for name in n.inputs):
            self._fold(n)
            return
        if n.op_type in ("Shape", "Size") and n.inputs and n.inputs[0] in self.values:
            self._shape_of(n)
            return
        if n.op_type in ONNX_RECURRENT:
            self._recurrent(n)
            return
        if n.op_type == "Gather" and len(n.inputs) == 2 and n.inputs[1] in self.index_inputs:
            self._embedding(n)
            return
        read = READERS.get(n.op_type)
        if read is not None:
            read(self, n)
        elif n.op_type in BY_OP_TYPE and n.op_type != "Q":
            read_by_row(self, n)
        else:
            self._unknown(n)

    def _unknown(self, n: Node) -> None:
        known = sorted({k for k in BY_OP_TYPE if k != "Q"} | set(READERS) | set(ONNX_RECURRENT))
        shown = f"{n.proto.domain}::{n.op_type}" if n.proto.domain else n.op_type
        raise self.error(
            f"nanoir does not read the op {shown} on a runtime input (it reads "
            f"{NANOENGINE_DOMAIN}::Q, QuantizeLinear/DequantizeLinear, Constant, Identity, "
            f"{', '.join(known)}; and any standard op on constants only)"
        )

    # -- constants, folds and shapes ---------------------------------------------------------
    def _constant_node(self, n: Node) -> None:
        proto = n.proto
        if len(n.outputs) != 1 or len(proto.attribute) != 1:
            raise self.error("a Constant node has 1 output and 1 attribute")
        attr = proto.attribute[0]
        helper = self.onnx.helper
        try:
            if attr.name == "value":
                array = plain(self.onnx.numpy_helper.to_array(attr.t))
                self.types[n.outputs[0]] = int(attr.t.data_type)
            elif attr.name in ("value_float", "value_floats"):
                array = np.asarray(helper.get_attribute_value(attr), dtype=np.float32)
            elif attr.name in ("value_int", "value_ints"):
                array = np.asarray(helper.get_attribute_value(attr), dtype=np.int64)
            else:
                raise self.error(f"a Constant with attribute '{attr.name}' is not read")
        except OnnxImportError:
            raise
        except Exception as e:
            raise self.error(f"its value cannot be read ({type(e).__name__}: {e})") from None
        self.static[n.outputs[0]] = array

    def _fold(self, n: Node) -> None:
        """Evaluate a node whose inputs are all constants (``fold.py``)."""
        args = [self.static[name] if name else None for name in n.proto.input]
        try:
            results = evaluate(n.proto, n.opset, args, self.budget)
        except Unfoldable as why:
            raise self.error(
                f"it computes from constants only (an input-independent subgraph, which nanoir "
                f"evaluates at import), but {why}"
            ) from None
        for name, value in zip([o for o in n.proto.output if o], results):
            self.static[name] = plain(value)

    def _bound_shape_operand(self, proto: Any, domain: str) -> None:
        """A constant shape operand (Reshape's shape, Expand's, Tile's repeats,
        ConstantOfShape's input) has at most MAX_SHAPE_ENTRIES entries."""
        index = SHAPE_OPERAND.get(proto.op_type) if domain == "" else None
        if index is None or len(proto.input) <= index:
            return
        name = proto.input[index]
        if name in self.static and self.static[name].size > MAX_SHAPE_ENTRIES:
            raise self.error(
                f"its shape operand '{name}' has {self.static[name].size} entries; nanoir "
                f"reads shapes of at most {MAX_SHAPE_ENTRIES} dims"
            )

    def _shape_of(self, n: Node) -> None:
        """``Shape`` (with opset 15's start/end) or ``Size`` of a runtime tensor: a constant
        when the dims it reads are static, else (Shape) a vector with dynamic entries."""
        shape = list(nf.tensor_shape(self.values[n.inputs[0]]))
        if n.op_type == "Size":
            if DYNAMIC_INDEX in shape:
                raise self.error(
                    f"it counts the elements of '{n.inputs[0]}' {dims_text(shape)}, which has a "
                    "dynamic dim" + self.shapes_hint()
                )
            self.static[n.outputs[0]] = np.asarray(math.prod(shape), np.int64)
            return
        rank = len(shape)
        start = int(n.attrs.get("start", 0)) if n.opset >= 15 else 0  # type: ignore[arg-type]
        end = int(n.attrs.get("end", rank)) if n.opset >= 15 else rank  # type: ignore[arg-type]
        axes = list(range(rank))[slice(start, end)]
        dims = [shape[a] for a in axes]
        if DYNAMIC_INDEX not in dims:
            self.static[n.outputs[0]] = np.asarray(dims, np.int64)
            return
        full = tuple(-1 if d == DYNAMIC_INDEX else d for d in shape)
        entries = np.empty(len(axes), dtype=object)
        for i, (a, d) in enumerate(zip(axes, dims)):
            entries[i] = DynamicDim(n.inputs[0], a, full) if d == DYNAMIC_INDEX else d
        self.symbolic[n.outputs[0]] = SymbolicShape(entries, np.dtype(np.int64))

    def _symbolic(self, n: Node) -> None:
        """A node reading an integer tensor with dynamic entries: moved by ``MOVEMENT`` ops,
        read as a Reshape's or Expand's shape that keeps each dynamic dim where it was;
        anything else is refused, naming the dim."""
        dynamic = next(first_dynamic(self.symbolic[x]) for x in n.inputs if x in self.symbolic)
        to = n.attrs.get("to")
        if n.op_type == "Concat":
            movable = all(x in self.static or x in self.symbolic for x in n.inputs)
        else:
            movable = n.inputs[0] in self.symbolic and all(
                not x or x in self.static for x in n.inputs[1:]
            )
        if n.op_type == "Cast" and to not in _INT_TYPES:
            movable = False
        if movable and n.op_type in MOVEMENT:
            args: list[Any] = []
            for x in n.proto.input:
                if not x:
                    args.append(None)
                elif x in self.symbolic:
                    args.append(self.symbolic[x].entries)
                else:
                    args.append(self.static[x])
            first = n.inputs[0]
            dtype = (
                self.symbolic[first].dtype if first in self.symbolic else self.static[first].dtype
            )
            if n.op_type == "Cast":
                dtype = np.dtype(self.onnx.helper.tensor_dtype_to_np_dtype(to))
            try:
                entries = np.asarray(
                    MOVEMENT[n.op_type](args, _python_attrs(n.attrs)), dtype=object
                )
            except Exception as e:
                raise self.error(
                    f"its inputs cannot be evaluated ({type(e).__name__}: {e})"
                ) from None
            result = static_or_symbolic(entries, dtype)
            if isinstance(result, SymbolicShape):
                self.symbolic[n.outputs[0]] = result
            else:
                self.static[n.outputs[0]] = result
            return
        if n.op_type == "Reshape" and len(n.inputs) == 2 and n.inputs[0] in self.values:
            self._reshape_keeping(n)
            return
        if n.op_type == "Expand" and len(n.inputs) == 2 and self._float_operand(n.inputs[0]):
            self._expand_like(n)  # (a constant too: a class token expanded to the batch)
            return
        if n.op_type == "Resize" and n.inputs[0] in self.values and n.input(3) in self.symbolic:
            if not any(x in self.symbolic for x in n.inputs[:3]):
                read_resize(self, n, self._kept_dims(n, n.inputs[3], "sizes"))
                return
        raise self.error(
            f"it computes with {dynamic.describe()}, which is dynamic; nanoir keeps a dynamic "
            "dim only where a shape read from it feeds a Reshape or Expand that keeps it in "
            "place" + self.shapes_hint()
        )

    def _kept_dims(self, n: Node, name: str, what: str) -> tuple[int, ...]:
        """The entries of the shape vector ``name``, DYNAMIC_INDEX where it gives dim ``i`` of
        the data input (``n.inputs[0]``) its own dynamic size."""
        x_shape = nf.tensor_shape(self.values[n.inputs[0]])
        out = []
        for i, e in enumerate(self.symbolic[name].entries.reshape(-1)):
            if isinstance(e, DynamicDim):
                kept = e.axis == i and i < len(x_shape) and x_shape[i] == DYNAMIC_INDEX
                if not kept or (i != 0 and e.tensor != n.inputs[0]):
                    raise self.error(
                        f"its {what} put {e.describe()}, which is dynamic, at dim {i} (of "
                        f"{dims_text(x_shape)}); nanoir keeps a dynamic dim only in its place"
                        + self.shapes_hint()
                    )
                out.append(DYNAMIC_INDEX)
            else:
                out.append(int(e))
        return tuple(out)

    def _reshape_keeping(self, n: Node) -> None:
        """``Reshape(x, shape)`` whose entry ``i`` is dim ``i`` of a tensor, dynamic: the
        result keeps ``x``'s dim ``i`` (written as ONNX's 0, copy the input's dim)."""
        if n.attrs.get("allowzero", 0):
            raise self.error("its shape has a dynamic entry and allowzero=1" + self.shapes_hint())
        entries = self._kept_dims(n, n.inputs[1], "shape")
        shape = [0 if e == DYNAMIC_INDEX else e for e in entries]
        const = ConstTensor.from_numpy(n.inputs[1], np.asarray(shape, np.int64))
        self.row(n, "Reshape", {}, [n.inputs[0], const], n.outputs)

    def _float_operand(self, name: str) -> bool:
        """A runtime value, or a float constant (which :meth:`ssa` makes an nf.constant)."""
        return name in self.values or (name in self.static and self.static[name].dtype.kind == "f")

    def _expand_like(self, n: Node) -> None:
        """How nanoir writes an ``nf.expand`` with a shape source ``like``: ``Expand(x,
        Concat(int64 constants, Shape(like, start=i, end=i+1), ...))``: each dynamic entry
        gives dim ``i`` the size of dim ``i`` of one source tensor."""
        entries = list(self.symbolic[n.inputs[1]].entries.reshape(-1))
        sources = {e.tensor for e in entries if isinstance(e, DynamicDim)}
        moved = [i for i, e in enumerate(entries) if isinstance(e, DynamicDim) and e.axis != i]
        if len(sources) != 1 or moved:
            raise self.error(
                "its shape takes dynamic sizes from more than one tensor, or from another dim "
                "than the one it sets (nanoir's shape source gives dim i its own dim i)"
                + self.shapes_hint()
            )
        shape = tuple(-1 if isinstance(e, DynamicDim) else int(e) for e in entries)
        x, like = self.ssa(n.inputs[0]), self.ssa(sources.pop())
        self.row(n, "Expand", {"shape": shape}, [x, like], n.outputs)

    # -- special readers ------------------------------------------------------------------
    def _embedding(self, n: Node) -> None:
        """Gather on axis 0 of a constant ``[V, D]`` table (an initializer, or one
        dequantized) by an integer graph input: ``nf.embedding`` (how nanoir writes it)."""
        table = self.ssa(n.inputs[0])
        shape = nf.tensor_shape(table)
        if table not in self.init_values or len(shape) != 2:
            raise self.error(
                f"it gathers rows of '{n.inputs[0]}' {dims_text(shape)} by the integer input "
                f"'{n.inputs[1]}'; nanoir reads that only as an embedding, of a constant 2-D "
                "table (an initializer, or its DequantizeLinear)"
            )
        if len(n.outputs) != 1:
            raise self.error("Gather has 1 output")
        op = nf.EmbeddingOp(self.values[n.inputs[1]], table)
        try:
            op.verify()
        except VerifyException as e:
            raise self.error(f"nanoir cannot read this Gather node as an embedding: {e}") from None
        self.add(n, op, n.outputs)

    def _recurrent(self, n: Node) -> None:
        """ONNX's LSTM / GRU / RNN (``grammar/onnx/recurrent.py``)."""
        try:
            ops, values = read_recurrent(
                n.op_type,
                n.attrs,
                n.inputs,
                len(n.outputs),
                self.static_array,
                lambda name: self.ssa(name, "it"),
                self.constant,
                n.name,
            )
        except ValueError as why:
            raise self.error(f"nanoir cannot read this {n.op_type} node: {why}") from None
        self.ops.extend(ops)
        for name, result in zip(n.outputs, values):
            if name and result is not None:
                self.values[name] = result
                set_hint(result, name)


def _check_input_shapes(input_shapes: object) -> dict[str, list[int]]:
    """``input_shapes`` as name -> dims (DYNAMIC_INDEX for a dim left dynamic), or an
    `ArgumentError` naming what is wrong."""
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise ArgumentError(
            f"input_shapes must map graph input names to shapes, got {type(input_shapes).__name__}"
        )
    out: dict[str, list[int]] = {}
    for name, dims in input_shapes.items():
        if not isinstance(name, str):
            raise ArgumentError(f"input_shapes keys must be graph input names, got {name!r}")
        if isinstance(dims, str | bytes) or not isinstance(dims, Sequence):
            raise ArgumentError(f"input_shapes['{name}'] must be a sequence of dims, got {dims!r}")
        shape = []
        for d in dims:
            if d is None or (
                not isinstance(d, bool) and isinstance(d, int | np.integer) and d == -1
            ):
                shape.append(DYNAMIC_INDEX)
            elif isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
                raise ArgumentError(
                    f"input_shapes['{name}'] = {tuple(dims)}: a dim is a size >= 0, or None / -1 "
                    "to leave it dynamic"
                )
            else:
                shape.append(int(d))
        out[name] = shape
    return out
