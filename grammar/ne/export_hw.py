"""Export an nh (hw-level) program as NanoEngine text (`.ne`), in the form `hw` describes.

`exporter` (the front door) hands every function with nh ops or nh-typed arguments to
`export_hw_program`. The IR has no `.ne` metadata to follow, so names and sections are chosen
as the nq-level exporter chooses them for fresh IR (`schema.Names`):

- nodes `<OpType>_n<k>` (numbered per op type in program order), their outputs `<node>_o0`
  (`<node>_o<i>` for result i of a several-output op: Split);
  the function's float inputs `input`, `input_1`, ... and its results `output`,
  `output_1`, ... (by result index); a node's input cache `<node>_<input tensor>`;
- data constants after the IR name (`conv1.weight` -> `conv1_weight`), unnamed ones, the
  inputs' exponent constants and Reshape's shape constants `Constant_n<k>_o0`;
- sections `// init const tensor`, `// init static tensor`, `// runtime tensor`,
  `// runtime memory`, then the nodes in op order (a new `// init node` or `// runtime_node`
  section wherever the kind changes), then `func init` and `func runtime`.

Runtime tensors and caches are declared with their whole shapes (a plan of one step holding
the whole streamed dim): the importer takes each nh type from its declaration. A stream plan's
per-step shapes would lose the static extent of M, so a plan is refused for nh programs.

What the format cannot say is an `ExportError` naming the op: a non-nh op in an nh program, an
argument without `nq.bits`/`nq.exp` (a hw input is written as the Q node that quantizes it),
a result that is a constant, a value computed but never used (NanoEngine takes unread tensors
for outputs), an init tensor with a `B...` layout or a runtime tensor without one.
Discardable attributes on nh ops and argument attributes other than `nq.*` are not written.
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoir.dialects import nf, nh
from nanoir.dialects.nq import RoundingModeAttr
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.hw import (
    BY_CLASS,
    UNNAMED_CONSTANT,
    constant_data,
    default_storage,
    storage_width,
)
from nanoir.grammar.ne.layout import calls, reference_layout
from nanoir.grammar.ne.schema import (
    HW_DTYPES,
    UNSIGNED_HW_DTYPES,
    Attrs,
    Names,
    StreamPlan,
    const_from_dense,
    encode_prop,
    exp_value,
    name_value,
    sanitize_name,
)
from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    ConstTensor,
    InitNode,
    InitTensor,
    Item,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
)
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

__all__ = ["export_hw_program"]


def _nh_type(value: SSAValue, what: str) -> tuple[str, str, tuple[int, ...], nh.FixedAttr]:
    """(dtype, layout, declared shape, encoding) of an nh-typed value."""
    t = value.type
    if isinstance(t, TensorType) and isinstance(t.encoding, nh.FixedAttr):
        elt = t.get_element_type()
        dtypes = UNSIGNED_HW_DTYPES if nh.is_unsigned(t) else HW_DTYPES
        if isinstance(elt, IntegerType) and elt.width.data in dtypes:
            shape = tuple(-1 if d == DYNAMIC_INDEX else d for d in t.get_shape())
            return dtypes[elt.width.data], t.encoding.layout.data, shape, t.encoding
    raise ExportError(f"nanoengine export: {what} has type {t}, not an nh tensor")


def _sorted(attrs: list[tuple[str, AttrValue]]) -> Attrs:
    return tuple(sorted(attrs, key=lambda kv: kv[0]))


class _HwExporter:
    def __init__(self, func: FuncOp) -> None:
        self.func = func
        self.block = func.body.block
        self.ids = Names()  # no recorded names to step around: the IR has no .ne metadata
        self.names: dict[SSAValue, str] = {}
        self.consts: list[ConstTensor] = []
        self.init_tensors: list[InitTensor] = []
        self.runtime_tensors: list[RuntimeTensor] = []
        self.tensor_of: dict[str, InitTensor | RuntimeTensor] = {}
        self.mems: list[MemTensor] = []
        self.nodes: list[InitNode | RuntimeNode] = []
        self.init_values: set[SSAValue] = set()
        self.const_names: dict[Operation, str] = {}
        ret = self.block.last_op
        if not isinstance(ret, ReturnOp):
            raise ExportError(
                f"nanoengine export: @{func.sym_name.data} does not end with func.return"
            )
        self.returned: list[SSAValue] = list(ret.arguments)
        self.ret = ret
        self.direct: dict[SSAValue, int] = {}
        """Results written as their op's own tensor, by result index (see `run`)."""
        self.outputs: dict[int, str] = {}
        """The output tensor of each result index."""

    # -- names ----------------------------------------------------------------------------
    def claim_constant_names(self) -> None:
        """Named constants get their names first, so generated names step around them; a
        name already taken (`a.b` after `a_b`) becomes `a_b_1` once every free one is claimed."""
        named = [
            op for op in self.block.ops if isinstance(op, nh.ConstantOp) and op.sym_name is not None
        ]
        clashes: list[nh.ConstantOp] = []
        for op in named:
            base = sanitize_name(op.sym_name.data)  # type: ignore[union-attr]
            if base in self.ids:
                clashes.append(op)
            else:
                self.ids.add(base)
                self.const_names[op] = base
        for op in clashes:
            self.const_names[op] = self.ids.fresh(sanitize_name(op.sym_name.data))  # type: ignore[union-attr]

    # -- declarations ---------------------------------------------------------------------
    def declare(self, value: SSAValue, name: str, init: bool, what: str) -> None:
        dtype, layout, shape, _ = _nh_type(value, what)
        decl: InitTensor | RuntimeTensor
        if init:
            decl = InitTensor(name, dtype, layout, shape)
            self.init_tensors.append(decl)
        else:
            decl = RuntimeTensor(name, dtype, layout, shape)
            self.runtime_tensors.append(decl)
        self.names[value] = name
        self.tensor_of[name] = decl

    def caches(self, node: str, inputs: Sequence[str]) -> tuple[str, ...]:
        """One input cache per distinct runtime input, shaped like the tensor it caches."""
        names: list[str] = []
        for tensor in dict.fromkeys(inputs):
            decl = self.tensor_of.get(tensor)  # None for a constant (Reshape's shape)
            if isinstance(decl, RuntimeTensor):
                name = self.ids.fresh(f"{node}_{tensor}")
                self.mems.append(MemTensor(name, decl.dtype, decl.layout, decl.shape))
                names.append(name)
        return tuple(names)

    def output_name(self, value: SSAValue, node: str, i: int = 0) -> str:
        index = self.direct.get(value)
        if index is None:
            return self.ids.fresh(f"{node}_o{i}")
        return self.ids.fresh("output" if index == 0 else f"output_{index}")

    # -- inputs ---------------------------------------------------------------------------
    def argument(self, arg: BlockArgument, attrs: dict[str, Attribute]) -> None:
        """A float input and the runtime Q node that quantizes it into the argument's codes."""
        what = f"argument {arg.index} of @{self.func.sym_name.data}"
        bits, exp = attrs.get("nq.bits"), attrs.get("nq.exp")
        if bits is None and nf.is_index_input(arg):  # token ids: Tensor<int64_t>, read as is
            _, layout, shape, _ = _nh_type(arg, what)
            source = self.ids.fresh("input" if arg.index == 0 else f"input_{arg.index}")
            self.runtime_tensors.append(RuntimeTensor(source, "int64_t", layout, shape))
            self.tensor_of[source] = self.runtime_tensors[-1]
            self.names[arg] = source
            return
        if not isinstance(bits, IntegerAttr) or not isinstance(exp, DenseIntOrFPElementsAttr):
            raise ExportError(
                f"nanoengine export: {what} has no nq.bits/nq.exp attributes; a hw input is written as "
                "the Q node that quantizes a float input (lower-to-hw records them)"
            )
        _, layout, shape, fixed = _nh_type(arg, what)
        source = self.ids.fresh("input" if arg.index == 0 else f"input_{arg.index}")
        self.runtime_tensors.append(RuntimeTensor(source, "Any", layout, shape))
        self.tensor_of[source] = self.runtime_tensors[-1]
        try:
            exp_const = const_from_dense(self.ids.numbered("Constant", "_o0"), exp)
        except ValueError as e:
            raise ExportError(f"nanoengine export: nq.exp of {what}: {e}") from None
        self.consts.append(exp_const)
        node = self.ids.numbered("Q")
        self.declare(arg, self.ids.fresh(f"{node}_o0"), init=False, what=what)
        attrs_out: list[tuple[str, AttrValue]] = [
            ("bit_len", bits.value.data),
            ("exp", exp_value(fixed)),
        ]
        rounding = attrs.get("nq.rounding")
        if isinstance(rounding, RoundingModeAttr) and rounding.data != RoundingMode.TRUNC:
            attrs_out.append(("rounding", rounding.data.value))
        if nh.is_unsigned(arg):  # the nq level's extension: a ui<b> input is quantized unsigned
            attrs_out.append(("signed", 0))
        in_s = (source, exp_const.name)
        self.nodes.append(
            RuntimeNode(
                node, "Q", _sorted(attrs_out), in_s, self.caches(node, in_s[:1]), (self.names[arg],)
            )
        )

    # -- ops ------------------------------------------------------------------------------
    def constant(self, op: nh.ConstantOp) -> None:
        """`nh.constant` -> a data constant and the init Unpack node typing it."""
        _, _, _, fixed = _nh_type(op.result, "an nh.constant")
        if nh.is_unsigned(op.result):
            raise ExportError(
                f"nanoengine export: nh.constant {nh.type_text(op.result)} holds unsigned codes; "
                "Unpack writes signed codes only (lower-to-hw keeps constants signed)"
            )
        width = nh.width_of(op.result)
        codes = op.codes()
        name = self.const_names.get(op) or self.ids.numbered("Constant", "_o0")
        self.consts.append(constant_data(name, codes, width))
        attrs: list[tuple[str, AttrValue]] = [("bit_len", width), ("exp", exp_value(fixed))]
        ir_name = op.sym_name.data if op.sym_name is not None else None
        read_back = None if UNNAMED_CONSTANT.fullmatch(name) else name
        if ir_name != read_back:
            assert ir_name is not None  # unnamed constants always get a Constant_n<k>_o0 name
            attrs.append(("name", name_value(ir_name)))
        storage = storage_width(op.value)
        if storage != default_storage(codes):
            attrs.append(("storage", storage))
        node = self.ids.numbered("Unpack")
        self.init_values.add(op.result)
        self.declare(
            op.result, self.ids.fresh(f"{node}_o0"), init=True, what=f"nh.constant '{name}'"
        )
        self.nodes.append(
            InitNode(node, "Unpack", _sorted(attrs), (name,), (self.names[op.result],))
        )

    def node(self, op: Operation) -> None:
        spec = BY_CLASS.get(type(op))
        if spec is None:
            raise ExportError(
                f"nanoengine export: '{op.name}' has no NanoEngine op type in an nh program "
                "(the hw level writes nh ops only)"
            )
        if len(op.results) != 1 and not spec.multi_output:
            raise ExportError(
                f"nanoengine export: '{op.name}' has {len(op.results)} results; nodes here have one"
            )
        what = f"the result of '{op.name}'"
        results = list(op.results)
        if isinstance(op, nh.RecurrentOp):  # unread final states (h_n, c_n) are not written
            while len(results) > 1 and not results[-1].uses:
                results.pop()
        exps = tuple(exp_value(_nh_type(r, what)[3]) for r in results)
        attrs: list[tuple[str, AttrValue]] = [("exp", exps if spec.multi_output else exps[0])]
        for m in spec.props:
            value = op.properties.get(m.prop)
            if value is not None:
                attrs.append((m.name, encode_prop(m.kind, value)))
        attrs += [(attr, derive(op)) for attr, derive in spec.derived]
        in_s = [self.names[v] for v in op.operands]
        if spec.const_input == "shape":
            in_s.append(self.shape_constant(op.results[0]))
        init = all(v in self.init_values for v in op.operands)
        name = self.ids.numbered(spec.op_type)
        unused = next((i for i, r in enumerate(results) if not r.uses), None)
        if unused is not None and not init:
            which = f"result {unused} of " if len(op.results) > 1 else ""
            raise ExportError(
                f"nanoengine export: {which}'{op.name}' ({name}) computes a value nothing uses; "
                "NanoEngine takes unread tensors for outputs (remove dead code first)"
            )
        for i, result in enumerate(results):
            if init:
                self.init_values.add(result)
            self.declare(result, self.output_name(result, name, i), init, what)
        out_s = tuple(self.names[r] for r in results)
        if init:
            self.nodes.append(InitNode(name, spec.op_type, _sorted(attrs), tuple(in_s), out_s))
        else:
            mem_s = self.caches(name, in_s)
            self.nodes.append(
                RuntimeNode(name, spec.op_type, _sorted(attrs), tuple(in_s), mem_s, out_s)
            )

    def shape_constant(self, result: SSAValue) -> str:
        """Reshape's int64_t shape input: the result shape, -1 for a dynamic dim."""
        _, _, shape, _ = _nh_type(result, "the result of 'nh.reshape'")
        const = ConstTensor.from_numpy(self.ids.numbered("Constant", "_o0"), list(shape), "int64_t")
        self.consts.append(const)
        return const.name

    def identity(self, value: SSAValue, index: int) -> None:
        """An Identity node giving result `index` a tensor of its own."""
        if value in self.init_values:
            raise ExportError(
                f"nanoengine export: @{self.func.sym_name.data} returns a constant as result {index}; "
                "NanoEngine outputs are computed by runtime nodes"
            )
        node = self.ids.numbered("Identity")
        out = self.ids.fresh("output" if index == 0 else f"output_{index}")
        source = self.tensor_of[self.names[value]]
        decl = RuntimeTensor(out, source.dtype, source.layout, source.shape)
        self.runtime_tensors.append(decl)
        self.tensor_of[out] = decl
        in_s = (self.names[value],)
        self.nodes.append(RuntimeNode(node, "Identity", (), in_s, self.caches(node, in_s), (out,)))
        self.outputs[index] = out

    # -- the program ----------------------------------------------------------------------
    def run(self) -> Program:
        # A result is the tensor of its own op when nothing else reads it and it is returned
        # once; every other result (an argument, a value also read or returned twice) goes
        # through an Identity node, so that "unread tensors are outputs" finds it.
        for index, value in enumerate(self.returned):
            only_returned = value.uses.get_length() == 1
            if (
                only_returned
                and not isinstance(value, BlockArgument)
                and not isinstance(value.owner, nh.ConstantOp)
            ):
                self.direct[value] = index
        self.claim_constant_names()
        arg_attrs = self.func.arg_attrs.data if self.func.arg_attrs else ()
        for arg in self.block.args:
            attrs = dict(arg_attrs[arg.index].data) if arg.index < len(arg_attrs) else {}
            self.argument(arg, attrs)
        quantizers, self.nodes = self.nodes, []
        for op in self.block.ops:
            if op is self.ret:
                continue
            if isinstance(op, nh.ConstantOp):
                self.constant(op)
            else:
                self.node(op)
        # The Q nodes build no op, so they may go anywhere: just before the first runtime
        # node, which keeps a program whose constants come first in the reference layout.
        first = next(
            (i for i, n in enumerate(self.nodes) if isinstance(n, RuntimeNode)), len(self.nodes)
        )
        self.nodes[first:first] = quantizers
        for index, value in enumerate(self.returned):
            if (
                value in self.direct
                and self.direct[value] == index
                and value not in self.init_values
            ):
                self.outputs[index] = self.names[value]
            else:
                self.identity(value, index)
        self._order_outputs()
        return Program(tuple(self._items()))

    def _order_outputs(self) -> None:
        """Outputs are read back in declaration order: declare them in result order."""
        outputs = [self.outputs[i] for i in range(len(self.returned))]
        wanted = set(outputs)
        slots = [i for i, t in enumerate(self.runtime_tensors) if t.name in wanted]
        for slot, name in zip(slots, outputs):
            decl = self.tensor_of[name]
            assert isinstance(decl, RuntimeTensor)
            self.runtime_tensors[slot] = decl

    def _items(self) -> list[Item]:
        decls = [*self.consts, *self.init_tensors, *self.runtime_tensors, *self.mems, *self.nodes]
        return reference_layout(decls, calls(self.nodes), node_runs=True)


def export_hw_program(func: FuncOp, plan: StreamPlan | None = None) -> Program:
    """The `.ne` syntax tree of an nh function (see the module docstring)."""
    if plan is not None:
        raise ExportError(
            "nanoengine export: stream plans are not supported for nh programs yet (the file "
            "declares whole tensors so that it reads back to the same types)"
        )
    return _HwExporter(func).run()
