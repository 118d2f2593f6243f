"""Export xDSL IR at the quantized (nq) level to NanoEngine text (`.ne`).

The IR is turned into an `ne_ast.Program`, printed by `print_nanoengine`. Two kinds of input:

- IR imported from a `.ne` file (see `ne_import` for the `ne.*` metadata): every name,
  shape, layout, section and comment is recorded, and the original file comes back byte for
  byte. Recorded facts are used only while they still describe the IR: a recorded attribute
  list must still mean what the op does, a recorded shape must still fit the value's type,
  and recorded names are used once; otherwise the fresh choice below is made.
- Any other nf/nq IR (e.g. after `quantize`): names and sections are chosen as
  NanoEngine-PyTorch does. Nodes are `<OpType>_n<k>`, numbered per op type in program order;
  outputs `<node>_o<i>`; the function's inputs `input` (then `input_1`, ...) and results
  `output` (`output_1`, ...); named `nf.constant`s keep their name with every character
  outside `[A-Za-z0-9_]` made `_` (`conv1.weight` -> `conv1_weight`), the others and the
  exponents of fake-quants are `Constant_n<k>_o0`. A fake-quant of a constant is an init
  node, every other op a runtime node.

Runtime tensors are declared with *streaming plan* shapes. Unless a plan is given (see
`StreamPlan`; a stream-plan pass will provide real numbers) the exporter declares
`[-1, C, 1, D...]` (M = one row per step, D the whole rest) and gives every runtime node a
`mem` cache per distinct runtime input, shaped like the tensor it caches.

IR op -> `.ne` op type (the reverse of `ne_import.CONVERTERS`); attributes are printed in
alphabetical order, defaults spelled out, as the reference does:

    nq.fake_quant         Q                   [bit_len] (+ rounding when not trunc)
    nf.conv               Conv                [dilations, group, kernel_shape, pads, strides]
    nf.linear             Gemm                [alpha=1.0, beta=1.0, transB=1]
    nf.add/sub/mul/div    Add/Sub/Mul/Div     []
    nf.relu/sigmoid/tanh  Relu/Sigmoid/Tanh   []
    nf.leaky_relu         LeakyRelu           [alpha]
    nf.clamp              Clip                [max, min] (those present)
    nf.max_pool           MaxPool             [ceil_mode, dilations, kernel_shape, pads, strides]
    nf.avg_pool           AveragePool         [ceil_mode, count_include_pad, kernel_shape, pads, strides]
    nf.adaptive_avg_pool  GlobalAveragePool   [] (output size all ones only)
    nf.concat             Concat              [axis]
    nf.reshape            Reshape             [] + an int64_t shape constant (or Flatten [axis])
    nf.batch_norm         BatchNormalization  [epsilon]
    nf.transpose          Transpose           [perm]
    nf.matmul             MatMul              []
    nf.prelu              PRelu               []
    nf.custom             its op_type         its attributes
    (a result's alias)    Identity            []

Import finds the results as the runtime tensors no node reads, so a returned value that
another op also reads, that is returned twice or that is an input is written through an
`Identity` node whose output is that result (the importer makes no op for it). A constant
result is an `ExportError`. A recorded runtime shape is kept while it fits the value's type,
or the shape NanoEngine-PyTorch declares for it ignoring padding (see `ne_import`).

A function with nh ops (or nh-typed arguments) is written at the hw level by `ne_export_hw`.
Anything else (nf ops with no ONNX counterpart such as nf.pad) is an `ExportError` naming the
op. Float constants are written as `little_float_32` (f16/f64 as
`little_float_16`/`little_float_64`) from their exact bytes; nothing is converted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.nf import array_values
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.shapes import shape_str, shapes_compatible
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
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)
from nanoir.grammar.ne_import import (
    NE_ATTR,
    NE_CONST_IN,
    NE_DECLS,
    NE_EXP_HEX_UPPER,
    NE_EXP_NAME,
    NE_HEX_UPPER,
    NE_IDENTITY,
    NE_INIT,
    NE_ITEMS,
    NE_MEM_S,
    NE_NODE,
    NE_OP_TYPE,
    NE_OUT_S,
    NE_TENSOR,
    NodeInput,
    NodeProblem,
    NodeSpec,
    Unsupported,
    const_from_dense,
    convert_known,
    decode_attrs,
    flatten_dims,
    reference_result_types,
    streamed_type,
)
from nanoir.grammar.ne_printer import BOM_ENTRY, comment_from_entry, print_nanoengine
from nanoir.runtime.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

__all__ = [
    "ExportError",
    "StreamPlan",
    "UnitStepPlan",
    "WRITERS",
    "default_attrs",
    "export_program",
    "export_nanoengine",
    "sanitize_name",
    "runtime_layout",
    "init_layout",
]


class ExportError(DiagnosticException, Error):
    """The IR cannot be written as NanoEngine text; the message names the op and why."""


# ---------------------------------------------------------------------------------------
# Streaming plan: the shapes runtime tensors and caches are declared with
# ---------------------------------------------------------------------------------------


class StreamPlan(Protocol):
    """Declared shapes of runtime tensors and node caches; None means "no opinion"."""

    def tensor_shape(self, value: SSAValue) -> Sequence[int] | None: ...

    def cache_shape(self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]) -> Sequence[int] | None: ...


def runtime_layout(rank: int) -> str:
    """NanoEngine's layout of a runtime tensor: B, BC, BCM, BCMD, BCMDD, ..."""
    return "BCMD"[:rank] + "D" * max(0, rank - 4)


