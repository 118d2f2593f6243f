"""Write an nh (integer) program as exact integer ONNX: standard ops, default domain, opset 21.

    nh module --export_model--> onnx.ModelProto (codes in, codes out) --onnxruntime--> codes

The graph's inputs and outputs are the nh function's arguments and results as codes (int8 for
signed codes of up to 8 bits, 1-bit codes as +-1; uint8 for unsigned ones; int16/uint16 up to
16 bits; int32 for accumulators). What the codes mean is recorded in the model's
``metadata_props``: ``nanoir.io`` is JSON with, per input and output, its name, element type
(``i8``, ``ui4``, ...), bits, signedness, layout and exponent(s) (the real value of code ``v``
is ``v * 2**-exp``, per channel along the layout's first ``C``), and for a quantized input the
``nq.bits``/``nq.exp``/``nq.rounding`` that turn floats into its codes. ``nanoir.nh`` holds the
nh program's MLIR text, from which :func:`nanoir.grammar.onnx.integer.importer.import_model`
reads the file back (and checks the graph against it).

Each nh op is written by its row of :data:`nanoir.grammar.onnx.integer.ops.OPS`, exactly, in
every rounding mode, on the fastest kernel whose exactness its static bounds prove (float32
convolutions and requantization on the codes, ``QLinearConv``, or integer kernels: see
:mod:`.products`). ``nanoir.kernels`` names the fused kernel the graph uses, when it does:
onnxruntime's uint8 x int8 kernels are exact only on some CPUs (the session checks).

Overflow: a program whose static bounds fit its types (what lower-to-hw writes by default) is
written as it runs. One whose bounds do not (a hand-written nh program or ``.ne``,
``lower-to-hw{allow_overflow=true}``, an ``nh.add`` of two ``i32`` values) is written with a
check rather than refused, as the NumPy executor runs it and refuses only the inputs that
overflow: the op is computed in int64 (a product summed in int64 from parts that each fit
int32), its codes outside the result's type are counted, and the counts are the graph output
``nanoir_checks`` (the ops named in the io record's ``checks``).
:func:`nanoir.grammar.onnx.integer.session.run_model` raises an ``ExecutionError`` when a count
is above 0 (``nanoir.run(..., backend="onnxruntime")`` then raises the NumPy executor's own
error); the check is part of the graph, so a file read from disk runs it too: onnxruntime never
returns a wrapped code. What has no exact form here is an
:class:`IntegerOnnxError` naming the op: an nh op without a row (one added to the dialect
after this writer, until its row is written: docs/ADDING_AN_OP.md), products of operands wider
than 16 bits, a
streamed program (its stream-plan attributes describe a step-by-step execution that ONNX has
no notion of; export the program before ``stream-plan``), an nf or nq op.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import tensor_shape
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.schema import main_function
from nanoir.grammar.onnx.exporter import OnnxExportError, _onnx, export_onnx_bytes
from nanoir.grammar.onnx.integer.graph import ELEM, Graph, IntegerOnnxError, natural_dtype
from nanoir.grammar.onnx.integer.host import host_output, host_writer
from nanoir.grammar.onnx.integer.ops import OPS
from nanoir.grammar.onnx.integer.session import FUSED_KERNELS, fused_kernel
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import SSAValue

OPSET = 21
IR_VERSION = 10
IO_KEY = "nanoir.io"
"""metadata_props key: JSON describing the inputs' and outputs' codes."""
PROGRAM_KEY = "nanoir.nh"
"""metadata_props key: the nh program's MLIR text (its presence marks an integer-flavour file)."""
KERNELS_KEY = "nanoir.kernels"
"""metadata_props key, present when the graph uses one of onnxruntime's fused kernels
(``"u8s8"``, ``"u8u8"``): its reader writes the same graph, a session checks the machine runs
them exactly."""
CHECK_OUTPUT = "nanoir_checks"
"""The graph output counting, per checked op (``checks`` in the io record), its codes outside
its type: a session raises on a count above 0 (the op's result would have wrapped)."""


