"""Import a checked NanoEngine program (`.ne`) at the quantized (nq) level, losslessly.

`importer` (the front door) hands a program here when `schema.is_hw_program` says it is
not at the hw level. The result is one `builtin.module` holding one `func.func @main`:

- function inputs are the runtime tensors that nodes read but no node computes (in
  declaration order); results are the runtime tensors computed but never read (`output`);
- float constants become `nf.constant "NAME" dense<...>` built from the exact bytes;
- nodes become ops in call order: first `func init`'s nodes, then `func runtime`'s. Every
  node must be called exactly once, and a node may only read tensors computed by nodes
  called before it (that is the dataflow order the IR needs).

Op types map to nf/nq ops by the rows of `nq.NQ_OPS`; an op type with no row becomes
`nf.custom` (op_type + all attributes) with a warning. A known op type used in a way the nf
op cannot express (Gemm with transB=0, Clip with min/max inputs, an attribute nanoir does
not know, ...) is kept as `nf.custom` too, with a warning saying why. Contradictions (a Conv
whose weight disagrees with kernel_shape, a Q without an integer exponent constant, a wrong
number of inputs, shapes that do not fit) raise `NanoEngineSemanticError` located at the node.

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
`reference`). The IR keeps the true types, which verification,
running, lowering and streaming use; the declared numbers stay in `ne.out_s` and are written
back as they were. One `NanoEnginePaddingWarning` per file names every such tensor with its
declared and computed shape. Any other disagreement is an error.

An `Identity` node makes no op: its output is a second name of its input's value. The
exporter writes one for a result that another node also reads, that is returned twice or
that is an input (results are found as unread tensors), as the hw level does.

Everything the printer needs to reproduce the file byte for byte rides along as discardable
attributes with an `ne.` prefix (the `NE_*` keys of `schema`); nothing in them changes
what the program computes:

    on builtin.module   ne.items     every item of the file, in order: declaration names,
                                      "//comment" lines, "func init" and "func runtime"
                                      (plus "<k>//comment" for a comment with k blank lines
                                      before it where the reference has others, and a first
                                      entry U+FEFF when the file starts with a byte order mark;
                                      see printer.comment_entry)
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
confused), and lists are `ArrayAttr` (`schema.encode_value`).

Output tensor names are also SSA name hints where xDSL allows (not starting with a digit; a
trailing `_<digits>` is dropped by xDSL, so the exact name lives in `ne.out_s`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import lru_cache

from nanoir.dialects import nf
from nanoir.grammar.ne.check import check_each_node_called_once
from nanoir.grammar.ne.errors import (
    ExportError,
    NanoEngineImportWarning,
    NanoEnginePaddingWarning,
    NanoEngineSemanticError,
)
from nanoir.grammar.ne.fast_ir import verify_op, verify_shell
from nanoir.grammar.ne.node import (
    NodeInput,
    NodeProblem,
    NodeSpec,
    Unsupported,
    kind_of_const,
)
from nanoir.grammar.ne.nq import BY_CLASS, BY_OP_TYPE, default_attrs
from nanoir.grammar.ne.printer import BOM_ENTRY, comment_entry
from nanoir.grammar.ne.reference import has_pads, reference_result_types
from nanoir.grammar.ne.schema import (
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
    const_entry,
    dense_from_const,
    encode_attrs,
    is_float_dtype,
    orphan_entry,
    set_hint,
    streamed_type,
    tensor_entry,
    words_entry,
)
from nanoir.grammar.ne.syntax_tree import (
    Comment,
    ConstTensor,
    Declaration,
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
from nanoir.runtime.numerics.shapes import ShapeError, shape_str, shapes_compatible
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
    f32,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

__all__ = ["import_nq_program"]


def _float_types_differ(values: Sequence[NodeInput]) -> bool:
    elts = {
        v.type.get_element_type()
        for v in values
        if isinstance(v, SSAValue) and isinstance(v.type, TensorType)
    }
    return len(elts) > 1


def _convert_known(spec: NodeSpec) -> Operation:
    """`nq.convert_known`, verifying with `verify_op` (a signature verified once)."""
    try:
        op = BY_OP_TYPE[spec.op_type].build(spec)
    except ShapeError as e:
        raise NodeProblem(f"{spec.op_type} node '{spec.name}': {e}") from None
    try:
        verify_op(op)
    except VerifyException as e:
        op.erase(safe_erase=False)
        raise NodeProblem(
            f"{spec.op_type} node '{spec.name}': {e.args[0] if e.args else e}"
        ) from None
    return op


# What `_Importer._build` remembers of an op: class, operand positions in the node's inputs,
# result types, properties and attributes.
_Template = tuple[
    type[Operation],
    tuple[int, ...],
    tuple[Attribute, ...],
    dict[str, Attribute],
    dict[str, Attribute],
]


def _build_key(spec: NodeSpec) -> object | None:
    """Everything a converter reads of a node (see `_Importer._build`); None if unhashable."""
    parts: list[object] = []
    for value in spec.inputs:
        if isinstance(value, SSAValue):
            parts.append(value.type)
        elif isinstance(value, ConstTensor):
            parts.append(("const", value.dtype, value.shape, value.data))
        elif isinstance(value, WordTensor):
            parts.append(("words", value.type_name, value.layout, value.shape, value.data))
        else:
            return None
    key = (spec.op_type, spec.attrs, spec.num_outputs, tuple(parts))
    try:
        hash(key)
    except TypeError:  # a tree built by hand with lists in it
        return None
    return key


# Types and the shape parts of entries are immutable: one object per distinct value (a
# node-heavy program repeats a few shapes), made by schema's functions.
@lru_cache(maxsize=4096)
def _cached_streamed_type(shape: tuple[int, ...], layout: str) -> TensorType[Attribute]:
    return streamed_type(shape, layout)


@lru_cache(maxsize=4096)
def _cached_init_type(shape: tuple[int, ...]) -> TensorType[Attribute]:
    return TensorType(f32, shape)


@lru_cache(maxsize=4096)
def _entry_without_name(layout: str, shape: tuple[int, ...], dtype: str) -> dict[str, Attribute]:
    entry = dict(tensor_entry("", layout, shape, dtype).data)
    del entry["name"]
    return entry


def _streamed_type(shape: Sequence[int], layout: str) -> TensorType[Attribute]:
    return _cached_streamed_type(tuple(shape), layout)


def _init_type(shape: Sequence[int]) -> TensorType[Attribute]:
    return _cached_init_type(tuple(shape))


def _tensor_entry(name: str, layout: str, shape: Sequence[int], dtype: str) -> DictionaryAttr:
    """`schema.tensor_entry`, sharing the attributes of equal layouts, shapes and dtypes."""
    return DictionaryAttr(
        {"name": StringAttr(name), **_entry_without_name(layout, tuple(shape), dtype)}
    )


def _items_attr(program: Program) -> ArrayAttr[StringAttr]:
    # A byte order mark and comments spaced unlike the reference are recorded too (printer).
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
        self.used_consts: set[str] = (
            set()
        )  # int/word constants that some node reads as a non-exponent
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
        self.built: dict[object, _Template] = {}  # see _build

    # -- errors ---------------------------------------------------------------------------
    def error(self, message: str, loc: Loc | None) -> NanoEngineSemanticError:
        line, column = (loc.line, loc.column) if loc is not None else (1, 1)
        return NanoEngineSemanticError(message, self.filename, line, column, self.source)

    def warn(
        self,
        message: str,
        loc: Loc | None,
        cls: type[NanoEngineImportWarning] = NanoEngineImportWarning,
        stacklevel: int = 4,
    ) -> None:
        line, column = (loc.line, loc.column) if loc is not None else (1, 1)
        warnings.warn(
            cls(f"{self.filename}:{line}:{column}: warning: {message}"), stacklevel=stacklevel
        )

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
        arg_types = [_streamed_type(d.shape, d.layout) for d in inputs]
        self.block = Block(arg_types=arg_types)
        for arg, decl in zip(self.block.args, inputs):
            self.values[decl.name] = arg
            set_hint(arg, decl.name)
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
                [
                    DictionaryAttr({NE_TENSOR: _tensor_entry(d.name, d.layout, d.shape, d.dtype)})
                    for d in inputs
                ]
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
        verify_shell(module)  # every op was verified as it was built
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
            mems.append(_tensor_entry(mem.name, mem.layout, mem.shape, mem.type_name))
        entry = {
            "node": StringAttr(node.name),
            "out": _tensor_entry(decl.name, decl.layout, decl.shape, decl.dtype),
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
            if has_pads(NodeSpec(node.name, node.op_type, node.attrs, (), len(node.out_s)))
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
        return [
            self.nodes[call]
            for name in ("init", "runtime")
            for call in self.program.function(name).calls
        ]  # type: ignore[union-attr]

    def _constants(self) -> None:
        self.constant_ops: list[Operation] = []
        for decl in self.program.declarations:
            if isinstance(decl, ConstTensor) and is_float_dtype(decl.dtype):
                op = nf.ConstantOp(dense_from_const(decl), decl.name)
                if decl.hex_upper:
                    op.attributes[NE_HEX_UPPER] = UnitAttr()
                op.verify()
                set_hint(op.results[0], decl.name)
                self.values[decl.name] = op.results[0]
                self.constant_ops.append(op)

    def _orphans(self, inputs: list[RuntimeTensor]) -> dict[str, Attribute]:
        """Declarations no op carries, for `ne.decls` (see the module docstring)."""
        carried_mems = {
            m for node in self.nodes.values() if isinstance(node, RuntimeNode) for m in node.mem_s
        }
        out: dict[str, Attribute] = {}
        for decl in self.program.declarations:
            if isinstance(decl, ConstTensor) and not is_float_dtype(decl.dtype):
                if decl.name in self.used_consts or decl.name not in self.exp_consts:
                    out[decl.name] = const_entry(decl)
            elif isinstance(decl, WordTensor):
                out[decl.name] = words_entry(decl)
            elif isinstance(decl, InitTensor) and decl.name not in self.produced:
                out[decl.name] = orphan_entry("init", decl)
            elif (
                isinstance(decl, RuntimeTensor)
                and decl.name not in self.produced
                and decl.name not in self.read
            ):
                out[decl.name] = orphan_entry("runtime", decl)
            elif isinstance(decl, MemTensor) and decl.name not in carried_mems:
                out[decl.name] = orphan_entry("mem", decl)
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
                raise self.error(
                    f"node '{node.name}' reads '{name}', which no init node computes", loc
                )
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
            reference = reference_result_types(
                spec, types, [self.reference.get(v, v.type) for v in values]
            )
        self._check_outputs(node, op, reference)
        for i, result in enumerate(op.results):
            self.reference[result] = reference[i] if reference is not None else None
        self._annotate(node, spec, op)
        self.block.add_op(op)
        for out, result in zip(node.out_s, op.results):
            self.values[out] = result
            set_hint(result, out)

    def _convert(self, node: InitNode | RuntimeNode, spec: NodeSpec) -> Operation:
        if node.op_type not in BY_OP_TYPE:
            self.warn(
                f"op type '{node.op_type}' of node '{node.name}' is not known to nanoir; it is kept as "
                "nf.custom (it cannot run or be lowered)",
                node.loc,
            )
            return self._custom(node, spec)
        try:
            if _float_types_differ(spec.inputs):
                raise Unsupported("its inputs mix float types")
            return self._build(spec)
        except Unsupported as why:
            self.warn(f"{node.op_type} node '{node.name}' is kept as nf.custom: {why}", node.loc)
            return self._custom(node, spec)
        except NodeProblem as problem:
            raise self.error(problem.message, problem.loc(node)) from None

    def _build(self, spec: NodeSpec) -> Operation:
        """`_convert_known(spec)`, remembered: a later node with the same op type, attributes,
        output count, input types and integer-constant inputs gets the same op on its own
        inputs, without running the converter and the verifier again.

        A converter reads only those (the node's name only goes into messages), so it would
        build the same op; failures are not remembered (they raise each time)."""
        key = _build_key(spec)
        template = self.built.get(key) if key is not None else None
        if template is not None:
            op_cls, positions, result_types, properties, attributes = template
            inputs = spec.inputs
            return op_cls.create(
                operands=[inputs[i] for i in positions],  # type: ignore[misc]  # SSA values
                result_types=result_types,
                properties=dict(properties),
                attributes=dict(attributes),
            )
        op = _convert_known(spec)
        if key is None or op.regions or op.successors:
            return op
        ssa = [id(v) for v in spec.inputs if isinstance(v, SSAValue)]
        if len(set(ssa)) < len(ssa):
            # An input read twice (`Concat(a, a)`): which position an operand came from is
            # ambiguous, and the template would give a later `Concat(a, b)` the operands (a, a).
            return op
        positions: list[int] = []
        for operand in op.operands:
            index = next((i for i, v in enumerate(spec.inputs) if v is operand), None)
            if index is None:  # not one of the node's inputs: do not reuse this op
                return op
            positions.append(index)
        self.built[key] = (
            type(op),
            tuple(positions),
            tuple(r.type for r in op.results),
            dict(op.properties),
            dict(op.attributes),
        )
        return op

    def _custom(self, node: InitNode | RuntimeNode, spec: NodeSpec) -> Operation:
        operands = [v for v in spec.inputs if isinstance(v, SSAValue)]
        result_types: list[Attribute] = []
        for out in node.out_s:
            decl = self.decls[out]
            assert isinstance(decl, (InitTensor, RuntimeTensor))  # check_program
            if isinstance(decl, InitTensor):
                result_types.append(_init_type(decl.shape))
            else:
                result_types.append(_streamed_type(decl.shape, decl.layout))
        op = nf.CustomOp.create(
            operands=operands,
            result_types=result_types,
            properties={"op_type": StringAttr(node.op_type), "attrs": encode_attrs(node.attrs)},
        )
        verify_op(op)
        return op

    def _check_outputs(
        self, node: InitNode | RuntimeNode, op: Operation, reference: Sequence[Attribute] | None
    ) -> None:
        """The declared outputs must agree with the inferred types on every static dim, or
        be NanoEngine-PyTorch's padding-ignoring shapes (`reference`, see PADDED_OP_TYPES)."""
        try:
            for i, result in enumerate(op.results[: len(node.out_s)]):
                self._check_output(
                    node, i, result.type, reference[i] if reference is not None else None
                )
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
            _init_type(decl.shape)
            if isinstance(decl, InitTensor)
            else _streamed_type(decl.shape, decl.layout)
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
            raise self.error(
                f"Identity node '{node.name}' takes no attributes",
                node.attr_locs[0] if node.attr_locs else node.loc,
            )
        if len(inputs) != 1 or len(node.out_s) != 1:
            raise self.error(
                f"Identity node '{node.name}' takes 1 input and has 1 output", node.loc
            )
        (value,) = inputs
        if not isinstance(value, SSAValue):
            loc = node.in_locs[0] if node.in_locs else node.loc
            raise self.error(
                f"Identity node '{node.name}' reads the {kind_of_const(value)} '{value.name}'; expected a float tensor",
                loc,
            )
        self._check_output(node, 0, value.type, self.reference.get(value, value.type))
        self.values[node.out_s[0]] = value
        if isinstance(node, RuntimeNode):
            self.identities[node.out_s[0]] = node

    def _annotate(self, node: InitNode | RuntimeNode, spec: NodeSpec, op: Operation) -> None:
        attrs = op.attributes
        attrs[NE_NODE] = StringAttr(node.name)
        if isinstance(node, InitNode):
            attrs[NE_INIT] = UnitAttr()
        row = None if isinstance(op, nf.CustomOp) else BY_OP_TYPE[node.op_type]
        if row is not None and BY_CLASS[type(op)] is not row:  # not the class's default (Flatten)
            attrs[NE_OP_TYPE] = StringAttr(node.op_type)
        if row is not None:
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
            if row is not None and row.const_input == "exp" and i == 1:
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
            outs.append(_tensor_entry(decl.name, decl.layout, decl.shape, decl.dtype))
        attrs[NE_OUT_S] = ArrayAttr(outs)
        if isinstance(node, RuntimeNode):
            mems: list[Attribute] = []
            for name in node.mem_s:
                mem = self.decls[name]
                assert isinstance(mem, MemTensor)
                mems.append(_tensor_entry(mem.name, mem.layout, mem.shape, mem.type_name))
            attrs[NE_MEM_S] = ArrayAttr(mems)


def import_nq_program(
    program: Program, filename: str = "<string>", source: str | None = None
) -> ModuleOp:
    """The nf/nq IR of a checked nq-level program; `NanoEngineSemanticError` on problems."""
    return _Importer(program, filename, source).run()