def init_layout(rank: int) -> str:
    """NanoEngine's layout of an init tensor: C, CC, CCD, CCDD, ... (weights, vectors)."""
    return "C" * min(rank, 2) + "D" * max(0, rank - 2)


@dataclass(frozen=True)
class UnitStepPlan:
    """The plan without a stream analysis: one row per step along M, the whole of C and D.

    A runtime tensor `tensor<?xCxMxD...>` is declared `[-1, C, 1, D...]`, and a cache like
    the tensor it caches.
    """

    def tensor_shape(self, value: SSAValue) -> Sequence[int] | None:
        t = value.type
        assert isinstance(t, TensorType)
        dims = list(t.get_shape())
        if not dims:
            raise ExportError(f"nanoengine export: a runtime value of type {t} has no batch dim")
        if len(dims) >= 3:
            dims[2] = 1
        dims[0] = -1
        if DYNAMIC_INDEX in dims:
            raise ExportError(
                f"nanoengine export: cannot declare a runtime tensor of type {t}: only the batch and "
                "the streamed dim may be dynamic (give a stream plan)"
            )
        return dims

    def cache_shape(self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]) -> Sequence[int] | None:
        return tensor_shape


# ---------------------------------------------------------------------------------------
# The reverse op table: IR op -> (.ne op type, attributes)
# ---------------------------------------------------------------------------------------

Attrs = tuple[tuple[str, AttrValue], ...]


def _static(op: Operation, shape: Sequence[int], what: str) -> tuple[int, ...]:
    """`shape` when it has no dynamic dim, else an ExportError about `what` of `op`."""
    if DYNAMIC_INDEX in shape:
        raise ExportError(f"nanoengine export: {op.name} has a dynamic {what} {shape_str(shape)}")
    return tuple(shape)


def _window(values: tuple[int, ...] | None, n: int, default: int) -> tuple[int, ...]:
    return values if values is not None else (default,) * n


def _float(value: float) -> Float:
    return Float.from_value(value)


def _fake_quant_attrs(op: FakeQuantOp) -> Attrs:
    attrs: list[tuple[str, AttrValue]] = [("bit_len", op.bits.value.data)]
    if op.rounding_mode != RoundingMode.TRUNC:
        attrs.append(("rounding", op.rounding_mode.value))
    return tuple(attrs)


def _conv_attrs(op: nf.ConvOp) -> Attrs:
    kernel = _static(op, nf.tensor_shape(op.weight)[2:], "kernel")
    n = len(kernel)
    return (
        ("dilations", _window(array_values(op.dilations), n, 1)),
        ("group", op.groups.value.data),
        ("kernel_shape", kernel),
        ("pads", _window(array_values(op.pads), 2 * n, 0)),
        ("strides", _window(array_values(op.strides), n, 1)),
    )


def _pool_attrs(op: nf.MaxPoolOp | nf.AvgPoolOp) -> Attrs:
    kernel = array_values(op.kernel) or ()
    n = len(kernel)
    attrs: list[tuple[str, AttrValue]] = [("ceil_mode", int(bool(op.ceil_mode.value.data)))]
    if isinstance(op, nf.AvgPoolOp):
        if op.divisor_override is not None:
            raise ExportError("nanoengine export: nf.avg_pool with divisor_override has no AveragePool form")
        attrs.append(("count_include_pad", int(bool(op.count_include_pad.value.data))))
    else:
        attrs.append(("dilations", _window(array_values(op.dilations), n, 1)))
    attrs += [
        ("kernel_shape", kernel),
        ("pads", _window(array_values(op.pads), 2 * n, 0)),
        ("strides", _window(array_values(op.strides), n, 1)),
    ]
    return tuple(attrs)


def _global_pool_attrs(op: nf.AdaptiveAvgPoolOp) -> Attrs:
    if any(s != 1 for s in array_values(op.output_size) or ()):
        raise ExportError(
            f"nanoengine export: nf.adaptive_avg_pool to {list(array_values(op.output_size) or ())} "
            "has no NanoEngine op (only output size 1, GlobalAveragePool)"
        )
    return ()


def _clamp_attrs(op: nf.ClampOp) -> Attrs:
    attrs: list[tuple[str, AttrValue]] = []
    if op.max is not None:
        attrs.append(("max", _float(op.max.value.data)))
    if op.min is not None:
        attrs.append(("min", _float(op.min.value.data)))
    return tuple(attrs)


def _flatten_attrs(op: nf.ReshapeOp) -> Attrs:
    src, dst = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
    for axis in range(len(src) + 1):
        if tuple(flatten_dims(src, axis)) == tuple(dst):
            return (("axis", axis),)
    raise ExportError(f"nanoengine export: nf.reshape {shape_str(src)} -> {shape_str(dst)} is no Flatten")


def _none(op: Operation) -> Attrs:
    return ()


