"""Host islands in integer ONNX (``lower-to-hw{host=true}``): the boundary ops exactly, the
host's nf ops as float ONNX ops, so onnxruntime runs the whole file.

A partitioned program holds nh ops (written by :data:`.ops.OPS`) and, between
``nh.to_host`` and ``nh.from_host``, the nq program's own nf ops (and the fake-quants between
two host ops, and the constants they read). Here, a host value lives in the graph as the
form ``host``: its real values in float32.

- ``nh.to_host``: the codes in float64 times ``2**-exp`` (exact), cast to float32;
- ``nh.from_host``: float64 ``x * 2**exp``, rounded as the fake-quant rounds (``trunc``:
  ``Sign * Floor(Abs)``, ``floor``, ``half_up``: ``Floor(x + 1/2)``, ``half_even``:
  ``Round``), ``Clip`` to the code range (1-bit: ``Where(x >= 0, 1, -1)``): the codes, in the
  ``f64`` form the nh writers read;
- a host nf op: the float writer's own nodes (:func:`nanoir.grammar.onnx.exporter.
  export_onnx_model` of a one-op program whose inputs are the op's host values and whose
  constants are its constant operands), spliced in under fresh names;
- a fake-quant between host ops: ``from_host`` then ``to_host`` (its codes and back);
- a result computed on the host: a float32 graph output.

The engine parts are exact as ever; the host ops run in float32 here (nanoir's executor runs
them in float64, as the nq level does), so where a host value falls on a rounding boundary of
the ``nh.from_host`` after it, onnxruntime's codes may differ from NumPy's by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy, numpy_to_dense
from nanoir.dialects.nf import tensor_shape
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_model
from nanoir.grammar.onnx.integer.common import Writer, refuse
from nanoir.grammar.onnx.integer.graph import ELEM, Graph
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue

__all__ = ["HOST", "host_output", "host_writer"]

HOST_FORM = "host"
F32, F64 = 1, 11


def _exps(value: SSAValue) -> np.ndarray:
    t = value.type
    assert isinstance(t, TensorType) and isinstance(t.encoding, nh.FixedAttr)
    return t.encoding.exp_array(len(t.get_shape()))


def write_to_host(g: Graph, op: nh.ToHostOp) -> None:
    codes = g.get(op.input, "f64")
    scale = g.const(np.ldexp(1.0, -_exps(op.input)), np.float64, g.base(op.result) + "_scale")
    real = g.node("Mul", [codes, scale], g.base(op.result) + "_f64")
    g.put(op.result, HOST_FORM, g.node("Cast", [real], g.base(op.result), to=F32))


def _quantize(
    g: Graph, x: str, base: str, bits: int, mode: str, exps: np.ndarray, signed: bool
) -> str:
    """Float32 reals ``x`` to the codes of ``bits``-bit ``mode`` quantization (float64)."""
    wide = g.node("Cast", [x], base + "_x64", to=F64)
    if bits == 1:
        positive = g.node("GreaterOrEqual", [wide, g.const(0.0, np.float64)], base + "_ge")
        one = g.const(1.0, np.float64)
        return g.node("Where", [positive, one, g.const(-1.0, np.float64)], base + "_codes")
    scaled = g.node("Mul", [wide, g.const(np.ldexp(1.0, exps), np.float64)], base + "_scaled")
    if mode == "trunc":
        magnitude = g.node("Floor", [g.node("Abs", [scaled], base + "_abs")], base + "_floor")
        rounded = g.node("Mul", [g.node("Sign", [scaled], base + "_sign"), magnitude], base + "_r")
    elif mode == "floor":
        rounded = g.node("Floor", [scaled], base + "_r")
    elif mode == "half_up":
        half = g.node("Add", [scaled, g.const(0.5, np.float64)], base + "_half")
        rounded = g.node("Floor", [half], base + "_r")
    else:  # half_even
        rounded = g.node("Round", [scaled], base + "_r")
    lo, hi = quant.qmin(bits, signed=signed), quant.qmax(bits, signed=signed)
    lo_c, hi_c = g.const(float(lo), np.float64), g.const(float(hi), np.float64)
    return g.node("Clip", [rounded, lo_c, hi_c], base + "_codes")


def write_from_host(g: Graph, op: nh.FromHostOp) -> None:
    x = _host(g, op, op.input)
    signed = not nh.is_unsigned(op.result)
    codes = _quantize(
        g, x, g.base(op.result), op.bits.value.data, str(op.rounding.data.value), _exps(op.result),
        signed,
    )  # fmt: skip
    g.put(op.result, "f64", codes)


def _host(g: Graph, op: Operation, value: SSAValue) -> str:
    """``value``'s float32 host form (a host op's result, or a constant it reads)."""
    forms = g.forms.get(value, {})
    if HOST_FORM in forms:
        return forms[HOST_FORM]
    data = constant_value(value)
    if data is None:
        raise refuse(op, "reads a value that has no host form here")
    name = g.const(data.astype(np.float32), np.float32, g.base(value))
    g.put(value, HOST_FORM, name)
    return name


def constant_value(value: SSAValue) -> np.ndarray | None:
    """The float value of a constant a host op reads: an ``nf.constant``, or a fake-quant of
    one (computed with the fake-quant's own function), else None."""
    owner = value.owner
    if isinstance(owner, nf.ConstantOp):
        return np.asarray(dense_to_numpy(owner.value), np.float64)
    if isinstance(owner, FakeQuantOp):
        inner = constant_value(owner.input)
        if inner is None:
            return None
        exp = np.asarray(dense_to_numpy(owner.exp)).astype(np.int64)
        return quant.fake_quant(
            inner, owner.bits.value.data, exp, owner.rounding_mode, signed=owner.is_signed
        )
    return None


def write_host_fake_quant(g: Graph, op: FakeQuantOp) -> None:
    """A fake-quant of a host value that host ops read: its codes and back, in float32."""
    if constant_value(op.result) is not None:
        return  # (a constant: written where a host op reads it)
    x = _host(g, op, op.input)
    base = g.base(op.result)
    exp = np.asarray(dense_to_numpy(op.exp)).astype(np.int64)
    rank = len(tensor_shape(op.input))
    k = exp.reshape((1,) * (rank - exp.ndim) + exp.shape) if exp.ndim < rank else exp
    bits = op.bits.value.data
    codes = _quantize(g, x, base, bits, str(op.rounding_mode.value), k, op.is_signed)
    scale = np.ldexp(1.0, k) if bits == 1 else np.ldexp(1.0, -k)  # 1-bit: the code is the sign
    real = g.node("Mul", [codes, g.const(scale, np.float64, base + "_scale")], base + "_real")
    g.put(op.result, HOST_FORM, g.node("Cast", [real], base, to=F32))


def write_host_op(g: Graph, op: Operation) -> None:
    """An nf op on the host: the float ONNX writer's nodes for it alone, spliced in."""
    if constant_value(op.results[0]) is not None or isinstance(op, nf.ConstantOp):
        return  # a constant (read by the host ops that need it)
    runtime = [v for v in dict.fromkeys(op.operands) if constant_value(v) is None]
    block = Block(arg_types=[v.type for v in runtime])
    mapping: dict[SSAValue, SSAValue] = dict(zip(runtime, block.args))
    for v in dict.fromkeys(op.operands):
        if v not in mapping:
            data = constant_value(v)
            assert data is not None
            t = v.type
            assert isinstance(t, TensorType)
            shaped = data.astype(np.float32).reshape(t.get_shape())
            const = nf.ConstantOp(numpy_to_dense(shaped, t.get_element_type()))
            block.add_op(const)
            mapping[v] = const.result
    clone = op.clone(value_mapper=mapping)
    for key in ("nh.host", "nh.host_kind"):
        clone.attributes.pop(key, None)
    block.add_op(clone)
    block.add_op(ReturnOp(*clone.results))
    func = FuncOp(
        "main",
        FunctionType.from_lists([v.type for v in runtime], [r.type for r in clone.results]),
        Region(block),
    )
    try:
        model = export_onnx_model(ModuleOp([func]), "qdq")
    except OnnxExportError as e:
        raise refuse(op, f"runs on the host, and has no float ONNX form: {e}") from None
    _splice(g, op, model, [_host(g, op, v) for v in runtime])


def _splice(g: Graph, op: Operation, model: Any, inputs: list[str]) -> None:
    """Add ``model``'s nodes and initializers to ``g`` under fresh names, its inputs bound to
    ``inputs`` and its outputs the host forms of ``op``'s results."""
    graph = model.graph
    rename: dict[str, str] = {i.name: name for i, name in zip(graph.input, inputs)}
    prefix = g.base(op.results[0]) + "_host"
    for init in graph.initializer:
        new = g.fresh(f"{prefix}_{init.name}")
        rename[init.name] = new
        copy = g.onnx.TensorProto()
        copy.CopyFrom(init)
        copy.name = new
        g.initializers.append(copy)
    for node in graph.node:
        for name in node.output:
            if name not in rename:
                rename[name] = g.fresh(f"{prefix}_{name}")
        attrs = {a.name: g.helper.get_attribute_value(a) for a in node.attribute}
        g.nodes.append(
            g.helper.make_node(
                node.op_type,
                [rename.get(i, i) if i else "" for i in node.input],
                [rename[o] for o in node.output],
                name=g.fresh(f"{prefix}_{node.op_type}"),
                domain=node.domain,
                **attrs,
            )
        )
    for r, out in zip(op.results, graph.output):
        g.put(r, HOST_FORM, rename.get(out.name, out.name))


def host_writer(op: Operation) -> Writer | None:
    """The writer of a host-side op of a partitioned program (an nf op, or a fake-quant or
    constant the host keeps), or None for any other op."""
    if isinstance(op, FakeQuantOp):
        return write_host_fake_quant
    if op.name.startswith("nf."):
        return write_host_op
    return None


def host_output(g: Graph, value: SSAValue, name: str) -> tuple[Any, dict[str, Any]] | None:
    """A result computed on the host: a float32 graph output and its io record; None for an
    engine result."""
    forms = g.forms.get(value, {})
    if HOST_FORM not in forms:
        return None
    out = g.node("Identity", [forms[HOST_FORM]], name)
    dims: list[int | str] = [
        ("N" if i == 0 else f"d{i}") if d == DYNAMIC_INDEX else int(d)
        for i, d in enumerate(tensor_shape(value))
    ]
    info = g.helper.make_tensor_value_info(out, ELEM[np.dtype(np.float32)], dims)
    shape = [None if d == DYNAMIC_INDEX else d for d in tensor_shape(value)]
    return info, {"name": out, "type": "f32", "host": True, "shape": shape}


HOST: dict[type[Operation], Writer] = {nh.ToHostOp: write_to_host, nh.FromHostOp: write_from_host}
"""The boundary ops' writers (in :data:`.ops.OPS`)."""
