"""Export nf/nq IR to a NanoEngine program (`.ne`) at the quantized (nq) level.

`exporter` (the front door) hands every function without nh ops here. Two kinds of input:

- IR imported from a `.ne` file (see `import_nq` for the `ne.*` metadata): every name,
  shape, layout, section and comment is recorded, and the original file comes back byte for
  byte. Recorded facts are used only while they still describe the IR: a recorded attribute
  list must still mean what the op does, a recorded shape must still fit the value's type,
  and recorded names are used once; otherwise the fresh choice below is made.
- Any other nf/nq IR (e.g. after `quantize`): names and sections are chosen as
  NanoEngine-PyTorch does (`schema.Names`). Nodes are `<OpType>_n<k>`, numbered per op
  type in program order; outputs `<node>_o<i>`; the function's inputs `input` (then
  `input_1`, ...) and results `output` (`output_1`, ...); named `nf.constant`s keep their
  name with every character outside `[A-Za-z0-9_]` made `_` (`conv1.weight` ->
  `conv1_weight`), the others and the exponents of fake-quants are `Constant_n<k>_o0`. A
  fake-quant of a constant is an init node, every other op a runtime node.

Runtime tensors are declared with *streaming plan* shapes. Unless a plan is given (see
`schema.StreamPlan`; the stream-plan pass provides real numbers) the exporter declares
`[-1, C, 1, D...]` (M = one row per step, D the whole rest) and gives every runtime node a
`mem` cache per distinct runtime input, shaped like the tensor it caches. A program with an
op that needs a whole static dim 2 (nf.max_pool_indices, nf.max_unpool, nf.recurrent, an
nf.gather along dim 2 such as a Focus `x[..., ::2, ::2]`) declares every runtime tensor
whole instead (`[-1, C, H, W]`, layout `BCDD`: no streamed dim), so that it reads back with
the same static dims.

Each op is written by its row of `nq.NQ_OPS` (op type and attributes); `nf.custom` by its
own op_type and attributes. Import finds the results as the runtime tensors no node reads,
so a returned value that another op also reads, that is returned twice or that is an input
is written through an `Identity` node whose output is that result (the importer makes no op
for it). A constant result is an `ExportError`. A recorded runtime shape is kept while it
fits the value's type, or the shape NanoEngine-PyTorch declares for it ignoring padding.

Anything else (an nf op with no row) is an `ExportError` naming the op. Float
constants are written as `little_float_32` (f16/f64 as `little_float_16`/`little_float_64`)
from their exact bytes; nothing is converted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.layout import calls, recorded_layout, reference_layout
from nanoir.grammar.ne.node import NodeInput, NodeProblem, NodeSpec, Unsupported
from nanoir.grammar.ne.nq import BY_CLASS, convert_known, default_attrs, row_of
from nanoir.grammar.ne.printer import BOM_ENTRY
from nanoir.grammar.ne.reference import reference_result_types
from nanoir.grammar.ne.schema import (
    NAME,
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
    NE_OUT_S,
    NE_TENSOR,
    Attrs,
    Entry,
    Names,
    StreamPlan,
    UnitStepPlan,
    const_from_dense,
    decl_from_entry,
    decode_attrs,
    entry_fields,
    init_layout,
    main_function,
    runtime_layout,
    sanitize_name,
    streamed_type,
)
from nanoir.grammar.ne.syntax_tree import (
    ConstTensor,
    Declaration,
    InitNode,
    InitTensor,
    Item,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)
from nanoir.runtime.numerics.shapes import shape_str, shapes_compatible
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Attribute, Operation, SSAValue

__all__ = ["export_nq_program"]


def _op_type(op: Operation) -> str:
    if isinstance(op, nf.CustomOp):
        return op.op_type.data
    return row_of(op).op_type


def _entries(op: Operation, key: str) -> list[Entry] | None:
    attr = op.attributes.get(key)
    if not isinstance(attr, ArrayAttr):
        return None
    fields = [entry_fields(e) for e in attr.data]
    return None if any(f is None for f in fields) else fields  # type: ignore[return-value]


def _str_attr(op: Operation, key: str) -> str | None:
    attr = op.attributes.get(key)
    return attr.data if isinstance(attr, StringAttr) else None


def _needs_whole_tensors(op: Operation) -> bool:
    """max_pool_indices / max_unpool (static planes), nf.recurrent (its time and feature
    dims), and a gather along dim 2 (a Focus `x[..., ::2, ::2]`: gathering rows of M, which
    reads back dynamic from a one-row plan and would be kept as nf.custom)."""
    if isinstance(op, nf.MaxPoolIndicesOp | nf.MaxUnpoolOp | nf.RecurrentOp):
        return True
    if isinstance(op, nf.GatherOp):
        rank = len(nf.tensor_shape(op.input))
        return rank >= 3 and op.axis.value.data % rank == 2
    return False


def _dead_state_quant(op: Operation, returned: dict[SSAValue, int]) -> bool:
    """A fake-quant of a recurrent op's final state (quantize puts one on h_n and c_n) that
    nothing reads: not written, as the state it quantizes (an unread tensor would read
    back as a program result)."""
    return (
        isinstance(op, FakeQuantOp)
        and not op.result.uses
        and op.result not in returned
        and isinstance(op.input.owner, nf.RecurrentOp)
        and op.input is not op.input.owner.output
    )


def _unread_state(value: SSAValue, returned: dict[SSAValue, int]) -> bool:
    """A recurrent op's h_n / c_n that nothing reads but a dead fake-quant."""
    return value not in returned and all(
        _dead_state_quant(use.operation, returned) for use in value.uses
    )


