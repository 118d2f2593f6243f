"""Import NanoEngine text (`.ne`) into xDSL IR at the quantized (nq) level, losslessly.

(A program whose node outputs are integer tensors, `Tensor<int8_t>` and the like, is at the
hw level: `ne_import_hw` reads it into nh IR. Everything below is about the nq level.)

A program becomes one `builtin.module` holding one `func.func @main`:

- function inputs are the runtime tensors that nodes read but no node computes (in
  declaration order); results are the runtime tensors computed but never read (`output`);
- float constants become `nf.constant "NAME" dense<...>` built from the exact bytes;
- nodes become ops in call order: first `func init`'s nodes, then `func runtime`'s. Every
  node must be called exactly once, and a node may only read tensors computed by nodes
  called before it (that is the dataflow order the IR needs).

Op types (ONNX attribute semantics; `IR op` <- `.ne op_type`):

    .ne op_type          IR op                    notes
    Q                    nq.fake_quant            bits = bit_len; exp = the int constant in_s[1]
    Conv                 nf.conv                  kernel_shape checked against the weight
    Gemm                 nf.linear                only alpha = beta = 1, transA = 0, transB = 1
    Add Sub Mul Div      nf.add nf.sub nf.mul nf.div
    Relu Sigmoid Tanh    nf.relu nf.sigmoid nf.tanh
    LeakyRelu            nf.leaky_relu            alpha (default 0.01)
    Clip                 nf.clamp                 min/max as attributes only
    MaxPool              nf.max_pool              one output (no Indices)
    AveragePool          nf.avg_pool              count_include_pad (ONNX default 0)
    GlobalAveragePool    nf.adaptive_avg_pool     output_size all ones
    Concat               nf.concat
    Reshape              nf.reshape               shape from the int constant in_s[1]
    Flatten              nf.reshape               + ne.op_type = "Flatten"
    BatchNormalization   nf.batch_norm            epsilon; momentum is training-only
    Transpose            nf.transpose
    MatMul               nf.matmul
    PRelu                nf.prelu                 1-D slope only
    Identity             (no op)                  its output names its input's value
    anything else        nf.custom                op_type + all attributes, with a warning

A known op type used in a way the nf op cannot express (Gemm with transB=0, Clip with
min/max inputs, an attribute nanoir does not know, ...) is kept as `nf.custom` too, with a
warning saying why. Contradictions (a Conv whose weight disagrees with kernel_shape, a Q
without an integer exponent constant, a wrong number of inputs, shapes that do not fit)
raise `NanoEngineSemanticError` located at the node.

Types: float tensors (`f32` for `Tensor<Any>`). A runtime tensor's declared shape is a
*streaming plan* (`[-1, 3, 1, 5]`: batch, C = 3, M = 1 row in the cache, D = 5), not the
whole tensor's shape, so in the IR every dim whose layout letter is `B` (batch) or `M` (the
streamed dim), or that is declared `-1`, is dynamic: `tensor<?x3x?x5xf32>`. Known ops get
their result types from the nf constructors' shape inference; the declared shapes must agree
with it on the static dims.

Files from NanoEngine-PyTorch: its stream analysis ignores the `pads` of Conv, MaxPool and
AveragePool, so for a padded network it declares those nodes' outputs, and everything
computed from them, smaller than they are (a pad-1 3x3 conv on width 8 is declared 6 wide).
A declared runtime shape is therefore also accepted when it is the *reference shape*: the
shape inference run again over the program with every pad taken as zero, a join of
branches shrunk differently being as long as its shortest input (see
`reference_result_types`). The IR keeps the true types, which verification,
running, lowering and streaming use; the declared numbers stay in `ne.out_s` and are written
back as they were. One `NanoEnginePaddingWarning` per file names every such tensor with its
declared and computed shape. Any other disagreement is an error.

An `Identity` node makes no op: its output is a second name of its input's value. The
exporter writes one for a result that another node also reads, that is returned twice or
that is an input (results are found as unread tensors), as the hw level does.

Everything the printer needs to reproduce the file byte for byte rides along as discardable
attributes with an `ne.` prefix (see `NE_*` below); nothing in them changes what the program
computes:

    on builtin.module   ne.items     every item of the file, in order: declaration names,
                                      "//comment" lines, "func init" and "func runtime"
                                      (plus "<k>//comment" for a comment with k blank lines
                                      before it where the reference has others, and a first
                                      entry U+FEFF when the file starts with a byte order mark;
                                      see ne_printer.comment_entry)
                        ne.decls     declarations no op carries: integer constants that are not
                                      a Q's exponent (e.g. Reshape's int64_t shape), word
                                      tensors, and unused tensors, as {kind = ..., ...}
    on func.func args   ne.tensor    {name, layout, shape[, dtype]} of the input's declaration
    on func.func results ne.identity {node, out, mem_s, after} of the Identity node that gives
                                      the result: its name, output and cache declarations and
                                      the node called before it (an Identity whose output
                                      other nodes read is not recorded: they read the value)
    on node ops         ne.node      the node's name;  ne.init  (unit) for init nodes
                        ne.out_s     [{name, layout, shape[, dtype]}] for each output
                        ne.mem_s     [{name, layout, shape[, dtype]}] for each input cache
                        ne.attr      the attribute list as written, only when it differs from
                                      what the exporter would print for the op
                        ne.op_type   only when not the op's default (Flatten)
                        ne.const_in  {"<position in in_s>" = "NAME"}: inputs that are integer
                                      or word constants (data in ne.decls)
    on nq.fake_quant    ne.exp_name  the exponent constant's name (its data is `exp`)
    on nf.constant      the `name` property is the .ne name
    hex case            ne.hex_upper (unit) on constants / ne.exp_hex_upper on fake-quants /
                        hex_upper in ne.decls entries, where it differs from the default

Attribute values (`ne.attr`, `nf.custom` attrs): ints are `IntegerAttr` (i64, or wider when
the value needs it), identifiers are `StringAttr`, floats are the `StringAttr` of their exact
spelling (`"1e-05"`; a float spelling never looks like an identifier, so the two cannot be
confused), and lists are `ArrayAttr`.

Output tensor names are also SSA name hints where xDSL allows (not starting with a digit; a
trailing `_<digits>` is dropped by xDSL, so the exact name lives in `ne.out_s`).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Union

from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.shapes import ShapeError, shape_str, shapes_compatible
from nanoir.grammar.ne_ast import (
    AttrValue,
    Comment,
    ConstTensor,
    Declaration,
    Float,
    Function,
    InitNode,
    InitTensor,
    Item,
    Loc,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)
from nanoir.grammar.ne_check import check_program
from nanoir.grammar.ne_errors import NanoEngineSemanticError
from nanoir.grammar.ne_parser import decode_nanoengine, parse_nanoengine
from nanoir.grammar.ne_printer import BOM_ENTRY, comment_entry
from nanoir.runtime.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    BoolAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    Signedness,
    StringAttr,
    TensorType,
    UnitAttr,
    f32,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

__all__ = [
    "NE_ITEMS",
    "NE_DECLS",
    "NE_TENSOR",
    "NE_NODE",
    "NE_INIT",
    "NE_OUT_S",
    "NE_MEM_S",
    "NE_ATTR",
    "NE_OP_TYPE",
    "NE_CONST_IN",
    "NE_EXP_NAME",
    "NE_HEX_UPPER",
    "NE_EXP_HEX_UPPER",
    "NE_IDENTITY",
    "NanoEngineImportWarning",
    "NanoEnginePaddingWarning",
    "Unsupported",
    "NodeProblem",
    "NodeSpec",
    "Converter",
    "CONVERTERS",
    "import_program",
    "import_nanoengine",
    "import_nanoengine_bytes",
    "load_nanoengine",
    "element_type",
    "dtype_of",
    "encode_value",
    "decode_value",
    "encode_attrs",
    "decode_attrs",
    "tensor_entry",
    "streamed_type",
    "const_from_dense",
    "const_entry",
    "words_entry",
    "reference_result_types",
]

# ---------------------------------------------------------------------------------------
# Metadata attribute names (shared with ne_export)
# ---------------------------------------------------------------------------------------

NE_ITEMS = "ne.items"
NE_DECLS = "ne.decls"
NE_TENSOR = "ne.tensor"
NE_NODE = "ne.node"
NE_INIT = "ne.init"
NE_OUT_S = "ne.out_s"
NE_MEM_S = "ne.mem_s"
NE_ATTR = "ne.attr"
NE_OP_TYPE = "ne.op_type"
NE_CONST_IN = "ne.const_in"
NE_EXP_NAME = "ne.exp_name"
NE_HEX_UPPER = "ne.hex_upper"
NE_EXP_HEX_UPPER = "ne.exp_hex_upper"
NE_IDENTITY = "ne.identity"

_FLOAT_SPELLING = re.compile(r"-?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)")
# What xDSL accepts as an SSA name hint.
_HINT = re.compile(r"[A-Za-z_][A-Za-z0-9_$.-]*")


class NanoEngineImportWarning(UserWarning):
    """An op kept as `nf.custom` (unknown op type, or a variant nanoir cannot express).

    The message starts with `file:line:col: warning:`, so tools can print it as is."""


class NanoEnginePaddingWarning(NanoEngineImportWarning):
    """Runtime tensors declared with the shapes NanoEngine-PyTorch computes ignoring padding.

    Its stream analysis ignores the pads of Conv, MaxPool and AveragePool, so a file it wrote
    for a padded network declares those outputs (and everything computed from them) smaller
    than they are. nanoir reads such a file with one warning naming the tensors, computes
    with the true shapes and keeps the declared numbers for writing the file back."""


# ---------------------------------------------------------------------------------------
# dtypes, attribute values and declaration entries
# ---------------------------------------------------------------------------------------

_ELEMENT_TYPES: dict[str, Attribute] = {
    "little_float_16": Float16Type(),
    "little_float_32": Float32Type(),
    "little_float_64": Float64Type(),
    "int8_t": IntegerType(8),
    "int16_t": IntegerType(16),
    "int32_t": IntegerType(32),
    "int64_t": IntegerType(64),
    "uint8_t": IntegerType(8, Signedness.UNSIGNED),
    "uint16_t": IntegerType(16, Signedness.UNSIGNED),
    "uint32_t": IntegerType(32, Signedness.UNSIGNED),
    "uint64_t": IntegerType(64, Signedness.UNSIGNED),
}


def element_type(dtype: str) -> Attribute:
    """The IR element type of a `.ne` dtype (`int8_t` -> `i8`, `uint8_t` -> `ui8`)."""
    return _ELEMENT_TYPES[dtype]


def dtype_of(elt: Attribute) -> str | None:
    """The `.ne` dtype of an IR element type (signed and signless ints are both `intN_t`)."""
    if isinstance(elt, IntegerType) and elt.signedness.data == Signedness.SIGNED:
        elt = IntegerType(elt.width.data)
    for name, t in _ELEMENT_TYPES.items():
        if t == elt:
            return name
    return None


def _is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("little_float_")


def encode_value(value: AttrValue) -> Attribute:
    """An attribute value as an xDSL attribute (see the module docstring)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a .ne attribute value")
    if isinstance(value, int):
        width = max(64, (value if value >= 0 else ~value).bit_length() + 1)  # signed: -2**63 is i64
        return IntegerAttr(value, i64 if width == 64 else IntegerType(width))
    if isinstance(value, Float):
        return StringAttr(value.text)
    if isinstance(value, str):
        return StringAttr(value)
    return ArrayAttr([encode_value(v) for v in value])


