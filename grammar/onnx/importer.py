"""Read an ONNX model (NanoEngine-PyTorch's export, or standard QDQ) into nf + nq.

Needs the ``onnx`` extra (`pip install nanoir[onnx]`), imported on first use.

    bytes --onnx (protobuf)--> ModelProto --this module--> builtin.module { func.func @main }

The ops are built by the very rows the `.ne` nq level uses (`ne.nq.NQ_OPS`): each ONNX
node becomes a `NodeSpec` (op type, attributes as `.ne` attribute values, inputs) and
`ne.nq.convert_known` builds and verifies the op, so an ONNX node and a `.ne` node of the
same op type mean the same. What ONNX says differently is translated before that:

- `t2e.qmodel::Q` (NanoEngine-PyTorch's quantizer; inputs `(x, k)`, attribute `bit_len`) is
  the `.ne` `Q` row: `nq.fake_quant` with trunc rounding, 1-bit = sign * 2**k, `k` an integer
  constant broadcast against `x` as torch broadcasts it (`[1]`, `[C]`, `[C,1,1,1]`,
  `[1,C,1,1]`; kept as int8);
- `QuantizeLinear` -> `DequantizeLinear` (standard QDQ) is `nq.fake_quant` with half-to-even
  rounding (QuantizeLinear's), `bits` from the zero point's type (int4/int8/int16) and
  `exp = -log2(scale)`; the scale must be a power of two and the zero point 0. Unsigned
  codes (uint4/uint8/uint16, zero point 0; also a QuantizeLinear without a zero point, whose
  codes are ONNX's default uint8) give `signed = false`.
  `DequantizeLinear` of an integer initializer (QDQ weights) is the dequantized float
  constant followed by an `nq.fake_quant` (exact: the values are on the grid);
- inputs that newer opsets take instead of attributes (Pad's pads/constant_value/axes,
  Split's split / num_outputs, Clip's min/max, Resize's scales/sizes) must be constants
  (initializers or `Constant` nodes) and are read into the attributes the rows take;
- `BatchNormalization` with `training_mode=1` (NanoEngine-PyTorch writes it even for
  inference) warns once and is read with its stored running statistics; its extra outputs
  (the updated statistics) must be unused;
- `PRelu`'s slope broadcasts from the right in ONNX, per channel (dim 1) in the row: a slope
  that is 1 on every dim but dim 1 once aligned (`[C, 1, 1]` of NCHW, `[C]` of a rank-2 input)
  or a single value is read as the row's 1-D slope; any other slope is refused;
- `Mul(x, Sigmoid(x))`, the Sigmoid read by that Mul alone, is one `nf.silu` (how the
  exporter writes SiLU below opset 24);
- an int64/int32 graph input read only as the indices of `Gather` on axis 0 is a float input
  of token ids, and each such Gather of a constant 2-D table (an initializer, or its
  DequantizeLinear) is `nf.embedding` (how the writer spells it); of any other table it is
  refused;
- `Constant` nodes and `Identity` make no op; trailing optional outputs nobody reads (MaxPool's
  Indices) are dropped.

Initializers and `Constant` outputs used as float tensors become `nf.constant` named after
them; integer ones are read statically (exponents, shapes, pads). Graph inputs keep their
symbolic dims dynamic (`tensor<?x3x8x8xf32>` for a batch `N`). Node names are recorded as
`ne.node` (and nodes computed from constants only as `ne.init`, exponent constants as
`ne.exp_name`), so a `.ne` export names things as the file did.

Every problem is one `OnnxImportError` (a `nanoir.errors.FileFormatError`) naming the file and
the node: bad protobuf, missing initializers or values, an op nanoir does not map, a `Q` with
the wrong arity or `bit_len`, a QDQ pair with a non-power-of-two scale or a non-zero zero point;
a tensor defined twice, an opset newer than ONNX's, what `onnx.checker` and strict type
inference refuse (declared shapes aside: value_info shapes are not used, graph outputs are
compared with what the reader computes); tensors stored as external data when the model was
read without a folder (stdin, bytes: never looked for in the working directory); shape
computations too large to fold (`fold.py`'s bounds, checked before computing).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.errors import NanoEngineImportWarning
from nanoir.grammar.ne.node import NodeInput, NodeProblem, NodeSpec, Unsupported
from nanoir.grammar.ne.nq import BY_OP_TYPE, convert_known
from nanoir.grammar.ne.schema import (
    EXP_MAX,
    EXP_MIN,
    NE_EXP_NAME,
    NE_INIT,
    NE_NODE,
    dense_from_const,
    same_value,
    set_hint,
)
from nanoir.grammar.ne.syntax_tree import AttrValue, ConstTensor, Float
from nanoir.grammar.onnx.fold import (
    FOLDABLE,
    MAX_FOLDED,
    MAX_FOLDED_TOTAL,
    MAX_SHAPE_ENTRIES,
    SHAPE_OPERAND,
    folded_size,
    plain,
)
from nanoir.grammar.onnx.recurrent import ONNX_RECURRENT, read_recurrent, read_squeeze
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.shapes import shape_str, shapes_compatible
from numpy.typing import NDArray
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    f16,
    f32,
    f64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from nanoir.errors import FileFormatError

__all__ = [
    "OnnxImportError",
    "OnnxImportWarning",
    "NANOENGINE_DOMAIN",
    "import_onnx_bytes",
    "import_onnx_model",
    "load_onnx",
]

NANOENGINE_DOMAIN = "t2e.qmodel"
"""The ONNX domain of NanoEngine-PyTorch's quantizer node `Q`."""


class OnnxImportError(FileFormatError):
    """An ONNX file nanoir cannot read; the message names the file and, where one is to
    blame, the node."""


class OnnxImportWarning(NanoEngineImportWarning):
    """Something in an ONNX file read with a documented liberty (BatchNormalization's
    `training_mode=1`)."""


def _onnx(filename: str) -> Any:
    try:
        import onnx  # lazy: an optional dependency (the `onnx` extra), loaded on first read
    except ImportError:
        raise OnnxImportError(
            f"{filename}: reading ONNX needs the onnx package: pip install nanoir[onnx]"
        ) from None
    return onnx


