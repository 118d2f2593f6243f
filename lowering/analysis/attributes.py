"""The stream plan's shapes as IR attributes, for later stages (the `.ne` exporter), and back.

- on the function, ``stream.plan = {mem_dim = 2 : i64, steps = array<i64: 2, 1, 3, 5>}``
  (flat ``dim, step`` pairs);
- on each runtime argument (arg attrs), ``stream.shape = array<i64: -1, 3, 1, 5>``;
- on each runtime op, ``stream.out_s = [array<i64: ...>, ...]`` (one per result) and
  ``stream.mem_s = [array<i64: ...>, ...]`` (one per distinct runtime operand, in operand
  order, as the exporter's caches are), and ``stream.warmup = array<i64: begin, end>`` when
  the op pads along M (the zero rows fed at the start and at the end of a stream).

:func:`write_attributes` writes a :class:`~nanoir.lowering.analysis.plan.BufferPlan`;
:func:`stream_shapes` reads them back into an object with the exporter's ``StreamPlan``
methods (``tensor_shape``, ``cache_shape``), as :class:`BufferPlan` has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nanoir.dialects.nf import int_array
from nanoir.lowering.analysis.graph import cache_operands
from nanoir.lowering.analysis.plan import BufferPlan, find_plan_function
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation, SSAValue

__all__ = [
    "MEM_ATTR",
    "OUT_ATTR",
    "PLAN_ATTR",
    "SHAPE_ATTR",
    "WARMUP_ATTR",
    "StreamShapes",
    "stream_shapes",
    "write_attributes",
]

PLAN_ATTR = "stream.plan"
SHAPE_ATTR = "stream.shape"
OUT_ATTR = "stream.out_s"
MEM_ATTR = "stream.mem_s"
WARMUP_ATTR = "stream.warmup"


def _shape_attr(shape: Sequence[int]) -> DenseArrayBase:
    return int_array(shape)


def write_attributes(plan: BufferPlan) -> None:
    """Record the plan's shapes on the IR (formats in the module docstring)."""
    func = plan.func
    flat = [x for pair in plan.steps for x in pair]
    func.attributes[PLAN_ATTR] = DictionaryAttr(
        {"mem_dim": IntegerAttr(plan.mem_dim, i64), "steps": int_array(flat)}
    )
    block = func.body.block
    arg_attrs = (
        list(func.arg_attrs.data) if func.arg_attrs else [DictionaryAttr({}) for _ in block.args]
    )
    for i, arg in enumerate(block.args):
        t = plan.tensors.get(arg)
        if t is not None:
            arg_attrs[i] = DictionaryAttr({**arg_attrs[i].data, SHAPE_ATTR: _shape_attr(t.shape)})
    func.arg_attrs = ArrayAttr(arg_attrs)
    by_node: dict[Operation, list[DenseArrayBase]] = {}
    for (op, _), c in plan.caches.items():
        by_node.setdefault(op, []).append(_shape_attr(c.shape))
    for op, mems in by_node.items():
        op.attributes[OUT_ATTR] = ArrayAttr(
            [_shape_attr(plan.tensors[r].shape) for r in op.results]
        )
        op.attributes[MEM_ATTR] = ArrayAttr(mems)
        if op in plan.warmup:
            op.attributes[WARMUP_ATTR] = int_array(plan.warmup[op])
        else:
            op.attributes.pop(WARMUP_ATTR, None)


@dataclass(frozen=True)
class StreamShapes:
    """Shapes recorded by the stream-plan pass, with the `.ne` exporter's ``StreamPlan``
    methods: ``export_nanoengine(module, plan=stream_shapes(module))``."""

    tensors: dict[SSAValue, tuple[int, ...]]
    caches: dict[tuple[Operation, SSAValue], tuple[int, ...]]

    def tensor_shape(self, value: SSAValue) -> tuple[int, ...] | None:
        return self.tensors.get(value)

    def cache_shape(
        self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]
    ) -> tuple[int, ...] | None:
        return self.caches.get((node, value))


def _shape_of(attr: Attribute) -> tuple[int, ...]:
    assert isinstance(attr, DenseArrayBase)
    return tuple(int(v) for v in attr.get_values())


def stream_shapes(module: ModuleOp | FuncOp, function: str | None = None) -> StreamShapes | None:
    """The shapes the stream-plan pass wrote on the function, or None if it has not run."""
    func = find_plan_function(module, function)
    if PLAN_ATTR not in func.attributes:
        return None
    tensors: dict[SSAValue, tuple[int, ...]] = {}
    caches: dict[tuple[Operation, SSAValue], tuple[int, ...]] = {}
    block = func.body.block
    arg_attrs = func.arg_attrs.data if func.arg_attrs else ()
    for arg, attrs in zip(block.args, arg_attrs):
        if SHAPE_ATTR in attrs.data:
            tensors[arg] = _shape_of(attrs.data[SHAPE_ATTR])
    runtime: set[SSAValue] = set(block.args)
    for op in block.ops:
        outs, mems = op.attributes.get(OUT_ATTR), op.attributes.get(MEM_ATTR)
        inputs = list(cache_operands(op, runtime))
        if isinstance(outs, ArrayAttr) and isinstance(mems, ArrayAttr):
            tensors.update((r, _shape_of(a)) for r, a in zip(op.results, outs.data))
            caches.update(((op, v), _shape_of(a)) for v, a in zip(inputs, mems.data))
        if inputs:
            runtime.update(op.results)
    return StreamShapes(tensors, caches)