WRITERS: dict[type[Operation], tuple[str, Callable[[Operation], Attrs]]] = {
    FakeQuantOp: ("Q", _fake_quant_attrs),  # type: ignore[dict-item]
    nf.ConvOp: ("Conv", _conv_attrs),  # type: ignore[dict-item]
    nf.LinearOp: ("Gemm", lambda op: (("alpha", Float("1.0")), ("beta", Float("1.0")), ("transB", 1))),
    nf.AddOp: ("Add", _none),
    nf.SubOp: ("Sub", _none),
    nf.MulOp: ("Mul", _none),
    nf.DivOp: ("Div", _none),
    nf.ReluOp: ("Relu", _none),
    nf.SigmoidOp: ("Sigmoid", _none),
    nf.TanhOp: ("Tanh", _none),
    nf.LeakyReluOp: ("LeakyRelu", lambda op: (("alpha", _float(op.alpha.value.data)),)),  # type: ignore[attr-defined]
    nf.ClampOp: ("Clip", _clamp_attrs),  # type: ignore[dict-item]
    nf.MaxPoolOp: ("MaxPool", _pool_attrs),  # type: ignore[dict-item]
    nf.AvgPoolOp: ("AveragePool", _pool_attrs),  # type: ignore[dict-item]
    nf.AdaptiveAvgPoolOp: ("GlobalAveragePool", _global_pool_attrs),  # type: ignore[dict-item]
    nf.ConcatOp: ("Concat", lambda op: (("axis", op.axis.value.data),)),  # type: ignore[attr-defined]
    nf.ReshapeOp: ("Reshape", _none),
    nf.BatchNormOp: ("BatchNormalization", lambda op: (("epsilon", _float(op.epsilon.value.data)),)),  # type: ignore[attr-defined]
    nf.TransposeOp: ("Transpose", lambda op: (("perm", array_values(op.perm) or ()),)),  # type: ignore[attr-defined]
    nf.MatmulOp: ("MatMul", _none),
    nf.PReluOp: ("PRelu", _none),
}
"""IR op class -> (`.ne` op type, the attribute list the exporter prints for it)."""

# Ops whose default op type can be replaced by a recorded `ne.op_type`.
_ALTERNATIVES: dict[tuple[type[Operation], str], Callable[[Operation], Attrs]] = {
    (nf.ReshapeOp, "Flatten"): _flatten_attrs,  # type: ignore[dict-item]
}


def _op_type(op: Operation) -> str:
    if isinstance(op, nf.CustomOp):
        return op.op_type.data
    recorded = op.attributes.get(NE_OP_TYPE)
    if isinstance(recorded, StringAttr) and (type(op), recorded.data) in _ALTERNATIVES:
        return recorded.data
    return WRITERS[type(op)][0]


def default_attrs(op: Operation, op_type: str | None = None) -> Attrs:
    """The attribute list the exporter prints for `op` as a node of type `op_type`."""
    op_type = op_type or _op_type(op)
    alternative = _ALTERNATIVES.get((type(op), op_type))
    if alternative is not None:
        return alternative(op)
    return WRITERS[type(op)][1](op)


