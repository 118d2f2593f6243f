"""Import a ``torch.nn.Module`` as an nf program, through ``torch.export``.

The network is exported (``torch.export.export``, in eval mode) and functionalized with
``run_decompositions({})``: in-place ops become functional, ``batch_norm`` becomes
``_native_batch_norm_legit_no_training``, but conv, linear, batch norm, pools and activations
stay single ATen ops, each of which maps to one nf op (or a short fixed sequence). Every node of
the resulting FX graph goes through one handler in :data:`ATEN_HANDLERS`, keyed by the ATen
overload's name (``aten.conv2d.default``).

What comes out is a ``builtin.module`` holding ``func.func @main``: the arguments are the
network's tensor inputs, the body is nf ops, and ``func.return`` gives the outputs in torch's
order. Parameters, buffers and lifted tensor constants become ``nf.constant`` ops carrying
their torch path (``layer1.0.conv1.weight``) as ``name`` and, sanitized, as the SSA name hint;
they are emitted at the top of the function, in order of first use. Python scalars
(``x + 2``) become unnamed rank-0 constants.

Shapes: with ``dynamic_batch`` (the default) dim 0 of every input is a ``torch.export.Dim``,
printed ``?`` in the IR. torch.export specializes a size-1 dim to the constant 1, so a batch-1
example is doubled before tracing (only shapes matter to the trace). Every op's nf result type
is checked against the shape and dtype torch.export recorded for the node
(``node.meta["val"]``); reshapes take their target from there.

Anything without an nf equivalent raises one :class:`FrontendError` naming each offending ATen
op, the module path it comes from (``node.meta["nn_module_stack"]``) and the source line
(``node.meta["stack_trace"]``), followed by the list of supported ops.
"""

from __future__ import annotations

import inspect
import math
import operator
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    Float16Type,
    Float32Type,
    Float64Type,
    FunctionType,
    ModuleOp,
    TensorType,
    i1,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from nanoir.dialects import nf
from nanoir.dialects.dense import numpy_to_dense
from nanoir.errors import ArgumentError
from nanoir.frontend import core_aten, math_ops, movement_ops, products, reductions, resize
from nanoir.frontend.batch_fold import fold_batch_uniform
from nanoir.frontend.errors import FrontendError
from nanoir.frontend.export_errors import export_failure, scripted_module
from nanoir.frontend.fold import Fold, fold_program
from nanoir.frontend.support import Unsupported, holds_integers, refines
from nanoir.runtime.numerics.kernels import GELU_APPROXIMATIONS
from nanoir.runtime.numerics.movement import expand_grown
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from nanoir.runtime.numerics.shapes import ShapeError

__all__ = [
    "ATEN_HANDLERS",
    "FrontendError",
    "export",
    "from_torch",
    "import_program",
    "name_hint",
    "supported_aten_ops",
]


# --------------------------------------------------------------------------------------------
# Types and constants
# --------------------------------------------------------------------------------------------

_FLOAT_TYPES: dict[torch.dtype, tuple[Callable[[], Attribute], str]] = {
    torch.float16: (Float16Type, "<f2"),
    torch.float32: (Float32Type, "<f4"),
    torch.float64: (Float64Type, "<f8"),
}


def _element_type(dtype: torch.dtype) -> Attribute:
    if dtype not in _FLOAT_TYPES:
        raise _Unsupported(f"tensors of dtype {dtype} (nf holds float16/32/64 only)")
    return _FLOAT_TYPES[dtype][0]()


MOVES_BOOLS = frozenset(
    f"aten.{name}"
    for name in (
        "view.default",
        "reshape.default",
        "_unsafe_view.default",
        "unsqueeze.default",
        "squeeze.default",
        "squeeze.dim",
        "squeeze.dims",
        "flatten.using_ints",
        "permute.default",
        "transpose.int",
        "expand.default",
        "slice.Tensor",
        "select.int",
        "cat.default",
        "clone.default",
        "alias.default",
    )
)
"""Data movement whose bool results nf holds as its operand's float 0/1 (as a comparison's):
moving values changes none, so the bools stay exact."""


def name_hint(path: str) -> str:
    """A valid SSA name hint for a torch path: invalid characters become ``_`` and a leading
    digit (a top-level ``nn.Sequential``) gets a ``_`` prefix.

    >>> name_hint("layer1.0.conv1.weight")
    'layer1.0.conv1.weight'
    >>> name_hint("0.weight")
    '_0.weight'
    >>> name_hint("0")
    'm0'
    """
    hint = re.sub(r"[^A-Za-z0-9_$.-]", "_", path)
    hint = hint if re.match(r"[A-Za-z_$.-]", hint) else "_" + hint
    # xDSL drops a trailing `_<digits>` from a name hint (its uniquing suffix), which would
    # leave an empty name of a bare "_0" (a layer of a top-level nn.Sequential); an empty
    # name then fails xDSL's own check when the module is cloned.
    return "m" + hint[1:] if re.fullmatch(r"_\d+", hint) else hint


def _meta_shape(val: Any) -> tuple[int, ...]:
    """A fake tensor's shape with symbolic dims as ``DYNAMIC_INDEX``."""
    return tuple(d if isinstance(d, int) else DYNAMIC_INDEX for d in val.shape)


def _tensor_type(val: Any) -> TensorType:
    return TensorType(_element_type(val.dtype), _meta_shape(val))


# --------------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------------


_Unsupported = Unsupported
"""Raised by a handler for an op or argument it cannot map; becomes a FrontendError (shared
with the op-family modules through ``nanoir.frontend.support``)."""


_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)')


def _frames(trace: str) -> list[tuple[str, str, str, str]]:
    """``(file, line, function, code)`` per frame of a Python stack trace (code may be empty:
    source typed at a prompt has none)."""
    lines = trace.splitlines()
    frames = []
    for i, text in enumerate(lines):
        m = _FRAME.fullmatch(text)
        if m is None:
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _FRAME.fullmatch(code):
            code = ""
        frames.append((m["file"], m["line"], m["func"], code))
    return frames


def source_line(node: fx.Node) -> str:
    """``file:line in func: code`` of the innermost user frame that created ``node``.

    The last frame of the stack trace outside torch's own sources (an ``nn.ReLU`` module's
    last frame is in ``torch/nn/modules``, which says nothing about the user's network).
    """
    frames = _frames(node.meta.get("stack_trace") or "")
    if not frames:
        return "<unknown source>"
    user = [f for f in frames if not f[0].startswith(_TORCH_DIR)]
    file, line, func, code = (user or frames)[-1]
    return f"{file}:{line} in {func}" + (f": {code}" if code else "")