def load_onnx(path: str | os.PathLike[str]) -> ModuleOp:
    """Read and import an ONNX file (external data next to it is read too)."""
    filename = os.fspath(path)
    with open(filename, "rb") as f:
        raw = f.read()
    return import_onnx_bytes(raw, filename, os.path.dirname(os.path.abspath(filename)))


def import_onnx_bytes(
    raw: bytes, filename: str = "<bytes>", base_dir: str | None = None
) -> ModuleOp:
    """The nf/nq IR of ONNX file contents; `OnnxImportError` for anything it cannot read.

    `base_dir` is where tensors stored as external data are looked for; with None (stdin,
    bytes) a model with external data is refused, never resolved against the working
    directory."""
    onnx = _onnx(filename)
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as e:  # protobuf's DecodeError, or anything it raises on garbage
        raise OnnxImportError(
            f"{filename}: not a readable ONNX model ({type(e).__name__}: {e})"
        ) from None
    if base_dir is not None:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, base_dir)
        except Exception as e:
            raise OnnxImportError(
                f"{filename}: cannot read the model's external data ({type(e).__name__}: {e})"
            ) from None
    return import_onnx_model(model, filename)


def import_onnx_model(model: Any, filename: str = "<model>") -> ModuleOp:
    """The nf/nq IR of an `onnx.ModelProto`; `OnnxImportError` for anything it cannot read."""
    reader = _Reader(_onnx(filename), model, filename)
    try:
        return reader.run()
    except OnnxImportError:
        raise
    except Exception as e:  # never a traceback for a bad file: say where it happened
        where = f"node {reader.current}: " if reader.current else ""
        raise OnnxImportError(
            f"{filename}: {where}cannot be read ({type(e).__name__}: {e})"
        ) from None


# ---------------------------------------------------------------------------------------
# The reader
# ---------------------------------------------------------------------------------------

_FLOAT_TYPES: dict[int, Attribute] = {1: f32, 10: f16, 11: f64}
"""ONNX TensorProto element types nanoir computes with: FLOAT, FLOAT16, DOUBLE."""

_INDEX_TYPES = (7, 6)
"""Integer graph input types read as an embedding's indices: INT64, INT32."""

_QDQ_BITS: dict[int, int] = {3: 8, 5: 16, 22: 4}
"""Signed QDQ code types (INT8, INT16, INT4) -> bits."""

_UNSIGNED_BITS: dict[int, int] = {2: 8, 4: 16, 21: 4}
"""Unsigned QDQ code types (UINT8, UINT16, UINT4) -> bits: `signed = false` fake-quants."""

_RESIZE_DEFAULTS: dict[str, AttrValue] = {
    "antialias": 0,
    "cubic_coeff_a": Float("-0.75"),
    "exclude_outside": 0,
    "extrapolation_value": Float("0.0"),
    "keep_aspect_ratio_policy": "stretch",
}
"""Resize attributes that change nothing for nearest/asymmetric/floor at these values."""


@dataclass
class _PendingQ:
    """A QuantizeLinear waiting for its DequantizeLinear."""

    node: str
    x: str
    bits: int
    exp: NDArray[np.int8]
    zero_type: int
    op: FakeQuantOp | None = None


def _all_tensors(graph: Any) -> Iterator[Any]:
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


def _expand_shape_names(graph: Any) -> set[str]:
    """The outputs of the Shape and Concat nodes that feed only Expand shape inputs (through
    Concats): where a dynamic dim may stay symbolic (``_Reader._symbolic_shape``)."""
    uses: dict[str, list[Any]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, i))
    graph_outputs = {o.name for o in graph.output}

    def feeds_expand(name: str) -> bool:
        readers = uses.get(name, [])
        return (
            bool(readers)
            and name not in graph_outputs
            and all(
                (node.op_type == "Expand" and i == 1)
                or (node.op_type == "Concat" and all(feeds_expand(o) for o in node.output))
                for node, i in readers
            )
        )

    return {
        out
        for node in graph.node
        if node.op_type in ("Shape", "Concat")
        for out in node.output
        if feeds_expand(out)
    }


def _dims(shape: Sequence[int]) -> str:
    """A shape as ONNX tools print it: `[1, 3, 2, 3]`, `?` for a dynamic dim."""
    return "[" + ", ".join("?" if d == DYNAMIC_INDEX else str(d) for d in shape) + "]"


def _label(node: Any, index: int) -> str:
    if not isinstance(node.name, str) or not isinstance(node.op_type, str):
        return f"#{index}"
    return f"'{node.name}' ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