def sanitize_name(name: str) -> str:
    """A `.ne` name for any string: `conv1.weight` -> `conv1_weight`, `0w` -> `_0w`."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    return "_" + name if name[0].isdigit() else name


# ---------------------------------------------------------------------------------------
# The exporter
# ---------------------------------------------------------------------------------------


def _entry_fields(entry: Attribute) -> tuple[str, str, tuple[int, ...], str] | None:
    """(name, layout, shape, dtype) of a recorded `{name, layout, shape[, dtype]}` entry."""
    if not isinstance(entry, DictionaryAttr):
        return None
    d = entry.data
    name, layout, shape = d.get("name"), d.get("layout"), d.get("shape")
    dtype = d.get("dtype", StringAttr("Any"))
    if not (
        isinstance(name, StringAttr)
        and isinstance(layout, StringAttr)
        and isinstance(shape, DenseArrayBase)
        and isinstance(dtype, StringAttr)
    ):
        return None
    return name.data, layout.data, tuple(int(v) for v in shape.get_values()), dtype.data


def _entries(op: Operation, key: str) -> list[tuple[str, str, tuple[int, ...], str]] | None:
    attr = op.attributes.get(key)
    if not isinstance(attr, ArrayAttr):
        return None
    fields = [_entry_fields(e) for e in attr.data]
    return None if any(f is None for f in fields) else fields  # type: ignore[return-value]


def _str_attr(op: Operation, key: str) -> str | None:
    attr = op.attributes.get(key)
    return attr.data if isinstance(attr, StringAttr) else None


def _decl_from_entry(name: str, entry: Attribute) -> Declaration | None:
    """The declaration of an `ne.decls` entry (see ne_import)."""
    if not isinstance(entry, DictionaryAttr) or not isinstance(entry.data.get("kind"), StringAttr):
        return None
    d = entry.data
    kind = d["kind"].data  # type: ignore[union-attr]
    hex_upper = d.get("hex_upper")
    upper = bool(hex_upper.value.data) if isinstance(hex_upper, IntegerAttr) else None
    if kind == "const" and isinstance(d.get("value"), DenseIntOrFPElementsAttr):
        return const_from_dense(name, d["value"], bool(upper))  # type: ignore[arg-type]
    if kind == "words":
        data, shape, layout, type_name = d.get("data"), d.get("shape"), d.get("layout"), d.get("type")
        if (
            isinstance(data, DenseIntOrFPElementsAttr)
            and isinstance(shape, DenseArrayBase)
            and isinstance(layout, StringAttr)
            and isinstance(type_name, StringAttr)
        ):
            dims = tuple(int(v) for v in shape.get_values())
            return WordTensor(name, type_name.data, layout.data, dims, data.data.data, True if upper is None else upper)
        return None
    fields = _entry_fields(DictionaryAttr({"name": StringAttr(name), **{k: v for k, v in d.items() if k != "kind"}}))
    if fields is None:
        return None
    _, layout, shape, dtype = fields
    if kind == "init":
        return InitTensor(name, dtype, layout, shape)
    if kind == "runtime":
        return RuntimeTensor(name, dtype, layout, shape)
    if kind == "mem":
        return MemTensor(name, dtype, layout, shape)
    return None


class _Exporter:
    def __init__(self, module: ModuleOp, plan: StreamPlan | None) -> None:
        self.module = module
        self.plan = plan
        self.default_plan = UnitStepPlan()
        self.func = _main_function(module)
        self.recorded_decls: dict[str, Declaration] = {}
        decls = module.attributes.get(NE_DECLS)
        if isinstance(decls, DictionaryAttr):
            for name, entry in decls.data.items():
                decl = _decl_from_entry(name, entry)
                if decl is not None:
                    self.recorded_decls[name] = decl
        self.reserved = self._recorded_names()
        self.taken: set[str] = set()
        self.claimed_for_consts: set[str] = set()  # names claimed for the constant declared next
        self.counters: dict[str, int] = {}
        self.names: dict[SSAValue, str] = {}
        self.consts: dict[str, ConstTensor | WordTensor] = {}  # every constant declared, by name
        self.named_consts: list[str] = []  # named nf.constants, in op order
        self.numbered_consts: list[str] = []  # Constant_n<k>_o0, in numbering order
        self.const_derived: set[SSAValue] = set()
        self.tensors: dict[str, Declaration] = {}  # init, runtime and mem tensors, in order
        self.nodes: list[InitNode | RuntimeNode] = []  # in program order
        # The type NanoEngine-PyTorch would declare for each value (its stream analysis ignores
        # padding; None: unknown): a recorded shape may be this one (see ne_import).
        self.reference: dict[SSAValue, Attribute | None] = {}

    # -- names ----------------------------------------------------------------------------
    def _recorded_names(self) -> set[str]:
        names: set[str] = set(self.recorded_decls)
        for op in self.func.walk():
            for key in (NE_NODE, NE_EXP_NAME):
                if (s := _str_attr(op, key)) is not None:
                    names.add(s)
            for key in (NE_OUT_S, NE_MEM_S):
                names.update(e[0] for e in _entries(op, key) or ())
            if isinstance(op, nf.ConstantOp) and op.sym_name is not None:
                names.add(sanitize_name(op.sym_name.data))
            const_in = op.attributes.get(NE_CONST_IN)
            if isinstance(const_in, DictionaryAttr):
                names.update(v.data for v in const_in.data.values() if isinstance(v, StringAttr))
        for attrs in self.func.arg_attrs.data if self.func.arg_attrs else ():
            fields = _entry_fields(attrs.data.get(NE_TENSOR, DictionaryAttr({})))
            if fields is not None:
                names.add(fields[0])
        for i in range(len(self.func.function_type.outputs.data)):
            recorded = self._recorded_identity(i)
            if recorded is not None:
                node, out, mems, _ = recorded
                names.update([node, *(e[0] for e in [out, *mems] if e is not None)])
        return names

    def _recorded_identity(
        self, index: int
    ) -> tuple[str, tuple[str, str, tuple[int, ...], str] | None, list[tuple[str, str, tuple[int, ...], str]], str] | None:
        """(node, out entry, mem entries, the node called before it) of the Identity node the
        imported file gave result `index` by (`ne.identity`, see ne_import)."""
        res_attrs = self.func.res_attrs.data if self.func.res_attrs else ()
        if index >= len(res_attrs):
            return None
        entry = res_attrs[index].data.get(NE_IDENTITY)
        if not isinstance(entry, DictionaryAttr):
            return None
        node, after, mems = entry.data.get("node"), entry.data.get("after"), entry.data.get("mem_s")
        if not isinstance(node, StringAttr):
            return None
        mem_fields = [_entry_fields(e) for e in mems.data] if isinstance(mems, ArrayAttr) else []
        return (
            node.data,
            _entry_fields(entry.data.get("out", DictionaryAttr({}))),
            [f for f in mem_fields if f is not None] if None not in mem_fields else [],
            after.data if isinstance(after, StringAttr) else "",
        )

    def claim(self, recorded: str | None, fallback: Callable[[], str]) -> str:
        """`recorded` if it is a valid name not used yet in this export, else `fallback()`."""
        if recorded is not None and recorded not in self.taken and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", recorded):
            self.taken.add(recorded)
            return recorded
        return fallback()

    def fresh(self, base: str) -> str:
        """`base`, or `base_1`, `base_2`, ... : the first not reserved and not taken."""
        name, i = base, 0
        while name in self.taken or name in self.reserved:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def numbered(self, op_type: str, suffix: str = "") -> str:
        """`<op_type>_n<k><suffix>` with the next free k for that op type."""
        while True:
            k = self.counters.get(op_type, 0) + 1
            self.counters[op_type] = k
            name = f"{op_type}_n{k}{suffix}"
            if name not in self.taken and name not in self.reserved:
                self.taken.add(name)
                return name

    # -- constants ------------------------------------------------------------------------
    def const_name(self) -> str:
        """The next free `Constant_n<k>_o0`, reserved for a constant."""
        name = self.numbered("Constant", "_o0")
        self.claimed_for_consts.add(name)
        return name

    def declare_const(self, const: ConstTensor | WordTensor, numbered: bool) -> str:
        """Declare a constant under its name (claimed for it, or free); returns the name used.

        An equal constant of the same name is shared; a different one, or a name a tensor or
        node already has, makes this one `Constant_n<k>_o0`.
        """
        existing = self.consts.get(const.name)
        if existing is not None:
            if existing == const:
                return const.name
            const, numbered = _renamed(const, self.const_name()), True
        elif const.name in self.taken and const.name not in self.claimed_for_consts:
            const, numbered = _renamed(const, self.const_name()), True
        self.taken.add(const.name)
        self.consts[const.name] = const
        (self.numbered_consts if numbered else self.named_consts).append(const.name)
        return const.name

    def constant_op(self, op: nf.ConstantOp) -> None:
        """Name a float constant now if it has a name; unnamed ones are named at first use."""
        self.const_derived.add(op.result)
        if op.sym_name is None:
            return
        hex_upper = NE_HEX_UPPER in op.attributes
        base = sanitize_name(op.sym_name.data)
        name = self.claim(base, lambda: self.fresh(base))
        self.claimed_for_consts.add(name)
        self.names[op.result] = name
        self.declare_const(self._float_const(op, name, hex_upper), numbered=False)

    def _float_const(self, op: nf.ConstantOp, name: str, hex_upper: bool) -> ConstTensor:
        value = op.value
        assert isinstance(value, DenseIntOrFPElementsAttr)
        try:
            return const_from_dense(name, value, hex_upper)
        except ValueError as e:
            raise ExportError(f"nanoengine export: {e}") from None

    def name_constant(self, value: SSAValue) -> None:
        """Name an unnamed float constant `Constant_n<k>_o0` (at its first use)."""
        owner = value.owner
        if isinstance(owner, nf.ConstantOp) and value not in self.names:
            name = self.const_name()
            self.names[value] = name
            self.declare_const(self._float_const(owner, name, NE_HEX_UPPER in owner.attributes), numbered=True)

    def recorded_const(self, name: str) -> ConstTensor | WordTensor | None:
        decl = self.recorded_decls.get(name)
        return decl if isinstance(decl, (ConstTensor, WordTensor)) else None

    # -- nodes ----------------------------------------------------------------------------
    def node_inputs(self, op: Operation) -> list[NodeInput]:
        """The node's inputs in in_s order: operands, with constants at their positions."""
        consts: dict[int, ConstTensor | WordTensor] = {}
        if isinstance(op, FakeQuantOp):
            exp = op.exp
            assert isinstance(exp, DenseIntOrFPElementsAttr)
            recorded = _str_attr(op, NE_EXP_NAME)
            try:
                const = const_from_dense(recorded or "exp", exp, NE_EXP_HEX_UPPER in op.attributes)
            except ValueError as e:
                raise ExportError(f"nanoengine export: nq.fake_quant exponent: {e}") from None
            if recorded is None or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", recorded):
                const = _renamed(const, self.const_name())
                self.declare_const(const, numbered=True)
            else:
                const = _renamed(const, self.declare_const(const, numbered=False))
            consts[1] = const
        const_in = op.attributes.get(NE_CONST_IN)
        if isinstance(const_in, DictionaryAttr):
            for key, ref in const_in.data.items():
                recorded = self.recorded_const(ref.data) if isinstance(ref, StringAttr) else None
                if key.isdigit() and recorded is not None:
                    consts[int(key)] = recorded
        if isinstance(op, nf.ReshapeOp) and _op_type(op) == "Reshape" and 1 not in consts:
            consts[1] = self._shape_const(op)
        inputs: list[NodeInput] = []
        operands = iter(op.operands)
        for i in range(len(op.operands) + len(consts)):
            if i in consts:
                inputs.append(consts[i])
            else:
                value = next(operands, None)
                if value is None:  # positions recorded for more inputs than there are
                    return self._plain_inputs(op, consts)
                inputs.append(value)
        return inputs

    def _plain_inputs(self, op: Operation, consts: dict[int, ConstTensor | WordTensor]) -> list[NodeInput]:
        return [*op.operands, *(consts[k] for k in sorted(consts))]

    def _shape_const(self, op: nf.ReshapeOp) -> ConstTensor:
        """Reshape's int64_t shape input for a reshape the IR holds only as its result type."""
        dims = [-1 if d == DYNAMIC_INDEX else d for d in nf.tensor_shape(op.result)]
        data = np.asarray(dims, dtype="<i8").tobytes()
        const = ConstTensor(self.const_name(), "int64_t", (len(dims),), data)
        self.declare_const(const, numbered=True)
        return const

    def node_attrs(self, op: Operation, op_type: str, inputs: list[NodeInput]) -> Attrs:
        if isinstance(op, nf.CustomOp):
            try:
                return decode_attrs(op.attrs)
            except ValueError as e:
                raise ExportError(f"nanoengine export: nf.custom '{op_type}': {e}") from None
        try:
            regenerated, failure = default_attrs(op, op_type), None
        except ExportError as e:  # e.g. a Conv whose weight shape is not static
            regenerated, failure = (), e
        stored = op.attributes.get(NE_ATTR)
        if isinstance(stored, DictionaryAttr):
            try:
                attrs = decode_attrs(stored)
            except ValueError:
                attrs = None
            if attrs is not None and self._means_the_same(op, op_type, attrs, inputs):
                return attrs
        if failure is not None:
            raise failure
        return regenerated

    def _means_the_same(self, op: Operation, op_type: str, attrs: Attrs, inputs: list[NodeInput]) -> bool:
        """Whether importing `attrs` with these inputs builds an op equal to this one: same
        class and result types, and the same canonical attributes (defaults filled in)."""
        spec = NodeSpec(_str_attr(op, NE_NODE) or op.name, op_type, attrs, tuple(inputs), len(op.results))
        try:
            rebuilt = convert_known(spec)
        except (Unsupported, NodeProblem, KeyError):
            return False
        try:
            if type(rebuilt) is not type(op) or [r.type for r in rebuilt.results] != [r.type for r in op.results]:
                return False
            try:
                return default_attrs(rebuilt, op_type) == default_attrs(op, op_type)
            except ExportError:  # no canonical spelling (e.g. a dynamic kernel): compare exactly
                return rebuilt.properties == op.properties
        finally:
            rebuilt.erase(safe_erase=False)

    def is_init(self, op: Operation) -> bool:
        if _str_attr(op, NE_NODE) is not None:
            return NE_INIT in op.attributes
        return all(v in self.const_derived for v in op.operands)

    def node(self, op: Operation, returned: dict[SSAValue, int]) -> None:
        if type(op) not in WRITERS and not isinstance(op, nf.CustomOp):
            raise ExportError(
                f"nanoengine export: '{op.name}' has no NanoEngine op type "
                "(the exporter writes nf and nq ops, or a program of nh ops)"
            )
        for value in op.operands:
            self.name_constant(value)
        op_type = _op_type(op)
        init = self.is_init(op)
        inputs = self.node_inputs(op)
        name = self.claim(_str_attr(op, NE_NODE), lambda: self.numbered(sanitize_name(op_type)))
        attrs = self.node_attrs(op, op_type, inputs)
        self.reference.update(zip(op.results, self.reference_types(op, op_type, attrs, inputs)))
        out_names = self.outputs(op, name, init, returned)
        if init:
            self.const_derived.update(op.results)
        in_s = tuple(self.input_name(v, op) for v in inputs)
        if init:
            decl: InitNode | RuntimeNode = InitNode(name, op_type, attrs, in_s, out_names)
        else:
            mem_s = self.caches(op, name, inputs)
            decl = RuntimeNode(name, op_type, attrs, in_s, mem_s, out_names)
        self.nodes.append(decl)

    def reference_types(
        self, op: Operation, op_type: str, attrs: Attrs, inputs: list[NodeInput]
    ) -> list[Attribute | None]:
        """The result types NanoEngine-PyTorch declares for `op` (ne_import.reference_result_types)."""
        types = [r.type for r in op.results]
        if isinstance(op, nf.CustomOp):
            return list(types)
        spec = NodeSpec(_str_attr(op, NE_NODE) or op.name, op_type, attrs, tuple(inputs), len(op.results))
        reference = [self.reference.get(v, v.type) for v in inputs if isinstance(v, SSAValue)]
        found = reference_result_types(spec, types, reference)
        return list(found) if found is not None else [None] * len(types)

    def input_name(self, value: NodeInput, user: Operation) -> str:
        if isinstance(value, (ConstTensor, WordTensor)):
            return self.declare_const(value, numbered=False)
        name = self.names.get(value)
        if name is None:
            raise ExportError(f"nanoengine export: {user.name} reads a value defined outside @main's body")
        return name

    def outputs(self, op: Operation, node: str, init: bool, returned: dict[SSAValue, int]) -> tuple[str, ...]:
        recorded = _entries(op, NE_OUT_S)
        if recorded is not None and len(recorded) != len(op.results):
            recorded = None
        names: list[str] = []
        for i, result in enumerate(op.results):
            entry = recorded[i] if recorded else None

            def fallback(i: int = i, result: SSAValue = result) -> str:
                if not init and result in returned:
                    k = returned[result]
                    return self.fresh("output" if k == 0 else f"output_{k}")
                return self.fresh(f"{node}_o{i}")

            name = self.claim(entry[0] if entry else None, fallback)
            self.names[result] = name
            self.tensors[name] = self.tensor_decl(result, name, entry, init)
            names.append(name)
        return tuple(names)

    def tensor_decl(
        self, value: SSAValue, name: str, entry: tuple[str, str, tuple[int, ...], str] | None, init: bool
    ) -> InitTensor | RuntimeTensor:
        t = value.type
        if not isinstance(t, TensorType):
            raise ExportError(f"nanoengine export: value '{name}' of type {t} is not a tensor")
        dtype = entry[3] if entry else "Any"
        if init:
            if DYNAMIC_INDEX in t.get_shape():
                raise ExportError(f"nanoengine export: init tensor '{name}' has the dynamic shape {shape_str(t.get_shape())}")
            shape = tuple(t.get_shape())
            if entry and entry[2] == shape:
                return InitTensor(name, dtype, entry[1], shape)
            return InitTensor(name, dtype, init_layout(len(shape)), shape)
        planned = self.plan.tensor_shape(value) if self.plan is not None else None
        if planned is not None:
            shape = tuple(int(d) for d in planned)
            layout = entry[1] if entry and len(entry[1]) == len(shape) else runtime_layout(len(shape))
            return RuntimeTensor(name, dtype, layout, shape)
        if entry and self._recorded_shape_fits(value, entry):
            return RuntimeTensor(name, dtype, entry[1], entry[2])
        shape = tuple(int(d) for d in self.default_plan.tensor_shape(value) or ())
        return RuntimeTensor(name, dtype, runtime_layout(len(shape)), shape)

    def _recorded_shape_fits(self, value: SSAValue, entry: tuple[str, str, tuple[int, ...], str]) -> bool:
        """Whether a recorded runtime shape still describes `value`: its type's, or the one
        NanoEngine-PyTorch declares for it (ignoring padding; see ne_import)."""
        declared = streamed_type(entry[2], entry[1]).get_shape()
        reference = self.reference.get(value, value.type)
        return any(
            isinstance(t, TensorType) and shapes_compatible(declared, t.get_shape()) for t in (value.type, reference)
        )

    def caches(self, op: Operation, node: str, inputs: list[NodeInput]) -> tuple[str, ...]:
        runtime_inputs: list[SSAValue] = []
        for v in inputs:
            if isinstance(v, SSAValue) and v not in self.const_derived and v not in runtime_inputs:
                runtime_inputs.append(v)
        recorded = _entries(op, NE_MEM_S)
        if recorded is not None and self.plan is None and self._recorded_mems_fit(recorded):
            names: list[str] = []
            for name, layout, shape, dtype in recorded:
                if name not in self.tensors:
                    self.tensors[name] = MemTensor(name, dtype, layout, shape)
                names.append(name)
            return tuple(names)
        names = []
        for i, v in enumerate(runtime_inputs):
            entry = recorded[i] if recorded and len(recorded) == len(runtime_inputs) else None
            name = self.claim(entry[0] if entry else None, lambda v=v: self.fresh(f"{node}_{self.names[v]}"))
            cached = self.tensors.get(self.names[v])
            assert isinstance(cached, RuntimeTensor)
            shape = tuple(cached.shape)
            if self.plan is not None:
                planned = self.plan.cache_shape(op, v, shape)
                shape = tuple(int(d) for d in planned) if planned is not None else shape
            self.tensors[name] = MemTensor(name, "Any", cached.layout if len(cached.layout) == len(shape) else runtime_layout(len(shape)), shape)
            names.append(name)
        return tuple(names)

    def _recorded_mems_fit(self, recorded: list[tuple[str, str, tuple[int, ...], str]]) -> bool:
        for name, layout, shape, dtype in recorded:
            existing = self.tensors.get(name)
            if existing is not None and existing != MemTensor(name, dtype, layout, shape):
                return False
            if existing is None and name in self.taken:
                return False
        self.taken.update(name for name, *_ in recorded)
        return True

    # -- results through Identity nodes ---------------------------------------------------
    def _results(self) -> tuple[list[SSAValue], dict[SSAValue, int]]:
        """The returned values, and those that are their own node's output tensor (by index).

        Import takes the unread runtime tensors for the results, so a returned value that
        another op also reads, that is returned a second time or that is an input gets a
        tensor of its own through an `Identity` node; so does a result the imported file
        gave by an Identity node."""
        block = self.func.body.block
        values: list[SSAValue] = []
        for op in block.ops:
            if isinstance(op, ReturnOp):
                values = list(op.arguments)
        direct: dict[SSAValue, int] = {}
        for i, v in enumerate(values):
            only_returned = v.uses.get_length() == 1  # (an Identity reading it would make it read)
            if only_returned and v not in block.args and self._recorded_identity(i) is None:
                direct[v] = i
        return values, direct

    def identity(self, value: SSAValue, index: int) -> str:
        """An Identity node giving result `index` a tensor of its own; returns its name."""
        node_name, out_entry, mem_entries, after = self._recorded_identity(index) or (None, None, [], "")
        source = self.names[value]
        name = self.claim(node_name, lambda: self.numbered("Identity"))
        out = self.claim(
            out_entry[0] if out_entry else None, lambda: self.fresh("output" if index == 0 else f"output_{index}")
        )
        self.tensors[out] = self.tensor_decl(value, out, out_entry, init=False)
        if mem_entries and len(mem_entries) == 1 and self.plan is None and self._recorded_mems_fit(mem_entries):
            mem_name, layout, shape, dtype = mem_entries[0]
            self.tensors.setdefault(mem_name, MemTensor(mem_name, dtype, layout, shape))
        else:
            cached = self.tensors[source]
            assert isinstance(cached, RuntimeTensor)
            mem_name = self.claim(mem_entries[0][0] if mem_entries else None, lambda: self.fresh(f"{name}_{source}"))
            self.tensors[mem_name] = MemTensor(mem_name, "Any", cached.layout, cached.shape)
        node = RuntimeNode(name, "Identity", (), (source,), (mem_name,), (out,))
        # Called where the file called it (after node `after`), if that is after the source.
        position = len(self.nodes)
        names = [n.name for n in self.nodes]
        if after in names:
            producer = next((i for i, n in enumerate(self.nodes) if source in n.out_s), -1)
            if names.index(after) >= producer:
                position = names.index(after) + 1
        self.nodes.insert(position, node)
        return out

    # -- the program ----------------------------------------------------------------------
    def run(self) -> Program:
        block = self.func.body.block
        results, returned = self._results()
        arg_attrs = self.func.arg_attrs.data if self.func.arg_attrs else ()
        for i, arg in enumerate(block.args):
            entry = _entry_fields(arg_attrs[i].data.get(NE_TENSOR, DictionaryAttr({}))) if i < len(arg_attrs) else None
            name = self.claim(entry[0] if entry else None, lambda i=i: self.fresh("input" if i == 0 else f"input_{i}"))
            self.names[arg] = name
            self.tensors[name] = self.tensor_decl(arg, name, entry, init=False)
        for op in block.ops:
            if isinstance(op, ReturnOp):
                continue
            if isinstance(op, nf.ConstantOp):
                self.constant_op(op)
            else:
                self.node(op, returned)
        for op in block.ops:  # unused, unnamed constants still get declared
            if isinstance(op, nf.ConstantOp) and op.result not in self.names:
                self.name_constant(op.result)
        outputs: list[str] = []
        for i, v in enumerate(results):
            if v not in self.names or v in self.const_derived:
                raise ExportError(
                    f"nanoengine export: @main returns a constant (or a value computed from constants only) as "
                    f"result {i}; NanoEngine outputs are computed by runtime nodes"
                )
            outputs.append(self.names[v] if returned.get(v) == i else self.identity(v, i))
        self._declare_results_in_return_order(outputs)
        items = self._items()
        recorded = self.module.attributes.get(NE_ITEMS)  # its first entry may be the BOM
        bom = isinstance(recorded, ArrayAttr) and recorded.data[:1] == (StringAttr(BOM_ENTRY),)
        return Program(tuple(items), bom=bom)

    def _declare_results_in_return_order(self, wanted: list[str]) -> None:
        """Results are the unread runtime tensors in declaration order (that is how import
        finds them), so their declarations take the return order among themselves."""
        if [n for n in self.tensors if n in wanted] == wanted:
            return
        order = iter(wanted)
        self.tensors = {
            (name := next(order) if key in wanted else key): self.tensors[name]
            for key in list(self.tensors)
        }

    def _declarations(self) -> dict[str, Declaration]:
        decls: dict[str, Declaration] = {}
        for name in self.named_consts + self.numbered_consts:
            decls[name] = self.consts[name]
        for name, decl in self.tensors.items():
            decls.setdefault(name, decl)
        for node in self.nodes:
            decls.setdefault(node.name, node)
        return decls

    def _functions(self) -> dict[str, Function]:
        init = tuple(n.name for n in self.nodes if isinstance(n, InitNode))
        runtime = tuple(n.name for n in self.nodes if isinstance(n, RuntimeNode))
        return {"init": Function("init", init), "runtime": Function("runtime", runtime)}

    def _items(self) -> list[Item]:
        decls = self._declarations()
        functions = self._functions()
        recorded = self.module.attributes.get(NE_ITEMS)
        if not isinstance(recorded, ArrayAttr):
            return _default_sections(decls, functions)
        items: list[Item] = []
        emitted: set[str] = set()
        for entry in recorded.data:
            if not isinstance(entry, StringAttr):
                continue
            text = entry.data
            comment = comment_from_entry(text)  # `//text`, or `<blank lines>//text`
            if comment is not None:
                items.append(comment)
            elif text in ("func init", "func runtime"):
                name = text[5:]
                if name not in emitted:
                    items.append(functions[name])
                    emitted.add(name)
            elif text in decls and text not in emitted:
                items.append(decls[text])
                emitted.add(text)
            elif text in self.recorded_decls and text not in emitted and text not in self.taken:
                items.append(self.recorded_decls[text])  # an unused declaration kept by the importer
                emitted.add(text)
        for name, decl in decls.items():
            if name not in emitted:
                _insert_by_kind(items, decl)
        for name, func in functions.items():
            if name not in emitted:
                items.append(func)
        return items