def decode_value(attr: Attribute) -> AttrValue:
    """The `.ne` attribute value an xDSL attribute stands for; ValueError when none."""
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if isinstance(attr, StringAttr):
        return Float(attr.data) if _FLOAT_SPELLING.fullmatch(attr.data) else attr.data
    if isinstance(attr, ArrayAttr):
        return tuple(decode_value(a) for a in attr.data)
    if isinstance(attr, FloatAttr):
        return Float.from_value(float(attr.value.data))
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    raise ValueError(f"attribute {attr} has no .ne spelling")


def encode_attrs(attrs: Sequence[tuple[str, AttrValue]]) -> DictionaryAttr:
    return DictionaryAttr({k: encode_value(v) for k, v in attrs})


def decode_attrs(attr: DictionaryAttr) -> tuple[tuple[str, AttrValue], ...]:
    return tuple((k, decode_value(v)) for k, v in attr.data.items())


def tensor_entry(name: str, layout: str, shape: Sequence[int], dtype: str = "Any") -> DictionaryAttr:
    """`{name, layout, shape[, dtype]}`: one declared tensor (dtype only when not Any)."""
    entry: dict[str, Attribute] = {
        "name": StringAttr(name),
        "layout": StringAttr(layout),
        "shape": DenseArrayBase.from_list(i64, list(shape)),
    }
    if dtype != "Any":
        entry["dtype"] = StringAttr(dtype)
    return DictionaryAttr(entry)


def dense_from_const(const: ConstTensor) -> DenseIntOrFPElementsAttr:
    """The constant's exact bytes as a dense attribute of its own element type and shape."""
    return DenseIntOrFPElementsAttr(TensorType(element_type(const.dtype), const.shape), BytesAttr(const.data))


def const_from_dense(name: str, value: DenseIntOrFPElementsAttr, hex_upper: bool = False) -> ConstTensor:
    """The `.ne` constant holding a dense attribute's exact bytes; ValueError for other types."""
    t = value.get_type()
    assert isinstance(t, TensorType)
    dtype = dtype_of(t.get_element_type())
    if dtype is None:
        raise ValueError(f"constant '{name}' has element type {t.get_element_type()}, which .ne cannot hold")
    return ConstTensor(name, dtype, tuple(t.get_shape()), value.data.data, hex_upper)