def module_path(node: fx.Node) -> str:
    """The innermost module that created ``node``: ``'layer1.0.conv1' (Conv2d)``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "<unknown module>"
    path, type_name = list(stack.values())[-1]
    cls = str(type_name).rsplit(".", 1)[-1]
    return f"'{path}' ({cls})" if path else f"<root> ({cls})"


def _describe(node: fx.Node) -> str:
    return f"{node.target}\n    in module {module_path(node)}\n    at {source_line(node)}"


def _supported_list() -> str:
    return "supported ATen ops: " + ", ".join(supported_aten_ops())


# --------------------------------------------------------------------------------------------
# The importer
# --------------------------------------------------------------------------------------------


@dataclass
class _TorchConstant:
    """A parameter, buffer or lifted constant, turned into an ``nf.constant`` on first use
    (once per element type: integer constants take the float type of their consumer)."""

    tensor: torch.Tensor
    name: str
    ops: dict[Attribute, SSAValue] = field(default_factory=dict)


@dataclass
class _BatchConstant:
    """A value the same for every sample (:mod:`nanoir.frontend.batch_fold`): its value at
    batch one, expanded to the batch where an op reads it (once per element type)."""

    tensor: torch.Tensor
    name: str
    shape: Sequence[int]
    ops: dict[tuple[Attribute | None, SSAValue], SSAValue] = field(default_factory=dict)


Value = SSAValue | list[SSAValue | None] | _TorchConstant | _BatchConstant | None
Handler = Callable[["_Importer", fx.Node, dict[str, Any]], Value]


class _Importer:
    """Walks an exported graph and builds the nf function, one handler call per node."""

    def __init__(self, program: torch.export.ExportedProgram):
        self.program = program
        self.values: dict[fx.Node, Value] = {}
        self.constant_ops: list[Operation] = []
        self.body_ops: list[Operation] = []
        self.fold = Fold()
        self.current: fx.Node | None = None
        """The node being imported (an expanded batch constant takes its batch from it)."""

    # -- operands ------------------------------------------------------------------------

    def tensor(self, arg: Any, element_type: Attribute | None = None) -> SSAValue:
        """The nf value of a tensor argument; an integer constant becomes ``element_type``."""
        if not isinstance(arg, fx.Node):
            raise _Unsupported(f"expected a tensor operand, got {arg!r}")
        value = self.values.get(arg)
        if isinstance(value, _TorchConstant):
            return self._materialize(value, element_type)
        if isinstance(value, _BatchConstant):
            return self._expanded(value, element_type)
        if not isinstance(value, SSAValue):
            raise _Unsupported(f"operand {arg.name} is not a tensor nf can hold")
        return value

    def operand(self, arg: Any, element_type: Attribute) -> SSAValue:
        """A tensor operand, or a Python number as a rank-0 constant of ``element_type``."""
        if isinstance(arg, (bool, int, float)):
            return self.scalar(float(arg), element_type)
        return self.tensor(arg, element_type)

    def optional_tensor(self, arg: Any) -> SSAValue | None:
        return None if arg is None else self.tensor(arg)

    def scalar(self, value: float, element_type: Attribute) -> SSAValue:
        op = nf.ConstantOp(numpy_to_dense(np.array(value), element_type))
        self.constant_ops.append(op)
        return op.result

    def fill(self, value: float, shape: Sequence[int], element_type: Attribute) -> SSAValue:
        op = nf.ConstantOp(numpy_to_dense(np.full(tuple(shape), value), element_type))
        self.constant_ops.append(op)
        return op.result

    def _materialize(self, const: _TorchConstant, element_type: Attribute | None) -> SSAValue:
        dtype = const.tensor.dtype
        if dtype in _FLOAT_TYPES and element_type is None:
            elt = _element_type(dtype)
        elif element_type is not None and not dtype.is_complex:
            # an op computes in its result's dtype: torch casts a 0-d float64 constant, or an
            # integer/bool one, to it (``x + torch.tensor(0.5, dtype=torch.float64)``)
            elt = element_type  # integer/bool constants join float arithmetic as floats
        else:
            raise _Unsupported(f"constant '{const.name}' has dtype {dtype}")
        if elt not in const.ops:
            array = const.tensor.detach().cpu().numpy()
            op = nf.ConstantOp(numpy_to_dense(array, elt), name=const.name)
            op.result.name_hint = name_hint(const.name)
            self.constant_ops.append(op)
            const.ops[elt] = op.result
        return const.ops[elt]

    # -- results -------------------------------------------------------------------------

    def emit(self, op: Operation) -> Operation:
        op.verify()
        self.body_ops.append(op)
        return op

    def result_type(self, node: fx.Node) -> TensorType:
        return TensorType(self.element_type(node), _meta_shape(node.meta["val"]))

    def element_type(self, node: fx.Node) -> Attribute:
        """torch's float dtype, or, for bools data movement moves (a mask ``(ids == 0)[:,
        None]``), the float type its operand holds them in (0/1: the comparison's)."""
        dtype = node.meta["val"].dtype
        if dtype == torch.bool and str(node.target) in MOVES_BOOLS:
            for arg in node.args:
                held = self.values.get(arg) if isinstance(arg, fx.Node) else None
                if isinstance(held, SSAValue) and isinstance(held.type, TensorType):
                    return held.type.get_element_type()
        return _element_type(dtype)

    def rank(self, value: SSAValue) -> int:
        return len(nf.tensor_shape(value))

    # -- the walk ------------------------------------------------------------------------

    def run(self, function_name: str) -> ModuleOp:
        graph = self.program.graph
        self.fold = fold_program(self.program)
        fold_batch_uniform(self.program, self.fold)
        self._reject_unsupported(graph)
        self._reject_runtime_indices(graph)
        specs = {s.arg.name: s for s in self.program.graph_signature.input_specs}
        block = Block()
        outputs: list[SSAValue] = []
        for node in graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node, specs[node.name], block)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                outputs = self._outputs(node)
            else:  # get_attr / call_module do not survive torch.export
                raise FrontendError(f"unexpected FX node {node.op} {node.target}")
        ret = ReturnOp(*outputs)
        block.add_ops([*self.constant_ops, *self._live(self.body_ops), ret])
        ftype = FunctionType.from_lists(block.arg_types, [v.type for v in outputs])
        module = ModuleOp([FuncOp(function_name, ftype, Region(block))])
        module.verify()
        return module

    def _reject_runtime_indices(self, graph: fx.Graph) -> None:
        """An ``aten.index.Tensor`` whose index tensor is an input or computed is refused
        here, naming the node (its integer input would otherwise be refused by dtype alone)."""
        from torch.export.graph_signature import InputKind

        kinds = {s.arg.name: s.kind for s in self.program.graph_signature.input_specs}

        def constant(n: Any) -> bool:
            if not isinstance(n, fx.Node):
                return n is None
            if n.op == "placeholder":
                return kinds.get(n.name) != InputKind.USER_INPUT
            if self.fold.is_constant(n):
                return True
            return ATEN_HANDLERS.get(str(n.target)) in (_identity, _reshape) and constant(n.args[0])

        for node in graph.nodes:
            if str(node.target) != "aten.index.Tensor":
                continue
            for idx in node.args[1]:  # type: ignore[union-attr]
                if not constant(idx):
                    raise FrontendError(
                        f"cannot import {_describe(node)}\n  reason: index tensor '{idx.name}' "
                        "is computed at run time; nanoir gathers with constant indices only "
                        "(a buffer or a literal list)"
                    )

    @staticmethod
    def _live(ops: list[Operation]) -> list[Operation]:
        """``ops`` without those whose results nothing reads (the slice torch.export reads
        before a ``slice_scatter`` that writes it back unchanged), last first."""
        kept: list[Operation] = []
        for op in reversed(ops):
            if op.results and all(not r.uses for r in op.results):
                op.drop_all_references()
                continue
            kept.append(op)
        return kept[::-1]

    def _reject_unsupported(self, graph: fx.Graph) -> None:
        """One error listing every unsupported op, before any conversion."""
        problems: list[str] = []
        for node in graph.nodes:
            if node.op != "call_function" or _is_shape_arithmetic(node):
                continue
            if node in self.fold.folded or node in self.fold.batch_folded:
                continue
            if node.target is operator.getitem or str(node.target) in ATEN_HANDLERS:
                continue
            why = self.fold.why_not_folded(node)
            text = _describe(node) + (f"\n    ({why})" if why else "")
            if text not in problems:
                problems.append(text)
        if problems:
            listing = "\n".join(f"  - {p}" for p in problems)
            raise FrontendError(
                f"cannot import {len(problems)} op(s) with no nf equivalent:\n{listing}\n"
                + _supported_list()
            )

    def _input_type(self, val: torch.Tensor) -> TensorType:
        """An integer input (an embedding's indices) is held as exact float integers in the
        program's float type (its first float parameter's, else float32); nf.embedding reads
        it, and an input read otherwise is refused there."""
        if val.dtype in (torch.int64, torch.int32):
            floats = [t.dtype for t in self.program.state_dict.values() if t.is_floating_point()]
            return TensorType(
                _element_type(floats[0] if floats else torch.float32), _meta_shape(val)
            )
        return _tensor_type(val)

    def _placeholder(self, node: fx.Node, spec: Any, block: Block) -> None:
        from torch.export.graph_signature import InputKind

        if spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise FrontendError(f"input '{node.name}' is not a tensor ({val!r})")
            try:
                arg = block.insert_arg(self._input_type(val), len(block.args))
            except _Unsupported as e:
                raise FrontendError(f"input '{node.name}': {e}") from None
            arg.name_hint = name_hint(node.name)
            self.values[node] = arg
            return
        if not node.users:  # e.g. bn.num_batches_tracked
            return
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            source = (
                self.program.state_dict
                if spec.target in self.program.state_dict
                else (self.program.constants)
            )
            value = source[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            value = self.program.constants[spec.target]
        else:
            raise FrontendError(f"input '{node.name}' of kind {spec.kind.name} is not supported")
        if not isinstance(value, torch.Tensor):
            raise FrontendError(f"constant '{spec.target}' is not a tensor ({type(value)})")
        self.values[node] = _TorchConstant(value, spec.target)

    def _call(self, node: fx.Node) -> None:
        if _is_shape_arithmetic(node):
            self.values[node] = None
            return
        if node in self.fold.folded and node not in self.fold.values:
            return  # read only by other folded nodes
        if node in self.fold.batch_folded and node not in self.fold.batched:
            return
        self.current = node
        try:
            if node in self.fold.folded:
                self.values[node] = self._folded(node)
                return
            if node in self.fold.batched:
                self.values[node] = self._batch_folded(node)
                return
            if node.target is operator.getitem:
                result = self._getitem(node)
            elif self._unbatched(node):
                result = self._with_batch_of_one(node)
            else:
                handler = ATEN_HANDLERS[str(node.target)]
                result = handler(self, node, _bind_args(node))
                self._check_against_meta(node, result)
        except _Unsupported as e:
            raise FrontendError(f"cannot import {_describe(node)}\n  reason: {e}") from None
        except (VerifyException, ShapeError) as e:
            raise FrontendError(
                f"internal error importing {_describe(node)}\n  reason: {e}"
            ) from None
        self._name_results(node, result)
        self.values[node] = result

    def _unbatched(self, node: fx.Node) -> bool:
        """Whether ``node`` is a conv or pool given one sample without its batch dim (a
        ``[C, L]`` input to ``Conv1d``), which torch takes as a batch of one; refused naming
        the missing batch dim when the sample's dim 0 was made the dynamic batch."""
        name = str(node.target)
        if name not in TAKES_UNBATCHED or not node.args:
            return False
        if "conv" in name:
            weight = node.args[1]
            batched = len(weight.meta["val"].shape) if isinstance(weight, fx.Node) else None
        else:
            batched = int(re.findall(r"(\d)d", name)[-1]) + 2
        val = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.ndim + 1 != batched:
            return False
        if not all(isinstance(d, int) for d in val.shape):
            raise _Unsupported(
                f"its input {_shape_text(_meta_shape(val))} has no batch dim (torch takes it as "
                f"one sample; the op takes rank {batched} with the batch), but its dim 0 is "
                "dynamic: import with dynamic_batch=False for unbatched inputs"
            )
        return True

    def _with_batch_of_one(self, node: fx.Node) -> Value:
        """Import an unbatched conv or pool as torch runs it: its input (and a max unpool's
        indices) reshaped to a batch of one, the op's own handler on that, and each result
        reshaped back to torch's unbatched shape."""
        handler = ATEN_HANDLERS[str(node.target)]
        args = [a for a in node.args[: 2 if "unpool" in str(node.target) else 1]]
        saved_values = {a: self.values[a] for a in args}
        saved_meta = node.meta["val"]

        def batched(val: Any) -> Any:
            if isinstance(val, torch.Tensor):
                return torch.empty((1, *val.shape), dtype=val.dtype, device="meta")
            return type(val)(batched(v) for v in val) if isinstance(val, (list, tuple)) else val

        try:
            for a in args:
                x = self.tensor(a)
                self.values[a] = self.emit(nf.ReshapeOp(x, (1, *nf.tensor_shape(x)))).result
            node.meta["val"] = batched(saved_meta)
            result = handler(self, node, _bind_args(node))
            self._check_against_meta(node, result)
        finally:
            self.values.update(saved_values)
            node.meta["val"] = saved_meta
        if isinstance(result, SSAValue):
            return self.emit(nf.ReshapeOp(result, _meta_shape(saved_meta))).result
        return [
            self.emit(nf.ReshapeOp(r, _meta_shape(v))).result if isinstance(r, SSAValue) else r
            for r, v in zip(result, saved_meta)  # type: ignore[arg-type]
        ]

    def _batch_folded(self, node: fx.Node) -> Value:
        """A node the same for every sample: its value at batch one, to be expanded to the
        batch where an op reads it."""
        stack = node.meta.get("nn_module_stack") or {}
        path = str(list(stack.values())[-1][0]) if stack else ""
        name = f"{path}.{node.name}" if path else node.name
        return _BatchConstant(self.fold.batched[node], name, _meta_shape(node.meta["val"]))

    def _expanded(self, value: _BatchConstant, element_type: Attribute | None) -> SSAValue:
        """``value`` at batch one, expanded to the batch: the size is taken from a run-time
        operand of the op reading it whose dim 0 is the batch (so that token ids, read only
        by embeddings, stay indices), else from the input that carries the batch."""
        like = self._batch_carrier()
        if like is None:
            raise _Unsupported("a value of the batch size with no input to take it from")
        if (element_type, like) not in value.ops:
            one = self._materialize(_TorchConstant(value.tensor, value.name), element_type)
            value.ops[element_type, like] = _expand_to(self, one, value.shape, like)
        return value.ops[element_type, like]

    def _batch_carrier(self) -> SSAValue | None:
        operands = self.current.all_input_nodes if self.current is not None else []
        for node in [*operands, self.fold.batch_source]:
            v = self.values.get(node) if node is not None else None
            if isinstance(v, SSAValue) and self.rank(v) and nf.tensor_shape(v)[0] == DYNAMIC_INDEX:
                return v
        return None

    def _folded(self, node: fx.Node) -> Value:
        """The folded value of an input-independent node, as constants named after the
        parameter it is computed from (``pos_embed.permute``), else after its module and
        node (``encoder.arange``); an identity of a constant is that constant itself."""
        source = node.args[0] if node.args else None
        if (
            ATEN_HANDLERS.get(str(node.target)) is _identity
            and isinstance(source, fx.Node)
            and isinstance(self.values.get(source), _TorchConstant)
        ):
            return self.values[source]
        stack = node.meta.get("nn_module_stack") or {}
        path = str(list(stack.values())[-1][0]) if stack else ""
        root = self.fold.roots.get(node) or path
        name = f"{root}.{node.name}" if root else node.name
        value = self.fold.values[node]
        if isinstance(value, torch.Tensor):
            return _TorchConstant(value, name)
        if isinstance(value, (list, tuple)):
            return [
                _TorchConstant(v, f"{name}.{i}") if isinstance(v, torch.Tensor) else None  # type: ignore[misc]
                for i, v in enumerate(value)
            ]
        raise _Unsupported(f"'{node.name}' folds to {type(value).__name__}, not a tensor")

    def _name_results(self, node: fx.Node, result: Value) -> None:
        """Name activations after the module that computed them (``layer1.0.conv1``), or
        the FX node (``add_1``) at the top level, so reports and quantize rules can use them."""
        stack = node.meta.get("nn_module_stack") or {}
        path = str(list(stack.values())[-1][0]) if stack else ""
        hint = name_hint(path or node.name)
        values = result if isinstance(result, list) else [result]
        for value in values:
            if (
                isinstance(value, SSAValue)
                and not value.name_hint
                and isinstance(value, OpResult)
                and not isinstance(value.op, nf.ConstantOp)
            ):
                value.name_hint = hint

    def _getitem(self, node: fx.Node) -> Value:
        source, index = node.args
        items = self.values.get(source)  # type: ignore[arg-type]
        if not isinstance(items, list):
            raise _Unsupported(f"indexing {source} is not supported")
        item = items[index]  # type: ignore[index]
        if item is None:
            raise _Unsupported(f"result {index} of {source.target} has no nf equivalent")  # type: ignore[union-attr]
        return item

    def _check_against_meta(self, node: fx.Node, result: Value) -> None:
        """The nf result types must be exactly what torch.export recorded."""
        val = node.meta.get("val")
        pairs: list[tuple[SSAValue, Any]] = []
        if isinstance(result, SSAValue):
            pairs.append((result, val))
        elif isinstance(result, list):
            pairs += [(r, v) for r, v in zip(result, val) if r is not None]
        for value, meta in pairs:
            if holds_integers(value):
                # torch's int64 indices are float integers in nf (exact below 2**24)
                assert isinstance(value.type, TensorType)
                if value.type.get_shape() != _meta_shape(meta):
                    raise VerifyException(f"nf indices {value.type} differ from torch's shape")
                continue
            expected = _tensor_type(meta)
            if value.type != expected and not refines(value.type, expected):
                raise VerifyException(
                    f"nf result type {value.type} differs from torch's {expected}"
                )

    def _outputs(self, node: fx.Node) -> list[SSAValue]:
        from torch.export.graph_signature import OutputKind

        specs = self.program.graph_signature.output_specs
        results: list[SSAValue] = []
        for arg, spec in zip(node.args[0], specs):  # type: ignore[arg-type]
            if spec.kind != OutputKind.USER_OUTPUT:
                continue
            try:
                results.append(self.tensor(arg))
            except _Unsupported as e:
                raise FrontendError(f"output {arg}: {e}") from None
        return results


_SHAPE_OPS = {
    "aten.sym_size.int",
    "aten.sym_numel.default",
    "aten.sym_stride.int",
    "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
}


def _is_shape_arithmetic(node: fx.Node) -> bool:
    """Nodes that compute sizes (SymInts) or assert on them: the IR takes shapes from meta."""
    if str(node.target) in _SHAPE_OPS:
        return True
    if node.target is not operator.getitem and getattr(node.target, "__module__", None) in (
        "_operator",
        "operator",
    ):
        return not isinstance(node.meta.get("val"), torch.Tensor)
    return False


def _bind_args(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


# --------------------------------------------------------------------------------------------
# Handlers: one per ATen op
# --------------------------------------------------------------------------------------------


def _ints(value: int | Sequence[int], n: int) -> list[int]:
    """An int or a list of 1 or n ints, as n ints (torch's window-argument convention)."""
    if isinstance(value, int):
        return [value] * n
    values = [int(v) for v in value]
    return values * n if len(values) == 1 else values


def _unless(values: list[int], default: int) -> list[int] | None:
    """``None`` when every entry is the default, so the IR leaves the property out."""
    return None if all(v == default for v in values) else values


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _identity(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """clone, alias, detach...: the input itself (a torch constant stays one)."""
    source = node.args[0]
    if not isinstance(source, fx.Node) or source not in imp.values:
        raise _Unsupported(f"expected a tensor operand, got {source!r}")
    return imp.values[source]


def _dropout(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    if a["train"]:
        raise _Unsupported("dropout in training mode")
    return _identity(imp, node, a)


def _conv(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """conv1d/conv2d (``padding`` a list or ``'same'``/``'valid'``) and ``convolution``."""
    if a.get("transposed"):
        return _conv_transpose(imp, node, a)
    x, w = imp.tensor(a["input"]), imp.tensor(a["weight"])
    bias = imp.optional_tensor(a["bias"])
    n = imp.rank(x) - 2
    strides, dilations = _ints(a["stride"], n), _ints(a["dilation"], n)
    kernel = nf.tensor_shape(w)[2:]
    padding = a["padding"]
    if padding == "valid":
        begins = ends = [0] * n
    elif padding == "same":
        # torch pads d*(k-1) in total, the odd one on the right (F.pad(input, [0, 1])).
        totals = [d * (k - 1) for d, k in zip(dilations, kernel)]
        begins = [t // 2 for t in totals]
        ends = [t - t // 2 for t in totals]
    else:
        begins = ends = _ints(padding, n)
    op = nf.ConvOp(
        x,
        w,
        bias,
        strides=_unless(strides, 1),
        pads=_unless([*begins, *ends], 0),
        dilations=_unless(dilations, 1),
        groups=int(a["groups"]),
    )
    return imp.emit(op).result


def _conv_transpose(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """conv_transpose1d/2d and ``convolution(transposed=True)``: torch's symmetric
    ``padding`` becomes ONNX-style begins and ends; the weight stays ``[C, O/g, *K]``."""
    x = imp.tensor(a["input"])
    n = imp.rank(x) - 2
    pads = _ints(a["padding"], n)
    offsets = _one_hot_unpool(imp, node, a, n)
    if offsets is not None:
        out = imp.result_type(node).get_shape()[2:]
        return imp.emit(nf.UpsampleZeroOp(x, out, offsets)).result
    w = imp.tensor(a["weight"])
    op = nf.ConvTransposeOp(
        x,
        w,
        imp.optional_tensor(a["bias"]),
        strides=_unless(_ints(a["stride"], n), 1),
        pads=_unless([*pads, *pads], 0),
        dilations=_unless(_ints(a["dilation"], n), 1),
        output_padding=_unless(_ints(a["output_padding"], n), 0),
        groups=int(a["groups"]),
    )
    return imp.emit(op).result


def _one_hot_unpool(imp: _Importer, node: fx.Node, a: dict[str, Any], n: int) -> list[int] | None:
    """The offsets of a zero upsampling, when this transposed conv is one: depthwise, no
    bias (or a zero one), every channel's kernel the same one-hot 1.0 (the Magik manual's
    ``Unpool2D`` mode ``zero``, as ``magik_crnn.py`` writes it), each output dim ``stride``
    times the input's and the 1 landing inside each ``stride`` window. Moving the values is
    then exact and cheap at every level; anything else stays a transposed conv."""
    weight, bias = imp.values.get(a["weight"]), a["bias"]
    if not isinstance(weight, _TorchConstant):
        return None
    if bias is not None:
        b = imp.values.get(bias)
        if not isinstance(b, _TorchConstant) or bool(b.tensor.detach().any()):
            return None
    w = weight.tensor.detach().cpu().double().numpy()
    x_shape = nf.tensor_shape(imp.tensor(a["input"]))
    channels, groups = x_shape[1], int(a["groups"])
    if w.ndim != n + 2 or w.shape[1] != 1 or groups != channels or w.shape[0] != channels:
        return None
    hot = np.argwhere(w.reshape(channels, -1) != 0)
    if len(hot) != channels or not (w.reshape(channels, -1)[hot[:, 0], hot[:, 1]] == 1).all():
        return None
    if len(set(hot[:, 1].tolist())) != 1:
        return None
    position = np.unravel_index(int(hot[0, 1]), w.shape[2:])
    strides, pads = _ints(a["stride"], n), _ints(a["padding"], n)
    dilations = _ints(a["dilation"], n)
    out = imp.result_type(node).get_shape()[2:]
    offsets = []
    for i in range(n):
        offset = int(position[i]) * dilations[i] - pads[i]
        if out[i] != strides[i] * x_shape[2 + i] or not 0 <= offset < strides[i]:
            return None
        offsets.append(offset)
    return offsets


def _linear(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x, w = imp.tensor(a["input"]), imp.tensor(a["weight"])
    return imp.emit(nf.LinearOp(x, w, imp.optional_tensor(a["bias"]))).result


def _matmul(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """matmul, mm and bmm: all are ``torch.matmul`` on operands of the right rank."""
    lhs, rhs = (imp.tensor(v) for v in list(a.values())[:2])
    return imp.emit(nf.MatmulOp(lhs, rhs)).result


def _batch_norm_op(imp: _Importer, node: fx.Node, a: dict[str, Any], eps: float) -> SSAValue:
    x = imp.tensor(a["input"])
    if a["running_mean"] is None or a["running_var"] is None:
        raise _Unsupported("batch norm without running statistics (training mode)")
    mean, var = imp.tensor(a["running_mean"]), imp.tensor(a["running_var"])
    channels = nf.tensor_shape(mean)
    elt = x.type.get_element_type()  # type: ignore[union-attr]
    scale = imp.tensor(a["weight"]) if a["weight"] is not None else imp.fill(1.0, channels, elt)
    bias = imp.tensor(a["bias"]) if a["bias"] is not None else imp.fill(0.0, channels, elt)
    return imp.emit(nf.BatchNormOp(x, scale, bias, mean, var, eps)).result


def _batch_norm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``aten.batch_norm`` (before functionalization)."""
    if a["training"]:
        raise _Unsupported("batch norm in training mode")
    return _batch_norm_op(imp, node, a, float(a["eps"]))


def _batch_norm_no_training(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``(output, save_mean, save_invstd)``; only the output is used in inference."""
    return [_batch_norm_op(imp, node, a, float(a["eps"])), None, None]


def _affine(imp: _Importer, a: dict[str, Any], x: SSAValue, shape: Sequence[int]):  # noqa: ANN202
    """A norm's weight and bias, ones and zeros where torch has none."""
    elt = x.type.get_element_type()  # type: ignore[union-attr]
    w = imp.tensor(a["weight"]) if a["weight"] is not None else imp.fill(1.0, shape, elt)
    b = imp.tensor(a["bias"]) if a["bias"] is not None else imp.fill(0.0, shape, elt)
    return w, b


def _layer_norm_op(imp: _Importer, a: dict[str, Any]) -> SSAValue:
    x = imp.tensor(a["input"])
    shape = [int(d) for d in a["normalized_shape"]]
    if not shape or list(nf.tensor_shape(x)[len(nf.tensor_shape(x)) - len(shape) :]) != shape:
        raise _Unsupported(f"layer_norm over {shape}, not the input's last dims")
    w, b = _affine(imp, a, x, shape)
    return imp.emit(nf.LayerNormOp(x, w, b, len(shape), float(a["eps"]))).result


def _layer_norm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    return _layer_norm_op(imp, a)


def _native_layer_norm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``(output, mean, rstd)``; only the output has an nf form."""
    return [_layer_norm_op(imp, a), None, None]


def _group_norm_op(imp: _Importer, a: dict[str, Any], groups: int) -> SSAValue:
    x = imp.tensor(a["input"])
    shape = nf.tensor_shape(x)
    if len(shape) < 2 or groups < 1 or shape[1] % groups:
        raise _Unsupported(f"group_norm of {groups} groups on shape {list(shape)}")
    w, b = _affine(imp, a, x, shape[1:2])
    return imp.emit(nf.GroupNormOp(x, w, b, groups, float(a["eps"]))).result


def _group_norm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    return _group_norm_op(imp, a, int(a["num_groups"]))


def _native_group_norm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``(output, mean, rstd)``; only the output has an nf form."""
    return [_group_norm_op(imp, a, int(a["group"])), None, None]


_BINARY: dict[str, type[nf.BinaryFloatOp]] = {
    "add": nf.AddOp,
    "sub": nf.SubOp,
    "mul": nf.MulOp,
    "div": nf.DivOp,
    "rsub": nf.SubOp,
    "maximum": nf.MaximumOp,
    "minimum": nf.MinimumOp,
}


def _binary(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """add/sub/rsub/mul/div with tensors or Python scalars. ``alpha`` scales the second
    operand of the subtraction or addition: ``add(x, y, alpha) = x + alpha * y`` and
    ``rsub(x, y, alpha) = y - alpha * x``."""
    kind = str(node.target).split(".")[1]
    if a.get("rounding_mode") is not None:
        raise _Unsupported(f"division with rounding_mode={a['rounding_mode']!r}")
    elt = imp.element_type(node)
    lhs_arg, rhs_arg = a["self"], a["other"]
    if kind == "rsub":
        lhs_arg, rhs_arg = rhs_arg, lhs_arg
    alpha = a.get("alpha")
    if alpha is not None and alpha != 1:
        if isinstance(rhs_arg, (int, float)):
            rhs_arg = rhs_arg * alpha
        else:
            scale = imp.scalar(float(alpha), elt)
            rhs_arg = imp.emit(nf.MulOp(imp.tensor(rhs_arg, elt), scale)).result
    lhs = imp.operand(lhs_arg, elt)
    rhs = rhs_arg if isinstance(rhs_arg, SSAValue) else imp.operand(rhs_arg, elt)
    return imp.emit(_BINARY[kind](lhs, rhs)).result


def _unary(op_type: type[nf.UnaryFloatOp]) -> Handler:
    def handle(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
        return imp.emit(op_type(imp.tensor(node.args[0]))).result

    handle.__doc__ = f"One ``{op_type.name}``."
    return handle


def _gelu(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    approximate = str(a.get("approximate", "none"))
    if approximate not in GELU_APPROXIMATIONS:
        raise _Unsupported(f"gelu with approximate={approximate!r} (none or tanh)")
    return imp.emit(nf.GeluOp(imp.tensor(a["self"]), approximate)).result


def _softmax(op_type: type[nf.SoftmaxOp | nf.LogSoftmaxOp]) -> Handler:
    def handle(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
        dtype = a.get("dtype")
        if dtype is not None and not dtype.is_floating_point:
            raise _Unsupported(f"{op_type.name.removeprefix('nf.')} into {dtype}")
        if a.get("half_to_float"):
            raise _Unsupported(f"{op_type.name.removeprefix('nf.')} with half_to_float")
        return imp.emit(op_type(imp.tensor(a["self"]), int(a["dim"]))).result

    handle.__doc__ = f"One ``{op_type.name}`` over ``dim`` (a float ``dtype`` is the import's)."
    return handle


def _relu6(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    return imp.emit(nf.ClampOp(imp.tensor(a["self"]), 0.0, 6.0)).result


def _hardtanh(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x = imp.tensor(a["self"])
    return imp.emit(nf.ClampOp(x, float(a["min_val"]), float(a["max_val"]))).result


def _clamp(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    lo = None if a["min"] is None else float(a["min"])
    hi = None if a["max"] is None else float(a["max"])
    return imp.emit(nf.ClampOp(imp.tensor(a["self"]), lo, hi)).result


def _leaky_relu(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    return imp.emit(nf.LeakyReluOp(imp.tensor(a["self"]), float(a["negative_slope"]))).result


def _prelu(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x, slope = imp.tensor(a["self"]), imp.tensor(a["weight"])
    if len(nf.tensor_shape(slope)) != 1:
        slope = imp.emit(nf.ReshapeOp(slope, [math.prod(nf.tensor_shape(slope))])).result
    return imp.emit(nf.PReluOp(x, slope)).result


def _max_pool(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x = imp.tensor(a["self"])
    n = imp.rank(x) - 2
    kernel = _ints(a["kernel_size"], n)
    strides = _ints(a["stride"], n) if a["stride"] else kernel
    pads = _ints(a["padding"], n)
    op = nf.MaxPoolOp(
        x,
        kernel,
        strides=_unless(strides, 1),
        pads=_unless(pads * 2, 0),
        dilations=_unless(_ints(a["dilation"], n), 1),
        ceil_mode=bool(a["ceil_mode"]),
    )
    return imp.emit(op).result


def _max_pool_with_indices(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``(output, indices)``: 2-D pooling without padding, dilation or ceil mode gives its
    indices as ``nf.max_pool_indices`` (dropped unless read, by ``nf.max_unpool``); other
    pools' indices have no nf equivalent."""
    y = _max_pool(imp, node, a)
    x = imp.tensor(a["self"])
    n = imp.rank(x) - 2
    kernel = _ints(a["kernel_size"], n)
    strides = _ints(a["stride"], n) if a["stride"] else kernel
    plain = not any(_ints(a["padding"], n)) and set(_ints(a["dilation"], n)) == {1}
    if n != 2 or not plain or a["ceil_mode"]:
        return [y, None]  # type: ignore[list-item]
    return [y, imp.emit(nf.MaxPoolIndicesOp(x, kernel, strides)).result]  # type: ignore[list-item]


def _max_unpool(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``MaxUnpool2d`` by the indices of ``MaxPool2d(return_indices=True)`` (a 2-D pool
    without padding, dilation or ceil mode): nf.max_unpool to torch's result size."""
    if a["indices"] is None or not isinstance(imp.values.get(a["indices"]), SSAValue):
        raise _Unsupported("max_unpool2d by indices that are not a plain 2-D max pool's")
    x, indices = imp.tensor(a["self"]), imp.tensor(a["indices"])
    size = imp.result_type(node).get_shape()[2:]
    return imp.emit(nf.MaxUnpoolOp(x, indices, size)).result


def _embedding(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``nn.Embedding``/``F.embedding`` by runtime indices (an integer input of the program):
    nf.embedding. ``padding_idx`` only changes training (its row gets no gradient), so it is
    accepted; ``max_norm`` renormalises rows in place and is refused (``aten.embedding_renorm_``)."""
    indices = imp.values.get(a["indices"])
    if not isinstance(indices, SSAValue) or not isinstance(indices, BlockArgument):
        raise _Unsupported(
            "embedding by indices that are not an integer input of the program (computed or "
            "constant indices have no nf form)"
        )
    table = imp.tensor(a["weight"])
    return imp.emit(nf.EmbeddingOp(indices, table)).result


def _embedding_renorm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``max_norm`` rescales the looked-up rows of the table in place at every call: the table
    then depends on the inputs seen so far, which no constant-table program holds."""
    raise _Unsupported(
        "embedding with max_norm (rows renormalised in place at each call: the table is "
        "state, not a constant); export the model with max_norm=None"
    )


def _avg_pool(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x = imp.tensor(a["self"])
    n = imp.rank(x) - 2
    kernel = _ints(a["kernel_size"], n)
    strides = _ints(a["stride"], n) if a["stride"] else kernel
    op = nf.AvgPoolOp(
        x,
        kernel,
        strides=_unless(strides, 1),
        pads=_unless(_ints(a["padding"], n) * 2, 0),
        ceil_mode=bool(a["ceil_mode"]),
        count_include_pad=bool(a["count_include_pad"]),
        divisor_override=a.get("divisor_override"),
    )
    return imp.emit(op).result


def _adaptive_avg_pool(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x = imp.tensor(a["self"])
    size = _ints(a["output_size"], imp.rank(x) - 2)
    return imp.emit(nf.AdaptiveAvgPoolOp(x, size)).result


def _adaptive_max_pool(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``(output, indices)``, the indices unused. torch's window ``j`` of an ``L -> o`` dim
    is ``[floor(j L / o), ceil((j + 1) L / o))``: when ``o`` divides ``L`` that is a max pool
    with kernel = stride = ``L / o``; when ``L`` divides ``o`` it is one element, index
    ``floor(j L / o)``, which is nearest upsampling. Other sizes have windows of varying
    size and overlap, and are refused."""
    x = imp.tensor(a["self"])
    spatial = nf.tensor_shape(x)[2:]
    out = _ints(a["output_size"], len(spatial))
    kernel: list[int] = []
    for length, o in zip(spatial, out):
        if length == DYNAMIC_INDEX:
            raise _Unsupported("adaptive max pooling of a dynamic spatial dim")
        if length % o == 0:
            kernel.append(length // o)
        elif o % length == 0:
            kernel.append(1)
        else:
            raise _Unsupported(
                f"adaptive max pooling of {length} to {o} (windows of varying size; only an "
                "output size dividing the input size, or a multiple of it, is a max pool)"
            )
    y = x
    if any(k != 1 for k in kernel):
        y = imp.emit(nf.MaxPoolOp(x, kernel, strides=_unless(kernel, 1))).result
    if list(nf.tensor_shape(y)[2:]) != list(out):
        y = imp.emit(nf.UpsampleNearestOp(y, out)).result
    return [y, None]  # type: ignore[return-value]


def _mean(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """A mean over all spatial dims (``x.mean((2, 3))``) is a global average pool. A mean over
    other dims (``x.mean(1)`` on tokens ``[B, N, C]``) is one too, after moving the reduced
    dims last and flattening the rest to ``[B, K, L]``: the same exact integer average at nh.
    The dynamic batch dim is never reduced (rows must stay independent); a static dim 0 is
    (``[1, K, L]``). The mean of a 0-d tensor (over its dim -1 or 0, as torch allows) is it."""
    x = imp.tensor(a["self"])
    rank = imp.rank(x)
    if rank == 0:
        return x
    dims = sorted({_axis(d, rank) for d in (a["dim"] or range(rank))})
    if rank >= 3 and dims == list(range(2, rank)):
        y = imp.emit(nf.AdaptiveAvgPoolOp(x, [1] * (rank - 2))).result
        if a["keepdim"]:
            return y
        return imp.emit(nf.ReshapeOp(y, imp.result_type(node).get_shape())).result
    shape = nf.tensor_shape(x)
    if 0 in dims and shape[0] == DYNAMIC_INDEX:
        raise _Unsupported(
            f"mean over dims {a['dim']} (the batch dim 0 cannot be reduced: it is dynamic; "
            "import with dynamic_batch=False if dim 0 is not a batch)"
        )
    lead = [] if 0 in dims else [0]
    kept = [d for d in range(1, rank) if d not in dims]
    if any(shape[d] == DYNAMIC_INDEX for d in dims):
        raise _Unsupported(f"mean over dims {a['dim']}, one of them dynamic")
    if any(shape[d] == DYNAMIC_INDEX for d in kept):
        # A dynamic dim kept (the batch moved from dim 0, as torch.stack(...).mean(0) leaves
        # it): no flattening into [B, K, L]; the sum over the static dims, times 1/n.
        y = reductions.mean_value(imp, x, dims)
        if a["keepdim"]:
            return y
        return imp.emit(nf.ReshapeOp(y, imp.result_type(node).get_shape())).result
    perm = [*lead, *kept, *dims]
    if perm != list(range(rank)):
        x = imp.emit(nf.TransposeOp(x, perm)).result
    batch = shape[0] if lead else 1
    flat = [batch, math.prod(shape[d] for d in kept), math.prod(shape[d] for d in dims)]
    x = imp.emit(nf.ReshapeOp(x, flat)).result
    y = imp.emit(nf.AdaptiveAvgPoolOp(x, [1])).result
    return imp.emit(nf.ReshapeOp(y, imp.result_type(node).get_shape())).result


def _glu(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``glu(x, dim) = a * sigmoid(b)`` with ``a, b`` the two halves of ``x`` along ``dim``."""
    x = imp.tensor(a["self"])
    axis = _axis(int(a["dim"]), imp.rank(x))
    length = nf.tensor_shape(x)[axis]
    if length == DYNAMIC_INDEX or length % 2:
        raise _Unsupported(f"glu over dim {axis} of length {length} (needs a static even one)")
    first, second = imp.emit(nf.SplitOp(x, axis, [length // 2, length // 2])).results
    gate = imp.emit(nf.SigmoidOp(second)).result
    return imp.emit(nf.MulOp(first, gate)).result


def _weight_norm(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``_weight_norm(v, g, dim) = g * v / ||v||`` (the norm over every dim but ``dim``; over
    all dims when ``dim`` is -1) of parameters is a constant weight: folded here, in float64
    and then cast to ``v``'s dtype. Weights computed at run time have no nf form."""
    v, g = imp.values.get(a["v"]), imp.values.get(a["g"])
    if not isinstance(v, _TorchConstant) or not isinstance(g, _TorchConstant):
        raise _Unsupported(
            "weight norm of tensors computed at run time (only parameters are folded)"
        )
    v64, g64 = v.tensor.detach().double(), g.tensor.detach().double()
    dim = int(a["dim"])
    if dim == -1:
        norm = v64.norm()
    else:
        dim = _axis(dim, v64.ndim)
        others = [d for d in range(v64.ndim) if d != dim]
        norm = v64.norm(dim=others, keepdim=True) if others else v64.abs()
    folded = (v64 * (g64 / norm)).to(v.tensor.dtype)
    return _TorchConstant(folded, f"{v.name}.weight_norm")


def _roll(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``torch.roll`` by constant shifts: one nf.gather per rolled dim, ``out[i] = x[(i - s)
    mod n]`` (data movement at every level). A roll of the flattened tensor (no ``dims``) and
    a roll along the dynamic batch dim are refused."""
    x = imp.tensor(a["self"])
    rank = imp.rank(x)
    shifts, dims = list(a["shifts"]), list(a["dims"] or [])
    if not dims:
        raise _Unsupported("roll of the flattened tensor (no dims)")
    for shift, dim in zip(shifts, dims):
        axis = _axis(int(dim), rank)
        length = nf.tensor_shape(x)[axis]
        if length == DYNAMIC_INDEX:
            raise _Unsupported(f"roll along the dynamic dim {axis}")
        if int(shift) % length:
            indices = [(i - int(shift)) % length for i in range(length)]
            x = imp.emit(nf.GatherOp(x, axis, indices)).result
    return x


def _cat(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    elt = imp.element_type(node)
    inputs = [imp.tensor(t, elt) for t in a["tensors"]]
    axis = _axis(int(a["dim"]), imp.rank(inputs[0]))
    if len(inputs) == 1:
        return inputs[0]
    return imp.emit(nf.ConcatOp(inputs, axis)).result


def _split(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """split/split_with_sizes/chunk: the piece sizes are read from torch's meta."""
    x = imp.tensor(a["self"])
    axis = _axis(int(a["dim"]), imp.rank(x))
    sizes = [_meta_shape(v)[axis] for v in node.meta["val"]]
    if DYNAMIC_INDEX in sizes:
        raise _Unsupported(f"splitting the dynamic dim {axis}")
    op = imp.emit(nf.SplitOp(x, axis, sizes))
    return list(op.results)


def _slice(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """A full slice is dropped; ``x[a:b]`` with step 1 is the middle piece of an nf.split;
    ``x[a:b:s]`` is an nf.gather of those rows (data movement at every level; to the end of
    the dim with ``a < s`` it streams, YOLOv5's Focus is four of them concatenated)."""
    x = imp.tensor(a["self"])
    shape = nf.tensor_shape(x)
    axis = _axis(int(a["dim"]), len(shape))
    length = shape[axis]
    start = 0 if a["start"] is None else int(a["start"])
    end = None if a["end"] is None or a["end"] >= 2**62 else int(a["end"])
    step = int(a["step"])
    if start == 0 and end is None and step == 1:
        return x
    if length == DYNAMIC_INDEX:
        raise _Unsupported(f"slicing the dynamic dim {axis}")
    start, stop, _ = slice(start, end).indices(length)
    if step != 1:
        return imp.emit(nf.GatherOp(x, axis, list(range(start, stop, step)))).result
    return _take_range(imp, x, axis, start, stop)


def _select(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``x[..., i, ...]``: an nf.split piece of length 1, then a reshape that drops the dim."""
    x = imp.tensor(a["self"])
    shape = nf.tensor_shape(x)
    axis = _axis(int(a["dim"]), len(shape))
    if shape[axis] == DYNAMIC_INDEX:
        raise _Unsupported(f"selecting from the dynamic dim {axis}")
    index = int(a["index"]) % shape[axis]
    piece = _take_range(imp, x, axis, index, index + 1)
    return imp.emit(nf.ReshapeOp(piece, imp.result_type(node).get_shape())).result


def _take_range(imp: _Importer, x: SSAValue, axis: int, start: int, stop: int) -> SSAValue:
    length = nf.tensor_shape(x)[axis]
    if (start, stop) == (0, length):
        return x
    if stop <= start:  # an empty range (``x[:, :0]``): a piece of length 0
        return imp.emit(nf.SplitOp(x, axis, [0, length])).results[0]
    sizes = [s for s in (start, stop - start, length - stop) if s > 0]
    op = imp.emit(nf.SplitOp(x, axis, sizes))
    return op.results[1 if start > 0 else 0]


def _reshape(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """view/reshape/flatten/squeeze/unsqueeze: one nf.reshape to torch's result shape."""
    const = imp.values.get(node.args[0])
    if isinstance(const, _TorchConstant) and not const.tensor.dtype.is_floating_point:
        # an integer constant (an index buffer) stays a constant, so indexing by it gathers
        shape = _meta_shape(node.meta["val"])
        return _TorchConstant(const.tensor.reshape(shape), f"{const.name}.{node.name}")
    x = imp.tensor(node.args[0])
    target = imp.result_type(node)
    if x.type == target:
        return x
    return imp.emit(nf.ReshapeOp(x, target.get_shape())).result


def _permute(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x = imp.tensor(a["self"])
    rank = imp.rank(x)
    perm = [_axis(int(d), rank) for d in a["dims"]]
    return imp.emit(nf.TransposeOp(x, perm)).result


def _transpose(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    x = imp.tensor(a["self"])
    rank = imp.rank(x)
    d0, d1 = _axis(int(a["dim0"]), rank), _axis(int(a["dim1"]), rank)
    if d0 == d1:
        return x
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    return imp.emit(nf.TransposeOp(x, perm)).result


def _t(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``x.t()``: swaps the two dims of a matrix; 0-D and 1-D tensors are unchanged."""
    x = imp.tensor(a["self"])
    if imp.rank(x) < 2:
        return x
    return imp.emit(nf.TransposeOp(x, [1, 0])).result


_PAD_MODES = {
    "constant": nf.PadMode.CONSTANT,
    "reflect": nf.PadMode.REFLECT,
    "replicate": nf.PadMode.EDGE,
}


def _pad(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """constant_pad_nd and pad: torch lists (begin, end) pairs from the last dim backwards;
    nf lists all begins, then all ends, from the first dim."""
    x = imp.tensor(a["self"])
    rank = imp.rank(x)
    mode = a.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise _Unsupported(f"padding mode {mode!r} (supported: {', '.join(_PAD_MODES)})")
    pairs = list(a["pad"])
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pairs) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = int(pairs[2 * i]), int(pairs[2 * i + 1])
    value = 0.0 if a["value"] is None else float(a["value"])
    return imp.emit(nf.PadOp(x, [*begins, *ends], _PAD_MODES[mode], value)).result


def _nearest_sources(length: int, out: int, ratio: np.float32) -> list[int]:
    """Input index of each output of a nearest resize in torch's float32 arithmetic."""
    if out in (length, 2 * length):
        return [j * length // out for j in range(out)]
    return [min(int(np.floor(np.float32(j) * ratio)), length - 1) for j in range(out)]


def _upsample_nearest(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """nf.upsample_nearest resizes to the static result size, reading index
    ``floor(j * in / out)``. torch reads ``floor(j / scale)`` when given a scale, so a scale
    is accepted only where both pick the same pixels (always for integer scales)."""
    x = imp.tensor(node.args[0])
    in_spatial = nf.tensor_shape(x)[2:]
    out_spatial = imp.result_type(node).get_shape()[2:]
    if DYNAMIC_INDEX in (*in_spatial, *out_spatial):
        raise _Unsupported("nearest upsampling of dynamic spatial dims")
    scales = a.get("scale_factors")
    if scales is None:
        scales = [a.get(k) for k in ("scales", "scales_d", "scales_h", "scales_w") if k in a]
    for i, (length, out) in enumerate(zip(in_spatial, out_spatial)):
        scale = scales[i] if scales and i < len(scales) else None
        if scale is None:
            continue
        by_size = _nearest_sources(length, out, np.float32(length) / np.float32(out))
        by_scale = _nearest_sources(length, out, np.float32(1.0 / scale))
        if by_size != by_scale:
            raise _Unsupported(
                f"scale factor {scale} picks other pixels than size {length} -> {out}; "
                "pass an output size instead"
            )
    return imp.emit(nf.UpsampleNearestOp(x, out_spatial)).result


def _pixel_shuffle(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """pixel_shuffle is DepthToSpace in CRD mode; pixel_unshuffle its inverse."""
    x = imp.tensor(a["self"])
    if "upscale_factor" in a:
        return imp.emit(nf.DepthToSpaceOp(x, int(a["upscale_factor"]))).result
    return imp.emit(nf.SpaceToDepthOp(x, int(a["downscale_factor"]))).result


def _channel_shuffle(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """channel_shuffle(g) as torch defines it: view ``[N, g, C/g, *S]``, swap dims 1 and 2,
    view back (a decomposition: a channel permutation, data movement at every level)."""
    x = imp.tensor(a["self"])
    shape = nf.tensor_shape(x)
    g = int(a["groups"])
    if shape[1] == DYNAMIC_INDEX or g <= 0 or shape[1] % g:
        raise _Unsupported(f"channel_shuffle of {shape[1]} channels into {g} groups")
    split = imp.emit(nf.ReshapeOp(x, (shape[0], g, shape[1] // g, *shape[2:]))).result
    perm = [0, 2, 1, *range(3, len(shape) + 1)]
    swapped = imp.emit(nf.TransposeOp(split, perm)).result
    return imp.emit(nf.ReshapeOp(swapped, shape)).result


_FILLS = {"zeros_like": 0.0, "ones_like": 1.0, "ones": 1.0, "new_zeros": 0.0, "new_ones": 1.0}


def _fill(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``ones``/``full``/``zeros_like``/``new_ones``... of a shape with a dynamic dim (a static
    one is folded at import): one value at every element, so a constant with 1 at the dynamic
    dims, expanded to the tensor those dims are read from (``ones(x.shape[0], T)``) or, for
    ``*_like(x)``, to ``x``."""
    kind = str(node.target).split(".")[1]
    value = float(a["fill_value"]) if "fill_value" in a else _FILLS[kind]
    shape = imp.result_type(node).get_shape()
    if DYNAMIC_INDEX not in shape:  # the fold left it: too large, say why
        raise _Unsupported(imp.fold.why_not_folded(node) or "a static fill that did not fold")
    one = imp.fill(value, [1 if d == DYNAMIC_INDEX else d for d in shape], imp.element_type(node))
    if kind.endswith("_like"):
        return _expand_to(imp, one, shape, imp.tensor(a["self"]))
    return _expand_to(imp, one, shape, _shape_source(imp, a["size"], shape))


def _type_as(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``x.type_as(y)`` is ``x.to(y.dtype)``: the cast handler with ``y``'s dtype (``y`` is
    read for its dtype only; an input-independent ``x`` was folded at import)."""
    other = a["other"].meta["val"] if isinstance(a["other"], fx.Node) else None
    dtype = other.dtype if isinstance(other, torch.Tensor) else None
    cast = ATEN_HANDLERS["aten._to_copy.default"]
    return cast(imp, node, {"self": a["self"], "dtype": dtype})


def _expand(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """expand (and ``copy``'s broadcast): one nf.expand to torch's result shape. A size that
    is a SymInt read by ``sym_size(t, i)`` at the dim it sets (the class token's
    ``expand(x.shape[0], -1, -1)`` to the dynamic batch) names ``t`` as the shape source."""
    x = imp.tensor(a["self"], imp.element_type(node))
    shape = imp.result_type(node).get_shape()
    grown = expand_grown(nf.tensor_shape(x), shape)
    return _expand_to(imp, x, shape, _shape_source(imp, a["size"], shape, grown))


def _shape_source(
    imp: _Importer, sizes: Sequence[Any], shape: Sequence[int], grown: Sequence[int] | None = None
) -> SSAValue | None:
    """The tensor whose dims the symbolic sizes of ``expand`` read, at the same index (None
    when no size is read from a tensor; refused when they read several, or another dim).
    Only the ``grown`` dims (all dynamic ones by default) take a size: a dynamic dim the
    input has already (``[B*nW, 4, 1]`` expanded to ``[B*nW, 4, C]``) keeps its own."""
    sources: set[fx.Node] = set()
    for i, size in enumerate(sizes):
        if not isinstance(size, fx.Node) or shape[i] != DYNAMIC_INDEX:
            continue
        if grown is not None and i not in grown:
            continue
        if str(size.target) != "aten.sym_size.int" or int(size.args[1]) % len(shape) != i:  # type: ignore[arg-type]
            raise _Unsupported(
                f"expanding dim {i} to the size '{size.name}' (nanoir takes a dynamic size "
                f"only as dim {i} of a tensor, such as x.shape[0] for dim 0); import with "
                "dynamic_batch=False"
            )
        source = size.args[0]
        assert isinstance(source, fx.Node)
        sources.add(source)
    if len(sources) > 1:
        raise _Unsupported(f"expanding to the sizes of {len(sources)} tensors (one at most)")
    return imp.tensor(sources.pop()) if sources else None


def _expand_to(
    imp: _Importer, x: SSAValue, shape: Sequence[int], like: SSAValue | None = None
) -> SSAValue:
    src = nf.tensor_shape(x)
    if tuple(src) == tuple(shape):
        return x
    grown = expand_grown(src, shape)
    if grown and like is None:
        raise _Unsupported(
            f"expanding {_shape_text(src)} to the dynamic dim of {_shape_text(shape)} (its "
            "size is known only at run time, and not read from a tensor by sym_size); import "
            "with dynamic_batch=False"
        )
    if like is not None and any(
        i >= imp.rank(like) or nf.tensor_shape(like)[i] != DYNAMIC_INDEX for i in grown
    ):
        raise _Unsupported(
            f"expanding {_shape_text(src)} to {_shape_text(shape)} with the sizes of a tensor of "
            f"shape {_shape_text(nf.tensor_shape(like))}"
        )
    return imp.emit(nf.ExpandOp(x, shape, like if grown else None)).result


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join("?" if d == DYNAMIC_INDEX else str(d) for d in shape) + "]"


def _copy(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``aten.copy(self, src)`` (what torch.export makes of ``x[:, :c] = y``, before a
    slice_scatter): ``src`` broadcast to ``self``'s shape."""
    src = imp.tensor(a["src"], imp.element_type(node))
    return _expand_to(imp, src, imp.result_type(node).get_shape())


def _index(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``x[..., idx]`` with one constant integer index tensor: nf.gather along its dim (then
    a reshape for a multi-dim ``idx``). Indexing a constant is folded by torch itself;
    indices computed at run time are refused: nf.gather's indices are part of the program."""
    elt = imp.element_type(node)
    source, indices = a["self"], list(a["indices"])
    consts = [imp.values.get(i) if isinstance(i, fx.Node) else None for i in indices]
    if isinstance(imp.values.get(source), _TorchConstant) and all(
        i is None or isinstance(c, _TorchConstant) for i, c in zip(indices, consts)
    ):
        base = imp.values[source].tensor  # type: ignore[union-attr]
        folded = torch.ops.aten.index.Tensor(base, [c and c.tensor for c in consts])  # type: ignore[union-attr]
        return _TorchConstant(folded, f"{imp.values[source].name}[{node.name}]")  # type: ignore[union-attr]
    used = [k for k, i in enumerate(indices) if i is not None]
    if len(used) != 1:
        raise _Unsupported(f"indexing with {len(used)} index tensors (nf.gather takes one)")
    axis, idx = used[0], indices[used[0]]
    const = consts[axis]
    if not isinstance(const, _TorchConstant):
        raise _Unsupported(
            f"index tensor '{getattr(idx, 'name', idx)}' is computed at run time; nanoir "
            "gathers with constant indices only (a buffer or a literal list)"
        )
    if const.tensor.dtype.is_floating_point or const.tensor.dtype == torch.bool:
        raise _Unsupported(f"index tensor '{const.name}' of dtype {const.tensor.dtype}")
    x = imp.tensor(source, elt)
    size = nf.tensor_shape(x)[axis]
    flat = [int(i) for i in const.tensor.reshape(-1).tolist()]
    if size == DYNAMIC_INDEX or any(not -size <= i < size for i in flat):
        raise _Unsupported(f"index tensor '{const.name}' out of range for dim {axis}")
    gathered = imp.emit(nf.GatherOp(x, axis, [i % size for i in flat])).result
    target = imp.result_type(node)
    if gathered.type == target:
        return gathered
    return imp.emit(nf.ReshapeOp(gathered, target.get_shape())).result


def _unbind(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """unbind(dim): an nf.split into pieces of 1, each reshaped without the dim."""
    x = imp.tensor(a["self"])
    shape = nf.tensor_shape(x)
    axis = _axis(int(a["dim"]), len(shape))
    if shape[axis] == DYNAMIC_INDEX:
        raise _Unsupported(f"unbinding the dynamic dim {axis}")
    pieces = (
        list(imp.emit(nf.SplitOp(x, axis, [1] * shape[axis])).results) if shape[axis] > 1 else [x]
    )
    dropped = [d for i, d in enumerate(shape) if i != axis]
    return [imp.emit(nf.ReshapeOp(p, dropped)).result for p in pieces]


def _slice_scatter(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """slice_scatter(x, src, dim, start, end) (``x[:, a:b] = ...`` and ``+=`` after
    functionalization): the pieces of ``x`` around the slice and ``src`` joined by nf.concat,
    whose lowering aligns parts of different exponents by exact shifts. Writing back the
    slice just read is ``x`` itself."""
    elt = imp.element_type(node)
    x, src = imp.tensor(a["self"], elt), imp.tensor(a["src"], elt)
    shape = nf.tensor_shape(x)
    axis = _axis(int(a["dim"]), len(shape))
    length = shape[axis]
    start = 0 if a["start"] is None else int(a["start"])
    end = None if a["end"] is None or a["end"] >= 2**62 else int(a["end"])
    if (start, end, int(a["step"])) == (0, None, 1) and src.type == x.type:
        return src  # the whole dim (torch.export writes one along a dynamic batch)
    if int(a["step"]) != 1 or length == DYNAMIC_INDEX:
        raise _Unsupported("slice_scatter with a step other than 1 or along a dynamic dim")
    start, stop, _ = slice(start, end).indices(length)
    if stop <= start:
        return x
    owner = src.owner if isinstance(src, OpResult) else None
    if isinstance(owner, nf.SplitOp) and owner.input == x and owner.axis.value.data == axis:
        sizes = list(nf.array_values(owner.sizes) or ())
        begin = sum(sizes[: src.index])  # type: ignore[union-attr]
        if (begin, begin + sizes[src.index]) == (start, stop):  # type: ignore[union-attr]
            return x
    if (start, stop) == (0, length):
        return src
    sizes = [s for s in (start, stop - start, length - stop) if s > 0]
    split = next(  # the split that read the slice, if any: its pieces are all read then
        (
            u.operation
            for u in x.uses
            if isinstance(u.operation, nf.SplitOp)
            and u.operation.axis.value.data == axis
            and list(nf.array_values(u.operation.sizes) or ()) == sizes
        ),
        None,
    )
    pieces = list((split or imp.emit(nf.SplitOp(x, axis, sizes))).results)
    pieces[1 if start > 0 else 0] = src
    return imp.emit(nf.ConcatOp(pieces, axis)).result


def _attention_mask(imp: _Importer, a: dict[str, Any], q: SSAValue, k: SSAValue) -> SSAValue | None:
    """The boolean softmax mask of scaled_dot_product_attention (True = takes part): a
    boolean ``attn_mask``, a float one holding only 0 and -inf, or ``is_causal``'s
    lower-triangular one. Never an additive -inf, which a fake-quant would saturate."""
    given = a.get("attn_mask")
    if given is not None and a.get("is_causal"):
        raise _Unsupported("both attn_mask and is_causal")
    if a.get("is_causal"):
        rows, cols = nf.tensor_shape(q)[-2], nf.tensor_shape(k)[-2]
        if DYNAMIC_INDEX in (rows, cols):
            raise _Unsupported("is_causal with a dynamic sequence length")
        mask = np.tril(np.ones((rows, cols), dtype=bool))
    elif given is None:
        return None
    else:
        const = imp.values.get(given)
        if not isinstance(const, _TorchConstant):
            raise _Unsupported(
                f"attn_mask '{getattr(given, 'name', given)}' is computed at run time; nanoir "
                "takes a constant mask (a buffer)"
            )
        t = const.tensor.detach().cpu()
        if t.dtype == torch.bool:
            mask = t.numpy()
        elif t.dtype.is_floating_point and bool(((t == 0) | (t == -math.inf)).all()):
            mask = (t == 0).numpy()
        else:
            raise _Unsupported(
                f"attn_mask '{const.name}' of dtype {t.dtype} adds values other than 0 and "
                "-inf to the scores (an additive bias); nanoir takes a boolean mask, or a "
                "float one of 0 (takes part) and -inf (masked)"
            )
    op = nf.ConstantOp(numpy_to_dense(mask.astype(np.int8), i1))
    imp.constant_ops.append(op)
    return op.result


def _attention(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """scaled_dot_product_attention as matmul(q, k^T), a mul by the scale (``scale`` or
    1/sqrt(E)), a softmax over the last dim with the mask as its operand, matmul by v: each
    part quantizes and lowers on its own."""
    if float(a.get("dropout_p") or 0.0) != 0.0:
        raise _Unsupported(f"attention dropout (dropout_p={a['dropout_p']}) at inference")
    if a.get("enable_gqa"):
        raise _Unsupported("grouped-query attention (enable_gqa=True)")
    elt = imp.element_type(node)
    q, k, v = (imp.tensor(a[n], elt) for n in ("query", "key", "value"))
    rank, e = imp.rank(q), nf.tensor_shape(q)[-1]
    scale = a.get("scale")
    if scale is None:
        if e == DYNAMIC_INDEX:
            raise _Unsupported("a dynamic embedding dim (the default scale is 1/sqrt(E))")
        scale = 1.0 / math.sqrt(e)
    mask = _attention_mask(imp, a, q, k)
    perm = [*range(imp.rank(k) - 2), imp.rank(k) - 1, imp.rank(k) - 2]
    kt = imp.emit(nf.TransposeOp(k, perm)).result
    scores = imp.emit(nf.MatmulOp(q, kt)).result
    # A named constant, so quantize gives the scale a weight's fake-quant (1/sqrt(E) is no
    # short dyadic number: unquantized it would need a product wider than i32).
    factor = nf.ConstantOp(numpy_to_dense(np.array(float(scale)), elt), name=f"{node.name}.scale")
    factor.result.name_hint = name_hint(f"{node.name}.scale")
    imp.constant_ops.append(factor)
    scaled = imp.emit(nf.MulOp(scores, factor.result)).result
    weights = imp.emit(nf.SoftmaxOp(scaled, rank - 1, mask)).result
    return imp.emit(nf.MatmulOp(weights, v)).result


class _Zeros:
    """``aten.zeros``: an initial state torch creates for a recurrent op (which then takes
    none: its states start at zero); nothing else may read it."""


def _zeros(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    return _Zeros()  # type: ignore[return-value]


_RECURRENT_MODES = {
    "aten.lstm.input": "lstm",
    "aten.gru.input": "gru",
    "aten.rnn_tanh.input": "rnn_tanh",
    "aten.rnn_relu.input": "rnn_relu",
}


def _initial_state(imp: _Importer, arg: Any) -> SSAValue | None:
    """An initial state: None where torch made it with ``aten.zeros``."""
    value = imp.values.get(arg) if isinstance(arg, fx.Node) else None
    if isinstance(value, _Zeros):
        return None
    if isinstance(value, _TorchConstant) and not bool(value.tensor.any()):
        return None  # torch.zeros of a static batch, folded: the states start at zero
    return imp.tensor(arg)


def _recurrent(imp: _Importer, node: fx.Node, a: dict[str, Any]) -> Value:
    """``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (``aten.lstm.input`` and friends) →
    ``nf.recurrent``; inter-layer dropout is a no-op in eval mode. A batch-first layer keeps
    the dynamic batch; a model whose input's dim 0 is not its batch (a time-major sequence,
    initial states ``[L*D, N, H]`` as inputs) needs ``dynamic_batch=False``: torch.export
    specialises the dim :func:`export` marks as the batch there."""
    mode = _RECURRENT_MODES[str(node.target)]
    if a["train"]:
        raise _Unsupported("a recurrent layer in training mode (export the model in eval mode)")
    x = imp.tensor(a["input"])
    meta = node.meta["val"]
    hidden = int(meta[1].shape[-1])
    layout = RecurrentLayout(
        mode,
        hidden,
        int(a["num_layers"]),
        bool(a["bidirectional"]),
        bool(a["batch_first"]),
        bool(a["has_biases"]),
    )
    if imp.rank(x) != 3:
        raise _Unsupported(
            f"an unbatched {mode} input (rank {imp.rank(x)}); nf.recurrent takes [T, N, F] "
            "or [N, T, F]"
        )
    params = list(a["params"])
    if mode == "lstm" and len(params) == layout.layers * layout.dirs * (layout.per_cell + 1):
        raise _Unsupported(
            "nn.LSTM with proj_size > 0: the projected hidden state (w_hr) is a second matmul "
            "inside the cell, which nf.recurrent does not have"
        )
    weights = [imp.tensor(p) for p in params]
    hx = a["hx"]
    h_arg, c_arg = (hx[0], hx[1]) if mode == "lstm" else (hx, None)
    h0 = _initial_state(imp, h_arg)
    c0 = None if c_arg is None else _initial_state(imp, c_arg)
    types = [_tensor_type(v) for v in meta]
    op = imp.emit(nf.RecurrentOp(x, weights, layout, types, h0, c0))
    return list(op.results)


ATEN_HANDLERS: dict[str, Handler] = {
    # convolution and dense layers
    "aten.conv1d.default": _conv,
    "aten.conv1d.padding": _conv,
    "aten.conv2d.default": _conv,
    "aten.conv2d.padding": _conv,
    "aten.convolution.default": _conv,
    "aten.conv_transpose1d.default": _conv_transpose,
    "aten.conv_transpose2d.input": _conv_transpose,
    "aten.linear.default": _linear,
    "aten.matmul.default": _matmul,
    "aten.mm.default": _matmul,
    "aten.bmm.default": _matmul,
    # normalization
    "aten.batch_norm.default": _batch_norm,
    "aten.layer_norm.default": _layer_norm,
    "aten.native_layer_norm.default": _native_layer_norm,
    "aten.group_norm.default": _group_norm,
    "aten.native_group_norm.default": _native_group_norm,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm_no_training,
    # elementwise arithmetic
    "aten.add.Tensor": _binary,
    "aten.add.Scalar": _binary,
    "aten.sub.Tensor": _binary,
    "aten.sub.Scalar": _binary,
    "aten.rsub.Tensor": _binary,
    "aten.rsub.Scalar": _binary,
    "aten.mul.Tensor": _binary,
    "aten.maximum.default": _binary,
    "aten.minimum.default": _binary,
    "aten.mul.Scalar": _binary,
    "aten.div.Tensor": _binary,
    "aten.div.Scalar": _binary,
    "aten.div.Tensor_mode": _binary,
    # activations
    "aten.relu.default": _unary(nf.ReluOp),
    "aten.sigmoid.default": _unary(nf.SigmoidOp),
    "aten.tanh.default": _unary(nf.TanhOp),
    "aten.hardsigmoid.default": _unary(nf.HardSigmoidOp),
    "aten.hardswish.default": _unary(nf.HardSwishOp),
    "aten.silu.default": _unary(nf.SiluOp),
    "aten.gelu.default": _gelu,
    "aten.softmax.int": _softmax(nf.SoftmaxOp),
    "aten._softmax.default": _softmax(nf.SoftmaxOp),
    "aten.log_softmax.int": _softmax(nf.LogSoftmaxOp),
    "aten._log_softmax.default": _softmax(nf.LogSoftmaxOp),
    "aten.relu6.default": _relu6,
    "aten.hardtanh.default": _hardtanh,
    "aten.clamp.default": _clamp,
    "aten.leaky_relu.default": _leaky_relu,
    "aten.prelu.default": _prelu,
    # pooling
    "aten.max_pool1d.default": _max_pool,
    "aten.max_pool2d.default": _max_pool,
    "aten.max_pool2d_with_indices.default": _max_pool_with_indices,
    "aten.max_unpool2d.default": _max_unpool,
    "aten.embedding.default": _embedding,
    "aten.embedding_renorm_.default": _embedding_renorm,
    "aten.embedding_renorm.default": _embedding_renorm,
    "aten.avg_pool1d.default": _avg_pool,
    "aten.avg_pool2d.default": _avg_pool,
    "aten.adaptive_avg_pool1d.default": _adaptive_avg_pool,
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool,
    "aten._adaptive_avg_pool2d.default": _adaptive_avg_pool,
    "aten.adaptive_max_pool1d.default": _adaptive_max_pool,
    "aten.adaptive_max_pool2d.default": _adaptive_max_pool,
    "aten.mean.dim": _mean,
    "aten.glu.default": _glu,
    "aten._weight_norm.default": _weight_norm,
    "aten.roll.default": _roll,
    # data movement
    "aten.cat.default": _cat,
    "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split,
    "aten.chunk.default": _split,
    "aten.slice.Tensor": _slice,
    "aten.select.int": _select,
    "aten.view.default": _reshape,
    "aten.reshape.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.flatten.using_ints": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.squeeze.default": _reshape,
    "aten.squeeze.dim": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.permute.default": _permute,
    "aten.transpose.int": _transpose,
    "aten.t.default": _t,
    "aten.constant_pad_nd.default": _pad,
    "aten.pad.default": _pad,
    "aten.upsample_nearest1d.vec": _upsample_nearest,
    "aten.upsample_nearest2d.vec": _upsample_nearest,
    "aten.upsample_nearest1d.default": _upsample_nearest,
    "aten.upsample_nearest2d.default": _upsample_nearest,
    "aten.upsample_nearest3d.vec": _upsample_nearest,
    "aten.upsample_nearest3d.default": _upsample_nearest,
    "aten.pixel_shuffle.default": _pixel_shuffle,
    "aten.pixel_unshuffle.default": _pixel_shuffle,
    "aten.channel_shuffle.default": _channel_shuffle,
    "aten.native_channel_shuffle.default": _channel_shuffle,
    "aten.expand.default": _expand,
    **{
        f"aten.{fill}.default": _fill
        for fill in ("zeros_like", "ones_like", "full_like", "ones", "full", "new_ones")
    },
    "aten.new_zeros.default": _fill,
    "aten.type_as.default": _type_as,
    "aten.new_full.default": _fill,
    "aten.copy.default": _copy,
    "aten.index.Tensor": _index,
    "aten.unbind.int": _unbind,
    "aten.slice_scatter.default": _slice_scatter,
    "aten.scaled_dot_product_attention.default": _attention,
    # recurrent layers (their zero initial states: aten.zeros)
    "aten.lstm.input": _recurrent,
    "aten.gru.input": _recurrent,
    "aten.rnn_tanh.input": _recurrent,
    "aten.rnn_relu.input": _recurrent,
    "aten.zeros.default": _zeros,
    # no-ops at inference
    "aten.dropout.default": _dropout,
    "aten.clone.default": _identity,
    "aten.alias.default": _identity,
    "aten.contiguous.default": _identity,
    "aten.detach.default": _identity,
    "aten.detach_.default": _identity,
    "aten.lift_fresh_copy.default": _identity,
}
"""The handler of each supported ATen overload, by its name (``str(OpOverload)``)."""

# The op families of issue 32 (elementwise math, ...), each a module of its own.
for _new, _old in core_aten.ALIASES.items():
    ATEN_HANDLERS[_new] = ATEN_HANDLERS[_old]
for _family in (math_ops, reductions, movement_ops, resize, core_aten):
    ATEN_HANDLERS.update(_family.HANDLERS)
for _wraps in (reductions.WRAPS, core_aten.WRAPS, products.WRAPS):
    for _name, _wrap in _wraps.items():
        ATEN_HANDLERS[_name] = _wrap(ATEN_HANDLERS[_name])


TAKES_UNBATCHED = frozenset(
    f"aten.{op}.{overload}"
    for op, overload in (
        *((f"conv{n}d", o) for n in (1, 2, 3) for o in ("default", "padding")),
        *((f"conv_transpose{n}d", "input") for n in (2, 3)),
        ("conv_transpose1d", "default"),
        *((f"{p}{n}d", "default") for p in ("max_pool", "avg_pool") for n in (1, 2, 3)),
        *((f"max_pool{n}d_with_indices", "default") for n in (2, 3)),
        *((f"adaptive_{p}_pool{n}d", "default") for p in ("avg", "max") for n in (1, 2, 3)),
        ("_adaptive_avg_pool2d", "default"),
        ("max_unpool2d", "default"),
    )
)
"""Convs and pools that torch also runs on one sample without its batch dim (``[C, L]`` for a
``Conv1d``); the importer gives their handlers a batch of one (``_with_batch_of_one``)."""


def supported_aten_ops() -> list[str]:
    """The ATen ops the frontend converts, sorted."""
    return sorted(ATEN_HANDLERS)


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def _as_tuple(example_inputs: Any) -> tuple[Any, ...]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise ArgumentError(
            "example_inputs must be a tensor or a tuple of tensors, "
            f"got {type(example_inputs).__name__}"
        )
    return tuple(example_inputs)


def export(
    model: torch.nn.Module, example_inputs: Any, *, dynamic_batch: bool = True
) -> torch.export.ExportedProgram:
    """``torch.export`` the model in eval mode and functionalize it (``run_decompositions({})``).

    The modules' training flags are restored afterwards. With ``dynamic_batch``, dim 0 of every
    input is one shared ``Dim("batch")`` (a ``forward(*args)`` gets one per argument it
    gathers); batch-1 examples are doubled first, since torch.export would specialize a
    size-1 dim. When torch.export fails, the error names the cause and the user's line
    (:mod:`nanoir.frontend.export_errors`); with ``dynamic_batch`` it then retries with static
    shapes, and suggests ``dynamic_batch=False`` only if that succeeds.
    """
    if not isinstance(model, torch.nn.Module):
        raise ArgumentError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    scripted = scripted_module(model)
    if scripted is not None:
        raise scripted
    inputs = _as_tuple(example_inputs)
    dynamic_shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch")
        inputs = tuple(
            torch.cat([t, t]) if isinstance(t, torch.Tensor) and t.ndim and t.shape[0] == 1 else t
            for t in inputs
        )
        dynamic_shapes = _batch_shapes(model, inputs, batch)
    # eval() flips every submodule; remember each flag, as some may have been set on their own.
    training = {m: m.training for m in model.modules()}
    model.eval()
    try:
        return _trace(model, inputs, dynamic_shapes)
    except Exception as e:  # torch raises many types here; the message is what matters
        static_helps = False
        if dynamic_batch:
            try:
                _trace(model, _as_tuple(example_inputs), None)
                static_helps = True
            except Exception:  # noqa: BLE001 - any failure means the hint would not help
                pass
        raise export_failure(model, e, static_helps=static_helps) from e
    finally:
        for m, flag in training.items():
            m.training = flag


def _trace(
    model: torch.nn.Module, inputs: tuple[Any, ...], dynamic_shapes: Any
) -> torch.export.ExportedProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch-internal deprecations
        program = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
        return program.run_decompositions({})


def _batch_shapes(model: torch.nn.Module, inputs: tuple[Any, ...], batch: Any) -> Any:
    """torch.export's ``dynamic_shapes`` with dim 0 of every tensor input the batch, shaped
    as ``forward``'s signature (a ``*args`` parameter takes a tuple of specs)."""

    def spec(t: Any) -> Any:
        return {0: batch} if isinstance(t, torch.Tensor) and t.ndim else None

    try:
        bound = inspect.signature(model.forward).bind(*inputs)
    except (TypeError, ValueError):  # torch.export reports the mismatch itself
        return tuple(spec(t) for t in inputs)
    shapes: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            shapes[name] = tuple(spec(t) for t in value)
        else:
            shapes[name] = spec(value)
    return shapes


def import_program(
    program: torch.export.ExportedProgram, *, function_name: str = "main"
) -> ModuleOp:
    """Convert an exported program to an nf module.

    The program must be functional (``run_decompositions`` makes it so, as :func:`export`
    does): in-place ops are not supported, since a later use of a mutated tensor would read
    the value from before the mutation.
    """
    return _Importer(program).run(function_name)


def from_torch(
    model: torch.nn.Module, example_inputs: Any, *, dynamic_batch: bool = True
) -> ModuleOp:
    """Import ``model`` as an nf program: ``builtin.module { func.func @main(...) }``.

    ``example_inputs`` is a tensor or a tuple of tensors (the positional arguments of
    ``forward``). The batch dim (dim 0) of every input is dynamic (``?``) unless
    ``dynamic_batch=False``, in which case the example's shapes are kept. Raises
    :class:`FrontendError` for networks that cannot be imported.
    """
    return import_program(export(model, example_inputs, dynamic_batch=dynamic_batch))