def _renamed(const: ConstTensor | WordTensor, name: str) -> ConstTensor | WordTensor:
    if isinstance(const, ConstTensor):
        return ConstTensor(name, const.dtype, const.shape, const.data, const.hex_upper)
    return WordTensor(name, const.type_name, const.layout, const.shape, const.data, const.hex_upper)


_SECTIONS: tuple[tuple[str, tuple[type, ...]], ...] = (
    (" init const tensor", (ConstTensor, WordTensor)),
    (" init static tensor", (InitTensor,)),
    (" runtime tensor", (RuntimeTensor,)),
    (" runtime memory", (MemTensor,)),
    (" init node", (InitNode,)),
    (" runtime_node", (RuntimeNode,)),
)


def _default_sections(decls: dict[str, Declaration], functions: dict[str, Function]) -> list[Item]:
    """The reference exporter's layout: one commented section per kind, then the calls."""
    items: list[Item] = []
    for title, kinds in _SECTIONS:
        items.append(Comment(title))
        items.extend(d for d in decls.values() if isinstance(d, kinds))
    items += [Comment(" call init node"), functions["init"], Comment(" call runtime node"), functions["runtime"]]
    return items


def _insert_by_kind(items: list[Item], decl: Declaration) -> None:
    """Put a declaration the recorded order does not know after the last one of its kind."""
    kinds = next((k for _, k in _SECTIONS if isinstance(decl, k)), (type(decl),))
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], kinds):
            items.insert(i + 1, decl)
            return
    first_func = next((i for i, item in enumerate(items) if isinstance(item, Function)), len(items))
    items.insert(first_func, decl)


