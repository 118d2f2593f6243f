"""Import a hw-level NanoEngine program (`.ne`) as nh IR, in the form `hw` describes.

`importer` (the front door) hands a checked program here when `schema.is_hw_program`
says its node outputs are integer tensors. The result is one `builtin.module` with one
`func.func @main`:

- arguments: each program input (a runtime tensor nodes read but none computes, in
  declaration order) must be read by exactly one node, the `Q` that quantizes it; the
  argument is that Q's output (its declaration and `exp` give the nh type) and carries
  `nq.bits` (bit_len), `nq.exp` (the exponent constant's data) and `nq.rounding`;
- `Unpack` init nodes become `nh.constant`s, `Identity` nodes alias their input, every other
  node becomes the nh op of its op type (`hw.HW_OPS`) with the properties its attributes
  give and the result type its output declaration and `exp` give (a Split node: one result
  per output, `exp` listing their exps); derived attributes
  (Conv's `kernel_shape`, Requant's `bit_len`, Gemm's fixed ones) must match the op;
- results: the tensors computed by non-Q runtime nodes that no node reads, in declaration
  order.

Op order: init ops follow `func init`'s calls and runtime ops `func runtime`'s; the two are
interleaved as the node declarations interleave init and runtime nodes (that is how the
exporter records constants placed between runtime ops), except that an init op moves up to
just before the first runtime op that reads it. A file whose init nodes are all declared
first (the reference layout) puts every constant at the top.

No metadata is kept: names, sections and caches are the exporter's to choose, so
`export(import(text))` is `text` for files the exporter wrote, and `import(export(ir))` is
`ir` (up to SSA name hints). Every inconsistency (an unknown op type or attribute, a dtype
that is not an nh width, packed data of the wrong size, an op the nh verifier rejects) is a
`NanoEngineSemanticError` located at the node, attribute, input or declaration.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nf import array_values
from nanoir.dialects.nq import MAX_BITS, RoundingModeAttr
from nanoir.grammar.ne.check import check_each_node_called_once
from nanoir.grammar.ne.errors import NanoEngineSemanticError
from nanoir.grammar.ne.fast_ir import verify_op, verify_shell
from nanoir.grammar.ne.hw import (
    BY_OP_TYPE,
    UNNAMED_CONSTANT,
    codes_from_data,
    default_storage,
    dense_codes,
)
from nanoir.grammar.ne.node import NodeProblem
from nanoir.grammar.ne.schema import (
    EXP_MAX,
    EXP_MIN,
    UNSIGNED_HW_DTYPES,
    WIDTH_OF_DTYPE,
    decode_prop,
    dense_from_const,
    exp_from_value,
    name_from_value,
    same_value,
    set_hint,
)
from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    ConstTensor,
    Float,
    InitNode,
    InitTensor,
    Loc,
    Program,
    RuntimeNode,
    RuntimeTensor,
    numpy_dtype,
)
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

__all__ = ["import_hw_program"]

Node = InitNode | RuntimeNode


def _check_exponents(node: Node, exps: Sequence[int], attr: str | None) -> None:
    """Exponents (of the `exp` attribute, or with `attr=None` of a Q's exponent constant)
    must fit int8; NodeProblem located at the attribute or the constant otherwise."""
    bad = next((e for e in exps if not EXP_MIN <= e <= EXP_MAX), None)
    if bad is not None:
        what = (
            f"exp of node '{node.name}'"
            if attr
            else f"the exponent constant of Q node '{node.name}'"
        )
        raise NodeProblem(
            f"{what} must be from {EXP_MIN} to {EXP_MAX} (NanoEngine stores exponents as int8), found {bad}",
            attr=attr,
            input=None if attr else 1,
        )


def _spelled(value: AttrValue) -> str:
    """An attribute value as `.ne` spells it (for messages)."""
    if isinstance(value, tuple):
        return "[" + ", ".join(_spelled(v) for v in value) + "]"
    return str(value.text if isinstance(value, Float) else value)


class _HwImporter:
    def __init__(self, program: Program, filename: str, source: str | None) -> None:
        self.program = program
        self.filename = filename
        self.source = source
        self.decls = {d.name: d for d in program.declarations}
        self.nodes: dict[str, Node] = {
            d.name: d for d in program.declarations if isinstance(d, (InitNode, RuntimeNode))
        }
        self.producer: dict[str, Node] = {o: n for n in self.nodes.values() for o in n.out_s}
        self.values: dict[str, SSAValue] = {}
        self.block = Block()
        self.types: dict[tuple[object, ...], TensorType] = {}
        self.props: dict[tuple[object, AttrValue], Attribute] = {}

    # -- errors ---------------------------------------------------------------------------
    def error(self, message: str, loc: Loc | None) -> NanoEngineSemanticError:
        line, column = (loc.line, loc.column) if loc is not None else (1, 1)
        return NanoEngineSemanticError(message, self.filename, line, column, self.source)

    def node_error(self, node: Node, problem: NodeProblem) -> NanoEngineSemanticError:
        return self.error(problem.message, problem.loc(node))

    # -- the whole program ----------------------------------------------------------------
    def run(self) -> ModuleOp:
        self._check_dtypes()
        order = self._op_order()
        read = {name for n in self.nodes.values() for name in n.in_s}
        inputs = [
            d
            for d in self.program.declarations
            if isinstance(d, RuntimeTensor) and d.name in read and d.name not in self.producer
        ]
        quantizers = self._quantizers([d for d in inputs if d.dtype != "int64_t"])
        arg_attrs: list[Attribute] = []
        for decl in inputs:
            if decl.dtype == "int64_t":  # token ids: read as they are by Embedding nodes
                arg = self._index_argument(decl)
                arg_attrs.append(DictionaryAttr({}))
                continue
            q = quantizers[decl.name]
            try:
                arg_type, attrs = self._argument(q, decl)
            except NodeProblem as problem:
                raise self.node_error(q, problem) from None
            arg = self.block.insert_arg(arg_type, len(self.block.args))
            self.values[q.out_s[0]] = arg
            set_hint(arg, q.out_s[0])
            arg_attrs.append(attrs)
        for node in order:
            if node.op_type != "Q":
                self._node(node)
        outputs = [
            d
            for d in self.program.declarations
            if isinstance(d, RuntimeTensor)
            and d.name in self.producer
            and d.name not in read
            and self.producer[d.name].op_type != "Q"
        ]
        results = [self.values[d.name] for d in outputs]
        self.block.add_op(ReturnOp(*results))
        ftype = FunctionType.from_lists(
            [a.type for a in self.block.args], [r.type for r in results]
        )
        func = FuncOp("main", ftype, Region(self.block), arg_attrs=ArrayAttr(arg_attrs))
        module = ModuleOp([func])
        verify_shell(module)  # every op was verified as it was built
        return module

    def _check_dtypes(self) -> None:
        """Every node output of a hw program is an integer tensor of an nh width."""
        example = next(
            d
            for d in self.program.declarations
            if isinstance(d, (InitTensor, RuntimeTensor))
            and d.name in self.producer
            and d.dtype in WIDTH_OF_DTYPE
        )
        for decl in self.program.declarations:
            if (
                isinstance(decl, (InitTensor, RuntimeTensor))
                and decl.name in self.producer
                and decl.dtype not in WIDTH_OF_DTYPE
            ):
                raise self.error(
                    f"'{decl.name}' is declared Tensor<{decl.dtype}>, but this is a hw-level program (e.g. "
                    f"'{example.name}' is Tensor<{example.dtype}>): node outputs must be one of "
                    + ", ".join(WIDTH_OF_DTYPE),
                    decl.loc,
                )

    def _op_order(self) -> list[Node]:
        """Nodes in the order their ops are built (see the module docstring)."""
        check_each_node_called_once(self.program, self.nodes, self.error)
        calls: dict[str, deque[str]] = {
            name: deque(self.program.function(name).calls)  # type: ignore[union-attr]
            for name in ("init", "runtime")
        }
        order: list[Node] = []
        done: set[str] = set()

        def next_init() -> None:
            name = calls["init"].popleft()
            order.append(self.nodes[name])
            done.add(name)

        for decl in self.nodes.values():
            if isinstance(decl, InitNode):
                if calls["init"]:
                    next_init()
                continue
            node = self.nodes[calls["runtime"].popleft()]
            for tensor in node.in_s:
                producer = self.producer.get(tensor)
                while (
                    isinstance(producer, InitNode) and producer.name not in done and calls["init"]
                ):
                    next_init()
            order.append(node)
        while calls["init"]:
            next_init()
        return order

    def _quantizers(self, inputs: list[RuntimeTensor]) -> dict[str, RuntimeNode]:
        """The Q node of each program input; every Q must quantize one."""
        names = {d.name for d in inputs}
        found: dict[str, RuntimeNode] = {}
        for node in self.nodes.values():
            for i, tensor in enumerate(node.in_s):
                if tensor not in names:
                    continue
                loc = node.in_locs[i] if i < len(node.in_locs) else node.loc
                if node.op_type != "Q" or i != 0 or not isinstance(node, RuntimeNode):
                    raise self.error(
                        f"node '{node.name}' reads the program input '{tensor}'; at the hw level only the "
                        "runtime Q node that quantizes an input reads it",
                        loc,
                    )
                if tensor in found:
                    raise self.error(
                        f"program input '{tensor}' is quantized by '{found[tensor].name}' and '{node.name}'; "
                        "one Q node per input",
                        loc,
                    )
                found[tensor] = node
        for node in self.nodes.values():
            if node.op_type == "Q" and (not node.in_s or node.in_s[0] not in names):
                raise self.error(
                    f"Q node '{node.name}' quantizes a computed tensor; at the hw level Q quantizes program "
                    "inputs (requantize computed codes with Requant)",
                    node.loc,
                )
        return found

    def _index_argument(self, decl: RuntimeTensor) -> BlockArgument:
        """A ``Tensor<int64_t>`` program input: indices read only by Embedding nodes (``i32``
        at exponent 0 in the IR, whose codes reach 32 bits)."""
        for node in self.nodes.values():
            for i, tensor in enumerate(node.in_s):
                if tensor == decl.name and (node.op_type != "Embedding" or i != 0):
                    loc = node.in_locs[i] if i < len(node.in_locs) else node.loc
                    raise self.error(
                        f"node '{node.name}' reads the Tensor<int64_t> program input "
                        f"'{tensor}'; integer inputs are indices, read only as an Embedding's "
                        "first input",
                        loc,
                    )
        shape = tuple(DYNAMIC_INDEX if d < 0 else d for d in decl.shape)
        try:
            t = TensorType(IntegerType(32), shape, nh.FixedAttr(0, decl.layout))
        except (ValueError, VerifyException) as e:
            raise self.error(f"program input '{decl.name}': {e}", decl.loc) from None
        arg = self.block.insert_arg(t, len(self.block.args))
        self.values[decl.name] = arg
        set_hint(arg, decl.name)
        return arg

    # -- attributes and types -------------------------------------------------------------
    @staticmethod
    def _allow(node: Node, *names: str) -> dict[str, AttrValue]:
        for key, _ in node.attrs:
            if key not in names:
                raise NodeProblem(
                    f"attribute '{key}' is not one nanoir knows for {node.op_type} at the hw level",
                    attr=key,
                )
        return dict(node.attrs)

    @staticmethod
    def _required(node: Node, attrs: dict[str, AttrValue], key: str) -> AttrValue:
        if key not in attrs:
            raise NodeProblem(f"{node.op_type} node '{node.name}' needs attribute '{key}'")
        return attrs[key]

    def _declared_type(self, node: Node, attrs: dict[str, AttrValue]) -> TensorType:
        """The nh type of the node's output: its declaration plus the node's `exp`."""
        if len(node.out_s) != 1:
            raise NodeProblem(
                f"{node.op_type} node '{node.name}' has {len(node.out_s)} outputs; hw nodes have one"
            )
        return self._output_type(node, 0, self._required(node, attrs, "exp"))

    def _declared_types(self, node: Node, attrs: dict[str, AttrValue]) -> list[TensorType]:
        """The nh types of a several-output node's outputs: `exp` lists one exp per output."""
        exps = self._required(node, attrs, "exp")
        if not isinstance(exps, tuple) or len(exps) != len(node.out_s):
            raise NodeProblem(
                f"exp of {node.op_type} node '{node.name}' must list one exp per output "
                f"({len(node.out_s)}: an integer or a list of integers each), got {_spelled(exps)}",
                attr="exp",
            )
        return [self._output_type(node, i, exp) for i, exp in enumerate(exps)]

    def _output_type(self, node: Node, index: int, value: AttrValue) -> TensorType:
        """The nh type of output `index`: its declaration plus its `exp` value."""
        decl = self.decls[node.out_s[index]]
        assert isinstance(decl, (InitTensor, RuntimeTensor))  # check_program
        try:
            exp = exp_from_value(value)
        except ValueError as e:
            which = f" (output {index})" if len(node.out_s) > 1 else ""
            raise NodeProblem(f"exp of node '{node.name}'{which} {e}", attr="exp") from None
        _check_exponents(node, [exp] if isinstance(exp, int) else exp, "exp")
        error = nh.FixedAttr.layout_error(decl.layout)
        if error is None and not isinstance(exp, int) and "C" not in decl.layout:
            error = f"per-channel exponents need a C in the layout {decl.layout!r}"
        if error is not None:
            raise NodeProblem(f"output '{decl.name}' of node '{node.name}': {error}")
        # Types are immutable: one object per distinct type (programs repeat a few).
        key = (decl.dtype, decl.shape, exp if isinstance(exp, int) else tuple(exp), decl.layout)
        found = self.types.get(key)
        if found is None:
            shape = [DYNAMIC_INDEX if d == -1 else d for d in decl.shape]
            signed = decl.dtype not in UNSIGNED_HW_DTYPES.values()  # uint<b>_t: ui<b> codes
            found = nh.fixed_type(WIDTH_OF_DTYPE[decl.dtype], shape, exp, decl.layout, signed)
            self.types[key] = found
        return found

    def _prop(self, kind: object, value: AttrValue) -> Attribute:
        """`decode_prop`, one attribute object per distinct (kind, value): attributes are
        immutable, and shared ones make `verify_op`'s signatures cheap to compare."""
        try:
            key = (kind, value)
            found = self.props.get(key)
        except TypeError:  # a tree built by hand with lists in it
            return decode_prop(kind, value)  # type: ignore[arg-type]
        if found is None:
            found = self.props[key] = decode_prop(kind, value)  # type: ignore[arg-type]
        return found

    def _value(self, node: Node, index: int) -> SSAValue:
        name = node.in_s[index]
        if name in self.values:
            return self.values[name]
        if name in self.producer:
            raise NodeProblem(
                f"node '{node.name}' reads '{name}' before node '{self.producer[name].name}' computes it "
                "(calls must follow the dataflow)",
                input=index,
            )
        raise NodeProblem(
            f"node '{node.name}' reads '{name}', which is not a computed tensor here", input=index
        )

    def _const(self, node: Node, index: int) -> ConstTensor:
        decl = self.decls.get(node.in_s[index])
        if not isinstance(decl, ConstTensor):
            raise NodeProblem(
                f"input {index} of {node.op_type} node '{node.name}' must be a constant",
                input=index,
            )
        return decl

    # -- nodes ----------------------------------------------------------------------------
    def _argument(self, q: RuntimeNode, source: RuntimeTensor) -> tuple[TensorType, DictionaryAttr]:
        """The argument a Q node stands for: its type and its quantization attributes."""
        attrs = self._allow(q, "bit_len", "exp", "rounding", "signed")
        if len(q.in_s) != 2:
            raise NodeProblem(
                f"Q node '{q.name}' takes 2 inputs (data, exponent), got {len(q.in_s)}"
            )
        exp = self._const(q, 1)
        if exp.dtype not in ("int8_t", "int16_t", "int32_t", "int64_t"):
            raise NodeProblem(
                f"the exponent of Q node '{q.name}' must be a signed integer constant", input=1
            )
        # The values only, not to_numpy(): NumPy refuses some empty shapes (0 x 2^62 x ...).
        values = np.frombuffer(exp.data, dtype=numpy_dtype(exp.dtype))
        outside = np.flatnonzero((values < EXP_MIN) | (values > EXP_MAX))
        if outside.size:
            _check_exponents(q, [int(values[outside[0]])], None)
        bits = self._required(q, attrs, "bit_len")
        if not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
            raise NodeProblem(
                f"bit_len of Q node '{q.name}' must be an integer from 1 to {MAX_BITS}, found {bits}",
                attr="bit_len",
            )
        try:
            rounding = decode_prop("rounding", attrs.get("rounding", RoundingMode.TRUNC.value))
        except ValueError as e:
            raise NodeProblem(f"rounding of Q node '{q.name}' {e}", attr="rounding") from None
        arg_type = self._declared_type(q, attrs)
        signed = attrs.get("signed", 1)
        if isinstance(signed, bool) or signed not in (0, 1):
            raise NodeProblem(
                f"attribute 'signed' of Q node '{q.name}' must be 0 or 1, got {_spelled(signed)}",
                attr="signed",
            )
        if signed != (not nh.is_unsigned(arg_type)):  # nanoir's extension: signed=0, uint<b>_t
            out = self.decls[q.out_s[0]]
            raise NodeProblem(
                f"Q node '{q.name}' has signed={signed}, but its output '{out.name}' is "
                f"Tensor<{out.dtype}>: unsigned codes are signed=0 and Tensor<uint<b>_t>, signed "
                "ones neither",
                attr="signed" if "signed" in attrs else None,
            )
        if tuple(source.shape) != tuple(self.decls[q.out_s[0]].shape):  # type: ignore[union-attr]
            raise NodeProblem(f"Q node '{q.name}' changes the shape of '{source.name}'")
        assert isinstance(rounding, RoundingModeAttr)
        return arg_type, DictionaryAttr(
            {
                "nq.bits": IntegerAttr(bits, i64),
                "nq.exp": dense_from_const(exp),
                "nq.rounding": rounding,
            }
        )

    def _node(self, node: Node) -> None:
        build: Callable[[Node], Sequence[SSAValue]] = {
            "Unpack": self._unpack,
            "Identity": self._identity,
        }.get(node.op_type, self._op)
        try:
            values = build(node)
        except NodeProblem as problem:
            raise self.node_error(node, problem) from None
        for name, value in zip(node.out_s, values, strict=True):
            self.values[name] = value
            if isinstance(value.owner, Operation):
                set_hint(value, name)

    def _built(self, node: Node, op: Operation) -> Sequence[SSAValue]:
        try:
            verify_op(op)
        except VerifyException as e:
            op.erase(safe_erase=False)
            raise NodeProblem(
                f"{node.op_type} node '{node.name}': {e.args[0] if e.args else e}"
            ) from None
        self.block.add_op(op)
        return op.results

    def _unpack(self, node: Node) -> Sequence[SSAValue]:
        """An `nh.constant` from its data constant (see `hw`)."""
        if not isinstance(node, InitNode):
            raise NodeProblem(f"Unpack node '{node.name}' must be an init node")
        attrs = self._allow(node, "bit_len", "exp", "name", "storage")
        if len(node.in_s) != 1:
            raise NodeProblem(
                f"Unpack node '{node.name}' takes 1 input (the data), got {len(node.in_s)}"
            )
        data = self._const(node, 0)
        result_type = self._declared_type(node, attrs)
        if nh.is_unsigned(result_type):
            raise NodeProblem(
                f"Unpack node '{node.name}' outputs unsigned codes "
                f"(Tensor<{self.decls[node.out_s[0]].dtype}>); constants are signed codes"  # type: ignore[union-attr]
            )
        width = WIDTH_OF_DTYPE[self.decls[node.out_s[0]].dtype]  # type: ignore[union-attr]
        if self._required(node, attrs, "bit_len") != width:
            raise NodeProblem(
                f"bit_len of Unpack node '{node.name}' must be the width of its output '{node.out_s[0]}' ({width})",
                attr="bit_len",
            )
        try:
            codes = codes_from_data(data, width, result_type.get_shape())
        except ValueError as e:
            raise NodeProblem(f"data of Unpack node '{node.name}': {e}", input=0) from None
        storage = attrs.get("storage", default_storage(codes))
        if storage not in (8, 16, 32, 64):
            raise NodeProblem(
                f"storage of Unpack node '{node.name}' must be 8, 16, 32 or 64", attr="storage"
            )
        try:
            value = dense_codes(codes, storage)  # type: ignore[arg-type]  # checked above
        except ValueError as e:
            raise NodeProblem(f"Unpack node '{node.name}': {e}", attr="storage") from None
        if "name" in attrs:
            try:
                name: str | None = name_from_value(attrs["name"])
            except ValueError as e:
                raise NodeProblem(f"name of Unpack node '{node.name}' {e}", attr="name") from None
        else:
            name = None if UNNAMED_CONSTANT.fullmatch(data.name) else data.name
        return self._built(node, nh.ConstantOp(value, result_type, name=name))

    def _identity(self, node: Node) -> Sequence[SSAValue]:
        """The output is the input: no op, the value gets a second tensor name."""
        self._allow(node)
        if len(node.in_s) != 1 or len(node.out_s) != 1:
            raise NodeProblem(f"Identity node '{node.name}' takes 1 input and has 1 output")
        value = self._value(node, 0)
        source, out = self.decls[node.in_s[0]], self.decls[node.out_s[0]]
        same = (source.dtype, source.layout, source.shape) == (out.dtype, out.layout, out.shape)  # type: ignore[union-attr]
        if not same:
            raise NodeProblem(
                f"Identity node '{node.name}' declares '{out.name}' unlike its input '{source.name}'"
            )
        return (value,)

    def _op(self, node: Node) -> Sequence[SSAValue]:
        spec = BY_OP_TYPE.get(node.op_type)
        if spec is None:
            raise NodeProblem(
                f"op type '{node.op_type}' of node '{node.name}' has no nh op; the hw level knows "
                + ", ".join(["Q", "Unpack", "Identity", *BY_OP_TYPE])
            )
        derived = dict(spec.derived)
        attrs = self._allow(node, "exp", *(m.name for m in spec.props), *derived)
        properties: dict[str, Attribute] = {}
        for m in spec.props:
            attr = m.name
            if attr in attrs:
                try:
                    properties[m.prop] = self._prop(m.kind, attrs[attr])
                except ValueError as e:
                    raise NodeProblem(
                        f"attribute '{attr}' of node '{node.name}' {e}", attr=attr
                    ) from None
        if spec.multi_output:
            result_types = self._declared_types(node, attrs)
        else:
            result_types = [self._declared_type(node, attrs)]
        count = len(node.in_s) - (1 if spec.const_input == "shape" else 0)
        operands = [self._value(node, i) for i in range(count)]
        if spec.const_input == "shape":
            self._check_shape_input(node, count, result_types[0])
        if spec.cls is nh.RecurrentOp:
            result_types += _unwritten_states(node, attrs, properties, result_types, operands)
        op = spec.cls.create(operands=operands, result_types=result_types, properties=properties)
        values = self._built(node, op)[: len(node.out_s)]  # a Recurrent's unread states: none
        for attr, derive in spec.derived:
            want = derive(op)
            got = self._required(node, attrs, attr)
            if not same_value(want, got):
                raise NodeProblem(
                    f"attribute '{attr}' of node '{node.name}' must be {want}, not {got}", attr=attr
                )
        return values

    def _check_shape_input(self, node: Node, index: int, result_type: TensorType) -> None:
        """Reshape's shape constant must spell the declared output shape (-1 = dynamic)."""
        if index < 1:
            raise NodeProblem(
                f"Reshape node '{node.name}' takes 2 inputs (data, shape), got {len(node.in_s)}"
            )
        const = self._const(node, index)
        wanted = [-1 if d == DYNAMIC_INDEX else d for d in result_type.get_shape()]
        if (
            not const.dtype.startswith("int")
            or len(const.shape) != 1
            or [int(v) for v in const.to_numpy()] != wanted
        ):
            raise NodeProblem(
                f"the shape input of Reshape node '{node.name}' must be an integer constant holding {wanted}",
                input=index,
            )


def _unwritten_states(
    node: Node,
    attrs: dict[str, AttrValue],
    properties: dict[str, Attribute],
    result_types: list[TensorType],
    operands: list[SSAValue],
) -> list[TensorType]:
    """A Recurrent node: its operand segments (`initial_states` says how many of in_s after
    the input are h0[, c0]) set in `properties`, and the types of the final states it does
    not write (unread h_n / c_n: `[L*D, N, H]` on the hidden / cell grid, in the layout
    lower-to-hw gives them)."""
    states = attrs.get("initial_states")
    if not isinstance(states, int) or not 0 <= states <= 2 or len(operands) < 1 + states:
        raise NodeProblem(
            f"Recurrent node '{node.name}' needs initial_states = 0, 1 or 2 (h0[, c0]), got "
            f"{states}",
            attr="initial_states",
        )
    segments = [1, int(states >= 1), int(states >= 2), len(operands) - 1 - states]
    properties["operandSegmentSizes"] = DenseArrayBase.from_list(i32, segments)
    mode, grids = properties.get("mode"), [properties.get(k) for k in ("hidden", "cell")]
    if not isinstance(mode, StringAttr) or not all(isinstance(g, DenseArrayBase) for g in grids):
        return []
    count = 3 if mode.data == "lstm" else 2
    if not 1 <= len(result_types) <= count:
        raise NodeProblem(
            f"Recurrent node '{node.name}' has {len(result_types)} outputs; {mode.data} gives 1 "
            f"to {count} (output, h_n[, c_n])"
        )
    try:
        layout = RecurrentLayout(
            mode.data,
            properties["hidden_size"].value.data,  # type: ignore[attr-defined]
            properties["num_layers"].value.data,  # type: ignore[attr-defined]
            bool(properties["bidirectional"].value.data),  # type: ignore[attr-defined]
            bool(properties["batch_first"].value.data),  # type: ignore[attr-defined]
        )
    except KeyError as e:
        raise NodeProblem(f"Recurrent node '{node.name}' needs attribute {e}") from None
    _, state, _ = layout.result_shapes(nf.tensor_shape(operands[0]))
    _, state_layout = nh.RecurrentOp.result_layouts(layout.batch_first)
    missing = []
    for i in range(len(result_types), count):
        key = ("hidden", "cell")[min(i - 1, 1)]
        grid = tuple(array_values(grids[min(i - 1, 1)]) or (0, 8))  # type: ignore[arg-type]
        if len(grid) != 2 or not -128 <= grid[0] <= 127 or not 1 <= grid[1] <= 32:
            raise NodeProblem(
                f"Recurrent node '{node.name}' has {key}={list(grid)}; expected [exp, bits] "
                "with exp in -128..127 and bits in 1..32 (it types the unwritten final state)",
                attr=key,
            )
        exp, bits = grid
        elt = IntegerType(next(w for w in (2, 4, 8, 16, 32) if bits <= w))
        missing.append(TensorType(elt, state, nh.FixedAttr(exp, state_layout)))
    return missing


def import_hw_program(
    program: Program, filename: str = "<string>", source: str | None = None
) -> ModuleOp:
    """The nh IR of a checked hw-level program; `NanoEngineSemanticError` on problems."""
    return _HwImporter(program, filename, source).run()