def const_entry(const: ConstTensor) -> DictionaryAttr:
    entry: dict[str, Attribute] = {"kind": StringAttr("const"), "value": dense_from_const(const)}
    if const.hex_upper:
        entry["hex_upper"] = BoolAttr.from_bool(True)
    return DictionaryAttr(entry)


def words_entry(words: WordTensor) -> DictionaryAttr:
    data = DenseIntOrFPElementsAttr(
        TensorType(IntegerType(8, Signedness.UNSIGNED), [len(words.data)]), BytesAttr(words.data)
    )
    return DictionaryAttr(
        {
            "kind": StringAttr("words"),
            "type": StringAttr(words.type_name),
            "layout": StringAttr(words.layout),
            "shape": DenseArrayBase.from_list(i64, list(words.shape)),
            "data": data,
            "hex_upper": BoolAttr.from_bool(words.hex_upper),
        }
    )


def _orphan_entry(kind: str, decl: InitTensor | RuntimeTensor | MemTensor) -> DictionaryAttr:
    dtype = decl.type_name if isinstance(decl, MemTensor) else decl.dtype
    entry = dict(tensor_entry(decl.name, decl.layout, decl.shape, dtype).data)
    del entry["name"]
    return DictionaryAttr({"kind": StringAttr(kind), **entry})


def streamed_type(shape: Sequence[int], layout: str, elt: Attribute = f32) -> TensorType:
    """The IR type of a declared runtime tensor: B and M dims (and -1) become `?`."""
    dims = [
        DYNAMIC_INDEX if d == -1 or (i < len(layout) and layout[i] in "BM") else d for i, d in enumerate(shape)
    ]
    return TensorType(elt, dims)


# ---------------------------------------------------------------------------------------
# Converters: one node -> one op
# ---------------------------------------------------------------------------------------


class Unsupported(Exception):
    """The node is meaningful but the nf op cannot express it: keep it as nf.custom."""