def _main_function(module: ModuleOp) -> FuncOp:
    funcs = [op for op in module.body.block.ops if isinstance(op, FuncOp)]
    if len(funcs) != 1:
        funcs = [f for f in funcs if f.sym_name.data == "main"]
    if len(funcs) != 1:
        raise ExportError("nanoengine export: the module needs one function (or one @main)")
    func = funcs[0]
    if len(func.body.blocks) != 1:
        raise ExportError(f"nanoengine export: @{func.sym_name.data} must have exactly one block")
    for op in func.body.block.ops:
        if op.regions and not isinstance(op, ReturnOp):
            raise ExportError(f"nanoengine export: '{op.name}' has regions; NanoEngine programs are flat")
    return func


def export_program(module: ModuleOp, plan: StreamPlan | None = None) -> Program:
    """The `.ne` syntax tree of an nf/nq module (see the module docstring).

    `plan` gives the declared shapes of runtime tensors and caches (a stream-plan analysis);
    without one, recorded shapes are kept and others are declared by `UnitStepPlan`.
    nh programs are written by `ne_export_hw.export_hw_program`.
    """
    from nanoir.grammar.ne_hw import is_hw_function

    func = _main_function(module)
    if is_hw_function(func):
        from nanoir.grammar.ne_export_hw import (
            export_hw_program,  # it builds on this module
        )

        return export_hw_program(func, plan)
    return _Exporter(module, plan).run()


def export_nanoengine(module: ModuleOp, plan: StreamPlan | None = None) -> str:
    """The `.ne` text of an nf/nq or nh module; `ExportError` for IR NanoEngine cannot express."""
    program = export_program(module, plan)
    try:
        return print_nanoengine(program)
    except ValueError as e:
        raise ExportError(f"nanoengine export: {e}") from None