def is_nh_program(module: ModuleOp) -> bool:
    """Whether ``module`` is an integer (nh) program: it has an nh op or an nh argument."""
    for op in module.walk():
        if op.name.startswith("nh."):
            return True
        if isinstance(op, FuncOp) and any(
            isinstance(t, TensorType) and isinstance(t.encoding, nh.FixedAttr)
            for t in op.function_type.inputs.data
        ):
            return True
    return False


def _streamed(func: FuncOp) -> str | None:
    """The first stream-plan attribute found, or None."""
    for key in func.attributes:
        if key.startswith("stream."):
            return key
    for d in func.arg_attrs.data if func.arg_attrs is not None else ():
        for key in d.data:
            if key.startswith("stream."):
                return key
    for op in func.body.walk():
        for key in op.attributes:
            if key.startswith("stream."):
                return key
    return None


def _describe(value: SSAValue, name: str, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    t = value.type
    assert isinstance(t, TensorType)
    fixed = nh.fixed_of(value)
    d: dict[str, Any] = {
        "name": name,
        "type": nh.type_text(value),
        "bits": nh.width_of(value),
        "signed": not nh.is_unsigned(value),
        "layout": fixed.layout.data,
        "exp": fixed.exp_list if fixed.is_per_channel else fixed.exp_list[0],
        "shape": [None if s == DYNAMIC_INDEX else s for s in t.get_shape()],
    }
    if attrs and "nq.bits" in attrs:
        exp = attrs["nq.exp"]
        codes = np.frombuffer(
            exp.data.data,
            dtype={8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}[
                exp.get_type().get_element_type().width.data
            ],
        )
        d["quantize"] = {
            "bits": attrs["nq.bits"].value.data,
            "exp": codes.astype(int).tolist(),
            "exp_shape": list(exp.get_type().get_shape()),
            "rounding": attrs["nq.rounding"].data.value,
        }
    return d


def _value_info(g: Graph, name: str, value: SSAValue) -> Any:
    dims: list[int | str] = [
        ("N" if i == 0 else f"d{i}") if d == DYNAMIC_INDEX else int(d)
        for i, d in enumerate(tensor_shape(value))
    ]
    return g.helper.make_tensor_value_info(name, ELEM[natural_dtype(value)], dims)


def _output(g: Graph, value: SSAValue, name: str) -> str:
    """``value`` in its exchange dtype under the graph output name ``name``."""
    dtype = natural_dtype(value)
    forms = g.forms.get(value, {})
    if "in" in forms:
        return g.node("Identity", [forms["in"]], name)
    if dtype == np.dtype(np.uint8) and "u8" in forms:
        return g.node("Identity", [forms["u8"]], name)
    if dtype == np.dtype(np.int8) and "i8" in forms:
        return g.node("Identity", [forms["i8"]], name)
    for form in ("f32", "f64"):
        if form in forms:  # integer-valued and within the dtype: exact
            return g.node("Cast", [forms[form]], name, to=ELEM[dtype])
    return g.node("Cast", [g.get(value, "i32")], name, to=ELEM[dtype])


def _program_text(module: ModuleOp, func: FuncOp) -> str:
    """The embedded program: the module, or the written function alone when it holds more
    (the graph is that one function; the reader refuses a program holding others)."""
    if len(module.body.block.ops) == 1:
        return str(module)
    return str(ModuleOp([func.clone()]))


def export_model(
    module: ModuleOp, *, program_text: str | None = None, fused: str | None = "auto"
) -> Any:
    """The ``onnx.ModelProto`` of an nh module (see the module docstring); passes
    ``onnx.checker.check_model(full_check=True)``; :class:`IntegerOnnxError` for what has no
    exact form. ``program_text`` is the embedded program's text when the caller has it (the
    reader does: printing a large program's constants takes longer than writing its graph).
    ``fused``: the fused kernel products may use (one of :data:`.session.FUSED_KERNELS`), None
    for none, ``"auto"`` for the fastest this machine's onnxruntime runs exactly
    (:func:`.session.fused_kernel`)."""
    onnx = _onnx()
    if not isinstance(module, ModuleOp):
        raise IntegerOnnxError(
            f"integer onnx export: expected a module, got {type(module).__name__}"
        )
    try:
        func = main_function(module)
    except ExportError as e:
        raise IntegerOnnxError(str(e).replace("nanoengine export", "integer onnx export")) from None
    key = _streamed(func)
    if key is not None:
        raise IntegerOnnxError(
            f"integer onnx export: @{func.sym_name.data} is a streamed program ({key}): ONNX "
            "runs whole tensors, not stream-plan steps; export the program before stream-plan"
        )
    if fused == "auto":
        fused = fused_kernel()
    elif fused is not None and fused not in FUSED_KERNELS:
        raise IntegerOnnxError(
            f"integer onnx export: fused={fused!r}: expected one of {FUSED_KERNELS}, None or 'auto'"
        )
    g = Graph(onnx, kernel=fused)
    block = func.body.block
    arg_attrs = [d.data for d in func.arg_attrs.data] if func.arg_attrs is not None else []
    inputs, io_in = [], []
    for i, arg in enumerate(block.args):
        if not isinstance(arg.type, TensorType) or not isinstance(arg.type.encoding, nh.FixedAttr):
            raise IntegerOnnxError(
                f"integer onnx export: argument {i} of @{func.sym_name.data} is not an nh "
                f"tensor ({arg.type}); the integer flavour writes nh programs (lower-to-hw)"
            )
        name = g.fresh(arg.name_hint or ("input" if i == 0 else f"input_{i}"))
        g.hints[arg] = name
        g.put(arg, "in", name)
        inputs.append(_value_info(g, name, arg))
        io_in.append(_describe(arg, name, arg_attrs[i] if i < len(arg_attrs) else None))
    results: list[SSAValue] = []
    for op in block.ops:
        if isinstance(op, ReturnOp):
            results = list(op.arguments)
            continue
        writer = OPS.get(type(op)) or host_writer(op)  # (host islands: see .host)
        if writer is None:
            what = (
                "has no integer ONNX form yet"
                if op.name.startswith("nh.")
                else "is not an nh op (the integer flavour writes nh programs: lower-to-hw first)"
            )
            raise IntegerOnnxError(f"integer onnx export: {op.name} {what}")
        for r in op.results:
            if r.name_hint:
                g.hints[r] = r.name_hint
        writer(g, op)
    outputs, io_out = [], []
    for i, value in enumerate(results):
        host = host_output(g, value, "output" if i == 0 else f"output_{i}")
        if host is not None:  # a result computed on the host: float32
            outputs.append(host[0])
            io_out.append(host[1])
            continue
        if not isinstance(value.type, TensorType) or not isinstance(
            value.type.encoding, nh.FixedAttr
        ):
            raise IntegerOnnxError(f"integer onnx export: result {i} is not an nh tensor")
        name = _output(g, value, "output" if i == 0 else f"output_{i}")
        outputs.append(_value_info(g, name, value))
        io_out.append(_describe(value, name))
    if program_text is None:
        program_text = _program_text(module, func)
    record: dict[str, Any] = {"inputs": io_in, "outputs": io_out}
    if g.checks:
        counts = [
            g.node("Unsqueeze", [n, g.const([0], np.int64)], "nanoir_check") for n, _ in g.checks
        ]
        joined = g.node("Concat", counts, CHECK_OUTPUT, axis=0) if len(counts) > 1 else None
        name = joined or g.node("Identity", counts, CHECK_OUTPUT)
        outputs.append(
            g.helper.make_tensor_value_info(name, ELEM[np.dtype(np.int64)], [len(counts)])
        )
        record["checks"] = [label for _, label in g.checks]
    props = {IO_KEY: json.dumps(record), PROGRAM_KEY: program_text}
    if g.used_kernel:
        props[KERNELS_KEY] = str(g.kernel)
    _casts_before_transposes(g, {o.name for o in outputs})
    graph = g.helper.make_graph(g.nodes, "main", inputs, outputs, g.initializers)
    model = g.helper.make_model(
        graph, opset_imports=[g.helper.make_opsetid("", OPSET)], producer_name="nanoir"
    )
    model.ir_version = IR_VERSION
    g.helper.set_model_props(model, props)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # a bug of this writer: say so rather than write a bad file
        raise IntegerOnnxError(
            f"integer onnx export: the written model fails onnx.checker: {e}"
        ) from e
    return model


def _casts_before_transposes(g: Graph, outputs: set[str]) -> None:
    """Rewrite each ``Cast`` of a ``Transpose``'s result as the ``Transpose`` of the ``Cast``
    (the same values: a cast is elementwise), dropping a ``Transpose`` nothing else reads.
    onnxruntime 1.32 crashes (a segmentation fault, no error) creating a session of
    ``Transpose`` (perm ``[1, 0, 2]`` or ``[1, 2, 0]``) then ``Cast`` then ``MatMul``: its
    MatmulTransposeFusion. The writer makes that pattern wherever a value with a transposed
    form is cast for a float product (a batch-first LSTM's output read by a linear layer);
    ``Cast`` then ``Transpose`` then ``MatMul`` opens and runs."""
    made = {out: node for node in g.nodes for out in node.output}
    nodes = []
    for node in g.nodes:
        t = made.get(node.input[0]) if node.op_type == "Cast" else None
        if t is None or t.op_type != "Transpose":
            nodes.append(node)
            continue
        cast = g.fresh(node.output[0] + "_pre")
        nodes.append(g.helper.make_node("Cast", [t.input[0]], [cast], g.fresh(node.name)))
        nodes[-1].attribute.extend(node.attribute)
        nodes.append(g.helper.make_node("Transpose", [cast], list(node.output), g.fresh(t.name)))
        nodes[-1].attribute.extend(t.attribute)
    read = set(outputs)
    for node in nodes:
        read.update(node.input)
        for a in node.attribute:  # a loop body reads outer values by name
            if a.type == a.GRAPH:
                read.update(i for n in a.g.node for i in n.input)
    g.nodes = [n for n in nodes if n.op_type != "Transpose" or any(o in read for o in n.output)]


def export_bytes(module: ModuleOp) -> bytes:
    """The serialized model of :func:`export_model`."""
    return bytes(export_model(module).SerializeToString())


FLAVORS = ("qdq", "nanoengine", "integer")
"""The ONNX flavours nanoir writes: QDQ and NanoEngine's for nf/nq programs, integer for nh."""


def export_any_flavor(module: ModuleOp, flavor: str | None = None) -> bytes:
    """ONNX bytes of ``module`` in ``flavor``; None picks ``integer`` for an nh program and
    ``qdq`` otherwise. ``qdq``/``nanoengine`` on an nh program, and ``integer`` on one that
    is not, are refused naming the flavour."""
    if flavor is not None and flavor not in FLAVORS:
        raise OnnxExportError(
            f"onnx export: unknown flavour {flavor!r} (known: {', '.join(FLAVORS)})"
        )
    integer = is_nh_program(module)
    chosen = flavor or ("integer" if integer else "qdq")
    if integer and chosen != "integer":
        raise OnnxExportError(
            f"onnx export: the {chosen} flavour writes nf/nq programs, and this is an integer "
            "(nh) program: write it with onnx_flavor='integer' (--emit=onnx-integer)"
        )
    if chosen == "integer":
        if not integer:
            raise IntegerOnnxError(
                "integer onnx export: the integer flavour writes nh programs, and this one has "
                "no nh op (lower-to-hw first, or write onnx_flavor='qdq')"
            )
        return export_bytes(module)
    return export_onnx_bytes(module, chosen)