class NodeProblem(Exception):
    """The node contradicts itself; `attr` or `input` says where (for the location)."""

    def __init__(self, message: str, *, attr: str | None = None, input: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.attr = attr
        self.input = input


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
    used: set[str] = field(default_factory=set)

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
            raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be an integer", attr=key)
        return value

    def ints(self, key: str) -> tuple[int, ...] | None:
        value = self._attrs.get(key)
        if value is None:
            return None
        if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be a list of integers", attr=key)
        return tuple(int(v) for v in value)  # type: ignore[arg-type]  # checked above

    def float(self, key: str, default: float | None = None) -> float:
        value = self._attrs.get(key)
        if value is None:
            if default is None:
                raise NodeProblem(f"{self.op_type} node '{self.name}' needs attribute '{key}'")
            return default
        if isinstance(value, Float):
            return value.value
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be a number", attr=key)

    def name_attr(self, key: str, default: str) -> str:
        value = self._attrs.get(key, default)
        if not isinstance(value, str):
            raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be a name", attr=key)
        return value

    def flag(self, key: str, default: int) -> bool:
        value = self.int(key, default)
        if value not in (0, 1):
            raise NodeProblem(f"attribute '{key}' of node '{self.name}' must be 0 or 1, got {value}", attr=key)
        return bool(value)

    # -- inputs and outputs ----------------------------------------------------------------
    def values(self, low: int, high: int | None = None) -> list[SSAValue]:
        """The inputs as SSA values: `low` to `high` of them (-1: no limit), none a constant."""
        high = low if high is None else high
        n = len(self.inputs)
        if n < low or (high >= 0 and n > high):
            wanted = str(low) if low == high else f"at least {low}" if high < 0 else f"{low} to {high}"
            raise NodeProblem(f"{self.op_type} node '{self.name}' takes {wanted} inputs, got {n}")
        out: list[SSAValue] = []
        for i, value in enumerate(self.inputs):
            if not isinstance(value, SSAValue):
                raise Unsupported(f"input {i} '{value.name}' is a {_kind_of_const(value)}, not a float tensor")
            out.append(value)
        return out

    def one_output(self) -> None:
        if self.num_outputs != 1:
            raise Unsupported(f"{self.op_type} node '{self.name}' has {self.num_outputs} outputs; nanoir maps 1")


def _kind_of_const(value: ConstTensor | WordTensor) -> str:
    return f"{value.dtype} constant" if isinstance(value, ConstTensor) else "word-list constant"


def _shape(value: SSAValue) -> tuple[int, ...]:
    return nf.tensor_shape(value)


def _rank(value: SSAValue) -> int:
    return len(_shape(value))


# A converter builds the op for a node, or raises Unsupported / NodeProblem.
Converter = Callable[[NodeSpec], Operation]


def _q(n: NodeSpec) -> Operation:
    n.allow("bit_len", "rounding")
    n.one_output()
    if len(n.inputs) != 2:
        raise NodeProblem(f"Q node '{n.name}' takes 2 inputs (data, exponent), got {len(n.inputs)}")
    data, exp = n.inputs
    if not isinstance(data, SSAValue):
        raise NodeProblem(f"Q node '{n.name}' quantizes '{data.name}', a {_kind_of_const(data)}; expected a float tensor", input=0)
    if isinstance(exp, SSAValue) or not isinstance(exp, ConstTensor) or _is_float_dtype(exp.dtype):
        raise NodeProblem(f"Q node '{n.name}' needs an integer exponent constant as input 1", input=1)
    bits = n.int("bit_len")
    try:
        rounding = RoundingMode(n.name_attr("rounding", RoundingMode.TRUNC.value))
    except ValueError:
        known = ", ".join(m.value for m in RoundingMode)
        raise NodeProblem(f"rounding of Q node '{n.name}' must be one of {known}", attr="rounding") from None
    return FakeQuantOp(data, bits, dense_from_const(exp), rounding)


def _conv(n: NodeSpec) -> Operation:
    n.allow("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
    n.one_output()
    if n.name_attr("auto_pad", "NOTSET") != "NOTSET":
        raise Unsupported("auto_pad other than NOTSET")
    values = n.values(2, 3)
    kernel = n.ints("kernel_shape")
    weight = _shape(values[1])
    if kernel is not None and not shapes_compatible(kernel, weight[2:]):
        raise NodeProblem(
            f"kernel_shape {list(kernel)} of Conv node '{n.name}' contradicts its weight of shape {shape_str(weight)}",
            attr="kernel_shape",
        )
    return nf.ConvOp(
        values[0],
        values[1],
        values[2] if len(values) == 3 else None,
        strides=n.ints("strides"),
        pads=n.ints("pads"),
        dilations=n.ints("dilations"),
        groups=n.int("group", 1),
    )


def _gemm(n: NodeSpec) -> Operation:
    n.allow("alpha", "beta", "transA", "transB")
    n.one_output()
    values = n.values(2, 3)
    if n.int("transA", 0) != 0 or n.int("transB", 0) != 1:
        raise Unsupported("only Gemm with transA=0 and transB=1 is nf.linear")
    if n.float("alpha", 1.0) != 1.0 or (len(values) == 3 and n.float("beta", 1.0) != 1.0):
        raise Unsupported("only Gemm with alpha=1 and beta=1 is nf.linear")
    if _rank(values[0]) != 2 or (len(values) == 3 and _rank(values[2]) != 1):
        raise Unsupported("nf.linear needs a 2-D input and a 1-D bias")
    return nf.LinearOp(values[0], values[1], values[2] if len(values) == 3 else None)


def _binary(cls: type[nf.BinaryFloatOp]) -> Converter:
    def convert(n: NodeSpec) -> Operation:
        n.allow()
        n.one_output()
        lhs, rhs = n.values(2)
        return cls(lhs, rhs)

    return convert


def _unary(cls: type[nf.UnaryFloatOp]) -> Converter:
    def convert(n: NodeSpec) -> Operation:
        n.allow()
        n.one_output()
        return cls(n.values(1)[0])

    return convert


def _leaky_relu(n: NodeSpec) -> Operation:
    n.allow("alpha")
    n.one_output()
    return nf.LeakyReluOp(n.values(1)[0], n.float("alpha", 0.01))


def _clip(n: NodeSpec) -> Operation:
    n.allow("min", "max")
    n.one_output()
    if len(n.inputs) > 1:
        raise Unsupported("Clip with min/max inputs (only attributes map to nf.clamp)")
    x = n.values(1)[0]
    lo = n.float("min") if n.has("min") else None
    hi = n.float("max") if n.has("max") else None
    if lo is not None and hi is not None and lo > hi:
        raise NodeProblem(f"Clip node '{n.name}' has min {lo} greater than max {hi}", attr="min")
    return nf.ClampOp(x, lo, hi)


def _pool_window(n: NodeSpec) -> tuple[tuple[int, ...], bool]:
    if n.name_attr("auto_pad", "NOTSET") != "NOTSET":
        raise Unsupported("auto_pad other than NOTSET")
    kernel = n.ints("kernel_shape")
    if kernel is None:
        raise NodeProblem(f"{n.op_type} node '{n.name}' needs attribute 'kernel_shape'")
    return kernel, n.flag("ceil_mode", 0)


def _max_pool(n: NodeSpec) -> Operation:
    n.allow("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides")
    n.one_output()
    if n.int("storage_order", 0) != 0:
        raise Unsupported("storage_order=1 (it only matters for the Indices output)")
    kernel, ceil_mode = _pool_window(n)
    x = n.values(1)[0]
    return nf.MaxPoolOp(
        x, kernel, strides=n.ints("strides"), pads=n.ints("pads"), dilations=n.ints("dilations"), ceil_mode=ceil_mode
    )


def _avg_pool(n: NodeSpec) -> Operation:
    n.allow("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
    n.one_output()
    kernel, ceil_mode = _pool_window(n)
    x = n.values(1)[0]
    return nf.AvgPoolOp(
        x,
        kernel,
        strides=n.ints("strides"),
        pads=n.ints("pads"),
        ceil_mode=ceil_mode,
        count_include_pad=n.flag("count_include_pad", 0),  # ONNX's default, not torch's
    )


def _global_avg_pool(n: NodeSpec) -> Operation:
    n.allow()
    n.one_output()
    x = n.values(1)[0]
    if _rank(x) < 3:
        raise NodeProblem(f"GlobalAveragePool node '{n.name}' needs an input of rank 3 or more", input=0)
    return nf.AdaptiveAvgPoolOp(x, [1] * (_rank(x) - 2))


def _concat(n: NodeSpec) -> Operation:
    n.allow("axis")
    n.one_output()
    values = n.values(1, -1)
    return nf.ConcatOp(values, n.int("axis"))


def _dims_to_type(x: SSAValue, dims: Sequence[int]) -> Operation:
    if sum(d == DYNAMIC_INDEX for d in dims) > 1:
        raise Unsupported(f"the result {shape_str(dims)} would have more than one dynamic dim")
    return nf.ReshapeOp(x, dims)


def _reshape(n: NodeSpec) -> Operation:
    n.allow("allowzero")
    n.one_output()
    if len(n.inputs) != 2:
        raise NodeProblem(f"Reshape node '{n.name}' takes 2 inputs (data, shape), got {len(n.inputs)}")
    x, shape_const = n.inputs
    if not isinstance(x, SSAValue):
        raise Unsupported(f"input 0 '{x.name}' is a {_kind_of_const(x)}, not a float tensor")
    if not isinstance(shape_const, ConstTensor) or not shape_const.dtype.startswith("int"):
        raise Unsupported("the shape (input 1) is not a signed integer constant")
    if len(shape_const.shape) != 1:
        raise NodeProblem(f"the shape of Reshape node '{n.name}' must be 1-D", input=1)
    allowzero = n.flag("allowzero", 0)
    wanted = [int(v) for v in shape_const.to_numpy()]
    src = _shape(x)
    if wanted.count(-1) > 1:
        raise NodeProblem(f"the shape {wanted} of Reshape node '{n.name}' has more than one -1", input=1)
    dims: list[int] = []
    copied: set[int] = set()
    for i, d in enumerate(wanted):
        if d == 0 and not allowzero:
            if i >= len(src):
                raise NodeProblem(f"shape {wanted} of Reshape node '{n.name}' copies dim {i}, which the input lacks", input=1)
            dims.append(src[i])
            copied.add(i)
        elif d < -1:
            raise NodeProblem(f"the shape {wanted} of Reshape node '{n.name}' has {d}", input=1)
        else:
            dims.append(d)
    if -1 in dims:
        # A copied dim is a factor on both sides, so it cancels even when it is dynamic.
        left = [d for i, d in enumerate(src) if i not in copied]
        right = [d for i, d in enumerate(dims) if i not in copied and d != -1]
        if DYNAMIC_INDEX in left or 0 in right:
            dims[dims.index(-1)] = DYNAMIC_INDEX
        else:
            if prod(left) % prod(right):
                raise NodeProblem(f"Reshape node '{n.name}' cannot view {shape_str(src)} as {wanted}", input=1)
            dims[dims.index(-1)] = prod(left) // prod(right)
    return _dims_to_type(x, dims)


def _flatten(n: NodeSpec) -> Operation:
    n.allow("axis")
    n.one_output()
    x = n.values(1)[0]
    src = _shape(x)
    axis = n.int("axis", 1)
    if not -len(src) <= axis <= len(src):
        raise NodeProblem(f"axis {axis} of Flatten node '{n.name}' is out of range for {shape_str(src)}", attr="axis")
    return _dims_to_type(x, flatten_dims(src, axis % (len(src) + 1) if axis < 0 else axis))


def flatten_dims(src: Sequence[int], axis: int) -> list[int]:
    """ONNX Flatten's result shape: `[prod(src[:axis]), prod(src[axis:])]`, `?` if unknown."""

    def size(dims: Sequence[int]) -> int:
        return DYNAMIC_INDEX if DYNAMIC_INDEX in dims else prod(dims)

    return [size(src[:axis]), size(src[axis:])]


def _batch_norm(n: NodeSpec) -> Operation:
    n.allow("epsilon", "momentum", "spatial", "training_mode")
    n.one_output()
    if n.int("training_mode", 0) != 0 or n.int("spatial", 1) != 1:
        raise Unsupported("training_mode=1 or spatial=0")
    x, scale, bias, mean, var = n.values(5)
    epsilon = n.float("epsilon", 1e-5)
    if epsilon < 0:
        raise NodeProblem(f"epsilon of BatchNormalization node '{n.name}' is negative", attr="epsilon")
    return nf.BatchNormOp(x, scale, bias, mean, var, epsilon)


def _transpose(n: NodeSpec) -> Operation:
    n.allow("perm")
    n.one_output()
    x = n.values(1)[0]
    perm = n.ints("perm")
    perm = tuple(reversed(range(_rank(x)))) if perm is None else perm
    if sorted(perm) != list(range(_rank(x))):
        raise NodeProblem(f"perm {list(perm)} of Transpose node '{n.name}' does not permute {_rank(x)} dims", attr="perm")
    return nf.TransposeOp(x, perm)


def _matmul(n: NodeSpec) -> Operation:
    n.allow()
    n.one_output()
    a, b = n.values(2)
    return nf.MatmulOp(a, b)


def _prelu(n: NodeSpec) -> Operation:
    n.allow()
    n.one_output()
    x, slope = n.values(2)
    if _rank(slope) != 1:
        raise Unsupported("nf.prelu takes a 1-D slope only")
    return nf.PReluOp(x, slope)


CONVERTERS: dict[str, Converter] = {
    "Q": _q,
    "Conv": _conv,
    "Gemm": _gemm,
    "Add": _binary(nf.AddOp),
    "Sub": _binary(nf.SubOp),
    "Mul": _binary(nf.MulOp),
    "Div": _binary(nf.DivOp),
    "Relu": _unary(nf.ReluOp),
    "Sigmoid": _unary(nf.SigmoidOp),
    "Tanh": _unary(nf.TanhOp),
    "LeakyRelu": _leaky_relu,
    "Clip": _clip,
    "MaxPool": _max_pool,
    "AveragePool": _avg_pool,
    "GlobalAveragePool": _global_avg_pool,
    "Concat": _concat,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "BatchNormalization": _batch_norm,
    "Transpose": _transpose,
    "MatMul": _matmul,
    "PRelu": _prelu,
}
"""`.ne` op type -> converter building the nf/nq op (the reverse table is in ne_export)."""


def convert_known(spec: NodeSpec) -> Operation:
    """Build and verify the op for a known op type; Unsupported / NodeProblem otherwise.

    Shape inference failures and verifier errors are NodeProblems: the node's inputs
    do not fit together. Used by the importer and by the exporter's consistency check.
    """
    convert = CONVERTERS[spec.op_type]
    try:
        op = convert(spec)
    except ShapeError as e:
        raise NodeProblem(f"{spec.op_type} node '{spec.name}': {e}") from None
    try:
        op.verify()
    except VerifyException as e:
        op.erase(safe_erase=False)
        raise NodeProblem(f"{spec.op_type} node '{spec.name}': {e.args[0] if e.args else e}") from None
    return op


PADDED_OP_TYPES = ("Conv", "MaxPool", "AveragePool")
"""The op types whose `pads` NanoEngine-PyTorch's stream analysis ignores."""


def _has_pads(spec: NodeSpec) -> bool:
    pads = dict(spec.attrs).get("pads")
    return spec.op_type in PADDED_OP_TYPES and isinstance(pads, tuple) and any(p != 0 for p in pads)


def reference_result_types(
    spec: NodeSpec, types: Sequence[Attribute], reference: Sequence[Attribute | None]
) -> list[Attribute] | None:
    """The result types NanoEngine-PyTorch declares for a known node: shape inference with
    the node's pads taken as zero and its SSA inputs at their reference types.

    `types` are the result types nanoir computes (returned as they are when the node has no
    pads and every input's reference type is its type); `reference` holds one type (or None:
    unknown) per SSA input, in order. None when a reference type is unknown or the reference
    shapes do not fit together.

    A join (Add, Sub, Mul, Div, Concat) of a padded branch with a less shrunken one, as in a
    residual block, fires in the reference's analysis while every input has a row, so along
    each dim where its inputs disagree (and none broadcasts, and not Concat's axis) it
    produces as many as the shortest input has.
    """
    values = [v for v in spec.inputs if isinstance(v, SSAValue)]
    if not _has_pads(spec) and all(r == v.type for v, r in zip(values, reference)):
        return list(types)
    if any(r is None for r in reference) or spec.op_type not in CONVERTERS:
        return None
    attrs = tuple(
        (k, tuple(0 for _ in v)) if k == "pads" and isinstance(v, tuple) and spec.op_type in PADDED_OP_TYPES else (k, v)
        for k, v in spec.attrs
    )
    found = _types_of(NodeSpec(spec.name, spec.op_type, attrs, spec.inputs, spec.num_outputs), reference)  # type: ignore[arg-type]
    if found is None and spec.op_type in _JOIN_OP_TYPES:
        found = _types_of(spec, _shortest_joined(spec, reference))  # type: ignore[arg-type]
    return found


_JOIN_OP_TYPES = ("Add", "Sub", "Mul", "Div", "Concat")


def _types_of(spec: NodeSpec, input_types: Sequence[Attribute]) -> list[Attribute] | None:
    """The result types of the node with its SSA inputs of these types; None if they do not fit."""
    placeholders = iter(Block(arg_types=input_types).args)
    inputs = tuple(next(placeholders) if isinstance(v, SSAValue) else v for v in spec.inputs)
    try:
        op = convert_known(NodeSpec(spec.name, spec.op_type, spec.attrs, inputs, spec.num_outputs))
    except (Unsupported, NodeProblem, ShapeError, ValueError):
        return None
    result = [r.type for r in op.results]
    op.erase(safe_erase=False)
    return result


def _shortest_joined(spec: NodeSpec, types: Sequence[Attribute]) -> list[Attribute]:
    """The input types of a join cut to the shortest input along each dim where they differ."""
    shapes = [list(t.get_shape()) if isinstance(t, TensorType) else [] for t in types]
    rank = max((len(s) for s in shapes), default=0)
    axis = dict(spec.attrs).get("axis") if spec.op_type == "Concat" else None
    skip = axis % rank if isinstance(axis, int) and rank and -rank <= axis < rank else None
    for d in range(rank):
        sizes = {s[d] for s in shapes if len(s) == rank and s[d] not in (1, DYNAMIC_INDEX)}
        if d != skip and len(sizes) > 1:
            for s in shapes:
                if len(s) == rank and s[d] not in (1, DYNAMIC_INDEX):
                    s[d] = min(sizes)
    return [
        TensorType(t.get_element_type(), s) if isinstance(t, TensorType) else t for t, s in zip(types, shapes)
    ]


def _float_types_differ(values: Sequence[NodeInput]) -> bool:
    elts = {v.type.get_element_type() for v in values if isinstance(v, SSAValue) and isinstance(v.type, TensorType)}
    return len(elts) > 1


# ---------------------------------------------------------------------------------------
# The importer
# ---------------------------------------------------------------------------------------


def _items_attr(program: Program) -> ArrayAttr[StringAttr]:
    # A byte order mark and comments spaced unlike the reference are recorded too (ne_printer).
    entries: list[StringAttr] = [StringAttr(BOM_ENTRY)] if program.bom else []
    previous: Item | None = None
    for item in program.items:
        if isinstance(item, Comment):
            entries.append(StringAttr(comment_entry(item, previous)))
        elif isinstance(item, Function):
            entries.append(StringAttr(f"func {item.name}"))
        else:
            entries.append(StringAttr(item.name))
        previous = item
    return ArrayAttr(entries)


def _set_hint(value: SSAValue, name: str) -> None:
    if _HINT.fullmatch(name):
        value.name_hint = name


def check_each_node_called_once(
    program: Program,
    nodes: Mapping[str, InitNode | RuntimeNode],
    error: Callable[[str, Loc | None], NanoEngineSemanticError],
) -> None:
    """nanoir runs each node exactly once: a node called twice, or never, is an error."""
    seen: set[str] = set()
    for name in ("init", "runtime"):
        func = program.function(name)
        assert func is not None  # check_program requires both
        for i, call in enumerate(func.calls):
            if call in seen:
                loc = func.call_locs[i] if i < len(func.call_locs) else func.loc
                raise error(f"node '{call}' is called more than once; nanoir runs each node once", loc)
            seen.add(call)
    for node in nodes.values():
        if node.name not in seen:
            kind = "init" if isinstance(node, InitNode) else "runtime"
            raise error(f"node '{node.name}' is never called by func {kind}", node.loc)


class _Importer:
    def __init__(self, program: Program, filename: str, source: str | None) -> None:
        self.program = program
        self.filename = filename
        self.source = source
        self.decls: dict[str, Declaration] = {d.name: d for d in program.declarations}
        self.nodes: dict[str, InitNode | RuntimeNode] = {
            d.name: d for d in program.declarations if isinstance(d, (InitNode, RuntimeNode))
        }
        self.values: dict[str, SSAValue] = {}
        self.block = Block()
        self.used_consts: set[str] = set()  # int/word constants that some node reads as a non-exponent
        self.exp_consts: set[str] = set()
        self.read: set[str] = set()
        self.produced: dict[str, str] = {}
        # What NanoEngine-PyTorch declares for each value (None: unknown), see PADDED_OP_TYPES;
        # values not in it are declared as they are (inputs, constants).
        self.reference: dict[SSAValue, Attribute | None] = {}
        # Outputs accepted with the reference's padding-ignoring shape, and their nodes.
        self.padding_quirks: list[tuple[InitNode | RuntimeNode, RuntimeTensor]] = []
        self.identities: dict[str, RuntimeNode] = {}  # Identity nodes by output name
        self.previous_node: dict[str, str] = {}  # node -> the node called just before it

    # -- errors ---------------------------------------------------------------------------
    def error(self, message: str, loc: Loc | None) -> NanoEngineSemanticError:
        line, column = (loc.line, loc.column) if loc is not None else (1, 1)
        return NanoEngineSemanticError(message, self.filename, line, column, self.source)

    def warn(
        self, message: str, loc: Loc | None, cls: type[NanoEngineImportWarning] = NanoEngineImportWarning, stacklevel: int = 4
    ) -> None:
        line, column = (loc.line, loc.column) if loc is not None else (1, 1)
        warnings.warn(cls(f"{self.filename}:{line}:{column}: warning: {message}"), stacklevel=stacklevel)

    # -- the whole program ----------------------------------------------------------------
    def run(self) -> ModuleOp:
        calls = self._call_order()
        for node in self.nodes.values():
            self.read.update(node.in_s)
            for out in node.out_s:
                self.produced[out] = node.name
        self._constants()
        inputs = [
            d
            for d in self.program.declarations
            if isinstance(d, RuntimeTensor) and d.name in self.read and d.name not in self.produced
        ]
        arg_types = [streamed_type(d.shape, d.layout) for d in inputs]
        self.block = Block(arg_types=arg_types)
        for arg, decl in zip(self.block.args, inputs):
            self.values[decl.name] = arg
            _set_hint(arg, decl.name)
        for op in self.constant_ops:
            self.block.add_op(op)
        for previous, node in zip([None, *calls], calls):
            if previous is not None:
                self.previous_node[node.name] = previous.name
            self._node(node)
        outputs = [
            d
            for d in self.program.declarations
            if isinstance(d, RuntimeTensor) and d.name in self.produced and d.name not in self.read
        ]
        results = [self.values[d.name] for d in outputs]
        self.block.add_op(ReturnOp(*results))
        res_attrs = [self._identity_entry(d.name) for d in outputs]
        func = FuncOp(
            "main",
            (arg_types, [r.type for r in results]),
            Region(self.block),
            arg_attrs=ArrayAttr(
                [DictionaryAttr({NE_TENSOR: tensor_entry(d.name, d.layout, d.shape, d.dtype)}) for d in inputs]
            )
            if inputs
            else None,
            res_attrs=ArrayAttr(res_attrs) if any(a.data for a in res_attrs) else None,
        )
        module = ModuleOp([func])
        module.attributes[NE_ITEMS] = _items_attr(self.program)
        orphans = self._orphans(inputs)
        if orphans:
            module.attributes[NE_DECLS] = DictionaryAttr(orphans)
        module.verify()  # every op was verified as it was built: a failure here is a bug
        self._warn_padding_quirks()
        return module

    def _identity_entry(self, name: str) -> DictionaryAttr:
        """`{ne.identity = {node, out, mem_s, after}}` for a result an Identity node gives."""
        node = self.identities.get(name)
        if node is None:
            return DictionaryAttr({})
        decl = self.decls[name]
        assert isinstance(decl, RuntimeTensor)
        mems: list[Attribute] = []
        for mem_name in node.mem_s:
            mem = self.decls[mem_name]
            assert isinstance(mem, MemTensor)
            mems.append(tensor_entry(mem.name, mem.layout, mem.shape, mem.type_name))
        entry = {
            "node": StringAttr(node.name),
            "out": tensor_entry(decl.name, decl.layout, decl.shape, decl.dtype),
            "mem_s": ArrayAttr(mems),
            "after": StringAttr(self.previous_node.get(node.name, "")),
        }
        return DictionaryAttr({NE_IDENTITY: DictionaryAttr(entry)})

    def _warn_padding_quirks(self) -> None:
        """One warning for all outputs declared with the reference's padding-ignoring shapes."""
        if not self.padding_quirks:
            return
        described = "; ".join(
            f"{out.name} declared {list(out.shape)}, computed {shape_str(nf.tensor_shape(self.values[out.name]))}"
            for _, out in self.padding_quirks
        )
        padded = [
            node.name
            for node, _ in self.padding_quirks
            if _has_pads(NodeSpec(node.name, node.op_type, node.attrs, (), len(node.out_s)))
        ]
        count = len(self.padding_quirks)
        first = self.padding_quirks[0][1]
        self.warn(
            f"{count} runtime tensor{'s are' if count > 1 else ' is'} declared with the "
            f"shape{'s' if count > 1 else ''} NanoEngine-PyTorch computes when it ignores the pads of "
            f"{', '.join(dict.fromkeys(padded)) or 'Conv and pool nodes'}, not the true one{'s' if count > 1 else ''}; "
            f"nanoir computes with the true shapes and keeps the declared numbers for writing the file back: "
            f"{described}",
            first.loc,
            NanoEnginePaddingWarning,
        )

    def _call_order(self) -> list[InitNode | RuntimeNode]:
        """Nodes in execution order: init calls, then runtime calls; each exactly once."""
        check_each_node_called_once(self.program, self.nodes, self.error)
        return [self.nodes[call] for name in ("init", "runtime")
                for call in self.program.function(name).calls]  # type: ignore[union-attr]

    def _constants(self) -> None:
        self.constant_ops: list[Operation] = []
        for decl in self.program.declarations:
            if isinstance(decl, ConstTensor) and _is_float_dtype(decl.dtype):
                op = nf.ConstantOp(dense_from_const(decl), decl.name)
                if decl.hex_upper:
                    op.attributes[NE_HEX_UPPER] = UnitAttr()
                _set_hint(op.results[0], decl.name)
                self.values[decl.name] = op.results[0]
                self.constant_ops.append(op)

    def _orphans(self, inputs: list[RuntimeTensor]) -> dict[str, Attribute]:
        """Declarations no op carries, for `ne.decls` (see the module docstring)."""
        carried_mems = {m for node in self.nodes.values() if isinstance(node, RuntimeNode) for m in node.mem_s}
        out: dict[str, Attribute] = {}
        for decl in self.program.declarations:
            if isinstance(decl, ConstTensor) and not _is_float_dtype(decl.dtype):
                if decl.name in self.used_consts or decl.name not in self.exp_consts:
                    out[decl.name] = const_entry(decl)
            elif isinstance(decl, WordTensor):
                out[decl.name] = words_entry(decl)
            elif isinstance(decl, InitTensor) and decl.name not in self.produced:
                out[decl.name] = _orphan_entry("init", decl)
            elif isinstance(decl, RuntimeTensor) and decl.name not in self.produced and decl.name not in self.read:
                out[decl.name] = _orphan_entry("runtime", decl)
            elif isinstance(decl, MemTensor) and decl.name not in carried_mems:
                out[decl.name] = _orphan_entry("mem", decl)
        return out

    # -- one node -------------------------------------------------------------------------
    def _inputs(self, node: InitNode | RuntimeNode) -> tuple[NodeInput, ...]:
        inputs: list[NodeInput] = []
        for i, name in enumerate(node.in_s):
            loc = node.in_locs[i] if i < len(node.in_locs) else node.loc
            decl = self.decls[name]
            if isinstance(decl, (ConstTensor, WordTensor)) and name not in self.values:
                inputs.append(decl)
            elif name in self.values:
                inputs.append(self.values[name])
            elif name in self.produced:
                raise self.error(
                    f"node '{node.name}' reads '{name}' before node '{self.produced[name]}' computes it "
                    "(calls must follow the dataflow)",
                    loc,
                )
            else:
                raise self.error(f"node '{node.name}' reads '{name}', which no init node computes", loc)
        return tuple(inputs)

    def _node(self, node: InitNode | RuntimeNode) -> None:
        inputs = self._inputs(node)
        if node.op_type == "Identity":
            self._identity(node, inputs)
            return
        spec = NodeSpec(node.name, node.op_type, node.attrs, inputs, len(node.out_s))
        op = self._convert(node, spec)
        types = [r.type for r in op.results]
        if isinstance(op, nf.CustomOp):
            reference: list[Attribute] | None = types  # typed from the declarations
        else:
            values = [v for v in inputs if isinstance(v, SSAValue)]
            reference = reference_result_types(spec, types, [self.reference.get(v, v.type) for v in values])
        self._check_outputs(node, op, reference)
        for i, result in enumerate(op.results):
            self.reference[result] = reference[i] if reference is not None else None
        self._annotate(node, spec, op)
        self.block.add_op(op)
        for out, result in zip(node.out_s, op.results):
            self.values[out] = result
            _set_hint(result, out)

    def _convert(self, node: InitNode | RuntimeNode, spec: NodeSpec) -> Operation:
        if node.op_type not in CONVERTERS:
            self.warn(
                f"op type '{node.op_type}' of node '{node.name}' is not known to nanoir; it is kept as "
                "nf.custom (it cannot run or be lowered)",
                node.loc,
            )
            return self._custom(node, spec)
        try:
            if _float_types_differ(spec.inputs):
                raise Unsupported("its inputs mix float types")
            return convert_known(spec)
        except Unsupported as why:
            self.warn(f"{node.op_type} node '{node.name}' is kept as nf.custom: {why}", node.loc)
            return self._custom(node, spec)
        except NodeProblem as problem:
            raise self.error(problem.message, self._problem_loc(node, problem)) from None

    def _problem_loc(self, node: InitNode | RuntimeNode, problem: NodeProblem) -> Loc | None:
        if problem.attr is not None:
            for (key, _), loc in zip(node.attrs, node.attr_locs):
                if key == problem.attr:
                    return loc
        if problem.input is not None and problem.input < len(node.in_locs):
            return node.in_locs[problem.input]
        return node.loc

    def _custom(self, node: InitNode | RuntimeNode, spec: NodeSpec) -> Operation:
        operands = [v for v in spec.inputs if isinstance(v, SSAValue)]
        result_types: list[Attribute] = []
        for out in node.out_s:
            decl = self.decls[out]
            assert isinstance(decl, (InitTensor, RuntimeTensor))  # check_program
            if isinstance(decl, InitTensor):
                result_types.append(TensorType(f32, decl.shape))
            else:
                result_types.append(streamed_type(decl.shape, decl.layout))
        return nf.CustomOp.create(
            operands=operands,
            result_types=result_types,
            properties={"op_type": StringAttr(node.op_type), "attrs": encode_attrs(node.attrs)},
        )

    def _check_outputs(self, node: InitNode | RuntimeNode, op: Operation, reference: Sequence[Attribute] | None) -> None:
        """The declared outputs must agree with the inferred types on every static dim, or
        be NanoEngine-PyTorch's padding-ignoring shapes (`reference`, see PADDED_OP_TYPES)."""
        try:
            for i, result in enumerate(op.results[: len(node.out_s)]):
                self._check_output(node, i, result.type, reference[i] if reference is not None else None)
        except NanoEngineSemanticError:
            op.erase(safe_erase=False)
            raise

    def _check_output(
        self, node: InitNode | RuntimeNode, i: int, inferred: Attribute, reference: Attribute | None
    ) -> None:
        out = node.out_s[i]
        decl = self.decls[out]
        assert isinstance(decl, (InitTensor, RuntimeTensor))
        declared = (
            TensorType(f32, decl.shape) if isinstance(decl, InitTensor) else streamed_type(decl.shape, decl.layout)
        )
        assert isinstance(inferred, TensorType)
        if shapes_compatible(inferred.get_shape(), declared.get_shape()):
            return
        if (
            isinstance(decl, RuntimeTensor)
            and isinstance(reference, TensorType)
            and shapes_compatible(reference.get_shape(), declared.get_shape())
        ):
            self.padding_quirks.append((node, decl))
            return
        loc = node.out_locs[i] if i < len(node.out_locs) else node.loc
        raise self.error(
            f"'{out}' is declared {list(decl.shape)} ({shape_str(declared.get_shape())} in the IR), but "
            f"{node.op_type} node '{node.name}' computes {shape_str(inferred.get_shape())}",
            loc,
        )

    def _identity(self, node: InitNode | RuntimeNode, inputs: tuple[NodeInput, ...]) -> None:
        """An Identity node creates no op: its output is a second name of its input's value.

        (The nq exporter writes one for a result that is also read elsewhere, returned twice
        or an input; a result given by one is recorded as `ne.identity` in the function's
        result attributes, so it is written back the same way.)"""
        if node.attrs:
            raise self.error(f"Identity node '{node.name}' takes no attributes", node.attr_locs[0] if node.attr_locs else node.loc)
        if len(inputs) != 1 or len(node.out_s) != 1:
            raise self.error(f"Identity node '{node.name}' takes 1 input and has 1 output", node.loc)
        (value,) = inputs
        if not isinstance(value, SSAValue):
            loc = node.in_locs[0] if node.in_locs else node.loc
            raise self.error(f"Identity node '{node.name}' reads the {_kind_of_const(value)} '{value.name}'; expected a float tensor", loc)
        self._check_output(node, 0, value.type, self.reference.get(value, value.type))
        self.values[node.out_s[0]] = value
        if isinstance(node, RuntimeNode):
            self.identities[node.out_s[0]] = node

    def _annotate(self, node: InitNode | RuntimeNode, spec: NodeSpec, op: Operation) -> None:
        from nanoir.grammar.ne_export import (  # the reverse table
            ExportError,
            default_attrs,
        )

        attrs = op.attributes
        attrs[NE_NODE] = StringAttr(node.name)
        if isinstance(node, InitNode):
            attrs[NE_INIT] = UnitAttr()
        if isinstance(op, nf.ReshapeOp) and node.op_type == "Flatten":
            attrs[NE_OP_TYPE] = StringAttr("Flatten")
        if not isinstance(op, nf.CustomOp):
            try:
                printed = default_attrs(op, node.op_type)
            except ExportError:  # e.g. a Conv whose weight has dynamic dims: keep the text's
                printed = None
            if printed != node.attrs:
                attrs[NE_ATTR] = encode_attrs(node.attrs)
        const_in: dict[str, Attribute] = {}
        for i, value in enumerate(spec.inputs):
            if isinstance(value, SSAValue):
                continue
            if isinstance(op, FakeQuantOp) and i == 1:
                assert isinstance(value, ConstTensor)
                self.exp_consts.add(value.name)
                attrs[NE_EXP_NAME] = StringAttr(value.name)
                if value.hex_upper:
                    attrs[NE_EXP_HEX_UPPER] = UnitAttr()
            else:
                self.used_consts.add(value.name)
                const_in[str(i)] = StringAttr(value.name)
        if const_in:
            attrs[NE_CONST_IN] = DictionaryAttr(const_in)
        outs: list[Attribute] = []
        for out in node.out_s:
            decl = self.decls[out]
            assert isinstance(decl, (InitTensor, RuntimeTensor))
            outs.append(tensor_entry(decl.name, decl.layout, decl.shape, decl.dtype))
        attrs[NE_OUT_S] = ArrayAttr(outs)
        if isinstance(node, RuntimeNode):
            mems: list[Attribute] = []
            for name in node.mem_s:
                mem = self.decls[name]
                assert isinstance(mem, MemTensor)
                mems.append(tensor_entry(mem.name, mem.layout, mem.shape, mem.type_name))
            attrs[NE_MEM_S] = ArrayAttr(mems)


def import_program(program: Program, filename: str = "<string>", source: str | None = None) -> ModuleOp:
    """The IR of a parsed `.ne` program (checked first); `NanoEngineSemanticError` on problems.

    `source`, the text the program came from, lets errors show the offending line.
    """
    check_program(program, filename, source)
    return _import_checked(program, filename, source)


def import_nanoengine(text: str, filename: str = "<string>") -> ModuleOp:
    """Parse `.ne` text and import it; every problem is a located `NanoEngineError`."""
    program = parse_nanoengine(text, filename, check=True)
    return _import_checked(program, filename, text)


def _import_checked(program: Program, filename: str, source: str | None) -> ModuleOp:
    """The nq-level importer, or `ne_import_hw`'s for programs with integer node outputs."""
    from nanoir.grammar.ne_import_hw import (  # it builds on this module
        import_hw_program,
        is_hw_program,
    )

    if is_hw_program(program):
        return import_hw_program(program, filename, source)
    return _Importer(program, filename, source).run()


def import_nanoengine_bytes(raw: bytes, filename: str = "<string>") -> ModuleOp:
    """Import `.ne` file contents (UTF-8); bad encoding is a located `NanoEngineSyntaxError`."""
    return import_nanoengine(decode_nanoengine(raw, filename), filename)


def load_nanoengine(path: str | os.PathLike[str]) -> ModuleOp:
    """Read and import a `.ne` file."""
    filename = os.fspath(path)
    with open(filename, "rb") as f:
        raw = f.read()
    return import_nanoengine_bytes(raw, filename)