class _Exporter:
    def __init__(self, module: ModuleOp, plan: StreamPlan | None) -> None:
        self.module = module
        self.plan = plan
        self.default_plan = UnitStepPlan()
        self.func = main_function(module)
        # Ops that need a whole static dim where a one-row plan would declare M (dynamic on
        # import): declare whole tensors, M as D, so that the program reads back as it is.
        self.whole_planes = any(_needs_whole_tensors(op) for op in self.func.walk())
        self.recorded_decls: dict[str, Declaration] = {}
        decls = module.attributes.get(NE_DECLS)
        if isinstance(decls, DictionaryAttr):
            for name, entry in decls.data.items():
                decl = decl_from_entry(name, entry)
                if decl is not None:
                    self.recorded_decls[name] = decl
        self.ids = Names(reserved=self._recorded_names())
        self.claimed_for_consts: set[str] = set()  # names claimed for the constant declared next
        self.names: dict[SSAValue, str] = {}
        self.consts: dict[str, ConstTensor | WordTensor] = {}  # every constant declared, by name
        self.named_consts: list[str] = []  # named nf.constants, in op order
        self.numbered_consts: list[str] = []  # Constant_n<k>_o0, in numbering order
        self.const_derived: set[SSAValue] = set()
        self.tensors: dict[str, Declaration] = {}  # init, runtime and mem tensors, in order
        self.nodes: list[InitNode | RuntimeNode] = []  # in program order
        # The type NanoEngine-PyTorch would declare for each value (its stream analysis ignores
        # padding; None: unknown): a recorded shape may be this one (see reference).
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
            fields = entry_fields(attrs.data.get(NE_TENSOR, DictionaryAttr({})))
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
    ) -> (
        tuple[
            str,
            tuple[str, str, tuple[int, ...], str] | None,
            list[tuple[str, str, tuple[int, ...], str]],
            str,
        ]
        | None
    ):
        """(node, out entry, mem entries, the node called before it) of the Identity node the
        imported file gave result `index` by (`ne.identity`, see import_nq)."""
        res_attrs = self.func.res_attrs.data if self.func.res_attrs else ()
        if index >= len(res_attrs):
            return None
        entry = res_attrs[index].data.get(NE_IDENTITY)
        if not isinstance(entry, DictionaryAttr):
            return None
        node, after, mems = entry.data.get("node"), entry.data.get("after"), entry.data.get("mem_s")
        if not isinstance(node, StringAttr):
            return None
        mem_fields = [entry_fields(e) for e in mems.data] if isinstance(mems, ArrayAttr) else []
        return (
            node.data,
            entry_fields(entry.data.get("out", DictionaryAttr({}))),
            [f for f in mem_fields if f is not None] if None not in mem_fields else [],
            after.data if isinstance(after, StringAttr) else "",
        )

    # -- constants ------------------------------------------------------------------------
    def const_name(self) -> str:
        """The next free `Constant_n<k>_o0`, reserved for a constant."""
        name = self.ids.numbered("Constant", "_o0")
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
        elif const.name in self.ids.taken and const.name not in self.claimed_for_consts:
            const, numbered = _renamed(const, self.const_name()), True
        self.ids.taken.add(const.name)
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
        name = self.ids.claim(base, lambda: self.ids.fresh(base))
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
            self.declare_const(
                self._float_const(owner, name, NE_HEX_UPPER in owner.attributes), numbered=True
            )

    def recorded_const(self, name: str) -> ConstTensor | WordTensor | None:
        decl = self.recorded_decls.get(name)
        return decl if isinstance(decl, (ConstTensor, WordTensor)) else None

    # -- nodes ----------------------------------------------------------------------------
    def node_inputs(self, op: Operation) -> list[NodeInput]:
        """The node's inputs in in_s order: operands, with constants at their positions."""
        consts: dict[int, ConstTensor | WordTensor] = {}
        row = None if isinstance(op, nf.CustomOp) else row_of(op)
        if row is not None and row.const_input == "exp":  # Q: the exponent, from the op's `exp`
            exp = op.exp  # type: ignore[attr-defined]
            assert isinstance(exp, DenseIntOrFPElementsAttr)
            recorded = _str_attr(op, NE_EXP_NAME)
            try:
                const = const_from_dense(recorded or "exp", exp, NE_EXP_HEX_UPPER in op.attributes)
            except ValueError as e:
                raise ExportError(f"nanoengine export: nq.fake_quant exponent: {e}") from None
            if recorded is None or not NAME.fullmatch(recorded):
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
        if row is not None and row.const_input == "shape" and 1 not in consts:
            consts[1] = self._shape_const(op)  # type: ignore[arg-type]  # a reshape
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

    def _plain_inputs(
        self, op: Operation, consts: dict[int, ConstTensor | WordTensor]
    ) -> list[NodeInput]:
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

    def _means_the_same(
        self, op: Operation, op_type: str, attrs: Attrs, inputs: list[NodeInput]
    ) -> bool:
        """Whether importing `attrs` with these inputs builds an op equal to this one: same
        class and result types, and the same canonical attributes (defaults filled in)."""
        spec = NodeSpec(
            _str_attr(op, NE_NODE) or op.name, op_type, attrs, tuple(inputs), len(op.results)
        )
        try:
            rebuilt = convert_known(spec)
        except (Unsupported, NodeProblem, KeyError):
            return False
        try:
            if type(rebuilt) is not type(op) or [r.type for r in rebuilt.results] != [
                r.type for r in op.results
            ]:
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
        if type(op) not in BY_CLASS and not isinstance(op, nf.CustomOp):
            raise ExportError(
                f"nanoengine export: '{op.name}' has no NanoEngine op type "
                "(the exporter writes nf and nq ops, or a program of nh ops)"
            )
        for value in op.operands:
            self.name_constant(value)
        op_type = _op_type(op)
        init = self.is_init(op)
        inputs = self.node_inputs(op)
        name = self.ids.claim(
            _str_attr(op, NE_NODE), lambda: self.ids.numbered(sanitize_name(op_type))
        )
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
        """The result types NanoEngine-PyTorch declares for `op` (reference.reference_result_types)."""
        types = [r.type for r in op.results]
        if isinstance(op, nf.CustomOp):
            return list(types)
        spec = NodeSpec(
            _str_attr(op, NE_NODE) or op.name, op_type, attrs, tuple(inputs), len(op.results)
        )
        reference = [self.reference.get(v, v.type) for v in inputs if isinstance(v, SSAValue)]
        found = reference_result_types(spec, types, reference)
        return list(found) if found is not None else [None] * len(types)

    def input_name(self, value: NodeInput, user: Operation) -> str:
        if isinstance(value, (ConstTensor, WordTensor)):
            return self.declare_const(value, numbered=False)
        name = self.names.get(value)
        if name is None:
            raise ExportError(
                f"nanoengine export: {user.name} reads a value defined outside @main's body"
            )
        return name

    def outputs(
        self, op: Operation, node: str, init: bool, returned: dict[SSAValue, int]
    ) -> tuple[str, ...]:
        results = list(op.results)
        if isinstance(op, nf.RecurrentOp):  # unread final states (h_n, c_n) are not written
            while len(results) > 1 and _unread_state(results[-1], returned):
                results.pop()
        recorded = _entries(op, NE_OUT_S)
        if recorded is not None and len(recorded) != len(results):
            recorded = None
        names: list[str] = []
        for i, result in enumerate(results):
            entry = recorded[i] if recorded else None

            def fallback(i: int = i, result: SSAValue = result) -> str:
                if not init and result in returned:
                    k = returned[result]
                    return self.ids.fresh("output" if k == 0 else f"output_{k}")
                return self.ids.fresh(f"{node}_o{i}")

            name = self.ids.claim(entry[0] if entry else None, fallback)
            self.names[result] = name
            self.tensors[name] = self.tensor_decl(result, name, entry, init)
            names.append(name)
        return tuple(names)

    def tensor_decl(
        self,
        value: SSAValue,
        name: str,
        entry: tuple[str, str, tuple[int, ...], str] | None,
        init: bool,
    ) -> InitTensor | RuntimeTensor:
        t = value.type
        if not isinstance(t, TensorType):
            raise ExportError(f"nanoengine export: value '{name}' of type {t} is not a tensor")
        dtype = entry[3] if entry else "Any"
        if init:
            if DYNAMIC_INDEX in t.get_shape():
                raise ExportError(
                    f"nanoengine export: init tensor '{name}' has the dynamic shape {shape_str(t.get_shape())}"
                )
            shape = tuple(t.get_shape())
            if entry and entry[2] == shape:
                return InitTensor(name, dtype, entry[1], shape)
            return InitTensor(name, dtype, init_layout(len(shape)), shape)
        planned = self.plan.tensor_shape(value) if self.plan is not None else None
        if planned is not None:
            shape = tuple(int(d) for d in planned)
            layout = (
                entry[1] if entry and len(entry[1]) == len(shape) else runtime_layout(len(shape))
            )
            return RuntimeTensor(name, dtype, layout, shape)
        if entry and self._recorded_shape_fits(value, entry):
            return RuntimeTensor(name, dtype, entry[1], entry[2])
        shape = tuple(int(d) for d in self.default_plan.tensor_shape(value) or ())
        layout = runtime_layout(len(shape))
        if self.whole_planes and len(shape) >= 3:
            shape = (-1, *t.get_shape()[1:])
            if DYNAMIC_INDEX in shape:
                raise ExportError(
                    f"nanoengine export: runtime tensor '{name}' of a program with whole-plane "
                    f"ops has the dynamic shape {shape_str(t.get_shape())}"
                )
            layout = layout.replace("M", "D")
        return RuntimeTensor(name, dtype, layout, shape)

    def _recorded_shape_fits(
        self, value: SSAValue, entry: tuple[str, str, tuple[int, ...], str]
    ) -> bool:
        """Whether a recorded runtime shape still describes `value`: its type's, or the one
        NanoEngine-PyTorch declares for it (ignoring padding; see reference)."""
        declared = streamed_type(entry[2], entry[1]).get_shape()
        reference = self.reference.get(value, value.type)
        return any(
            isinstance(t, TensorType) and shapes_compatible(declared, t.get_shape())
            for t in (value.type, reference)
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
            name = self.ids.claim(
                entry[0] if entry else None, lambda v=v: self.ids.fresh(f"{node}_{self.names[v]}")
            )
            cached = self.tensors.get(self.names[v])
            assert isinstance(cached, RuntimeTensor)
            shape = tuple(cached.shape)
            if self.plan is not None:
                planned = self.plan.cache_shape(op, v, shape)
                shape = tuple(int(d) for d in planned) if planned is not None else shape
            self.tensors[name] = MemTensor(
                name,
                "Any",
                cached.layout if len(cached.layout) == len(shape) else runtime_layout(len(shape)),
                shape,
            )
            names.append(name)
        return tuple(names)

    def _recorded_mems_fit(self, recorded: list[tuple[str, str, tuple[int, ...], str]]) -> bool:
        for name, layout, shape, dtype in recorded:
            existing = self.tensors.get(name)
            if existing is not None and existing != MemTensor(name, dtype, layout, shape):
                return False
            if existing is None and name in self.ids.taken:
                return False
        self.ids.taken.update(name for name, *_ in recorded)
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
        node_name, out_entry, mem_entries, after = self._recorded_identity(index) or (
            None,
            None,
            [],
            "",
        )
        source = self.names[value]
        name = self.ids.claim(node_name, lambda: self.ids.numbered("Identity"))
        out = self.ids.claim(
            out_entry[0] if out_entry else None,
            lambda: self.ids.fresh("output" if index == 0 else f"output_{index}"),
        )
        self.tensors[out] = self.tensor_decl(value, out, out_entry, init=False)
        if (
            mem_entries
            and len(mem_entries) == 1
            and self.plan is None
            and self._recorded_mems_fit(mem_entries)
        ):
            mem_name, layout, shape, dtype = mem_entries[0]
            self.tensors.setdefault(mem_name, MemTensor(mem_name, dtype, layout, shape))
        else:
            cached = self.tensors[source]
            assert isinstance(cached, RuntimeTensor)
            mem_name = self.ids.claim(
                mem_entries[0][0] if mem_entries else None,
                lambda: self.ids.fresh(f"{name}_{source}"),
            )
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
            entry = (
                entry_fields(arg_attrs[i].data.get(NE_TENSOR, DictionaryAttr({})))
                if i < len(arg_attrs)
                else None
            )
            name = self.ids.claim(
                entry[0] if entry else None,
                lambda i=i: self.ids.fresh("input" if i == 0 else f"input_{i}"),
            )
            self.names[arg] = name
            decl = self.tensor_decl(arg, name, entry, init=False)
            if nf.is_index_input(arg):  # token ids: Tensor<int64_t>, no Q node reads them
                decl = dataclasses.replace(decl, dtype="int64_t")
            self.tensors[name] = decl
        for op in block.ops:
            if isinstance(op, ReturnOp):
                continue
            if isinstance(op, nf.ConstantOp):
                self.constant_op(op)
            elif not _dead_state_quant(op, returned):
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

    def _items(self) -> list[Item]:
        decls = self._declarations()
        functions = calls(self.nodes)
        recorded = self.module.attributes.get(NE_ITEMS)
        if not isinstance(recorded, ArrayAttr):
            return reference_layout(decls.values(), functions)
        entries = [e.data for e in recorded.data if isinstance(e, StringAttr)]
        kept = {n: d for n, d in self.recorded_decls.items() if n not in self.ids.taken}
        return recorded_layout(entries, decls, functions, kept)


def _renamed(const: ConstTensor | WordTensor, name: str) -> ConstTensor | WordTensor:
    if isinstance(const, ConstTensor):
        return ConstTensor(name, const.dtype, const.shape, const.data, const.hex_upper)
    return WordTensor(name, const.type_name, const.layout, const.shape, const.data, const.hex_upper)


def export_nq_program(module: ModuleOp, plan: StreamPlan | None = None) -> Program:
    """The `.ne` syntax tree of an nf/nq module (see the module docstring)."""
    return _Exporter(module, plan).run()