class _Reader:
    def __init__(self, onnx: Any, model: Any, filename: str) -> None:
        self.onnx = onnx
        self.model = model
        self.filename = filename
        self.graph = model.graph
        self.values: dict[str, SSAValue] = {}
        self.static: dict[str, NDArray[Any]] = {}
        self.types: dict[str, int] = {}  # ONNX element type of initializers and Constants
        self.const_ops: list[Operation] = []
        self.ops: list[Operation] = []
        self.init_values: set[SSAValue] = set()
        self.pending: dict[str, _PendingQ] = {}
        self.warned_bn = False
        self.current = ""  # the node being read, for messages
        self.defined: dict[str, str] = {}  # tensor name -> what defines it, for messages
        self.folded = 0  # elements of all folded constants so far (MAX_FOLDED_TOTAL)
        self.bypassed: set[Operation] = set()  # ops dropped at the end if nothing reads them
        self.index_inputs: set[str] = set()  # int64/int32 graph inputs read as Gather indices
        self.symbolic: dict[str, list[int | tuple[str, int]]] = {}
        """Shape vectors with dynamic entries ``(tensor, dim)``: an Expand's shape source."""
        self.shape_readers = _expand_shape_names(self.graph)
        """Outputs of Shape / Concat nodes that only build an Expand's shape input."""

    # -- errors ---------------------------------------------------------------------------
    def error(self, message: str) -> OnnxImportError:
        where = f"node {self.current}: " if self.current else ""
        return OnnxImportError(f"{self.filename}: {where}{message}")

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
        for info, value in zip(copy.graph.output, results):
            if info.type.WhichOneof("value") is None:
                elt = value.type.get_element_type() if isinstance(value.type, TensorType) else None
                codes = {t: code for code, t in _FLOAT_TYPES.items()}
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

    # -- the whole graph --------------------------------------------------------------------
    def run(self) -> ModuleOp:
        if not self.model.HasField("graph"):
            raise self.error("the model has no graph")
        newest = int(self.onnx.defs.onnx_opset_version())
        for domain in self.model.opset_import:
            if domain.domain in ("", "ai.onnx") and domain.version < 7:
                raise self.error(f"opset {domain.version} is older than nanoir reads (7)")
            if domain.domain in ("", "ai.onnx") and domain.version > newest:
                raise self.error(
                    f"opset {domain.version} is newer than any ONNX defines ({newest})"
                )
        self._refuse_external_data()
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
        self.index_inputs = self._index_inputs(inputs)
        arg_types = [self._value_type(i, "input") for i in inputs]
        block = Block(arg_types=arg_types)
        for arg, info in zip(block.args, inputs):
            self._define(info.name, "a graph input")
            self.values[info.name] = arg
            set_hint(arg, info.name)
        for index, node in enumerate(self.graph.node):
            self.current = _label(node, index)
            self._node(node)
        self.current = ""
        results: list[SSAValue] = []
        for out in self.graph.output:
            value = self._ssa(out.name, f"graph output '{out.name}'")
            declared = self._declared_shape(out)
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

    def _declared_shape(self, info: Any) -> list[int] | None:
        t = info.type
        if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return [
            d.dim_value if d.HasField("dim_value") else DYNAMIC_INDEX
            for d in t.tensor_type.shape.dim
        ]

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
        elt = _FLOAT_TYPES.get(t.tensor_type.elem_type)
        if info.name in self.index_inputs:
            elt = f32  # token ids: exact integers in a float tensor, as nf.embedding reads them
        if elt is None:
            index = " (an int64/int32 one only as the indices of Gather on axis 0)"
            raise self.error(
                f"graph {what} '{info.name}' has element type "
                f"{self._type_name(t.tensor_type.elem_type)}; nanoir reads float tensors"
                + (index if t.tensor_type.elem_type in _INDEX_TYPES else "")
            )
        shape = self._declared_shape(info)
        if shape is None:
            raise self.error(f"graph {what} '{info.name}' has no shape")
        if any(d < 0 for d in shape if d != DYNAMIC_INDEX):
            raise self.error(f"graph {what} '{info.name}' has a negative dim")
        return TensorType(elt, shape)

    def _type_name(self, elem_type: int) -> str:
        try:
            return str(self.onnx.TensorProto.DataType.Name(elem_type))
        except ValueError:
            return str(elem_type)

    # -- values -------------------------------------------------------------------------------
    def _ssa(self, name: str, reader: str) -> SSAValue:
        """The float tensor `name` as an SSA value (a static float becomes an nf.constant)."""
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
            if array.dtype.kind != "f":
                raise self.error(
                    f"{reader} reads '{name}', a {array.dtype} constant; expected a float tensor"
                )
            return self._constant(name, array)
        if not name:
            raise self.error(f"{reader} has an empty input name where a tensor is needed")
        raise self.error(
            f"{reader} reads '{name}', which is no graph input, initializer or output of an "
            "earlier node"
        )

    def _constant(self, name: str, array: NDArray[Any]) -> SSAValue:
        const = ConstTensor.from_numpy(name, array)
        op = nf.ConstantOp(dense_from_const(const), name)
        set_hint(op.results[0], name)
        self.const_ops.append(op)
        self.values[name] = op.results[0]
        self.init_values.add(op.results[0])
        return op.results[0]

    def _static(self, name: str, what: str) -> NDArray[Any]:
        """A constant input (initializer or Constant node output), read now."""
        if name in self.static:
            return self.static[name]
        raise self.error(
            f"its {what} '{name}' is not a constant (an initializer or a Constant node's "
            "output); nanoir reads it statically"
        )

    def _static_ints(self, name: str, what: str) -> tuple[int, ...]:
        array = self._static(name, what)
        if array.dtype.kind not in "iu" or array.ndim > 1:
            raise self.error(f"its {what} '{name}' must be a 1-D integer tensor")
        return tuple(int(v) for v in array.reshape(-1))

    def _static_scalar(self, name: str, what: str) -> Float:
        array = self._static(name, what)
        if array.size != 1:
            raise self.error(f"its {what} '{name}' must hold one value, not {array.size}")
        value = float(array.reshape(-1)[0])
        if not math.isfinite(value):
            raise self.error(f"its {what} '{name}' is {value}")
        return Float.from_value(value)

    # -- attributes ---------------------------------------------------------------------------
    def _attrs(self, node: Any) -> dict[str, AttrValue]:
        A = self.onnx.AttributeProto
        out: dict[str, AttrValue] = {}
        for attr in node.attribute:
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
                else:
                    raise self.error(
                        f"attribute '{attr.name}' is of type {A.AttributeType.Name(kind)}, "
                        "which nanoir does not read here"
                    )
            except (UnicodeDecodeError, ValueError) as e:
                if isinstance(e, OnnxImportError):
                    raise
                raise self.error(f"attribute '{attr.name}' cannot be read: {e}") from None
        return out

    # -- one node -------------------------------------------------------------------------
    def _node(self, node: Any) -> None:
        texts = [node.name, node.op_type, node.domain, *node.input, *node.output]
        texts += [a.name for a in node.attribute]
        if not all(isinstance(t, str) for t in texts):
            raise self.error("its names are not valid UTF-8")
        domain = node.domain if node.domain != "ai.onnx" else ""
        outputs = list(node.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        if not outputs:
            raise self.error("the node has no outputs")
        for name in node.output:
            self._define(name, "")
        self._bound_shape_operand(node, domain)
        if domain == "" and node.op_type == "Constant":
            self._constant_node(node, outputs)
            return
        if domain == "" and node.op_type == "Identity":
            if len(node.input) != 1 or len(outputs) != 1:
                raise self.error("Identity takes 1 input and has 1 output")
            src = node.input[0]
            if src in self.static:
                self.static[outputs[0]] = self.static[src]
            else:
                self.values[outputs[0]] = self._ssa(src, "it")
            return
        if domain == "" and self._symbolic_shape(node, outputs):
            return
        if domain == "" and self._fold(node, outputs):
            return
        if domain == "" and node.op_type == "QuantizeLinear":
            self._quantize_linear(node, outputs)
            return
        if domain == "" and node.op_type == "DequantizeLinear":
            self._dequantize_linear(node, outputs)
            return
        attrs = self._attrs(node)
        inputs = list(node.input)
        while inputs and not inputs[-1]:
            inputs.pop()
        if domain == "" and node.op_type in ONNX_RECURRENT:  # one layer of nf.recurrent
            self._recurrent(node, attrs, inputs, outputs)
            return
        if domain == "" and node.op_type in ("Squeeze", "Unsqueeze") and inputs[0] in self.values:
            axes = self._static_ints(inputs[1], "axes") if len(inputs) > 1 else ()
            try:
                op = read_squeeze(node.op_type, self._ssa(inputs[0], "it"), axes)
            except ValueError as why:
                raise self.error(f"nanoir cannot read this {node.op_type} node: {why}") from None
            self._add(node, op, outputs)
            return
        if node.op_type == "Gather" and len(inputs) == 2 and inputs[1] in self.index_inputs:
            self._embedding(node, inputs, outputs)
            return
        if domain == NANOENGINE_DOMAIN and node.op_type == "Q":
            op_type = "Q"
            if len(inputs) != 2:
                raise self.error(
                    f"a {NANOENGINE_DOMAIN} Q node takes 2 inputs (x, k), got {len(node.input)}"
                )
            if "bit_len" not in attrs:
                raise self.error("a Q node needs the attribute 'bit_len'")
        elif domain == "" and node.op_type in BY_OP_TYPE and node.op_type != "Q":
            op_type = node.op_type
            attrs, inputs, outputs = self._translate(op_type, attrs, inputs, outputs, node)
            if op_type == "Mul" and self._fuse_silu(inputs):
                op_type, inputs = "Swish", [inputs[0]]
        else:
            known = ", ".join(sorted(k for k in BY_OP_TYPE if k != "Q"))
            shown = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            raise self.error(
                f"nanoir does not read the op {shown} (it reads {NANOENGINE_DOMAIN}::Q, "
                f"QuantizeLinear/DequantizeLinear, Constant, Identity and {known})"
            )
        slope = self._prelu_slope(inputs) if op_type == "PRelu" and len(inputs) == 2 else None
        spec_inputs: list[NodeInput] = []
        for i, name in enumerate(inputs):
            if slope is not None and i == 1:
                spec_inputs.append(slope)
            elif op_type == "Q" and i == 1:
                spec_inputs.append(self._exponent(name))
            elif name in self.static and self.static[name].dtype.kind in "iu":
                spec_inputs.append(self._int_const(name))
            else:
                spec_inputs.append(self._ssa(name, "it"))
        floats = {v.type for v in spec_inputs if isinstance(v, SSAValue)}
        elts = {t.get_element_type() for t in floats if isinstance(t, TensorType)}
        if len(elts) > 1:
            raise self.error(f"its inputs mix float types ({', '.join(sorted(map(str, elts)))})")
        spec = NodeSpec(
            node.name or outputs[0],
            op_type,
            tuple(attrs.items()),
            tuple(spec_inputs),
            len(outputs),
        )
        try:
            op = convert_known(spec)
        except Unsupported as why:
            raise self.error(f"nanoir cannot read this {op_type} node: {why}") from None
        except NodeProblem as problem:
            raise self.error(problem.message) from None
        if op_type == "Q":
            op.attributes[NE_EXP_NAME] = StringAttr(inputs[1])
        self._add(node, op, outputs)

    def _embedding(self, node: Any, inputs: list[str], outputs: list[str]) -> None:
        """Gather on axis 0 of a constant ``[V, D]`` table (an initializer, or one
        dequantized) by an integer graph input: ``nf.embedding`` (how nanoir writes it)."""
        table = self._ssa(inputs[0], "it")
        shape = nf.tensor_shape(table)
        if table not in self.init_values or len(shape) != 2:
            raise self.error(
                f"it gathers rows of '{inputs[0]}' {_dims(shape)} by the integer input "
                f"'{inputs[1]}'; nanoir reads that only as an embedding, of a constant 2-D "
                "table (an initializer, or its DequantizeLinear)"
            )
        if len(outputs) != 1:
            raise self.error("Gather has 1 output")
        op = nf.EmbeddingOp(self.values[inputs[1]], table)
        try:
            op.verify()
        except VerifyException as e:
            raise self.error(f"nanoir cannot read this Gather node as an embedding: {e}") from None
        self._add(node, op, outputs)

    def _recurrent(
        self, node: Any, attrs: dict[str, AttrValue], inputs: list[str], outputs: list[str]
    ) -> None:
        """ONNX's LSTM / GRU / RNN (``grammar/onnx/recurrent.py``)."""
        try:
            ops, values = read_recurrent(
                node.op_type,
                attrs,
                inputs,
                len(outputs),
                self._static,
                lambda name: self._ssa(name, "it"),
                self._constant,
                node.name or outputs[0],
            )
        except ValueError as why:
            raise self.error(f"nanoir cannot read this {node.op_type} node: {why}") from None
        self.ops.extend(ops)
        for name, result in zip(outputs, values):
            if name and result is not None:
                self.values[name] = result
                set_hint(result, name)

    def _add(self, node: Any, op: Operation, outputs: Sequence[str]) -> None:
        if node.name:
            op.attributes[NE_NODE] = StringAttr(node.name)
            if all(v in self.init_values for v in op.operands):
                op.attributes[NE_INIT] = UnitAttr()
        if all(v in self.init_values for v in op.operands):
            self.init_values.update(op.results)
        self.ops.append(op)
        for name, result in zip(outputs, op.results):
            if name:
                self.values[name] = result
                set_hint(result, name)

    def _int_const(self, name: str) -> ConstTensor:
        try:
            return ConstTensor.from_numpy(name, self.static[name])
        except (KeyError, ValueError):
            raise self.error(
                f"'{name}' is a {self.static[name].dtype} constant, which nanoir does not read"
            ) from None

    def _exponent(self, name: str) -> ConstTensor:
        """Q's `k`: a static integer tensor, kept as int8 (NanoEngine's exponent type)."""
        if name not in self.static:
            if name in self.values:
                raise self.error(
                    f"its exponent '{name}' is computed at run time; a Q needs a constant k"
                )
            raise self.error(
                f"it reads '{name}', which is no graph input, initializer or output of an "
                "earlier node"
            )
        k = self.static[name]
        if k.dtype.kind not in "iu":
            raise self.error(f"its exponent '{name}' is a {k.dtype} tensor; k must be integers")
        if k.size == 0:
            raise self.error(f"its exponent '{name}' is empty")
        if k.min() < EXP_MIN or k.max() > EXP_MAX:
            raise self.error(
                f"its exponent '{name}' has values outside int8 ({EXP_MIN}..{EXP_MAX})"
            )
        return ConstTensor.from_numpy(name, k.astype(np.int8))

    def _symbolic_shape(self, node: Any, outputs: list[str]) -> bool:
        """How nanoir writes an ``nf.expand`` with a shape source ``like``: ``Expand(x,
        Concat(int64 constants, Shape(like, start=i, end=i+1), ...))``; the Concat keeps the
        entries symbolic, the Expand becomes the `.ne` row's spelling (shape with -1, input 1
        the source). True if the node was one of them."""
        inputs = [name for name in node.input if name]
        if not any(name in self.symbolic for name in inputs):
            return False
        if node.op_type == "Concat" and outputs[0] in self.shape_readers:
            entries: list[int | tuple[str, int]] = []
            for name in inputs:
                if name in self.symbolic:
                    entries += self.symbolic[name]
                else:
                    entries += [int(v) for v in self._static_ints(name, "shape")]
            self.symbolic[outputs[0]] = entries
            return True
        if node.op_type != "Expand" or len(inputs) != 2 or inputs[1] not in self.symbolic:
            raise self.error("it reads a shape with dynamic dims; nanoir reads that in Expand only")
        entries = self.symbolic[inputs[1]]
        sources = {e[0] for e in entries if isinstance(e, tuple)}
        moved = [(i, e[1]) for i, e in enumerate(entries) if isinstance(e, tuple) and e[1] != i]
        if len(sources) != 1 or moved:
            raise self.error(
                "its shape takes dynamic sizes from more than one tensor, or from another dim "
                "than the one it sets (nanoir's shape source gives dim i its own dim i)"
            )
        shape = tuple(-1 if isinstance(e, tuple) else e for e in entries)
        x, like = self._ssa(inputs[0], "it"), self._ssa(sources.pop(), "it")
        spec = NodeSpec(node.name or outputs[0], "Expand", (("shape", shape),), (x, like), 1)
        try:
            op = convert_known(spec)
        except (Unsupported, NodeProblem) as why:
            text = why.message if isinstance(why, NodeProblem) else str(why)
            raise self.error(f"nanoir cannot read this Expand node: {text}") from None
        self._add(node, op, outputs)
        return True

    def _fold(self, node: Any, outputs: list[str]) -> bool:
        """Evaluate a shape computation whose inputs are all constants (torch writes Pad's pads
        as ConstantOfShape -> Concat -> Reshape -> Slice -> Transpose -> Cast); True if done.

        Only integer results of the table's ops are folded: a float computation on constants
        (a Q of a weight, a Concat of parameters) stays an op, as in a `.ne` init node.
        """
        op_type = node.op_type
        if op_type not in FOLDABLE or len(outputs) != 1:
            return False
        inputs = list(node.input)
        while inputs and not inputs[-1]:
            inputs.pop()
        if op_type == "Shape":
            if len(inputs) != 1 or inputs[0] not in self.values:
                return False
            shape = nf.tensor_shape(self.values[inputs[0]])
            attrs = self._attrs(node)
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            dims = list(shape)[start:end]  # type: ignore[misc]
            if DYNAMIC_INDEX in dims and outputs[0] in self.shape_readers:
                # an expand's size from a dynamic dim: kept symbolic (see _symbolic_shape)
                axes = list(range(len(shape)))[start:end]  # type: ignore[misc]
                self.symbolic[outputs[0]] = [
                    (inputs[0], a) if d == DYNAMIC_INDEX else d for a, d in zip(axes, dims)
                ]
                return True
            if DYNAMIC_INDEX in dims:
                raise self.error(
                    f"it takes the shape of '{inputs[0]}', whose dims {shape_str(dims)} are not "
                    "all static; nanoir reads shape computations on constants only"
                )
            self.static[outputs[0]] = np.array(dims, dtype=np.int64)
            return True
        if not inputs or any(name and name not in self.static for name in inputs):
            return False
        args = [self.static[name] if name else None for name in inputs]
        if op_type in BY_OP_TYPE and not all(a is None or a.dtype.kind in "iub" for a in args):
            return False
        try:
            attrs = {} if op_type == "ConstantOfShape" else self._attrs(node)  # value: a tensor
            if op_type == "ConstantOfShape" and np.any(args[0] < 0):
                raise self.error(f"it makes a constant of shape {args[0].tolist()}")
            self._bound_fold(folded_size(op_type, args, attrs))
            if op_type == "ConstantOfShape":
                fill = np.zeros(1, np.float32)
                for attr in node.attribute:
                    if attr.name == "value":
                        fill = np.asarray(self.onnx.numpy_helper.to_array(attr.t)).reshape(-1)
                dims = [int(d) for d in args[0].reshape(-1)]
                result = np.full(dims, fill[0], dtype=fill.dtype)
            else:
                result = FOLDABLE[op_type](args, attrs)
        except OnnxImportError:
            raise
        except Exception as e:
            raise self.error(
                f"its constant inputs cannot be evaluated ({type(e).__name__}: {e})"
            ) from None
        self.static[outputs[0]] = np.asarray(result)
        return True

    def _bound_fold(self, size: int) -> None:
        """Refuse a folded constant too large to compute, before computing it."""
        if size > MAX_FOLDED:
            raise self.error(
                f"its constant result would have {size} elements; nanoir folds shape "
                f"computations of at most {MAX_FOLDED} elements"
            )
        if self.folded + size > MAX_FOLDED_TOTAL:
            raise self.error(
                f"its constant result ({size} elements) would bring the model's folded "
                f"constants to {self.folded + size} elements; nanoir folds at most "
                f"{MAX_FOLDED_TOTAL} in all"
            )
        self.folded += size

    def _bound_shape_operand(self, node: Any, domain: str) -> None:
        """A constant shape operand (Reshape's shape, Expand's, Tile's repeats,
        ConstantOfShape's input) has at most MAX_SHAPE_ENTRIES entries."""
        index = SHAPE_OPERAND.get(node.op_type) if domain == "" else None
        if index is None or len(node.input) <= index:
            return
        name = node.input[index]
        if name in self.static and self.static[name].size > MAX_SHAPE_ENTRIES:
            raise self.error(
                f"its shape operand '{name}' has {self.static[name].size} entries; nanoir "
                f"reads shapes of at most {MAX_SHAPE_ENTRIES} dims"
            )

    def _constant_node(self, node: Any, outputs: list[str]) -> None:
        if len(outputs) != 1 or len(node.attribute) != 1:
            raise self.error("a Constant node has 1 output and 1 attribute")
        attr = node.attribute[0]
        helper = self.onnx.helper
        try:
            if attr.name == "value":
                array = plain(self.onnx.numpy_helper.to_array(attr.t))
                self.types[outputs[0]] = int(attr.t.data_type)
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
        self.static[outputs[0]] = array

    # -- opset translations ---------------------------------------------------------------
    def _translate(
        self,
        op_type: str,
        attrs: dict[str, AttrValue],
        inputs: list[str],
        outputs: list[str],
        node: Any,
    ) -> tuple[dict[str, AttrValue], list[str], list[str]]:
        """ONNX's spelling -> the row's: constant inputs of newer opsets become attributes."""
        if op_type == "Pad" and len(inputs) > 1:
            pads = list(self._static_ints(inputs[1], "pads"))
            if len(inputs) > 2 and inputs[2]:
                attrs["value"] = self._static_scalar(inputs[2], "constant_value")
            if len(inputs) > 3 and inputs[3]:
                rank = len(nf.tensor_shape(self._ssa(inputs[0], "it")))
                axes = [
                    a % rank if -rank <= a < rank else -1
                    for a in self._static_ints(inputs[3], "axes")
                ]
                if -1 in axes or len(set(axes)) != len(axes) or len(pads) != 2 * len(axes):
                    raise self.error(f"its axes {axes} and pads {pads} do not fit rank {rank}")
                full = [0] * (2 * rank)
                for j, a in enumerate(axes):
                    full[a], full[rank + a] = pads[j], pads[len(axes) + j]
                pads = full
            attrs["pads"] = tuple(pads)
            inputs = inputs[:1]
        elif op_type == "Split":
            if len(inputs) > 1:
                attrs["split"] = self._static_ints(inputs[1], "split")
                inputs = inputs[:1]
            parts = attrs.pop("num_outputs", None)
            if parts is not None and "split" not in attrs:
                shape = nf.tensor_shape(self._ssa(inputs[0], "it"))
                axis = attrs.get("axis", 0)
                if not isinstance(parts, int) or parts < 1 or not isinstance(axis, int):
                    raise self.error("num_outputs and axis must be integers")
                if not -len(shape) <= axis < len(shape) or shape[axis] == DYNAMIC_INDEX:
                    raise self.error(
                        f"axis {axis} is out of range or dynamic in {shape_str(shape)}"
                    )
                chunk = -(-shape[axis] // parts)
                attrs["split"] = (chunk,) * (parts - 1) + (shape[axis] - chunk * (parts - 1),)
        elif op_type == "Clip" and len(inputs) > 1:
            if inputs[1]:
                attrs["min"] = self._static_scalar(inputs[1], "min")
            if len(inputs) > 2 and inputs[2]:
                attrs["max"] = self._static_scalar(inputs[2], "max")
            inputs = inputs[:1]
        elif op_type == "Resize":
            for key, default in _RESIZE_DEFAULTS.items():
                if key in attrs and same_value(default, attrs[key]):
                    del attrs[key]
            if len(inputs) > 1:
                attrs["sizes"], attrs["axes"] = self._resize_sizes(attrs, inputs)
                inputs = inputs[:1]
        elif op_type == "BatchNormalization":
            if attrs.get("training_mode", 0) == 1:
                readers = self._readers(outputs[1:])
                if readers:
                    raise self.error(
                        "training_mode=1 and its running statistics outputs are read by "
                        f"{readers[0]}; nanoir reads a BatchNormalization for inference only"
                    )
                if not self.warned_bn:
                    self.warned_bn = True
                    warnings.warn(
                        OnnxImportWarning(
                            f"{self.filename}: warning: BatchNormalization {self.current} has "
                            "training_mode=1 (NanoEngine-PyTorch writes it for inference too); "
                            "nanoir reads it with its stored running statistics"
                        ),
                        stacklevel=7,  # the caller of nanoir.load / load_onnx
                    )
                del attrs["training_mode"]
                outputs = outputs[:1]
        if op_type == "MaxPool" and len(outputs) > 1 and not self._readers(outputs[1:]):
            outputs = outputs[:1]
        return attrs, inputs, outputs

    def _fuse_silu(self, inputs: list[str]) -> bool:
        """Whether ``Mul(x, Sigmoid(x))`` (either order; put ``x`` first in ``inputs``) with
        the Sigmoid read by this Mul alone: that is SiLU (``nf.silu``, `.ne`'s Swish), which
        the exporter writes so below opset 24; the Sigmoid's op is dropped."""
        if len(inputs) != 2:
            return False
        for x, s in (inputs, inputs[::-1]):
            sig, xv = self.values.get(s), self.values.get(x)
            owner = None if sig is None else sig.owner
            if (
                isinstance(owner, nf.SigmoidOp)
                and xv is not None
                and owner.input is xv
                and len(self._readers([s])) == 1
            ):
                self.ops.remove(owner)
                owner.erase(safe_erase=False)
                del self.values[s]
                inputs[:] = [x, s]
                return True
        return False

    def _prelu_slope(self, inputs: list[str]) -> SSAValue:
        """PRelu's slope as nf.prelu's: ONNX broadcasts the slope from the right, so only a
        slope that is 1 on every dim but the channel dim (1) once padded on the left to the
        input's rank is per channel (`[C, 1, 1]` of NCHW, `[C]` of a rank-2 input) and one of
        ones is a scalar; it becomes a 1-D `[C]` or `[1]` slope. Any other is refused.
        (The `.ne` PRelu row keeps torch's rule, a 1-D slope per channel, unchanged.)"""
        x_shape = nf.tensor_shape(self._ssa(inputs[0], "it"))
        name = inputs[1]
        static = name in self.static and self.static[name].dtype.kind == "f"
        shape = list(self.static[name].shape if static else nf.tensor_shape(self._ssa(name, "it")))
        padded = [1] * (len(x_shape) - len(shape)) + shape
        if len(shape) > len(x_shape) or any(d != 1 for i, d in enumerate(padded) if i != 1):
            raise self.error(
                f"its slope '{name}' of shape {_dims(shape)} does not broadcast per channel or "
                f"as a scalar against the input's shape {_dims(x_shape)} (ONNX aligns the slope "
                "to the last dims; nanoir reads a slope of shape [C, 1, ..., 1], [C] of a rank-2 "
                "input, or a single value)"
            )
        flat = [padded[1] if len(padded) > 1 else 1]
        if static and shape != flat:  # a constant of its own: others may read the [C, 1, 1]
            const = ConstTensor.from_numpy(name, self.static[name].reshape(flat))
            op: Operation = nf.ConstantOp(dense_from_const(const), name)
            set_hint(op.results[0], name)
            self.const_ops.append(op)
            self.init_values.add(op.results[0])
            return op.results[0]
        value = self._ssa(name, "it")
        if shape == flat:
            return value
        source = value.owner
        if isinstance(source, nf.ReshapeOp) and list(nf.tensor_shape(source.input)) == flat:
            self.bypassed.add(source)  # nanoir's own export: Reshape([C] -> [C, 1, 1])
            return source.input
        op = nf.ReshapeOp(value, flat)
        if value in self.init_values:
            self.init_values.add(op.results[0])
        self.ops.append(op)
        return op.results[0]

    def _resize_sizes(
        self, attrs: dict[str, AttrValue], inputs: list[str]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Resize's scales or sizes input, as sizes of the spatial axes (2, 3, ...)."""
        shape = nf.tensor_shape(self._ssa(inputs[0], "it"))
        rank = len(shape)
        axes_attr = attrs.pop("axes", None)
        axes = list(range(rank)) if axes_attr is None else [a % rank for a in axes_attr]  # type: ignore[union-attr, operator]
        if len(inputs) > 3 and inputs[3]:
            given = self._static_ints(inputs[3], "sizes")
            if len(given) != len(axes):
                raise self.error(f"its sizes {list(given)} do not fit {len(axes)} axes")
            sizes = dict(zip(axes, given))
        elif len(inputs) > 2 and inputs[2]:
            scales = self._static(inputs[2], "scales").reshape(-1)
            if len(scales) != len(axes):
                raise self.error(f"its scales {list(scales)} do not fit {len(axes)} axes")
            sizes = {}
            for a, s in zip(axes, scales):
                if s == 1:
                    sizes[a] = shape[a]
                elif shape[a] == DYNAMIC_INDEX:
                    raise self.error(f"it scales the dynamic dim {a}")
                else:
                    sizes[a] = int(math.floor(shape[a] * float(s)))
        else:
            raise self.error("a Resize needs scales or sizes")
        for a in (0, 1):
            if (
                a < rank
                and sizes.get(a, shape[a]) not in (shape[a], DYNAMIC_INDEX)
                and shape[a] != DYNAMIC_INDEX
            ):
                raise self.error("it resizes the batch or channel dim; nanoir resizes spatial dims")
        spatial = tuple(range(2, rank))
        return tuple(sizes.get(a, shape[a]) for a in spatial), spatial

    def _readers(self, names: Sequence[str]) -> list[str]:
        wanted = {n for n in names if n}
        found = [
            _label(n, i) for i, n in enumerate(self.graph.node) if any(x in wanted for x in n.input)
        ]
        found += [f"graph output '{o.name}'" for o in self.graph.output if o.name in wanted]
        return found

    # -- standard QDQ -----------------------------------------------------------------------
    def _qdq_params(
        self,
        node: Any,
        inputs: Sequence[str],
        shape: Sequence[int],
        what: str,
        codes_type: int | None = None,
    ) -> tuple[int, NDArray[np.int8], int]:
        """(bits, exp broadcastable against a tensor of `shape`, zero point type).

        `codes_type` is the element type of a DequantizeLinear's codes when its QuantizeLinear
        fixed it (`output_dtype`): without a zero point, the codes' type is the zero point's."""
        rank = len(shape)
        if len(inputs) < 2 or not inputs[1]:
            raise self.error(f"{what} needs a scale")
        scale = self._static(inputs[1], "scale")
        if scale.dtype.kind != "f" or scale.ndim > 1 or scale.size == 0:
            raise self.error(f"its scale '{inputs[1]}' must be a float scalar or 1-D tensor")
        attrs = self._attrs(node)
        if attrs.get("block_size", 0) != 0:
            raise self.error("blocked quantization (block_size) is not read")
        zero_type: int | None = None
        if len(inputs) > 2 and inputs[2]:
            zp_name = inputs[2]
            zp = self._static(zp_name, "zero point")
            if np.any(zp != 0):
                raise self.error(
                    f"its zero point '{zp_name}' is not 0; nanoir reads symmetric "
                    "power-of-two quantization only (zero point 0)"
                )
            zero_type = self._tensor_type(zp_name)
        elif (
            "output_dtype" in attrs
            and isinstance(attrs["output_dtype"], int)
            and attrs["output_dtype"]
        ):
            zero_type = attrs["output_dtype"]  # type: ignore[assignment]
        elif codes_type is not None:
            zero_type = codes_type
        elif what == "DequantizeLinear" and inputs[0] in self.static:
            zero_type = self._tensor_type(inputs[0])
        if zero_type is None:
            zero_type = 2  # ONNX's default: uint8
        bits = _QDQ_BITS.get(zero_type) or _UNSIGNED_BITS.get(zero_type)
        if bits is None:
            raise self.error(
                f"it quantizes to {self._type_name(zero_type)}; nanoir reads int4, int8, int16, "
                "uint4, uint8 and uint16"
            )
        values = scale.astype(np.float64).reshape(-1)
        mantissa, e = np.frexp(values)
        if not np.all(np.isfinite(values)) or np.any(values <= 0) or np.any(mantissa != 0.5):
            raise self.error(
                f"its scale '{inputs[1]}' ({values.tolist()}) is not a power of two; nanoir "
                "reads power-of-two scales only"
            )
        exp = (1 - e).astype(np.int64)  # scale = 0.5 * 2**e = 2**-(1 - e)
        if exp.min() < EXP_MIN or exp.max() > EXP_MAX:
            raise self.error(f"its scale '{inputs[1]}' is outside 2**-127 .. 2**128")
        if scale.ndim == 0 or scale.size == 1 and scale.ndim == 1 and rank != 1:
            shaped = exp.reshape([1])
        else:
            axis = attrs.get("axis", 1)
            if not isinstance(axis, int) or not -rank <= axis < rank:
                raise self.error(f"its axis {axis} is out of range for rank {rank}")
            if shape[axis % rank] not in (exp.size, DYNAMIC_INDEX):
                raise self.error(
                    f"its scale '{inputs[1]}' has {exp.size} values for axis {axis} of "
                    f"{shape_str(shape)}"
                )
            dims = [1] * rank
            dims[axis % rank] = exp.size
            shaped = exp.reshape(dims)
        return bits, shaped.astype(np.int8), zero_type

    def _tensor_type(self, name: str) -> int:
        """The ONNX element type of a constant (as stored: int4 is read as int8 values)."""
        if name in self.types:
            return self.types[name]
        kind = self.static[name].dtype
        for code, np_type in ((3, np.int8), (2, np.uint8), (5, np.int16), (4, np.uint16)):
            if kind == np_type:
                return code
        return 6  # INT32 and anything else: refused by bits

    def _quantize_linear(self, node: Any, outputs: list[str]) -> None:
        inputs = list(node.input)
        if len(outputs) != 1 or not inputs:
            raise self.error("QuantizeLinear takes (x, scale[, zero_point]) and has 1 output")
        x = self._ssa(inputs[0], "it")
        bits, exp, zero_type = self._qdq_params(node, inputs, nf.tensor_shape(x), "QuantizeLinear")
        self.pending[outputs[0]] = _PendingQ(
            node.name or outputs[0], inputs[0], bits, exp, zero_type
        )

    def _dequantize_linear(self, node: Any, outputs: list[str]) -> None:
        inputs = list(node.input)
        if len(outputs) != 1 or not inputs:
            raise self.error("DequantizeLinear takes (x, scale[, zero_point]) and has 1 output")
        src = inputs[0]
        if src in self.pending:
            q = self.pending[src]
            x = self._ssa(q.x, "it")
            bits, exp, zero_type = self._qdq_params(
                node, inputs, nf.tensor_shape(x), "DequantizeLinear", q.zero_type
            )
            if (bits, zero_type) != (q.bits, q.zero_type) or not np.array_equal(exp, q.exp):
                raise self.error(
                    f"its scale or zero point differs from QuantizeLinear node '{q.node}''s"
                )
            if q.op is None:
                signed = zero_type not in _UNSIGNED_BITS
                q.op = self._fake_quant(node, x, bits, exp, RoundingMode.HALF_EVEN, signed)
                self._add(node, q.op, outputs)
            else:
                self.values[outputs[0]] = q.op.results[0]
            return
        if src in self.static and self.static[src].dtype.kind in "iu":
            codes = self.static[src]
            bits, exp, zero_type = self._qdq_params(node, inputs, codes.shape, "DequantizeLinear")
            values = (codes.astype(np.float64) * np.exp2(-exp.astype(np.float64))).astype(
                np.float32
            )
            const = self._constant(src, values)
            signed = zero_type not in _UNSIGNED_BITS
            op = self._fake_quant(node, const, bits, exp, RoundingMode.TRUNC, signed)
            self._add(node, op, outputs)
            return
        if src in self.values or src in self.static:
            raise self.error(
                f"it reads '{src}', which no QuantizeLinear computes and which is no integer "
                "initializer; nanoir reads QuantizeLinear -> DequantizeLinear pairs"
            )
        self._ssa(src, "it")  # the missing-value error

    def _fake_quant(
        self,
        node: Any,
        x: SSAValue,
        bits: int,
        exp: NDArray[np.int8],
        mode: RoundingMode,
        signed: bool = True,
    ) -> FakeQuantOp:
        """uint codes (zero point 0) are a `signed = false` fake-quant at the same step."""
        const = ConstTensor.from_numpy("exp", exp)
        op = FakeQuantOp(x, bits, dense_from_const(const), mode, signed)
        try:
            op.verify()
        except VerifyException as e:
            raise self.error(f"{e.args[0] if e.args else e}") from None
        return op
